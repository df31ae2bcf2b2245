//! Disposable Postgres and Redis servers on loopback, for `cargo xtask ci`'s test step and `cargo xtask services`.
//!
//! [`start`] starts a server for each of `DATABASE_URL` and `REDIS_URL` that is unset or
//! empty and returns [`Services`]: the URLs to hand to the tests, and a guard whose `Drop`
//! stops those servers (`pg_ctl stop -m fast`, SIGTERM to redis-server) and removes their
//! temporary directory. Postgres runs from a fresh `initdb` with durability off, as the
//! `postgres` system user when xtask runs as root (Postgres refuses root); redis-server runs
//! without persistence. Both listen on 127.0.0.1 only, on ports found free at start.
//!
//! A watchdog, xtask itself as the hidden [`WATCHDOG_COMMAND`] in its own process group (so
//! Ctrl-C does not reach it), holds a pipe from xtask. When the pipe closes while the
//! directory still exists, xtask died without dropping the guard (Ctrl-C, SIGTERM, SIGKILL),
//! and the watchdog does the same clean-up. That is how `cargo xtask services` ends. Unix only.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process;
use crate::temp_dir::TempDir;

/// Per-command help text.
pub const HELP: &str = "\
Starts a disposable Postgres and a disposable redis-server on 127.0.0.1, prints
`export DATABASE_URL=...` and `export REDIS_URL=...` on stdout (status lines go to
stderr), and keeps both running until Ctrl-C or SIGTERM; then stops them and deletes
their data. A variable that is already set and not empty is used as it is, and nothing
is started for it. `cargo xtask ci` starts the same servers for its test step only.

Postgres: initdb, pg_ctl and postgres from PATH, else from the highest-versioned
/usr/lib/postgresql/*/bin; superuser `memdedup` (trust authentication), database
`memdedup`, fsync off. Run as root, it runs as the `postgres` system user (runuser).
Redis: redis-server from PATH, persistence off.
Debian: apt-get install postgresql redis-server (.ci/run does this).

Example:  cargo xtask services > /tmp/memdedup-services.env &
          . /tmp/memdedup-services.env";

/// The hidden command that runs the watchdog: `WATCHDOG_COMMAND DIR [PG_BIN [RUN_AS]]`.
pub const WATCHDOG_COMMAND: &str = "__services-watchdog";

const DATABASE_URL: &str = "DATABASE_URL";
const REDIS_URL: &str = "REDIS_URL";
/// The superuser `initdb` creates, and the database the URL names.
const PG_USER: &str = "memdedup";
const PG_DATABASE: &str = "memdedup";
/// The system user Postgres runs as when xtask runs as root (the Debian package creates it).
const PG_SYSTEM_USER: &str = "postgres";
const PG_INSTALL: &str = "install the Debian package postgresql (.ci/run does this)";
const REDIS_INSTALL: &str = "install the Debian package redis-server (.ci/run does this)";

/// Names inside the services directory.
const PG_DATA: &str = "pgdata";
const PG_LOG: &str = "postgres.log";
const REDIS_LOG: &str = "redis.log";
const REDIS_PID: &str = "redis.pid";

/// Ports tried when the one found free is taken before the server binds it.
const PORT_ATTEMPTS: u32 = 5;
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// The database and cache the tests use. Dropping it stops the servers [`start`] started
/// and removes their directory; servers named by the environment are never touched.
#[derive(Default)]
pub struct Services {
    /// `(variable, url)` for each server started here, none for one from the environment.
    env: Vec<(&'static str, String)>,
    redis: Option<Redis>,
    postgres: Option<Postgres>,
    dir: Option<TempDir>,
    watchdog: Option<Watchdog>,
}

impl Services {
    /// The variables to set for the tests: one per server started here.
    pub fn env(&self) -> &[(&'static str, String)] {
        &self.env
    }

    /// Fails if a server started here has exited.
    fn check_running(&mut self) -> Result<()> {
        if let Some(redis) = &mut self.redis
            && let Some(child) = &mut redis.child
            && let Some(status) = child.try_wait().context("checking on redis-server")?
        {
            // The log goes with the directory when `self` drops: quote it.
            let log = std::fs::read_to_string(redis.dir.join(REDIS_LOG)).unwrap_or_default();
            bail!("redis-server exited unexpectedly ({status}); the end of its log:\n{}", last_lines(&log, 20));
        }
        if let Some(pg) = &self.postgres
            && !pg.data().join("postmaster.pid").exists()
        {
            let log = std::fs::read_to_string(pg.dir.join(PG_LOG)).unwrap_or_default();
            bail!("postgres exited unexpectedly; the end of its log:\n{}", last_lines(&log, 20));
        }
        Ok(())
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        // The servers, then their directory; the watchdog last, so it finds nothing to do.
        let stopped = self.redis.is_some() || self.postgres.is_some();
        drop(self.redis.take());
        drop(self.postgres.take());
        drop(self.dir.take());
        drop(self.watchdog.take());
        if stopped {
            eprintln!("services: stopped the disposable servers");
        }
    }
}

/// Starts Postgres unless `DATABASE_URL` is set and Redis unless `REDIS_URL` is set (an
/// empty value counts as unset), printing one line per service to stderr.
pub fn start() -> Result<Services> {
    let want_postgres = unset(DATABASE_URL);
    let want_redis = unset(REDIS_URL);
    if !want_postgres {
        eprintln!("postgres: using {DATABASE_URL} from the environment");
    }
    if !want_redis {
        eprintln!("redis: using {REDIS_URL} from the environment");
    }
    let mut services = Services::default();
    if !want_postgres && !want_redis {
        return Ok(services);
    }
    // Find every program before starting anything.
    let pg_tools = if want_postgres { Some(PgTools::find()?) } else { None };
    let redis_server = if want_redis { Some(find_redis_server()?) } else { None };

    let dir = TempDir::new("memdedup-services")?;
    let dir_path = dir.path().to_path_buf();
    if dir_path.to_string_lossy().contains(['\'', ' ']) {
        bail!("the temporary directory {} holds a quote or a space, which pg_ctl -o cannot take", dir_path.display());
    }
    if let Some(run_as) = pg_tools.as_ref().and_then(|t| t.run_as.as_ref()) {
        process::output(Command::new("chown").arg(format!("{}:", run_as.user)).arg(&dir_path))?;
    }
    services.dir = Some(dir);
    services.watchdog = Some(Watchdog::spawn(&dir_path, pg_tools.as_ref())?);

    if let Some(tools) = pg_tools {
        let pg = services.postgres.insert(Postgres { tools, dir: dir_path.clone() });
        let port = pg.start()?;
        eprintln!("postgres: started on 127.0.0.1:{port} (disposable, data in {})", pg.data().display());
        services.env.push((DATABASE_URL, format!("postgres://{PG_USER}@127.0.0.1:{port}/{PG_DATABASE}")));
    }
    if let Some(server) = redis_server {
        let redis = services.redis.insert(Redis { server, dir: dir_path.clone(), child: None });
        let port = redis.start()?;
        eprintln!(
            "redis: started on 127.0.0.1:{port} (disposable, no persistence, log in {})",
            dir_path.join(REDIS_LOG).display()
        );
        services.env.push((REDIS_URL, format!("redis://127.0.0.1:{port}/")));
    }
    Ok(services)
}

/// `cargo xtask services`: starts the servers, prints `export` lines and waits until xtask
/// is interrupted (the watchdog then stops them) or a server exits.
pub fn run() -> Result<()> {
    let mut services = start()?;
    if services.env().is_empty() {
        eprintln!("services: nothing to start: {DATABASE_URL} and {REDIS_URL} are both set");
        return Ok(());
    }
    for (name, url) in services.env() {
        println!("export {name}={url}");
    }
    eprintln!("services: running until Ctrl-C or SIGTERM (xtask pid {})", std::process::id());
    loop {
        std::thread::sleep(Duration::from_secs(1));
        services.check_running()?;
    }
}

/// The hidden watchdog command: `DIR [PG_BIN [RUN_AS]]`. Waits for end of file on stdin;
/// if DIR still exists then, stops what runs in it and removes it.
pub fn watchdog(args: &[String]) -> Result<()> {
    let usage = || format!("usage: cargo xtask {WATCHDOG_COMMAND} DIR [PG_BIN [RUN_AS]]");
    let (dir, rest) = args.split_first().with_context(usage)?;
    let dir = PathBuf::from(dir);
    let pg_tools = match rest {
        [] => None,
        [bin] => Some(PgTools { bin: bin.into(), run_as: None }),
        [bin, user] => Some(PgTools { bin: bin.into(), run_as: Some(RunAs::find(user)?) }),
        _ => bail!("{}", usage()),
    };
    // Returns at end of file: xtask closed the pipe, or exited. Its stdin is all we read.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    if !dir.exists() {
        return Ok(());
    }
    // No eprintln!: it panics when stderr is gone (a closed terminal or pipe), and this
    // clean-up must run regardless.
    let say = |message: String| {
        let _ = writeln!(std::io::stderr(), "services: {message}");
    };
    say(format!("xtask exited; stopping its disposable servers and removing {}", dir.display()));
    // A server xtask was starting when it died gets time to write its pid file.
    std::thread::sleep(Duration::from_millis(500));
    if let Ok(text) = std::fs::read_to_string(dir.join(REDIS_PID))
        && let Ok(pid) = text.trim().parse::<u32>()
        && process_alive(pid)
        && is_redis_server(pid)
        && let Err(e) = terminate(pid, || !process_alive(pid))
    {
        say(format!("could not stop redis-server (pid {pid}): {e:#}"));
    }
    if let Some(tools) = &pg_tools
        && let Err(e) = stop_postgres(tools, &dir.join(PG_DATA))
    {
        say(format!("could not stop postgres: {e:#}"));
    }
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        say(format!("could not remove {}: {e}", dir.display()));
    }
    say("stopped the disposable servers".to_owned());
    Ok(())
}

fn unset(var: &str) -> bool {
    std::env::var_os(var).is_none_or(|v| v.is_empty())
}

/// Where the Postgres server programs are, and whom to run them as.
#[derive(Debug, Clone)]
struct PgTools {
    /// The directory holding `initdb`, `pg_ctl` and `postgres`.
    bin: PathBuf,
    /// Set when xtask runs as root.
    run_as: Option<RunAs>,
}

/// Running a program as another user with `runuser -u USER --`.
#[derive(Debug, Clone)]
struct RunAs {
    runuser: PathBuf,
    user: String,
}

impl RunAs {
    fn find(user: &str) -> Result<Self> {
        let runuser = find_program("runuser", &["/usr/sbin", "/sbin"]).with_context(|| {
            format!("runuser not found: it runs Postgres as the `{user}` user (Debian package util-linux)")
        })?;
        Ok(Self { runuser, user: user.to_owned() })
    }
}

impl PgTools {
    /// `initdb` from PATH (its real directory, through symlinks), else the highest-versioned
    /// `/usr/lib/postgresql/*/bin`; `pg_ctl` and `postgres` must sit next to it.
    fn find() -> Result<Self> {
        let initdb = find_program("initdb", &[])
            .and_then(|p| std::fs::canonicalize(p).ok())
            .or_else(|| debian_pg_bin().map(|bin| bin.join("initdb")))
            .with_context(|| format!("initdb not found on PATH or in /usr/lib/postgresql/*/bin: {PG_INSTALL}"))?;
        let bin = initdb.parent().context("initdb has no parent directory")?.to_path_buf();
        for program in ["pg_ctl", "postgres"] {
            if !is_executable(&bin.join(program)) {
                bail!("{program} not found next to {}: {PG_INSTALL}", initdb.display());
            }
        }
        let run_as = if is_root()? {
            if !process::succeeds(Command::new("id").args(["-u", PG_SYSTEM_USER])) {
                bail!(
                    "Postgres refuses to run as root and there is no `{PG_SYSTEM_USER}` system user to run it \
                     as: {PG_INSTALL}"
                );
            }
            Some(RunAs::find(PG_SYSTEM_USER)?)
        } else {
            None
        };
        Ok(Self { bin, run_as })
    }

    /// A command running `program` from [`Self::bin`], as [`Self::run_as`] if set, with
    /// stdin from /dev/null.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut cmd = match &self.run_as {
            Some(run_as) => {
                let mut cmd = Command::new(&run_as.runuser);
                cmd.args(["-u", &run_as.user, "--"]).arg(path);
                cmd
            }
            None => Command::new(path),
        };
        cmd.stdin(Stdio::null());
        cmd
    }
}

/// The `bin` directory of the highest Postgres version under /usr/lib/postgresql.
fn debian_pg_bin() -> Option<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let names = std::fs::read_dir(root)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| is_executable(&root.join(name).join("bin/initdb")));
    Some(root.join(highest_version(names)?).join("bin"))
}

/// The name that reads as the highest dotted version number (`9.6` < `10` < `15`); names
/// that are not versions are ignored.
fn highest_version(names: impl IntoIterator<Item = String>) -> Option<String> {
    names
        .into_iter()
        .filter_map(|name| {
            let version: Option<Vec<u32>> = name.split('.').map(|part| part.parse().ok()).collect();
            Some((version?, name))
        })
        .max()
        .map(|(_, name)| name)
}

/// A disposable Postgres cluster in `dir/pgdata`; dropping it stops the server if it runs.
struct Postgres {
    tools: PgTools,
    /// The services directory: the cluster, the log and the Unix socket live here.
    dir: PathBuf,
}

impl Postgres {
    fn data(&self) -> PathBuf {
        self.dir.join(PG_DATA)
    }

    /// initdb, `pg_ctl start` on a free port (another one if that port was taken
    /// meanwhile) and `createdb memdedup`; returns the port.
    fn start(&self) -> Result<u16> {
        let data = self.data();
        let log = self.dir.join(PG_LOG);
        let mut initdb = self.tools.command("initdb");
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", PG_USER, "--no-sync", "-E", "UTF8"])
            .current_dir(&self.dir);
        process::output(&mut initdb).context("postgres: initdb failed")?;
        for attempt in 1..=PORT_ATTEMPTS {
            let port = free_port()?;
            let logged_before = std::fs::metadata(&log).map_or(0, |m| m.len());
            let options = format!(
                "-k '{}' -p {port} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
                 -c full_page_writes=off -c max_connections=200",
                self.dir.display()
            );
            let mut pg_ctl = self.tools.command("pg_ctl");
            pg_ctl
                .args(["start", "-w", "-t", &START_TIMEOUT.as_secs().to_string(), "-D"])
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .arg("-o")
                .arg(options)
                .current_dir(&self.dir);
            if let Err(e) = process::output(&mut pg_ctl) {
                let this_attempt = log_since(&log, logged_before);
                if attempt < PORT_ATTEMPTS && port_taken(&this_attempt) {
                    continue;
                }
                return Err(e.context(format!(
                    "postgres did not start on 127.0.0.1:{port}; the end of {}:\n{}",
                    log.display(),
                    last_lines(&this_attempt, 20)
                )));
            }
            let createdb = self.tools.bin.join("createdb");
            let mut createdb = Command::new(if is_executable(&createdb) { createdb } else { "createdb".into() });
            createdb.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", PG_USER, PG_DATABASE]);
            process::output(&mut createdb).context("postgres: could not create the `memdedup` database")?;
            return Ok(port);
        }
        bail!("postgres: no free port after {PORT_ATTEMPTS} attempts")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Err(e) = stop_postgres(&self.tools, &self.data()) {
            eprintln!("warning: could not stop postgres in {}: {e:#}", self.dir.display());
        }
    }
}

/// `pg_ctl stop -m fast` when `data` has a running server (a `postmaster.pid`).
fn stop_postgres(tools: &PgTools, data: &Path) -> Result<()> {
    if !data.join("postmaster.pid").exists() {
        return Ok(());
    }
    let mut pg_ctl = tools.command("pg_ctl");
    pg_ctl.args(["stop", "-m", "fast", "-w", "-t", &STOP_TIMEOUT.as_secs().to_string(), "-D"]).arg(data);
    if let Some(dir) = data.parent() {
        pg_ctl.current_dir(dir);
    }
    process::output(&mut pg_ctl).map(drop)
}

/// A disposable redis-server, a child of xtask in its own process group; dropping it
/// stops the server.
struct Redis {
    server: PathBuf,
    /// The services directory: the log and the pid file live here.
    dir: PathBuf,
    child: Option<Child>,
}

/// How waiting for a freshly started redis-server ended.
enum Startup {
    Ready,
    Exited(ExitStatus),
    TimedOut,
}

impl Redis {
    /// Starts redis-server on a free port (another one if that port was taken meanwhile)
    /// and waits until it answers PING; returns the port.
    fn start(&mut self) -> Result<u16> {
        let log = self.dir.join(REDIS_LOG);
        for attempt in 1..=PORT_ATTEMPTS {
            let port = free_port()?;
            let log_file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
            let mut cmd = Command::new(&self.server);
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--daemonize", "no", "--dir"])
                .arg(&self.dir)
                .current_dir(&self.dir)
                .stdin(Stdio::null())
                .stdout(log_file.try_clone()?)
                .stderr(log_file)
                // Out of the terminal's process group: Ctrl-C goes to xtask, which stops it.
                .process_group(0);
            let line = process::describe(&cmd);
            let child = cmd.spawn().with_context(|| format!("could not start `{line}`"))?;
            let pid = child.id();
            let child = self.child.insert(child);
            let pid_file = self.dir.join(REDIS_PID);
            std::fs::write(&pid_file, format!("{pid}\n")).with_context(|| format!("writing {}", pid_file.display()))?;
            match wait_for_pong(port, child)? {
                Startup::Ready => return Ok(port),
                Startup::Exited(status) => {
                    self.child = None;
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    if attempt < PORT_ATTEMPTS && port_taken(&text) {
                        continue;
                    }
                    bail!(
                        "redis-server exited while starting on 127.0.0.1:{port} ({status}); the end of {}:\n{}",
                        log.display(),
                        last_lines(&text, 20)
                    );
                }
                Startup::TimedOut => {
                    bail!("redis-server did not answer PING on 127.0.0.1:{port} within {}s", START_TIMEOUT.as_secs())
                }
            }
        }
        bail!("redis: no free port after {PORT_ATTEMPTS} attempts")
    }

    /// SIGTERM (SIGKILL if it has not exited after [`STOP_TIMEOUT`]), then reaps it.
    fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        if child.try_wait()?.is_none() {
            terminate(child.id(), || !matches!(child.try_wait(), Ok(None)))?;
        }
        child.wait().context("waiting for redis-server to exit")?;
        Ok(())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("warning: could not stop redis-server: {e:#}");
        }
    }
}

/// Polls `127.0.0.1:port` with `PING` until it answers `+PONG`, `child` exits or
/// [`START_TIMEOUT`] passes.
fn wait_for_pong(port: u16, child: &mut Child) -> Result<Startup> {
    let deadline = Instant::now() + START_TIMEOUT;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().context("checking on redis-server")? {
            return Ok(Startup::Exited(status));
        }
        if ping(addr) {
            return Ok(Startup::Ready);
        }
        std::thread::sleep(POLL);
    }
    Ok(Startup::TimedOut)
}

/// Whether a Redis server at `addr` answers `PING` with `+PONG` (not `-LOADING`).
fn ping(addr: SocketAddr) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(b"PING\r\n")?;
        let mut reply = [0_u8; 64];
        let n = stream.read(&mut reply)?;
        Ok(reply[..n].starts_with(b"+PONG"))
    };
    attempt().unwrap_or(false)
}

fn find_redis_server() -> Result<PathBuf> {
    find_program("redis-server", &["/usr/sbin", "/usr/local/bin"])
        .with_context(|| format!("redis-server not found on PATH: {REDIS_INSTALL}"))
}

/// The watchdog process; dropping this closes its pipe and waits for it to exit.
struct Watchdog {
    child: Child,
}

impl Watchdog {
    fn spawn(dir: &Path, pg_tools: Option<&PgTools>) -> Result<Self> {
        let exe = std::env::current_exe().context("finding xtask's own executable to run the services watchdog")?;
        let mut cmd = Command::new(exe);
        cmd.arg(WATCHDOG_COMMAND).arg(dir);
        if let Some(tools) = pg_tools {
            cmd.arg(&tools.bin);
            if let Some(run_as) = &tools.run_as {
                cmd.arg(&run_as.user);
            }
        }
        // Its own process group, so the Ctrl-C that stops xtask does not stop the watchdog.
        cmd.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::inherit()).process_group(0);
        let child = cmd.spawn().context("could not start the services watchdog (xtask itself)")?;
        Ok(Self { child })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port on 127.0.0.1")?;
    Ok(listener.local_addr().context("finding a free port on 127.0.0.1")?.port())
}

/// Whether a server log says its port was taken.
fn port_taken(log: &str) -> bool {
    log.contains("Address already in use")
}

/// What `log` gained after its first `offset` bytes.
fn log_since(log: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut file) = File::open(log) {
        let _ = std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(offset));
        let _ = file.read_to_end(&mut text);
    }
    String::from_utf8_lossy(&text).into_owned()
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Sends SIGTERM to `pid`, waits up to [`STOP_TIMEOUT`] for `exited`, then sends SIGKILL.
/// Signals go through the shell's `kill` builtin: std has no `kill(2)`, and procps may be
/// missing.
fn terminate(pid: u32, mut exited: impl FnMut() -> bool) -> Result<()> {
    signal(pid, "TERM")?;
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if exited() {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
    signal(pid, "KILL")?;
    bail!("pid {pid} ignored SIGTERM for {}s; sent SIGKILL", STOP_TIMEOUT.as_secs())
}

fn signal(pid: u32, name: &str) -> Result<()> {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "kill -s \"$1\" \"$2\"", "sh", name, &pid.to_string()]);
    process::output(&mut cmd).map(drop)
}

/// Whether `pid` runs (a zombie does not count: nothing may reap it in a container).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may hold spaces.
        Ok(stat) => {
            stat.rsplit_once(')').is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
        }
        Err(_) if Path::new("/proc/self/stat").exists() => false,
        Err(_) => process::succeeds(Command::new("sh").args(["-c", "kill -0 \"$1\"", "sh", &pid.to_string()])),
    }
}

/// Whether `pid` is a redis-server, as far as /proc tells (yes where there is no /proc).
/// Guards the watchdog against a pid reused since the pid file was written.
fn is_redis_server(pid: u32) -> bool {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => String::from_utf8_lossy(&cmdline).contains("redis-server"),
        Err(_) => !Path::new("/proc/self/cmdline").exists(),
    }
}

fn is_root() -> Result<bool> {
    Ok(process::output(Command::new("id").arg("-u"))?.trim() == "0")
}

/// `name` from PATH, else from one of `extra_dirs`.
fn find_program(name: &str, extra_dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra_dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn highest_postgres_version_is_numeric() {
        assert_eq!(highest_version(names(&["9.6", "15", "10", "README"])).as_deref(), Some("15"));
        assert_eq!(highest_version(names(&["9.6", "9.10"])).as_deref(), Some("9.10"));
        assert_eq!(highest_version(names(&["main", ""])), None);
    }

    #[test]
    fn port_taken_is_read_from_either_log() {
        assert!(port_taken("LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use"));
        assert!(port_taken(
            "# Warning: Could not create server TCP listening socket 127.0.0.1:6379: bind: Address already in use"
        ));
        assert!(!port_taken("FATAL:  data directory \"/x\" has invalid permissions"));
    }

    #[test]
    fn last_lines_keeps_the_end() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(last_lines("a", 5), "a");
    }

    #[test]
    fn this_process_is_alive() {
        assert!(process_alive(std::process::id()));
    }

    #[test]
    fn free_port_is_not_zero() {
        assert_ne!(free_port().unwrap(), 0);
    }
}

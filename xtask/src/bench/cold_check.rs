//! `memdedup check` as a hook runs it: a fresh process per text, semantic path (the text
//! is new, so the model embeds it), timed as a whole with its peak memory; first doing
//! the work locally, then in client mode against a running `memdedup serve`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process;

/// Memories stored before the timed checks.
const STORED: usize = 200;
/// Cold checks: a third local with the default (learned) judge, a third local with
/// `--judge cosine`, a third in client mode, each third's first one untimed (the first
/// warm-up also builds the model's graph cache).
const RUNS: usize = 64;

/// Stores [`STORED`] memories through one `capture`, then times cold `check` processes
/// of texts that are not stored (each embeds): half locally, half in client mode.
pub fn run(bin: &Path, root: &Path, scratch: &Path, gnu_time: &str) -> Result<()> {
    let db = scratch.join("cold-check.db");
    let jsonl = super::compare::memories_jsonl(STORED + RUNS + 1, 2027)?;
    let texts: Vec<String> = jsonl
        .lines()
        .map(|line| -> Result<String> {
            let value: serde_json::Value = serde_json::from_str(line)?;
            value["text"].as_str().map(str::to_owned).context("a generated memory has no text")
        })
        .collect::<Result<_>>()?;
    let (stored, probes) = texts.split_at(STORED);
    let candidates: String = stored.iter().map(|t| format!("{}\n", serde_json::json!({"content": t}))).collect();
    let input = scratch.join("cold-check-stored.jsonl");
    std::fs::write(&input, candidates).with_context(|| format!("writing {}", input.display()))?;
    let mut capture = Command::new(bin);
    capture.arg("--db").arg(&db).args(["capture", "-q"]).arg(&input).current_dir(root).stdin(Stdio::null());
    let line = process::describe(&capture);
    let out = capture.output().with_context(|| format!("could not start `{line}`"))?;
    if !out.status.success() {
        bail!("`{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
    }

    let (local, rest) = probes.split_at(probes.len() / 3);
    let (cosine, client) = rest.split_at(rest.len() / 2);
    println!(
        "\n==> cold `memdedup check` (semantic path: a new text; the default learned judge reads the nearest \
         memories above its floor, as many as its pair_judge.json says), {} fresh processes, {STORED} stored",
        local.len()
    );
    let db_args = ["--db".as_ref(), db.as_os_str()];
    time_checks(bin, root, scratch, gnu_time, local, &How { global: &db_args, check: &[], env: &[] })?;
    println!("\n==> the same with `--judge cosine` (no pair model), {} fresh processes", cosine.len());
    let how = How { global: &db_args, check: &["--judge", "cosine"], env: &[] };
    time_checks(bin, root, scratch, gnu_time, cosine, &how)?;

    let server = Server::start(bin, root, &db)?;
    println!(
        "\n==> the same in client mode: `memdedup serve` running at {}, MEMDEDUP_SERVER_URL set, {} fresh processes",
        server.url,
        client.len()
    );
    // The server answers the first check: it must not have fallen back to local work.
    let mut probe = Command::new(bin);
    probe.args([
        "-v",
        "check",
        "--",
        "a first check of a new sentence, which the server must answer itself, not local work",
    ]);
    probe.env("MEMDEDUP_SERVER_URL", &server.url).current_dir(root).stdin(Stdio::null());
    let out = probe.output().context("could not start a client-mode check")?;
    let logs = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || !logs.contains("checked it") {
        bail!("a client-mode check did not go through the server ({}):\n{}", out.status, logs.trim_end());
    }
    let how = How { global: &[], check: &[], env: &[("MEMDEDUP_SERVER_URL", &server.url)] };
    time_checks(bin, root, scratch, gnu_time, client, &how)
}

/// How a timed check runs: global options, options of `check`, environment.
struct How<'a> {
    global: &'a [&'a std::ffi::OsStr],
    check: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
}

/// Times one fresh `memdedup GLOBAL check CHECK -q TEXT` per text (see [`How`]) (the first one untimed) and
/// prints the p50 / p90 wall time and the largest peak RSS.
fn time_checks(bin: &Path, root: &Path, scratch: &Path, gnu_time: &str, texts: &[String], how: &How<'_>) -> Result<()> {
    let timing = scratch.join("cold-check-time.txt");
    let mut walls = Vec::new();
    let mut peak_kib = 0;
    for (i, text) in texts.iter().enumerate() {
        let mut cmd = Command::new(gnu_time);
        cmd.args(["-f", "%e %M", "-o"])
            .arg(&timing)
            .arg(bin)
            .args(how.global)
            .arg("check")
            .args(how.check)
            .args(["-q", "--"])
            .arg(text)
            .envs(how.env.iter().copied())
            .current_dir(root)
            .stdin(Stdio::null());
        let line = process::describe(&cmd);
        let started = Instant::now();
        let out = cmd.output().with_context(|| format!("could not start `{line}`"))?;
        let wall = started.elapsed().as_secs_f64() * 1e3;
        if !out.status.success() {
            bail!("`{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
        }
        let measured = std::fs::read_to_string(&timing).with_context(|| format!("reading {}", timing.display()))?;
        let (_, kib) = super::parse_time_output(&measured)
            .with_context(|| format!("unexpected {gnu_time} output: {measured:?}"))?;
        if i == 0 {
            println!("  warm-up (builds the optimised-graph cache if missing): {wall:.0} ms");
            continue;
        }
        walls.push(wall);
        peak_kib = peak_kib.max(kib);
    }
    walls.sort_by(f64::total_cmp);
    let at = |q: f64| walls[((walls.len() - 1) as f64 * q).round() as usize];
    println!(
        "  wall p50 {:.0} ms, p90 {:.0} ms, min {:.0} ms; peak RSS {:.0} MiB",
        at(0.5),
        at(0.9),
        walls[0],
        peak_kib as f64 / 1024.0
    );
    Ok(())
}

/// A `memdedup serve` on a free loopback port, stopped when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    /// How long the server may take to load the model and listen.
    const READY_WITHIN: Duration = Duration::from_secs(60);

    fn start(bin: &Path, root: &Path, db: &Path) -> Result<Server> {
        let mut cmd = Command::new(bin);
        cmd.arg("--db").arg(db).args(["serve", "--addr", "127.0.0.1:0"]);
        cmd.current_dir(root).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let line = process::describe(&cmd);
        let mut child = cmd.spawn().with_context(|| format!("could not start `{line}`"))?;
        let stderr = child.stderr.take().context("the server's stderr is not piped")?;
        let (sender, receiver) = std::sync::mpsc::channel();
        // Reads the server's stderr to its end, so that it never blocks on a full pipe.
        std::thread::spawn(move || {
            for text in BufReader::new(stderr).lines().map_while(std::io::Result::ok) {
                if let Some(rest) = text.strip_prefix("memdedup: listening on ") {
                    let url = rest.split_whitespace().next().unwrap_or_default().to_owned();
                    let _ = sender.send(url);
                }
            }
        });
        let mut server = Server { child, url: String::new() };
        server.url = receiver
            .recv_timeout(Self::READY_WITHIN)
            .with_context(|| format!("`{line}` did not say where it listens within {:?}", Self::READY_WITHIN))?;
        Ok(server)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

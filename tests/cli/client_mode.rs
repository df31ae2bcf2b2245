//! Client mode: `check`, `add`, `capture` and `hook pre-compact` ask a running
//! `memdedup serve` and print what local work prints; a server that is down or slow is
//! left for local work within the timeout, as is one without the memory routes, and a
//! refused token is an error.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::{Value, json};

use crate::hook::{assistant, input, user};
use crate::serve::Server;
use crate::support::{json, memdedup, require_model, run_json, text};

const TOKEN: &str = "client-mode-token-0123";
/// A decision, and the same decision limited in time: another claim at cosine 0.95 with the
/// local model, which reaches the `decisions` threshold (0.92), so cosine alone would
/// refuse it and a learned judge that reads the limit holds it for review.
const DECISION: &str = "We decided to use PostgreSQL as the primary database for the billing service.";
const DECISION_LIMITED: &str =
    "We decided to use PostgreSQL as the primary database for the billing service until the end of the year.";
const UNRELATED: &str = "Run the integration tests against a disposable database before every release.";
const LESSON: &str = "Turns out the flaky test depended on the local timezone of the runner.";

/// `memdedup -v ARGS…` on `db` (through `DATABASE_URL`, since `--db` turns client mode
/// off), asking `server` when given; stdout, stderr and the exit code.
fn run(db: &str, server: Option<&str>, envs: &[(&str, &str)], args: &[&str], stdin: &str) -> (String, String, i32) {
    let mut cmd: Command = memdedup();
    cmd.env("DATABASE_URL", db);
    if let Some(url) = server {
        cmd.env("MEMDEDUP_SERVER_URL", url);
    }
    let out = cmd.envs(envs.iter().copied()).arg("-v").args(args).write_stdin(stdin).output().expect("memdedup runs");
    (text(&out.stdout), text(&out.stderr), out.status.code().unwrap_or(-1))
}

/// `value` without the check timings, which differ from run to run, and with its
/// fractional numbers rounded to 5 decimals.
fn without_timings(mut value: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(members) => {
                members.remove("check_duration_ms");
                members.remove("check_duration_us");
                members.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            // The server's session prepacks its weights and a short-lived command's does
            // not, so a cosine may differ in its last f32 digit.
            Value::Number(n) if n.is_f64() => {
                let rounded = (n.as_f64().unwrap_or_default() * 1e5).round() / 1e5;
                *value = json!(rounded);
            }
            _ => {}
        }
    }
    strip(&mut value);
    value
}

/// The commands of the comparison, each with what the server's log line must say.
fn steps(dir: &Path) -> Vec<(Vec<String>, String, &'static str)> {
    let candidates = [
        json!({"content": DECISION, "namespace": "decisions"}),
        json!({"content": UNRELATED, "namespace": "patterns", "kind": "pattern"}),
        json!({"content": DECISION_LIMITED, "namespace": "decisions"}),
    ];
    let candidates: String = candidates.iter().map(|c| format!("{c}\n")).collect();
    let transcript = dir.join("transcript.jsonl");
    let lines = [user(&format!("Quick recap. {DECISION} Fine?")), assistant(&format!("Yes.\n\n{LESSON}"))];
    std::fs::write(&transcript, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).expect("writable");
    let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    vec![
        (args(&["add", DECISION, "-n", "decisions", "--json"]), String::new(), "checked and stored it"),
        (args(&["check", DECISION_LIMITED, "-n", "decisions", "--json"]), String::new(), "checked it"),
        (args(&["check", DECISION_LIMITED, "-n", "decisions"]), String::new(), "checked it"),
        (args(&["check", UNRELATED, "-n", "decisions", "--json"]), String::new(), "checked it"),
        (args(&["add", DECISION_LIMITED, "-n", "decisions"]), String::new(), "checked and stored it"),
        (args(&["capture", "--json"]), candidates.clone(), "checked and stored it"),
        (args(&["capture"]), candidates, "checked and stored it"),
        (args(&["hook", "pre-compact"]), input(&transcript), "checked and stored it"),
    ]
}

#[test]
fn client_mode_check_add_capture_and_hook_print_what_local_work_prints() {
    require_model();
    let dir = tempfile::tempdir().expect("temporary directory");
    let served = dir.path().join("served.db").display().to_string();
    let local = dir.path().join("local.db").display().to_string();
    let config = dir.path().join("memdedup.toml");
    // The server may still be loading the model when it first listens: a long timeout,
    // since this is about equal answers, not speed.
    let text = format!("[client]\ntimeout_ms = 30000\n\n[[server.tokens]]\ntoken = \"{TOKEN}\"\n");
    std::fs::write(&config, text).expect("write memdedup.toml");
    let config = config.display().to_string();
    let server = Server::start(&["--config", &config, "--db", &served, "serve", "--addr", "127.0.0.1:0"], &[]);
    let url = server.url("");
    let token = [("MEMDEDUP_API_TOKEN", TOKEN), ("MEMDEDUP_CONFIG", config.as_str())];

    for (args, stdin, said) in steps(dir.path()) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (remote_out, remote_err, remote_code) = run(&served, Some(&url), &token, &args, &stdin);
        let (local_out, local_err, local_code) = run(&local, None, &token[1..], &args, &stdin);
        assert_eq!((remote_code, local_code), (0, 0), "{args:?}:\n{remote_err}\n{local_err}");
        assert!(
            remote_err.contains(&format!("server {url} {said}")),
            "{args:?}: the server did not answer:\n{remote_err}"
        );
        assert!(!remote_err.contains("locally"), "{args:?}: fell back:\n{remote_err}");
        assert!(!local_err.contains("server"), "{args:?}: asked a server:\n{local_err}");
        match (serde_json::from_str::<Value>(&remote_out), serde_json::from_str::<Value>(&local_out)) {
            (Ok(remote), Ok(local)) => assert_eq!(without_timings(remote), without_timings(local), "{args:?}"),
            _ => assert_eq!(remote_out, local_out, "{args:?}"),
        }
    }
    // The server's store holds what the local one does.
    let listed = |db: &str| {
        let list = run_json(db, &["list", "--limit", "0"]);
        list.as_array().expect("an array").iter().map(|m| (m["urn"].clone(), m["content"].clone())).collect::<Vec<_>>()
    };
    assert_eq!(listed(&served), listed(&local));
    // The decision, the pattern, the lesson, and the limited decision: the default (learned)
    // judge reads another claim at a cosine the threshold reaches, so it is stored and held
    // for review, not refused.
    assert_eq!(listed(&served).len(), 4, "{:?}", listed(&served));

    // A refused token is an error, not a silent switch to the local store.
    let (out, err, code) = run(&served, Some(&url), &[("MEMDEDUP_API_TOKEN", "wrong-token")], &["check", LESSON], "");
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains(&format!("error: server {url} refused the request (401)")), "{err}");
    // `--db` asks for local work.
    let (_, err, code) = run(&served, Some(&url), &[], &["--db", &local, "check", LESSON], "");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("--db is given: working locally"), "{err}");
}

/// A port nothing listens on.
fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    drop(listener);
    url
}

#[test]
fn client_mode_works_locally_when_the_server_is_down() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("memory.db").display().to_string();
    let url = closed_port();
    let (out, err, code) = run(&db, Some(&url), &[], &["add", "Use tabs in Makefiles.", "--json"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(out.as_bytes())["urn"], "memdedup://global/default/1", "{out}");
    assert!(err.contains(&format!("server {url} cannot be reached")) && err.contains("; adding locally"), "{err}");
    let (out, err, code) = run(&db, Some(&url), &[], &["check", "Use tabs in Makefiles."], "");
    assert_eq!(
        (code, out.as_str()),
        (0, "duplicate of memdedup://global/default/1: exact match (same normalised text)\n")
    );
    assert!(err.contains("; checking locally"), "{err}");
    // Empty turns client mode off.
    let (_, err, code) = run(&db, Some(""), &[], &["check", "Use tabs in Makefiles."], "");
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("server"), "{err}");
}

#[test]
fn client_mode_leaves_a_silent_server_within_the_timeout() {
    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            let mut reader = stream.try_clone().expect("clone the stream");
            std::thread::spawn(move || {
                let mut sink = [0u8; 1024];
                while reader.read(&mut sink).is_ok_and(|n| n > 0) {}
            });
            held.push(stream);
        }
    });
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("memory.db").display().to_string();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, format!("[client]\nurl = \"{url}\"\ntimeout_ms = 300\n")).expect("write memdedup.toml");
    let config = config.display().to_string();

    let started = Instant::now();
    let (out, err, code) = run(&db, None, &[], &["--config", &config, "check", "Use tabs in Makefiles."], "");
    let took = started.elapsed();
    assert_eq!((code, out.as_str()), (0, "unique in global/default\n"), "{err}");
    assert!(err.contains(&format!("server {url} did not answer within 300 ms; checking locally")), "{err}");
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "took {took:?}");

    // The server is left at the first candidate: one wait, the rest done locally.
    let candidates = "{\"content\":\"Use tabs in Makefiles.\"}\n{\"content\":\"Indent YAML with two spaces.\"}\n";
    let started = Instant::now();
    let (out, err, code) = run(&db, None, &[], &["--config", &config, "capture", "--json"], candidates);
    let took = started.elapsed();
    assert_eq!(code, 0, "{err}");
    let results = json(out.as_bytes())["results"].clone();
    assert_eq!(results.as_array().map(Vec::len), Some(2), "{out}");
    assert_eq!(err.matches("did not answer within 300 ms; adding locally").count(), 1, "{err}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[test]
fn client_mode_works_locally_when_the_server_lacks_the_memory_routes() {
    // Answers every request as a server without the routes would: 404 with a JSON error.
    let body = r#"{"error":"no such route","code":"not_found"}"#;
    let (url, _) = fake_server(json_reply("404 Not Found", body));
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("memory.db").display().to_string();
    let (out, err, code) = run(&db, Some(&url), &[], &["add", "Use tabs in Makefiles.", "--json"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(out.as_bytes())["urn"], "memdedup://global/default/1", "{out}");
    assert!(
        err.contains(&format!("server {url} answered /v1/memory/add (404): no such route; adding locally")),
        "{err}"
    );
    let (out, err, code) = run(&db, Some(&url), &[], &["check", "Use tabs in Makefiles."], "");
    assert_eq!(
        (code, out.as_str()),
        (0, "duplicate of memdedup://global/default/1: exact match (same normalised text)\n"),
        "{err}"
    );
    assert!(err.contains("answered /v1/memory/check (404): no such route; checking locally"), "{err}");
}

/// An HTTP/1.1 reply with `status` and the JSON `body`, closing the connection.
fn json_reply(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A server on a free loopback port that reads each request (head and body) and answers
/// it with `reply`; returns its URL and the count of requests it answered.
fn fake_server(reply: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let reply = std::sync::Arc::new(reply);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let (reply, counted) = (reply.clone(), counted.clone());
            std::thread::spawn(move || {
                use std::io::Write;
                // Read the request head and its body (Content-Length), then answer.
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while let Ok(n @ 1..) = stream.read(&mut buffer) {
                    request.extend_from_slice(&buffer[..n]);
                    let text = String::from_utf8_lossy(&request);
                    let Some(head_end) = text.find("\r\n\r\n") else { continue };
                    let length = text[..head_end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if request.len() >= head_end + 4 + length {
                        break;
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(reply.as_bytes());
            });
        }
    });
    (url, hits)
}

#[test]
fn client_mode_follows_no_redirect_and_works_locally() {
    use std::sync::atomic::Ordering;
    // Where a redirect would send the request: it must never be asked.
    let (elsewhere, asked) = fake_server("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}".into());
    let (url, _) = fake_server(format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: {elsewhere}/v1/memory/add\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    ));
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("memory.db").display().to_string();
    let (out, err, code) = run(&db, Some(&url), &[], &["add", "Use tabs in Makefiles.", "--json"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(out.as_bytes())["urn"], "memdedup://global/default/1", "stored locally: {out}");
    assert!(
        err.contains(&format!("server {url} answered /v1/memory/add (307)")) && err.contains("adding locally"),
        "{err}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the redirect was not followed");
}

#[test]
fn client_mode_reads_no_reply_over_a_mebibyte_and_works_locally() {
    let body = format!("{{\"error\":\"{}\"}}", "x".repeat(2 << 20));
    let (url, _) = fake_server(json_reply("500 Internal Server Error", &body));
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("memory.db").display().to_string();
    let (out, err, code) = run(&db, Some(&url), &[], &["check", "Use tabs in Makefiles."], "");
    assert_eq!((code, out.as_str()), (0, "unique in global/default\n"), "{err}");
    assert!(
        err.contains(
            "answered /v1/memory/check with more than 1048576 bytes (client.max_reply_bytes); checking locally"
        ),
        "{err}"
    );
}

/// Defect 4: the reply cap is a setting (`[client] max_reply_bytes`).
#[test]
fn defect_4_client_mode_reply_cap_is_configurable() {
    let body = format!("{{\"error\":\"{}\"}}", "x".repeat(4096));
    let (url, _) = fake_server(json_reply("500 Internal Server Error", &body));
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("memory.db").display().to_string();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, "[dedup]\njudge = \"cosine\"\n\n[client]\nmax_reply_bytes = 2048\n").expect("config");
    let config = config.display().to_string();
    let (out, err, code) =
        run(&db, Some(&url), &[("MEMDEDUP_CONFIG", config.as_str())], &["check", "Use tabs in Makefiles."], "");
    assert_eq!((code, out.as_str()), (0, "unique in global/default\n"), "{err}");
    assert!(err.contains("with more than 2048 bytes (client.max_reply_bytes); checking locally"), "{err}");
}

#[test]
fn client_mode_prints_a_server_message_without_control_characters() {
    let body = r#"{"error":"bad\u001b[31m news\u0007"}"#;
    let (url, _) = fake_server(json_reply("500 Internal Server Error", body));
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("memory.db").display().to_string();
    let (_, err, code) = run(&db, Some(&url), &[], &["check", "Use tabs in Makefiles."], "");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("(500): bad[31m news; checking locally"), "{err:?}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
}

//! Malformed HTTP bodies against one `memdedup serve`: never a 5xx, and every refusal is
//! the JSON error with a message.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;

use crate::bad_input::{Syntax, mutate, run_corpus, show};
use crate::support::{memdedup, require_model};

/// What `memdedup serve` prints on stderr once it accepts connections.
const LISTENING: &str = "memdedup: listening on http://";
/// How long the server may take to load the model and bind.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// The routes that read a JSON body, with a valid body each; `{fact}` stands for the id
/// of a fact the test stores first (nodes `n_1` and `n_2` are stored first too).
const ROUTES: [(&str, &str, &str); 7] = [
    (
        "POST",
        "/v1/nodes/check-similar",
        r#"{"title":"Avoid weekend trading","content":"Weekend trading is risky due to low volume and slippage","subtype":"custom:lesson"}"#,
    ),
    (
        "POST",
        "/v1/nodes",
        r#"{"type":"concept","subtype":"custom:lesson","content_title":"Never trade weekends","content_body":"Low volume weekends increase slippage risk"}"#,
    ),
    ("POST", "/v1/facts", r#"{"content":"Prefers concise answers","category":"preference","confidence":0.9}"#),
    (
        "PUT",
        "/v1/memory/profile",
        r#"{"user":{"workContext":{"summary":"Builds trading agents"},"topOfMind":{"summary":"Weekend risk"}},"history":{"recentMonths":{"summary":"Moved from Python to Rust"}}}"#,
    ),
    (
        "PATCH",
        "/v1/nodes/n_2",
        r#"{"state_lifecycle":"ACTIVE","content_body":"Risk one percent of equity per trade","metadata":{"source":"review"}}"#,
    ),
    ("POST", "/v1/edges", r#"{"source_id":"n_2","target_id":"n_1","type":"relates_to"}"#),
    ("PATCH", "/v1/facts/{fact}", r#"{"confidence":0.95,"category":"knowledge"}"#),
];

/// A `memdedup serve` on a free loopback port over a temporary store; killed on drop.
pub(crate) struct Server {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Server {
    pub(crate) fn start() -> Server {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut child = memdedup()
            .env_remove("MEMDEDUP_API_TOKEN")
            .arg("--db")
            .arg(dir.path().join("serve.db"))
            .args(["serve", "--addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("memdedup serve starts");
        let pipe = child.stderr.take().expect("stderr is piped");
        let (lines, received) = mpsc::channel::<String>();
        // Keeps reading so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let _ = lines.send(line);
            }
        });
        loop {
            match received.recv_timeout(STARTUP_TIMEOUT) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(LISTENING) {
                        let addr = rest.split_whitespace().next().unwrap_or_default().to_owned();
                        return Server { child, addr, _dir: dir };
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("memdedup serve printed no listening line: {e}");
                }
            }
        }
    }

    /// Sends one request with a JSON content type; returns the status and the raw body.
    pub(crate) fn request(&self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.addr).expect("the server accepts connections");
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.addr,
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        // A server may answer (413) and close before it has read a large body.
        let _ = stream.write_all(body);
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        let response = String::from_utf8_lossy(&response).into_owned();
        let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        (status, body)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn bad_http_bodies_never_get_a_5xx() {
    require_model();
    let server = Server::start();
    // What the edit routes edit: two nodes and a fact.
    for (title, body) in
        [("Never trade weekends", "Low volume raises slippage"), ("Size by volatility", "Risk one percent")]
    {
        let node = format!(
            r#"{{"type":"concept","subtype":"custom:lesson","content_title":"{title}","content_body":"{body}"}}"#
        );
        let (status, reply) = server.request("POST", "/v1/nodes", node.as_bytes());
        assert_eq!(status, 201, "storing a node to edit: {reply}");
    }
    let (status, reply) = server.request("POST", "/v1/facts", ROUTES[2].2.as_bytes());
    assert_eq!(status, 201, "storing a fact to edit: {reply}");
    let fact: serde_json::Value = serde_json::from_str(&reply).expect("the fact reply is JSON");
    let fact = fact["fact"]["id"].as_str().expect("the stored fact's id").to_owned();
    run_corpus("HTTP bodies", 15, 210, |mutation, case_seed| {
        let (method, path, valid) = ROUTES[(case_seed % ROUTES.len() as u64) as usize];
        let path = &path.replace("{fact}", &fact);
        let input = mutate(valid.as_bytes(), Syntax::Json, mutation, case_seed);
        let (status, body) = server.request(method, path, &input);
        let what = format!("{mutation:?} {method} {path}\nbody: {}", show(&input));
        prop_assert!(status != 0, "{}: no HTTP response", what);
        prop_assert!(status < 500, "{}: status {} {}", what, status, body);
        if status >= 400 {
            let error: serde_json::Value = serde_json::from_str(&body).map_err(|e| {
                TestCaseError::fail(format!("{what}: status {status} with a body that is not JSON ({e}): {body}"))
            })?;
            let message = error["error"].as_str().unwrap_or_default();
            prop_assert!(!message.is_empty(), "{}: status {} without an error message: {}", what, status, body);
        }
        Ok(status < 400)
    });
}

//! The documented clients against a real server: seed 001's Python client verbatim and
//! every curl example of docs/HTTP.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::support::{require_model, shows, sqlite_db};

/// Seed 001 §4's `NousClient.check_similar`, verbatim, in a minimal client.
const PYTHON_CLIENT: &str = r#"
import json
import sys

import requests


class NousClient:
    def __init__(self, base_url: str):
        self.base_url = base_url.rstrip("/")
        self._session = requests.Session()

    def _url(self, path: str) -> str:
        return f"{self.base_url}/v1{path}"

    def check_similar(
        self,
        content: str,
        title: str,
        subtype: str,
        limit: int = 5,
    ) -> dict:
        """Check if similar nodes exist before storing.

        Compares content embedding against existing nodes of the same subtype.
        Returns similarity matches with recommended actions based on thresholds:
          - duplicate (>= 0.95 cosine): near-identical content exists
          - connect (0.90-0.95 cosine): similar content, should link

        Used by _store_memory_impl() for lesson and curiosity dedup.
        """
        resp = self._session.post(
            self._url("/nodes/check-similar"),
            json={
                "content": content,
                "title": title,
                "subtype": subtype,
                "limit": limit,
            },
        )
        resp.raise_for_status()
        return resp.json()


def main() -> None:
    base_url, title, content = sys.argv[1:4]
    client = NousClient(base_url)
    out = {
        "same": client.check_similar(content, title, "custom:lesson"),
        "other_subtype": client.check_similar(content, title, "custom:curiosity"),
        "unrelated": client.check_similar(
            "Customer invoices must be archived for seven years to satisfy the tax law.",
            "Invoice retention",
            "custom:lesson",
            limit=3,
        ),
    }
    try:
        client.check_similar(content, "", "custom:lesson")
        out["missing_title"] = None
    except requests.HTTPError as error:
        out["missing_title"] = {"status": error.response.status_code, "body": error.response.json()}
    print(json.dumps(out))


main()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_check_similar_against_server() {
    require_model();
    let (dir, db) = sqlite_db();
    let server = Server::start(&["--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let http = client();
    let (title, body) = ("Never trade weekends", "Low volume weekends increase slippage risk");
    let (status, created) = call(http.post(server.url("/v1/nodes")).json(&lesson_body(title, body, "default"))).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("an id").to_owned();

    let script = dir.path().join("nous_client.py");
    std::fs::write(&script, PYTHON_CLIENT).expect("write the Python client");
    let output =
        Command::new("python3").arg(&script).args([server.base_url.as_str(), title, body]).output().unwrap_or_else(
            |e| panic!("this test needs python3 with requests (apt-get install python3-requests): {e}"),
        );
    assert!(
        output.status.success(),
        "the Python client failed (python3 with requests is needed: apt-get install python3-requests):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result = crate::support::json(&output.stdout);

    let same = &result["same"];
    assert_eq!(same["recommendation"], "duplicate_found", "{result}");
    let matches = same["matches"].as_array().expect("matches is a list");
    assert_eq!(matches.len(), 1, "{result}");
    assert_eq!(
        crate::support::keys(&matches[0]),
        crate::support::key_set(&["node_id", "title", "similarity", "action", "lifecycle"])
    );
    assert_eq!(matches[0]["node_id"], id.as_str());
    assert_eq!(matches[0]["title"], title);
    assert_eq!(matches[0]["action"], "duplicate");
    assert_eq!(matches[0]["lifecycle"], "ACTIVE");
    let similarity = matches[0]["similarity"].as_f64().expect("a number");
    assert!((0.9999..=1.0).contains(&similarity), "{result}");
    assert_eq!(crate::support::keys(same), crate::support::key_set(&["matches", "recommendation"]));

    for key in ["other_subtype", "unrelated"] {
        assert_eq!(result[key], json!({"matches": [], "recommendation": "unique"}), "{key}: {result}");
    }
    assert_eq!(result["missing_title"]["status"], 400, "{result}");
    assert_eq!(result["missing_title"]["body"]["error"], "content, title, and subtype are required", "{result}");
    let (status, _) = server.stop("TERM");
    assert!(status.success());
}

/// docs/HTTP.md of the workspace.
fn http_doc_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/HTTP.md")
}

/// The fenced code blocks of `markdown`: (info string, contents).
fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => open = Some((info.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some((_, contents)), None) => {
                contents.push_str(line);
                contents.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "docs/HTTP.md has an unclosed code fence");
    blocks
}

/// The shell commands of a block, with backslash continuations joined.
fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        if line.trim_start().starts_with('#') && current.is_empty() {
            continue;
        }
        match line.trim_end().strip_suffix('\\') {
            Some(start) => {
                current.push_str(start);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// One curl call of the examples: method, path (without the query) and its flags.
#[derive(Debug)]
struct CurlCall {
    command: String,
    method: String,
    path: String,
    fails_on_http_errors: bool,
}

/// The curl calls of one command line (`A=$(curl …)`, `curl … | grep …` included).
fn curl_calls(command: &str) -> Vec<CurlCall> {
    let mut calls = Vec::new();
    for (start, _) in command.match_indices("curl ") {
        let rest = &command[start + "curl ".len()..];
        let args: Vec<&str> = rest.split_whitespace().take_while(|t| !matches!(*t, "|" | "&&" | "||" | ";")).collect();
        let mut method = None;
        let mut sends_data = false;
        let mut fails = false;
        let mut url = None;
        for (i, arg) in args.iter().enumerate() {
            let bare = arg.trim_matches(|c| matches!(c, '"' | '\''));
            if *arg == "-X" || *arg == "--request" {
                method = args.get(i + 1).map(|m| m.trim_matches(|c| matches!(c, '"' | '\'')).to_owned());
            } else if matches!(*arg, "-d" | "--data" | "--data-raw" | "--data-binary" | "--json") {
                sends_data = true;
            } else if matches!(*arg, "--fail" | "--fail-with-body") {
                fails = true;
            } else if arg.starts_with('-') && !arg.starts_with("--") && arg.chars().skip(1).all(char::is_alphabetic) {
                fails |= arg.contains('f');
            } else if let Some(path) = bare.strip_prefix(DOCS_BASE_URL) {
                url = Some(path.trim_end_matches(')').split('?').next().unwrap_or_default().to_owned());
            }
        }
        let method = method.unwrap_or_else(|| if sends_data { "POST" } else { "GET" }.to_owned());
        calls.push(CurlCall {
            command: command.trim().to_owned(),
            method: method.to_uppercase(),
            path: url.unwrap_or_default(),
            fails_on_http_errors: fails,
        });
    }
    calls
}

/// Whether `path` (`/v1/nodes/n_1`, `/v1/facts/$FACT`) is an instance of `template`
/// (`/v1/nodes/{id}`).
fn path_matches(template: &str, path: &str) -> bool {
    let (template, path): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    template.len() == path.len()
        && template.iter().zip(&path).all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}') && !p.is_empty()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_http_curl_examples_run() {
    require_model();
    let doc = http_doc_path();
    let markdown = std::fs::read_to_string(&doc).unwrap_or_else(|e| {
        panic!(
            "docs/HTTP.md must exist and document every route with runnable curl examples in ```sh blocks \
             ({}: {e})",
            doc.display()
        )
    });
    let blocks = fenced_blocks(&markdown);
    for (info, contents) in &blocks {
        assert!(
            info == "sh" || !contents.contains("curl "),
            "a curl example in a ```{info} block is never run; use ```sh:\n{contents}"
        );
    }
    let examples: Vec<&String> =
        blocks.iter().filter(|(info, c)| info == "sh" && c.contains("curl")).map(|(_, c)| c).collect();
    assert!(!examples.is_empty(), "docs/HTTP.md has no ```sh block with curl");

    let calls: Vec<CurlCall> = examples.iter().flat_map(|block| commands(block)).flat_map(|c| curl_calls(&c)).collect();
    let without_fail: Vec<&str> =
        calls.iter().filter(|c| !c.fails_on_http_errors).map(|c| c.command.as_str()).collect();
    assert!(
        without_fail.is_empty(),
        "every curl example needs -f or --fail-with-body so an HTTP error fails it:\n{}",
        without_fail.join("\n")
    );

    let (_dir, db) = sqlite_db();
    let server = Server::start(&["--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    for (index, block) in examples.iter().enumerate() {
        let script = block.replace(DOCS_BASE_URL, &server.base_url);
        let expect_error = block.contains("# expect: 4xx");
        let assert = assert_cmd::Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .current_dir(std::env::temp_dir())
            .timeout(Duration::from_secs(60))
            .assert();
        let output = assert.get_output();
        let report = format!(
            "example {} of docs/HTTP.md exited with {}:\n{block}\nstdout:\n{}\nstderr:\n{}",
            index + 1,
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        // The replies the example shows (`# {…}` or `# 201 {…}` lines) are what it printed.
        let shown: String = block
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .map(|l| {
                l.split_once(' ')
                    .filter(|(code, _)| code.len() == 3 && code.parse::<u16>().is_ok())
                    .map_or(l, |(_, rest)| rest)
            })
            .filter(|l| l.starts_with('{') || l.starts_with('['))
            .collect::<Vec<_>>()
            .join("\n");
        if let Err(piece) = shows(&String::from_utf8_lossy(&output.stdout), &shown) {
            panic!("{report}\nthe reply it shows differs from what it printed at {piece:?}");
        }
        if expect_error {
            // curl's exit code for an HTTP status >= 400; a 5xx is never the expected error.
            assert_eq!(output.status.code(), Some(22), "{report}");
            let body = String::from_utf8_lossy(&output.stdout);
            assert!(!body.contains("\"code\":\"internal\"") && !body.contains("\"code\":\"unavailable\""), "{report}");
        } else {
            assert!(output.status.success(), "{report}");
        }
    }

    println!(
        "docs/HTTP.md: {} examples with {} curl calls ran, {} of them expected to fail",
        examples.len(),
        calls.len(),
        examples.iter().filter(|b| b.contains("# expect: 4xx")).count()
    );

    let http = client();
    let (status, openapi) = call(http.get(server.url("/v1/openapi.json"))).await;
    assert_eq!(status, 200);
    let paths = openapi["paths"].as_object().expect("the OpenAPI document has paths");
    let mut missing = Vec::new();
    for (template, operations) in paths {
        let operations = operations.as_object().expect("a path item is an object");
        for method in operations.keys().filter(|m| matches!(m.as_str(), "get" | "post" | "put" | "patch" | "delete")) {
            let method = method.to_uppercase();
            if !calls.iter().any(|c| c.method == method && path_matches(template, &c.path)) {
                missing.push(format!("{method} {template}"));
            }
        }
    }
    assert!(missing.is_empty(), "routes of /v1/openapi.json without a curl example in docs/HTTP.md: {missing:?}");
    let (status, stderr) = server.stop("TERM");
    assert!(status.success(), "{stderr}");
}

#[test]
fn curl_calls_are_parsed_from_the_examples() {
    let calls = curl_calls(
        "FACT=$(curl -fsS -X POST http://127.0.0.1:3100/v1/facts -H 'Content-Type: application/json' -d '{}' | grep -o x)",
    );
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].method.as_str(), calls[0].path.as_str(), calls[0].fails_on_http_errors),
        ("POST", "/v1/facts", true)
    );
    let calls = curl_calls("curl -sS 'http://127.0.0.1:3100/v1/nodes?namespace=default' | head -n1");
    assert_eq!(
        (calls[0].method.as_str(), calls[0].path.as_str(), calls[0].fails_on_http_errors),
        ("GET", "/v1/nodes", false)
    );
    let calls = curl_calls("curl -sS --fail-with-body -X DELETE \"http://127.0.0.1:3100/v1/facts/$FACT\"");
    assert!(calls[0].fails_on_http_errors);
    assert!(path_matches("/v1/facts/{id}", &calls[0].path));
    assert!(!path_matches("/v1/nodes", "/v1/nodes/n_1"));
    assert_eq!(commands("# a comment\ncurl -f \\\n  http://x\necho\n"), vec!["curl -f    http://x", "echo"]);
}

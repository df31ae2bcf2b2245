//! Long texts under concurrent load against one `memdedup serve`: a text at the size limit
//! asks a bounded amount of work of the model, and short requests sent meanwhile are
//! answered first rather than queued behind it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::serve_bodies::Server;
use crate::support::require_model;

/// The server's default `max_text_bytes` (64 KiB), less room for the JSON around it.
const LONG_TEXT_BYTES: usize = 60 << 10;

/// A text of about `bytes` bytes of varied English, different for each `seed`.
fn long_text(bytes: usize, seed: usize) -> String {
    let subjects = ["the replica", "the cache", "the ledger", "the queue", "the index", "the gateway"];
    let verbs = ["drains", "rebuilds", "pauses", "checks", "rotates", "compacts"];
    let mut text = String::with_capacity(bytes + 80);
    let mut i = seed;
    while text.len() < bytes {
        let (s, v) = (subjects[i % subjects.len()], verbs[(i / 7 + seed) % verbs.len()]);
        text.push_str(&format!("In step {i} {s} {v} before the nightly job of shard {} starts. ", i % 13));
        i += 1;
    }
    text
}

fn check_body(content: &str) -> String {
    serde_json::json!({"title": "Runbook", "content": content, "subtype": "custom:lesson"}).to_string()
}

/// Defect 6: four checks at the size limit run at once while short checks keep coming;
/// every short check is answered before the long ones are all done, and every request
/// gets a 200.
#[test]
fn defect_6_short_checks_are_not_queued_behind_long_texts() {
    require_model();
    let server = Arc::new(Server::start());
    // Warm the model so the first long request does not also pay the load.
    let (status, reply) =
        server.request("POST", "/v1/nodes/check-similar", check_body("Warm up the model.").as_bytes());
    assert_eq!(status, 200, "{reply}");
    let long_done = Arc::new(AtomicUsize::new(0));
    let longs: Vec<_> = (0..4)
        .map(|seed| {
            let (server, long_done) = (server.clone(), long_done.clone());
            std::thread::spawn(move || {
                let body = check_body(&long_text(LONG_TEXT_BYTES, seed * 1000));
                let (status, reply) = server.request("POST", "/v1/nodes/check-similar", body.as_bytes());
                long_done.fetch_add(1, Ordering::SeqCst);
                (status, reply)
            })
        })
        .collect();
    // Short checks, one after another, while the long ones run.
    let mut answered_before_the_longs = 0;
    for i in 0..3 {
        let body = check_body(&format!("Rotate the API keys of service {i} every quarter."));
        let (status, reply) = server.request("POST", "/v1/nodes/check-similar", body.as_bytes());
        assert_eq!(status, 200, "short check {i}: {reply}");
        if long_done.load(Ordering::SeqCst) < 4 {
            answered_before_the_longs += 1;
        }
    }
    for long in longs {
        let (status, reply) = long.join().expect("the long request thread");
        assert_eq!(status, 200, "a long check: {}", reply.chars().take(300).collect::<String>());
    }
    assert_eq!(answered_before_the_longs, 3, "short checks waited for the long texts");
}

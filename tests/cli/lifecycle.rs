//! `memdedup edit`, `forget`, `history` and `undo --change` on SQLite and Postgres, with the
//! real model: an edit that duplicates another memory is refused with the memory named and
//! changes nothing; every change is in the history and undone from it.

use serde_json::Value;

use crate::support::{PgDatabase, memdedup, require_model, run_json, sqlite_db, text};

fn run(db: &str, args: &[&str]) -> (i32, String, String) {
    let out = memdedup().args(["--db", db]).args(args).output().expect("runs");
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn live_texts(db: &str) -> Vec<String> {
    let listed = run_json(db, &["list", "--limit", "0"]);
    listed.as_array().expect("an array").iter().map(|m| m["content"].as_str().expect("text").to_owned()).collect()
}

fn lifecycle(db: &str) {
    let keys = run_json(db, &["add", "-n", "lessons", "Rotate API keys every 90 days in production"]);
    let keys = keys["stored"].as_i64().expect("stored").to_string();
    let review = run_json(db, &["add", "-n", "lessons", "Review every database migration before merging it"]);
    let review = review["stored"].as_i64().expect("stored").to_string();

    // An edit into a paraphrase of the other memory: refused, the duplicate named, nothing written.
    let (code, stdout, stderr) = run(db, &["edit", &review, "Production API keys are rotated every 90 days"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("the new text duplicates memory {keys} (memdedup://global/lessons/{keys}")),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("memory {review} is unchanged")), "{stderr}");
    let history = run_json(db, &["history", &review]);
    assert_eq!(history["events"], Value::Array(vec![]), "{history}");

    // A real edit: recorded, searchable by its new text, undone back to the old one.
    let (code, stdout, stderr) =
        run(db, &["edit", &review, "Have someone review each schema migration before it lands"]);
    assert_eq!(code, 0, "{stderr}");
    let change =
        stdout.split("undo --change ").nth(1).and_then(|s| s.split('`').next()).expect("an undo hint").to_owned();
    let history = run_json(db, &["history", &review]);
    let event = &history["events"][0];
    assert_eq!(
        (event["event"].as_str(), event["action"].as_str(), event["source"].as_str()),
        (Some("change"), Some("edited"), Some("cli"))
    );
    assert_eq!(event["before"], "Review every database migration before merging it");
    let found = run_json(db, &["search", "who reviews schema migrations", "-n", "lessons", "--limit", "1"]);
    assert_eq!(found["results"][0]["id"].as_i64().map(|id| id.to_string()), Some(review.clone()), "{found}");
    let (code, stdout, stderr) = run(db, &["undo", "--change", &change]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("Review every database migration before merging it"), "{stdout}");
    let (code, _, stderr) = run(db, &["undo", "--change", &change]);
    assert_eq!(code, 1);
    assert!(stderr.contains(&format!("cannot undo change {change}")), "{stderr}");

    // Forget: gone from listings and search, back on undo.
    let forgotten = run_json(db, &["forget", &keys]);
    assert_eq!(forgotten["status"], "forgotten");
    let change = forgotten["change"].as_i64().expect("a change id").to_string();
    assert_eq!(live_texts(db), ["Review every database migration before merging it"]);
    let (code, _, stderr) = run(db, &["forget", &keys]);
    assert_eq!(code, 1);
    assert!(stderr.contains(&format!("memory {keys} is not live")), "{stderr}");
    let (code, _, stderr) = run(db, &["edit", &keys, "Rotate keys monthly"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("is not live"), "{stderr}");
    let (code, stdout, _) = run(db, &["history", &keys]);
    assert_eq!(code, 0);
    assert!(stdout.contains(&format!("forgotten [undo: memdedup undo --change {change}]")), "{stdout}");
    run_json(db, &["undo", "--change", &change]);
    assert_eq!(live_texts(db).len(), 2);
    let (_, stdout, _) = run(db, &["history", &keys]);
    assert!(stdout.contains("forgotten [undone by change") && stdout.contains("restored"), "{stdout}");

    // Bad input: clear errors, nothing changed.
    let (code, _, stderr) = run(db, &["edit", "999", "whatever text"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no memory with id 999"), "{stderr}");
    let (code, _, stderr) = run(db, &["undo", "--change", "abc"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("`abc` is not a change id"), "{stderr}");
    let (code, _, stderr) = run(db, &["undo", "--change", "999"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no change with id 999"), "{stderr}");
    let (code, _, stderr) = run(db, &["edit", &review, "  "]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(live_texts(db).len(), 2);
}

#[test]
fn edit_forget_history_and_undo_on_sqlite() {
    require_model();
    let (_dir, db) = sqlite_db();
    lifecycle(&db);
}

#[test]
fn edit_forget_history_and_undo_on_postgres() {
    require_model();
    let database = PgDatabase::create_blocking();
    lifecycle(&database.url);
}

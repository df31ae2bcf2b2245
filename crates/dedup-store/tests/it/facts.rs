//! The fact memory (seed 002): one test per store scenario, plus scope isolation, rejected
//! input, profiles and concurrent writers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use chrono::{Duration as ChronoDuration, Utc};
use dedup_core::{ContentHash, FactCategory, FactPolicy, MemoryProfile, ProfileSection};
use dedup_store::{Error, Fact, FactOutcome, FactUpdate, MAX_CONTENT_BYTES, MAX_SOURCE_BYTES, NewFact, Scope, Store};
use tokio::task::JoinSet;

use crate::support::scope;

fn default_scope() -> Scope {
    scope("global", "default")
}

fn new_fact(scope: &Scope, content: &str, category: FactCategory, confidence: f64) -> NewFact {
    NewFact::new(scope.clone(), content, category, confidence)
}

/// Adds a fact under the default policy, failing unless it is stored.
async fn added(store: &Store, scope: &Scope, content: &str, confidence: f64) -> anyhow::Result<Fact> {
    added_with(store, new_fact(scope, content, FactCategory::Knowledge, confidence), &FactPolicy::default()).await
}

async fn added_with(store: &Store, fact: NewFact, policy: &FactPolicy) -> anyhow::Result<Fact> {
    let content = fact.content.clone();
    match store.add_fact(fact, policy).await? {
        FactOutcome::Added { fact, evicted } if evicted.is_empty() => Ok(fact),
        other => bail!("expected {content:?} to be added without evictions, got {other:?}"),
    }
}

fn contents(facts: &[Fact]) -> Vec<&str> {
    facts.iter().map(|f| f.content.as_str()).collect()
}

fn is_fact_id(id: &str) -> bool {
    id.strip_prefix("fact_")
        .is_some_and(|hex| hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// Events recorded by a [`Recorder`]: level, message and the other fields, as text.
type Events = Arc<Mutex<Vec<(tracing::Level, String, BTreeMap<String, String>)>>>;

/// A tracing subscriber that keeps every event, for asserting on logs.
struct Recorder {
    events: Events,
}

struct FieldVisitor<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for FieldVisitor<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut FieldVisitor(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        if let Ok(mut events) = self.events.lock() {
            events.push((*event.metadata().level(), message, fields));
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Records the events of this thread (where the test body runs) until the guard drops.
fn record_events() -> (Events, tracing::subscriber::DefaultGuard) {
    let events = Events::default();
    let guard = tracing::subscriber::set_default(Recorder { events: Arc::clone(&events) });
    (events, guard)
}

/// The fields of the one info event with `message`; fails if there is not exactly one.
fn info_event(events: &Events, message: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let events = events.lock().map_err(|_| anyhow::anyhow!("recorder poisoned"))?;
    let found: Vec<_> = events.iter().filter(|(level, m, _)| *level == tracing::Level::INFO && m == message).collect();
    match found.as_slice() {
        [(_, _, fields)] => Ok(fields.clone()),
        _ => bail!("expected one info event {message:?}, got {events:?}"),
    }
}

/// No recorded event mentions `text` in its message or fields.
fn no_event_mentions(events: &Events, text: &str) -> anyhow::Result<()> {
    let events = events.lock().map_err(|_| anyhow::anyhow!("recorder poisoned"))?;
    for (_, message, fields) in events.iter() {
        if message.contains(text) || fields.values().any(|v| v.contains(text)) {
            bail!("a log event carries the fact's text: {message} {fields:?}");
        }
    }
    Ok(())
}

backend_tests! {
    async fn scenario_create_fact(db) {
        let store = db.open().await?;
        let s = default_scope();
        let before = Utc::now() - ChronoDuration::seconds(1);
        let outcome = store
            .add_fact(
                new_fact(&s, "  Prefers Rust für Backends 🚀 ", FactCategory::Preference, 0.9).with_source("thread-42"),
                &FactPolicy::default(),
            )
            .await?;
        let after = Utc::now() + ChronoDuration::seconds(1);
        let FactOutcome::Added { fact, evicted } = outcome else { bail!("expected an add, got {outcome:?}") };
        assert!(evicted.is_empty());
        assert!(is_fact_id(&fact.id), "{}", fact.id);
        assert_eq!(fact.scope, s);
        assert_eq!(fact.content, "  Prefers Rust für Backends 🚀 ", "content is stored exactly as given");
        assert_eq!(fact.category, FactCategory::Preference);
        assert_eq!(fact.confidence, 0.9);
        assert_eq!(fact.source.as_deref(), Some("thread-42"));
        assert_eq!(fact.created_at, fact.updated_at);
        assert!(before <= fact.created_at && fact.created_at <= after, "{}", fact.created_at);

        // Persisted: what a fresh handle reads is what add_fact returned.
        store.close().await;
        let again = db.open().await?;
        assert_eq!(again.get_fact(&fact.id).await?.as_ref(), Some(&fact));
        assert_eq!(again.list_facts(&s).await?, vec![fact.clone()]);

        // ISO-8601 UTC timestamps under the seed's camelCase names.
        let json = serde_json::to_value(&fact)?;
        let created = json["createdAt"].as_str().context("createdAt is a string")?;
        assert!(created.ends_with('Z') && created.contains('T'), "{created}");
        assert_eq!(chrono::DateTime::parse_from_rfc3339(created)?, fact.created_at);
        assert_eq!(json["updatedAt"], json["createdAt"]);
        assert_eq!(json["category"], "preference");
        assert_eq!(json["scope"], serde_json::json!({"domain": "global", "namespace": "default"}));

        // Ids are unique.
        let mut ids = vec![fact.id.clone()];
        for i in 0..20 {
            ids.push(added(&again, &s, &format!("fact number {i}"), 0.7).await?.id);
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 21);
        Ok(())
    }

    async fn scenario_delete_fact_by_id(db) {
        let store = db.open().await?;
        let s = default_scope();
        let keep = added(&store, &s, "Lives in Lisbon", 0.8).await?;
        let gone = added(&store, &s, "Works at Acme", 0.9).await?;
        store.delete_fact(&gone.id).await?;
        assert_eq!(store.get_fact(&gone.id).await?, None);
        assert_eq!(store.list_facts(&s).await?, vec![keep.clone()]);
        store.close().await;
        let again = db.open().await?;
        assert_eq!(again.list_facts(&s).await?, vec![keep]);
        // The content may be added again.
        added(&again, &s, "works at acme", 0.9).await?;
        Ok(())
    }

    async fn scenario_delete_non_existent_fact(db) {
        let store = db.open().await?;
        let s = default_scope();
        let fact = added(&store, &s, "Has a dog", 0.8).await?;
        for id in ["fact_00000000", "fact_ZZZZZZZZ", "nonsense", "", "fact_1234\0abc"] {
            let error = store.delete_fact(id).await.expect_err("unknown ids cannot be deleted");
            assert!(matches!(&error, Error::FactNotFound(unknown) if unknown == id), "{id:?}: {error}");
        }
        let error = store.delete_fact("fact_00000000").await.expect_err("unknown");
        assert_eq!(error.to_string(), "no fact with id \"fact_00000000\"");
        assert!(!error.is_unavailable());
        store.delete_fact(&fact.id).await?;
        assert!(matches!(store.delete_fact(&fact.id).await, Err(Error::FactNotFound(_))), "deleting twice fails");
        Ok(())
    }

    async fn scenario_update_fact(db) {
        let store = db.open().await?;
        let s = default_scope();
        let original = store
            .add_fact(new_fact(&s, "Uses vim", FactCategory::Behavior, 0.6).with_source("t1"), &FactPolicy::default())
            .await?
            .added()
            .cloned()
            .context("added")?;
        let other = added(&store, &s, "Uses a standing desk", 0.7).await?;

        // Only the provided fields change; createdAt never does.
        let confident =
            store.update_fact(&original.id, FactUpdate { confidence: Some(0.95), ..FactUpdate::default() }).await?;
        assert_eq!(confident.confidence, 0.95);
        assert_eq!((confident.content.as_str(), confident.category), ("Uses vim", FactCategory::Behavior));
        assert_eq!(confident.source.as_deref(), Some("t1"));
        assert_eq!(confident.created_at, original.created_at);
        assert!(confident.updated_at > original.updated_at);

        let rewritten = store
            .update_fact(
                &original.id,
                FactUpdate {
                    content: Some("Uses neovim".to_owned()),
                    category: Some(FactCategory::Preference),
                    confidence: None,
                },
            )
            .await?;
        assert_eq!(
            (rewritten.content.as_str(), rewritten.category, rewritten.confidence),
            ("Uses neovim", FactCategory::Preference, 0.95)
        );
        assert_eq!(rewritten.created_at, original.created_at);
        assert!(rewritten.updated_at >= confident.updated_at);
        // Persisted, and the old content's key is free again while the new one is taken.
        assert_eq!(store.get_fact(&original.id).await?.as_ref(), Some(&rewritten));
        assert!(matches!(
            store.add_fact(new_fact(&s, "USES NEOVIM", FactCategory::Goal, 0.9), &FactPolicy::default()).await?,
            FactOutcome::Duplicate { existing } if existing.id == original.id
        ));
        added(&store, &s, "uses VIM", 0.9).await?;

        // A change of case of its own content is fine; another fact's content is a conflict.
        let recased = store
            .update_fact(&original.id, FactUpdate { content: Some("USES NEOVIM".to_owned()), ..FactUpdate::default() })
            .await?;
        assert_eq!(recased.content, "USES NEOVIM");
        let conflict = store
            .update_fact(
                &original.id,
                FactUpdate { content: Some("uses a STANDING desk".to_owned()), ..FactUpdate::default() },
            )
            .await
            .expect_err("the content is taken");
        assert!(matches!(&conflict, Error::Conflict { reason } if reason.contains(&other.id)), "{conflict}");
        assert_eq!(store.get_fact(&original.id).await?.as_ref(), Some(&recased), "a failed update changes nothing");

        // An empty update changes nothing, not even updatedAt.
        assert_eq!(store.update_fact(&original.id, FactUpdate::default()).await?, recased);

        for id in ["fact_00000000", "nope"] {
            let error = store
                .update_fact(id, FactUpdate { confidence: Some(0.7), ..FactUpdate::default() })
                .await
                .expect_err("unknown id");
            assert!(matches!(error, Error::FactNotFound(_)), "{id}: {error}");
            assert!(matches!(store.update_fact(id, FactUpdate::default()).await, Err(Error::FactNotFound(_))));
        }
        Ok(())
    }

    async fn scenario_exact_duplicate_detected(db) {
        let store = db.open().await?;
        let s = default_scope();
        let first = added(&store, &s, "Prefers dark mode", 0.6).await?;
        let (events, guard) = record_events();
        let outcome = store
            .add_fact(
                new_fact(&s, "Prefers dark mode", FactCategory::Goal, 0.99).with_source("another thread"),
                &FactPolicy::default(),
            )
            .await?;
        drop(guard);
        assert_eq!(outcome, FactOutcome::Duplicate { existing: first.clone() });
        // The existing fact is unchanged: not its confidence, category, source or time.
        assert_eq!(store.list_facts(&s).await?, vec![first.clone()]);
        // The skip is logged with the fingerprint, never the text.
        let fields = info_event(&events, "duplicate fact skipped")?;
        assert_eq!(fields.get("fingerprint").map(String::as_str), Some(ContentHash::of_raw("Prefers dark mode").fingerprint()));
        assert_eq!(fields.get("existing"), Some(&first.id));
        no_event_mentions(&events, "dark mode")?;
        Ok(())
    }

    async fn scenario_near_duplicate_with_different_casing(db) {
        let store = db.open().await?;
        let s = default_scope();
        let first = added(&store, &s, "User prefers Rust", 0.8).await?;
        let straße = added(&store, &s, "Wohnt in der Hauptstraße", 0.8).await?;
        for (variant, existing) in [
            ("USER PREFERS RUST", &first),
            ("  user prefers rust\n", &first),
            ("uSeR pReFeRs RuSt", &first),
            ("WOHNT IN DER HAUPTSTRASSE", &straße),
            ("wohnt in der hauptstrasse", &straße),
        ] {
            let outcome =
                store.add_fact(new_fact(&s, variant, FactCategory::Knowledge, 0.9), &FactPolicy::default()).await?;
            assert_eq!(outcome, FactOutcome::Duplicate { existing: existing.clone() }, "{variant:?}");
        }
        // Only case and the ends are ignored: other differences make a new fact.
        added(&store, &s, "User  prefers Rust", 0.8).await?;
        added(&store, &s, "User prefers Rust.", 0.8).await?;
        assert_eq!(store.list_facts(&s).await?.len(), 4);
        Ok(())
    }

    async fn defect_10_full_scope_does_not_evict_a_better_fact(db) {
        let store = db.open().await?;
        let s = default_scope();
        let policy = FactPolicy::new(0.5, 2)?;
        added_with(&store, new_fact(&s, "Works at Acme", FactCategory::Context, 0.7), &policy).await?;
        added_with(&store, new_fact(&s, "Lives in Berlin", FactCategory::Context, 0.9), &policy).await?;
        // At the limit, a 0.55 newcomer would be the lowest: it is skipped, and says why.
        let outcome = store.add_fact(new_fact(&s, "Likes jazz", FactCategory::Preference, 0.55), &policy).await?;
        assert_eq!(outcome, FactOutcome::Outranked { confidence: 0.55, lowest_kept: 0.7, max_facts: 2 });
        assert_eq!(serde_json::to_value(&outcome)?["outcome"], "outranked");
        assert_eq!(contents(&store.list_facts(&s).await?), ["Lives in Berlin", "Works at Acme"]);
        // A better newcomer still displaces the lowest.
        let outcome = store.add_fact(new_fact(&s, "Likes tea", FactCategory::Preference, 0.8), &policy).await?;
        let FactOutcome::Added { evicted, .. } = outcome else { bail!("expected an add, got {outcome:?}") };
        assert_eq!(contents(&evicted), ["Works at Acme"]);
        Ok(())
    }

    async fn scenario_fact_count_exceeds_limit(db) {
        let store = db.open().await?;
        let s = default_scope();
        let policy = FactPolicy::new(0.5, 3)?;
        let add = |content: &'static str, confidence: f64| {
            let fact = new_fact(&s, content, FactCategory::Context, confidence);
            let store = &store;
            async move { store.add_fact(fact, &policy).await }
        };
        let older = added_with(&store, new_fact(&s, "older 0.7", FactCategory::Context, 0.7), &policy).await?;
        let newer = added_with(&store, new_fact(&s, "newer 0.7", FactCategory::Context, 0.7), &policy).await?;
        added_with(&store, new_fact(&s, "top 0.9", FactCategory::Context, 0.9), &policy).await?;

        // Full: the lowest-confidence fact goes (the older of two equals), the new one is added.
        let FactOutcome::Added { fact, evicted } = add("new 0.8", 0.8).await? else { bail!("expected an add") };
        assert_eq!(evicted, vec![older]);
        assert_eq!(contents(&store.list_facts(&s).await?), ["top 0.9", "new 0.8", "newer 0.7"]);
        assert_eq!(fact.content, "new 0.8");

        // A new fact of lower confidence than all is not kept: it would evict a better one.
        let outcome = add("low 0.6", 0.6).await?;
        assert_eq!(outcome, FactOutcome::Outranked { confidence: 0.6, lowest_kept: 0.7, max_facts: 3 });
        assert_eq!(contents(&store.list_facts(&s).await?), ["top 0.9", "new 0.8", "newer 0.7"]);

        // A tie with the lowest goes to the newcomer: the older equal is evicted.
        let FactOutcome::Added { evicted, .. } = add("low 0.7", 0.7).await? else { bail!("expected an add") };
        assert_eq!(evicted, vec![newer]);
        assert_eq!(contents(&store.list_facts(&s).await?), ["top 0.9", "new 0.8", "low 0.7"]);

        // A duplicate of a full scope evicts nothing.
        assert!(matches!(add("TOP 0.9", 1.0).await?, FactOutcome::Duplicate { .. }));
        assert_eq!(store.list_facts(&s).await?.len(), 3);

        // A lowered limit trims the scope down to it on the next add.
        let tight = FactPolicy::new(0.5, 1)?;
        let outcome = store.add_fact(new_fact(&s, "only", FactCategory::Goal, 0.95), &tight).await?;
        let FactOutcome::Added { evicted, .. } = outcome else { bail!("expected an add") };
        assert_eq!(contents(&evicted), ["low 0.7", "new 0.8", "top 0.9"]);
        assert_eq!(contents(&store.list_facts(&s).await?), ["only"]);
        Ok(())
    }

    async fn scenario_confidence_thresholds(db) {
        let store = db.open().await?;
        let s = default_scope();
        let (events, guard) = record_events();
        let outcome =
            store.add_fact(new_fact(&s, "Maybe likes jazz", FactCategory::Preference, 0.49), &FactPolicy::default()).await?;
        drop(guard);
        assert_eq!(outcome, FactOutcome::LowConfidence { confidence: 0.49, threshold: 0.5 });
        assert!(store.list_facts(&s).await?.is_empty(), "a low-confidence fact is not persisted");
        let fields = info_event(&events, "low-confidence fact skipped")?;
        assert_eq!(fields.get("fingerprint").map(String::as_str), Some(ContentHash::of_raw("Maybe likes jazz").fingerprint()));
        no_event_mentions(&events, "jazz")?;

        // The default threshold is 0.5, inclusive; a policy can raise it.
        added(&store, &s, "Likes jazz", 0.5).await?;
        let strict = FactPolicy::new(0.8, 500)?;
        let outcome = store.add_fact(new_fact(&s, "Likes blues", FactCategory::Preference, 0.79), &strict).await?;
        assert_eq!(outcome, FactOutcome::LowConfidence { confidence: 0.79, threshold: 0.8 });
        added_with(&store, new_fact(&s, "Likes blues", FactCategory::Preference, 0.8), &strict).await?;
        let lenient = FactPolicy::new(0.0, 500)?;
        added_with(&store, new_fact(&s, "Might like opera", FactCategory::Preference, 0.0), &lenient).await?;
        assert_eq!(contents(&store.list_facts(&s).await?), ["Likes blues", "Likes jazz", "Might like opera"]);
        Ok(())
    }

    async fn scenario_fact_categories(db) {
        let store = db.open().await?;
        let s = default_scope();
        for (i, category) in FactCategory::ALL.into_iter().enumerate() {
            let fact = added_with(
                &store,
                new_fact(&s, &format!("a {category} fact"), category, 0.9 - 0.01 * f64::from(u8::try_from(i)?)),
                &FactPolicy::default(),
            )
            .await?;
            assert_eq!(store.get_fact(&fact.id).await?.map(|f| f.category), Some(category));
        }
        let listed: Vec<FactCategory> = store.list_facts(&s).await?.iter().map(|f| f.category).collect();
        assert_eq!(listed, FactCategory::ALL);
        assert!("opinion".parse::<FactCategory>().is_err(), "only the six categories parse");
        // The database refuses any other category too.
        let insert = "INSERT INTO facts (id, domain, namespace, content, content_key, category, confidence, \
                      created_at, updated_at) VALUES ('fact_0000abcd', 'global', 'default', 'x', 'x', 'opinion', \
                      0.9, '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z')";
        assert!(db.execute_raw(insert).await.is_err());
        Ok(())
    }

    async fn facts_are_isolated_per_scope(db) {
        let store = db.open().await?;
        let (a, b, c) = (scope("global", "a"), scope("global", "b"), scope("team", "a"));
        let policy = FactPolicy::new(0.5, 2)?;
        let mut ids = Vec::new();
        for s in [&a, &b, &c] {
            for (content, confidence) in [("Prefers Rust", 0.9), ("Uses Linux", 0.8)] {
                let fact = added_with(&store, new_fact(s, content, FactCategory::Preference, confidence), &policy).await?;
                ids.push(fact.id);
            }
        }
        // The same text in three scopes is three facts; each scope is full on its own.
        for s in [&a, &b, &c] {
            let facts = store.list_facts(s).await?;
            assert_eq!(contents(&facts), ["Prefers Rust", "Uses Linux"]);
            assert!(facts.iter().all(|f| &f.scope == s));
        }
        let outcome = store.add_fact(new_fact(&b, "Drinks tea", FactCategory::Behavior, 0.95), &policy).await?;
        let FactOutcome::Added { evicted, .. } = outcome else { bail!("expected an add") };
        assert_eq!(evicted.iter().map(|f| &f.scope).collect::<Vec<_>>(), [&b]);
        assert_eq!(store.list_facts(&a).await?.len(), 2);
        assert_eq!(store.list_facts(&c).await?.len(), 2);
        // Ids are global: a fact is found by id alone, and each id is distinct.
        for id in &ids {
            if let Some(fact) = store.get_fact(id).await? {
                assert_eq!(&fact.id, id);
            }
        }
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len());
        Ok(())
    }

    async fn bad_input_writes_nothing(db) {
        let store = db.open().await?;
        let s = default_scope();
        let policy = FactPolicy::default();
        let cases: Vec<(NewFact, &str)> = vec![
            (new_fact(&s, "", FactCategory::Goal, 0.9), "invalid content: must not be empty or blank"),
            (new_fact(&s, " \n\t ", FactCategory::Goal, 0.9), "invalid content: must not be empty or blank"),
            (new_fact(&s, "\u{1c}\u{1f}", FactCategory::Goal, 0.9), "invalid content: must not be empty or blank"),
            (new_fact(&s, "a\0b", FactCategory::Goal, 0.9), "invalid content: must not contain NUL characters"),
            (new_fact(&s, &"x".repeat(MAX_CONTENT_BYTES + 1), FactCategory::Goal, 0.9), "over the limit"),
            (new_fact(&s, "ok", FactCategory::Goal, f64::NAN), "invalid confidence: must be a number in [0, 1], got NaN"),
            (new_fact(&s, "ok", FactCategory::Goal, -0.1), "invalid confidence"),
            (new_fact(&s, "ok", FactCategory::Goal, 1.5), "invalid confidence"),
            (new_fact(&s, "ok", FactCategory::Goal, f64::INFINITY), "invalid confidence"),
            (new_fact(&s, "ok", FactCategory::Goal, 0.9).with_source("a\0"), "invalid source"),
            (new_fact(&s, "ok", FactCategory::Goal, 0.9).with_source("s".repeat(MAX_SOURCE_BYTES + 1)), "invalid source"),
        ];
        for (fact, expected) in cases {
            let error = store.add_fact(fact, &policy).await.expect_err("bad input is rejected");
            assert!(matches!(error, Error::InvalidContent { .. }), "{error}");
            assert!(error.to_string().contains(expected), "{error} does not contain {expected:?}");
            assert!(!error.is_unavailable());
        }
        // A low confidence does not hide bad content.
        let error = store.add_fact(new_fact(&s, "", FactCategory::Goal, 0.1), &policy).await.expect_err("blank");
        assert!(matches!(error, Error::InvalidContent { what: "content", .. }), "{error}");
        for bad in [FactPolicy { confidence_threshold: 1.5, max_facts: 5 }, FactPolicy { confidence_threshold: 0.5, max_facts: 0 }] {
            let error = store.add_fact(new_fact(&s, "ok", FactCategory::Goal, 0.9), &bad).await.expect_err("bad policy");
            assert!(matches!(error, Error::InvalidContent { what: "fact policy", .. }), "{error}");
        }
        assert!(store.list_facts(&s).await?.is_empty());

        // Bad updates change nothing.
        let fact = added(&store, &s, "Valid fact", 0.7).await?;
        let bad_updates = [
            FactUpdate { content: Some("  ".to_owned()), ..FactUpdate::default() },
            FactUpdate { content: Some("x\0".to_owned()), confidence: Some(0.9), ..FactUpdate::default() },
            FactUpdate { confidence: Some(f64::NAN), category: Some(FactCategory::Goal), ..FactUpdate::default() },
            FactUpdate { confidence: Some(2.0), ..FactUpdate::default() },
        ];
        for update in bad_updates {
            let error = store.update_fact(&fact.id, update).await.expect_err("bad update is rejected");
            assert!(matches!(error, Error::InvalidContent { .. }), "{error}");
        }
        assert_eq!(store.list_facts(&s).await?, vec![fact]);

        // Profiles: NUL is refused and nothing is stored.
        let mut profile = MemoryProfile::default();
        profile.user.work_context = ProfileSection::new("bad\0summary");
        assert!(matches!(store.put_profile(&s, &profile).await, Err(Error::InvalidContent { what: "profile", .. })));
        assert_eq!(store.profile(&s).await?, MemoryProfile::default());
        Ok(())
    }

    async fn profiles_are_stored_per_scope(db) {
        let store = db.open().await?;
        let (a, b) = (scope("global", "a"), scope("global", "b"));
        assert_eq!(store.profile(&a).await?, MemoryProfile::default(), "no profile reads as an empty one");

        let mut profile = MemoryProfile::default();
        profile.user.work_context =
            ProfileSection { summary: "Engineer at Acme".to_owned(), updated_at: "2025-05-01T10:00:00Z".to_owned() };
        profile.history.long_term_background = ProfileSection::new("Grew up in Porto — loves 🚲");
        store.put_profile(&a, &profile).await?;
        assert_eq!(store.profile(&a).await?, profile);
        assert_eq!(store.profile(&b).await?, MemoryProfile::default());

        // Replaced as a whole.
        let mut replaced = MemoryProfile::default();
        replaced.user.top_of_mind = ProfileSection::new("Release 2.0");
        store.put_profile(&a, &replaced).await?;
        store.close().await;
        let again = db.open().await?;
        assert_eq!(again.profile(&a).await?, replaced);
        Ok(())
    }

    async fn secrets_stored_verbatim_in_facts_and_profiles_are_redacted(db) {
        let store = db.open().await?;
        let s = default_scope();
        let fact = new_fact(&s, "The user's GitHub token is ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ", FactCategory::Knowledge, 0.9)
            .with_source("password = hunter2!x");
        let stored = added_with(&store, fact, &FactPolicy::default()).await?;
        assert_eq!(stored.content, "The user's GitHub token is [REDACTED:github_token]");
        assert_eq!(stored.source.as_deref(), Some("password = [REDACTED:password]"));
        let updated = store
            .update_fact(&stored.id, FactUpdate { content: Some("AWS key AKIAIOSFODNN7EXAMPLE".into()), ..FactUpdate::default() })
            .await?;
        assert_eq!(updated.content, "AWS key [REDACTED:aws_access_key_id]");
        let mut profile = MemoryProfile::default();
        profile.user.work_context = ProfileSection::new("Deploys with DATABASE_URL=postgres://app:S3cr3t-Pa55@db:5432/prod");
        store.put_profile(&s, &profile).await?;
        let read = store.profile(&s).await?;
        assert!(!read.user.work_context.summary.contains("S3cr3t"), "{:?}", read.user.work_context);
        assert!(read.user.work_context.summary.contains("[REDACTED:connection_string_password]"));
        // Prose about keys is left alone.
        let plain = added(&store, &s, "Rotates the deploy keys every 90 days", 0.9).await?;
        assert_eq!(plain.content, "Rotates the deploy keys every 90 days");
        Ok(())
    }

    async fn facts_list_by_confidence_then_age(db) {
        let store = db.open().await?;
        let s = default_scope();
        for (content, confidence) in [("c1", 0.6), ("a", 0.9), ("c2", 0.6), ("b", 0.75), ("c3", 0.6)] {
            added(&store, &s, content, confidence).await?;
        }
        assert_eq!(contents(&store.list_facts(&s).await?), ["a", "b", "c1", "c2", "c3"]);
        Ok(())
    }

    async fn concurrent_adds_keep_facts_unique_and_within_the_limit(db) {
        let s = default_scope();
        let handles = [Arc::new(db.open().await?), Arc::new(db.open().await?)];
        let policy = FactPolicy::new(0.5, 10)?;

        // The same fact, differently cased, from 16 writers on two handles: one is added.
        let mut tasks = JoinSet::new();
        for i in 0..16 {
            let store = Arc::clone(&handles[i % 2]);
            let content = if i % 3 == 0 { "LIKES CONCURRENCY".to_owned() } else { "likes concurrency".to_owned() };
            let fact = new_fact(&s, &content, FactCategory::Preference, 0.9);
            tasks.spawn(async move { store.add_fact(fact, &policy).await });
        }
        let mut added_count = 0;
        while let Some(outcome) = tasks.join_next().await {
            match outcome?? {
                FactOutcome::Added { .. } => added_count += 1,
                FactOutcome::Duplicate { .. } => {}
                other => bail!("unexpected {other:?}"),
            }
        }
        assert_eq!(added_count, 1);

        // 40 distinct facts at once: the scope ends full, never over.
        let mut tasks = JoinSet::new();
        for i in 0..40u8 {
            let store = Arc::clone(&handles[usize::from(i) % 2]);
            let fact = new_fact(&s, &format!("fact {i}"), FactCategory::Knowledge, 0.5 + f64::from(i) / 100.0);
            tasks.spawn(async move { store.add_fact(fact, &policy).await });
        }
        while let Some(outcome) = tasks.join_next().await {
            let outcome = outcome??;
            assert!(matches!(outcome, FactOutcome::Added { .. } | FactOutcome::Outranked { .. }), "{outcome:?}");
        }
        // Whatever the order of arrival, the ten best are the ones kept (the first fact,
        // of confidence 0.9, among them).
        let facts = handles[0].list_facts(&s).await?;
        assert_eq!(facts[0].content.to_lowercase(), "likes concurrency");
        let want: Vec<String> = (31..40u8).rev().map(|i| format!("fact {i}")).collect();
        assert_eq!(contents(&facts[1..]), want);
        Ok(())
    }
}

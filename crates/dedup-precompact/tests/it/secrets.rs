//! Defect "secrets stored verbatim": credentials never reach the store as given.
//! Redacted by default and said so; refused on `secrets = "refuse"`; kept on "allow".

use std::sync::Arc;

use dedup_core::SecretAction;
use dedup_precompact::{DeduplicationConfig, DeduplicationService, Error};
use dedup_store::{ListFilter, NewMemory};

use crate::support::{Backend, TableEmbedder, TestStore};

const AWS: &str = "The deploy key is AKIAIOSFODNN7EXAMPLE with aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY for the nightly job.";
const PASSWORD: &str =
    "Staging database: DATABASE_URL=postgres://app:S3cr3t-Pa55@db.internal:5432/prod is the one to use.";

fn service_with(db: &TestStore, secrets: SecretAction) -> DeduplicationService {
    let config = DeduplicationConfig { secrets, ..DeduplicationConfig::default() };
    DeduplicationService::new(db.store.clone(), Arc::new(TableEmbedder::new()), config)
}

/// Every stored text of the test's domain, content and title.
async fn stored_texts(db: &TestStore) -> Vec<String> {
    let filter = ListFilter { domain: Some(db.domain.clone()), ..ListFilter::default() };
    let memories = db.store.list(&filter).await.expect("list");
    memories.into_iter().flat_map(|m| [m.content, m.title.unwrap_or_default()]).collect()
}

#[tokio::test]
async fn secrets_stored_verbatim_are_redacted_by_default_and_reported() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let db = TestStore::open(backend).await;
        let dedup = service_with(&db, DeduplicationConfig::default().secrets);
        let scope = db.scope("decisions");
        let mut memory = NewMemory::new(scope.clone(), AWS);
        memory.title = Some("password = hunter2!x".into());
        memory.metadata.insert("source".into(), serde_json::json!({"line": PASSWORD}));
        let outcome = dedup.add(memory).await.expect("add");
        assert!(outcome.stored.is_some(), "{backend:?}: a redacted memory is still stored");
        assert_eq!(
            outcome.check.redacted,
            ["aws_access_key_id", "aws_secret_access_key", "password", "connection_string_password"],
            "{backend:?}"
        );
        let texts = stored_texts(&db).await;
        let joined = texts.join("\n");
        for secret in ["AKIAIOSFODNN7EXAMPLE", "EXAMPLEKEY", "hunter2", "S3cr3t-Pa55"] {
            assert!(!joined.contains(secret), "{backend:?}: {secret} was stored");
        }
        assert!(joined.contains("[REDACTED:aws_access_key_id]"), "{backend:?}: {joined}");
        let stored = db.store.get(outcome.stored.unwrap()).await.unwrap().unwrap();
        assert!(
            !serde_json::to_string(&stored.metadata).unwrap().contains("S3cr3t"),
            "{backend:?}: metadata kept the password"
        );

        // The same text again is an exact duplicate of the redacted memory.
        let again = dedup.add(NewMemory::new(scope.clone(), AWS)).await.expect("add again");
        assert!(again.check.is_duplicate, "{backend:?}: {:?}", again.check);
        // A check reports the redaction too, and stores nothing.
        let check = dedup.check_duplicate(PASSWORD, &scope).await.expect("check");
        assert_eq!(check.redacted, ["connection_string_password"]);
        assert_eq!(stored_texts(&db).await.len(), 2, "{backend:?}: one memory (content and title)");
    }
}

#[tokio::test]
async fn secrets_refused_by_config_change_nothing() {
    let db = TestStore::open(Backend::Sqlite).await;
    let dedup = service_with(&db, SecretAction::Refuse);
    let scope = db.scope("decisions");
    let err = dedup.add(NewMemory::new(scope.clone(), AWS)).await.unwrap_err();
    assert!(matches!(err, Error::SecretRefused { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("aws_access_key_id") && message.contains("refuse"), "{message}");
    assert!(!message.contains("AKIA") && !message.contains("EXAMPLEKEY"), "the message shows the secret: {message}");
    assert!(!err.is_unavailable());
    assert!(dedup.check_duplicate(PASSWORD, &scope).await.is_err());
    assert!(stored_texts(&db).await.is_empty(), "a refused memory was stored");
    // Text without credentials passes.
    let fine = dedup.add(NewMemory::new(scope, "Rotate the deploy keys every 90 days.")).await.unwrap();
    assert!(fine.stored.is_some() && fine.check.redacted.is_empty());
}

#[tokio::test]
async fn secrets_allowed_by_config_are_kept_as_given() {
    let db = TestStore::open(Backend::Sqlite).await;
    let dedup = service_with(&db, SecretAction::Allow);
    let outcome = dedup.add(NewMemory::new(db.scope("vault"), AWS)).await.unwrap();
    assert!(outcome.check.redacted.is_empty());
    assert_eq!(stored_texts(&db).await[0], AWS);
}

#[test]
fn secrets_setting_is_read_from_the_file_and_the_environment() {
    let file: toml::Table = toml::from_str("[dedup]\nsecrets = \"refuse\"\n").unwrap();
    let mut config = DeduplicationConfig::default();
    assert_eq!(config.secrets, SecretAction::Redact);
    config.apply_toml(&file, "memdedup.toml").unwrap();
    assert_eq!(config.secrets, SecretAction::Refuse);
    config.apply_env(|name| (name == "MEMDEDUP_SECRETS").then(|| "ALLOW".to_owned())).unwrap();
    assert_eq!(config.secrets, SecretAction::Allow);
    let bad: toml::Table = toml::from_str("[dedup]\nsecrets = \"mask\"\n").unwrap();
    let err = config.apply_toml(&bad, "memdedup.toml").unwrap_err().to_string();
    assert!(err.contains("dedup.secrets") && err.contains("\"mask\""), "{err}");
    assert_eq!(config.secrets, SecretAction::Allow, "a bad value changed the config");
}

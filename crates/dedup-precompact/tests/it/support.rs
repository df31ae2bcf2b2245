//! Stores on both backends, a deterministic embedder, and metrics capture.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use dedup_core::{Embedding, normalize_content};
use dedup_embed::Embedder;
use dedup_precompact::{DeduplicationConfig, DeduplicationService};
use dedup_store::{DbLocation, Scope, Store, StoreOptions};
use rand::{Rng, SeedableRng};

/// Which database a test body runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A store for one test: a fresh SQLite file, or the shared disposable Postgres database
/// with a domain no other test uses (scopes isolate tests from each other).
pub struct TestStore {
    pub store: Arc<Store>,
    pub location: DbLocation,
    pub domain: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestStore {
    pub async fn open(backend: Backend) -> TestStore {
        let domain = format!("t{:016x}", rand::rng().random::<u64>());
        let (location, dir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temporary directory");
                (DbLocation::Sqlite(dir.path().join("memory.db")), Some(dir))
            }
            Backend::Postgres => (DbLocation::Postgres(postgres_url()), None),
        };
        let store = Store::open(&location, &StoreOptions::default()).await.expect("the test database opens");
        TestStore { store: Arc::new(store), location, domain, _dir: dir }
    }

    /// A second handle on the same database: what another process would have.
    pub async fn reopen(&self) -> Arc<Store> {
        Arc::new(Store::open(&self.location, &StoreOptions::default()).await.expect("the test database reopens"))
    }

    pub fn scope(&self, namespace: &str) -> Scope {
        Scope::new(&self.domain, namespace).expect("valid test scope")
    }
}

/// The admin URL of the disposable Postgres server `cargo xtask ci` starts.
pub fn postgres_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "Postgres tests need a server: run them with `cargo xtask ci` (it starts a disposable one) or set DATABASE_URL"
        ),
    }
}

/// Runs one async test body against SQLite and against Postgres, as two tests.
#[macro_export]
macro_rules! backend_tests {
    ($(async fn $name:ident($db:ident) $body:block)*) => {
        mod sqlite {
            #[allow(unused_imports)]
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let $db = $crate::support::TestStore::open($crate::support::Backend::Sqlite).await;
                $body
            })*
        }
        mod postgres {
            #[allow(unused_imports)]
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let $db = $crate::support::TestStore::open($crate::support::Backend::Postgres).await;
                $body
            })*
        }
    };
}

/// Dimensions of [`TableEmbedder`] vectors.
pub const DIMS: usize = 384;

/// A deterministic embedder: a pseudo-random unit vector per normalised text (random
/// vectors in 384 dimensions are nearly orthogonal), except for texts given an explicit
/// vector. Counts the texts it embeds.
#[derive(Default)]
pub struct TableEmbedder {
    overrides: HashMap<String, Embedding>,
    pub calls: AtomicUsize,
}

impl TableEmbedder {
    pub fn new() -> TableEmbedder {
        TableEmbedder::default()
    }

    /// Makes `paraphrase` embed at cosine `cosine` to `original`.
    pub fn with_paraphrase(mut self, original: &str, paraphrase: &str, cosine: f32) -> TableEmbedder {
        let base = random_vector(original);
        let noise = random_vector(&format!("noise:{paraphrase}"));
        // Remove the noise's component along base, then mix: cos = cosine exactly.
        let along: f32 = base.as_slice().iter().zip(noise.as_slice()).map(|(a, b)| a * b).sum();
        let orth: Vec<f32> = noise.as_slice().iter().zip(base.as_slice()).map(|(n, b)| n - along * b).collect();
        let orth = Embedding::new(orth).expect("orthogonal part is non-zero");
        let sin = (1.0 - cosine * cosine).max(0.0).sqrt();
        let mixed: Vec<f32> = base.as_slice().iter().zip(orth.as_slice()).map(|(b, o)| cosine * b + sin * o).collect();
        self.overrides.insert(normalize_content(paraphrase), Embedding::new(mixed).expect("unit mix"));
        self
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn vector(&self, text: &str) -> Embedding {
        self.overrides.get(&normalize_content(text)).cloned().unwrap_or_else(|| random_vector(text))
    }
}

/// A unit vector determined by the normalised text.
pub fn random_vector(text: &str) -> Embedding {
    let digest = dedup_core::ContentHash::of(text);
    let seed = u64::from_str_radix(&digest.as_str()[..16], 16).expect("hex");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let values: Vec<f32> = (0..DIMS).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    Embedding::new(values).expect("random vector is non-zero")
}

#[async_trait]
impl Embedder for TableEmbedder {
    fn model_id(&self) -> &str {
        "table-384"
    }

    fn dims(&self) -> usize {
        DIMS
    }

    async fn embed(&self, texts: &[String]) -> dedup_embed::Result<Vec<Embedding>> {
        self.calls.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
}

/// A service with the table embedder and the seed's default configuration.
pub fn service(db: &TestStore, embedder: Arc<TableEmbedder>) -> DeduplicationService {
    DeduplicationService::new(db.store.clone(), embedder, DeduplicationConfig::default())
}

/// Long enough for the semantic check, and for its old 50-character minimum.
pub fn long(text: &str) -> String {
    format!("{text} — recorded while working on the payment reconciliation service")
}

//! [`BatchingEmbedder`]: coalesces concurrent single-text requests into batches.

use std::sync::Arc;

use async_trait::async_trait;
use dedup_core::Embedding;
use tokio::sync::{mpsc, oneshot};

use crate::{Embedder, Error, Result};

/// One queued text and where its vector goes.
struct Job {
    text: String,
    reply: oneshot::Sender<Result<Embedding>>,
}

/// Wraps an embedder so that concurrent [`Embedder::embed_one`] calls (a server's
/// requests) are embedded together: a background task takes the first waiting text, adds
/// every other text already waiting (up to `max_batch`), embeds them in one call and hands
/// each caller its vector. A lone request is embedded at once; under load, batches grow
/// with the queue, which costs far less inference time per text than one call per text.
///
/// Multi-text [`Embedder::embed`] calls, and texts over [`DEFAULT_MAX_BATCHED_CHARS`]
/// characters (or [`BatchingEmbedder::with_max_batched_chars`]), go straight to the inner
/// embedder: a long text is many inferences by itself, and in a batch it would hold every
/// short text of the batch (and every batch after it) until it is done. When a batch
/// fails, its texts are retried one by one, so each caller gets its own result. Results
/// are identical to the inner embedder's (it embeds each text independently of the others
/// in its batch).
pub struct BatchingEmbedder {
    inner: Arc<dyn Embedder>,
    queue: mpsc::Sender<Job>,
    max_batched_chars: usize,
}

/// The longest text, in characters, that [`BatchingEmbedder`] batches by default: about
/// one 256-token window of English.
pub const DEFAULT_MAX_BATCHED_CHARS: usize = 1_000;

impl std::fmt::Debug for BatchingEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchingEmbedder").field("model_id", &self.inner.model_id()).finish()
    }
}

impl BatchingEmbedder {
    /// Starts the batching task on the current tokio runtime (so call it from inside
    /// one); it ends when the embedder is dropped. `max_batch` is clamped to 1..=256.
    pub fn new(inner: Arc<dyn Embedder>, max_batch: usize) -> BatchingEmbedder {
        let max_batch = max_batch.clamp(1, 256);
        let (queue, jobs) = mpsc::channel(1024);
        tokio::spawn(run(Arc::clone(&inner), jobs, max_batch));
        BatchingEmbedder { inner, queue, max_batched_chars: DEFAULT_MAX_BATCHED_CHARS }
    }

    /// Texts over `chars` characters are embedded on their own, outside the batches.
    pub fn with_max_batched_chars(mut self, chars: usize) -> BatchingEmbedder {
        self.max_batched_chars = chars;
        self
    }
}

async fn run(inner: Arc<dyn Embedder>, mut jobs: mpsc::Receiver<Job>, max_batch: usize) {
    while let Some(first) = jobs.recv().await {
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        // Callers that gave up (their request was cancelled) need no vector.
        batch.retain(|job| !job.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let texts: Vec<String> = batch.iter().map(|job| job.text.clone()).collect();
        match inner.embed(&texts).await {
            Ok(vectors) if vectors.len() == batch.len() => {
                for (job, vector) in batch.into_iter().zip(vectors) {
                    let _ = job.reply.send(Ok(vector));
                }
            }
            result => {
                if batch.len() == 1 {
                    let result = result.and_then(|mut vectors| {
                        vectors.pop().ok_or_else(|| Error::Malformed("the embedder returned no vector".into()))
                    });
                    if let Some(job) = batch.pop() {
                        let _ = job.reply.send(result);
                    }
                    continue;
                }
                for job in batch {
                    let result = inner.embed_one(&job.text).await;
                    let _ = job.reply.send(result);
                }
            }
        }
    }
}

#[async_trait]
impl Embedder for BatchingEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>> {
        self.inner.embed(texts).await
    }

    async fn embed_one(&self, text: &str) -> Result<Embedding> {
        if text.len() > self.max_batched_chars && text.chars().count() > self.max_batched_chars {
            return self.inner.embed_one(text).await;
        }
        let (reply, answer) = oneshot::channel();
        let job = Job { text: text.to_owned(), reply };
        if self.queue.send(job).await.is_err() {
            return Err(Error::Inference("the batching task has stopped".into()));
        }
        answer.await.map_err(|_| Error::Inference("the batching task dropped the request".into()))?
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// Embeds "t<i>" as the unit vector along axis i; records batch sizes; fails for "bad".
    struct Axis {
        batches: Mutex<Vec<usize>>,
    }

    #[async_trait]
    impl Embedder for Axis {
        fn model_id(&self) -> &str {
            "axis"
        }

        fn dims(&self) -> usize {
            64
        }

        async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>> {
            self.batches.lock().unwrap().push(texts.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
            texts
                .iter()
                .map(|t| {
                    let i: usize =
                        t.strip_prefix('t').and_then(|n| n.parse().ok()).ok_or(Error::Inference(t.clone()))?;
                    let mut v = vec![0.0; 64];
                    v[i] = 1.0;
                    Ok(Embedding::new(v)?)
                })
                .collect()
        }
    }

    #[tokio::test]
    async fn concurrent_requests_are_batched_and_answered_in_order() {
        let inner = Arc::new(Axis { batches: Mutex::new(Vec::new()) });
        let batching = Arc::new(BatchingEmbedder::new(inner.clone(), 16));
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let b = Arc::clone(&batching);
                tokio::spawn(async move { (i, b.embed_one(&format!("t{i}")).await) })
            })
            .collect();
        for task in tasks {
            let (i, vector) = task.await.unwrap();
            assert_eq!(vector.unwrap().as_slice()[i], 1.0, "text {i} got another text's vector");
        }
        let batches = inner.batches.lock().unwrap().clone();
        assert_eq!(batches.iter().sum::<usize>(), 40);
        assert!(batches.len() < 40, "no batching happened: {batches:?}");
        assert!(batches.iter().all(|&n| n <= 16), "{batches:?}");
    }

    #[tokio::test]
    async fn a_failing_text_fails_only_its_own_request() {
        let inner = Arc::new(Axis { batches: Mutex::new(Vec::new()) });
        let batching = Arc::new(BatchingEmbedder::new(inner, 16));
        let texts = ["t1", "bad", "t2", "t3"];
        let tasks: Vec<_> = texts
            .iter()
            .map(|t| {
                let b = Arc::clone(&batching);
                let t = t.to_string();
                tokio::spawn(async move { b.embed_one(&t).await })
            })
            .collect();
        let results: Vec<_> = futures_join(tasks).await;
        assert!(results[1].is_err());
        for i in [0, 2, 3] {
            assert!(results[i].is_ok(), "{i}: {:?}", results[i]);
        }
    }

    /// Defect 6: a long text is embedded on its own, so short texts sent while it is
    /// embedded are answered first.
    #[tokio::test]
    async fn defect_6_a_long_text_does_not_hold_the_short_ones() {
        struct Slow;
        #[async_trait]
        impl Embedder for Slow {
            fn model_id(&self) -> &str {
                "slow"
            }
            fn dims(&self) -> usize {
                2
            }
            async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>> {
                // A text's cost grows with its length, as the windows of a real model do.
                let longest = texts.iter().map(String::len).max().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(1 + longest as u64 / 10)).await;
                texts.iter().map(|_| Ok(Embedding::new(vec![1.0, 0.0])?)).collect()
            }
        }
        let batching = Arc::new(BatchingEmbedder::new(Arc::new(Slow), 16).with_max_batched_chars(100));
        let long = "x".repeat(20_000); // 2 s
        let long_task = {
            let b = Arc::clone(&batching);
            tokio::spawn(async move { b.embed_one(&long).await })
        };
        tokio::task::yield_now().await;
        for i in 0..5 {
            batching.embed_one(&format!("short {i}")).await.unwrap();
            assert!(!long_task.is_finished(), "short text {i} waited for the long one");
        }
        long_task.await.unwrap().unwrap();
    }

    async fn futures_join(tasks: Vec<tokio::task::JoinHandle<Result<Embedding>>>) -> Vec<Result<Embedding>> {
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    }
}

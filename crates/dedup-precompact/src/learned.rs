//! [`LearnedPairJudge`]: the learned pair judge as the checker chain holds it — a model
//! loaded on first use (a check that finds no candidate never pays for it) and shared by
//! every clone, or the reason it could not be loaded.
//!
//! **Invariants:** the model is loaded at most once per judge (clones share the attempt);
//! a judge that cannot load or run its model never blocks a check: the caller decides by
//! cosine instead and says so.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;

use dedup_core::PairScorer;

/// Loads the model: the scorer, or why it cannot be had (a message naming the file and
/// the command that fixes it).
pub type ScorerLoader = dyn Fn() -> Result<Arc<dyn PairScorer>, String> + Send + Sync;

/// The learned pair judge: its candidate floor and its model (or how to load it), or why
/// there is none.
#[derive(Clone)]
pub struct LearnedPairJudge {
    state: Arc<State>,
}

struct State {
    /// The cosine from which a neighbour is judged; `None` when there is no model.
    floor: Option<f32>,
    /// How many of the nearest neighbours above the floor are judged.
    candidates: usize,
    loader: Option<Box<ScorerLoader>>,
    loaded: OnceLock<Result<Arc<dyn PairScorer>, String>>,
    /// The thread [`LearnedPairJudge::load_in_background`] started, until it is waited for.
    loading: Mutex<Option<JoinHandle<()>>>,
}

impl Default for LearnedPairJudge {
    /// A judge without a model: checks decide by cosine and say so.
    fn default() -> LearnedPairJudge {
        LearnedPairJudge::unavailable("no model is attached to the learned judge".to_owned())
    }
}

impl LearnedPairJudge {
    /// A judge whose model is `scorer`, already loaded.
    pub fn with_scorer(scorer: Arc<dyn PairScorer>) -> LearnedPairJudge {
        let (floor, candidates) = (Some(scorer.settings().candidate_floor), scorer.settings().candidates);
        let loaded = OnceLock::new();
        let _ = loaded.set(Ok(scorer));
        LearnedPairJudge {
            state: Arc::new(State { floor, candidates, loader: None, loaded, loading: Mutex::default() }),
        }
    }

    /// A judge that judges the `candidates` nearest neighbours (at least 1) from cosine
    /// `floor` (the model's settings) and loads its model with `loader` on first use.
    pub fn with_loader(floor: f32, candidates: usize, loader: Box<ScorerLoader>) -> LearnedPairJudge {
        LearnedPairJudge {
            state: Arc::new(State {
                floor: Some(floor),
                candidates: candidates.max(1),
                loader: Some(loader),
                loaded: OnceLock::new(),
                loading: Mutex::default(),
            }),
        }
    }

    /// A judge without a model, for `reason` (which results repeat).
    pub fn unavailable(reason: String) -> LearnedPairJudge {
        let loaded = OnceLock::new();
        let _ = loaded.set(Err(reason));
        LearnedPairJudge {
            state: Arc::new(State { floor: None, candidates: 1, loader: None, loaded, loading: Mutex::default() }),
        }
    }

    /// The cosine from which a neighbour is judged; `None` when there is no model (the
    /// caller decides by cosine).
    pub fn floor(&self) -> Option<f32> {
        match self.state.loaded.get() {
            Some(Err(_)) => None,
            _ => self.state.floor,
        }
    }

    /// How many of the nearest neighbours above the floor a check judges (the model's
    /// `candidates`).
    pub fn candidates(&self) -> usize {
        self.state.candidates
    }

    /// Starts loading the model on a background thread, unless it is loaded (or failed)
    /// already: the first check that needs it then waits only for what is left of the
    /// load, which overlaps the embedder and the store. With `for_many` (a long-lived
    /// process), the scorer also gets ready for calls of many pairs
    /// ([`PairScorer::prepare_for_many`]). A load that fails is remembered as a lazy one
    /// would be: checks decide by cosine and say why.
    ///
    /// Keep the returned guard until the process may exit: dropping it waits for the
    /// thread, since a model runtime still loading while the process tears down is not
    /// safe.
    pub fn load_in_background(&self, for_many: bool) -> LoadGuard {
        let guard = LoadGuard(self.clone());
        let mut loading = self.state.loading.lock().unwrap_or_else(PoisonError::into_inner);
        if self.state.loader.is_none() || self.state.loaded.get().is_some() || loading.is_some() {
            return guard;
        }
        let judge = self.clone();
        let spawned = std::thread::Builder::new().name("pair-judge-load".to_owned()).spawn(move || {
            if let Ok(scorer) = judge.scorer()
                && for_many
            {
                scorer.prepare_for_many();
            }
        });
        match spawned {
            Ok(handle) => *loading = Some(handle),
            Err(error) => tracing::debug!(%error, "no thread to load the pair judge in; it loads on first use"),
        }
        guard
    }

    /// Waits for the load [`LearnedPairJudge::load_in_background`] started, if any.
    fn wait_for_load(&self) {
        let handle = self.state.loading.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(handle) = handle
            && handle.join().is_err()
        {
            tracing::warn!("the thread loading the pair judge panicked");
        }
    }

    /// The model, loading it now if this is the first use (or waiting for the load
    /// [`LearnedPairJudge::load_in_background`] started); the error says why there is
    /// none.
    pub fn scorer(&self) -> Result<&Arc<dyn PairScorer>, &str> {
        let loaded = self.state.loaded.get_or_init(|| match &self.state.loader {
            Some(load) => load(),
            None => Err("no model is attached to the learned judge".to_owned()),
        });
        loaded.as_ref().map_err(String::as_str)
    }
}

/// Waits, when dropped, for the model [`LearnedPairJudge::load_in_background`] may still
/// be loading.
#[must_use = "dropping the guard waits for the load: keep it until the process may exit"]
pub struct LoadGuard(LearnedPairJudge);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.wait_for_load();
    }
}

impl fmt::Debug for LoadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LoadGuard")
    }
}

impl PartialEq for LearnedPairJudge {
    /// The same judge (clones of one another), or both without a model.
    fn eq(&self, other: &LearnedPairJudge) -> bool {
        Arc::ptr_eq(&self.state, &other.state) || (self.state.floor.is_none() && other.state.floor.is_none())
    }
}

impl fmt::Debug for LearnedPairJudge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state.loaded.get() {
            Some(Ok(scorer)) => format!("loaded ({scorer:?})"),
            Some(Err(error)) => format!("unavailable: {error}"),
            None => "not loaded yet".to_owned(),
        };
        f.debug_tuple("LearnedPairJudge").field(&state).finish()
    }
}

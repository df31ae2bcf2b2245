//! What the tools work with: the checker chain, the judge, the chat model, the policies.

use std::sync::Arc;

use memdedup::crates::core::FactPolicy;
use memdedup::crates::llm::ChatModel;
use memdedup::{DedupOptions, DeduplicationService, Judge, LocalBatchJudge};

/// Everything the MCP tools use. Built once per process and shared by every session.
#[derive(Clone)]
pub struct McpContext {
    pub(crate) service: Arc<DeduplicationService>,
    pub(crate) judge: Arc<dyn Judge>,
    pub(crate) dedup_options: DedupOptions,
    pub(crate) chat: Option<Arc<dyn ChatModel>>,
    pub(crate) fact_policy: FactPolicy,
    /// Why the configured judge cannot be made, when it cannot: `dedup_scan` and
    /// `dedup_run` then say so rather than judge with another.
    pub(crate) judge_unavailable: Option<String>,
    /// Whether the judge is the MCP client's own model (`[judge] kind = "agent"`), asked
    /// through MCP sampling by `dedup_scan` and `dedup_run`.
    pub(crate) agent_judge: bool,
}

impl McpContext {
    /// Tools over `service` (its store, embedder and checks). Assisted dedup asks the
    /// offline local judge with default options until [`McpContext::with_judge`] says
    /// otherwise; `facts_extract` is offered only after [`McpContext::with_chat_model`].
    pub fn new(service: Arc<DeduplicationService>) -> McpContext {
        let judge: Arc<dyn Judge> = Arc::new(LocalBatchJudge::builtin());
        let mut dedup_options = DedupOptions::default();
        if let Some(hint) = judge.default_min_confidence() {
            dedup_options.rules.min_confidence_hint = hint;
        }
        McpContext {
            service,
            judge,
            dedup_options,
            chat: None,
            fact_policy: FactPolicy::default(),
            judge_unavailable: None,
            agent_judge: false,
        }
    }

    /// This context with `judge` deciding `dedup_scan` and `dedup_run`, with `options`
    /// (each call may lower `limit`; `dry_run`, `only_id` and `run_id` are set per call).
    pub fn with_judge(mut self, judge: Arc<dyn Judge>, options: DedupOptions) -> McpContext {
        self.judge = judge;
        self.dedup_options = options;
        self
    }

    /// This context with the MCP client's own model as the judge of `dedup_scan` and
    /// `dedup_run` (`[judge] kind = "agent"`), asked through MCP sampling, with `options`.
    /// A client without the `sampling` capability gets a `not_configured` error pointing
    /// at `review_list` and `review_decide`.
    pub fn with_agent_judge(mut self, options: DedupOptions) -> McpContext {
        self.agent_judge = true;
        self.dedup_options = options;
        self
    }

    /// This context without a judge for `dedup_scan` and `dedup_run`: the configured one
    /// cannot be made (`why`, such as a missing API key), and those tools answer
    /// `not_configured` with it while the other tools work.
    pub fn without_judge(mut self, why: impl Into<String>) -> McpContext {
        self.judge_unavailable = Some(why.into());
        self
    }

    /// This context with `chat` as the model `facts_extract` asks.
    pub fn with_chat_model(mut self, chat: Arc<dyn ChatModel>) -> McpContext {
        self.chat = Some(chat);
        self
    }

    /// This context with `policy` (confidence threshold, fact limit) for the fact tools.
    pub fn with_fact_policy(mut self, policy: FactPolicy) -> McpContext {
        self.fact_policy = policy;
        self
    }

    /// The checker chain.
    pub fn service(&self) -> &Arc<DeduplicationService> {
        &self.service
    }

    /// Whether `facts_extract` is offered.
    pub fn has_chat_model(&self) -> bool {
        self.chat.is_some()
    }
}

impl std::fmt::Debug for McpContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpContext")
            .field("judge", &self.judge.name())
            .field("chat", &self.chat.as_ref().map(|c| c.model().to_owned()))
            .field("fact_policy", &self.fact_policy)
            .finish_non_exhaustive()
    }
}

//! The tools' arguments. Their JSON Schemas (what the model sees) come from these types;
//! the doc comments are the descriptions. Unknown members are refused, so a misspelt
//! argument is an error rather than a silent default.

use std::borrow::Cow;

use memdedup::crates::core::FactCategory;
use memdedup::crates::store::MAX_CONTENT_BYTES;
use memdedup::{DEFAULT_DOMAIN, Scope};
use rmcp::ErrorData;
use rmcp::handler::server::common::FromContextPart;
use rmcp::handler::server::tool::ToolCallContext;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::reply::ToolError;

/// A tool's arguments: rmcp's `Parameters`, except that arguments that cannot be read
/// (a member of the wrong type, an unknown or a missing one) are not a protocol error but
/// the tool's own error, [`ToolError::InvalidArgument`] naming the member (`` `limit`:
/// invalid type: string "x", expected u32 ``), so the reply has the structured content of
/// every tool error. The `#[tool]` macro takes the input schema from the argument type
/// named `Parameters`, so the schema is `T`'s.
pub(crate) struct Parameters<T>(pub(crate) Result<T, ToolError>);

impl<T: JsonSchema> JsonSchema for Parameters<T> {
    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = T::json_schema(generator);
        plain_optionals(&mut schema);
        schema
    }
}

/// Types an optional argument by what it holds when given (`"integer"`) rather than as a
/// union with null (`["integer", "null"]`, `"default": null`): optional is already said
/// by `required`, and clients that build forms or convert command-line values from the
/// schema (the MCP Inspector among them) take a union for text. Null stays accepted.
fn plain_optionals(schema: &mut Schema) {
    let Some(properties) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) else { return };
    for property in properties.values_mut() {
        let Some(property) = property.as_object_mut() else { continue };
        let single = match property.get("type").and_then(|t| t.as_array()) {
            Some(types) if types.len() == 2 && types.iter().any(|t| t == "null") => {
                types.iter().find(|t| *t != "null").cloned()
            }
            _ => None,
        };
        if let Some(single) = single {
            property.insert("type".to_owned(), single);
            if property.get("default").is_some_and(serde_json::Value::is_null) {
                property.remove("default");
            }
        }
    }
}

impl<S, T: DeserializeOwned> FromContextPart<ToolCallContext<'_, S>> for Parameters<T> {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        let arguments = serde_json::Value::Object(context.arguments.take().unwrap_or_default());
        Ok(Parameters(serde_path_to_error::deserialize(arguments).map_err(|error| {
            let path = error.path().to_string();
            let member = if path == "." { String::new() } else { format!("`{path}`: ") };
            ToolError::InvalidArgument(format!("{member}{}", error.into_inner()))
        })))
    }
}

/// Where a memory lives: a namespace (`decisions`, `learnings`, …) in a domain.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopeArgs {
    /// The namespace: 1 to 64 of `A-Z a-z 0-9 _ - .`, starting with a letter or digit
    /// (default `default`). Memories are only ever compared within one namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The domain (default `global`).
    #[serde(default)]
    pub domain: Option<String>,
}

impl ScopeArgs {
    pub(crate) fn scope(&self) -> Result<Scope, ToolError> {
        Scope::new(
            self.domain.as_deref().unwrap_or(DEFAULT_DOMAIN),
            self.namespace.as_deref().unwrap_or(memdedup::DEFAULT_NAMESPACE),
        )
        .map_err(|e| ToolError::InvalidArgument(e.to_string()))
    }
}

/// Arguments of `memory_check`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryCheckArgs {
    /// The text of the memory you are about to store.
    pub content: String,
    /// The namespace to compare with (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The domain (default `global`).
    #[serde(default)]
    pub domain: Option<String>,
}

/// Arguments of `memory_add`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryAddArgs {
    /// The memory: one self-contained statement (a decision, lesson, pattern, preference or fact).
    pub content: String,
    /// The namespace to store it in (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The domain (default `global`).
    #[serde(default)]
    pub domain: Option<String>,
    /// What kind of memory it is (default `memory`): 1 to 64 of `A-Z a-z 0-9 _ - . :`.
    #[serde(default)]
    pub kind: Option<String>,
    /// A short title.
    #[serde(default)]
    pub title: Option<String>,
}

/// Arguments of `memory_search`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchArgs {
    /// What to recall, in words.
    pub query: String,
    /// The namespace to search (default: every namespace you may use that holds memories,
    /// with each hit's scope in the result).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The domain (default `global`).
    #[serde(default)]
    pub domain: Option<String>,
    /// How many memories to return, 1 to 50 (default 5), most similar first.
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Arguments of `memory_get`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryGetArgs {
    /// The memory's id (`42`, as a string or a number: `memory_add` returns `stored` as a
    /// number) or URN (`memdedup://global/decisions/42`). A memory merged into another
    /// leads to the one it was merged into.
    #[serde(deserialize_with = "id_text")]
    pub id: String,
}

/// A memory id given as a string or as a non-negative integer, as text.
fn id_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct IdText;

    impl serde::de::Visitor<'_> for IdText {
        type Value = String;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a memory id (a string or a non-negative integer) or a memdedup:// URN")
        }

        fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<String, E> {
            Ok(value.to_owned())
        }

        fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<String, E> {
            Ok(value.to_string())
        }

        fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<String, E> {
            u64::try_from(value)
                .map(|v| v.to_string())
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(value), &self))
        }
    }

    deserializer.deserialize_any(IdText)
}

/// Arguments of `dedup_scan` and `dedup_run`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DedupArgs {
    /// The namespace to deduplicate (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The domain (default `global`).
    #[serde(default)]
    pub domain: Option<String>,
    /// Every namespace (that the caller may use) instead of one.
    #[serde(default)]
    pub all_namespaces: bool,
    /// At most this many unverified memories are judged (default: all), 1 to 100000.
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Arguments of `merges_list`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergesListArgs {
    /// Only merges in this namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Only merges in this domain.
    #[serde(default)]
    pub domain: Option<String>,
    /// Only merges of this dedup run (the `run_id` that `dedup_run` returned).
    #[serde(default)]
    pub run_id: Option<String>,
    /// Also list merges that were undone.
    #[serde(default)]
    pub include_undone: bool,
    /// At most this many, the most recent (default 50, at most 500).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Arguments of `merge_undo`: exactly one of `merge_id` and `run_id`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeUndoArgs {
    /// The merge to undo (an `id` from `merges_list` or `dedup_run`).
    #[serde(default)]
    pub merge_id: Option<i64>,
    /// Undo every merge of this dedup run.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Let a later dedup run merge the restored memories again (default: never again).
    #[serde(default)]
    pub allow_remerge: bool,
}

/// Arguments of `facts_add`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FactsAddArgs {
    /// The fact about the user, one short sentence ("Prefers dark mode").
    pub content: String,
    /// What the fact is about.
    #[schemars(with = "FactCategoryName")]
    pub category: FactCategory,
    /// How sure you are, 0 to 1; facts below the server's threshold (0.5 by default; under
    /// `memdedup serve`, its `[server.facts] min_confidence`) are not stored.
    pub confidence: f64,
    /// The namespace (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The domain (default `global`).
    #[serde(default)]
    pub domain: Option<String>,
    /// Where the fact came from (a conversation id, a file).
    #[serde(default)]
    pub source: Option<String>,
}

/// The categories of a fact, as the schema names them.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // only its schema is used
enum FactCategoryName {
    /// Something the user likes or wants done a certain way.
    Preference,
    /// Something the user knows or that is known about their world.
    Knowledge,
    /// The user's situation: role, project, environment.
    Context,
    /// How the user tends to act.
    Behavior,
    /// What the user is trying to achieve.
    Goal,
    /// A correction of something the agent got wrong.
    Correction,
}

/// Arguments of `facts_context`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FactsContextArgs {
    /// The namespace (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The domain (default `global`).
    #[serde(default)]
    pub domain: Option<String>,
    /// The token budget (cl100k_base tokens), 1 to 1000000 (default 2000).
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// Arguments of `facts_extract`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FactsExtractArgs {
    /// What the user said in the turn.
    pub user: String,
    /// What the assistant answered.
    pub assistant: String,
    /// The namespace to store the facts in (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The domain (default `global`).
    #[serde(default)]
    pub domain: Option<String>,
    /// Only say which facts would be stored.
    #[serde(default)]
    pub dry_run: bool,
}

/// `text` as a memory text: not blank, at most 1 MiB. `what` names the argument.
pub(crate) fn text_arg(what: &str, text: &str) -> Result<(), ToolError> {
    if text.trim().is_empty() {
        return Err(ToolError::InvalidArgument(format!("`{what}` is empty")));
    }
    if text.len() > MAX_CONTENT_BYTES {
        return Err(ToolError::InvalidArgument(format!(
            "`{what}` is {} bytes, over the limit of {MAX_CONTENT_BYTES} bytes (1 MiB)",
            text.len()
        )));
    }
    if text.contains('\0') {
        return Err(ToolError::InvalidArgument(format!("`{what}` contains a NUL character")));
    }
    Ok(())
}

/// `value` within `range`, or an error naming the argument.
pub(crate) fn in_range(what: &str, value: u32, range: std::ops::RangeInclusive<u32>) -> Result<usize, ToolError> {
    if range.contains(&value) {
        Ok(value as usize)
    } else {
        Err(ToolError::InvalidArgument(format!("`{what}` is {value}, outside {} to {}", range.start(), range.end())))
    }
}

/// Arguments of `memory_update`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryUpdateArgs {
    /// The memory's id (`42`, a string or a number) or URN (`memdedup://global/decisions/42`).
    #[serde(deserialize_with = "id_text")]
    pub id: String,
    /// The new text. Refused when it duplicates another memory of the namespace (which
    /// is named); the memory keeps its old text then.
    pub content: String,
}

/// Arguments of `memory_delete` and `memory_history`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryIdArgs {
    /// The memory's id (`42`, a string or a number) or URN (`memdedup://global/decisions/42`).
    #[serde(deserialize_with = "id_text")]
    pub id: String,
}

/// Arguments of `memory_undo`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryUndoArgs {
    /// The change to undo: the `change` that `memory_update` or `memory_delete` returned,
    /// or a change id from `memory_history`.
    pub change: i64,
}

/// Arguments of `review_list`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewListArgs {
    /// Only this namespace (default: every namespace you may use).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Only this domain.
    #[serde(default)]
    pub domain: Option<String>,
    /// The size budget of the batches, in bytes of JSON, 1024 to 262144 (default 32768).
    #[serde(default)]
    pub max_bytes: Option<u32>,
}

/// Arguments of `review_decide`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewDecideArgs {
    /// The `batch_id` of a batch `review_list` returned.
    pub batch_id: String,
    /// Your verdict in seed 003's reply format: `groups` (each `ids` of one pending pair,
    /// `canonical_text`, `confidence` at least the batch's hint, `reason`), `no_match_ids`
    /// (every other id of the batch) and `notes`.
    pub response: serde_json::Value,
}

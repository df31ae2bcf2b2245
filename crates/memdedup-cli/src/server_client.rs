//! The client of `memdedup serve` for client mode: `memory_check` and `memory_add` over its
//! MCP endpoint (`/mcp`, streamable HTTP), one session per command, every exchange within
//! the configured timeout. The tools run the same checker chain as local work and answer
//! with the same `DuplicateCheckResult` and `AddOutcome`, read back unchanged.

use std::time::Duration;

use memdedup::{AddOutcome, ClientSettings, DuplicateCheckResult, NewMemory, Scope};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::time::Instant;

/// The MCP protocol version the client speaks.
const PROTOCOL_VERSION: &str = "2025-06-18";
/// The most time spent ending the session (the answer is already in hand).
const CLOSE_WITHIN: Duration = Duration::from_millis(100);

/// Why the server did not do the work.
#[derive(Debug)]
pub(crate) enum ServerError {
    /// No answer in time, no connection, a 5xx, an answer that is not the expected one, or
    /// a tool that failed (the store, the embedder, input it refuses): worth doing the work
    /// locally. The text completes "server {url} …".
    Unavailable(String),
    /// The server refused the bearer token (401) or the namespace (403): the command's
    /// error, since working locally would hide a misconfiguration.
    Refused(String),
}

/// One MCP session with `memdedup serve`, opened at the first call.
pub(crate) struct ServerClient {
    http: reqwest::Client,
    settings: ClientSettings,
    endpoint: String,
    token: Option<String>,
    session: Option<String>,
    next_id: u64,
}

impl ServerClient {
    /// A client of `settings.url`, with the token of `settings.token_env` when it is set.
    /// Proxy variables are ignored: client mode talks to the server directly.
    pub(crate) fn new(settings: ClientSettings) -> Result<ServerClient, ServerError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(settings.timeout)
            .build()
            .map_err(|e| ServerError::Unavailable(format!("cannot be asked: {e}")))?;
        let token = std::env::var(&settings.token_env).ok().filter(|token| !token.trim().is_empty());
        let endpoint = format!("{}/mcp", settings.url);
        Ok(ServerClient { http, settings, endpoint, token, session: None, next_id: 1 })
    }

    /// The server's root URL.
    pub(crate) fn url(&self) -> &str {
        &self.settings.url
    }

    /// `memory_check` of `text` in `scope`.
    pub(crate) async fn check(&mut self, text: &str, scope: &Scope) -> Result<DuplicateCheckResult, ServerError> {
        let arguments = json!({"content": text, "namespace": scope.namespace_name(), "domain": scope.domain()});
        self.call("memory_check", arguments).await
    }

    /// `memory_add` of `memory`.
    pub(crate) async fn add(&mut self, memory: &NewMemory) -> Result<AddOutcome, ServerError> {
        let mut arguments = json!({
            "content": memory.content,
            "namespace": memory.scope.namespace_name(),
            "domain": memory.scope.domain(),
            "kind": memory.kind,
        });
        if let Some(title) = &memory.title {
            arguments["title"] = json!(title);
        }
        self.call("memory_add", arguments).await
    }

    /// Ends the session, briefly; a server that does not answer keeps it until it expires.
    pub(crate) async fn close(self) {
        let Some(session) = &self.session else { return };
        let request = self.request(reqwest::Method::DELETE).header("mcp-session-id", session);
        let _ = tokio::time::timeout(CLOSE_WITHIN.min(self.settings.timeout), request.send()).await;
    }

    /// Calls `tool`, opening the session first when needed, all within the timeout.
    async fn call<T: DeserializeOwned>(&mut self, tool: &str, arguments: Value) -> Result<T, ServerError> {
        let deadline = Instant::now() + self.settings.timeout;
        if self.session.is_none() {
            self.open(deadline).await?;
        }
        let id = self.id();
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let reply = self.exchange(&message, deadline).await?;
        let result = reply.get("result").ok_or_else(|| match reply.get("error") {
            Some(error) => ServerError::Unavailable(format!("refused {tool}: {}", json_rpc_message(error))),
            None => unexpected("a reply without a result"),
        })?;
        let structured = result.get("structuredContent").cloned().unwrap_or(Value::Null);
        if result.get("isError").and_then(Value::as_bool).unwrap_or(false) {
            let kind = structured["error"]["kind"].as_str().unwrap_or_default();
            let message = structured["error"]["message"].as_str().unwrap_or("(no message)");
            return Err(if kind == "forbidden" {
                ServerError::Refused(format!("refused {tool}: {message}"))
            } else {
                ServerError::Unavailable(format!("could not run {tool}: {message}"))
            });
        }
        serde_json::from_value(structured).map_err(|e| unexpected(&format!("a {tool} result that does not read: {e}")))
    }

    /// `initialize` and `notifications/initialized`: the session every call is made in.
    async fn open(&mut self, deadline: Instant) -> Result<(), ServerError> {
        let id = self.id();
        let initialize = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "memdedup", "version": env!("CARGO_PKG_VERSION")}}});
        let reply = self.exchange(&initialize, deadline).await?;
        if reply.get("result").is_none() {
            return Err(unexpected("no result for initialize"));
        }
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.exchange(&initialized, deadline).await?;
        Ok(())
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .request(method, &self.endpoint)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request
    }

    /// Posts one JSON-RPC message and, for a request, reads its reply (from a JSON or an
    /// event-stream body) by `deadline`. A notification's reply is `Value::Null`.
    async fn exchange(&mut self, message: &Value, deadline: Instant) -> Result<Value, ServerError> {
        let timeout = self.settings.timeout;
        let late = || ServerError::Unavailable(format!("did not answer within {} ms", timeout.as_millis()));
        let mut request = self.request(reqwest::Method::POST).json(message);
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        let response = tokio::time::timeout_at(deadline, request.send()).await.map_err(|_| late())?.map_err(|e| {
            ServerError::Unavailable(if e.is_connect() {
                format!("cannot be reached ({})", innermost(&e))
            } else {
                format!("did not answer ({})", innermost(&e))
            })
        })?;
        let status = response.status();
        if let Some(session) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            self.session = Some(session.to_owned());
        }
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            let body = tokio::time::timeout_at(deadline, response.text()).await.ok().and_then(Result::ok);
            let detail = body
                .and_then(|body| serde_json::from_str::<Value>(&body).ok())
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or_else(|| status.to_string());
            return Err(ServerError::Refused(format!("refused the request ({}): {detail}", status.as_u16())));
        }
        if !status.is_success() {
            return Err(ServerError::Unavailable(format!("answered {status}")));
        }
        let Some(id) = message.get("id") else { return Ok(Value::Null) };
        let mut response = response;
        let mut body = Vec::new();
        loop {
            let chunk = tokio::time::timeout_at(deadline, response.chunk()).await.map_err(|_| late())?;
            match chunk {
                Ok(Some(bytes)) => {
                    body.extend_from_slice(&bytes);
                    if let Some(reply) = reply_in(&body, id) {
                        return Ok(reply);
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(ServerError::Unavailable(format!("broke off its answer ({})", innermost(&e)))),
            }
        }
        reply_in(&body, id).ok_or_else(|| unexpected("an answer without the reply"))
    }
}

/// The JSON-RPC reply with `id` in `body`: the body itself, or one `data:` line of an event stream.
fn reply_in(body: &[u8], id: &Value) -> Option<Value> {
    let text = String::from_utf8_lossy(body);
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .chain(std::iter::once(text.as_ref()))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|reply| reply.get("id") == Some(id))
}

fn json_rpc_message(error: &Value) -> String {
    error["message"].as_str().map_or_else(|| error.to_string(), str::to_owned)
}

fn unexpected(what: &str) -> ServerError {
    ServerError::Unavailable(format!("answered unexpectedly: {what}"))
}

/// The innermost cause of a transport error ("Connection refused (os error 111)").
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_found_in_json_and_event_stream_bodies() {
        let id = json!(2);
        assert_eq!(
            reply_in(br#"{"jsonrpc":"2.0","id":2,"result":{}}"#, &id),
            Some(json!({"jsonrpc":"2.0","id":2,"result":{}}))
        );
        let stream = b"id: 0\nretry: 3000\ndata: \n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":2}\n\n";
        assert_eq!(reply_in(stream, &id).unwrap()["result"], 2);
        assert_eq!(reply_in(b"data: {\"jsonrpc\":\"2.0\",\"id\":2,\"res", &id), None, "a reply cut short is not read");
    }
}

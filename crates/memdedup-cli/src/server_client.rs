//! The client of `memdedup serve` for client mode: `POST /v1/memory/check` and
//! `POST /v1/memory/add`, one request per call, each within the configured timeout. The
//! routes run the same checker chain as local work and answer with the same
//! `DuplicateCheckResult` and `AddOutcome`, read back unchanged.

use memdedup::{AddOutcome, ClientSettings, DuplicateCheckResult, NewMemory, Scope};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Why the server did not do the work.
#[derive(Debug)]
pub(crate) enum ServerError {
    /// No answer in time, no connection, a 5xx, a 4xx other than the two below (such as
    /// input it refuses, or a server without the route), or an answer that does not read:
    /// worth doing the work locally. The text completes "server {url} …".
    Unavailable(String),
    /// The server refused the bearer token (401) or the namespace (403): the command's
    /// error, since working locally would hide a misconfiguration.
    Refused(String),
}

/// A client of one `memdedup serve`.
pub(crate) struct ServerClient {
    http: reqwest::Client,
    settings: ClientSettings,
    token: Option<String>,
}

impl ServerClient {
    /// A client of `settings.url`, with the token of `settings.token_env` when it is set.
    /// Proxy variables are ignored and redirects are not followed: client mode talks to
    /// the server directly, and a redirect (which would replay the request elsewhere)
    /// makes the server unavailable for the call.
    pub(crate) fn new(settings: ClientSettings) -> Result<ServerClient, ServerError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.timeout)
            .timeout(settings.timeout)
            .build()
            .map_err(|e| ServerError::Unavailable(format!("cannot be asked: {e}")))?;
        let token = std::env::var(&settings.token_env).ok().filter(|token| !token.trim().is_empty());
        Ok(ServerClient { http, settings, token })
    }

    /// The server's root URL.
    pub(crate) fn url(&self) -> &str {
        &self.settings.url
    }

    /// `POST /v1/memory/check` of `text` in `scope`.
    pub(crate) async fn check(&self, text: &str, scope: &Scope) -> Result<DuplicateCheckResult, ServerError> {
        let body = json!({"content": text, "namespace": scope.namespace_name(), "domain": scope.domain()});
        self.post("/v1/memory/check", &body).await
    }

    /// `POST /v1/memory/add` of `memory`.
    pub(crate) async fn add(&self, memory: &NewMemory) -> Result<AddOutcome, ServerError> {
        let mut body = json!({
            "content": memory.content,
            "namespace": memory.scope.namespace_name(),
            "domain": memory.scope.domain(),
            "kind": memory.kind,
        });
        if let Some(title) = &memory.title {
            body["title"] = json!(title);
        }
        self.post("/v1/memory/add", &body).await
    }

    /// Posts `body` to `route` and reads the answer, all within the timeout.
    async fn post<T: DeserializeOwned>(&self, route: &str, body: &Value) -> Result<T, ServerError> {
        let mut request = self.http.post(format!("{}{route}", self.settings.url)).json(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let timeout = self.settings.timeout;
        let failed = |e: reqwest::Error| {
            ServerError::Unavailable(if e.is_timeout() {
                format!("did not answer within {} ms", timeout.as_millis())
            } else if e.is_connect() {
                format!("cannot be reached ({})", innermost(&e))
            } else {
                format!("did not answer ({})", innermost(&e))
            })
        };
        let mut response = request.send().await.map_err(failed)?;
        let status = response.status();
        let max = self.settings.max_reply_bytes;
        let too_long = || {
            ServerError::Unavailable(format!("answered {route} with more than {max} bytes (client.max_reply_bytes)"))
        };
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_long());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if bytes.len() + chunk.len() > max {
                return Err(too_long());
            }
            bytes.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&bytes);
        if !status.is_success() {
            let detail = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(without_control_characters))
                .unwrap_or_else(|| status.to_string());
            let said = format!("({}): {detail}", status.as_u16());
            return Err(if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
                ServerError::Refused(format!("refused the request {said}"))
            } else {
                ServerError::Unavailable(format!("answered {route} {said}"))
            });
        }
        serde_json::from_str(&text).map_err(|e| {
            ServerError::Unavailable(format!("answered unexpectedly: a {route} result that does not read: {e}"))
        })
    }
}

/// `text` without control characters (a server's message is printed to a terminal).
fn without_control_characters(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

/// The innermost cause of a transport error ("Connection refused (os error 111)").
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

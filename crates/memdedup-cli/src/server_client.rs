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
    /// Proxy variables are ignored: client mode talks to the server directly.
    pub(crate) fn new(settings: ClientSettings) -> Result<ServerClient, ServerError> {
        let http = reqwest::Client::builder()
            .no_proxy()
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
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        let text = response.text().await.map_err(failed)?;
        if !status.is_success() {
            let detail = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
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

/// The innermost cause of a transport error ("Connection refused (os error 111)").
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

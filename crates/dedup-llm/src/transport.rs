//! The HTTP plumbing both clients share: endpoint validation, one JSON `POST` retried by
//! the [`RetryPolicy`], error classification, and keeping the API key out of every message.

use std::time::{Duration, SystemTime};

use dedup_core::{RetryPolicy, api_error_message, error_chain, parse_retry_after};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};

use crate::{Error, Result};

/// What replaces a secret in text that leaves the client.
pub(crate) const REDACTED: &str = "<redacted>";

/// One endpoint, its client and the headers every request carries.
pub(crate) struct Transport {
    client: reqwest::Client,
    endpoint: Url,
    /// `endpoint` without any password, for logs and error messages.
    endpoint_display: String,
    /// Sent with every request; secret values are marked sensitive.
    headers: HeaderMap,
    retry: RetryPolicy,
    /// The most bytes of one reply read.
    max_reply_bytes: usize,
    /// The API key, scrubbed from whatever a server echoes back.
    secret: Option<String>,
    /// The configured model, for logs.
    model: String,
}

/// The parts of a client configuration the transport needs.
pub(crate) struct TransportConfig<'a> {
    /// API root such as `https://api.openai.com/v1`.
    pub base_url: &'a str,
    /// Path below it, without a leading slash, e.g. `chat/completions`.
    pub path: &'a str,
    /// The model name (must not be blank).
    pub model: &'a str,
    /// Time limit of one attempt.
    pub timeout: Duration,
    /// Retry policy.
    pub retry: RetryPolicy,
    /// The most bytes of one reply read (at least 1).
    pub max_reply_bytes: usize,
    /// Extra headers (authentication, versions); `Content-Type` is added here.
    pub headers: HeaderMap,
    /// The API key to keep out of messages, if any.
    pub secret: Option<&'a str>,
}

impl Transport {
    /// Validates the configuration and builds the HTTP client, without contacting anyone.
    pub(crate) fn new(config: TransportConfig<'_>) -> Result<Transport> {
        if config.model.trim().is_empty() {
            return Err(Error::Config("the chat model name is empty".into()));
        }
        if config.timeout.is_zero() {
            return Err(Error::Config("the chat request timeout must be positive".into()));
        }
        if config.max_reply_bytes == 0 {
            return Err(Error::Config("max_reply_bytes must be at least 1".into()));
        }
        let secret = config.secret.filter(|s| !s.is_empty());
        let endpoint = endpoint(config.base_url, config.path, secret)?;
        let endpoint_display = shown_url(endpoint.as_str(), secret);
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| Error::Config(format!("cannot build the HTTP client: {}", error_chain(&e))))?;
        let mut headers = config.headers;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(Transport {
            client,
            endpoint,
            endpoint_display,
            headers,
            retry: config.retry,
            max_reply_bytes: config.max_reply_bytes,
            secret: secret.map(str::to_owned),
            model: config.model.to_owned(),
        })
    }

    /// The endpoint as shown in messages (no URL password).
    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint_display
    }

    /// A [`Error::Malformed`] about this endpoint.
    pub(crate) fn malformed(&self, reason: impl Into<String>) -> Error {
        Error::Malformed { endpoint: self.endpoint_display.clone(), reason: self.scrub(reason.into()) }
    }

    /// Posts `body` (JSON) until it succeeds, fails for good, or the retries run out;
    /// returns the body of the successful response.
    pub(crate) async fn post(&self, body: &impl serde::Serialize) -> Result<Vec<u8>> {
        let body = serde_json::to_vec(body)
            .map_err(|e| Error::InvalidRequest(format!("cannot serialise the request body: {e}")))?;
        let max_attempts = self.retry.max_attempts();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let failure = match self.post_once(&body).await {
                Ok(body) => return Ok(body),
                Err(Attempt::Fatal(error)) => return Err(error),
                Err(Attempt::Retryable(failure)) => failure,
            };
            if attempt >= max_attempts {
                return Err(Error::Unavailable {
                    endpoint: self.endpoint_display.clone(),
                    attempts: attempt,
                    last_error: failure.description,
                });
            }
            let delay = self.retry.delay(attempt, failure.retry_after, rand::random::<f64>());
            tracing::warn!(
                endpoint = %self.endpoint_display,
                model = %self.model,
                attempt,
                max_attempts,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %failure.description,
                "chat request failed; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt: the body of a 2xx response, or how the attempt failed.
    async fn post_once(&self, body: &[u8]) -> Result<Vec<u8>, Attempt> {
        let response = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| self.transport_failure(e))?;
        let status = response.status();
        let retryable = status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
        let retry_after = if retryable { retry_after(response.headers()) } else { None };
        let body = self.read_body(response).await?;
        if status.is_success() {
            return Ok(body);
        }
        let message = self.scrub(api_error_message(&body, status.canonical_reason()));
        if retryable {
            Err(Attempt::Retryable(RetryableFailure { description: format!("HTTP {status}: {message}"), retry_after }))
        } else if status.is_client_error() {
            Err(Attempt::Fatal(Error::Rejected {
                endpoint: self.endpoint_display.clone(),
                status: status.as_u16(),
                message,
            }))
        } else {
            Err(Attempt::Fatal(self.malformed(format!("unexpected HTTP status {status}: {message}"))))
        }
    }

    /// The body of `response`, at most `max_reply_bytes` of it: a longer one (by its
    /// `Content-Length` or as it streams) fails the call, not retried.
    async fn read_body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, Attempt> {
        let max = self.max_reply_bytes;
        let too_long = || Attempt::Fatal(self.malformed(format!("the reply is over {max} bytes (max_reply_bytes)")));
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_long());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport_failure(e))? {
            if body.len() + chunk.len() > max {
                return Err(too_long());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Sorts a transport-level error into retryable (timeouts, connection failures, a
    /// body cut short) or fatal (the request could not be built, a redirect loop).
    fn transport_failure(&self, error: reqwest::Error) -> Attempt {
        let is_fatal = error.is_builder() || error.is_redirect();
        let reason = self.scrub(error_chain(&error.without_url()));
        let description = format!("POST {}: {reason}", self.endpoint_display);
        if is_fatal {
            Attempt::Fatal(Error::Config(description))
        } else {
            Attempt::Retryable(RetryableFailure { description, retry_after: None })
        }
    }

    /// `text` with every occurrence of the API key replaced by [`REDACTED`].
    fn scrub(&self, text: String) -> String {
        match &self.secret {
            Some(secret) if text.contains(secret.as_str()) => text.replace(secret.as_str(), REDACTED),
            _ => text,
        }
    }
}

/// A header value holding a secret, marked sensitive so that `Debug` of the request hides
/// it. Fails (without showing the value) when it cannot be sent in a header.
pub(crate) fn secret_header(value: &str) -> Result<HeaderValue> {
    let mut header = HeaderValue::from_str(value)
        .map_err(|_| Error::Config("the API key contains characters that cannot be sent in an HTTP header".into()))?;
    header.set_sensitive(true);
    Ok(header)
}

/// How one attempt failed.
enum Attempt {
    /// Do not retry; return this error.
    Fatal(Error),
    /// Worth another try.
    Retryable(RetryableFailure),
}

struct RetryableFailure {
    /// What went wrong, for logs and [`Error::Unavailable`].
    description: String,
    /// The server's `Retry-After`, when it sent one.
    retry_after: Option<Duration>,
}

/// `{base_url}/{path}`, after checking that `base_url` is an http(s) URL with a host and
/// no query or fragment. Error messages show the URL as [`shown_url`] does.
fn endpoint(base_url: &str, path: &str, secret: Option<&str>) -> Result<Url> {
    let trimmed = base_url.trim().trim_end_matches('/');
    let shown = shown_url(trimmed, secret);
    let invalid = |reason: String| Error::Config(format!("invalid chat API base URL `{shown}`: {reason}"));
    let base = Url::parse(trimmed).map_err(|e| invalid(e.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(invalid(format!("scheme must be http or https, not `{}`", base.scheme())));
    }
    if base.host_str().is_none_or(str::is_empty) {
        return Err(invalid("no host".into()));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(invalid("must not have a query or fragment".into()));
    }
    Url::parse(&format!("{trimmed}/{path}")).map_err(|e| invalid(e.to_string()))
}

/// The wait a `Retry-After` header asks for (seconds or an HTTP date).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    parse_retry_after(headers.get(RETRY_AFTER)?.to_str().ok()?, SystemTime::now())
}

/// `url` as logs, errors and `Debug` show it: any password replaced by `***`, and the API
/// key `secret`, should someone have put it in the URL, by [`REDACTED`].
pub(crate) fn shown_url(url: &str, secret: Option<&str>) -> String {
    let shown = redact_url_password(url);
    match secret.filter(|s| !s.is_empty()) {
        Some(secret) => shown.replace(secret, REDACTED),
        None => shown,
    }
}

/// `url` with any password replaced by `***`; unparsable input is returned unchanged.
fn redact_url_password(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            if parsed.set_password(Some("***")).is_ok() {
                parsed.to_string()
            } else {
                "<url with credentials>".to_owned()
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_validated() {
        let ok = endpoint("https://api.openai.com/v1/", "chat/completions", None).unwrap();
        assert_eq!(ok.as_str(), "https://api.openai.com/v1/chat/completions");
        for bad in ["", "api.openai.com/v1", "ftp://example.com/v1", "http://h/v1?x=1", "http://h/v1#f", "file:///v1"] {
            let error = endpoint(bad, "messages", None).unwrap_err();
            assert!(matches!(error, Error::Config(_)), "{bad}: {error:?}");
        }
        let shown = endpoint("ftp://user:hunter2@h/v1/sk-1", "messages", Some("sk-1")).unwrap_err().to_string();
        assert!(!shown.contains("hunter2") && !shown.contains("sk-1"), "{shown}");
    }

    #[test]
    fn secret_headers_are_sensitive_and_checked() {
        assert!(secret_header("sk-abc").unwrap().is_sensitive());
        let error = secret_header("sk-abc\nInjected: 1").unwrap_err().to_string();
        assert!(!error.contains("sk-abc"), "{error}");
    }
}

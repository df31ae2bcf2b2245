//! What an HTTP API's error answer says, for the clients of other crates: the server's
//! message out of an error body, and an error with its causes, both short enough to log.

use serde::Deserialize;

/// Longest error text kept from a server, in bytes.
pub const MAX_API_ERROR_TEXT: usize = 500;

/// An error body of the OpenAI-style APIs: `{"error": {"message": ...}}` (OpenAI,
/// Anthropic inside `{"type": "error", ...}`), or `{"error": "..."}` as some compatible
/// servers send.
#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorDetail {
    Object { message: String },
    Text(String),
}

/// The server's message in an error answer: `error.message` from a JSON error body, else
/// the raw body, else `reason` (the status's reason phrase); cut to
/// [`MAX_API_ERROR_TEXT`] bytes with `…`.
pub fn api_error_message(body: &[u8], reason: Option<&str>) -> String {
    if let Ok(parsed) = serde_json::from_slice::<ErrorBody>(body) {
        let message = match parsed.error {
            ErrorDetail::Object { message } | ErrorDetail::Text(message) => message,
        };
        return truncate_error_text(message.trim());
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() { reason.unwrap_or("empty response body").to_owned() } else { truncate_error_text(text) }
}

/// `text` cut to at most [`MAX_API_ERROR_TEXT`] bytes on a character boundary, with `…`
/// when cut.
pub fn truncate_error_text(text: &str) -> String {
    if text.len() <= MAX_API_ERROR_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_API_ERROR_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `error` and its sources, joined by `: ` (an HTTP client's own message alone says
/// little), skipping a cause its parent already ends with.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_of_both_body_shapes_and_fallbacks() {
        assert_eq!(
            api_error_message(br#"{"error": {"message": " Invalid model "}}"#, Some("Bad Request")),
            "Invalid model"
        );
        assert_eq!(api_error_message(br#"{"type": "error", "error": {"type": "x", "message": "bad"}}"#, None), "bad");
        assert_eq!(api_error_message(br#"{"error": "plain"}"#, None), "plain");
        assert_eq!(api_error_message(b"  ", Some("Not Found")), "Not Found");
        assert_eq!(api_error_message(b"", None), "empty response body");
        assert_eq!(api_error_message(b"gateway down", None), "gateway down");
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary() {
        let long = "é".repeat(400);
        let cut = truncate_error_text(&long);
        assert!(cut.ends_with('…'));
        assert!(cut.len() <= MAX_API_ERROR_TEXT + '…'.len_utf8(), "{}", cut.len());
        assert_eq!(truncate_error_text("short"), "short");
    }

    #[test]
    fn error_chains_join_causes_once() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("request failed")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = Outer(std::io::Error::other("connection refused"));
        assert_eq!(error_chain(&error), "request failed: connection refused");
    }
}

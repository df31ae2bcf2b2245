//! Credentials of each kind are found and redacted; look-alikes pass untouched.

use super::*;

/// AWS's documented example credentials, and made-up tokens in each vendor's format.
const SECRETS: &[(&str, &str)] = &[
    ("aws_access_key_id", "The deploy user is AKIAIOSFODNN7EXAMPLE in us-east-1."),
    ("aws_secret_access_key", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("aws_secret_access_key", "export AWS_SECRET_ACCESS_KEY=\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\""),
    ("github_token", "Use ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ for the CI bot."),
    ("github_token", "token github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz works"),
    ("gitlab_token", "the runner uses glpat-xYz123AbC456dEf789gHi0"),
    ("slack_token", "Slack bot token is xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp"),
    ("stripe_key", "Stripe: sk_live_51HqLyjWDarjtT1zdp7dcXyZ0123"),
    ("google_api_key", "maps key AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    ("anthropic_key", "ANTHROPIC_API_KEY is sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345"),
    ("openai_key", "old key sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"),
    (
        "jwt",
        "session eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    ),
    ("connection_string_password", "DATABASE_URL=postgres://app:S3cr3t-Pa55@db.internal:5432/prod"),
    ("password", "The staging admin password is set: password = hunter2!x"),
    ("password", "db_password: Tr0ub4dor&3"),
    ("password", "client_secret=\"9f8e7d6c5b4a3210fedc\""),
    (
        "private_key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1c7+9z5Pad7OejecsQ0bu3aozN3tihPmljnnudb9G3HECdnH\n-----END RSA PRIVATE KEY-----",
    ),
    ("private_key", "key: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU= (truncated)"),
];

/// Texts that look like credentials to a careless pattern and must pass.
const LOOK_ALIKES: &[&str] = &[
    "The password must be rotated every 90 days.",
    "password = $DB_PASSWORD",
    "password: ${DB_PASSWORD}",
    "password = os.environ['DB_PASSWORD']",
    "Set api_key: <your key here> in the config.",
    "password: ********",
    "password: required",
    "Connect with postgres://app@db.internal:5432/prod (peer auth, no password).",
    "See https://example.com:8080/docs for the token format.",
    "max_tokens=4096 keeps replies short.",
    "Use sk-learn for the baseline model.",
    "The AKIA prefix marks long-term AWS access keys.",
    "Use the key ask-ant-colony for the demo.",
    "Run `ssh-keygen -t ed25519` to make a new private key.",
    "always use type hints for function parameters",
];

#[test]
fn every_kind_of_secret_is_found_and_redacted() {
    for (kind, text) in SECRETS {
        let (redacted, kinds) = redact_secrets(text);
        assert!(kinds.contains(kind), "{kind} not found in {text:?}: {kinds:?}");
        assert!(redacted.contains(&format!("[REDACTED:{kind}]")), "{redacted}");
        for finding in find_secrets(text) {
            let secret = &text[finding.span.clone()];
            assert!(!redacted.contains(secret), "{secret:?} survived in {redacted:?}");
        }
    }
}

#[test]
fn look_alikes_pass_untouched() {
    for text in LOOK_ALIKES {
        let (redacted, kinds) = redact_secrets(text);
        assert!(kinds.is_empty(), "{text:?} flagged as {kinds:?}");
        assert_eq!(&redacted, text);
    }
}

#[test]
fn redaction_is_idempotent_and_keeps_the_rest() {
    for (_, text) in SECRETS {
        let (once, _) = redact_secrets(text);
        let (twice, kinds) = redact_secrets(&once);
        assert!(kinds.is_empty(), "{once:?} still has {kinds:?}");
        assert_eq!(once, twice);
    }
    let (redacted, _) = redact_secrets("DATABASE_URL=postgres://app:S3cr3t-Pa55@db.internal:5432/prod");
    assert_eq!(redacted, "DATABASE_URL=postgres://app:[REDACTED:connection_string_password]@db.internal:5432/prod");
}

#[test]
fn several_secrets_in_one_text_are_all_redacted() {
    let text = "AKIAIOSFODNN7EXAMPLE and aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, pw: password=hunter2!x";
    let (redacted, kinds) = redact_secrets(text);
    assert_eq!(kinds, ["aws_access_key_id", "aws_secret_access_key", "password"], "{redacted}");
    assert!(!redacted.contains("hunter2"));
    assert!(!redacted.contains("EXAMPLEKEY"));
}

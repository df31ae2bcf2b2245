//! Content hashes: SHA-256 of normalised text, the key of exact-duplicate detection.

use std::fmt;

use sha2::{Digest, Sha256};

/// SHA-256 of a text after [`normalize_content`], as 64 lowercase hex digits.
///
/// Two texts that differ only in case, in leading or trailing whitespace, in the kind
/// and amount of whitespace between words, or in invisible zero-width characters
/// (U+200B, U+200C, U+200D, U+2060, U+FEFF) have the same hash. This is the key of exact
/// duplicate detection (seed 004's `ExactMatchChecker`). Logs show only
/// [`ContentHash::fingerprint`], never the text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct ContentHash(String);

impl ContentHash {
    /// Hashes `content` after normalising it.
    pub fn of(content: &str) -> ContentHash {
        ContentHash::of_raw(&normalize_content(content))
    }

    /// Hashes `text` exactly as given, with no normalisation. Embedding caches use this
    /// form, because a model may see differences that normalisation removes.
    pub fn of_raw(text: &str) -> ContentHash {
        let digest = Sha256::digest(text.as_bytes());
        let mut hex = String::with_capacity(64);
        for byte in digest {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        ContentHash(hex)
    }

    /// Parses 64 hex digits (either case) back into a hash; `None` if `hex` is not one.
    pub fn from_hex(hex: &str) -> Option<ContentHash> {
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| ContentHash(hex.to_ascii_lowercase()))
    }

    /// The 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 16 hex digits: what logs and the seed's `hash:sha256:<16>` tag show.
    pub fn fingerprint(&self) -> &str {
        &self.0[..16]
    }

    /// The seed's tag form, `hash:sha256:<first 16 hex digits>`.
    pub fn tag(&self) -> String {
        format!("hash:sha256:{}", self.fingerprint())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({})", self.fingerprint())
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Characters [`normalize_content`] drops: zero-width space, non-joiner and joiner, word
/// joiner, and the zero-width no-break space (U+FEFF, also the byte-order mark). They are
/// invisible, so a text carrying one reads as an exact duplicate of the text without it.
pub(crate) const ZERO_WIDTH: [char; 5] = ['\u{200b}', '\u{200c}', '\u{200d}', '\u{2060}', '\u{feff}'];

/// Whether `text` is blank: nothing but whitespace and the zero-width characters
/// [`normalize_content`] drops (so its normalised form is empty). Such text is refused
/// as content.
pub fn is_blank(text: &str) -> bool {
    text.split_whitespace().all(|word| word.chars().all(|c| ZERO_WIDTH.contains(&c)))
}

/// Seed 004's normalisation: trim, lowercase, and collapse every run of whitespace to
/// one space; also drop the invisible zero-width characters U+200B, U+200C,
/// U+200D, U+2060 and U+FEFF (a byte-order mark), wherever they are.
///
/// Memories stored before zero-width characters were dropped keep the hash they were
/// stored with; only texts containing one of them hash differently than they used to.
pub fn normalize_content(content: &str) -> String {
    let mut out = String::with_capacity(content.len());
    for word in content.split_whitespace() {
        let mut visible = word.chars().filter(|c| !ZERO_WIDTH.contains(c)).peekable();
        if visible.peek().is_none() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(visible.flat_map(char::to_lowercase));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defect_17_text_of_invisible_characters_only_is_blank() {
        for blank in ["", " \n\t", "\u{200b}", "\u{feff}\u{200c} \u{200d}\u{2060}"] {
            assert!(is_blank(blank), "{blank:?}");
            assert_eq!(normalize_content(blank), "", "{blank:?}");
        }
        for text in ["a", "\u{200b}a", "-"] {
            assert!(!is_blank(text), "{text:?}");
        }
    }

    #[test]
    fn normalisation_trims_lowercases_and_collapses_whitespace() {
        assert_eq!(normalize_content("  Use\tPostgreSQL \n\n for  STORAGE "), "use postgresql for storage");
        assert_eq!(normalize_content(" \t\n"), "");
    }

    #[test]
    fn defect_11_zero_width_characters_and_bom_do_not_make_a_text_new() {
        let plain = ContentHash::of("Use PostgreSQL for storage");
        for disguised in [
            "\u{feff}Use PostgreSQL for storage",
            "Use Postgre\u{200b}SQL for storage",
            "Use \u{200c}\u{200d} PostgreSQL\u{2060} for storage\u{feff}",
            "Use \u{200b} PostgreSQL for storage",
        ] {
            assert_eq!(ContentHash::of(disguised), plain, "{disguised:?}");
        }
        assert_eq!(normalize_content("\u{200b}\u{feff}"), "");
        // Raw hashes (embedding caches) still see every character.
        assert_ne!(ContentHash::of_raw("a\u{200b}b"), ContentHash::of_raw("ab"));
    }

    #[test]
    fn equal_after_normalisation_means_equal_hash() {
        assert_eq!(ContentHash::of("Use PostgreSQL"), ContentHash::of("  use   postgresql\n"));
        assert_ne!(ContentHash::of("Use PostgreSQL"), ContentHash::of("Use PostgreSQL!"));
        assert_ne!(ContentHash::of_raw("Use PostgreSQL"), ContentHash::of_raw("use postgresql"));
    }

    #[test]
    fn known_digest_and_tag_format() {
        // sha256("abc"), from FIPS 180-2.
        let hash = ContentHash::of("ABC");
        assert_eq!(hash.as_str(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(hash.fingerprint(), "ba7816bf8f01cfea");
        assert_eq!(hash.tag(), "hash:sha256:ba7816bf8f01cfea");
        assert_eq!(format!("{hash:?}"), "ContentHash(ba7816bf8f01cfea)");
        assert_eq!(ContentHash::from_hex(&hash.as_str().to_uppercase()), Some(hash));
        assert_eq!(ContentHash::from_hex("abc"), None);
    }
}

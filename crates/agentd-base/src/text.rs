//! Small text and hashing helpers shared by tools, importers and projections.

use sha2::{Digest, Sha256};

/// Tool output cap (docs/log-format.md#event-types, docs/turns-and-providers.md#tools): 16 KiB.
pub const TOOL_OUTPUT_CAP: usize = 16 * 1024;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Largest prefix of `s` that is at most `max` bytes and ends on a char boundary.
pub fn utf8_prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Cuts `s` to at most `cap` bytes (marker included) at a UTF-8 boundary and appends a
/// marker naming the full size. Returns `None` when `s` already fits.
pub fn cap_output(s: &str, cap: usize) -> Option<String> {
    if s.len() <= cap {
        return None;
    }
    let marker = format!("\n…[truncated: showing {{}} of {} bytes]", s.len());
    // The marker's own length depends on the kept length's digits; reserve the worst case.
    let reserve = marker.len() + 20;
    let kept = utf8_prefix(s, cap.saturating_sub(reserve));
    Some(format!(
        "{kept}\n…[truncated: showing {} of {} bytes]",
        kept.len(),
        s.len()
    ))
}

/// Truncates to `max` chars: longer values become `max-1` chars plus `…` (docs/history-rules.md#checkpoint).
pub fn clip_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_output_respects_cap_and_utf8() {
        let s = "é".repeat(20_000);
        let cut = cap_output(&s, TOOL_OUTPUT_CAP).unwrap();
        assert!(cut.len() <= TOOL_OUTPUT_CAP);
        assert!(cut.contains("of 40000 bytes"));
        assert!(cap_output("short", TOOL_OUTPUT_CAP).is_none());
    }

    #[test]
    fn clip_chars_uses_ellipsis() {
        assert_eq!(clip_chars("abcdef", 4), "abc…");
        assert_eq!(clip_chars("abc", 4), "abc");
    }
}

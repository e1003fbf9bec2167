//! The base prompt every turn's developer item starts with: a text file in the
//! repository (`daemon/prompts/`), versioned by its file name and recorded in each
//! `turn_started` by version and sha256, so a Log says which one a turn was sent.

use serde_json::{json, Value};
use std::sync::OnceLock;

/// The base prompt's version (its file is `daemon/prompts/base-v<N>.md`).
pub const BASE_PROMPT_VERSION: u32 = 1;
/// The base prompt's text.
pub const BASE_PROMPT: &str = include_str!("../prompts/base-v1.md");

/// `{version, sha256}` of the base prompt, as `turn_started.base_prompt` records it.
pub fn record() -> Value {
    static SHA: OnceLock<String> = OnceLock::new();
    let sha = SHA.get_or_init(|| crate::text::sha256_hex(BASE_PROMPT.as_bytes()));
    json!({"version": BASE_PROMPT_VERSION, "sha256": sha})
}

//! The recorded project instructions (`instructions` events) as replay shows them.
//!
//! An `instructions` event's `data.files` lists what a turn read, in order (the global
//! file, then the project's from the repository root down to the workspace), each as
//! `{path, scope, sha256, bytes, text, truncated?}`. Replay renders the newest record
//! into the developer item; an empty list records that the files are gone.

use serde_json::Value;
use std::fmt::Write;

/// The heading of the rendered instructions.
pub const HEADING: &str = "Instructions from the user and the project follow, the global file first, then the \
project's from the repository root down to the workspace. Where they conflict, a later (nearer) file wins.";

/// The developer text of an `instructions` event's data; `None` when it lists no file.
pub fn render(data: &Value) -> Option<String> {
    let files = data.get("files")?.as_array()?;
    let mut out = String::new();
    for f in files {
        let (Some(path), Some(text)) = (
            f.get("path").and_then(Value::as_str),
            f.get("text").and_then(Value::as_str),
        ) else {
            continue;
        };
        if out.is_empty() {
            out.push_str(HEADING);
        }
        let _ = write!(out, "\n\n# {path}\n\n{}", text.trim_end());
    }
    (!out.is_empty()).then_some(out)
}

/// `(path, sha256)` of each file an `instructions` event's data lists, in order: what a
/// turn compares with what it read to decide whether to record again.
pub fn digests(data: &Value) -> Vec<(String, String)> {
    data.get("files")
        .and_then(Value::as_array)
        .map(|files| {
            files
                .iter()
                .map(|f| {
                    let s = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    (s("path"), s("sha256"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_files_in_order_and_nothing_for_an_empty_record() {
        let data = json!({"files": [
            {"path": "/c/AGENTS.md", "sha256": "a", "text": "global rule\n"},
            {"path": "/r/AGENTS.md", "sha256": "b", "text": "project rule"},
        ]});
        let text = render(&data).unwrap();
        assert_eq!(
            text,
            format!("{HEADING}\n\n# /c/AGENTS.md\n\nglobal rule\n\n# /r/AGENTS.md\n\nproject rule")
        );
        assert_eq!(render(&json!({"files": []})), None);
        assert_eq!(
            digests(&data),
            vec![
                ("/c/AGENTS.md".to_string(), "a".to_string()),
                ("/r/AGENTS.md".to_string(), "b".to_string())
            ]
        );
    }
}

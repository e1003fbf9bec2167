//! A `tools/call` result (the JSON the server sent) mapped to what agentd records:
//! `ok = !isError`; text blocks inline; `structuredContent` as JSON text when there is
//! no text block; resource links as `uri (name)` lines; embedded text resources inline
//! under their URI; images, audio and blobs returned as bytes for the caller to store
//! as resources (a placeholder line marks each). Pure: no I/O, never panics.

use base64::Engine;
use serde_json::Value;

/// Binary content the caller stores as a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Media {
    /// `image`, `audio` or `blob`.
    pub kind: &'static str,
    pub mime: String,
    pub bytes: Vec<u8>,
    /// The resource URI of an embedded blob.
    pub uri: Option<String>,
}

/// The mapped result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Mapped {
    pub ok: bool,
    /// Model-facing text, uncapped (the caller applies the output cap).
    pub text: String,
    /// Binary parts in content order; `text` holds a `[kind mime, N bytes #i]` line
    /// for each, `i` indexing this list.
    pub media: Vec<Media>,
    /// `structuredContent` was present.
    pub structured: bool,
    /// The content block types in order (`text`, `image`, ...).
    pub content_types: Vec<String>,
}

fn decode(b64: &str) -> Option<Vec<u8>> {
    let clean: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(clean.as_bytes())
        .ok()
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Maps the raw result object of `tools/call`.
pub fn map_result(result: &Value) -> Mapped {
    let mut m = Mapped {
        ok: !result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        ..Mapped::default()
    };
    let mut lines: Vec<String> = Vec::new();
    let mut had_text = false;
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let media = |m: &mut Mapped,
                 lines: &mut Vec<String>,
                 kind: &'static str,
                 mime: &str,
                 data: Option<&str>,
                 uri: Option<&str>| {
        match data.and_then(decode) {
            Some(bytes) => {
                let label = uri.map(|u| format!(" {u}")).unwrap_or_default();
                lines.push(format!(
                    "[{kind}{label} {mime}, {} bytes #{}]",
                    bytes.len(),
                    m.media.len()
                ));
                m.media.push(Media {
                    kind,
                    mime: mime.to_string(),
                    bytes,
                    uri: uri.map(str::to_string),
                });
            }
            None => lines.push(format!("[{kind} {mime}: data is not valid base64]")),
        }
    };
    for b in blocks {
        let ty = str_of(b, "type").unwrap_or("unknown");
        m.content_types.push(ty.to_string());
        match ty {
            "text" => {
                had_text = true;
                lines.push(str_of(b, "text").unwrap_or_default().to_string());
            }
            "image" | "audio" => {
                let kind = if ty == "image" { "image" } else { "audio" };
                let mime = str_of(b, "mimeType").unwrap_or("application/octet-stream");
                media(&mut m, &mut lines, kind, mime, str_of(b, "data"), None);
            }
            "resource_link" => {
                let uri = str_of(b, "uri").unwrap_or("?");
                lines.push(match str_of(b, "name") {
                    Some(n) if !n.is_empty() => format!("{uri} ({n})"),
                    _ => uri.to_string(),
                });
            }
            "resource" => {
                let r = b.get("resource").unwrap_or(&Value::Null);
                let uri = str_of(r, "uri").unwrap_or("?");
                if let Some(t) = str_of(r, "text") {
                    had_text = true;
                    lines.push(format!("[resource {uri}]\n{t}"));
                } else {
                    let mime = str_of(r, "mimeType").unwrap_or("application/octet-stream");
                    media(
                        &mut m,
                        &mut lines,
                        "blob",
                        mime,
                        str_of(r, "blob"),
                        Some(uri),
                    );
                }
            }
            other => lines.push(format!("[unsupported content type `{other}`]")),
        }
    }
    if let Some(s) = result.get("structuredContent") {
        m.structured = true;
        if !had_text {
            lines.push(serde_json::to_string(s).unwrap_or_default());
        }
    }
    m.text = lines.join("\n");
    if m.text.is_empty() {
        m.text = if m.ok {
            "(no content)".into()
        } else {
            "(error without content)".into()
        };
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_error_and_structured() {
        let r = map_result(&json!({"content": [{"type": "text", "text": "Echo: hi"}]}));
        assert!(r.ok);
        assert_eq!(r.text, "Echo: hi");
        let e = map_result(&json!({"isError": true, "content": [{"type": "text", "text": "bad"}]}));
        assert!(!e.ok);
        assert_eq!(e.text, "bad");
        let s = map_result(&json!({"content": [], "structuredContent": {"t": 1}}));
        assert_eq!(s.text, r#"{"t":1}"#);
        assert!(s.structured);
        let both = map_result(&json!({"content": [{"type": "text", "text": "x"}],
            "structuredContent": {"t": 1}}));
        assert_eq!(both.text, "x");
    }

    #[test]
    fn links_media_and_resources() {
        let r = map_result(&json!({"content": [
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            {"type": "image", "mimeType": "image/png", "data": "%%%"},
            {"type": "resource", "resource": {"uri": "mem://t", "text": "hello"}},
            {"type": "resource", "resource": {"uri": "mem://b", "mimeType": "application/zip", "blob": "AAEC"}},
        ]}));
        assert_eq!(r.media.len(), 2);
        assert_eq!(r.media[0].bytes, b"\x89PNG\r\n\x1a\n");
        assert_eq!(r.media[1].bytes, vec![0, 1, 2]);
        assert_eq!(r.media[1].uri.as_deref(), Some("mem://b"));
        let lines: Vec<&str> = r.text.lines().collect();
        assert_eq!(lines[0], "file:///a (a)");
        assert_eq!(lines[1], "[image image/png, 8 bytes #0]");
        assert!(lines[2].contains("not valid base64"));
        assert_eq!(lines[3], "[resource mem://t]");
        assert_eq!(lines[4], "hello");
        assert_eq!(lines[5], "[blob mem://b application/zip, 3 bytes #1]");
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        for v in [
            json!(null),
            json!([]),
            json!({"content": 3}),
            json!({"content": [1, {}]}),
        ] {
            let r = map_result(&v);
            assert!(!r.text.is_empty());
        }
    }
}

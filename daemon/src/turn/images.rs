//! A prompt's images (docs/turns-and-providers.md#images): `agentd/turn`'s `images`
//! checked and read before anything is recorded, then stored once each as a session
//! resource named by its sha256; the `user_message` records only the references
//! (`images[{sha256, mime, bytes}]`), and each provider request loads the bytes again
//! (`crate::context::load_images`).

use agentd_proto::rpc::{TurnImage, MAX_TURN_IMAGES, MAX_TURN_IMAGE_BYTES};
use agentd_proto::AgentError;
use serde_json::{json, Value};
use std::path::Path;

/// An image checked and read, not stored yet.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub bytes: Vec<u8>,
    pub mime: &'static str,
    /// The bytes' sha256 (hex), worked out once: the image's name in the store and
    /// what a request's idempotency hash covers of it.
    pub sha256: String,
}

/// The media type of an image's bytes from their signature: PNG, JPEG, GIF or WebP.
pub fn sniff(b: &[u8]) -> Option<&'static str> {
    agentd_proto::rpc::image_mime(b)
}

const KNOWN: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

fn refused(name: &str, why: impl std::fmt::Display) -> AgentError {
    AgentError::invalid_args(format!("image {name}: {why}"))
        .with_details(json!({"field": "images", "image": name}))
}

/// Checks and reads `images` (paths relative to `workspace`); the error names the
/// image (its path, or `images[i]` for inline data).
pub fn prepare(images: &[TurnImage], workspace: &Path) -> Result<Vec<Prepared>, AgentError> {
    use base64::Engine;
    if images.len() > MAX_TURN_IMAGES {
        return Err(AgentError::invalid_args(format!(
            "a turn carries at most {MAX_TURN_IMAGES} images (got {})",
            images.len()
        )));
    }
    let max = MAX_TURN_IMAGE_BYTES;
    let mut out = Vec::with_capacity(images.len());
    for (i, img) in images.iter().enumerate() {
        let (name, bytes) = match (&img.path, &img.data) {
            (Some(p), None) => {
                let name = agentd_base::text::clip_chars(p, 200);
                let path = workspace.join(p);
                let meta = std::fs::metadata(&path).map_err(|e| refused(&name, e))?;
                if !meta.is_file() {
                    return Err(refused(&name, "not a regular file"));
                }
                if meta.len() > max {
                    return Err(refused(
                        &name,
                        format!("{} bytes, over the {max}-byte (20 MiB) limit", meta.len()),
                    ));
                }
                let bytes = std::fs::read(&path).map_err(|e| refused(&name, e))?;
                (name, bytes)
            }
            (None, Some(d)) => {
                let name = format!("images[{i}]");
                // base64 is 4 characters per 3 bytes: refuse before decoding.
                if (d.len() as u64) / 4 * 3 > max + 3 {
                    return Err(refused(
                        &name,
                        format!("over the {max}-byte (20 MiB) limit"),
                    ));
                }
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(d.trim())
                    .map_err(|e| refused(&name, format!("`data` is not base64: {e}")))?;
                if bytes.len() as u64 > max {
                    return Err(refused(
                        &name,
                        format!("over the {max}-byte (20 MiB) limit"),
                    ));
                }
                (name, bytes)
            }
            _ => {
                return Err(refused(
                    &format!("images[{i}]"),
                    "give either `path` or `data` (with `mime_type`)",
                ))
            }
        };
        let Some(mime) = sniff(&bytes) else {
            return Err(refused(&name, "not a PNG, JPEG, GIF or WebP image"));
        };
        if let Some(given) = &img.mime_type {
            if !KNOWN.contains(&given.as_str()) {
                return Err(refused(
                    &name,
                    format!(
                        "mime_type `{}` is not image/png, image/jpeg, image/gif or image/webp",
                        agentd_base::text::clip_chars(given, 64)
                    ),
                ));
            }
            if given != mime {
                return Err(refused(&name, format!("the bytes are {mime}, not {given}")));
            }
        }
        let sha256 = crate::text::sha256_hex(&bytes);
        out.push(Prepared {
            bytes,
            mime,
            sha256,
        });
    }
    Ok(out)
}

/// Stores each image once, in the Log store when it keeps images itself (PostgreSQL),
/// else in the session's resources `dir`; the references the `user_message` records.
pub fn store(
    dir: &Path,
    logs: &dyn crate::store::LogStore,
    images: &[Prepared],
) -> Result<Value, AgentError> {
    let mut refs = Vec::with_capacity(images.len());
    for img in images {
        let sha = &img.sha256;
        match logs.put_image(sha, img.mime, &img.bytes) {
            Some(r) => r?,
            None => {
                crate::tools::store_resource(dir, &img.bytes)?;
            }
        }
        refs.push(json!({"sha256": sha, "mime": img.mime, "bytes": img.bytes.len()}));
    }
    Ok(Value::Array(refs))
}

/// A steer's images, read and checked as a turn's are (`prepare`, against the session's
/// workspace); none for none.
pub async fn prepare_for(
    h: &crate::session::SessionHandle,
    images: &[agentd_proto::rpc::TurnImage],
) -> Result<Vec<Prepared>, AgentError> {
    if images.is_empty() {
        return Ok(Vec::new());
    }
    let ws = h.query(|st| st.workspace().to_string()).await?;
    let list = images.to_vec();
    crate::filesystem::blocking(move || prepare(&list, Path::new(&ws))).await?
}

/// The digests of prepared images, in order: what a request's idempotency hash covers
/// of them.
pub fn digests(images: &[Prepared]) -> Vec<String> {
    images.iter().map(|i| i.sha256.clone()).collect()
}

/// A tool result's images (`read_file` of an image, an MCP tool's image content; both
/// stored as the session's resources) kept in the Log store too when it keeps images
/// itself (PostgreSQL), so any daemon of it can send them again. Only the images a
/// request may send are kept ([`image_refs`]). A failure leaves them in the resources
/// only (this daemon still sends them; another sends their description).
///
/// [`image_refs`]: crate::history::replay::image_refs
pub async fn keep_result_images(
    logs: std::sync::Arc<dyn crate::store::LogStore>,
    dir: std::path::PathBuf,
    data: &Value,
) {
    let list: Vec<(String, String)> = crate::history::replay::image_refs(data)
        .into_iter()
        .map(|i| (i.sha256, i.mime))
        .collect();
    if list.is_empty() {
        return;
    }
    let _ = crate::filesystem::blocking(move || {
        for (sha, mime) in list {
            let Ok(bytes) = std::fs::read(dir.join(&sha)) else {
                continue;
            };
            if crate::text::sha256_hex(&bytes) != sha {
                continue;
            }
            if let Some(Err(e)) = logs.put_image(&sha, &mime, &bytes) {
                tracing::warn!(sha256 = %sha, error = %e.message, "tool result image not kept in the store");
            }
        }
    })
    .await;
}

/// The session's provider input with the bytes of its images loaded (a store that
/// keeps images first, then the session's resources `dir`): a prompt's always, a tool
/// result's when the provider has a wire (`render`). A prompt image that cannot be
/// loaded fails the request `not_found` naming its digest.
pub fn loaded_replay(
    st: &crate::session::SessionState,
    ctx: &crate::history::replay::ReplayContext,
    dir: &Path,
    render: Option<crate::provider::dialect::Render>,
    logs: &dyn crate::store::LogStore,
) -> Result<crate::history::replay::Replay, AgentError> {
    let mut replay = st.fold.replay(ctx);
    let missing = crate::context::load_images(&mut replay.items, dir, render.is_some(), Some(logs));
    match missing.first() {
        Some(sha) => Err(self::missing(sha)),
        None => Ok(replay),
    }
}

/// Stores a queued turn's images now (as [`store`] does), so `turn_queued` records
/// their references and the bytes need not wait in memory; the turn's `user_message`
/// records the same references when it starts.
pub async fn store_queued(
    registry: &crate::registry::Registry,
    sid: &str,
    images: Vec<Prepared>,
) -> Result<Value, AgentError> {
    let dir = registry.home.resources_dir(sid)?;
    let logs = registry.store.clone();
    crate::filesystem::blocking(move || store(&dir, &*logs, &images)).await?
}

/// The error of a prompt image whose resource is gone.
pub fn missing(sha256: &str) -> AgentError {
    AgentError::not_found(format!(
        "image resource sha256 {sha256} is missing from the session's resources (and the store)"
    ))
    .with_details(json!({"sha256": sha256, "resource": format!("resources/{sha256}")}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_decide_the_type() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(sniff(&[0xff, 0xd8, 0xff, 0xe0]), Some("image/jpeg"));
        assert_eq!(sniff(b"GIF89a.."), Some("image/gif"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WAVE"), None);
        assert_eq!(sniff(b"fn main() {}"), None);
        assert_eq!(sniff(b""), None);
    }
}

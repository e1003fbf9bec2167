//! `/image PATH`: images attached to the next prompt (docs/chat.md#commands). Each is
//! checked when attached (a regular file, its first bytes a PNG, JPEG, GIF or WebP
//! signature, at most 20 MiB, 16 per prompt) and sent as `agentd/turn`'s
//! `images: [{path}]` with an absolute path; the daemon reads and checks it again.

use agentd_proto::rpc::{image_mime, MAX_TURN_IMAGES, MAX_TURN_IMAGE_BYTES};
use std::io::Read;
use std::path::{Path, PathBuf};

/// An image attached with `/image`, sent with the next prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingImage {
    /// Absolute (the daemon reads it).
    pub path: PathBuf,
    pub mime: &'static str,
    pub bytes: u64,
}

impl PendingImage {
    /// The file name, for the composer's line.
    pub fn name(&self) -> String {
        self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into(),
        )
    }
}

/// `agentd/turn`'s `images` for `images`: `[{path}]`.
pub fn param(images: &[PendingImage]) -> Vec<agentd_proto::rpc::TurnImage> {
    images
        .iter()
        .map(|i| agentd_proto::rpc::TurnImage {
            path: Some(i.path.to_string_lossy().into_owned()),
            data: None,
            mime_type: None,
        })
        .collect()
}

/// `/image ARG` on `images`: `PATH` (relative to `cwd`, `~/` for home) checks and
/// attaches a file, no argument lists what is attached, `clear` drops it. The notice
/// to show, or the error (nothing attached).
pub fn command(images: &mut Vec<PendingImage>, arg: &str, cwd: &Path) -> Result<String, String> {
    match arg {
        "" if images.is_empty() => {
            return Ok("no image attached: /image PATH attaches one to the next prompt".into())
        }
        "" => {
            let list: Vec<String> = images
                .iter()
                .map(|i| format!("{} ({}, {} bytes)", i.path.display(), i.mime, i.bytes))
                .collect();
            return Ok(format!("attached to the next prompt: {}", list.join(", ")));
        }
        "clear" => {
            let n = images.len();
            images.clear();
            return Ok(format!("{n} attached image(s) dropped"));
        }
        _ => {}
    }
    if images.len() >= MAX_TURN_IMAGES {
        return Err(format!(
            "/image: a prompt carries at most {MAX_TURN_IMAGES} images"
        ));
    }
    let img = check(arg, cwd).map_err(|why| format!("/image {arg}: {why}"))?;
    let said = format!(
        "image {} ({}, {} bytes) attached to the next prompt",
        img.path.display(),
        img.mime,
        img.bytes
    );
    images.push(img);
    Ok(said)
}

/// Checks `arg` names an image within the limits; why not, otherwise.
fn check(arg: &str, cwd: &Path) -> Result<PendingImage, String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let given = match (arg.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => h.join(rest),
        _ => PathBuf::from(arg),
    };
    let path = if given.is_absolute() {
        given
    } else {
        cwd.join(given)
    };
    let meta = std::fs::metadata(&path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_TURN_IMAGE_BYTES {
        return Err(format!("{} bytes, over the 20 MiB limit", meta.len()));
    }
    let mut head = Vec::with_capacity(12);
    std::fs::File::open(&path)
        .and_then(|f| f.take(12).read_to_end(&mut head))
        .map_err(|e| e.to_string())?;
    let mime = image_mime(&head).ok_or("not a PNG, JPEG, GIF or WebP image")?;
    Ok(PendingImage {
        path,
        mime,
        bytes: meta.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attaches_images_only_and_lists_and_clears() {
        let dir = std::env::temp_dir().join(format!(
            "agentctl-attach-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir).unwrap();
        struct Gone(PathBuf);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let _gone = Gone(dir.clone());
        let dir = dir.as_path();
        std::fs::write(dir.join("a.gif"), b"GIF89a\x01\x00\x01\x00").unwrap();
        std::fs::write(dir.join("t.png"), b"text, not an image").unwrap();
        std::fs::create_dir(dir.join("d.png")).unwrap();
        let mut imgs = Vec::new();
        let e = command(&mut imgs, "t.png", dir).unwrap_err();
        assert_eq!(e, "/image t.png: not a PNG, JPEG, GIF or WebP image");
        let e = command(&mut imgs, "d.png", dir).unwrap_err();
        assert_eq!(e, "/image d.png: not a regular file");
        assert!(imgs.is_empty());
        let said = command(&mut imgs, "a.gif", dir).unwrap();
        assert!(said.ends_with("(image/gif, 10 bytes) attached to the next prompt"));
        assert_eq!(imgs[0].path, dir.join("a.gif"));
        assert_eq!(imgs[0].name(), "a.gif");
        assert!(command(&mut imgs, "", dir)
            .unwrap()
            .contains("a.gif (image/gif, 10 bytes)"));
        assert_eq!(
            command(&mut imgs, "clear", dir).unwrap(),
            "1 attached image(s) dropped"
        );
        assert!(imgs.is_empty());
    }
}

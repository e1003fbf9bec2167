//! `path`: bytes as a tool's path argument (the first byte picks "must exist" or "for
//! write") in a workspace full of symlinks: inside, outside, relative escapes, loops,
//! dangling. An accepted path is inside the workspace, and opening it beneath the
//! workspace descriptor reaches the same file.

use crate::scratch;
use agentd::tools::{confine, workspace};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn path_ws() -> &'static (PathBuf, PathBuf) {
    static WS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    WS.get_or_init(|| {
        use std::os::unix::fs::symlink;
        let root = scratch().join("path");
        let ws = root.join("ws");
        let out = root.join("outside");
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(ws.join("f"), "x").unwrap();
        std::fs::write(ws.join("a/b/g"), "x").unwrap();
        std::fs::write(out.join("secret"), "s").unwrap();
        let links: &[(&str, &Path)] = &[
            ("in", Path::new("a")),
            ("deep", Path::new("a/b")),
            ("up", Path::new("..")),
            ("out", &out),
            ("rel_out", Path::new("../outside")),
            ("loop1", Path::new("loop2")),
            ("loop2", Path::new("loop1")),
            ("dangling", Path::new("/nonexistent/x")),
            ("self", Path::new(".")),
        ];
        for (name, target) in links {
            let _ = symlink(target, ws.join(name));
        }
        let _ = symlink("../../f", ws.join("a/b/back"));
        let ws = std::fs::canonicalize(&ws).unwrap();
        (ws, std::fs::canonicalize(&out).unwrap())
    })
}

/// Bytes as a tool's path argument in a workspace full of symlinks (inside, outside,
/// relative escapes, loops, dangling): an accepted path is inside the workspace, and
/// opening it beneath the workspace descriptor reaches the same file.
pub fn run(data: &[u8]) {
    let (ws, _out) = path_ws();
    let mode = if data.first().is_some_and(|b| b % 2 == 0) {
        workspace::Resolve::Existing
    } else {
        workspace::Resolve::ForWrite
    };
    let text = String::from_utf8_lossy(data.get(1..).unwrap_or_default());
    let p: String = text.chars().take(512).collect();
    if let Ok(resolved) = workspace::resolve(ws, &p, mode) {
        {
            assert!(
                resolved.starts_with(ws),
                "resolve({p:?}) = {} is outside the workspace",
                resolved.display()
            );
            if mode == workspace::Resolve::Existing {
                let rel = resolved.strip_prefix(ws).unwrap();
                let root = confine::open_root(ws).unwrap();
                let fd = confine::open_beneath(&root, rel, libc::O_PATH).unwrap_or_else(|e| {
                    panic!(
                        "resolve({p:?}) accepted {} but the confined open failed: {e}",
                        resolved.display()
                    )
                });
                use std::os::fd::AsRawFd;
                let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
                assert_eq!(
                    real, resolved,
                    "confined open reached another file for {p:?}"
                );
            }
        }
    }
}

//! Protected paths without a mount namespace (the degraded level): Landlock cannot take
//! `.git/hooks` out of a writable workspace, so the daemon saves the protected paths
//! before the command and puts back whatever the command changed after it (its
//! processes are all gone by then), reporting each restore as a denial.
//!
//! Restoring never follows a symlink: a path whose parent chain (below the writable
//! root) is no longer plain directories is left alone and reported.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const MAX_FILE: u64 = 1 << 20;
const MAX_ENTRIES: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Saved {
    Absent,
    File(Vec<u8>, u32),
    Dir(BTreeMap<OsString, Saved>),
    Link(PathBuf),
    /// Too large or not a file, directory or symlink: compared by nothing, left alone.
    Opaque,
}

fn save(p: &Path, depth: usize, budget: &mut usize) -> Saved {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return Saved::Absent;
    };
    if *budget == 0 {
        return Saved::Opaque;
    }
    *budget -= 1;
    let ft = m.file_type();
    if ft.is_symlink() {
        return std::fs::read_link(p).map_or(Saved::Opaque, Saved::Link);
    }
    if ft.is_file() {
        if m.len() > MAX_FILE {
            return Saved::Opaque;
        }
        return std::fs::read(p).map_or(Saved::Opaque, |b| {
            Saved::File(b, m.permissions().mode() & 0o7777)
        });
    }
    if ft.is_dir() && depth < 4 {
        let mut out = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                out.insert(e.file_name(), save(&e.path(), depth + 1, budget));
            }
        }
        return Saved::Dir(out);
    }
    Saved::Opaque
}

fn remove(p: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Err(_) => Ok(()),
        Ok(m) if m.file_type().is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
    }
}

fn put(p: &Path, s: &Saved) -> std::io::Result<()> {
    match s {
        Saved::Absent => remove(p),
        Saved::Opaque => Ok(()),
        Saved::File(b, mode) => {
            remove(p)?;
            std::fs::write(p, b)?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(*mode))
        }
        Saved::Link(t) => {
            remove(p)?;
            std::os::unix::fs::symlink(t, p)
        }
        Saved::Dir(entries) => {
            let is_dir = std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir());
            if !is_dir {
                remove(p)?;
                std::fs::create_dir(p)?;
            }
            // Entries the command added go; changed ones are put back.
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    if !entries.contains_key(&e.file_name()) {
                        remove(&e.path())?;
                    }
                }
            }
            for (name, s) in entries {
                let child = p.join(name);
                let now = save(&child, 0, &mut MAX_ENTRIES.clone());
                if &now != s {
                    put(&child, s)?;
                }
            }
            Ok(())
        }
    }
}

/// The protected paths as they were before a command.
#[derive(Debug, Default)]
pub struct Snapshot {
    saved: Vec<(PathBuf, PathBuf, Saved)>,
}

impl Snapshot {
    /// Saves each protected path (with the writable root it lies in).
    pub fn take(protected: &[PathBuf], roots: &[PathBuf]) -> Snapshot {
        let mut saved = Vec::new();
        for p in protected {
            let Some(root) = roots
                .iter()
                .filter(|r| p.starts_with(r))
                .max_by_key(|r| r.as_os_str().len())
            else {
                continue;
            };
            let mut budget = MAX_ENTRIES;
            saved.push((p.clone(), root.clone(), save(p, 0, &mut budget)));
        }
        Snapshot { saved }
    }

    /// Puts back what changed; returns `(path, what happened)` for each change.
    pub fn restore(&self) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        for (p, root, before) in &self.saved {
            let mut budget = MAX_ENTRIES;
            if &save(p, 0, &mut budget) == before {
                continue;
            }
            // Every directory from the root down to the parent must still be one.
            let plain = p.parent().is_some_and(|parent| {
                parent
                    .ancestors()
                    .take_while(|a| a.starts_with(root))
                    .all(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_dir()))
            });
            let what = if !plain {
                "changed; not restored: a directory on its path was replaced".to_string()
            } else {
                match put(p, before) {
                    Ok(()) => "changed by the command; restored".to_string(),
                    Err(e) => format!("changed; restoring failed: {e}"),
                }
            };
            out.push((p.clone(), what));
        }
        out
    }
}

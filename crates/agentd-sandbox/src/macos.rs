//! The macOS mechanism: a Seatbelt profile for `/usr/bin/sandbox-exec` generated from
//! the effective policy. Deny by default; reads everywhere but the hidden set; writes
//! only beneath the writable roots and the private tmp, minus the protected paths (and
//! no unlinking of them or their parents); no network and no Unix sockets except the
//! granted network; agentd's socket directory always denied.
//!
//! The text is pure (golden-tested on every OS); running it is macOS-only.

use crate::policy::{EffectivePolicy, Network};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// A Scheme string literal.
fn lit(p: &Path) -> String {
    let s = p.to_string_lossy();
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The profile text.
pub fn profile(
    policy: &EffectivePolicy,
    protected: &[PathBuf],
    tmp: &Path,
    socket_dir: Option<&Path>,
) -> String {
    let mut s = String::new();
    s.push_str("(version 1)\n(deny default)\n");
    s.push_str("(allow process-exec process-fork)\n");
    s.push_str("(allow signal (target same-sandbox))\n");
    s.push_str("(allow process-info* (target same-sandbox))\n");
    s.push_str("(allow sysctl-read)\n");
    s.push_str("(allow mach-lookup (global-name \"com.apple.system.opendirectoryd.libinfo\"))\n");
    s.push_str("(allow file-ioctl (literal \"/dev/tty\") (regex #\"^/dev/ttys[0-9]+$\"))\n");
    s.push_str("(allow pseudo-tty)\n");
    s.push_str("\n; reads: everything but the hidden set\n(allow file-read*)\n");
    for h in &policy.hidden {
        let _ = writeln!(s, "(deny file-read* file-write* (subpath {}))", lit(h));
    }
    s.push_str("\n; writes: the roots and the private tmp, minus protected paths\n");
    s.push_str("(allow file-write* (literal \"/dev/null\") (literal \"/dev/tty\")");
    let _ = write!(s, " (subpath {})", lit(tmp));
    for r in &policy.writable_roots {
        let _ = write!(s, " (subpath {})", lit(r));
    }
    s.push_str(")\n");
    let mut unlink_denied: Vec<&Path> = Vec::new();
    for p in protected {
        let _ = writeln!(s, "(deny file-write* (literal {0}) (subpath {0}))", lit(p));
        let mut anc = p.parent();
        while let Some(a) = anc {
            if policy.writable_roots.iter().any(|r| a == r.as_path()) || a == Path::new("/") {
                break;
            }
            if !unlink_denied.contains(&a) {
                unlink_denied.push(a);
                let _ = writeln!(s, "(deny file-write-unlink (literal {}))", lit(a));
            }
            anc = a.parent();
        }
    }
    s.push_str("\n; network\n");
    match policy.network {
        Network::None => s.push_str("(deny network*)\n"),
        Network::Host => s.push_str(
            "(allow network-outbound (remote ip))\n(allow network-inbound (local ip))\n(allow network-bind (local ip))\n(allow system-socket)\n(deny network* (remote unix-socket))\n",
        ),
    }
    if let Some(d) = socket_dir {
        let _ = writeln!(
            s,
            "(deny file-read* file-write* (subpath {0}))\n(deny network* (remote unix-socket (subpath {0})))",
            lit(d)
        );
    }
    s
}

/// Runs `argv` under `sandbox-exec` with the profile (absolute path only, never one
/// found on `PATH`).
#[cfg(target_os = "macos")]
pub fn command(profile: &str, argv: &[String]) -> std::process::Command {
    let mut c = std::process::Command::new("/usr/bin/sandbox-exec");
    c.arg("-p").arg(profile).arg("--").args(argv);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{effective, Inputs};

    #[test]
    fn golden_profile() {
        let p = effective(&Inputs {
            workspace: "/Users/u/ws".into(),
            home: Some("/Users/u".into()),
            agentd_dirs: vec!["/Users/u/Library/Application Support/agentd".into()],
            agentd_socket: Some("/Users/u/Library/Caches/agentd/agentd.sock".into()),
            ..Default::default()
        });
        let text = profile(
            &p,
            &[
                "/Users/u/ws/.git/hooks".into(),
                "/Users/u/ws/.git/config".into(),
            ],
            Path::new("/private/tmp/agentd-cmd-1"),
            Some(Path::new("/Users/u/Library/Caches/agentd")),
        );
        let golden = include_str!("../tests/golden/macos.sb");
        if std::env::var_os("AGENTD_UPDATE_GOLDEN").is_some() {
            std::fs::write(
                concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/macos.sb"),
                &text,
            )
            .unwrap();
        }
        assert_eq!(text, golden);
    }

    #[test]
    fn quotes_are_escaped() {
        assert_eq!(lit(Path::new("/a\"b\\c")), "\"/a\\\"b\\\\c\"");
    }
}

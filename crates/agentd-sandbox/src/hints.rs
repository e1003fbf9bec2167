//! Denials recognized in a command's output, each with a structured hint naming the
//! grant that would allow it ("write to ~/.cargo/registry denied by the sandbox; grant
//! `cache:cargo`"), so the model is not left with a bare EPERM.

use crate::policy::{is_within, CachePreset, EffectivePolicy, Network};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One recognized denial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// `write`, `hidden`, `protected` or `network`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    pub hint: String,
}

const FS_ERRORS: &[&str] = &[
    "Permission denied",
    "Read-only file system",
    "Operation not permitted",
    "EACCES",
    "EROFS",
    "EPERM",
];

const NET_ERRORS: &[&str] = &[
    "Network is unreachable",
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "failed to lookup address",
    "getaddrinfo",
    "ENETUNREACH",
    "EAI_AGAIN",
    "socket: Operation not permitted",
    "ENOTCACHED",
];

/// Paths mentioned in a line: quoted (`'…'`, `‘…’`, `"…"`) or a token starting with `/`
/// and ending at `:` or whitespace.
fn paths_in(line: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (open, close) in [('\'', '\''), ('‘', '’'), ('"', '"')] {
        let mut rest = line;
        while let Some(i) = rest.find(open) {
            let after = &rest[i + open.len_utf8()..];
            let Some(j) = after.find(close) else { break };
            let q = &after[..j];
            if q.starts_with('/') {
                out.push(PathBuf::from(q));
            }
            rest = &after[j + close.len_utf8()..];
        }
    }
    if out.is_empty() {
        for tok in line.split(|c: char| c.is_whitespace() || c == ':' || c == ',') {
            if tok.starts_with('/') && tok.len() > 1 {
                out.push(PathBuf::from(tok));
            }
        }
    }
    out
}

fn classify(p: &Path, policy: &EffectivePolicy, protected: &[PathBuf]) -> Option<Denial> {
    let path = Some(p.to_path_buf());
    if policy.hidden.iter().any(|h| is_within(p, h)) {
        return Some(Denial {
            kind: "hidden".into(),
            path,
            hint: format!(
                "{} is hidden by the sandbox (credentials and sockets); ask for a one-call \
                 grant to read it if it is really needed",
                p.display()
            ),
        });
    }
    if protected.iter().any(|h| is_within(p, h)) {
        return Some(Denial {
            kind: "protected".into(),
            path,
            hint: format!(
                "{} is protected (read-only) by the sandbox: git, editors, direnv or CI run \
                 it outside the sandbox; in `ask` mode ask for a write grant for it",
                p.display()
            ),
        });
    }
    if policy.writable_roots.iter().any(|r| is_within(p, r)) {
        return None;
    }
    // Only the degraded level (no private /tmp) refuses writes here.
    if p.starts_with("/tmp") {
        return Some(Denial {
            kind: "write".into(),
            path,
            hint: format!(
                "write to {} denied: at this sandbox level (no user namespaces) the host's /tmp                  is not writable; use $TMPDIR (a private directory), e.g. `mktemp -d`",
                p.display()
            ),
        });
    }
    let home = policy
        .hidden
        .iter()
        .find(|h| h.ends_with(".ssh"))
        .and_then(|h| h.parent())
        .map(Path::to_path_buf);
    let env: BTreeMap<String, String> = policy.env.clone();
    for c in CachePreset::ALL {
        if c.roots(home.as_deref(), &env)
            .iter()
            .any(|r| is_within(p, r))
        {
            let hint = if policy.caches.contains(&c) {
                // Granted, yet read-only: the degraded level (or a refused overlay).
                format!(
                    "write to {} denied: `{}` is granted but read-only at this sandbox level                      (a command could otherwise change code the user's own builds run);                      download or extract it outside the sandbox first (for cargo:                      `cargo fetch` then one `cargo build` there)",
                    p.display(),
                    c.name()
                )
            } else {
                format!(
                    "write to {} denied by the sandbox; grant `{}` (writes go to a layer of                      this workspace's own, never to the cache your own builds read)",
                    p.display(),
                    c.name()
                )
            };
            return Some(Denial {
                kind: "write".into(),
                path,
                hint,
            });
        }
    }
    Some(Denial {
        kind: "write".into(),
        path,
        hint: format!(
            "write to {} denied by the sandbox (mode {}); add it to [sandbox] writable_roots \
             or ask for a write grant",
            p.display(),
            policy.mode.as_str()
        ),
    })
}

/// Why `git config` fails inside the sandbox, and what to do instead.
pub const GIT_CONFIG_HINT: &str = "git config files are read-only in the sandbox (a config \
     key such as core.fsmonitor or core.hooksPath runs code when the user next runs git); \
     to set user.name or user.email in this repository call the `git_config` tool; for \
     one command use `git -c user.name=NAME -c user.email=EMAIL commit …` or the \
     GIT_AUTHOR_NAME/GIT_AUTHOR_EMAIL/GIT_COMMITTER_NAME/GIT_COMMITTER_EMAIL variables \
     ([sandbox] env), or ask the user to run `git config` outside the sandbox";

/// Denials seen in `output` (at most 8, deduplicated).
pub fn denials(output: &str, policy: &EffectivePolicy, protected: &[PathBuf]) -> Vec<Denial> {
    let mut out: Vec<Denial> = Vec::new();
    for line in output.lines() {
        if out.len() >= 8 {
            break;
        }
        if policy.network == Network::None && NET_ERRORS.iter().any(|e| line.contains(e)) {
            let d = Denial {
                kind: "network".into(),
                path: None,
                hint: "network is off in this sandbox; grant network `host`".into(),
            };
            if !out.contains(&d) {
                out.push(d);
            }
            continue;
        }
        // `git config` renames a lock file over the read-only `.git/config` mount.
        if line.contains("config file")
            && (line.contains("Device or resource busy") || line.contains("Read-only file system"))
        {
            let d = Denial {
                kind: "protected".into(),
                path: None,
                hint: GIT_CONFIG_HINT.into(),
            };
            if !out.contains(&d) {
                out.push(d);
            }
            continue;
        }
        // A hidden directory is an empty mount: reads there fail with ENOENT.
        let missing = line.contains("No such file or directory") || line.contains("ENOENT");
        if !missing && !FS_ERRORS.iter().any(|e| line.contains(e)) {
            continue;
        }
        for p in paths_in(line) {
            let d = classify(&p, policy, protected).filter(|d| !missing || d.kind == "hidden");
            if let Some(d) = d {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{effective, Inputs};

    fn policy() -> EffectivePolicy {
        effective(&Inputs {
            workspace: "/home/u/ws".into(),
            home: Some("/home/u".into()),
            ..Default::default()
        })
    }

    #[test]
    fn cache_write_names_the_preset() {
        let d = denials(
            "error: failed to open `/home/u/.cargo/registry/index/x`\nmkdir: cannot create directory '/home/u/.cargo/registry/cache': Permission denied\n",
            &policy(),
            &[],
        );
        assert_eq!(d.len(), 1);
        assert!(d[0].hint.contains("grant `cache:cargo`"), "{:?}", d);
    }

    #[test]
    fn hidden_protected_outside_and_network() {
        let prot = vec![PathBuf::from("/home/u/ws/.git/hooks")];
        let out = "cat: /home/u/.ssh/id_ed25519: No such file or directory\n\
                   bash: /home/u/.ssh/id_rsa: Permission denied\n\
                   bash: /home/u/ws/.git/hooks/post-commit: Read-only file system\n\
                   touch: cannot touch '/etc/x': Permission denied\n\
                   touch: cannot touch '/home/u/ws/ok': Permission denied\n\
                   curl: (6) Could not resolve host: example.com\n";
        let d = denials(out, &policy(), &prot);
        let kinds: Vec<&str> = d.iter().map(|d| d.kind.as_str()).collect();
        assert_eq!(kinds, ["hidden", "hidden", "protected", "write", "network"]);
        // The degraded level's /tmp, and npm refusing to go online.
        let d = denials(
            "mkdir: cannot create directory '/tmp/a': Permission denied\n\
             npm error code ENOTCACHED",
            &policy(),
            &prot,
        );
        assert!(d[0].hint.contains("$TMPDIR"), "{d:?}");
        assert_eq!(d[1].kind, "network", "{d:?}");
        // A missing file elsewhere is no denial.
        assert!(denials(
            "cat: /etc/nope: No such file or directory",
            &policy(),
            &prot
        )
        .is_empty());
    }
}

//! Default locations (docs/getting-started.md#paths), shared so that the daemon and every client agree on
//! where the socket and home are without asking each other.

use std::env;
use std::path::PathBuf;

fn non_empty(var: &str) -> Option<PathBuf> {
    env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc_getuid() }
}

extern "C" {
    #[link_name = "getuid"]
    fn libc_getuid() -> u32;
}

/// `AGENTD_HOME`, else `$XDG_STATE_HOME/agentd`, else `~/.local/state/agentd`
/// (macOS: `~/Library/Application Support/agentd`).
pub fn default_home() -> PathBuf {
    if let Some(h) = non_empty("AGENTD_HOME") {
        return h;
    }
    if let Some(x) = non_empty("XDG_STATE_HOME") {
        return x.join("agentd");
    }
    let home = non_empty("HOME").unwrap_or_else(|| PathBuf::from("/"));
    if cfg!(target_os = "macos") {
        home.join("Library/Application Support/agentd")
    } else {
        home.join(".local/state/agentd")
    }
}

/// `AGENTD_SOCKET`, else `$XDG_RUNTIME_DIR/agentd/agentd.sock`, else
/// `$TMPDIR/agentd-$UID/agentd.sock`, else `/tmp/agentd-$UID/agentd.sock`.
pub fn default_socket() -> PathBuf {
    if let Some(s) = non_empty("AGENTD_SOCKET") {
        return s;
    }
    if let Some(x) = non_empty("XDG_RUNTIME_DIR") {
        return x.join("agentd").join("agentd.sock");
    }
    let base = non_empty("TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join(format!("agentd-{}", uid())).join("agentd.sock")
}

/// `AGENTD_CONFIG`, else `$XDG_CONFIG_HOME/agentd/config.toml`, else
/// `~/.config/agentd/config.toml`.
pub fn default_config() -> PathBuf {
    if let Some(c) = non_empty("AGENTD_CONFIG") {
        return c;
    }
    if let Some(x) = non_empty("XDG_CONFIG_HOME") {
        return x.join("agentd").join("config.toml");
    }
    let home = non_empty("HOME").unwrap_or_else(|| PathBuf::from("/"));
    home.join(".config/agentd/config.toml")
}

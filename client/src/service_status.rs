//! `agentctl service status`: installed files, the service manager's view and who
//! answers on the socket clients use. Read-only; `doctor` reuses it.

use crate::daemon::{self, Target};
use crate::service::{systemctl_state, Manager, Places, PACKAGED_UNITS};
use agentd_proto::AgentError;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `service status`: installed files, the manager's view, and who answers on the
/// socket clients use.
pub async fn status(
    manager: Manager,
    places: &Places,
    client_socket: &Path,
) -> Result<(Value, String), AgentError> {
    let mut v = json!({"manager": manager.as_str(), "socket": client_socket});
    let mut files = Vec::new();
    let managed;
    match manager {
        Manager::Systemd => {
            for dir in [places.unit_dir(), PathBuf::from(PACKAGED_UNITS)] {
                for name in ["agentd.socket", "agentd.service"] {
                    let p = dir.join(name);
                    if p.is_file() {
                        files.push(p);
                    }
                }
            }
            let enabled = systemctl_state(&["is-enabled", "agentd.socket"]);
            let socket_active = systemctl_state(&["is-active", "agentd.socket"]);
            let service_active = systemctl_state(&["is-active", "agentd.service"]);
            managed = service_active.as_deref() == Some("active");
            v["enabled"] = json!(enabled);
            v["socket_unit"] = json!(socket_active);
            v["service_unit"] = json!(service_active);
            v["service_socket"] = json!(places.systemd_socket());
        }
        Manager::Launchd => {
            let plist = places.plist_path();
            if plist.is_file() {
                files.push(plist);
            }
            let has_launchctl = std::env::var_os("PATH")
                .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("launchctl").is_file()));
            let loaded = has_launchctl.then(|| places.launchd_loaded());
            v["loaded"] = json!(loaded);
            managed = loaded == Some(true);
        }
    }
    v["installed"] = json!(!files.is_empty());
    v["files"] = json!(files);
    let target = Target {
        socket: client_socket.to_path_buf(),
        home: None,
    };
    let hello = daemon::connect_existing(&target)
        .await
        .ok()
        .map(|c| c.hello);
    v["running"] = json!(hello.is_some());
    v["pid"] = json!(hello.as_ref().and_then(|h| h.get("pid")).cloned());
    v["managed"] = json!(managed);

    let mut t = String::new();
    let shown = |o: &Value| {
        o.as_str().map_or(
            "unknown (no answer from the manager)".into(),
            str::to_string,
        )
    };
    if files.is_empty() {
        let _ = writeln!(t, "service:        not installed ({})", manager.as_str());
    } else {
        let _ = writeln!(t, "service:        installed ({})", manager.as_str());
        for f in &files {
            let _ = writeln!(t, "  {}", f.display());
        }
    }
    match manager {
        Manager::Systemd => {
            let _ = writeln!(t, "enabled:        {}", shown(&v["enabled"]));
            let _ = writeln!(t, "agentd.socket:  {}", shown(&v["socket_unit"]));
            let _ = writeln!(t, "agentd.service: {}", shown(&v["service_unit"]));
        }
        Manager::Launchd => {
            let loaded = match v["loaded"].as_bool() {
                Some(true) => "yes",
                Some(false) => "no",
                None => "unknown (launchctl not found)",
            };
            let _ = writeln!(t, "loaded:         {loaded}");
        }
    }
    let running = match (&hello, managed) {
        (Some(h), true) => format!("yes, pid {}, started by {}", h["pid"], manager.as_str()),
        (Some(h), false) => format!("yes, pid {}, not started by the service manager", h["pid"]),
        (None, _) => "no".to_string(),
    };
    let _ = writeln!(t, "running:        {running}");
    let _ = writeln!(t, "clients use:    {}", client_socket.display());
    if let Some(s) = places
        .systemd_socket()
        .filter(|_| manager == Manager::Systemd)
    {
        if s != client_socket {
            let _ = writeln!(t, "note: the service listens on {}", s.display());
        }
    }
    Ok((v, t))
}

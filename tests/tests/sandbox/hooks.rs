//! A hook (docs/hooks.md) is a command the user configured, but it runs while the model
//! drives the session and sees what the model made: it runs under the session's
//! command sandbox like `shell`. Here a `pre_tool_use` hook tries what a hostile command
//! tries (read `~/.ssh`, write outside the workspace, reach the daemon's socket), in
//! full and in degraded mode; `.ci/sandbox.sh` runs it unprivileged too.

use super::{builder, create, outside, q, turn_calling};
use agentd_tests::{bin, is_type};
use serde_json::{json, Value};

#[test]
fn a_hook_that_tries_to_escape_the_sandbox_is_held_in_it() {
    for (level, force) in [("full", None), ("degraded", Some("no_userns"))] {
        let o = outside();
        let out = o.root.join("out");
        // The socket's path is known once the daemon is built: the config is written then.
        let mut b = builder(&o).config("");
        if let Some(f) = force {
            b = b.env("AGENTD_SANDBOX_FORCE", f);
        }
        let mut d = b.build();
        let command = format!(
            "cat {h}/.ssh/id_ed25519 > hook-read.txt 2>&1
             echo escaped > {out}/from-hook 2>/dev/null && echo BAD-WRITE >> hook-report.txt
             echo x > {out}/victim 2>/dev/null && echo BAD-VICTIM >> hook-report.txt
             {ctl} --socket {s} ls >/dev/null 2>&1; echo ctl-exit=$? >> hook-report.txt
             exit 0",
            h = q(&o.home),
            out = q(&out),
            ctl = q(&bin("agentctl")),
            s = q(d.socket()),
        );
        let toml = format!("[[hooks.pre_tool_use]]\ncommand = '''{command}'''\n");
        std::fs::write(d.root().join("config.toml"), toml).unwrap();
        d.spawn();
        d.wait_ready(std::time::Duration::from_secs(30)).unwrap();
        let mut c = d.connect();
        let sid = create(&mut c, &d, None);
        let (r, evs) = turn_calling(
            &d,
            &mut c,
            &sid,
            &[("shell", json!({"command": "echo the-call"}))],
            json!({}),
        );
        assert_eq!(r["status"], "completed", "{level}: {r}");
        let run: Value = evs
            .iter()
            .find(|e| is_type(e, "hook_run"))
            .unwrap_or_else(|| panic!("{level}: no hook_run: {evs:?}"))["data"]
            .clone();
        assert_eq!(run["verdict"], "allow", "{level}: {run}");
        assert!(run["sandbox"]["level"].is_string(), "{level}: {run}");
        if force.is_some() {
            assert_eq!(run["sandbox"]["level"], "degraded", "{run}");
        }
        let ws = d.workspace();
        let read = std::fs::read_to_string(ws.join("hook-read.txt")).unwrap_or_default();
        assert!(!read.contains("PRIVATE-KEY-MATERIAL"), "{level}: {read}");
        let report = std::fs::read_to_string(ws.join("hook-report.txt"))
            .unwrap_or_else(|e| panic!("{level}: the hook did not run to its end: {e}"));
        assert!(!report.contains("BAD-"), "{level}: {report}");
        assert!(report.contains("ctl-exit="), "{level}: {report}");
        assert!(
            !report.contains("ctl-exit=0"),
            "{level}: the socket answered: {report}"
        );
        assert!(!out.join("from-hook").exists(), "{level}");
        assert_eq!(
            std::fs::read_to_string(out.join("victim")).unwrap(),
            "original",
            "{level}"
        );
    }
}

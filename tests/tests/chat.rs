//! Black-box tests of `agentctl chat`: the real binary on a real pseudo-terminal
//! (`agentd_tests::pty`), against the real daemon and the offline `script` provider.
//! Every wait is on screen content or an event, with a deadline.

use agentd_tests::pty::Pty;
use agentd_tests::Daemon;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// Writes a script file into the daemon's temp dir and returns its `script:` model.
fn script(d: &Daemon, name: &str, body: Value) -> String {
    let p = d.root().join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(&body).unwrap()).unwrap();
    format!("script:{}", p.display())
}

fn chat(d: &Daemon, args: &[&str], rows: u16, cols: u16) -> Pty {
    let mut cmd = d.agentctl_cmd();
    cmd.arg("chat").args(args);
    Pty::spawn(cmd, rows, cols)
}

#[test]
fn a_new_chat_streams_an_answer() {
    let d = Daemon::start();
    let model = script(
        &d,
        "hi.json",
        json!({"rules":[{"steps":[{"text":"Hello from the **script**.\n```rust\nfn main() {}\n```","chunk_chars":4,"delay_ms":5}]}]}),
    );
    let mut p = chat(&d, &["--new", "--model", &model], 30, 100);
    p.wait_for("idle", WAIT);
    p.line("say hi");
    p.wait_for("› say hi", WAIT);
    p.wait_for("Hello from the script.", WAIT);
    let s = p.wait_for("│ fn main() {}", WAIT);
    assert!(s.contains("┌ rust"), "{s}");
    p.wait_for("idle", WAIT);
    p.send("\x04");
    let st = p.wait_exit(WAIT).expect("chat exits on Ctrl-D");
    assert!(st.success(), "{st:?}");
}

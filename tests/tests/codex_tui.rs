//! The real Codex TUI (`@openai/codex` pinned in tests/peers, installed by
//! `.ci/peers.sh`) driving agentd through `agentctl app-server` (docs/codex-app-server.md):
//! `codex --remote unix://PATH` in a private tmux server with a private `CODEX_HOME`,
//! agentd on the offline `script` provider. Each step waits for text on the captured
//! pane, with a deadline. One test, because each start of the TUI costs seconds.

use agentd_tests::app_server::{script_model, Bridge};
use agentd_tests::{is_type, Daemon};
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn codex_bin() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/node_modules/.bin/codex");
    assert!(
        p.exists(),
        "the Codex TUI is missing at {}: run `bash .ci/peers.sh` (npm ci in tests/peers)",
        p.display()
    );
    p
}

/// A private tmux server holding one window.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    fn start(root: &Path, cwd: &Path, command: &str) -> Tmux {
        let ok = Command::new("tmux").arg("-V").output();
        assert!(
            ok.is_ok_and(|o| o.status.success()),
            "tmux is missing: install it (`.ci/setup.sh` does, as root)"
        );
        let t = Tmux {
            socket: root.join("tmux.sock"),
        };
        let st = t
            .cmd()
            .args([
                "new-session",
                "-d",
                "-s",
                "cx",
                "-x",
                "160",
                "-y",
                "50",
                "-c",
            ])
            .arg(cwd)
            .arg(command)
            .status()
            .expect("tmux new-session");
        assert!(st.success());
        t
    }

    fn pane(&self) -> String {
        let o = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "cx"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits until the pane shows `needle`; returns the pane.
    #[track_caller]
    fn wait(&self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let p = self.pane();
            if p.contains(needle) {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "the pane never showed {needle:?}; it shows:\n{p}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the TUI shows no running turn (its status line offers to interrupt
    /// while one runs): the next prompt is then a new turn, as it is for a user who
    /// waits for the answer.
    #[track_caller]
    fn idle(&self) {
        let deadline = Instant::now() + WAIT;
        loop {
            let p = self.pane();
            if !p.contains("esc to interrupt") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the TUI never finished its turn; it shows:\n{p}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the pane no longer shows `needle` (a view the TUI left).
    #[track_caller]
    fn gone(&self, needle: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let p = self.pane();
            if !p.contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the pane still shows {needle:?}:\n{p}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let st = self
            .cmd()
            .args(["send-keys", "-t", "cx"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(st.success());
    }

    /// Types `text` into the composer, waits until it shows, then submits it.
    #[track_caller]
    fn prompt(&self, text: &str) {
        self.keys(&["-l", text]);
        self.wait(&format!("› {text}"));
        self.keys(&["Enter"]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

fn sessions(d: &Daemon) -> Vec<Value> {
    d.connect().call_ok("agentd/list", json!({}))["sessions"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn the_codex_tui_drives_agentd_sessions() {
    let codex = codex_bin();
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    // A session made by another client, for the resume picker.
    d.agentctl([
        "run",
        "--model",
        &script_model(),
        "--title",
        "made by agentctl",
        "a question from the CLI",
    ])
    .assert_code(0);
    let made = sessions(&d)[0]["session_id"].as_str().unwrap().to_string();
    let b = Bridge::start(&d, &["--model", &script_model()]);
    let codex_home = d.root().join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let t = Tmux::start(
        d.root(),
        d.workspace(),
        &format!(
            "env CODEX_HOME={} TERM=xterm-256color {} --remote unix://{}",
            codex_home.display(),
            codex.display(),
            b.socket.display()
        ),
    );

    // Start-up: initialize, the account, models, config and a new thread. agentd's
    // version is not taken for an outdated Codex server.
    let p = t.wait("Ask Codex to do anything");
    assert!(!p.contains("older than your Codex CLI"), "{p}");
    let thread_sid = {
        let deadline = Instant::now() + WAIT;
        loop {
            let s = sessions(&d);
            if let Some(x) = s.iter().find(|x| x["session_id"] != made.as_str()) {
                break x["session_id"].as_str().unwrap().to_string();
            }
            assert!(Instant::now() < deadline, "thread/start made no session");
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // Another client follows the thread live.
    let mut follow = d
        .agentctl_cmd()
        .args(["log", "--follow", &thread_sid])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let followed = Arc::new(Mutex::new(String::new()));
    let keep = followed.clone();
    let out = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            keep.lock().unwrap().push_str(&(l + "\n"));
        }
    });

    // A prompt and its streamed answer.
    t.prompt("say something");
    t.wait("Streamed answer number one.");
    t.idle();
    let deadline = Instant::now() + WAIT;
    while !followed
        .lock()
        .unwrap()
        .contains("Streamed answer number one.")
    {
        assert!(
            Instant::now() < deadline,
            "agentctl log --follow did not show the turn: {}",
            followed.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(followed.lock().unwrap().contains("say something"));
    let _ = follow.kill();
    let _ = follow.wait();

    // An ask-mode command: the TUI asks, the user approves, the tool call is shown.
    t.prompt("please shout");
    t.wait("Would you like to run the following command?");
    t.keys(&["y"]);
    t.wait("Ran echo approved-and-ran");
    t.wait("The command printed its line.");
    t.idle();

    // Esc interrupts a running command.
    t.prompt("now wait");
    t.wait("Would you like to run the following command?");
    t.keys(&["y"]);
    t.wait("esc to interrupt");
    t.keys(&["Escape"]);
    t.wait("interrupted");
    t.idle();
    let evs = d
        .connect()
        .call_ok("agentd/events", json!({"session_id": thread_sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let statuses: Vec<&str> = evs
        .iter()
        .filter(|e| is_type(e, "turn_ended"))
        .map(|e| e["data"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["completed", "completed", "interrupted"]);
    let decisions = evs
        .iter()
        .filter(|e| is_type(e, "permission_decision"))
        .filter(|e| e["data"]["decision"] == "allow")
        .count();
    assert_eq!(decisions, 2);

    // `/compact`: agentd compacts the thread, and the TUI sees the compaction end.
    t.prompt("/compact");
    t.wait("Context compacted");
    t.idle();
    let compactions = |sid: &str| {
        d.connect()
            .call_ok("agentd/events", json!({"session_id": sid}))["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| is_type(e, "history_compaction"))
            .count()
    };
    assert_eq!(compactions(&thread_sid), 1);

    // `/fork`: an agentd fork of the thread, which the TUI continues in.
    t.prompt("/fork");
    t.wait("Fork created");
    let fork_sid = {
        let deadline = Instant::now() + WAIT;
        loop {
            let s = sessions(&d);
            if let Some(f) = s
                .iter()
                .find(|x| x["parent_session_id"] == thread_sid.as_str())
            {
                break f["session_id"].as_str().unwrap().to_string();
            }
            assert!(
                Instant::now() < deadline,
                "/fork made no agentd fork: {s:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    t.prompt("say more");
    t.idle();
    let deadline = Instant::now() + WAIT;
    while !d
        .connect()
        .call_ok("agentd/events", json!({"session_id": fork_sid}))["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| is_type(e, "user_message") && e["data"]["text"] == "say more")
    {
        assert!(
            Instant::now() < deadline,
            "the prompt after /fork did not reach the fork"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // `/new`, then `/goal` on the new thread: an agentd goal whose turn the daemon runs
    // (the script's model calls `goal_complete` at once). The daemon's statement of the
    // objective is not shown as the user's prompt.
    let before: Vec<String> = sessions(&d)
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    t.prompt("/new");
    // The new thread's view: the fork's turns are gone from the screen.
    t.gone("› say more");
    t.wait("Ask Codex to do anything");
    let new_sid = {
        let deadline = Instant::now() + WAIT;
        loop {
            let s = sessions(&d);
            if let Some(n) = s
                .iter()
                .find(|x| !before.contains(&x["session_id"].as_str().unwrap().to_string()))
            {
                break n["session_id"].as_str().unwrap().to_string();
            }
            assert!(Instant::now() < deadline, "/new made no session");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    t.prompt("/goal make the parser tests pass");
    let deadline = Instant::now() + WAIT;
    let mut entered = Instant::now();
    let goal = loop {
        let g = d
            .connect()
            .call_ok("agentd/goal_get", json!({"session_id": new_sid}))["goal"]
            .clone();
        if g["status"] == "ended" {
            break g;
        }
        // Right after `/new` the TUI can drop an Enter while it swaps in the new
        // thread's view: the command then still sits in the composer, unsent, and a
        // user presses Enter again. Only then: a sent command leaves the composer.
        if g.is_null()
            && entered.elapsed() > Duration::from_secs(3)
            && t.pane()
                .lines()
                .any(|l| l.trim_end() == "› /goal make the parser tests pass")
        {
            eprintln!("the /goal command is still in the composer: Enter again");
            t.keys(&["Enter"]);
            entered = Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "the goal never ended: {g}; the pane shows:\n{}",
            t.pane()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(goal["objective"], "make the parser tests pass");
    assert_eq!(goal["reason"], "completed");
    t.wait("The goal is met.");
    t.idle();
    t.prompt("/goal");
    let p = t.wait("Status: complete");
    assert!(p.contains("Objective: make the parser tests pass"), "{p}");
    assert!(!p.contains("Work toward this goal"), "{p}");

    // The resume picker lists the session agentctl made; picking it shows its history.
    t.prompt("/resume");
    t.wait("made by agentctl");
    t.keys(&["-l", "made by"]);
    t.wait("Filter");
    t.keys(&["Enter"]);
    t.wait("a question from the CLI");
    let p = t.wait("made by agentctl");
    assert!(
        !p.contains("now wait"),
        "the resumed thread shows its own turns:\n{p}"
    );
}

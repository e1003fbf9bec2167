//! An ACP client over pipes for the tests and the measurements: it spawns `agentctl acp`
//! with a daemon's environment, writes one JSON message per line to its stdin and reads
//! its stdout on a thread, so every wait is a channel receive with a deadline.

use crate::{bin, Daemon};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

pub struct Acp {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<(Instant, Value)>,
    next_id: u64,
    /// Every frame read so far, in order (with its arrival time).
    pub frames: Vec<(Instant, Value)>,
    /// Frames read but not yet consumed by a wait.
    backlog: Vec<(Instant, Value)>,
}

impl Acp {
    /// `agentctl acp ARGS` against `d` (run in its workspace).
    pub fn spawn(d: &Daemon, args: &[&str]) -> Acp {
        let mut cmd: Command = d.agentctl_cmd();
        cmd.arg("acp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        Acp::from_command(cmd)
    }

    /// Spawns an already configured command (its stdio is replaced).
    pub fn from_command(mut cmd: Command) -> Acp {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin("agentctl").display()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("agentctl acp wrote a non-JSON line ({e}): {line}"));
                if tx.send((Instant::now(), v)).is_err() {
                    break;
                }
            }
        });
        Acp {
            stdin: child.stdin.take(),
            child,
            rx,
            next_id: 100,
            frames: Vec::new(),
            backlog: Vec::new(),
        }
    }

    pub fn send(&mut self, msg: &Value) {
        self.send_raw(format!("{msg}\n").as_bytes());
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let w = self.stdin.as_mut().expect("stdin open");
        w.write_all(bytes).expect("write to agentctl acp");
        w.flush().expect("flush");
    }

    /// Sends a request; returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Answers a request the agent sent.
    pub fn respond(&mut self, id: &Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    fn recv(&mut self, deadline: Instant) -> Option<(Instant, Value)> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(f) => {
                self.frames.push(f.clone());
                Some(f)
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// The next frame matching `pred`, with the frames skipped before it kept for later.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<(Instant, Value)> {
        if let Some(i) = self.backlog.iter().position(|(_, v)| pred(v)) {
            return Some(self.backlog.remove(i));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let f = self.recv(deadline)?;
            if pred(&f.1) {
                return Some(f);
            }
            self.backlog.push(f);
        }
    }

    /// Waits for the response to `id`; returns it with the notifications that came
    /// before it (in order). Requests from the agent are left in the backlog.
    #[track_caller]
    pub fn response(&mut self, id: u64, timeout: Duration) -> (Value, Vec<Value>) {
        let r = self
            .wait_for(timeout, |v| v["id"] == id && v.get("method").is_none())
            .unwrap_or_else(|| panic!("no response to request {id} within {timeout:?}"))
            .1;
        let mut notes = Vec::new();
        let mut rest = Vec::new();
        for (t, v) in self.backlog.drain(..) {
            if v.get("method").is_some() && v.get("id").is_none() {
                notes.push(v);
            } else {
                rest.push((t, v));
            }
        }
        self.backlog = rest;
        (r, notes)
    }

    /// Calls and expects a result.
    #[track_caller]
    pub fn call(&mut self, method: &str, params: Value, timeout: Duration) -> (Value, Vec<Value>) {
        let id = self.request(method, params);
        let (r, notes) = self.response(id, timeout);
        assert!(r.get("result").is_some(), "{method} failed: {r}");
        (r["result"].clone(), notes)
    }

    pub fn initialize(&mut self) -> Value {
        self.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
            Duration::from_secs(10),
        )
        .0
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            // Drain stdout meanwhile so the child never blocks on a full pipe.
            let _ = self.recv(Instant::now() + Duration::from_millis(20));
        }
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        self.stdin = None;
        if self.wait_exit(Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `update` of a `session/update` notification.
pub fn update(v: &Value) -> Option<&Value> {
    (v["method"] == "session/update").then(|| &v["params"]["update"])
}

/// The `sessionUpdate` kinds of a list of notifications.
pub fn update_kinds(notes: &[Value]) -> Vec<String> {
    notes
        .iter()
        .filter_map(update)
        .map(|u| u["sessionUpdate"].as_str().unwrap_or("").to_string())
        .collect()
}

//! The chaos run (docs/durability.md, "Chaos run"): prompts whose turns take several
//! steps (a `shell` command with a side effect, a `read_file`, a streamed answer),
//! each sent by `agentctl turn` (one `client_request_id`, retried across restarts),
//! while the daemon is killed with SIGKILL at seeded moments: by itself before a chosen
//! Log write of the session (`AGENTD_FAULTS=write:kill:K@SID`), or from outside a
//! seeded delay after the turn's first provider call, sometimes again while it resumes. At the end every prompt must have
//! exactly one user message, one turn, one final answer (the one agentctl printed), a
//! balanced Log, and its side effect counted at most once (exactly once when the
//! command's result was recorded). Runs on the file store, or on PostgreSQL with
//! `AGENTD_TEST_STORE=postgres` (every kill then kills the daemon holding the
//! session's lease).
//!
//! `tests/tests/resume.rs` runs it with a few prompts; `examples/chaos_run.rs` runs
//! many and prints the counts.

use crate::sse::{chat_partial, chat_rest, chat_tools, MockProvider, Reply};
use crate::{is_type, wait_output, Daemon, RpcConn};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// What a run did and what it found.
#[derive(Debug, Default)]
pub struct Report {
    pub prompts: usize,
    /// The daemon killed itself before a chosen write.
    pub fault_kills: usize,
    /// The daemon killed from outside (SIGKILL), a second kill during a resume included.
    pub signal_kills: usize,
    /// Sum of `turn_ended.resumed`.
    pub resumes: u64,
    /// Calls run again after a crash (replay-safe) and closed `outcome_unknown`.
    pub rerun: usize,
    pub closed_unknown: usize,
    /// Side effects whose command's result was recorded: counted once each.
    pub side_effects: usize,
    /// Prompts recorded more than once, answers missing, commands run twice: all
    /// must stay 0; `violations` says what and where.
    pub duplicates: usize,
    pub lost: usize,
    pub double_runs: usize,
    pub violations: Vec<String>,
    /// One line per prompt: how the daemon was killed, and what the Log says.
    pub detail: Vec<String>,
    pub elapsed: Duration,
}

/// The scripted model: a `shell` command appending to `chaos_<i>.txt`, then a
/// `read_file` of it, then the answer `done <i>`, streamed in two parts with a short
/// pause between (a window for a kill mid-stream). The step is chosen by the tool
/// results the request carries, so a resumed turn goes on where its Log stands.
fn provider() -> MockProvider {
    MockProvider::start(|_, body| {
        let msgs = body["messages"].as_array().cloned().unwrap_or_default();
        let prompt = msgs
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str())
            .find_map(|t| t.strip_prefix("chaos prompt "))
            .unwrap_or("?")
            .to_string();
        let tools = msgs.iter().filter(|m| m["role"] == "tool").count();
        match tools {
            0 => Reply::Complete(chat_tools(&[(
                &format!("sh_{prompt}"),
                "shell",
                json!({"command": format!("echo ran >> chaos_{prompt}.txt")}),
            )])),
            1 => Reply::Complete(chat_tools(&[(
                &format!("rd_{prompt}"),
                "read_file",
                json!({"path": format!("chaos_{prompt}.txt")}),
            )])),
            _ => Reply::Gated(
                chat_partial("done "),
                Box::new(|| std::thread::sleep(Duration::from_millis(20))),
                chat_rest(&prompt),
            ),
        }
    })
}

/// Starts the daemon again without a fault rule. A process the killed daemon had
/// just forked (a tool's sandbox, before its exec) may hold the home's lock for a
/// moment after the kill; the new daemon then refuses to start, and is started again
/// once that process let go (bounded).
fn respawn(d: &mut Daemon) {
    respawn_with(d, None);
}

/// [`respawn`] with the fault rules `faults` (`AGENTD_FAULTS`), or none.
fn respawn_with(d: &mut Daemon, faults: Option<&str>) {
    d.set_env("AGENTD_FAULTS", faults);
    let deadline = Instant::now() + WAIT;
    loop {
        d.spawn();
        match d.wait_ready(WAIT) {
            Ok(_) => return,
            Err(e) if e.contains("already runs") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the daemon did not come back: {e}"),
        }
    }
}

/// Runs `n` prompts with seed `seed`; `progress` is called after each prompt.
pub fn run(n: usize, seed: u64, mut progress: impl FnMut(usize, &Report)) -> Report {
    let started = Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mock = provider();
    let mut d = Daemon::builder().config(&mock.config()).start();
    let mut r = Report::default();
    let mut done: Vec<(String, usize, Value)> = Vec::new();
    let mut how: Vec<String> = Vec::new();
    for i in 0..n {
        let sid = d.create_session();
        let mode = rng.gen_range(0..10);
        if (3..7).contains(&mode) {
            // The daemon dies before the K-th write of this session's Log.
            let k = rng.gen_range(1..=10);
            how.push(format!("kill at write {k}"));
            d.set_env("AGENTD_FAULTS", Some(&format!("write:kill:{k}@{sid}")));
            d.kill9();
            d.spawn();
            d.wait_ready(WAIT).expect("the daemon with the fault rule");
        }
        let asked = mock.requests().len();
        let child = d
            .agentctl_cmd()
            .args(["--json", "turn", &sid, &format!("chaos prompt {i}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentctl");
        let mut child = Some(child);
        if (3..7).contains(&mode) {
            // Until the daemon killed itself or the turn ended without reaching K.
            let deadline = Instant::now() + WAIT;
            loop {
                if d.exited() {
                    r.fault_kills += 1;
                    how.last_mut().unwrap().push_str(" (fired)");
                    respawn(&mut d);
                    break;
                }
                if child.as_mut().unwrap().try_wait().ok().flatten().is_some() {
                    break;
                }
                assert!(Instant::now() < deadline, "prompt {i}: neither ended");
                std::thread::sleep(Duration::from_millis(2));
            }
        } else if mode >= 7 {
            // Once the turn reached the provider: somewhere in its steps.
            mock.wait_requests(asked + 1, WAIT);
            let ms = rng.gen_range(0..30);
            how.push(format!("SIGKILL {ms} ms into the turn"));
            std::thread::sleep(Duration::from_millis(ms));
            d.kill9();
            r.signal_kills += 1;
            respawn(&mut d);
        }
        if mode < 3 {
            how.push("no kill".into());
        }
        if mode >= 3 && rng.gen_bool(0.25) {
            // Again, while the turn resumes (or right after it ended).
            let ms = rng.gen_range(0..40);
            how.last_mut()
                .unwrap()
                .push_str(&format!(", again after {ms} ms"));
            std::thread::sleep(Duration::from_millis(ms));
            d.kill9();
            r.signal_kills += 1;
            respawn(&mut d);
        }
        let out = wait_output(child.take().unwrap(), WAIT)
            .unwrap_or_else(|| panic!("prompt {i}: agentctl did not finish"));
        let answer = serde_json::from_str::<Value>(out.stdout.trim()).unwrap_or(Value::Null);
        done.push((sid, i, answer));
        r.prompts += 1;
        progress(i, &r);
    }
    let mut c = d.connect();
    for ((sid, i, answer), how) in done.iter().zip(how) {
        let resumed = check(d.workspace(), &mut c, sid, *i, answer, &mut r);
        r.detail
            .push(format!("prompt {i}: {how}; resumed {resumed}"));
    }
    r.elapsed = started.elapsed();
    r
}

/// Checks one prompt's Log and side effect against the contract; returns how often
/// its turn was resumed.
fn check(ws: &Path, c: &mut RpcConn, sid: &str, i: usize, answer: &Value, r: &mut Report) -> u64 {
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let of = |t: &str| evs.iter().filter(|e| is_type(e, t)).collect::<Vec<_>>();
    let bad =
        |what: String, r: &mut Report| r.violations.push(format!("prompt {i} ({sid}): {what}"));
    let users = of("user_message");
    if users.len() != 1 || users[0]["data"]["text"] != format!("chaos prompt {i}") {
        r.duplicates += users.len().saturating_sub(1);
        bad(format!("user messages {users:?}"), r);
    }
    let starts = of("turn_started");
    if starts.len() != 1 {
        r.duplicates += starts.len().saturating_sub(1);
        bad(format!("{} turns started", starts.len()), r);
    }
    let ends = of("turn_ended");
    let want = format!("done {i}");
    let answers = of("assistant_message");
    if ends.len() != 1 || ends[0]["data"]["status"] != "completed" {
        r.lost += 1;
        bad(format!("turn ends {ends:?}"), r);
    }
    if answers.len() != 1 || answers[0]["data"]["text"] != want.as_str() {
        if answers.len() > 1 {
            r.duplicates += answers.len() - 1;
        } else {
            r.lost += 1;
        }
        bad(format!("answers {answers:?}"), r);
    }
    if answer["status"] != "completed" || answer["output_text"] != want.as_str() {
        r.lost += 1;
        bad(format!("agentctl printed {answer}"), r);
    }
    let resumed = ends
        .first()
        .and_then(|e| e["data"]["resumed"].as_u64())
        .unwrap_or(0);
    r.resumes += resumed;
    for t in of("turn_resumed") {
        r.rerun += t["data"]["rerun"].as_array().map_or(0, Vec::len);
        r.closed_unknown += t["data"]["closed"].as_array().map_or(0, Vec::len);
    }
    let sh = format!("sh_{i}");
    let sh_calls = of("tool_call")
        .iter()
        .filter(|e| e["data"]["call_id"] == sh.as_str())
        .count();
    let sh_results: Vec<_> = of("tool_result")
        .into_iter()
        .filter(|e| e["data"]["call_id"] == sh.as_str())
        .collect();
    let ran = std::fs::read_to_string(ws.join(format!("chaos_{i}.txt")))
        .unwrap_or_default()
        .lines()
        .count();
    let ok = sh_results.iter().any(|e| e["data"]["ok"] == true);
    if sh_calls != 1 || sh_results.len() != 1 {
        r.duplicates += sh_calls.saturating_sub(1);
        bad(
            format!("{sh_calls} shell calls, {} results", sh_results.len()),
            r,
        );
    }
    if ran > 1 {
        r.double_runs += 1;
        bad(format!("the command ran {ran} times"), r);
    } else if ok && ran != 1 {
        bad(
            format!("the command's result was recorded but it ran {ran} times"),
            r,
        );
    }
    r.side_effects += usize::from(ok && ran == 1);
    let ctx = c.call_ok("agentd/context", json!({"session_id": sid}));
    if ctx["stats"]["balanced"] != true {
        bad(format!("unbalanced: {}", ctx["stats"]), r);
    }
    resumed
}

/// The takeover run (docs/durability.md, "The chaos run"): two daemons with homes of
/// their own on one PostgreSQL database (`url`), leases of 1 s. Each prompt goes to the
/// daemon that created its session, which is killed at a seeded moment of the turn (by
/// itself before a chosen Log write in even rounds, with SIGKILL mid-turn in odd ones)
/// and not restarted until the prompt is answered: the client resends the prompt with
/// its `client_request_id` to whichever daemon answers, the other daemon takes the
/// session over once the killed owner's lease ran out, resumes the turn and answers. In
/// a quarter of the rounds that daemon is killed too while it resumes, and the first
/// one, restarted, takes the session back over from it. Every prompt is then checked
/// as in [`run`].
pub fn takeover_run(
    url: &str,
    n: usize,
    seed: u64,
    mut progress: impl FnMut(usize, &Report),
) -> Report {
    let started = Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mock = provider();
    let config = format!("lease_s = 1\n{}", mock.config());
    let start = || {
        Daemon::builder()
            .config(&config)
            .env("AGENTD_STORE", url)
            .start()
    };
    let mut ds = [start(), start()];
    let ws = ds[0].workspace().to_path_buf();
    let mut r = Report::default();
    for i in 0..n {
        let (o, t) = (i % 2, 1 - i % 2);
        let mut c = ds[o].connect();
        let sid = c.call_ok("agentd/create", json!({"workspace": ws}))["session_id"]
            .as_str()
            .expect("session id")
            .to_string();
        drop(c);
        // Every other round the owner kills itself at a write, the others from outside.
        let fault = i % 2 == 0;
        let mut how = if fault {
            // The owner dies before the K-th write of this session's Log (a turn of
            // this script makes 7: the admission, each step and tool result, the end).
            let k = rng.gen_range(1..=7);
            ds[o].kill9();
            respawn_with(&mut ds[o], Some(&format!("write:kill:{k}@{sid}")));
            format!("owner killed at write {k}")
        } else {
            String::new()
        };
        let asked = mock.requests().len();
        let sockets = vec![ds[o].socket().to_path_buf(), ds[t].socket().to_path_buf()];
        let params = json!({"session_id": sid, "input": format!("chaos prompt {i}"),
                            "client_request_id": format!("takeover-{i}")});
        let client = std::thread::spawn(move || retrying_turn(&sockets, &params));
        let mut killed_owner = false;
        if fault {
            let deadline = Instant::now() + WAIT;
            let fired = loop {
                if ds[o].exited() {
                    break true;
                }
                if client.is_finished() {
                    break false;
                }
                assert!(Instant::now() < deadline, "prompt {i}: neither ended");
                std::thread::sleep(Duration::from_millis(2));
            };
            if fired {
                r.fault_kills += 1;
                killed_owner = true;
                how.push_str(" (fired)");
            }
        } else {
            mock.wait_requests(asked + 1, WAIT);
            let ms = rng.gen_range(0..30);
            std::thread::sleep(Duration::from_millis(ms));
            ds[o].kill9();
            r.signal_kills += 1;
            killed_owner = true;
            how = format!("owner SIGKILLed {ms} ms into the turn");
        }
        if killed_owner && rng.gen_bool(0.25) {
            // The daemon taking over dies too, once it has asked the provider again;
            // the first owner, restarted, takes the session from it.
            let asked = mock.requests().len();
            let deadline = Instant::now() + WAIT;
            while mock.requests().len() == asked && !client.is_finished() {
                assert!(Instant::now() < deadline, "prompt {i}: no resume");
                std::thread::sleep(Duration::from_millis(2));
            }
            if !client.is_finished() {
                ds[t].kill9();
                r.signal_kills += 1;
                how.push_str(", then the daemon taking over killed as it resumed");
                respawn(&mut ds[o]);
            }
        }
        let answer = client.join().expect("the client thread");
        for d in &mut ds {
            if d.exited() || d.pid().is_none() {
                respawn(d);
            }
        }
        // Whichever daemon holds the session now answers for it.
        let mut c = ds
            .iter()
            .map(|d| d.connect())
            .find_map(|mut c| {
                let r = c.call("agentd/show", json!({"session_id": sid}));
                r.get("result").is_some().then_some(c)
            })
            .unwrap_or_else(|| panic!("prompt {i}: no daemon holds {sid}"));
        let resumed = check(&ws, &mut c, &sid, i, &answer, &mut r);
        r.detail
            .push(format!("prompt {i}: {how}; resumed {resumed}"));
        r.prompts += 1;
        progress(i, &r);
    }
    r.elapsed = started.elapsed();
    r
}

/// `agentd/turn` with `params` (waiting for the turn), sent to each of `sockets` in
/// turn until one answers it: a daemon that is gone, or that does not hold the
/// session's lease yet (`busy`, `leased`), is tried again after a pause. Returns the
/// answer's result, or the error response.
fn retrying_turn(sockets: &[PathBuf], params: &Value) -> Value {
    let deadline = Instant::now() + WAIT;
    for k in 0.. {
        assert!(
            Instant::now() < deadline,
            "no daemon answered {params} within {WAIT:?}"
        );
        if let Ok(mut c) = RpcConn::connect(&sockets[k % sockets.len()]) {
            c.set_call_timeout(WAIT);
            if let Ok(resp) = c.try_call("agentd/turn", params.clone()) {
                if let Some(res) = resp.get("result") {
                    return res.clone();
                }
                let kind = resp.pointer("/error/data/kind").and_then(Value::as_str);
                if !matches!(kind, Some("busy") | Some("daemon_unavailable")) {
                    return resp;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    unreachable!()
}

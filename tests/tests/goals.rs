//! Goals (docs/goals.md) end to end: the real daemon and a provider endpoint speaking
//! the Chat Completions wire (`agentd_tests::sse::MockProvider`) that answers by what
//! each request carries; a goal the model completes, one stopped at its turn budget,
//! one ended by an interrupt, goals going on after SIGKILL and after a clean shutdown,
//! and compaction that keeps the objective.

use agentd_tests::sse::{
    chat_partial, chat_text, chat_tools, last_user_and_tool_results, message_text, offered_tools,
    MockProvider, Reply,
};
use agentd_tests::{events, is_type, of_type, Daemon};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const OBJECTIVE: &str = "Make every test in the parser crate pass";

fn daemon(mock: &MockProvider, extra: &str) -> Daemon {
    Daemon::builder()
        .config(&format!("{}{extra}", mock.config()))
        .start()
}

/// Waits for the session's `goal_ended` (backlog or live); returns it.
fn wait_goal_ended(d: &Daemon, sid: &str) -> Value {
    let mut sub = d.connect();
    sub.subscribe(sid, Some(0));
    sub.wait_event(|e| is_type(e, "goal_ended"), WAIT)
        .unwrap_or_else(|| panic!("no goal_ended in {sid}; daemon:\n{}", d.daemon_output()))
}

/// Runs a user turn once the session is free (queued behind a running turn, so never
/// `busy`) and waits for its end; returns its `turn_ended`.
fn user_turn(d: &Daemon, sid: &str, input: &str) -> Value {
    let mut c = d.connect();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": input, "queue": true, "wait": false}),
    );
    let turn_id = r["turn_id"].as_str().unwrap().to_string();
    let mut sub = d.connect();
    sub.subscribe(sid, Some(0));
    sub.wait_event(
        |e| is_type(e, "turn_ended") && e["data"]["turn_id"] == turn_id.as_str(),
        WAIT,
    )
    .unwrap_or_else(|| panic!("turn {turn_id} did not end; daemon:\n{}", d.daemon_output()))
}

/// The user messages of the session's turns, in order.
fn prompts(evs: &[Value]) -> Vec<String> {
    of_type(evs, "user_message")
        .iter()
        .map(|e| e["data"]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The model works one turn, then (offered `goal_complete`) calls it in the second:
/// the goal ends `completed` with the model's summary, its turns restate the objective,
/// and no turn follows (the next user turn is admitted, not `busy`, and is the third).
#[test]
fn a_goal_completed_by_the_model() {
    let mock = MockProvider::start(|_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if !tools.is_empty() {
            return Reply::Complete(chat_text("All done."));
        }
        if user.starts_with("Goal: ") {
            return Reply::Complete(chat_text("Fixed the lexer; two tests still fail."));
        }
        if user.starts_with("Continue working toward the goal")
            && offered_tools(body).iter().any(|t| t == "goal_complete")
        {
            return Reply::Complete(chat_tools(&[(
                "call_done",
                "goal_complete",
                json!({"summary": "All 12 parser tests pass (cargo test -p parser)."}),
            )]));
        }
        Reply::Complete(chat_text(&format!("plain answer to: {user}")))
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let set = d.agentctl_ok(&["goal", &sid, OBJECTIVE, "--max-turns", "5"]);
    let goal_id = set["goal_id"].as_str().unwrap().to_string();
    assert!(set["turn_id"].is_string(), "the first turn started: {set}");

    let ended = wait_goal_ended(&d, &sid);
    assert_eq!(ended["data"]["goal_id"], goal_id.as_str());
    assert_eq!(ended["data"]["reason"], "completed");
    assert_eq!(
        ended["data"]["summary"],
        "All 12 parser tests pass (cargo test -p parser)."
    );
    assert_eq!(ended["data"]["turns_used"], 2);

    let show = d.agentctl_ok(&["goal", &sid, "--show"]);
    assert_eq!(show["goal"]["status"], "ended", "{show}");
    assert_eq!(show["goal"]["reason"], "completed");
    assert_eq!(show["goal"]["objective"], OBJECTIVE);

    // Nothing more runs for the goal: the next user turn is the third turn.
    let ended = user_turn(&d, &sid, "thanks");
    assert_eq!(ended["data"]["status"], "completed");
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let answers = of_type(&evs, "assistant_message");
    assert_eq!(
        answers.last().unwrap()["data"]["text"],
        "plain answer to: thanks"
    );
    let p = prompts(&evs);
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(p[0].starts_with(&format!("Goal: {OBJECTIVE}")), "{}", p[0]);
    assert!(
        p[1].starts_with(&format!("Continue working toward the goal: {OBJECTIVE}")),
        "{}",
        p[1]
    );
    assert_eq!(p[2], "thanks");
    let progress = of_type(&evs, "goal_progress");
    assert_eq!(
        progress.len(),
        1,
        "the completing turn ends the goal itself"
    );
    assert_eq!(progress[0]["data"]["turns_used"], 1);
    // Turns after the goal are not offered goal_complete.
    let last = mock.requests().last().cloned().unwrap();
    assert!(!offered_tools(&last).iter().any(|t| t == "goal_complete"));
}

/// A model that never completes: the goal stops after `--max-turns 2` with reason
/// `max_turns`, each turn accounted in a `goal_progress`.
#[test]
fn a_goal_stops_at_its_turn_budget() {
    let mock = MockProvider::start(|_, _| Reply::Complete(chat_text("Still working.")));
    let d = daemon(&mock, "");
    let sid = d.create_session();
    d.agentctl_ok(&["goal", &sid, OBJECTIVE, "--max-turns", "2"]);
    let ended = wait_goal_ended(&d, &sid);
    assert_eq!(ended["data"]["reason"], "max_turns");
    assert_eq!(ended["data"]["turns_used"], 2);
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let progress: Vec<_> = of_type(&evs, "goal_progress")
        .iter()
        .map(|e| (e["data"]["turns_used"].clone(), e["data"]["status"].clone()))
        .collect();
    assert_eq!(
        progress,
        [
            (json!(1), json!("completed")),
            (json!(2), json!("completed"))
        ]
    );
    assert_eq!(of_type(&evs, "turn_started").len(), 2);
    // The goal's tokens are counted from the provider's usage (105 per call).
    assert_eq!(ended["data"]["tokens_used"], 210);
}

/// A token budget: the first turn spends 105 tokens of a 100-token budget; no second
/// turn starts.
#[test]
fn a_goal_stops_when_its_token_budget_is_spent() {
    let mock = MockProvider::start(|_, _| Reply::Complete(chat_text("Working.")));
    let d = daemon(&mock, "");
    let sid = d.create_session();
    d.agentctl_ok(&["goal", &sid, OBJECTIVE, "--budget", "100"]);
    let ended = wait_goal_ended(&d, &sid);
    assert_eq!(ended["data"]["reason"], "token_budget");
    assert_eq!(ended["data"]["tokens_used"], 105);
    let mut c = d.connect();
    assert_eq!(of_type(&events(&mut c, &sid), "turn_started").len(), 1);
    // A turn after the goal ended spends its own tokens, not the goal's.
    user_turn(&d, &sid, "thanks");
    let g = c.call_ok("agentd/goal_get", json!({"session_id": sid}));
    assert_eq!(g["goal"]["status"], "ended", "{g}");
    assert_eq!(g["goal"]["tokens_used"], 105, "{g}");
}

/// Interrupting a goal's turn ends the goal (`interrupted`); `--clear` on a goal that
/// is already over says so.
#[test]
fn interrupting_a_goals_turn_ends_the_goal() {
    let mock = MockProvider::start(|_, _| Reply::Hang(chat_partial("thinking")));
    let d = daemon(&mock, "");
    let sid = d.create_session();
    d.agentctl_ok(&["goal", &sid, OBJECTIVE]);
    mock.wait_requests(1, WAIT);
    d.agentctl_ok(&["interrupt", &sid]);
    let ended = wait_goal_ended(&d, &sid);
    assert_eq!(ended["data"]["reason"], "interrupted");
    let cleared = d.agentctl_ok(&["goal", &sid, "--clear"]);
    assert_eq!(cleared["cleared"], false);
}

/// `--clear` ends an open goal with reason `cleared`; the turn that was running
/// finishes and no other starts.
#[test]
fn clearing_a_goal_stops_its_turns() {
    let gate = Arc::new(AtomicUsize::new(0));
    let g = gate.clone();
    let mock = MockProvider::start(move |_, _| {
        // The first call waits until the goal is cleared.
        while g.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        Reply::Complete(chat_text("Partly done."))
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    d.agentctl_ok(&["goal", &sid, OBJECTIVE]);
    mock.wait_requests(1, WAIT);
    let cleared = d.agentctl_ok(&["goal", &sid, "--clear"]);
    assert_eq!(cleared["cleared"], true, "{cleared}");
    gate.store(1, Ordering::SeqCst);
    let ended = wait_goal_ended(&d, &sid);
    assert_eq!(ended["data"]["reason"], "cleared");
    // The running turn ends; the next user turn is the second turn.
    user_turn(&d, &sid, "status?");
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    assert_eq!(of_type(&evs, "turn_started").len(), 2);
    assert!(of_type(&evs, "goal_progress").is_empty());
}

/// SIGKILL during a goal's first turn, then a clean shutdown during its second: after
/// each restart the goal goes on (the cut turn resumes; the shut-down one is accounted
/// and followed), and the model completes it in the third turn.
#[test]
fn a_goal_continues_after_a_crash_and_after_a_restart() {
    let calls = Arc::new(AtomicUsize::new(0));
    let n = calls.clone();
    let mock = MockProvider::start(move |_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if !tools.is_empty() {
            return Reply::Complete(chat_text("Finished."));
        }
        match n.fetch_add(1, Ordering::SeqCst) {
            0 | 2 => Reply::Hang(chat_partial("working")),
            1 => Reply::Complete(chat_text("First part done.")),
            _ if user.starts_with("Continue working toward the goal") => {
                Reply::Complete(chat_tools(&[(
                    "call_done",
                    "goal_complete",
                    json!({"summary": "done after two restarts"}),
                )]))
            }
            _ => Reply::Complete(chat_text("unexpected")),
        }
    });
    let mut d = daemon(&mock, "");
    let sid = d.create_session();
    d.agentctl_ok(&["goal", &sid, OBJECTIVE, "--max-turns", "6"]);
    mock.wait_requests(1, WAIT);
    d.restart();
    // The resumed first turn answers; the second turn starts and hangs: shut down.
    mock.wait_requests(3, WAIT);
    assert!(d.shutdown(WAIT).is_some(), "the daemon did not shut down");
    d.spawn();
    d.wait_ready(WAIT).unwrap();

    let ended = wait_goal_ended(&d, &sid);
    assert_eq!(ended["data"]["reason"], "completed", "{ended}");
    assert_eq!(ended["data"]["summary"], "done after two restarts");
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let statuses: Vec<_> = of_type(&evs, "goal_progress")
        .iter()
        .map(|e| e["data"]["status"].clone())
        .collect();
    assert_eq!(statuses, [json!("completed"), json!("interrupted")]);
    assert_eq!(of_type(&evs, "turn_resumed").len(), 1);
    let p = prompts(&evs);
    assert_eq!(p.len(), 3, "one prompt per goal turn, none twice: {p:?}");
    assert!(p[0].starts_with("Goal: "));
    assert!(p[1].contains("Goal turn 2 of at most 6"), "{}", p[1]);
    assert!(p[2].contains("Goal turn 3 of at most 6"), "{}", p[2]);
}

/// Compaction before every provider call (threshold near zero, a two-event tail): the
/// goal's later requests carry the objective in the compacted checkpoint's `[GOAL]`
/// section, and the `history_compaction` events record it.
#[test]
fn compaction_keeps_the_objective() {
    let mock = MockProvider::start(|_, _| Reply::Complete(chat_text("Another step done.")));
    let d = daemon(&mock, "[compaction]\nthreshold = 0.0001\ntail_events = 2\n");
    let sid = d.create_session();
    let set = d.agentctl_ok(&["goal", &sid, OBJECTIVE, "--max-turns", "3"]);
    let goal_id = set["goal_id"].as_str().unwrap().to_string();
    let ended = wait_goal_ended(&d, &sid);
    assert_eq!(ended["data"]["reason"], "max_turns");
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let compactions = of_type(&evs, "history_compaction");
    assert!(!compactions.is_empty(), "the turns compacted");
    for comp in &compactions {
        assert_eq!(
            comp["data"]["checkpoint"]["goal"]["objective"], OBJECTIVE,
            "{comp}"
        );
        assert!(comp["data"]["view"]
            .as_str()
            .unwrap()
            .contains(&format!("[GOAL]\n{OBJECTIVE} (goal_id: {goal_id})")));
    }
    let last = mock.requests().last().cloned().unwrap();
    let injected = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(message_text)
        .find(|t| t.contains("[HISTORY_COMPACTION v1]"))
        .unwrap_or_else(|| panic!("no compaction in the last request: {last}"));
    assert!(
        injected.contains(&format!("[GOAL]\n{OBJECTIVE} (goal_id: {goal_id})")),
        "{injected}"
    );
}

/// Bad goal requests are refused with a clear kind and record nothing.
#[test]
fn bad_goal_requests_are_refused() {
    let mock = MockProvider::start(|_, _| Reply::Complete(chat_text("ok")));
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let mut c = d.connect();
    for (p, field) in [
        (json!({"session_id": sid, "objective": "  "}), "objective"),
        (
            json!({"session_id": sid, "objective": "x", "max_turns": 0}),
            "max_turns",
        ),
        (
            json!({"session_id": sid, "objective": "x", "token_budget": 0}),
            "token_budget",
        ),
    ] {
        let r = c.call("agentd/goal_set", p);
        assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{r}");
        assert_eq!(r["error"]["data"]["details"]["field"], field, "{r}");
    }
    let r = c.call(
        "agentd/goal_set",
        json!({"session_id": sid, "objective": "x", "extra": 1}),
    );
    assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{r}");
    let r = c.call("agentd/goal_get", json!({"session_id": "no-such-session"}));
    assert!(r["error"].is_object(), "{r}");
    let evs = events(&mut c, &sid);
    assert_eq!(evs.len(), 1, "nothing recorded: {evs:?}");
    let g = c.call_ok("agentd/goal_get", json!({"session_id": sid}));
    assert_eq!(g["goal"], Value::Null);
}

/// A provider whose stream breaks off: two failed turns in a row end the goal
/// (`failed`), without a third.
#[test]
fn two_failed_turns_in_a_row_end_a_goal() {
    let mock = MockProvider::start(|_, _| Reply::Complete(chat_partial("cut sho")));
    let d = daemon(&mock, "");
    let sid = d.create_session();
    d.agentctl_ok(&["goal", &sid, OBJECTIVE, "--max-turns", "5"]);
    let ended = wait_goal_ended(&d, &sid);
    assert_eq!(ended["data"]["reason"], "failed", "{ended}");
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let failures: Vec<_> = of_type(&evs, "goal_progress")
        .iter()
        .map(|e| {
            (
                e["data"]["status"].clone(),
                e["data"]["failures_in_row"].clone(),
            )
        })
        .collect();
    assert_eq!(
        failures,
        [(json!("failed"), json!(1)), (json!("failed"), json!(2))]
    );
    assert_eq!(of_type(&evs, "turn_started").len(), 2);
}

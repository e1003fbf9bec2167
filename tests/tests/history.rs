//! Black-box tests of history operations (docs/history-rules.md) against the real `agentd` and
//! `agentctl`: reconcile, context, compact, checkpoint, fork and tree, as a user of
//! `agentctl --json` sees them. Histories are set up with `agentd/append` (the way other
//! harnesses use agentd as their Log); everything else goes through `agentctl`.
//!
//! Golden files live in `tests/tests/golden/`; regenerate with `UPDATE_GOLDEN=1` and
//! review the diff.

use agentd_tests::{Daemon, Output};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn daemon() -> Daemon {
    Daemon::builder().env("AGENTD_DURABILITY", "none").start()
}

/// `agentctl --json ARGS`, which must exit 0; returns the JSON document.
#[track_caller]
fn ctl(d: &Daemon, args: &[&str]) -> Value {
    let out = run(d, args);
    out.assert_code(0);
    let v = out.json().clone();
    assert_eq!(v["ok"], true, "{out:?}");
    v
}

fn run(d: &Daemon, args: &[&str]) -> Output {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    d.agentctl(all)
}

/// Creates a session in the daemon's workspace with a fixed id.
#[track_caller]
fn new_session(d: &Daemon, sid: &str, title: Option<&str>) {
    let ws = d.workspace().to_str().unwrap().to_string();
    let mut args = vec!["new", "--workspace", &ws, "--session-id", sid];
    if let Some(t) = title {
        args.extend_from_slice(&["--title", t]);
    }
    let v = ctl(d, &args);
    assert_eq!(v["session_id"], sid);
}

/// Appends `events` (`[{type,data}]`) through `agentd/append`; returns `(seq, id)` each.
#[track_caller]
fn append(d: &Daemon, sid: &str, events: Vec<Value>) -> Vec<(u64, String)> {
    let n = events.len() as u64;
    let r = d.connect().call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": events}),
    );
    let first = r["first_seq"].as_u64().unwrap();
    assert_eq!(r["last_seq"].as_u64().unwrap(), first + n - 1, "{r}");
    let ids = r["ids"].as_array().unwrap();
    (0..n)
        .map(|i| (first + i, ids[i as usize].as_str().unwrap().to_string()))
        .collect()
}

fn ev(kind: &str, data: Value) -> Value {
    json!({"type": kind, "data": data})
}

fn user(text: &str) -> Value {
    ev("user_message", json!({"text": text}))
}

fn assistant(text: &str) -> Value {
    ev("assistant_message", json!({"text": text}))
}

fn call(id: &str, name: &str, args: Value) -> Value {
    ev(
        "tool_call",
        json!({"call_id": id, "name": name, "args": args}),
    )
}

fn result(id: &str, output: &str) -> Value {
    ev(
        "tool_result",
        json!({"call_id": id, "ok": true, "output": output}),
    )
}

/// One complete turn: turn_started, the prompt, one step of (parallel) tool calls with
/// their results, the answer, turn_ended.
fn turn(turn_id: &str, prompt: &str, calls: &[(&str, &str, Value)], answer: &str) -> Vec<Value> {
    let mut v = vec![
        ev("turn_started", json!({"turn_id": turn_id})),
        user(prompt),
    ];
    for (id, name, args) in calls {
        v.push(call(id, name, args.clone()));
    }
    for (id, _, _) in calls {
        v.push(result(id, &format!("output of {id}")));
    }
    v.push(assistant(answer));
    v.push(ev(
        "turn_ended",
        json!({"turn_id": turn_id, "status": "completed"}),
    ));
    v
}

/// Every event of a session, in seq order.
fn events(d: &Daemon, sid: &str) -> Vec<Value> {
    let r = d
        .connect()
        .call_ok("agentd/events", json!({"session_id": sid, "limit": 100000}));
    r["events"].as_array().unwrap().clone()
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn file_hash(p: &Path) -> String {
    sha256(&std::fs::read(p).unwrap_or_else(|e| panic!("read {p:?}: {e}")))
}

/// The sha256 of a session's Log bytes, wherever the daemon stores them.
fn log_hash(d: &Daemon, sid: &str) -> String {
    sha256(&d.log_bytes(sid))
}

/// Every file and directory under `root` (relative path → sha256, `dir` for directories).
fn hash_tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.insert(rel, "dir".into());
                walk(root, &p, out);
            } else if ft.is_file() {
                out.insert(rel, file_hash(&p));
            } else {
                out.insert(rel, "other".into());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn str_of<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// Asserts the replay invariant: balanced, every function call followed (after other
/// calls) by exactly one output of its call_id, and no output without an earlier call.
#[track_caller]
fn assert_pairs(ctx: &Value) {
    assert_eq!(ctx["stats"]["balanced"], true, "{ctx}");
    let items = ctx["items"].as_array().unwrap();
    let mut open: Vec<String> = Vec::new();
    let mut outputs = BTreeMap::new();
    for it in items {
        match it["type"].as_str() {
            Some("function_call") => open.push(it["call_id"].as_str().unwrap().to_string()),
            Some("function_call_output") => {
                let id = it["call_id"].as_str().unwrap().to_string();
                let pos = open.iter().position(|c| *c == id);
                assert!(pos.is_some(), "output {id} without an open call: {ctx}");
                open.remove(pos.unwrap());
                *outputs.entry(id).or_insert(0) += 1;
            }
            _ => assert!(
                open.is_empty(),
                "calls {open:?} left open before a non-output item: {ctx}"
            ),
        }
    }
    assert!(open.is_empty(), "calls {open:?} never answered: {ctx}");
    assert!(outputs.values().all(|n| *n == 1), "{outputs:?}");
    assert_eq!(
        ctx["stats"]["function_calls"], ctx["stats"]["function_call_outputs"],
        "{ctx}"
    );
}

/// Compares `actual` with `tests/tests/golden/<name>`; `UPDATE_GOLDEN=1` rewrites it.
#[track_caller]
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing golden {path:?}; run with UPDATE_GOLDEN=1"));
    assert_eq!(
        actual, want,
        "golden {name} differs (UPDATE_GOLDEN=1 to accept)"
    );
}

// ---------------------------------------------------------------------------------------
// Reconcile and context
// ---------------------------------------------------------------------------------------

#[test]
fn reconcile_lists_then_records_sorted_closures_once() {
    let d = daemon();
    new_session(&d, "rec", None);
    let seqs = append(
        &d,
        "rec",
        vec![
            user("list and read"),
            call("c2", "shell", json!({"command": "ls"})),
            call("c1", "read_file", json!({"path": "a.txt"})),
            call("c3", "list_dir", json!({})),
            result("c3", "a.txt"),
        ],
    );
    let log = "rec";
    let before = log_hash(&d, log);

    let dry = ctl(&d, &["reconcile", "rec", "--dry-run"]);
    let pending: Vec<(&str, &str)> = dry["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (str_of(p, "/call_id"), str_of(p, "/name")))
        .collect();
    assert_eq!(pending, [("c1", "read_file"), ("c2", "shell")]);
    assert_eq!(dry["recorded"], json!([]));
    assert_eq!(log_hash(&d, log), before, "dry run changed the Log");

    let real = ctl(&d, &["reconcile", "rec"]);
    let recorded = real["recorded"].as_array().unwrap();
    assert_eq!(recorded.len(), 2, "{real}");
    let last = seqs.last().unwrap().0;
    let evs = events(&d, "rec");
    let new: Vec<&Value> = evs
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() > last)
        .collect();
    assert_eq!(new.len(), 2, "{evs:?}");
    for (e, (id, tool)) in new.iter().zip([("c1", "read_file"), ("c2", "shell")]) {
        assert_eq!(e["type"], "tool_result");
        let data = &e["data"];
        assert_eq!(data["call_id"], id);
        assert_eq!(data["ok"], false);
        assert_eq!(data["error"]["kind"], "orphan_tool_call");
        assert_eq!(
            data["error"]["details"],
            json!({"call_id": id, "tool": tool, "reason": "explicit"})
        );
        assert!(str_of(data, "/error/message").len() > 3);
    }
    assert_eq!(
        recorded
            .iter()
            .map(|r| str_of(r, "/call_id"))
            .collect::<Vec<_>>(),
        ["c1", "c2"]
    );

    let after_first = log_hash(&d, log);
    let again = ctl(&d, &["reconcile", "rec"]);
    assert_eq!(again["pending"], json!([]));
    assert_eq!(again["recorded"], json!([]));
    assert_eq!(
        log_hash(&d, log),
        after_first,
        "second reconcile changed the Log"
    );
    let show = ctl(&d, &["show", "rec"]);
    assert_eq!(show["pending_tool_calls"], json!([]));
}

#[test]
fn context_is_balanced_with_orphan_calls_and_stray_results() {
    let d = daemon();
    new_session(&d, "ctx", None);
    append(
        &d,
        "ctx",
        vec![
            user("do three things"),
            call("b", "shell", json!({"command": "true"})),
            call("a", "read_file", json!({"path": "x"})),
            result("stray", "result of a call nobody made"),
            call("c", "list_dir", json!({})),
            result("c", "x"),
            assistant("done"),
        ],
    );
    let ctx = ctl(&d, &["context", "ctx"]);
    assert_pairs(&ctx);
    let closures: BTreeSet<(&str, &str)> = ctx["stats"]["synthetic_orphan_closures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (str_of(c, "/call_id"), str_of(c, "/tool")))
        .collect();
    assert_eq!(
        closures,
        BTreeSet::from([("a", "read_file"), ("b", "shell")])
    );
    let text = ctx["items"].to_string();
    assert!(
        !text.contains("stray"),
        "a result without its call replayed"
    );
    assert!(text.contains("orphan_tool_call"));
    assert_eq!(ctx["stats"]["function_calls"], 3);

    // The same history folds to the same bytes, in every dialect.
    for dialect in ["responses", "chat", "anthropic"] {
        let a = ctl(&d, &["context", "ctx", "--dialect", dialect]);
        let b = ctl(&d, &["context", "ctx", "--dialect", dialect]);
        assert_eq!(a, b);
        assert_eq!(a["stats"]["balanced"], true, "{dialect}: {a}");
    }

    // Inspecting as of an earlier seq sees only that prefix.
    let early = ctl(&d, &["context", "ctx", "--after-seq", "2"]);
    assert_eq!(early["stats"]["function_calls"], 1, "{early}");
    assert_pairs(&early);
}

// ---------------------------------------------------------------------------------------
// Compaction
// ---------------------------------------------------------------------------------------

/// 4 complete turns (≈ 30 events) with file tools, in session `sid`.
fn long_history(d: &Daemon, sid: &str) {
    new_session(d, sid, Some("long"));
    let mut evs = Vec::new();
    for t in 0..4 {
        evs.extend(turn(
            &format!("t{t}"),
            &format!("prompt number {t}"),
            &[
                (
                    &format!("r{t}"),
                    "read_file",
                    json!({"path": format!("src/f{t}.rs")}),
                ),
                (
                    &format!("w{t}"),
                    "write_file",
                    json!({"path": format!("out/o{t}.txt"), "content": "x"}),
                ),
            ],
            &format!("answer number {t}"),
        ));
    }
    append(d, sid, evs);
}

#[test]
fn compact_dry_run_writes_nothing_and_plans_what_the_real_run_records() {
    let d = daemon();
    long_history(&d, "cmp");
    // Load the session before hashing so only the compaction can change bytes.
    ctl(&d, &["show", "cmp"]);
    let before = hash_tree(d.home());
    let dry = ctl(&d, &["compact", "cmp", "--tail-events", "8", "--dry-run"]);
    assert_eq!(hash_tree(d.home()), before, "dry run changed a file");
    assert_eq!(dry["recorded"], false);
    assert_eq!(dry["compactable"], true, "{dry}");
    assert!(dry.get("compaction_seq").is_none_or(Value::is_null));

    let real = ctl(&d, &["compact", "cmp", "--tail-events", "8"]);
    assert_eq!(real["recorded"], true, "{real}");
    for key in [
        "compactable",
        "tail_events",
        "would_compact_events",
        "range",
        "event",
    ] {
        assert_eq!(dry[key], real[key], "dry run and real run differ in {key}");
    }
    let seq = real["compaction_seq"].as_u64().unwrap();
    let evs = events(&d, "cmp");
    let recorded = evs.iter().find(|e| e["seq"] == seq).unwrap();
    assert_eq!(recorded["type"], "history_compaction");
    assert_eq!(recorded["data"], real["event"]["data"]);
    let data = &recorded["data"];
    assert_eq!(data["strategy"], "deterministic_v1");
    assert_eq!(data["trigger"], "manual");
    assert!(data["limitations"]
        .to_string()
        .to_lowercase()
        .contains("authoritative"));
    // Old events stay in the Log.
    assert_eq!(evs.len() as u64, seq + 1);
    assert_eq!(evs[1]["type"], "turn_started");
}

/// Manual compaction without `--tail-events` keeps the configured `[compaction]
/// tail_events`, through `agentctl compact` and a bare `agentd/compact` alike; a given
/// tail still wins.
#[test]
fn manual_compaction_keeps_the_configured_tail_unless_one_is_given() {
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config("[compaction]\ntail_events = 5\n")
        .start();
    long_history(&d, "cfg");
    // About 30 events: the built-in tail of 40 would leave nothing to compact.
    let plan = ctl(&d, &["compact", "cfg", "--dry-run"]);
    assert_eq!(plan["compactable"], true, "{plan}");
    // The cut moves back to a turn boundary, so the tail kept is at least the 5 asked.
    assert!(plan["tail_events"].as_u64().unwrap() >= 5, "{plan}");
    let given = ctl(&d, &["compact", "cfg", "--tail-events", "5", "--dry-run"]);
    for key in ["tail_events", "range", "would_compact_events"] {
        assert_eq!(plan[key], given[key], "{key}: {plan} vs {given}");
    }
    let wide = ctl(&d, &["compact", "cfg", "--tail-events", "40", "--dry-run"]);
    assert_eq!(wide["compactable"], false, "{wide}");
    assert_eq!(
        wide["reason"], "33 events since the last compaction; the tail keeps 40",
        "{wide}"
    );

    let real = d
        .connect()
        .call_ok("agentd/compact", json!({"session_id": "cfg"}));
    assert_eq!(real["recorded"], true, "{real}");
    assert_eq!(real["tail_events"], plan["tail_events"], "{real}");
    assert_eq!(real["range"], plan["range"], "{real}");
    let seq = real["compaction_seq"].as_u64().unwrap();
    let evs = events(&d, "cfg");
    let recorded = evs.iter().find(|e| e["seq"] == seq).unwrap();
    assert_eq!(recorded["data"], real["event"]["data"]);
    let to_seq = recorded["data"]["range"]["to_seq"].as_u64().unwrap();
    // The events between the compacted range and the compaction stay raw.
    assert_eq!(
        recorded["data"]["tail_event_count"],
        seq - to_seq - 1,
        "{recorded}"
    );
}

#[test]
fn compaction_never_separates_a_tool_call_from_its_result() {
    let d = daemon();
    new_session(&d, "pairs", None);
    // One long turn (no boundary within reach of the cut) of parallel call steps:
    // call a, call b, result a, result b, assistant.
    let mut evs = vec![
        ev("turn_started", json!({"turn_id": "t"})),
        user("work through the files"),
    ];
    for i in 0..15 {
        let (a, b) = (format!("a{i}"), format!("b{i}"));
        evs.push(call(&a, "read_file", json!({"path": format!("f{i}")})));
        evs.push(call(&b, "search", json!({"pattern": "x"})));
        evs.push(result(&a, "a"));
        evs.push(result(&b, "b"));
        evs.push(assistant(&format!("step {i}")));
    }
    evs.push(ev(
        "turn_ended",
        json!({"turn_id": "t", "status": "completed"}),
    ));
    append(&d, "pairs", evs);
    let all = events(&d, "pairs");
    let n = all.len();
    let seq_of = |i: usize| all[i]["seq"].as_u64().unwrap();
    let mut call_seq = BTreeMap::new();
    let mut result_seq = BTreeMap::new();
    for e in &all {
        let id = str_of(e, "/data/call_id").to_string();
        match e["type"].as_str() {
            Some("tool_call") => call_seq.insert(id, e["seq"].as_u64().unwrap()),
            Some("tool_result") => result_seq.insert(id, e["seq"].as_u64().unwrap()),
            _ => None,
        };
    }
    let mut split_cases = 0;
    for tail in 1..=12usize {
        let plan = ctl(
            &d,
            &[
                "compact",
                "pairs",
                "--tail-events",
                &tail.to_string(),
                "--dry-run",
            ],
        );
        assert_eq!(plan["compactable"], true, "tail {tail}: {plan}");
        let to = plan["range"]["to_seq"].as_u64().unwrap();
        for (id, c) in &call_seq {
            let r = result_seq[id];
            assert_eq!(
                *c <= to,
                r <= to,
                "tail {tail}: cut at seq {to} separates call {id} (seq {c}) from its result (seq {r})"
            );
        }
        // The naive cut (exactly `tail` raw events) falls between a call and its result.
        let naive_to = seq_of(n - tail - 1);
        if call_seq
            .iter()
            .any(|(id, c)| *c <= naive_to && result_seq[id] > naive_to)
        {
            split_cases += 1;
            assert!(to < naive_to, "tail {tail}: cut did not move earlier");
        }
    }
    assert!(split_cases >= 2, "the history must exercise splitting cuts");

    // tail 3: naive tail = [result b14, assistant, turn_ended].
    let real = ctl(&d, &["compact", "pairs", "--tail-events", "3"]);
    assert_eq!(real["recorded"], true);
    let to = real["range"]["to_seq"].as_u64().unwrap();
    assert!(to < call_seq["a14"], "{real}");
    let ctx = ctl(&d, &["context", "pairs"]);
    assert_pairs(&ctx);
    assert_eq!(ctx["stats"]["synthetic_orphan_closures"], json!([]));
    assert_eq!(ctx["stats"]["function_call_outputs"], 2, "{ctx}");
}

/// Items replay produces for the raw events of `evs` with seq > `to`.
fn replayable_after(evs: &[Value], to: u64) -> Vec<&Value> {
    evs.iter()
        .filter(|e| e["seq"].as_u64().unwrap() > to)
        .filter(|e| {
            matches!(
                e["type"].as_str(),
                Some("user_message" | "assistant_message" | "tool_call" | "tool_result")
            )
        })
        .collect()
}

#[test]
fn after_compaction_context_is_the_checkpoint_plus_the_raw_tail() {
    let d = daemon();
    long_history(&d, "cx");
    let full = ctl(&d, &["context", "cx"]);
    assert!(full["stats"]
        .get("checkpoint_to_seq")
        .is_none_or(Value::is_null));
    let real = ctl(&d, &["compact", "cx", "--tail-events", "10"]);
    let to = real["range"]["to_seq"].as_u64().unwrap();
    let view = real["event"]["data"]["view"].as_str().unwrap().to_string();
    assert!(view.starts_with("[SESSION_CHECKPOINT v1]"), "{view}");

    let ctx = ctl(&d, &["context", "cx"]);
    assert_pairs(&ctx);
    assert_eq!(ctx["stats"]["checkpoint_to_seq"], to);
    assert_eq!(ctl(&d, &["show", "cx"])["checkpoint_to_seq"], to);
    let items = ctx["items"].as_array().unwrap();
    // developer context, then the rendered checkpoint, then the raw tail.
    assert_eq!(items[0]["role"], "developer", "{ctx}");
    let cp_text = items[1].to_string();
    assert!(cp_text.contains("[HISTORY_COMPACTION v1]"), "{cp_text}");
    assert!(cp_text.contains("SESSION_CHECKPOINT v1"), "{cp_text}");
    let evs = events(&d, "cx");
    let tail = replayable_after(&evs, to);
    assert_eq!(items.len(), 2 + tail.len(), "{ctx}");
    // Prompts before the cut are gone from replay (the checkpoint may quote only the
    // latest task); those after it are replayed raw.
    for e in &evs {
        if e["type"] == "user_message" && e["seq"].as_u64().unwrap() > to {
            let t = str_of(e, "/data/text");
            assert!(
                items[2..].iter().any(|i| i.to_string().contains(t)),
                "{t} not replayed"
            );
        }
    }
    let tail_text = items[2..].iter().map(Value::to_string).collect::<String>();
    assert!(!tail_text.contains("prompt number 0"));
    assert!(full["stats"]["items"].as_u64() > ctx["stats"]["items"].as_u64());
}

#[test]
fn recompaction_carries_files_touched_forward() {
    let d = daemon();
    new_session(&d, "rc", None);
    let mut first = turn(
        "t1",
        "read a and write b",
        &[
            ("r1", "read_file", json!({"path": "a.txt"})),
            ("w1", "write_file", json!({"path": "b.txt", "content": "b"})),
        ],
        "ok",
    );
    first.extend(turn("t2", "nothing", &[], "fine"));
    append(&d, "rc", first);
    let c1 = ctl(&d, &["compact", "rc", "--tail-events", "2"]);
    assert_eq!(c1["recorded"], true, "{c1}");
    let files1: BTreeSet<String> = c1["event"]["data"]["files_touched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(
        files1.contains("a.txt") && files1.contains("b.txt"),
        "{files1:?}"
    );

    let mut second = turn(
        "t3",
        "edit c",
        &[(
            "e3",
            "edit_file",
            json!({"path": "c.txt", "old": "x", "new": "y"}),
        )],
        "edited",
    );
    second.extend(turn("t4", "thanks", &[], "welcome"));
    append(&d, "rc", second);
    let c2 = ctl(&d, &["compact", "rc", "--tail-events", "2"]);
    assert_eq!(c2["recorded"], true, "{c2}");
    let data = &c2["event"]["data"];
    let files2: BTreeSet<String> = data["files_touched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    for f in ["a.txt", "b.txt", "c.txt"] {
        assert!(files2.contains(f), "{f} missing from {files2:?}");
    }
    // The range is cumulative and continues after the first compaction.
    assert_eq!(data["range"]["from_seq"], c1["range"]["from_seq"]);
    assert!(data["range"]["to_seq"].as_u64() > c1["range"]["to_seq"].as_u64());
    // The embedded checkpoint still knows the files of the first compaction.
    let cp = &data["checkpoint"];
    assert!(cp["files_read"].to_string().contains("a.txt"), "{cp}");
    assert!(cp["files_modified"].to_string().contains("b.txt"), "{cp}");
    assert!(cp["files_modified"].to_string().contains("c.txt"), "{cp}");
    let ctx = ctl(&d, &["context", "rc"]);
    assert_pairs(&ctx);
    assert_eq!(ctx["stats"]["checkpoint_to_seq"], data["range"]["to_seq"]);
    // Only the latest compaction is replayed.
    assert_eq!(
        ctx["items"]
            .to_string()
            .matches("[HISTORY_COMPACTION v1]")
            .count(),
        1
    );
}

// ---------------------------------------------------------------------------------------
// Checkpoint
// ---------------------------------------------------------------------------------------

const LIB_RS: &str = "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n";

/// A fixed history with file artifacts, a tool-output artifact and memory updates.
/// Returns the appended `(seq, id)`s.
fn checkpoint_history(d: &Daemon, sid: &str) -> Vec<(u64, String)> {
    let ws = d.workspace();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/lib.rs"), LIB_RS).unwrap();
    std::fs::write(ws.join("README.md"), "# demo\n").unwrap();
    let lib_sha = sha256(LIB_RS.as_bytes());
    let readme_sha = sha256(b"# demo\n");
    let out_sha = sha256(b"test result: ok. 3 passed");
    new_session(d, sid, Some("checkpoint demo"));
    append(
        d,
        sid,
        vec![
            ev("turn_started", json!({"turn_id": "t1"})),
            user("Make add() handle overflow and keep the tests green."),
            call("call_1", "read_file", json!({"path": "src/lib.rs"})),
            ev(
                "tool_result",
                json!({"call_id": "call_1", "ok": true, "output": LIB_RS,
                    "artifacts": [{"uri": "src/lib.rs", "kind": "file", "sha256": lib_sha}]}),
            ),
            call("call_2", "shell", json!({"command": "cargo test"})),
            ev(
                "tool_result",
                json!({"call_id": "call_2", "ok": true, "output": "test result: ok. 3 passed",
                    "exit_code": 0,
                    "artifacts": [{"uri": format!("resource:{out_sha}"), "kind": "tool_output", "sha256": out_sha}]}),
            ),
            call("call_3", "read_file", json!({"path": "README.md"})),
            ev(
                "tool_result",
                json!({"call_id": "call_3", "ok": true, "output": "# demo\n",
                    "artifacts": [{"uri": "README.md", "kind": "file", "sha256": readme_sha}]}),
            ),
            ev(
                "memory_update",
                json!({"kind": "plan", "steps": [
                        {"id": "1", "text": "Read add()"},
                        {"id": "2", "text": "Use checked_add"},
                        {"id": "3", "text": "Run the tests"}],
                    "done": {"1": true},
                    "evidence": {"source": "call", "ref": "call_1"}}),
            ),
            ev(
                "memory_update",
                json!({"kind": "decision", "decision_id": "overflow", "topic": "api",
                    "decision": "return Option<i32> from add", "rationale": "callers must see overflow",
                    "evidence": {"source": "call", "ref": "call_1"}}),
            ),
            ev(
                "memory_update",
                json!({"kind": "fact", "key": "add.location", "value": "add() lives in src/lib.rs",
                    "depends_on": [{"uri": "src/lib.rs"}],
                    "evidence": {"source": "artifact", "ref": "src/lib.rs"}}),
            ),
            ev(
                "memory_update",
                json!({"kind": "fact", "key": "readme.title", "value": "the README title is demo",
                    "depends_on": [{"uri": "README.md"}],
                    "evidence": {"source": "call", "ref": "call_3"}}),
            ),
            assistant("Plan recorded."),
            ev(
                "turn_ended",
                json!({"turn_id": "t1", "status": "completed"}),
            ),
        ],
    )
}

#[test]
fn checkpoint_view_golden() {
    let d = daemon();
    let ids = checkpoint_history(&d, "cpv");
    let out = d.agentctl(["checkpoint", "cpv"]);
    out.assert_code(0);
    let mut text = out.stdout.clone();
    // Event ids are random; name them by seq.
    for (seq, id) in &ids {
        text = text.replace(id.as_str(), &format!("<event@seq{seq}>"));
    }
    let ws = d.workspace().display().to_string();
    text = text.replace(&ws, "<workspace>");
    golden("checkpoint_view.txt", &text);

    // --json carries the same view, and the checkpoint it renders.
    let j = ctl(&d, &["checkpoint", "cpv"]);
    assert_eq!(
        j["view"].as_str().unwrap().trim_end(),
        out.stdout.trim_end()
    );
    let cp = &j["checkpoint"];
    assert_eq!(cp["schema_version"], 1);
    assert_eq!(cp["artifacts"]["src/lib.rs"]["kind"], "file");
    assert_eq!(
        cp["artifacts"]["src/lib.rs"]["sha256"],
        sha256(LIB_RS.as_bytes())
    );
    assert_eq!(cp["facts"]["add.location"]["status"], "VALID");
    assert_eq!(cp["facts"]["readme.title"]["status"], "VALID");
    assert_eq!(cp["files_read"], json!(["README.md", "src/lib.rs"]));
    assert_eq!(
        cp["task"]["text"],
        "Make add() handle overflow and keep the tests green."
    );
    // Same history, same bytes.
    assert_eq!(d.agentctl(["checkpoint", "cpv"]).stdout, out.stdout);
}

/// A fact resting on a tool output the daemon stored as a content-addressed resource
/// (`resource:<sha256>`, bytes in `sessions/<sid>/resources/<sha256>`, as the tools
/// record output over 16 KiB) can never go stale: its bytes are immutable. It must be
/// VALID while the resource exists.
#[test]
fn fact_on_a_stored_tool_output_is_valid() {
    let d = daemon();
    let out = "test result: ok. 3 passed".repeat(1000);
    let sha = sha256(out.as_bytes());
    new_session(&d, "res", None);
    let dir = d.home().join("sessions/res/resources");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(&sha), &out).unwrap();
    let uri = format!("resource:{sha}");
    append(
        &d,
        "res",
        vec![
            user("run the tests"),
            call("c1", "shell", json!({"command": "cargo test"})),
            ev(
                "tool_result",
                json!({"call_id": "c1", "ok": true, "output": &out[..100], "exit_code": 0,
                    "artifacts": [{"uri": &uri, "kind": "tool_output", "sha256": &sha}]}),
            ),
            ev(
                "memory_update",
                json!({"kind": "fact", "key": "tests.count", "value": "3 tests pass",
                    "depends_on": [{"uri": &uri}],
                    "evidence": {"source": "artifact", "ref": &uri}}),
            ),
        ],
    );
    let j = ctl(&d, &["checkpoint", "res"]);
    assert_eq!(j["checkpoint"]["artifacts"][&uri]["sha256"], sha.as_str());
    assert_eq!(
        j["checkpoint"]["facts"]["tests.count"]["status"], "VALID",
        "a fact on an immutable stored tool output is SUSPECT: {}",
        j["view"]
    );
}

#[test]
fn fact_turns_suspect_when_its_file_changes_on_disk() {
    let d = daemon();
    checkpoint_history(&d, "sus");
    let status = |key: &str| {
        let j = ctl(&d, &["checkpoint", "sus"]);
        (
            j["checkpoint"]["facts"][key]["status"]
                .as_str()
                .unwrap()
                .to_string(),
            j["view"].as_str().unwrap().to_string(),
        )
    };
    let (s, view) = status("add.location");
    assert_eq!(s, "VALID");
    let suspect_section = |v: &str| v.split("[FACTS_SUSPECT]").nth(1).unwrap_or("").to_string();
    assert!(!suspect_section(&view).contains("add.location"), "{view}");

    std::fs::write(
        d.workspace().join("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> Option<i32> { a.checked_add(b) }\n",
    )
    .unwrap();
    let (s, view) = status("add.location");
    assert_eq!(s, "SUSPECT", "{view}");
    assert!(suspect_section(&view).contains("add.location"), "{view}");
    // The other fact's file did not change.
    assert_eq!(status("readme.title").0, "VALID");

    // Restoring the bytes restores validity; deleting the file makes it unknown.
    std::fs::write(d.workspace().join("src/lib.rs"), LIB_RS).unwrap();
    assert_eq!(status("add.location").0, "VALID");
    std::fs::remove_file(d.workspace().join("README.md")).unwrap();
    assert_eq!(status("readme.title").0, "SUSPECT");
}

// ---------------------------------------------------------------------------------------
// Fork
// ---------------------------------------------------------------------------------------

/// A parent whose Log holds every type a fork must not copy, plus an unknown type.
fn fork_parent(d: &Daemon, sid: &str) -> Vec<(u64, String)> {
    new_session(d, sid, Some("parent"));
    let mut evs = turn(
        "t1",
        "first prompt",
        &[("c1", "read_file", json!({"path": "a"}))],
        "first answer",
    );
    evs.insert(
        2,
        ev(
            "provider_usage",
            json!({"provider": "script", "model": "m", "usage": {"total_tokens": 10}}),
        ),
    );
    evs.push(ev(
        "turn_failed",
        json!({"terminal_status": "failed", "error_kind": "network", "error_message": "x"}),
    ));
    evs.push(ev("future_event_kind", json!({"anything": [1, 2, 3]})));
    evs.push(ev("session_info", json!({"title": "renamed"})));
    evs.extend(turn(
        "t2",
        "second prompt",
        &[("c2", "shell", json!({"command": "ls"}))],
        "second answer",
    ));
    append(d, sid, evs)
}

const NOT_COPIED: [&str; 7] = [
    "provider_usage",
    "history_compaction",
    "session_fork",
    "branch_summary",
    "turn_failed",
    "log_repaired",
    "session_started",
];

#[test]
fn fork_child_starts_with_session_fork_and_copies_the_prefix() {
    let d = daemon();
    fork_parent(&d, "par");
    ctl(&d, &["compact", "par", "--tail-events", "4"]);
    let parent_log = "par";
    let parent_hash = log_hash(&d, parent_log);
    let parent = events(&d, "par");
    let last = parent.last().unwrap()["seq"].as_u64().unwrap();

    let r = ctl(&d, &["fork", "par", "--child-session-id", "kid"]);
    assert_eq!(r["recorded"], true);
    assert_eq!(r["child_session_id"], "kid");
    assert_eq!(r["parent_session_id"], "par");
    assert_eq!(r["fork_root_session_id"], "par");
    assert_eq!(r["to_seq"], last);
    assert_eq!(
        log_hash(&d, parent_log),
        parent_hash,
        "fork modified the parent"
    );

    let child = events(&d, "kid");
    assert_eq!(r["event_count"], child.len());
    let first = &child[0];
    assert_eq!(first["seq"], 0);
    assert_eq!(first["type"], "session_fork");
    let copied: Vec<&Value> = parent
        .iter()
        .filter(|e| !NOT_COPIED.contains(&e["type"].as_str().unwrap()))
        .collect();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let data = &first["data"];
    assert_eq!(data["parent_session_id"], "par");
    assert_eq!(data["fork_root_session_id"], "par");
    assert_eq!(data["forked_to_seq"], last);
    assert_eq!(data["workspace"], ws);
    assert_eq!(data["strategy"], "replay_v1");
    assert_eq!(data["replay_event_count"], copied.len());

    assert_eq!(child.len(), 1 + copied.len(), "{child:?}");
    for (i, (c, p)) in child[1..].iter().zip(&copied).enumerate() {
        assert_eq!(c["seq"], i as u64 + 1);
        assert_eq!(c["session_id"], "kid");
        assert_eq!(c["type"], p["type"]);
        assert_eq!(c["ts"], p["ts"]);
        assert_eq!(c["data"], p["data"]);
        assert_ne!(c["id"], p["id"], "ids must be new");
    }
    let types: BTreeSet<&str> = child[1..]
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    for t in NOT_COPIED {
        assert!(!types.contains(t), "{t} copied into the child");
    }
    assert!(
        types.contains("future_event_kind"),
        "unknown types are kept"
    );

    let show = ctl(&d, &["show", "kid"]);
    assert_eq!(show["workspace"], ws);
    assert_eq!(show["unknown_types"]["future_event_kind"], 1);
    let ctx = ctl(&d, &["context", "kid"]);
    assert_pairs(&ctx);
    assert!(ctx["stats"]
        .get("checkpoint_to_seq")
        .is_none_or(Value::is_null));
}

#[test]
fn fork_refuses_a_seq_that_does_not_exist() {
    let d = daemon();
    fork_parent(&d, "p2");
    let before = hash_tree(d.home());
    let out = run(
        &d,
        &[
            "fork",
            "p2",
            "--to-seq",
            "9999",
            "--child-session-id",
            "nope",
        ],
    );
    out.assert_code(2);
    assert_eq!(out.json()["ok"], false);
    assert_eq!(out.json()["error"]["kind"], "invalid_args");
    assert_eq!(hash_tree(d.home()), before);
    assert!(!d.has_log("nope"));
    let out = run(&d, &["fork", "missing-parent"]);
    out.assert_code(2);
    assert_eq!(out.json()["error"]["kind"], "not_found");
}

#[test]
fn fork_cut_closes_orphans_in_the_child_only() {
    let d = daemon();
    let seqs = fork_parent(&d, "p3");
    let parent_hash = log_hash(&d, "p3");
    let parent = events(&d, "p3");
    // Cut right after tool_call c2, inside turn t2.
    let c2 = parent
        .iter()
        .find(|e| e["type"] == "tool_call" && e["data"]["call_id"] == "c2")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    assert!(seqs.iter().any(|(s, _)| *s == c2));
    let r = ctl(
        &d,
        &[
            "fork",
            "p3",
            "--to-seq",
            &c2.to_string(),
            "--child-session-id",
            "cut",
        ],
    );
    assert_eq!(r["to_seq"], c2);
    let child = events(&d, "cut");
    let closure = child
        .iter()
        .find(|e| e["type"] == "tool_result" && e["data"]["call_id"] == "c2")
        .expect("a closure for c2");
    assert_eq!(closure["data"]["ok"], false);
    assert_eq!(closure["data"]["error"]["kind"], "orphan_tool_call");
    assert_eq!(closure["data"]["error"]["details"]["reason"], "fork_cut");
    assert_eq!(closure["data"]["error"]["details"]["tool"], "shell");
    let ended = child.last().unwrap();
    assert_eq!(ended["type"], "turn_ended", "{child:?}");
    assert_eq!(ended["data"]["status"], "interrupted");
    assert_eq!(ended["data"]["turn_id"], "t2");
    // Nothing is pending in the child, the parent is untouched.
    assert_eq!(ctl(&d, &["show", "cut"])["pending_tool_calls"], json!([]));
    let ctx = ctl(&d, &["context", "cut"]);
    assert_pairs(&ctx);
    assert_eq!(ctx["stats"]["synthetic_orphan_closures"], json!([]));
    assert_eq!(log_hash(&d, "p3"), parent_hash);
    assert_eq!(ctl(&d, &["show", "p3"])["pending_tool_calls"], json!([]));
}

#[test]
fn fork_summarize_records_a_branch_summary() {
    let d = daemon();
    fork_parent(&d, "p4");
    let r = ctl(
        &d,
        &[
            "fork",
            "p4",
            "--to-seq",
            "5",
            "--summarize",
            "--child-session-id",
            "sum",
        ],
    );
    assert_eq!(r["summarize"], true);
    assert_eq!(r["would_record_branch_summary"], true);
    let child = events(&d, "sum");
    let bs = child.last().unwrap();
    assert_eq!(bs["type"], "branch_summary", "{child:?}");
    assert_eq!(bs["data"]["parent_session_id"], "p4");
    assert_eq!(bs["data"]["forked_to_seq"], 5);
    assert!(!str_of(bs, "/data/summary").is_empty());
    let ctx = ctl(&d, &["context", "sum"]);
    assert!(
        ctx["items"].to_string().contains("[BRANCH_SUMMARY v1]"),
        "{ctx}"
    );
    let tree = ctl(&d, &["tree", "p4"]);
    assert_eq!(tree["tree"]["forks"][0]["branch_summary"], true, "{tree}");
}

#[test]
fn fork_dry_run_writes_nothing() {
    let d = daemon();
    fork_parent(&d, "p5");
    ctl(&d, &["show", "p5"]);
    let before = hash_tree(d.home());
    let list_before = ctl(&d, &["ls"]);
    let r = ctl(
        &d,
        &[
            "fork",
            "p5",
            "--dry-run",
            "--summarize",
            "--to-seq",
            "4",
            "--child-session-id",
            "dry",
        ],
    );
    assert_eq!(r["recorded"], false);
    assert_eq!(r["dry_run"], true);
    assert_eq!(r["to_seq"], 4);
    assert_eq!(r["would_record_branch_summary"], true);
    assert!(r["event_count"].as_u64().unwrap() > 1);
    assert_eq!(hash_tree(d.home()), before, "dry run wrote a file");
    assert_eq!(ctl(&d, &["ls"]), list_before);
    assert_eq!(run(&d, &["show", "dry"]).code, Some(2));
}

#[test]
fn fork_of_a_fork_keeps_the_original_root() {
    let d = daemon();
    fork_parent(&d, "root0");
    ctl(
        &d,
        &["fork", "root0", "--to-seq", "6", "--child-session-id", "f1"],
    );
    let r = ctl(&d, &["fork", "f1", "--child-session-id", "f2"]);
    assert_eq!(r["fork_root_session_id"], "root0");
    assert_eq!(r["parent_session_id"], "f1");
    let first = &events(&d, "f2")[0];
    assert_eq!(first["data"]["fork_root_session_id"], "root0");
    assert_eq!(first["data"]["parent_session_id"], "f1");
    let ls = ctl(&d, &["ls"]);
    let f2 = ls["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == "f2")
        .unwrap();
    assert_eq!(f2["parent_session_id"], "f1");
    assert_eq!(f2["fork_root_session_id"], "root0");
}

// ---------------------------------------------------------------------------------------
// Tree
// ---------------------------------------------------------------------------------------

/// root ── a @1, a2 @3 (same seq: by id), b @3, and a-1 (summarized) under a.
fn build_tree(d: &Daemon) {
    new_session(d, "root", Some("tree \"root\""));
    append(
        d,
        "root",
        vec![
            user("one"),
            assistant("two"),
            user("three"),
            assistant("four"),
        ],
    );
    for (to, id) in [("3", "b"), ("1", "a"), ("3", "a2")] {
        ctl(
            d,
            &["fork", "root", "--to-seq", to, "--child-session-id", id],
        );
    }
    ctl(
        d,
        &[
            "fork",
            "a",
            "--summarize",
            "--child-session-id",
            "a-1",
            "--title",
            "deeper",
        ],
    );
    new_session(d, "unrelated", None);
}

fn tree_order(node: &Value, out: &mut Vec<String>) {
    out.push(node["session_id"].as_str().unwrap().to_string());
    let forks = node["forks"].as_array().unwrap();
    let keys: Vec<(u64, &str)> = forks
        .iter()
        .map(|f| {
            (
                f["forked_to_seq"].as_u64().unwrap(),
                f["session_id"].as_str().unwrap(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "children not sorted by (forked_to_seq, id)");
    for f in forks {
        tree_order(f, out);
    }
}

#[test]
fn tree_drawing_golden_and_json_order() {
    let d = daemon();
    build_tree(&d);
    let out = d.agentctl(["tree", "root"]);
    out.assert_code(0);
    golden("tree.txt", &out.stdout);

    let j = ctl(&d, &["tree", "root"]);
    let mut order = Vec::new();
    tree_order(&j["tree"], &mut order);
    assert_eq!(order, ["root", "a", "a-1", "a2", "b"]);
    let root = &j["tree"];
    assert_eq!(root["event_count"], 5);
    assert!(root.get("forked_to_seq").is_none_or(Value::is_null));
    let a = &root["forks"][0];
    assert_eq!(a["forked_to_seq"], 1);
    assert_eq!(a["forks"][0]["branch_summary"], true);
    assert_eq!(a["forks"][0]["title"], "deeper");
    for key in [
        "workspace",
        "first_event_ts",
        "last_event_ts",
        "event_count",
    ] {
        assert!(!a[key].is_null(), "node lacks {key}: {a}");
    }
    // Depth limit marks the cut node.
    let shallow = ctl(&d, &["tree", "root", "--max-depth", "1"]);
    let a = &shallow["tree"]["forks"][0];
    assert_eq!(a["truncated"], true, "{shallow}");
    assert_eq!(a["forks"], json!([]));
    // An unbounded depth is refused up front (deep fork chains must not exhaust the
    // daemon's stack), and the daemon keeps serving.
    let deep = run(&d, &["tree", "root", "--max-depth", "1000000000"]);
    deep.assert_code(2);
    assert_eq!(deep.json()["error"]["kind"], "invalid_args", "{deep:?}");
    assert_eq!(
        ctl(&d, &["tree", "root", "--max-depth", "48"])["tree"]["session_id"],
        "root"
    );
    // A workspace tree lists every root of the workspace.
    let ws = d.workspace().display().to_string();
    let roots = ctl(&d, &["tree", "--workspace", &ws]);
    let ids: Vec<&str> = roots["roots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["root", "unrelated"]);
    // Tree of an unknown session: not_found, exit 2.
    let out = run(&d, &["tree", "ghost"]);
    out.assert_code(2);
    assert_eq!(out.json()["error"]["kind"], "not_found");
}

fn lineage(ls: &Value) -> BTreeMap<String, (Value, Value)> {
    ls["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["session_id"].as_str().unwrap().to_string(),
                (
                    s.get("parent_session_id").cloned().unwrap_or(Value::Null),
                    s.get("fork_root_session_id")
                        .cloned()
                        .unwrap_or(Value::Null),
                ),
            )
        })
        .collect()
}

#[test]
fn lineage_shows_in_ls_and_survives_a_restart() {
    let mut d = daemon();
    build_tree(&d);
    let ls = ctl(&d, &["ls"]);
    let lin = lineage(&ls);
    let want: BTreeMap<String, (Value, Value)> = [
        ("root", (Value::Null, Value::Null)),
        ("unrelated", (Value::Null, Value::Null)),
        ("a", (json!("root"), json!("root"))),
        ("a2", (json!("root"), json!("root"))),
        ("b", (json!("root"), json!("root"))),
        ("a-1", (json!("a"), json!("root"))),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(lin, want);
    let tree_before = ctl(&d, &["tree", "root"]);
    let drawing_before = d.agentctl(["tree", "root"]).stdout;

    d.restart();
    assert_eq!(lineage(&ctl(&d, &["ls"])), want);
    assert_eq!(ctl(&d, &["tree", "root"]), tree_before);
    assert_eq!(d.agentctl(["tree", "root"]).stdout, drawing_before);
}

#[test]
fn fork_copies_the_resources_its_events_reference() {
    let d = daemon();
    new_session(&d, "rp", None);
    let store = |bytes: &[u8]| {
        let sha = sha256(bytes);
        let dir = d.home().join("sessions/rp/resources");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(&sha), bytes).unwrap();
        sha
    };
    let early = store(&b"early output ".repeat(2000));
    let late = store(&b"late output ".repeat(2000));
    let desc =
        |sha: &str| json!({"sha256": sha, "bytes": 26000, "path": format!("resources/{sha}")});
    let seqs = append(
        &d,
        "rp",
        vec![
            call("c1", "shell", json!({"command": "a"})),
            ev(
                "tool_result",
                json!({"call_id": "c1", "ok": true, "output": "early…", "resource": desc(&early)}),
            ),
            call("c2", "shell", json!({"command": "b"})),
            ev(
                "tool_result",
                json!({"call_id": "c2", "ok": true, "output": "late…", "resource": desc(&late)}),
            ),
        ],
    );
    let cut = seqs[1].0;
    ctl(
        &d,
        &[
            "fork",
            "rp",
            "--to-seq",
            &cut.to_string(),
            "--child-session-id",
            "rk",
        ],
    );
    let child_res = d.home().join("sessions/rk/resources");
    assert_eq!(
        std::fs::read(child_res.join(&early)).ok(),
        Some(b"early output ".repeat(2000)),
        "a resource referenced by a copied event must be copied"
    );
    assert!(
        !child_res.join(&late).exists(),
        "a resource referenced only after the cut was copied"
    );
    // The parent keeps both.
    assert!(d.home().join("sessions/rp/resources").join(&late).exists());
}

#[test]
fn context_and_checkpoint_are_identical_after_a_restart() {
    let mut d = daemon();
    long_history(&d, "rs");
    ctl(&d, &["compact", "rs", "--tail-events", "9"]);
    append(&d, "rs", turn("t9", "after the checkpoint", &[], "ok"));
    let ctx = ctl(&d, &["context", "rs"]);
    let cp = ctl(&d, &["checkpoint", "rs"]);
    let show = ctl(&d, &["show", "rs"]);
    let log = log_hash(&d, "rs");
    d.restart();
    assert_eq!(ctl(&d, &["context", "rs"]), ctx);
    assert_eq!(ctl(&d, &["checkpoint", "rs"]), cp);
    let again = ctl(&d, &["show", "rs"]);
    assert_eq!(again["checkpoint_to_seq"], show["checkpoint_to_seq"]);
    assert_eq!(again["event_count"], show["event_count"]);
    assert_eq!(log_hash(&d, "rs"), log, "loading rewrote the Log");
}

#[test]
fn tree_without_arguments_draws_the_current_workspace() {
    let d = daemon();
    build_tree(&d);
    let ws = d.workspace().display().to_string();
    let here = ctl(&d, &["tree"]);
    let there = ctl(&d, &["tree", "--workspace", &ws]);
    assert_eq!(here, there);
    assert_eq!(here["roots"].as_array().unwrap().len(), 2, "{here}");
}

/// Harnesses that run turns themselves append `turn_started` … `turn_ended` through
/// `agentd/append` (docs/protocol.md#sessions-and-events). An idle session leaves memory and reloads on next use;
/// that reload is not a daemon restart and must not close the harness's open turn.
#[test]
fn reloading_an_idle_session_does_not_close_a_harness_turn() {
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config("idle_evict_s = 1\n")
        .start();
    new_session(&d, "hx", None);
    append(
        &d,
        "hx",
        vec![
            ev("turn_started", json!({"turn_id": "h1"})),
            user("harness prompt"),
            call("hc1", "shell", json!({"command": "make"})),
        ],
    );
    // Wait (bounded) until the idle session has left memory.
    let mut conn = d.connect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let st = conn.call_ok("agentd/status", json!({}));
        if st["sessions_loaded"] == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "session never evicted: {st}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The harness finishes its tool call and its turn.
    append(
        &d,
        "hx",
        vec![
            result("hc1", "built"),
            assistant("done"),
            ev(
                "turn_ended",
                json!({"turn_id": "h1", "status": "completed"}),
            ),
        ],
    );
    let evs = events(&d, "hx");
    let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "session_started",
            "turn_started",
            "user_message",
            "tool_call",
            "tool_result",
            "assistant_message",
            "turn_ended"
        ],
        "the reload recorded a restart reconciliation: {evs:#?}"
    );
}

//! Importers against real pi sessions and hand-built codex rollouts and Pixir Logs.
//!
//! Every test checks what a user of `agentd/import` would notice: the conversation is
//! all there (or each missing line is listed with a reason), the output is a Log agentd
//! can load (valid envelopes, contiguous seqs, calls before their results), and the
//! source file is untouched.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use agentd::import::{import, Format, ImportContext, ImportReport};
use agentd_proto::event::validate_draft;
use agentd_proto::{ErrorKind, Event, EventDraft};
use serde_json::{json, Value};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import")
}

fn ctx(workspace: Option<&str>) -> ImportContext {
    ImportContext {
        session_id: "20261121T101500-abc123".into(),
        workspace: workspace.map(str::to_string),
        agentd_version: "0.1.0-test".into(),
        ..Default::default()
    }
}

fn run(format: Format, path: &Path, ws: Option<&str>) -> (ImportReport, Vec<Event>) {
    let before = agentd::text::sha256_hex(&std::fs::read(path).unwrap());
    let mut out = Vec::new();
    let report = import(Some(format), path, &mut out, &ctx(ws)).expect("import succeeds");
    let after = agentd::text::sha256_hex(&std::fs::read(path).unwrap());
    assert_eq!(before, after, "import must not modify the source file");
    let text = String::from_utf8(out).expect("output is UTF-8");
    assert!(text.ends_with('\n'), "every Log line is newline-terminated");
    let events: Vec<Event> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each output line is an envelope"))
        .collect();
    check_log(&events, &report);
    (report, events)
}

/// What agentd needs to load the result: valid envelopes, contiguous seqs, a
/// session_started first, and every line accounted for.
fn check_log(events: &[Event], report: &ImportReport) {
    assert_eq!(events.len() as u64, report.imported);
    let mut ids = HashSet::new();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64, "seqs are contiguous from 0");
        assert_eq!(e.session_id, "20261121T101500-abc123");
        assert!(
            e.id.len() == 16
                && e.id
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "id {:?}",
            e.id
        );
        assert!(ids.insert(e.id.clone()), "ids are unique");
        assert_eq!(
            e.ts.len(),
            "2026-11-21T10:15:02.123456Z".len(),
            "ts {:?}",
            e.ts
        );
        assert!(e.ts.ends_with('Z'));
        let draft = EventDraft {
            kind: e.kind.clone(),
            data: e.data.clone(),
        };
        validate_draft(&draft).unwrap_or_else(|err| panic!("seq {i}: {err}"));
    }
    let first = &events[0];
    assert_eq!(first.kind, "session_started");
    assert_eq!(first.data["created_by"], "import");
    assert_eq!(first.data["log_format"], 1);
    assert!(first.data["imported_from"]["path"]
        .as_str()
        .is_some_and(|p| p.starts_with('/')));
    let t = &report.lines;
    assert_eq!(
        t.imported + t.metadata + t.ui_only + t.skipped,
        report.source_lines,
        "every source line is accounted for: {t:?}"
    );
    assert_eq!(report.skipped_total, report.skipped.len() as u64);
}

/// Every tool_result follows a tool_call with its call_id, at most once; calls without
/// results (orphans) are left for reconciliation. Returns the orphan call ids.
fn check_pairing(events: &[Event]) -> Vec<String> {
    let mut calls: Vec<String> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    for e in events {
        match e.kind.as_str() {
            "tool_call" => calls.push(e.str_field("call_id").unwrap().to_string()),
            "tool_result" => {
                let id = e.str_field("call_id").unwrap();
                assert!(
                    calls.iter().any(|c| c == id),
                    "result {id} has an earlier call"
                );
                assert!(answered.insert(id.to_string()), "one result per call: {id}");
            }
            _ => {}
        }
    }
    calls
        .into_iter()
        .filter(|c| !answered.contains(c))
        .collect()
}

fn of_type<'a>(events: &'a [Event], kind: &str) -> Vec<&'a Event> {
    events.iter().filter(|e| e.kind == kind).collect()
}

/// Source line number → pi message role (or entry type), read independently of the
/// importer.
fn pi_line_kinds(path: &Path) -> BTreeMap<u64, String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let v: Value = match serde_json::from_str(l) {
            Ok(v) => v,
            Err(_) => continue,
        };
        let kind = match v["type"].as_str() {
            Some("message") => format!("message:{}", v["message"]["role"].as_str().unwrap()),
            Some(t) => t.to_string(),
            None => "?".into(),
        };
        out.insert(i as u64 + 1, kind);
    }
    out
}

/// For each source message role: lines that produced events + lines skipped must equal
/// the number of such lines in the source, and no line may be both.
fn check_pi_messages_accounted(path: &Path, report: &ImportReport, events: &[Event]) {
    let kinds = pi_line_kinds(path);
    let imported_lines: HashSet<u64> = events
        .iter()
        .filter_map(|e| e.data.get("import_line").and_then(Value::as_u64))
        .collect();
    let skipped_lines: HashSet<u64> = report.skipped.iter().map(|s| s.line).collect();
    assert!(imported_lines.is_disjoint(&skipped_lines));
    let mut per_role: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for (line, kind) in &kinds {
        if !kind.starts_with("message:") {
            continue;
        }
        let slot = per_role.entry(kind.as_str()).or_default();
        slot.0 += 1;
        if imported_lines.contains(line) {
            slot.1 += 1;
        } else if skipped_lines.contains(line) {
            slot.2 += 1;
        } else {
            panic!("line {line} ({kind}) is neither imported nor skipped");
        }
    }
    for (role, (total, imported, skipped)) in &per_role {
        assert_eq!(*total, imported + skipped, "{role}");
        assert_eq!(report.counts.get(*role).copied(), Some(*total), "{role}");
    }
}

#[test]
fn pi_large_session_imports_every_message() {
    let path = data_dir().join("large-session.jsonl");
    let (report, events) = run(Format::Pi, &path, None);
    check_pi_messages_accounted(&path, &report, &events);
    assert_eq!(report.counts["message:user"], 88);
    assert_eq!(report.counts["message:assistant"], 453);
    assert_eq!(report.counts["message:toolResult"], 373);
    assert_eq!(report.counts["thinking_level_change"], 103);
    assert_eq!(of_type(&events, "user_message").len(), 88);
    assert_eq!(of_type(&events, "tool_result").len(), 373);
    assert_eq!(of_type(&events, "tool_call").len(), 391);
    // 18 calls never got a result (aborted or failed replies): orphans for reconciliation.
    assert_eq!(check_pairing(&events).len(), 18);
    let started = &events[0].data;
    assert_eq!(started["workspace"], "/Users/badlogic/workspaces/pi-mono");
    assert_eq!(started["model"], "claude-sonnet-4-5");
    assert_eq!(started["provider"], "anthropic");
    assert_eq!(started["imported_from"]["format"], "pi");
    assert_eq!(
        started["imported_from"]["session_id"],
        "d703a1a9-1b7b-4fb1-b512-c9738b1fe617"
    );
    // The 14 aborted replies with no content are listed with the reason.
    let empty = report
        .skipped
        .iter()
        .filter(|s| s.reason.contains("assistant message with no content"))
        .count();
    assert_eq!(empty, 14);
    let thinking: Vec<_> = of_type(&events, "reasoning");
    assert_eq!(thinking.len(), 1);
    assert_eq!(thinking[0].data["dialect"], "pi");
    assert_eq!(thinking[0].data["item"]["type"], "thinking");
    // ts comes from the source entries (normalized), not from the import's clock.
    assert_eq!(events[1].ts, "2025-11-20T23:33:01.550000Z");
    for e in of_type(&events, "tool_result") {
        assert!(e.str_field("output").unwrap().len() <= agentd::text::TOOL_OUTPUT_CAP);
    }
}

#[test]
fn pi_before_compaction_keeps_summaries_as_notes_and_maps_bash() {
    let path = data_dir().join("before-compaction.jsonl");
    let (report, events) = run(Format::Pi, &path, Some("/tmp/elsewhere"));
    check_pi_messages_accounted(&path, &report, &events);
    assert_eq!(events[0].data["workspace"], "/tmp/elsewhere");
    assert_eq!(report.counts["message:bashExecution"], 3);
    assert_eq!(report.counts["compaction"], 2);
    check_pairing(&events);
    // pi's LLM summaries are informational notes, never agentd checkpoints.
    assert!(of_type(&events, "history_compaction").is_empty());
    let notes = of_type(&events, "imported_note");
    assert_eq!(notes.len(), 2);
    assert_eq!(notes[0].data["kind"], "compaction");
    assert_eq!(notes[0].data["first_kept_entry_index"], 293);
    assert_eq!(notes[1].data["first_kept_entry_index"], 551);
    assert!(notes[0]
        .str_field("summary")
        .unwrap()
        .contains("Context Checkpoint"));
    // bashExecution → a shell call and its result with a deterministic id.
    let bash: Vec<_> = of_type(&events, "tool_call")
        .into_iter()
        .filter(|e| e.str_field("call_id").unwrap().starts_with("pi-bash-L"))
        .collect();
    assert_eq!(bash.len(), 3);
    assert_eq!(bash[0].data["name"], "shell");
    assert_eq!(bash[0].data["args"]["command"], "ls");
    assert_eq!(bash[0].data["call_id"], "pi-bash-L640");
    let res = events
        .iter()
        .find(|e| e.kind == "tool_result" && e.str_field("call_id") == Some("pi-bash-L640"))
        .unwrap();
    assert_eq!(res.data["ok"], true);
    assert_eq!(res.data["exit_code"], 0);
    assert!(res.str_field("output").unwrap().contains("AGENTS.md"));
    // `find .` printed more than 16 KiB.
    assert!(report.warnings.iter().any(|w| w.contains("were cut")));
    // Reasoning carries the model of the reply that produced it.
    let r = of_type(&events, "reasoning");
    assert_eq!(r.len(), 49);
    assert!(r
        .iter()
        .all(|e| e.data["model"].as_str().unwrap().starts_with("claude")));
    // Settings entries are listed with the value they set.
    assert!(report
        .skipped
        .iter()
        .any(|s| s.reason.starts_with("pi model_change to anthropic/")));
}

fn write(dir: &Path, name: &str, lines: &[Value], tail: &str) -> PathBuf {
    let mut s = String::new();
    for l in lines {
        s.push_str(&serde_json::to_string(l).unwrap());
        s.push('\n');
    }
    s.push_str(tail);
    let p = dir.join(name);
    std::fs::write(&p, s).unwrap();
    p
}

fn entry(id: &str, parent: Option<&str>, ts: &str, body: Value) -> Value {
    let mut v = json!({"id": id, "parentId": parent, "timestamp": ts});
    for (k, val) in body.as_object().unwrap() {
        v[k] = val.clone();
    }
    v
}

fn user(text: &str) -> Value {
    json!({"type": "message", "message": {"role": "user", "content": text}})
}

fn assistant(content: Value) -> Value {
    json!({"type": "message", "message": {"role": "assistant", "content": content,
            "provider": "anthropic", "model": "claude-x", "stopReason": "stop"}})
}

#[test]
fn pi_tree_imports_only_the_current_branch() {
    let dir = tempfile::tempdir().unwrap();
    let ts = "2026-01-02T03:04:05.678Z";
    let lines = vec![
        json!({"type": "session", "version": 3, "id": "tree-1", "timestamp": ts, "cwd": "/work/proj"}),
        entry("e1", None, ts, user("hello")),
        entry(
            "e2",
            Some("e1"),
            ts,
            assistant(json!([{"type": "text", "text": "hi"}])),
        ),
        entry("e3", Some("e2"), ts, user("question on branch A")),
        entry(
            "e4",
            Some("e3"),
            ts,
            assistant(json!([{"type": "text", "text": "answer A"}])),
        ),
        entry(
            "e5",
            Some("e2"),
            ts,
            json!({"type": "branch_summary", "fromId": "e4", "summary": "tried A"}),
        ),
        entry("e6", Some("e5"), ts, user("question on branch B")),
        entry(
            "e7",
            Some("e6"),
            ts,
            assistant(json!([
            {"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"},
            {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a.txt"}}])),
        ),
        entry(
            "e8",
            Some("e7"),
            ts,
            json!({"type": "message", "message": {"role": "toolResult",
            "toolCallId": "c1", "toolName": "read", "content": [{"type": "text", "text": "A!"}], "isError": false}}),
        ),
        entry(
            "e9",
            Some("e8"),
            ts,
            json!({"type": "model_change", "provider": "openai", "modelId": "gpt-5"}),
        ),
        entry(
            "e10",
            Some("e9"),
            ts,
            json!({"type": "label", "targetId": "e6", "label": "b"}),
        ),
        entry(
            "e11",
            Some("e10"),
            ts,
            json!({"type": "custom", "customType": "ext", "data": {"n": 1}}),
        ),
        entry(
            "e12",
            Some("e11"),
            ts,
            json!({"type": "session_info", "name": "Tree test"}),
        ),
        entry(
            "e13",
            Some("e12"),
            ts,
            json!({"type": "compaction", "summary": "so far", "firstKeptEntryId": "e6", "tokensBefore": 10}),
        ),
        entry(
            "e14",
            Some("e13"),
            ts,
            json!({"type": "custom_message", "customType": "ext", "content": "injected", "display": false}),
        ),
        entry(
            "e15",
            Some("e14"),
            ts,
            assistant(json!([{"type": "text", "text": "done B"}])),
        ),
    ];
    // A torn tail: pi died mid-append; the leaf is the last complete entry.
    let path = write(
        dir.path(),
        "tree.jsonl",
        &lines,
        "{\"type\":\"message\",\"id\":\"e16\",\"parentId\":\"e15\"",
    );
    let (report, events) = run(Format::Pi, &path, None);
    let texts: Vec<&str> = events.iter().filter_map(|e| e.str_field("text")).collect();
    assert_eq!(
        texts,
        ["hello", "hi", "question on branch B", "injected", "done B"]
    );
    let off: Vec<u64> = report
        .skipped
        .iter()
        .filter(|s| s.reason.contains("not on the current branch"))
        .map(|s| s.line)
        .collect();
    assert_eq!(off, [4, 5], "branch A (lines 4, 5) is skipped");
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "user_message",
            "assistant_message",
            "imported_note",
            "user_message",
            "reasoning",
            "tool_call",
            "tool_result",
            "session_info",
            "imported_note",
            "user_message",
            "assistant_message",
        ]
    );
    assert_eq!(events[3].data["kind"], "branch_summary");
    assert_eq!(events[5].data["model"], "claude-x");
    assert_eq!(events[8].data["title"], "Tree test");
    assert_eq!(events[9].data["first_kept_entry_id"], "e6");
    assert_eq!(events[0].data["workspace"], "/work/proj");
    assert_eq!(events[1].ts, "2026-01-02T03:04:05.678000Z");
    assert_eq!(report.lines.metadata, 1);
    assert_eq!(report.lines.skipped, 6, "{:?}", report.skipped);
    assert!(report.skipped[5].reason.starts_with("torn last line"));
    assert!(check_pairing(&events).is_empty());
}

#[test]
fn pi_orphan_call_stays_open_and_bad_lines_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let ts = "2026-01-02T03:04:05Z";
    let big = "x".repeat(20_000);
    let lines = vec![
        json!({"type": "session", "id": "v1", "timestamp": ts, "cwd": "/work/orphan"}),
        json!({"type": "message", "timestamp": ts, "message": {"role": "user", "content": [{"type": "text", "text": "go"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}]}}),
        json!({"type": "message", "timestamp": ts, "message": {"role": "assistant", "model": "m1", "stopReason": "aborted", "content": [
            {"type": "text", "text": "partial"},
            {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}},
            {"type": "toolCall", "id": "c2", "name": "read", "arguments": {"path": "f"}}]}}),
        json!({"type": "message", "timestamp": ts, "message": {"role": "toolResult", "toolCallId": "c2", "toolName": "read", "content": [{"type": "text", "text": big}], "isError": true}}),
        json!({"type": "message", "timestamp": ts, "message": {"role": "toolResult", "toolCallId": "c9", "toolName": "read", "content": [], "isError": false}}),
    ];
    let mut path = write(dir.path(), "orphan.jsonl", &lines, "");
    // A malformed middle line and a torn last line.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{not json\n{\"type\":\"message\",\"timestamp\":\"2026");
    path = dir.path().join("orphan2.jsonl");
    std::fs::write(&path, bytes).unwrap();
    let (report, events) = run(Format::Pi, &path, None);
    assert_eq!(check_pairing(&events), ["c1"]);
    let user = of_type(&events, "user_message");
    assert_eq!(user[0].data["text"], "go\n[image not imported: image/png]");
    let a = of_type(&events, "assistant_message");
    assert_eq!(a[0].data["metadata"]["partial"], true);
    let r = of_type(&events, "tool_result");
    assert_eq!(r[0].data["ok"], false);
    assert!(r[0].str_field("output").unwrap().len() <= 16 * 1024);
    let reasons: Vec<(u64, &str)> = report
        .skipped
        .iter()
        .map(|s| (s.line, s.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert_eq!(reasons[0].0, 5);
    assert!(reasons[0].1.contains("no earlier tool call"));
    assert_eq!(reasons[1].0, 6);
    assert!(reasons[1].1.starts_with("not valid JSON"));
    assert_eq!(reasons[2].0, 7);
    assert!(reasons[2].1.starts_with("torn last line"));
    assert!(report.warnings.iter().any(|w| w.contains("image")));
}

#[test]
fn pi_errors_are_invalid_args_and_write_nothing_useful() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let codexish = write(
        dir.path(),
        "c.jsonl",
        &[json!({"timestamp": "t", "type": "session_meta", "payload": {"id": "x", "cwd": "/a"}})],
        "",
    );
    let no_cwd = write(
        dir.path(),
        "n.jsonl",
        &[json!({"type": "session", "id": "x", "timestamp": "2026-01-01T00:00:00Z"})],
        "",
    );
    let garbage = dir.path().join("g.jsonl");
    std::fs::write(&garbage, "hello\n").unwrap();
    for (p, needle) in [
        (&empty, "empty"),
        (&codexish, "not a pi session"),
        (&garbage, "not JSON"),
        (&no_cwd, "--workspace"),
    ] {
        let mut out = Vec::new();
        let e = import(Some(Format::Pi), p, &mut out, &ctx(None)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgs, "{p:?}");
        assert!(e.message.contains(needle), "{}", e.message);
    }
    let mut out = Vec::new();
    let e = import(
        Some(Format::Pi),
        &dir.path().join("missing"),
        &mut out,
        &ctx(None),
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e = import(Some(Format::Pi), dir.path(), &mut out, &ctx(None)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgs);
    // A relative workspace is refused too.
    let e = import(Some(Format::Pi), &no_cwd, &mut out, &ctx(Some("rel/dir"))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgs);
}

fn rl(ts: &str, kind: &str, payload: Value) -> Value {
    json!({"timestamp": ts, "type": kind, "payload": payload})
}

#[test]
fn codex_rollout_maps_items_and_counts_ui_lines() {
    let dir = tempfile::tempdir().unwrap();
    let t = "2025-09-03T17:08:18.123Z";
    let ri = |p: Value| rl(t, "response_item", p);
    let lines = vec![
        rl(
            t,
            "session_meta",
            json!({"id": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "timestamp": t,
            "cwd": "/work/cx", "originator": "codex_cli_rs", "cli_version": "0.40.0",
            "model_provider": "openai", "git": {"branch": "main"}}),
        ),
        ri(
            json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>"}]}),
        ),
        rl(
            t,
            "turn_context",
            json!({"cwd": "/work/cx", "approval_policy": "on-request",
            "sandbox_policy": {"mode": "workspace-write"}, "model": "gpt-5-codex", "effort": "medium", "summary": "auto"}),
        ),
        rl(
            t,
            "event_msg",
            json!({"type": "user_message", "message": "fix the bug", "images": []}),
        ),
        ri(
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]}),
        ),
        ri(
            json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Looking**"}],
            "content": null, "encrypted_content": "gAAAAB"}),
        ),
        ri(
            json!({"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"ls\"]}", "call_id": "call_1"}),
        ),
        rl(
            t,
            "event_msg",
            json!({"type": "exec_command_begin", "call_id": "call_1"}),
        ),
        ri(json!({"type": "function_call_output", "call_id": "call_1", "output": "a\nb"})),
        ri(
            json!({"type": "local_shell_call", "call_id": "call_2", "status": "completed",
            "action": {"type": "exec", "command": ["cat", "x"], "timeout_ms": 1000, "working_directory": null, "env": null, "user": null}}),
        ),
        ri(
            json!({"type": "function_call_output", "call_id": "call_2", "output": {"content": "no such file", "success": false}}),
        ),
        ri(
            json!({"type": "custom_tool_call", "call_id": "call_3", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}),
        ),
        ri(json!({"type": "custom_tool_call_output", "call_id": "call_3", "output": "Done!"})),
        ri(
            json!({"type": "function_call", "name": "read_file", "arguments": "not json", "call_id": "call_4"}),
        ),
        ri(
            json!({"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "q"}}),
        ),
        ri(json!({"type": "hologram_call", "call_id": "h"})),
        rl(
            t,
            "compacted",
            json!({"message": "summary of earlier work", "replacement_history": [{"type": "message"}]}),
        ),
        rl(t, "event_msg", json!({"type": "token_count", "info": null})),
        ri(
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "fixed"}]}),
        ),
        ri(json!({"type": "function_call_output", "call_id": "call_9", "output": "stray"})),
    ];
    let path = write(
        dir.path(),
        "rollout-2025-09-03T17-08-18-0199a1b2.jsonl",
        &lines,
        "{\"timestamp\":\"2025-09-03T17:08:19Z\",\"type\":\"response_item\",\"payload\":{\"type\":\"mess",
    );
    let (report, events) = run(Format::Codex, &path, None);
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "user_message",
            "reasoning",
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "tool_call",
            "imported_note",
            "assistant_message",
        ]
    );
    let s = &events[0].data;
    assert_eq!(s["workspace"], "/work/cx");
    assert_eq!(s["provider"], "openai");
    assert_eq!(s["imported_from"]["format"], "codex");
    assert_eq!(
        s["imported_from"]["session_id"],
        "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    );
    assert_eq!(events[2].data["model"], "gpt-5-codex");
    assert_eq!(events[2].data["dialect"], "codex");
    assert_eq!(events[2].data["item"]["encrypted_content"], "gAAAAB");
    assert_eq!(events[3].data["args"], json!({"command": ["ls"]}));
    assert_eq!(events[5].data["name"], "shell");
    assert_eq!(
        events[5].data["args"],
        json!({"command": ["cat", "x"], "timeout_ms": 1000})
    );
    assert_eq!(events[6].data["ok"], false);
    assert_eq!(events[6].data["output"], "no such file");
    assert_eq!(
        events[7].data["args"],
        json!({"input": "*** Begin Patch\n*** End Patch"})
    );
    assert_eq!(events[9].data["args"], json!({"input": "not json"}));
    assert_eq!(events[10].data["kind"], "compaction");
    assert_eq!(events[10].data["replacement_history_items"], 1);
    assert_eq!(events[1].ts, "2025-09-03T17:08:18.123000Z");
    assert_eq!(check_pairing(&events), ["call_4"]);
    assert_eq!(report.lines.ui_only, 3);
    assert_eq!(report.lines.metadata, 2);
    assert_eq!(report.counts["event_msg:token_count"], 1);
    assert_eq!(report.counts["response_item:hologram_call"], 1);
    let reasons: HashMap<u64, &str> = report
        .skipped
        .iter()
        .map(|s| (s.line, s.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 5, "{reasons:?}");
    assert!(reasons[&2].contains("developer"));
    assert!(reasons[&15].contains("web_search_call"));
    assert!(reasons[&16].contains("hologram_call"));
    assert!(reasons[&20].contains("no earlier tool call"));
    assert!(reasons[&21].starts_with("torn last line"));
}

#[test]
fn codex_header_must_be_session_meta() {
    let dir = tempfile::tempdir().unwrap();
    let pi = data_dir().join("large-session.jsonl");
    let legacy = write(
        dir.path(),
        "old.jsonl",
        &[json!({"id": "x", "timestamp": "2025-01-01T00:00:00Z", "instructions": null})],
        "",
    );
    for (p, needle) in [(&pi, "session_meta"), (&legacy, "early rollout layout")] {
        let mut out = Vec::new();
        let e = import(Some(Format::Codex), p, &mut out, &ctx(None)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
        assert!(e.message.contains(needle), "{}", e.message);
    }
}

fn px(seq: Value, kind: &str, data: Value) -> Value {
    json!({"data": data, "id": "00112233445566ff", "seq": seq,
           "session_id": "sessão-ünïcode-id", "ts": "2026-05-29T12:00:00.123456Z", "type": kind})
}

fn pixir_lines() -> Vec<Value> {
    vec![
        px(
            json!(0),
            "subagent_event",
            json!({"event": "permission_posture", "scope": "session",
            "lineage": "root", "source": "root_session_start", "permission_mode": "ask",
            "workspace": "/work/px"}),
        ),
        px(json!(1), "user_message", json!({"text": "hi"})),
        px(
            json!(2),
            "tool_call",
            json!({"call_id": "c1", "name": "bash", "args": {"command": "ls"}}),
        ),
        px(
            json!(3),
            "tool_result",
            json!({"call_id": "c1", "ok": true, "output": "x", "exit_code": 0}),
        ),
        px(
            json!(4),
            "turn_failed",
            json!({"terminal_status": "provider_error", "error_kind": "network", "error_message": "boom"}),
        ),
        px(json!(5), "assistant_message", json!({"text": "done"})),
    ]
}

#[test]
fn pixir_contiguous_log_keeps_data_and_seq_order() {
    let dir = tempfile::tempdir().unwrap();
    let src = pixir_lines();
    let path = write(dir.path(), "p.ndjson", &src, "");
    let (report, events) = run(Format::Pixir, &path, None);
    assert_eq!(events.len(), 7);
    assert_eq!(events[0].data["workspace"], "/work/px");
    assert_eq!(
        events[0].data["imported_from"]["session_id"],
        "sessão-ünïcode-id"
    );
    for (i, s) in src.iter().enumerate() {
        let e = &events[i + 1];
        assert_eq!(e.kind, s["type"].as_str().unwrap());
        assert_eq!(e.data, s["data"], "data is copied untouched");
        assert_eq!(e.ts, "2026-05-29T12:00:00.123456Z");
        assert_eq!(e.seq, s["seq"].as_u64().unwrap() + 1);
        assert_ne!(e.id, "00112233445566ff", "ids are new");
    }
    assert!(report.skipped.is_empty());
    assert!(!report.warnings.iter().any(|w| w.contains("renumbered")));
    assert!(report.warnings.iter().any(|w| w.contains("synthesized")));
}

#[test]
fn pixir_broken_seqs_are_renumbered_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = pixir_lines();
    src[3]["seq"] = json!(2); // repeat
    src[4]["seq"] = json!(7); // gap
    src.push(px(json!(8), "status", json!({"state": "idle"}))); // ephemeral
    let path = write(dir.path(), "p.ndjson", &src, "{\"data\":{},\"id\"");
    let (report, events) = run(Format::Pixir, &path, Some("/override"));
    assert_eq!(events.len(), 7);
    assert_eq!(events[0].data["workspace"], "/override");
    let w = report
        .warnings
        .iter()
        .find(|w| w.contains("renumbered"))
        .expect("a renumber warning");
    assert!(w.contains("line 4: expected seq 3, found 2"), "{w}");
    assert!(w.contains("3 break(s)"), "{w}");
    let reasons: Vec<&str> = report.skipped.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].contains("ephemeral"));
    assert!(reasons[1].starts_with("torn last line"));
}

#[test]
fn agentd_log_reimport_keeps_session_started_and_seqs() {
    let dir = tempfile::tempdir().unwrap();
    let src = vec![
        px(
            json!(0),
            "session_started",
            json!({"workspace": "/work/a", "agentd_version": "0.0.9", "log_format": 1, "title": "t"}),
        ),
        px(json!(1), "user_message", json!({"text": "hi"})),
        px(json!(2), "mystery_future_type", json!({"x": 1})),
    ];
    let path = write(dir.path(), "a.ndjson", &src, "");
    let (report, events) = run(Format::Pixir, &path, None);
    assert_eq!(events.len(), 3);
    assert_eq!(events[0].data["title"], "t");
    assert_eq!(events[0].data["imported_from"]["format"], "pixir");
    assert_eq!(events[2].kind, "mystery_future_type");
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
}

#[test]
fn pixir_header_must_be_an_envelope() {
    let pi = data_dir().join("large-session.jsonl");
    let mut out = Vec::new();
    let e = import(Some(Format::Pixir), &pi, &mut out, &ctx(None)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgs);
    assert!(e.message.contains("not a Pixir Log"), "{}", e.message);
}

//! `export_roundtrip`: bytes as another agent's session file, imported (format detected
//! from the content, as `--format auto` does), then exported to each of Claude Code,
//! Codex and pi and imported back (docs/moving-sessions.md, "Exporting").
//!
//! Invariants, for every peer: the export of an imported session succeeds and never
//! panics; what it writes imports without error as that peer's format, opens with
//! `session_started` and replays balanced; import(export(x)) keeps x's conversation (its
//! prompts and answers, in order, byte-equal; every call, with its name and arguments
//! (an agentd tool's mapped to the peer's nearest) and its result's text and ok);
//! and a second export and import change nothing (a fixed point: prompts, answers, calls
//! with ids, names and arguments, results with text and ok).

use crate::{check_replay, scratch, SID};
use agentd::import::export::{self, ExportContext, Peer};
use agentd::import::{self, Format, ImportContext};
use agentd_proto::{Event, EventType};
use serde_json::Value;
use std::collections::BTreeMap;

/// The conversation items a user would recognise in a Log.
#[derive(Debug, PartialEq)]
struct Conv {
    prompts: Vec<String>,
    answers: Vec<String>,
    /// (id, name, arguments)
    calls: Vec<(String, String, Value)>,
    /// call id → (output, ok)
    results: BTreeMap<String, (String, bool)>,
}

fn conv(events: &[Event]) -> Conv {
    let s = |d: &Value, k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut c = Conv {
        prompts: vec![],
        answers: vec![],
        calls: vec![],
        results: BTreeMap::new(),
    };
    for e in events {
        let d = &e.data;
        match e.kind.as_str() {
            "user_message" => c.prompts.push(s(d, "text")),
            "assistant_message" => c.answers.push(s(d, "text")),
            "tool_call" => c.calls.push((
                s(d, "call_id"),
                s(d, "name"),
                d.get("args").cloned().unwrap_or(Value::Null),
            )),
            "tool_result" => {
                let ok = d.get("ok").and_then(Value::as_bool).unwrap_or(false);
                c.results.insert(s(d, "call_id"), (s(d, "output"), ok));
            }
            _ => {}
        }
    }
    c
}

/// agentd's own tools, whose names and arguments the export maps to the peer's nearest
/// tool (docs/moving-sessions.md, "Exporting"); any other call keeps both.
const AGENTD_TOOLS: [&str; 8] = [
    "read_file",
    "list_dir",
    "search",
    "write_file",
    "edit_file",
    "shell",
    "memory_apply",
    "apply_patch",
];

/// What the export gives a call the Log holds no result for.
const NO_RESULT: &str = "[the call has no result in agentd's Log; it was interrupted]";

/// Each call's result (output, ok), paired as replay pairs them: a result answers the
/// pending call of its id; a call reusing an id is another call.
fn results_by_call(events: &[Event]) -> Vec<Option<(String, bool)>> {
    let s = |d: &Value, k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut out = Vec::new();
    let mut pending: BTreeMap<String, usize> = BTreeMap::new();
    for e in events {
        let d = &e.data;
        match e.kind.as_str() {
            "tool_call" => {
                pending.insert(s(d, "call_id"), out.len());
                out.push(None);
            }
            "tool_result" => {
                if let Some(i) = pending.remove(&s(d, "call_id")) {
                    let ok = d.get("ok").and_then(Value::as_bool).unwrap_or(false);
                    out[i] = Some((s(d, "output"), ok));
                }
            }
            _ => {}
        }
    }
    out
}

/// Imports the file at `src` as `format`; `None` when the importer refuses it.
fn import_file(format: Option<Format>, src: &std::path::Path) -> Option<Vec<Event>> {
    let ctx = ImportContext {
        session_id: SID.to_string(),
        workspace: Some("/w".into()),
        agentd_version: "fuzz".into(),
        ..Default::default()
    };
    let mut out = Vec::new();
    import::import(format, src, &mut out, &ctx).ok()?;
    let events: Vec<Event> = out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("an imported line is an event"))
        .collect();
    Some(events)
}

fn export_import(peer: Peer, events: &[Event], path: &std::path::Path) -> Vec<Event> {
    let ctx = ExportContext {
        session_id: "0b5e8a8e-1c1f-4c57-9a55-5f2f4a3b2c1d".into(),
        now: "2026-11-27T05:00:00.000Z".into(),
        codex_provider: None,
    };
    let x = export::export(peer, events, &ctx)
        .unwrap_or_else(|e| panic!("{peer:?}: the export of an imported session failed: {e:?}"));
    std::fs::write(path, &x.bytes).unwrap();
    let format = match peer {
        Peer::ClaudeCode => Format::Claude,
        Peer::Codex => Format::Codex,
        Peer::Pi => Format::Pi,
    };
    let back = import_file(Some(format), path)
        .unwrap_or_else(|| panic!("{peer:?}: the exported file does not import"));
    assert_eq!(
        back.first().map(Event::event_type),
        Some(EventType::SessionStarted),
        "{peer:?}: the re-import opens with session_started"
    );
    check_replay(&back, "re-imported export");
    back
}

pub fn run(data: &[u8]) {
    let dir = scratch().join("export");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("src");
    std::fs::write(&src, data).unwrap();
    let Some(x) = import_file(None, &src) else {
        return;
    };
    if x.is_empty() {
        return;
    }
    let original = conv(&x);
    for peer in [Peer::ClaudeCode, Peer::Codex, Peer::Pi] {
        let path = dir.join("exported");
        let y1 = export_import(peer, &x, &path);
        let first = conv(&y1);
        assert_eq!(first.prompts, original.prompts, "{peer:?}: prompts");
        assert_eq!(first.answers, original.answers, "{peer:?}: answers");
        assert_eq!(
            first.calls.len(),
            original.calls.len(),
            "{peer:?}: tool calls"
        );
        // Each call comes back with its name and arguments (an agentd tool's are the
        // peer's nearest tool's) and its result: the same text and ok, or, for a call
        // the Log holds no result for, an error result saying so. Codex has no error
        // flag on a result: a failure without an exit code line gets one.
        let before = results_by_call(&x);
        let after = results_by_call(&y1);
        for (i, ((_, name, args), (id, back_name, back_args))) in
            original.calls.iter().zip(&first.calls).enumerate()
        {
            if !AGENTD_TOOLS.contains(&name.as_str()) {
                assert_eq!(
                    (back_name, back_args),
                    (name, args),
                    "{peer:?}: call {i} ({id}): name and arguments"
                );
            }
            let (output, ok) = before[i]
                .clone()
                .unwrap_or_else(|| (NO_RESULT.to_string(), false));
            let output = match peer {
                Peer::Codex
                    if !ok
                        && !output.contains("Process exited with code ")
                        && !output.contains("Exit code: ") =>
                {
                    format!("Process exited with code 1\nOutput:\n{output}")
                }
                _ => output,
            };
            assert_eq!(
                after[i],
                Some((output, ok)),
                "{peer:?}: call {i} ({id}): its result"
            );
        }
        let y2 = export_import(peer, &y1, &path);
        assert_eq!(
            conv(&y2),
            first,
            "{peer:?}: export and import are a fixed point"
        );
    }
}

//! Independent readers of other agents' session files, for tests that compare content.
//!
//! Each reader takes a source file as its agent wrote it and returns the conversation a
//! user would recognise: the prompts, the assistant's answers, the tool calls (id, name,
//! arguments) and their results (text, ok). They share no code with agentd's importers
//! and exporters, so a test can check that an import carried every item over and that an
//! export writes what the peer itself would read back.
//!
//! `Conv::from_log` reads the same items from an agentd Log's events.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// A conversation's items. Prompts and answers in order; calls in order; results by call
/// id (one result per call).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conv {
    pub prompts: Vec<String>,
    pub answers: Vec<String>,
    /// (call id, tool name, arguments object)
    pub calls: Vec<(String, String, Value)>,
    /// call id → (output text, ok)
    pub results: BTreeMap<String, (String, bool)>,
}

impl Conv {
    /// The conversation of an agentd Log (`agentd/events` or the NDJSON lines): user and
    /// assistant messages, tool calls and results. Imported notes, reasoning, usage and
    /// turn bookkeeping are not conversation items.
    pub fn from_log(events: &[Value]) -> Conv {
        let mut c = Conv::default();
        for e in events {
            let d = &e["data"];
            match e["type"].as_str().unwrap_or("") {
                "user_message" => c.prompts.push(s(d, "text")),
                "assistant_message" => c.answers.push(s(d, "text")),
                "tool_call" => c
                    .calls
                    .push((s(d, "call_id"), s(d, "name"), d["args"].clone())),
                "tool_result" => {
                    c.results.insert(
                        s(d, "call_id"),
                        (s(d, "output"), d["ok"].as_bool().unwrap_or(false)),
                    );
                }
                _ => {}
            }
        }
        c
    }

    /// The call ids, in order.
    pub fn call_ids(&self) -> Vec<&str> {
        self.calls.iter().map(|c| c.0.as_str()).collect()
    }
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

fn lines(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

/// The text blocks of a `content` (a string, or blocks with `type: text`), joined by
/// `sep`.
fn text_blocks(content: &Value, kinds: &[&str], sep: &str) -> String {
    match content {
        Value::String(t) => t.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| kinds.contains(&b["type"].as_str().unwrap_or("")))
            .map(|b| b["text"].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(sep),
        _ => String::new(),
    }
}

/// Walks `parent` links from the last record that has an id: the branch a resumed
/// session continues, root first.
fn branch<'a>(recs: &'a [Value], id: &str, parent: &str) -> Vec<&'a Value> {
    let by_id: HashMap<&str, &Value> = recs
        .iter()
        .filter_map(|r| r[id].as_str().map(|i| (i, r)))
        .collect();
    let mut out = Vec::new();
    let mut cur = recs.iter().rev().find_map(|r| r[id].as_str());
    let mut seen = HashSet::new();
    while let Some(i) = cur {
        if !seen.insert(i) {
            break;
        }
        let Some(r) = by_id.get(i) else { break };
        out.push(*r);
        cur = r[parent].as_str();
    }
    out.reverse();
    out
}

/// Claude Code transcript. The main chain's records (sidechains and meta records left
/// out); results by `tool_use_id`, wherever they sit in the `parentUuid` tree.
pub fn claude(path: &Path) -> Conv {
    let recs = lines(path);
    let mut c = Conv::default();
    let mut answer_of: Vec<(String, String)> = Vec::new();
    for r in &recs {
        if r["isSidechain"] == true || r["isMeta"] == true || r["isCompactSummary"] == true {
            continue;
        }
        let m = &r["message"];
        match r["type"].as_str() {
            Some("user") => match &m["content"] {
                Value::String(t) => c.prompts.push(t.clone()),
                Value::Array(blocks) => {
                    let mut texts = Vec::new();
                    for b in blocks {
                        match b["type"].as_str() {
                            Some("text") => texts.push(b["text"].as_str().unwrap_or("")),
                            Some("tool_result") => {
                                let out = text_blocks(&b["content"], &["text"], "\n");
                                c.results
                                    .entry(s(b, "tool_use_id"))
                                    .or_insert((out, b["is_error"] != true));
                            }
                            _ => {}
                        }
                    }
                    if !texts.is_empty() {
                        c.prompts.push(texts.join("\n"));
                    }
                }
                _ => {}
            },
            Some("assistant") => {
                let mid = s(m, "id");
                for b in m["content"].as_array().into_iter().flatten() {
                    match b["type"].as_str() {
                        Some("text") if !b["text"].as_str().unwrap_or("").is_empty() => {
                            let t = b["text"].as_str().unwrap().to_string();
                            match answer_of.iter_mut().find(|(id, _)| *id == mid) {
                                Some((_, prev)) => {
                                    prev.push_str("\n\n");
                                    prev.push_str(&t);
                                }
                                None => answer_of.push((mid.clone(), t)),
                            }
                        }
                        Some("tool_use") => {
                            c.calls.push((s(b, "id"), s(b, "name"), b["input"].clone()))
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    c.answers = answer_of.into_iter().map(|(_, t)| t).collect();
    c
}

/// The exit code in a Codex exec output's header lines, if any.
fn codex_exit(out: &str) -> Option<i64> {
    out.lines().find_map(|l| {
        l.strip_prefix("Process exited with code ")
            .or_else(|| l.strip_prefix("Exit code: "))
            .and_then(|n| n.trim().parse().ok())
    })
}

/// Codex rollout: `response_item`s (developer messages are the harness's instructions).
pub fn codex(path: &Path) -> Conv {
    let mut c = Conv::default();
    for r in lines(path) {
        if r["type"] != "response_item" {
            continue;
        }
        let p = &r["payload"];
        match p["type"].as_str() {
            Some("message") => {
                let text = text_blocks(&p["content"], &["input_text", "output_text"], "\n");
                match p["role"].as_str() {
                    Some("user") => c.prompts.push(text),
                    Some("assistant") => c.answers.push(text),
                    _ => {}
                }
            }
            Some("function_call") => {
                let args = match &p["arguments"] {
                    Value::String(a) => serde_json::from_str(a).unwrap_or(Value::Null),
                    other => other.clone(),
                };
                c.calls.push((s(p, "call_id"), s(p, "name"), args));
            }
            Some("custom_tool_call") => c.calls.push((
                s(p, "call_id"),
                s(p, "name"),
                serde_json::json!({"input": p["input"]}),
            )),
            Some("function_call_output" | "custom_tool_call_output") => {
                let out = match &p["output"] {
                    Value::String(o) => o.clone(),
                    Value::Object(o) => o
                        .get("content")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    _ => String::new(),
                };
                let ok = codex_exit(&out).is_none_or(|c| c == 0) && p["output"]["success"] != false;
                c.results.insert(s(p, "call_id"), (out, ok));
            }
            _ => {}
        }
    }
    c
}

/// pi session (v3): the branch from the last entry to the root; entries a branch
/// `context_edit` removed (`replacement: null`) are not in the conversation.
pub fn pi(path: &Path) -> Conv {
    let recs = lines(path);
    let numbered: Vec<Value> = recs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut r = r.clone();
            r["__line"] = (i + 1).into();
            r
        })
        .collect();
    let chain = branch(&numbered[1..], "id", "parentId");
    let removed: HashSet<&str> = chain
        .iter()
        .filter(|r| r["type"] == "context_edit" && r["replacement"].is_null())
        .filter_map(|r| r["targetId"].as_str())
        .collect();
    let mut c = Conv::default();
    for r in chain {
        if r["type"] != "message" || r["id"].as_str().is_some_and(|i| removed.contains(i)) {
            continue;
        }
        let m = &r["message"];
        match m["role"].as_str() {
            Some("user") => c.prompts.push(text_blocks(&m["content"], &["text"], "\n")),
            Some("assistant") => {
                let mut text = String::new();
                for b in m["content"].as_array().into_iter().flatten() {
                    match b["type"].as_str() {
                        Some("text") => text.push_str(b["text"].as_str().unwrap_or("")),
                        Some("toolCall") => {
                            if !text.is_empty() {
                                c.answers.push(std::mem::take(&mut text));
                            }
                            c.calls
                                .push((s(b, "id"), s(b, "name"), b["arguments"].clone()));
                        }
                        _ => {}
                    }
                }
                if !text.is_empty() {
                    c.answers.push(text);
                }
            }
            Some("toolResult") => {
                c.results.insert(
                    s(m, "toolCallId"),
                    (
                        text_blocks(&m["content"], &["text"], "\n"),
                        m["isError"] != true,
                    ),
                );
            }
            Some("bashExecution") => {
                // The user's own `!cmd`: pi gives it no id; agentd names it by its line.
                let id = format!("pi-bash-L{}", r["__line"]);
                c.calls.push((
                    id.clone(),
                    "shell".into(),
                    serde_json::json!({"command": m["command"]}),
                ));
                let ok = m["exitCode"] == 0 && m["cancelled"] != true;
                c.results.insert(id, (s(m, "output"), ok));
            }
            _ => {}
        }
    }
    c
}

/// Gemini CLI chat change log: messages by id, the last write winning, `$set.messages`
/// replacing the list. A call's result is the `functionResponse` with the call's id.
pub fn gemini(path: &Path) -> Conv {
    let mut order: Vec<String> = Vec::new();
    let mut msgs: HashMap<String, Value> = HashMap::new();
    let put = |order: &mut Vec<String>, msgs: &mut HashMap<String, Value>, m: &Value| {
        let id = s(m, "id");
        if !msgs.contains_key(&id) {
            order.push(id.clone());
        }
        msgs.insert(id, m.clone());
    };
    for r in lines(path).iter().skip(1) {
        if let Some(set) = r.get("$set") {
            if let Some(list) = set["messages"].as_array() {
                order.clear();
                msgs.clear();
                for m in list {
                    put(&mut order, &mut msgs, m);
                }
            }
        } else if r.get("id").is_some() {
            put(&mut order, &mut msgs, r);
        }
    }
    let mut c = Conv::default();
    for id in &order {
        let m = &msgs[id];
        match m["type"].as_str() {
            Some("user") => {
                let parts = m["content"].as_array().cloned().unwrap_or_default();
                let texts: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
                let text = texts.join("\n");
                if !text.is_empty() && !text.starts_with("<session_context>") {
                    c.prompts.push(text);
                }
            }
            Some("gemini") => {
                let text = match &m["content"] {
                    Value::String(t) => t.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter(|p| p["thought"] != true)
                        .filter_map(|p| p["text"].as_str())
                        .collect(),
                    _ => String::new(),
                };
                if !text.is_empty() {
                    c.answers.push(text);
                }
                for tc in m["toolCalls"].as_array().into_iter().flatten() {
                    let id = s(tc, "id");
                    c.calls
                        .push((id.clone(), s(tc, "name"), tc["args"].clone()));
                    let fr = tc["result"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| &r["functionResponse"])
                        .find(|fr| fr["id"] == id.as_str());
                    if let Some(fr) = fr {
                        let resp = &fr["response"];
                        let out = resp["output"]
                            .as_str()
                            .or(resp["error"].as_str())
                            .unwrap_or("")
                            .to_string();
                        let ok = tc["status"] == "success" && resp.get("error").is_none();
                        c.results.insert(id, (out, ok));
                    }
                }
            }
            _ => {}
        }
    }
    c
}

/// One opencode message's parts as the reader sees them.
fn opencode_message(c: &mut Conv, info: &Map<String, Value>, parts: &[Value]) {
    match info.get("role").and_then(Value::as_str) {
        Some("user") => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p["type"] == "text" && p["synthetic"] != true && p["ignored"] != true)
                .filter_map(|p| p["text"].as_str())
                .collect();
            if !texts.is_empty() {
                c.prompts.push(texts.join("\n"));
            }
        }
        Some("assistant") => {
            for p in parts {
                match p["type"].as_str() {
                    Some("text") if !p["text"].as_str().unwrap_or("").is_empty() => {
                        c.answers.push(s(p, "text"))
                    }
                    Some("tool") => {
                        let st = &p["state"];
                        let id = s(p, "callID");
                        c.calls
                            .push((id.clone(), s(p, "tool"), st["input"].clone()));
                        match st["status"].as_str() {
                            Some("completed") => {
                                c.results.insert(id, (s(st, "output"), true));
                            }
                            Some("error") => {
                                c.results.insert(id, (s(st, "error"), false));
                            }
                            _ => {}
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// opencode database, read with its own SQL: the session's messages by creation time,
/// each one's parts by id.
pub fn opencode_db(path: &Path, session: &str) -> Conv {
    let conn = rusqlite::Connection::open_with_flags(
        format!("file:{}?mode=ro&immutable=1", path.display()),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let mut c = Conv::default();
    let mut ms = conn
        .prepare("SELECT id, data FROM message WHERE session_id = ?1 ORDER BY time_created, id")
        .unwrap();
    let msgs: Vec<(String, String)> = ms
        .query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut ps = conn
        .prepare("SELECT data FROM part WHERE message_id = ?1 ORDER BY id")
        .unwrap();
    for (id, data) in msgs {
        let info: Map<String, Value> = serde_json::from_str(&data).unwrap();
        let parts: Vec<Value> = ps
            .query_map([&id], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|d| serde_json::from_str(&d.unwrap()).unwrap())
            .collect();
        opencode_message(&mut c, &info, &parts);
    }
    c
}

/// `opencode export` JSON: `{info, messages: [{info, parts}]}`.
pub fn opencode_export(path: &Path) -> Conv {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut c = Conv::default();
    for m in v["messages"].as_array().into_iter().flatten() {
        let info = m["info"].as_object().cloned().unwrap_or_default();
        let parts = m["parts"].as_array().cloned().unwrap_or_default();
        opencode_message(&mut c, &info, &parts);
    }
    c
}

//! Black-box tests of reasoning effort (docs/turns-and-providers.md, "Reasoning
//! effort"): the real daemon against local servers speaking each provider's wire, which
//! record the request bodies; the level a turn or the config names reaches each wire in
//! its own form and is recorded in `turn_started`.

use agentd_tests::sse::{chat_text, sse_server, typed_sse};
use agentd_tests::{is_type, Daemon, RpcConn};
use serde_json::{json, Value};

fn responses_reply() -> String {
    let item = json!({"type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "ok"}]});
    typed_sse(&[
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": "r1", "model": "m1",
            "status": "completed", "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}}}),
    ])
}

fn anthropic_reply() -> String {
    typed_sse(&[
        json!({"type": "message_start", "message": {"model": "m1", "usage": {"input_tokens": 10, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Short."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig1"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "ok"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        json!({"type": "message_stop"}),
    ])
}

/// A daemon whose default provider `p` is of `kind` at `base`, with `extra` config lines.
fn daemon(kind: &str, base: &str, extra: &str) -> Daemon {
    let base = if kind == "anthropic" {
        base.trim_end_matches("/v1")
    } else {
        base
    };
    let config = format!(
        "default_provider = \"p\"\n[providers.p]\nkind = \"{kind}\"\nbase_url = \"{base}\"\nmodel = \"m1\"\ncontext_window = 100000\n{extra}"
    );
    Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start()
}

fn create(c: &mut RpcConn, d: &Daemon) -> String {
    c.call_ok("agentd/create", json!({"workspace": d.workspace()}))["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn turn(c: &mut RpcConn, sid: &str, extra: Value) -> Value {
    let mut p = json!({"session_id": sid, "input": "think"});
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    let r = c.call_ok("agentd/turn", p);
    assert_eq!(r["status"], "completed", "{r}");
    r
}

/// The `reasoning_effort` of each `turn_started` in the session's Log, in order.
fn recorded(d: &Daemon, sid: &str) -> Vec<Value> {
    d.log_lines(sid)
        .iter()
        .filter(|e| is_type(e, "turn_started"))
        .map(|e| e["data"]["reasoning_effort"].clone())
        .collect()
}

/// Responses: the turn's level is `reasoning.effort` (with the encrypted reasoning
/// asked for, since nothing is stored server-side); a turn without one sends the
/// config's, and a config without one sends no `reasoning` at all.
#[test]
fn responses_wire_carries_reasoning_effort_from_the_turn_and_the_config() {
    let (base, server) = sse_server(vec![responses_reply(), responses_reply()]);
    let d = daemon("openai-responses", &base, "reasoning_effort = \"low\"\n");
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    turn(&mut c, &sid, json!({"reasoning_effort": "high"}));
    turn(&mut c, &sid, json!({}));
    let bodies = server.join().unwrap();
    assert_eq!(bodies[0]["reasoning"]["effort"], "high", "{}", bodies[0]);
    assert_eq!(bodies[0]["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(bodies[1]["reasoning"]["effort"], "low", "{}", bodies[1]);
    assert_eq!(recorded(&d, &sid), vec![json!("high"), json!("low")]);

    let (base, server) = sse_server(vec![responses_reply()]);
    let d = daemon("openai-responses", &base, "");
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    turn(&mut c, &sid, json!({}));
    let bodies = server.join().unwrap();
    assert!(bodies[0].get("reasoning").is_none(), "{}", bodies[0]);
    assert_eq!(recorded(&d, &sid), vec![Value::Null]);
}

/// Chat Completions: the level is the top-level `reasoning_effort`; none without one.
#[test]
fn chat_wire_carries_reasoning_effort() {
    let (base, server) = sse_server(vec![chat_text("ok"), chat_text("ok")]);
    let d = daemon("openai-chat", &base, "");
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    turn(&mut c, &sid, json!({"reasoning_effort": "minimal"}));
    turn(&mut c, &sid, json!({}));
    let bodies = server.join().unwrap();
    assert_eq!(bodies[0]["reasoning_effort"], "minimal", "{}", bodies[0]);
    assert!(bodies[1].get("reasoning_effort").is_none(), "{}", bodies[1]);
    assert_eq!(recorded(&d, &sid), vec![json!("minimal"), Value::Null]);
}

/// Anthropic: the level becomes extended thinking with a budget of its own, and
/// `max_tokens` grows by that budget (the API counts thinking inside it); the thinking
/// block the model sent back is kept with its signature for the next request.
#[test]
fn anthropic_wire_carries_a_thinking_budget_per_level() {
    let (base, server) = sse_server(vec![
        anthropic_reply(),
        anthropic_reply(),
        anthropic_reply(),
    ]);
    let d = daemon("anthropic", &base, "max_output_tokens = 2000\n");
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    let r = turn(&mut c, &sid, json!({"reasoning_effort": "low"}));
    assert_eq!(r["output_text"], "ok");
    turn(&mut c, &sid, json!({"reasoning_effort": "high"}));
    turn(&mut c, &sid, json!({}));
    let bodies = server.join().unwrap();
    assert_eq!(
        bodies[0]["thinking"],
        json!({"type": "enabled", "budget_tokens": 4096}),
        "{}",
        bodies[0]
    );
    assert_eq!(bodies[0]["max_tokens"], 2000 + 4096);
    assert_eq!(
        bodies[1]["thinking"],
        json!({"type": "enabled", "budget_tokens": 32000})
    );
    assert_eq!(bodies[1]["max_tokens"], 2000 + 32000);
    assert!(bodies[2].get("thinking").is_none(), "{}", bodies[2]);
    assert_eq!(bodies[2]["max_tokens"], 2000);
    // The first turn's thinking block went back to the model with its signature.
    let sent = bodies[1]["messages"].to_string();
    assert!(sent.contains("\"signature\":\"sig1\""), "{sent}");
    assert_eq!(
        recorded(&d, &sid),
        vec![json!("low"), json!("high"), Value::Null]
    );
}

/// An unknown level is `invalid_args` naming the field and the levels, before anything
/// is recorded or sent; the daemon goes on serving the session. (A config with an
/// unknown level: tests/tests/config.rs.)
#[test]
fn an_unknown_level_is_refused_before_anything_is_recorded() {
    let (base, server) = sse_server(vec![chat_text("ok")]);
    let d = daemon("openai-chat", &base, "");
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    let before = d.log_lines(&sid).len();
    for bad in [json!("extreme"), json!("HIGH"), json!(3)] {
        let r = c.call(
            "agentd/turn",
            json!({"session_id": sid, "input": "x", "reasoning_effort": bad}),
        );
        assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{bad}: {r}");
    }
    let r = c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": "x", "reasoning_effort": "extreme"}),
    );
    assert_eq!(
        r["error"]["data"]["details"]["allowed"],
        json!(["minimal", "low", "medium", "high"]),
        "{r}"
    );
    assert_eq!(d.log_lines(&sid).len(), before);
    turn(&mut c, &sid, json!({"reasoning_effort": "medium"}));
    let bodies = server.join().unwrap();
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["reasoning_effort"], "medium");
}

/// `agentctl turn --effort` sends the level; `--effort` refuses an unknown one.
#[test]
fn agentctl_effort_flag_reaches_the_wire() {
    let (base, server) = sse_server(vec![responses_reply()]);
    let d = daemon("openai-responses", &base, "");
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    let out = d.agentctl(["turn", &sid, "think hard", "--effort", "medium"]);
    out.assert_code(0);
    let bodies = server.join().unwrap();
    assert_eq!(bodies[0]["reasoning"]["effort"], "medium", "{}", bodies[0]);
    let out = d.agentctl(["turn", &sid, "again", "--effort", "extreme"]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("extreme"), "{out:?}");
}

//! `acp_params`: one ACP request as an editor sends it to `agentctl acp` (a JSON-RPC
//! message: `method` and `params`), through every check the bridge makes on its params
//! before it talks to agentd (`agentctl::acp::params`). A method the bridge does not
//! know runs every check on the same params, so the params are explored on their own.
//!
//! Invariants: no panic; a refusal is invalid params (-32602) with a message, and its
//! JSON form carries that code and message; `null` params are read as `{}`; an accepted
//! `initialize` names an integer `protocolVersion` up to 65535; an accepted
//! `session/new` has an absolute `cwd` that is its workspace, only stdio and http MCP
//! servers and no additional directories; an accepted `session/load` has `mcpServers`;
//! an accepted `session/load` or `session/resume` has a valid session id, an absolute
//! `cwd` and only stdio and http MCP servers; an accepted `session/set_mode` names one
//! of the modes; an accepted prompt's text is not blank and holds every text block's
//! text, in order; a prompt that is a slash command names one of the commands as the
//! first word after the slash, and its argument is the rest of the text, trimmed.

use agentctl::acp::params::{
    abs_dir, check_mode, parse, prompt_input, protocol_version, slash_command, ListReq, NewSession,
    OpenSession, Prompt, RpcErr, SessionRef, SetConfig, SetMode, COMMANDS, MODES,
};
use agentd_proto::session_id;
use serde_json::{json, Value};
use std::path::Path;

const METHODS: [&str; 9] = [
    "initialize",
    "session/new",
    "session/load",
    "session/resume",
    "session/list",
    "session/close",
    "session/prompt",
    "session/set_mode",
    "session/set_config_option",
];

pub fn params(data: &[u8]) {
    let Ok(msg) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    match msg.get("method").and_then(Value::as_str) {
        Some(m) if METHODS.contains(&m) => check(m, params),
        _ => {
            for m in METHODS {
                check(m, params.clone());
            }
        }
    }
}

fn refused(e: &RpcErr) {
    assert_eq!(e.code, -32602, "a params check answered {e:?}");
    assert!(!e.message.is_empty(), "a refusal without a message");
    let v = e.to_value();
    assert_eq!(v["code"], json!(-32602));
    assert_eq!(v["message"].as_str(), Some(e.message.as_str()));
}

fn mcp_ok(servers: &[Value]) {
    for s in servers {
        let t = s.get("type").and_then(Value::as_str);
        assert!(
            matches!(t, None | Some("stdio") | Some("http")),
            "an MCP server of type {t:?} was accepted"
        );
    }
}

fn check(method: &str, params: Value) {
    // Absent params read as an empty object.
    if params.is_null() {
        check(method, json!({}));
        return;
    }
    match method {
        "initialize" => match protocol_version(&params) {
            Ok(v) => {
                assert!(v <= u64::from(u16::MAX));
                assert_eq!(params["protocolVersion"].as_u64(), Some(v));
            }
            Err(e) => refused(&e),
        },
        "session/new" => match NewSession::from_params(params.clone()) {
            Ok((p, ws)) => {
                assert!(ws.is_absolute() && ws == Path::new(&p.cwd));
                mcp_ok(&p.mcp_servers);
                let dirs = &params["additionalDirectories"];
                assert!(dirs.is_null() || dirs.as_array().is_some_and(Vec::is_empty));
            }
            Err(e) => refused(&e),
        },
        "session/load" | "session/resume" => {
            let replay = method == "session/load";
            match OpenSession::from_params(params, replay) {
                Ok(p) => {
                    assert!(!replay || p.mcp_servers.is_some());
                    assert!(Path::new(&p.cwd).is_absolute());
                    mcp_ok(p.mcp_servers.as_deref().unwrap_or(&[]));
                    assert!(session_id::validate(&p.session_id).is_ok());
                }
                Err(e) => refused(&e),
            }
        }
        "session/list" => match parse::<ListReq>(params, "session/list params") {
            Ok(p) => {
                if let Some(c) = &p.cwd {
                    match abs_dir(c) {
                        Ok(d) => assert!(d.is_absolute()),
                        Err(e) => refused(&e),
                    }
                }
            }
            Err(e) => refused(&e),
        },
        "session/close" => {
            if let Err(e) = parse::<SessionRef>(params, "session/close params") {
                refused(&e);
            }
        }
        "session/prompt" => match parse::<Prompt>(params, "session/prompt params") {
            Ok(p) => prompt(&p.prompt),
            Err(e) => refused(&e),
        },
        "session/set_mode" => match SetMode::from_params(params) {
            Ok(p) => {
                assert!(MODES.iter().any(|m| m.0 == p.mode_id));
                assert!(check_mode(&p.mode_id).is_ok());
            }
            Err(e) => refused(&e),
        },
        "session/set_config_option" => {
            if let Err(e) = parse::<SetConfig>(params, "session/set_config_option params") {
                refused(&e);
            }
        }
        _ => unreachable!("{method}"),
    }
}

fn prompt(blocks: &[Value]) {
    let text = match prompt_input(blocks) {
        Ok(p) => p.text,
        Err(e) => return refused(&e),
    };
    assert!(!text.trim().is_empty(), "a blank prompt was accepted");
    // Every text block's text, in order.
    let mut rest = text.as_str();
    for b in blocks {
        if b["type"] == "text" {
            let t = b["text"].as_str().expect("an accepted text block has text");
            let at = rest
                .find(t)
                .expect("a text block is missing from the prompt");
            rest = &rest[at + t.len()..];
        }
    }
    if let Some((name, arg)) = slash_command(&text) {
        assert!(text.starts_with('/'));
        assert!(COMMANDS.iter().any(|c| c.0 == name));
        // The name is the text's first word after the slash, the argument the rest.
        let after = text[1..].trim_start();
        assert!(after.starts_with(name), "{name} is not the first word");
        assert_eq!(arg, after[name.len()..].trim(), "the argument of {name}");
    }
}

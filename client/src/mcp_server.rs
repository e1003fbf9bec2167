//! `agentctl mcp-server`: agentd's own sessions served to another agent over MCP on
//! stdio (newline-delimited JSON-RPC, protocol 2025-11-25 and the earlier revisions a
//! client may ask for). Each tool is one native method of the daemon, its arguments the
//! method's params: read-only by default (`list_sessions`, `search_sessions`,
//! `show_session`, `session_context`, `session_tree`, `session_checkpoint`); with
//! `--allow-changes`, `fork_session` and `run_turn` too. A result is the daemon's answer
//! as JSON text plus `structuredContent`; a daemon error is `isError` with its message.

use crate::daemon::{self, Target};
use agentd_proto::rpc::method;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const PROTOCOLS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

struct Tool {
    name: &'static str,
    method: &'static str,
    description: &'static str,
    schema: Value,
    read_only: bool,
}

fn sid_prop() -> Value {
    json!({"type": "string", "description": "agentd session id"})
}

fn tools(allow_changes: bool) -> Vec<Tool> {
    let mut t = vec![
        Tool {
            name: "list_sessions",
            method: method::LIST,
            description: "List agentd sessions, newest first (id, title, workspace, counts).",
            schema: json!({"type": "object", "properties": {
                "workspace": {"type": "string", "description": "only sessions of this absolute workspace path"},
                "limit": {"type": "integer", "minimum": 1},
                "cursor": {"type": "string"},
                "include_archived": {"type": "boolean"}}}),
            read_only: true,
        },
        Tool {
            name: "search_sessions",
            method: method::SEARCH,
            description:
                "Full-text search over messages, tool arguments and tool output of every session.",
            schema: json!({"type": "object", "required": ["query"], "properties": {
                "query": {"type": "string"},
                "regex": {"type": "boolean"},
                "case_sensitive": {"type": "boolean"},
                "workspace": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1}}}),
            read_only: true,
        },
        Tool {
            name: "show_session",
            method: method::SHOW,
            description: "One session: workspace, counts, pending tool calls, Log damage.",
            schema: json!({"type": "object", "required": ["session_id"], "properties": {"session_id": sid_prop()}}),
            read_only: true,
        },
        Tool {
            name: "session_context",
            method: method::CONTEXT,
            description:
                "The provider input replaying the session would send (its conversation so far).",
            schema: json!({"type": "object", "required": ["session_id"], "properties": {
                "session_id": sid_prop(), "after_seq": {"type": "integer", "minimum": 0}}}),
            read_only: true,
        },
        Tool {
            name: "session_tree",
            method: method::TREE,
            description: "The fork tree of a session, or of every session in a workspace.",
            schema: json!({"type": "object", "properties": {
                "session_id": sid_prop(), "workspace": {"type": "string"},
                "max_depth": {"type": "integer", "minimum": 0}}}),
            read_only: true,
        },
        Tool {
            name: "session_checkpoint",
            method: method::CHECKPOINT,
            description:
                "The deterministic checkpoint of a session: goal, decisions, artifacts, open calls.",
            schema: json!({"type": "object", "required": ["session_id"], "properties": {"session_id": sid_prop()}}),
            read_only: true,
        },
    ];
    if allow_changes {
        t.push(Tool {
            name: "fork_session",
            method: method::FORK,
            description: "Create a child session from a prefix of a session's Log.",
            schema: json!({"type": "object", "required": ["session_id"], "properties": {
                "session_id": sid_prop(), "to_seq": {"type": "integer", "minimum": 0},
                "title": {"type": "string"}}}),
            read_only: false,
        });
        t.push(Tool {
            name: "run_turn",
            method: method::TURN,
            description: "Run one turn (a user message and the model's work on it) in a session; answers when it ends.",
            schema: json!({"type": "object", "required": ["session_id", "input"], "properties": {
                "session_id": sid_prop(), "input": {"type": "string"},
                "model": {"type": "string"}, "permission_mode": {"type": "string", "enum": ["auto", "ask", "read_only"]}}}),
            read_only: false,
        });
    }
    t
}

fn tool_json(t: &Tool) -> Value {
    json!({
        "name": t.name,
        "description": t.description,
        "inputSchema": t.schema,
        "annotations": {"readOnlyHint": t.read_only, "destructiveHint": false,
                        "openWorldHint": false, "idempotentHint": t.read_only},
    })
}

/// Serves until stdin closes. Exit code 0, or 4 when the daemon cannot be reached.
pub async fn run(target: Target, allow_changes: bool) -> i32 {
    let conn = match daemon::connect_or_start(&target).await {
        Ok(c) => c.conn,
        Err(e) => {
            eprintln!("agentctl mcp-server: {}", e.message);
            return 4;
        }
    };
    let tools = tools(allow_changes);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            let e = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}});
            let _ = out.write_all(format!("{e}\n").as_bytes()).await;
            continue;
        };
        let Some(id) = msg.get("id").cloned() else {
            continue; // notifications: initialized, cancelled (calls are short).
        };
        let m = msg["method"].as_str().unwrap_or_default();
        let reply = match m {
            "initialize" => {
                let asked = msg["params"]["protocolVersion"]
                    .as_str()
                    .unwrap_or_default();
                let v = PROTOCOLS
                    .iter()
                    .find(|p| **p == asked)
                    .copied()
                    .unwrap_or(PROTOCOLS[0]);
                Ok(json!({
                    "protocolVersion": v,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": {"name": "agentd", "version": env!("CARGO_PKG_VERSION")},
                    "instructions": "Read-only access to agentd's durable coding-agent sessions.",
                }))
            }
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": tools.iter().map(tool_json).collect::<Vec<_>>()})),
            "tools/call" => {
                let name = msg["params"]["name"].as_str().unwrap_or_default();
                match tools.iter().find(|t| t.name == name) {
                    None => Err((-32602, format!("Unknown tool: {name}"))),
                    Some(t) => {
                        let mut args = msg["params"]["arguments"].clone();
                        if args.is_null() {
                            args = json!({});
                        }
                        if t.method == method::TURN {
                            args["wait"] = json!(true);
                        }
                        Ok(match conn.call(t.method, args).await {
                            Ok(v) => json!({
                                "content": [{"type": "text", "text": serde_json::to_string_pretty(&v).unwrap_or_default()}],
                                "structuredContent": if v.is_object() { v.clone() } else { json!({"result": v}) },
                            }),
                            Err(e) => json!({
                                "isError": true,
                                "content": [{"type": "text", "text": format!("{}: {}", e.kind.as_str(), e.message)}],
                            }),
                        })
                    }
                }
            }
            other => Err((-32601, format!("Method not found: {other}"))),
        };
        let resp = match reply {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            }
        };
        if out.write_all(format!("{resp}\n").as_bytes()).await.is_err() {
            break;
        }
        let _ = out.flush().await;
    }
    0
}

//! A small MCP server (stdio, protocol 2025-11-25) for the cases real servers cannot
//! produce on demand. Arguments:
//! - `--hang`: read requests and never answer (a server stuck at start);
//! - `--tools N`: also list N tools `t000`, `t001`, ... (each echoes its arguments);
//! - `--linger`: stay alive after stdin closes (like a server whose grandchild outlives
//!   the client), until killed;
//! - `--colliding`: also list tools whose names collide after mangling (`a.b`, `a b`,
//!   `a_b`) and one with a 100-character name.
//!
//! Tools: `echo {message}` → text; `env` → the server's environment, one `K=V` a line;
//! `die` → the process exits without answering; `big {bytes}` → that much text
//! (default 10 MB); `burst {count}` → `count` `tools/list_changed` notifications then
//! text; `image` → a PNG image block; `fail` → `isError` with text; `wait` → never
//! answers (it stops on `notifications/cancelled`, writing `cancelled <id>` to stderr);
//! `structured` → only `structuredContent`; `lists` → the number of `tools/list`
//! requests since the last `burst` (which also adds a tool `grown` to the list);
//! `trickle {count, every_ms}` → answers at once, then sends `count` `list_changed`
//! notifications `every_ms` apart (adding a tool `late` before the last one).
//!
//! Probes of what the server's process may do (the sandbox tests): `read {path}` → the
//! file's text, `write {path, text}` → writes it, `connect {path}` → connects to a Unix
//! socket, `tcp {addr}` → opens a TCP connection. Each answers `ok ...` or
//! `denied: <error>` as text (never `isError`: only the outcome is reported).
//! `later {path, text, trigger}` answers `scheduled <pid>` at once; a thread then waits
//! for the file `trigger` to exist, writes `text` to `path` and the outcome (`ok
//! written` or `denied: ...`) to `trigger.done` (a write between calls).

use serde_json::{json, Value};
use std::io::{BufRead, Write};

/// One message, written whole under the stdout lock (a `trickle` thread writes too).
fn send(v: &Value) {
    let mut s = serde_json::to_string(v).expect("json");
    s.push('\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes());
    let _ = out.flush();
}

/// A probe's outcome as text.
fn probe<T>(r: std::io::Result<T>, ok: impl FnOnce(T) -> String) -> Value {
    let text = match r {
        Ok(v) => format!("ok {}", ok(v)),
        Err(e) => format!("denied: {e}"),
    };
    json!({"content": [{"type": "text", "text": text}]})
}

fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description,
           "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}})
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let hang = args.iter().any(|a| a == "--hang");
    let colliding = args.iter().any(|a| a == "--colliding");
    let linger = args.iter().any(|a| a == "--linger");
    let extra: usize = args
        .iter()
        .position(|a| a == "--tools")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    // `tools/list` requests since the last burst, answered by the `lists` tool.
    let mut lists = 0u32;
    let mut tools = vec![
        tool("echo", "Echoes `message`."),
        tool("env", "Prints the server's environment."),
        tool("die", "Exits without answering."),
        tool("big", "Answers `bytes` bytes of text (default 10 MB)."),
        tool(
            "burst",
            "Sends `count` tools/list_changed notifications, then answers.",
        ),
        tool("image", "Answers a PNG image."),
        tool("fail", "Answers isError."),
        tool("wait", "Never answers; stops when cancelled."),
        tool("structured", "Answers structuredContent only."),
        tool(
            "lists",
            "Answers how many tools/list requests came since the last burst.",
        ),
        tool(
            "trickle",
            "Answers, then sends `count` tools/list_changed notifications `every_ms` apart.",
        ),
        tool("read", "Reads the file `path`."),
        tool("write", "Writes `text` to the file `path`."),
        tool("connect", "Connects to the Unix socket `path`."),
        tool("tcp", "Opens a TCP connection to `addr`."),
        tool(
            "later",
            "Writes `text` to `path` once the file `trigger` exists, after answering.",
        ),
    ];
    if colliding {
        for n in ["a.b", "a b", "a_b"] {
            tools.push(tool(n, "A name that collides after mangling."));
        }
        tools.push(tool(&"n".repeat(100), "A 100-character name."));
    }
    for i in 0..extra {
        tools.push(tool(&format!("t{i:03}"), "Echoes its arguments."));
    }
    let stdin = std::io::stdin();
    // Tools added by a `trickle` thread before its last notification.
    let late = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if hang {
            continue;
        }
        let method = msg["method"].as_str().unwrap_or_default();
        let id = msg.get("id").cloned();
        if method == "notifications/cancelled" {
            eprintln!("cancelled {}", msg["params"]["requestId"]);
            continue;
        }
        let Some(id) = id else { continue };
        let result = match method {
            "initialize" => json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "agentd-mcp-fake", "version": "1"},
            }),
            "ping" => json!({}),
            "tools/list" => {
                lists += 1;
                if late.load(std::sync::atomic::Ordering::Acquire)
                    && !tools.iter().any(|t| t["name"] == "late")
                {
                    tools.push(tool("late", "Appeared at the end of a trickle."));
                }
                json!({"tools": tools})
            }
            "tools/call" => {
                let name = msg["params"]["name"].as_str().unwrap_or_default();
                let a = &msg["params"]["arguments"];
                match name {
                    "echo" => json!({"content": [{"type": "text",
                        "text": format!("Echo: {}", a["message"].as_str().unwrap_or_default())}]}),
                    "env" => {
                        let mut vars: Vec<String> =
                            std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
                        vars.sort();
                        json!({"content": [{"type": "text", "text": vars.join("\n")}]})
                    }
                    "die" => std::process::exit(3),
                    "big" => {
                        let n = a["bytes"].as_u64().unwrap_or(10 << 20) as usize;
                        json!({"content": [{"type": "text", "text": "x".repeat(n)}]})
                    }
                    "burst" => {
                        // The list really changes: a tool `grown` appears, once.
                        if !tools.iter().any(|t| t["name"] == "grown") {
                            tools.push(tool("grown", "Appeared with a list_changed burst."));
                        }
                        lists = 0;
                        for _ in 0..a["count"].as_u64().unwrap_or(5) {
                            send(
                                &json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                            );
                        }
                        json!({"content": [{"type": "text", "text": "burst sent"}]})
                    }
                    "image" => json!({"content": [{"type": "image", "mimeType": "image/png",
                        "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="}]}),
                    "fail" => json!({"isError": true,
                        "content": [{"type": "text", "text": "the fake server refused"}]}),
                    "wait" => continue,
                    "structured" => json!({"content": [], "structuredContent": {"answer": 42}}),
                    "lists" => json!({"content": [{"type": "text", "text": lists.to_string()}]}),
                    "trickle" => {
                        lists = 0;
                        let count = a["count"].as_u64().unwrap_or(10);
                        let every =
                            std::time::Duration::from_millis(a["every_ms"].as_u64().unwrap_or(20));
                        let late = late.clone();
                        std::thread::spawn(move || {
                            for i in 0..count {
                                std::thread::sleep(every);
                                if i + 1 == count {
                                    late.store(true, std::sync::atomic::Ordering::Release);
                                }
                                send(&json!({"jsonrpc": "2.0",
                                    "method": "notifications/tools/list_changed"}));
                            }
                        });
                        json!({"content": [{"type": "text", "text": "trickle started"}]})
                    }
                    "read" => probe(
                        std::fs::read_to_string(a["path"].as_str().unwrap_or_default()),
                        |t| t,
                    ),
                    "write" => probe(
                        std::fs::write(
                            a["path"].as_str().unwrap_or_default(),
                            a["text"].as_str().unwrap_or_default(),
                        ),
                        |()| "written".to_string(),
                    ),
                    "connect" => probe(
                        std::os::unix::net::UnixStream::connect(
                            a["path"].as_str().unwrap_or_default(),
                        ),
                        |_| "connected".to_string(),
                    ),
                    "tcp" => probe(
                        std::net::TcpStream::connect(a["addr"].as_str().unwrap_or_default()),
                        |_| "connected".to_string(),
                    ),
                    "later" => {
                        let field = |k: &str| a[k].as_str().unwrap_or_default().to_string();
                        let (path, text, trigger) =
                            (field("path"), field("text"), field("trigger"));
                        std::thread::spawn(move || {
                            while !std::path::Path::new(&trigger).exists() {
                                std::thread::sleep(std::time::Duration::from_millis(10));
                            }
                            let outcome = match std::fs::write(&path, text) {
                                Ok(()) => "ok written".to_string(),
                                Err(e) => format!("denied: {e}"),
                            };
                            let _ = std::fs::write(format!("{trigger}.done"), outcome);
                        });
                        json!({"content": [{"type": "text",
                            "text": format!("scheduled {}", std::process::id())}]})
                    }
                    other if tools.iter().any(|t| t["name"] == other) => {
                        json!({"content": [{"type": "text", "text": format!("{other} {a}")}]})
                    }
                    other => {
                        send(&json!({"jsonrpc": "2.0", "id": id,
                                "error": {"code": -32602, "message": format!("Unknown tool: {other}")}}));
                        continue;
                    }
                }
            }
            other => {
                send(&json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": format!("Method not found: {other}")}}));
                continue;
            }
        };
        send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
    if linger {
        loop {
            std::thread::park();
        }
    }
}

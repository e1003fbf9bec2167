//! The ACP requests' params: their types, and every check the bridge makes on them
//! before it talks to agentd (protocol version, absolute `cwd`, MCP transports, session
//! ids, modes, prompt content blocks, slash commands). Pure, so it is in agentctl's
//! library as well as its binary, and fuzzed (`fuzz/`, target `acp_params`).

use agentd_proto::{session_id, AgentError, ErrorKind};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The permission modes a session can be in: id, name, description.
pub const MODES: [(&str, &str, &str); 3] = [
    ("ask", "Ask", "Mutating tools ask before they run"),
    ("auto", "Auto", "Every tool runs without asking"),
    (
        "read_only",
        "Read only",
        "Mutating tools are refused; reading and searching run",
    ),
];

/// The slash commands a prompt can be: name, description, argument hint.
pub const COMMANDS: [(&str, &str, Option<&str>); 5] = [
    (
        "compact",
        "Compact older history into a deterministic checkpoint",
        Some("events to keep verbatim (default 40)"),
    ),
    (
        "fork",
        "Fork this session into a new one (optionally up to a seq)",
        Some("seq to fork at (default: the end)"),
    ),
    ("tree", "Show this session's fork tree", None),
    (
        "checkpoint",
        "Show the session's state checkpoint (what replay injects)",
        None,
    ),
    (
        "undo",
        "Revert the files the last turn that changed files changed",
        None,
    ),
];

/// A JSON-RPC error for the client.
#[derive(Debug, Clone)]
pub struct RpcErr {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcErr {
    pub fn new(code: i64, message: impl Into<String>) -> RpcErr {
        RpcErr {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Invalid params (-32602).
    pub fn params(message: impl Into<String>) -> RpcErr {
        RpcErr::new(-32602, message)
    }

    pub fn to_value(&self) -> Value {
        let mut v = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            v["data"] = d.clone();
        }
        v
    }
}

impl From<AgentError> for RpcErr {
    fn from(e: AgentError) -> RpcErr {
        let code = match e.kind {
            ErrorKind::InvalidArgs => -32602,
            ErrorKind::NotFound => -32002,
            _ => -32603,
        };
        let message = match e.kind {
            ErrorKind::DaemonUnavailable => format!(
                "{} (the next request reconnects, starting agentd if needed)",
                e.message
            ),
            _ => e.message.clone(),
        };
        RpcErr {
            code,
            message,
            data: Some(json!({"kind": e.kind.as_str(), "details": e.details})),
        }
    }
}

/// `initialize`: the client's `protocolVersion` (an integer, the MAJOR version).
pub fn protocol_version(params: &Value) -> Result<u64, RpcErr> {
    let v = params
        .get("protocolVersion")
        .ok_or_else(|| RpcErr::params("initialize needs protocolVersion"))?;
    match v.as_u64() {
        Some(n) if n <= u64::from(u16::MAX) => Ok(n),
        _ => Err(RpcErr::params(
            "protocolVersion must be an integer (the MAJOR version)",
        )),
    }
}

pub fn check_mode(mode: &str) -> Result<(), RpcErr> {
    if MODES.iter().any(|m| m.0 == mode) {
        Ok(())
    } else {
        Err(RpcErr::params(format!(
            "unknown mode `{mode}`: use ask, auto or read_only"
        )))
    }
}

/// A request's params as `T`; absent (`null`) params are an empty object.
pub fn parse<T: for<'de> Deserialize<'de>>(params: Value, what: &str) -> Result<T, RpcErr> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_json::from_value(params).map_err(|e| RpcErr::params(format!("invalid {what}: {e}")))
}

pub fn abs_dir(cwd: &str) -> Result<PathBuf, RpcErr> {
    let p = PathBuf::from(cwd);
    if !p.is_absolute() {
        return Err(RpcErr::params(format!(
            "cwd must be an absolute path: {cwd}"
        )));
    }
    Ok(p)
}

/// Checks the `mcpServers` of a request against what `initialize` advertised:
/// stdio and streamable HTTP servers (`mcpCapabilities` says `http: true, sse: false`).
pub fn check_mcp(mcp: &[Value]) -> Result<(), RpcErr> {
    for s in mcp {
        let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
        match s.get("type").and_then(Value::as_str) {
            None | Some("stdio") | Some("http") => {}
            Some(t) => {
                return Err(RpcErr::params(format!(
                    "MCP server `{name}`: transport `{t}` is not supported (mcpCapabilities: stdio and http)"
                )))
            }
        }
    }
    Ok(())
}

fn one_workspace(dirs: Option<Vec<String>>) -> Result<(), RpcErr> {
    if dirs.unwrap_or_default().is_empty() {
        Ok(())
    } else {
        Err(RpcErr::params(
            "additionalDirectories is not supported: a session has one workspace",
        ))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSession {
    pub cwd: String,
    pub mcp_servers: Vec<Value>,
    #[serde(default, rename = "_meta")]
    pub _meta: Option<Value>,
    #[serde(default)]
    pub additional_directories: Option<Vec<String>>,
}

impl NewSession {
    /// `session/new` params, checked; with the workspace (`cwd`).
    pub fn from_params(params: Value) -> Result<(NewSession, PathBuf), RpcErr> {
        let mut p: NewSession = parse(params, "session/new params")?;
        let ws = abs_dir(&p.cwd)?;
        check_mcp(&p.mcp_servers)?;
        one_workspace(p.additional_directories.take())?;
        Ok((p, ws))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenSession {
    pub session_id: String,
    pub cwd: String,
    #[serde(default)]
    pub mcp_servers: Option<Vec<Value>>,
    #[serde(default, rename = "_meta")]
    pub _meta: Option<Value>,
    #[serde(default)]
    pub additional_directories: Option<Vec<String>>,
}

impl OpenSession {
    /// `session/load` (`replay`) or `session/resume` params, checked.
    pub fn from_params(params: Value, replay: bool) -> Result<OpenSession, RpcErr> {
        let what = if replay {
            "session/load"
        } else {
            "session/resume"
        };
        let mut p: OpenSession = parse(params, &format!("{what} params"))?;
        if replay && p.mcp_servers.is_none() {
            return Err(RpcErr::params(
                "invalid session/load params: missing field `mcpServers`",
            ));
        }
        abs_dir(&p.cwd)?;
        check_mcp(p.mcp_servers.as_deref().unwrap_or(&[]))?;
        one_workspace(p.additional_directories.take())?;
        session_id::validate(&p.session_id).map_err(RpcErr::from)?;
        Ok(p)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRef {
    pub session_id: String,
    #[serde(default, rename = "_meta")]
    pub _meta: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Prompt {
    pub session_id: String,
    pub prompt: Vec<Value>,
    #[serde(default, rename = "_meta")]
    pub _meta: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListReq {
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default, rename = "_meta")]
    pub _meta: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetMode {
    pub session_id: String,
    pub mode_id: String,
    #[serde(default, rename = "_meta")]
    pub _meta: Option<Value>,
}

impl SetMode {
    /// `session/set_mode` params, the mode checked.
    pub fn from_params(params: Value) -> Result<SetMode, RpcErr> {
        let p: SetMode = parse(params, "session/set_mode params")?;
        check_mode(&p.mode_id)?;
        Ok(p)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfig {
    pub session_id: String,
    pub config_id: String,
    pub value: Value,
    #[serde(default, rename = "type")]
    pub _kind: Option<String>,
    #[serde(default, rename = "_meta")]
    pub _meta: Option<Value>,
}

/// A prompt's turn input: its text and its images (`agentd/turn`'s `images`).
#[derive(Debug, Default, PartialEq)]
pub struct PromptInput {
    pub text: String,
    /// `{data, mime_type}` each, checked by the daemon (type from the bytes, limits).
    pub images: Vec<agentd_proto::rpc::TurnImage>,
}

/// The turn input a prompt's content blocks make: text as is, resource links as links,
/// embedded text resources inline with their URI, images as the turn's images (in
/// order; the text must not be empty). Audio is not advertised.
pub fn prompt_input(blocks: &[Value]) -> Result<PromptInput, RpcErr> {
    let mut out = String::new();
    let mut images = Vec::new();
    for b in blocks {
        let piece = match b["type"].as_str().unwrap_or("") {
            "image" => {
                let data = b["data"]
                    .as_str()
                    .filter(|d| !d.is_empty())
                    .ok_or_else(|| RpcErr::params("image block without base64 `data`"))?;
                images.push(agentd_proto::rpc::TurnImage {
                    path: None,
                    data: Some(data.to_string()),
                    mime_type: b["mimeType"].as_str().map(str::to_string),
                });
                continue;
            }
            "text" => b["text"]
                .as_str()
                .ok_or_else(|| RpcErr::params("text block without text"))?
                .to_string(),
            "resource_link" => {
                let uri = b["uri"]
                    .as_str()
                    .ok_or_else(|| RpcErr::params("resource_link without uri"))?;
                let name = b["name"].as_str().unwrap_or(uri);
                format!("[@{name}]({uri})")
            }
            "resource" => {
                let r = &b["resource"];
                let uri = r["uri"].as_str().unwrap_or("");
                match r["text"].as_str() {
                    Some(t) => format!("<context uri=\"{uri}\">\n{t}\n</context>"),
                    None => {
                        return Err(RpcErr::params(
                            "binary embedded resources are not supported; send text",
                        ))
                    }
                }
            }
            other => {
                return Err(RpcErr::params(format!(
                    "`{other}` content is not supported (promptCapabilities says so)"
                )))
            }
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&piece);
    }
    if out.trim().is_empty() {
        return Err(RpcErr::params(if images.is_empty() {
            "the prompt is empty"
        } else {
            "a prompt with images needs text too: say what to do with them"
        }));
    }
    Ok(PromptInput { text: out, images })
}

/// The slash command a prompt's text is, if it is one: its name (one of `COMMANDS`, the
/// first word after the slash) and its argument (the rest, trimmed).
pub fn slash_command(input: &str) -> Option<(&'static str, &str)> {
    let cmd = input.strip_prefix('/')?.trim_start();
    let (name, arg) = cmd.split_once(char::is_whitespace).unwrap_or((cmd, ""));
    let known = COMMANDS.iter().find(|c| c.0 == name)?.0;
    Some((known, arg.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slash_command_is_the_first_word_after_the_slash_and_the_rest() {
        assert_eq!(slash_command("/compact 40"), Some(("compact", "40")));
        assert_eq!(slash_command("/fork\t12 "), Some(("fork", "12")));
        assert_eq!(slash_command("/tree"), Some(("tree", "")));
        assert_eq!(slash_command("/treex"), None);
        assert_eq!(slash_command("compact 40"), None);
        // Spaces before the name: the argument was cut at the name's length from the
        // slash, inside the name ("t 40")...
        assert_eq!(slash_command("/ compact 40"), Some(("compact", "40")));
        // ...or inside a multi-byte space, a panic (not a char boundary).
        assert_eq!(slash_command("/\u{3000}\u{3000}tree"), Some(("tree", "")));
        assert_eq!(slash_command("/undo\u{3000}now"), Some(("undo", "now")));
    }
}

//! The slash commands an ACP client sends as a prompt (`/compact`, `/undo`, …; the list is
//! `params::COMMANDS`, docs/acp.md): each runs a native method and answers with one
//! agent message.

use super::*;

impl Bridge {
    /// A slash command typed as the prompt.
    pub(super) async fn command(&self, sid: &str, name: &str, arg: &str) -> Result<Value, RpcErr> {
        let text = match name {
            "compact" => {
                let q = proto::CompactParams {
                    session_id: sid.to_string(),
                    tail_events: number_arg(arg, "/compact takes a number of events to keep")?,
                    ..Default::default()
                };
                let r = self.call(method::COMPACT, &q).await?;
                format!("Compacted.\n\n```json\n{}\n```\n", pretty(&r))
            }
            "fork" => {
                let q = proto::ForkParams {
                    session_id: sid.to_string(),
                    to_seq: number_arg(arg, "/fork takes a seq to fork at")?,
                    ..Default::default()
                };
                let r = self.call(method::FORK, &q).await?;
                let child = r["child_session_id"]
                    .as_str()
                    .or_else(|| r["session_id"].as_str())
                    .unwrap_or("?");
                format!("Forked into session `{child}` (open it with session/load).\n")
            }
            "undo" => self.undo(sid).await?,
            "tree" => {
                let q = proto::TreeParams {
                    session_id: Some(sid.to_string()),
                    ..Default::default()
                };
                let r = self.call(method::TREE, &q).await?;
                format!("```\n{}```\n", render::tree_result(&r))
            }
            _ => {
                let q = proto::CheckpointParams {
                    session_id: sid.to_string(),
                    caps: None,
                };
                let r = self.call(method::CHECKPOINT, &q).await?;
                r["view"]
                    .as_str()
                    .map_or_else(|| pretty(&r), str::to_string)
            }
        };
        self.out.notify(
            "session/update",
            json!({"sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}),
        );
        Ok(json!({"stopReason": "end_turn"}))
    }
}

/// A slash command's optional number: none when `arg` is empty, else `usage` unless
/// it is one.
fn number_arg<T: std::str::FromStr>(arg: &str, usage: &str) -> Result<Option<T>, RpcErr> {
    if arg.is_empty() {
        return Ok(None);
    }
    arg.parse().map(Some).map_err(|_| RpcErr::params(usage))
}

impl Bridge {
    /// The last turn with file changes of its own (an `after` snapshot with a tree):
    /// `(turn_id, seq of its turn_started)`.
    async fn last_changing_turn(&self, sid: &str) -> Result<Option<(String, u64)>, RpcErr> {
        let mut after: Option<u64> = None;
        let mut current: Option<(String, u64)> = None;
        let mut found = None;
        loop {
            let q = proto::EventsParams {
                session_id: sid.to_string(),
                after_seq: after,
                limit: Some(LOAD_PAGE),
                types: Some(vec!["turn_started".into(), "workspace_snapshot".into()]),
                tail: None,
            };
            let page = self.call(method::EVENTS, &q).await?;
            let events = page["events"].as_array().map_or(&[][..], Vec::as_slice);
            for ev in events {
                let (seq, data) = (ev["seq"].as_u64().unwrap_or(0), &ev["data"]);
                if ev["type"] == "turn_started" {
                    current = data["turn_id"].as_str().map(|t| (t.to_string(), seq));
                } else if data["reason"] == "after" && data["tree"].is_string() {
                    found = current.clone().or(found);
                }
            }
            match page["next_after_seq"].as_u64() {
                Some(n) if !events.is_empty() => after = Some(n),
                _ => return Ok(found),
            }
        }
    }

    /// `/undo`: reverts the files to their state just before the last turn that changed
    /// some; a conflict (files edited outside the session) is reported, nothing touched.
    async fn undo(&self, sid: &str) -> Result<String, RpcErr> {
        let Some((turn_id, start)) = self.last_changing_turn(sid).await? else {
            return Ok("Nothing to undo: no turn of this session changed files.\n".into());
        };
        let to_seq = start.saturating_sub(1);
        let q = proto::RevertParams {
            session_id: sid.to_string(),
            to_seq,
            ..Default::default()
        };
        match self.call(method::REVERT, &q).await {
            Ok(r) => {
                let files: Vec<&str> = r["files"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if files.is_empty() || r["reverted"] == false {
                    return Ok(format!(
                        "Nothing to undo: the files turn `{turn_id}` changed are already as they were before it.\n"
                    ));
                }
                let mut text = format!(
                    "Reverted the file changes of turn `{turn_id}` (to seq {to_seq}): restored {} file(s):\n",
                    files.len()
                );
                for f in &files {
                    text.push_str(&format!("- `{f}`\n"));
                }
                if r["incomplete"] == true {
                    text.push_str("Some snapshots of that turn had failed, so the revert may be incomplete.\n");
                }
                Ok(text)
            }
            Err(e) if e.kind == ErrorKind::Conflict => {
                let files: Vec<String> = e.details["files"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(|f| format!("`{f}`"))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(format!(
                    "Not reverted: {} changed outside the session since its snapshots, and nothing was touched. To overwrite them, call `_agentd/revert` with {{\"session_id\": \"{sid}\", \"to_seq\": {to_seq}, \"force\": true}}.\n",
                    files.join(", ")
                ))
            }
            Err(e) => Err(e.into()),
        }
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

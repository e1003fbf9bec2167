//! `thread/goal/*`: Codex's thread goals on agentd's goals (docs/codex-app-server.md#goals,
//! docs/goals.md).
//!
//! agentd keeps a goal in the session's Log (`goal_set`, `goal_progress`, `goal_ended`)
//! and runs turns toward it until the model calls `goal_complete` or a budget is spent.
//! Codex shows the same thing as a `ThreadGoal` with a status. Nothing is kept here: every
//! answer and notification is read from the daemon (`agentd/goal_get`, plus the goal's
//! events for its times).

use super::map::{now_ms, ts_ms, Note};
use super::shared::{parse, session, Shared};
use agentctl::acp::params::RpcErr;
use agentd_proto::rpc::{self, method};
use serde::Deserialize;
use serde_json::{json, Value};

/// `thread/goal/set` params. `tokenBudget` is a double option: absent leaves the budget
/// alone, `null` means none.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetParams {
    thread_id: String,
    #[serde(default)]
    objective: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default, deserialize_with = "some")]
    token_budget: Option<Option<i64>>,
    #[serde(default)]
    #[allow(dead_code)]
    origin: Option<Value>,
}

fn some<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    Option::<i64>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThreadRef {
    thread_id: String,
    #[serde(default)]
    #[allow(dead_code)]
    origin: Option<Value>,
}

/// Codex's status of an agentd goal; `None` for a cleared goal (no goal at all).
fn status_of(goal: &Value) -> Option<&'static str> {
    if goal["status"] == "open" {
        return Some("active");
    }
    Some(match goal["reason"].as_str().unwrap_or("") {
        "completed" => "complete",
        "token_budget" | "max_turns" => "budgetLimited",
        "failed" => "blocked",
        "interrupted" => "paused",
        // `cleared` and `replaced`: no goal any more.
        _ => return None,
    })
}

/// The session's goal as a Codex `ThreadGoal`, or `None` when it has none (never set, or
/// cleared). `goal` is `agentd/goal_get`'s.
async fn thread_goal(c: &Shared, sid: &str, uuid: &str, goal: &Value) -> Option<Value> {
    let status = status_of(goal)?;
    let set_seq = goal["set_seq"].as_u64().unwrap_or(1);
    // The goal's own events give its times: set, and last changed.
    let evs = c
        .call(
            method::EVENTS,
            &rpc::EventsParams {
                session_id: sid.to_string(),
                after_seq: Some(set_seq.saturating_sub(1)),
                limit: Some(10_000),
                types: Some(
                    ["goal_set", "goal_progress", "goal_ended"]
                        .map(str::to_string)
                        .to_vec(),
                ),
                tail: None,
            },
        )
        .await
        .ok();
    let evs = evs
        .as_ref()
        .and_then(|e| e["events"].as_array())
        .cloned()
        .unwrap_or_default();
    let created = evs.first().and_then(ts_ms).unwrap_or_else(now_ms) / 1000;
    let updated = evs.last().and_then(ts_ms).unwrap_or_else(now_ms) / 1000;
    // An ended goal's tokens are the ones its `goal_ended` counted.
    let tokens = evs
        .last()
        .filter(|e| e["type"] == "goal_ended" && e["data"]["goal_id"] == goal["goal_id"])
        .and_then(|e| e["data"]["tokens_used"].as_u64())
        .or_else(|| goal["tokens_used"].as_u64())
        .unwrap_or(0);
    let until = if status == "active" {
        now_ms() / 1000
    } else {
        updated
    };
    Some(json!({
        "threadId": uuid,
        "objective": goal["objective"],
        "status": status,
        "tokenBudget": goal["token_budget"],
        "tokensUsed": tokens,
        "timeUsedSeconds": (until - created).max(0),
        "createdAt": created,
        "updatedAt": updated.max(created),
    }))
}

/// The session's latest goal (`agentd/goal_get`'s `goal`, `null` when none).
async fn latest(c: &Shared, sid: &str) -> Result<Value, RpcErr> {
    let r = c.call(method::GOAL_GET, &session(sid)).await?;
    Ok(r["goal"].clone())
}

/// `thread/goal/get`.
pub async fn get(c: &Shared, params: Value) -> Result<Value, RpcErr> {
    let p: ThreadRef = parse(params, "thread/goal/get params")?;
    let (sid, uuid) = c.resolve(&p.thread_id).await?;
    let g = latest(c, &sid).await?;
    Ok(json!({"goal": thread_goal(c, &sid, &uuid, &g).await}))
}

/// `thread/goal/clear`: ends the open goal (a running turn finishes; none follows).
pub async fn clear(c: &Shared, params: Value) -> Result<Value, RpcErr> {
    let p: ThreadRef = parse(params, "thread/goal/clear params")?;
    let (sid, _) = c.resolve(&p.thread_id).await?;
    let r = c.call(method::GOAL_CLEAR, &session(&sid)).await?;
    Ok(json!({"cleared": r["cleared"] == json!(true)}))
}

/// `thread/goal/set`: a new objective sets a new goal (replacing an open one) and starts
/// its first turn when the thread is idle; `status: active` alone starts an ended goal's
/// objective again. agentd's goals cannot be paused, and the statuses the run reaches
/// (`complete`, `blocked`, the limits) are not a client's to set.
pub async fn set(c: &Shared, params: Value) -> Result<Value, RpcErr> {
    let p: SetParams = parse(params, "thread/goal/set params")?;
    let (sid, uuid) = c.resolve(&p.thread_id).await?;
    match p.status.as_deref() {
        None | Some("active") => {}
        Some("paused") => {
            return Err(RpcErr {
                code: -32600,
                message: "agentd's goals cannot be paused: interrupt the turn (Esc) to stop \
                          the goal, and `/goal resume` starts its objective again"
                    .into(),
                data: Some(json!({"kind": "unsupported", "status": "paused"})),
            })
        }
        Some(s) => {
            return Err(RpcErr::params(format!(
                "goal status `{}` is reached by the run, not set: the model calls \
                 `goal_complete`, and `/goal clear` ends the goal",
                s.chars().take(32).collect::<String>()
            )))
        }
    }
    let budget = match p.token_budget {
        Some(Some(b)) if b <= 0 => {
            return Err(RpcErr::params("tokenBudget must be a positive number"))
        }
        Some(b) => Some(b),
        None => None,
    };
    let current = latest(c, &sid).await?;
    let objective = match p.objective {
        Some(o) if o.trim().is_empty() => {
            return Err(RpcErr::params("objective must not be empty"))
        }
        Some(o) => o,
        None => {
            if budget.is_some() {
                return Err(RpcErr {
                    code: -32600,
                    message: "changing the budget of a set goal is not supported: set the \
                              goal again with its objective and the new budget"
                        .into(),
                    data: Some(json!({"kind": "unsupported", "field": "tokenBudget"})),
                });
            }
            // `/goal resume`: an open goal goes on as it is; an ended one starts again.
            match status_of(&current) {
                Some("active") => {
                    let goal = thread_goal(c, &sid, &uuid, &current).await;
                    return Ok(json!({ "goal": goal }));
                }
                Some(_) => current["objective"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                None => {
                    return Err(RpcErr::new(
                        -32600,
                        "this thread has no goal to resume: `/goal OBJECTIVE` sets one",
                    ))
                }
            }
        }
    };
    let mut q = rpc::GoalSetParams {
        session_id: sid.clone(),
        objective,
        ..Default::default()
    };
    match budget {
        Some(Some(b)) => q.token_budget = u64::try_from(b).ok(),
        Some(None) => {}
        // Unchanged: the budget of the goal this one replaces or resumes (not of a
        // cleared one: that thread has no goal).
        None if status_of(&current).is_some() => {
            q.token_budget = current["token_budget"].as_u64();
        }
        None => {}
    }
    c.call(method::GOAL_SET, &q).await?;
    let now = latest(c, &sid).await?;
    let goal = thread_goal(c, &sid, &uuid, &now)
        .await
        .ok_or_else(|| RpcErr::new(-32603, "the goal ended before it could be read"))?;
    Ok(json!({ "goal": goal }))
}

/// The notification a goal event of a followed thread becomes: `thread/goal/updated`
/// with the goal as it is now, or `thread/goal/cleared`. A goal replaced by a new one
/// says nothing (the new one's `goal_set` follows).
pub async fn on_event(c: &Shared, sid: &str, uuid: &str, event: &Value) -> Option<Note> {
    let data = &event["data"];
    match event["type"].as_str()? {
        "goal_ended" if data["reason"] == "cleared" => {
            Some(("thread/goal/cleared", json!({"threadId": uuid})))
        }
        "goal_ended" if data["reason"] == "replaced" => None,
        "goal_set" | "goal_progress" | "goal_ended" => {
            let g = latest(c, sid).await.ok()?;
            // Only the goal this event is about (a later one has its own event).
            if g["goal_id"] != data["goal_id"] {
                return None;
            }
            let goal = thread_goal(c, sid, uuid, &g).await?;
            Some((
                "thread/goal/updated",
                json!({"threadId": uuid, "turnId": data["turn_id"], "goal": goal}),
            ))
        }
        _ => None,
    }
}

/// The goal snapshot a resumed thread gets first, as Codex's server sends it.
pub async fn snapshot(c: &Shared, sid: &str, uuid: &str) -> Option<Note> {
    let g = latest(c, sid).await.ok()?;
    let goal = thread_goal(c, sid, uuid, &g).await?;
    Some((
        "thread/goal/updated",
        json!({"threadId": uuid, "turnId": null, "goal": goal}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agentd_goal_states_map_onto_codex_statuses() {
        let open = json!({"status": "open"});
        assert_eq!(status_of(&open), Some("active"));
        for (reason, status) in [
            ("completed", Some("complete")),
            ("token_budget", Some("budgetLimited")),
            ("max_turns", Some("budgetLimited")),
            ("failed", Some("blocked")),
            ("interrupted", Some("paused")),
            ("cleared", None),
            ("replaced", None),
        ] {
            assert_eq!(
                status_of(&json!({"status": "ended", "reason": reason})),
                status,
                "{reason}"
            );
        }
        assert_eq!(status_of(&Value::Null), None);
    }
}

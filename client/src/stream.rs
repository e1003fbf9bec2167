//! The two streaming commands: a turn whose text deltas reach the terminal as they are
//! generated (`run`, `turn`), and `log --follow`.
//!
//! Both subscribe (`agentd/subscribe`) on the same connection *before* the work starts,
//! so nothing produced between the call and the subscription is missed. Notifications
//! (`agentd/event`, `{subscription, result: event}`) come from the daemon's subscription
//! task, which may lag behind the turn's response; after the response the turn waits
//! (briefly) for its own `turn_ended` event so the last deltas are not cut off.

use crate::output;
use crate::params::{events_params, to_params};
use crate::render;
use crate::rpc::{connection_lost, Conn, Incoming};
use agentd_proto::rpc::{self, method, EVENT_NOTIFICATION};
use agentd_proto::{AgentError, ErrorKind, EventType};
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::time::Duration;

/// How long to wait after a turn's response for its trailing events.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The event carried by an `agentd/event` notification.
fn event_of(msg: &Incoming) -> Option<&Value> {
    match msg {
        Incoming::Notification { method, params } if method == EVENT_NOTIFICATION => {
            params.get("result")
        }
        _ => None,
    }
}

fn delta_text(event: &Value) -> Option<&str> {
    let data = event.get("data")?;
    data.get("text")
        .or_else(|| data.get("delta"))
        .and_then(Value::as_str)
}

/// Human-side state of a streamed turn.
struct TurnView {
    human: bool,
    progress: bool,
    printed: bool,
    ends_with_newline: bool,
    lagged: bool,
    turn_id: Option<String>,
    ended: bool,
}

impl TurnView {
    fn on_event(&mut self, event: &Value) {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "text_delta" if self.human && !self.lagged => {
                if let Some(t) = delta_text(event) {
                    if !t.is_empty() {
                        output::stdout(t);
                        self.printed = true;
                        self.ends_with_newline = t.ends_with('\n');
                    }
                }
            }
            // One step's text is complete; the next step's deltas start on a new line.
            "assistant_message" if self.human && self.printed && !self.ends_with_newline => {
                output::stdout("\n");
                self.ends_with_newline = true;
            }
            "lagged" => {
                self.lagged = true;
                if self.human {
                    output::stderr(
                        "\n[agentctl: the stream fell behind; the full answer follows]\n",
                    );
                }
            }
            "turn_started" if self.turn_id.is_none() => {
                self.turn_id = event
                    .pointer("/data/turn_id")
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
            "turn_ended" => {
                let id = event.pointer("/data/turn_id").and_then(Value::as_str);
                if self.turn_id.is_none() || id == self.turn_id.as_deref() {
                    self.ended = true;
                }
            }
            "tool_call" | "tool_result" | "history_compaction" | "permission_decision"
                if self.progress =>
            {
                let data = event.get("data").cloned().unwrap_or(Value::Null);
                let sep = if self.printed && !self.ends_with_newline {
                    "\n"
                } else {
                    ""
                };
                output::stderr(&format!(
                    "{sep}· {kind} {}\n",
                    render::event_summary(kind, &data)
                ));
                self.ends_with_newline = true;
            }
            _ => {}
        }
    }
}

/// Answers an `agentd/permission` request from the daemon: asks on the terminal when
/// stdin is one, else denies. The answer is `{"decision": "allow"|"deny"}`.
async fn answer_permission(conn: &Conn, id: Value, params: &Value) {
    let tool = params
        .get("name")
        .or_else(|| params.get("tool"))
        .and_then(Value::as_str)
        .unwrap_or("tool");
    let args = params.get("args").map(Value::to_string).unwrap_or_default();
    let allow = if std::io::stdin().is_terminal() {
        output::stderr(&format!(
            "\nallow {tool} {}? [y/N] ",
            render::one_line(&args, 120)
        ));
        let line = tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
            s
        })
        .await
        .unwrap_or_default();
        matches!(line.trim(), "y" | "Y" | "yes")
    } else {
        false
    };
    let decision = if allow { "allow" } else { "deny" };
    let _ = conn.respond(id, json!({"decision": decision})).await;
}

/// Runs `agentd/turn` with `params`, streaming deltas (human mode) and answering
/// permission requests. Returns the turn result with `session_id` added; a turn that did
/// not complete becomes an error of its kind (interrupted → exit 130).
pub async fn turn(
    conn: &Conn,
    session_id: &str,
    params: Value,
    human: bool,
    ask: bool,
) -> Result<Value, AgentError> {
    let mut incoming = conn
        .take_incoming()
        .ok_or_else(|| AgentError::internal("notification stream already taken"))?;
    let ask_here = ask && std::io::stdin().is_terminal();
    conn.subscribe(session_id, None, ask_here).await?;
    let mut view = TurnView {
        human,
        progress: human && std::io::stderr().is_terminal(),
        printed: false,
        ends_with_newline: true,
        lagged: false,
        turn_id: None,
        ended: false,
    };
    let call = conn.call(method::TURN, params);
    tokio::pin!(call);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let result = loop {
        tokio::select! {
            r = &mut call => break r,
            _ = &mut ctrl_c => {
                // Best effort: the turn's own response (interrupted) may race this.
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    conn.call(method::INTERRUPT, to_params(&rpc::InterruptParams {
                        session_id: session_id.to_string(),
                        reason: Some("ctrl_c".into()),
                    })?),
                ).await;
                if view.printed && !view.ends_with_newline && human {
                    output::stdout("\n");
                }
                return Err(AgentError::new(ErrorKind::Interrupted, "turn interrupted (Ctrl-C)")
                    .with_details(json!({"session_id": session_id}))
                    .with_next_actions(&[&format!("agentctl log {session_id}")]));
            }
            msg = incoming.recv() => match msg {
                Some(Incoming::Request { id, method, params }) if method == method::PERMISSION => {
                    answer_permission(conn, id, &params).await;
                }
                Some(Incoming::Request { id, .. }) => {
                    let _ = conn.respond_error(id, -32601, "agentctl does not serve this method").await;
                }
                Some(m) => if let Some(e) = event_of(&m) { view.on_event(e) },
                None => {} // reader ended; the call will fail with connection_lost
            }
        }
    };
    let mut result = result?;
    if view.turn_id.is_none() {
        view.turn_id = result
            .get("turn_id")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    if !view.lagged {
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while !view.ended {
                match incoming.recv().await {
                    Some(m) => {
                        if let Some(e) = event_of(&m) {
                            view.on_event(e);
                        }
                    }
                    None => break,
                }
            }
        })
        .await;
    }
    let output_text = result
        .get("output_text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if human {
        if (!view.printed || view.lagged) && !output_text.is_empty() {
            output::stdout(&output_text);
            view.ends_with_newline = output_text.ends_with('\n');
            view.printed = true;
        }
        if view.printed && !view.ends_with_newline {
            output::stdout("\n");
        }
    }
    if let Some(m) = result.as_object_mut() {
        m.insert("session_id".into(), session_id.into());
    }
    turn_outcome(result)
}

/// A completed turn is a success; any other status becomes an error whose details carry
/// the whole result.
pub fn turn_outcome(result: Value) -> Result<Value, AgentError> {
    let status = result
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("completed");
    if status == "completed" {
        return Ok(result);
    }
    let from_result = result
        .get("error")
        .and_then(|e| serde_json::from_value::<AgentError>(e.clone()).ok());
    let mut err = match (status, from_result) {
        ("interrupted", _) => AgentError::new(ErrorKind::Interrupted, "the turn was interrupted"),
        (_, Some(e)) => e,
        ("timed_out", None) => AgentError::new(ErrorKind::Timeout, "the turn timed out"),
        (s, None) => AgentError::new(ErrorKind::ProviderError, format!("the turn ended {s}")),
    };
    if !err.details.is_object() {
        err.details = json!({});
    }
    err.details["turn"] = result;
    Err(err)
}

/// `log` without `--follow`: every matching event, paged. Human mode prints while
/// paging; JSON mode returns `{"events": [...]}` for the single document.
pub async fn log_once(
    conn: &Conn,
    session_id: &str,
    after_seq: Option<u64>,
    types: &[String],
    human: bool,
) -> Result<Value, AgentError> {
    let mut after = after_seq;
    let mut all = Vec::new();
    loop {
        let page = conn
            .call(
                method::EVENTS,
                to_params(&events_params(session_id, after, types)?)?,
            )
            .await?;
        let events = page
            .get("events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if human {
            let text: String = events
                .iter()
                .map(|e| render::event_line(e) + "\n")
                .collect();
            output::stdout(&text);
        } else {
            all.extend(events.iter().cloned());
        }
        let next = page.get("next_after_seq").and_then(Value::as_u64);
        match next {
            Some(n) if Some(n) != after => after = Some(n),
            _ => break,
        }
    }
    Ok(json!({"session_id": session_id, "events": all}))
}

/// Whether `log --follow` shows this event: the `--types` filter when given, else every
/// canonical (logged) event. Ephemeral events show only when named.
pub fn follow_shows(event: &Value, types: &[String]) -> bool {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    if !types.is_empty() {
        return types.iter().any(|t| t == kind);
    }
    !EventType::parse(kind).is_ephemeral() && kind != "lagged"
}

/// `log --follow`: history first (paged, unfiltered so the resume point is exact), then a
/// subscription after the last seen seq, so there is no gap and no duplicate. A lagged
/// subscription is renewed from the last seq. Ends on Ctrl-C (success) or when the daemon
/// goes away (daemon_unavailable).
pub async fn log_follow(
    conn: &Conn,
    session_id: &str,
    after_seq: Option<u64>,
    types: &[String],
    human: bool,
) -> Result<(), AgentError> {
    let mut incoming = conn
        .take_incoming()
        .ok_or_else(|| AgentError::internal("notification stream already taken"))?;
    let mut last = after_seq;
    let mut last_page = after_seq;
    let show = |e: &Value| {
        if human {
            output::stdout(&(render::event_line(e) + "\n"));
        } else {
            output::json_line(e);
        }
    };
    loop {
        let page = conn
            .call(
                method::EVENTS,
                to_params(&events_params(session_id, last_page, &[])?)?,
            )
            .await?;
        let events = page
            .get("events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for e in &events {
            if follow_shows(e, types) {
                show(e);
            }
            if let Some(s) = e.get("seq").and_then(Value::as_u64) {
                last = Some(last.map_or(s, |l| l.max(s)));
            }
        }
        match page.get("next_after_seq").and_then(Value::as_u64) {
            Some(n) if Some(n) != last_page => last_page = Some(n),
            _ => break,
        }
        last = last.max(last_page);
    }
    conn.subscribe(session_id, last, false).await?;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            msg = incoming.recv() => {
                let Some(msg) = msg else {
                    return Err(connection_lost("the daemon closed the connection"));
                };
                let Some(e) = event_of(&msg) else { continue };
                if e.get("type").and_then(Value::as_str) == Some("lagged") {
                    conn.subscribe(session_id, last, false).await?;
                    continue;
                }
                match e.get("seq").and_then(Value::as_u64) {
                    Some(s) if last.is_some_and(|l| s <= l) => continue,
                    Some(s) => last = Some(s),
                    None => {}
                }
                if follow_shows(e, types) {
                    show(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_statuses_map_to_exit_codes() {
        let ok =
            turn_outcome(json!({"turn_id":"t","status":"completed","output_text":"hi"})).unwrap();
        assert_eq!(ok["output_text"], "hi");
        let e = turn_outcome(json!({"turn_id":"t","status":"interrupted"})).unwrap_err();
        assert_eq!(e.kind.exit_code(), 130);
        assert_eq!(e.details["turn"]["turn_id"], "t");
        let e = turn_outcome(
            json!({"status":"failed","error":{"kind":"rate_limited","message":"slow down"}}),
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::RateLimited);
        assert_eq!(e.message, "slow down");
        let e = turn_outcome(json!({"status":"timed_out"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout);
    }

    #[test]
    fn follow_filter_hides_ephemeral_unless_named() {
        let delta = json!({"type":"text_delta","data":{"text":"x"}});
        let msg = json!({"type":"user_message","seq":1,"data":{"text":"x"}});
        assert!(!follow_shows(&delta, &[]));
        assert!(follow_shows(&msg, &[]));
        assert!(follow_shows(&delta, &["text_delta".into()]));
        assert!(!follow_shows(&msg, &["text_delta".into()]));
        assert!(!follow_shows(&json!({"type":"lagged"}), &[]));
    }
}

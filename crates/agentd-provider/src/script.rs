//! The `script` provider: replays answers from a JSON script file, offline and
//! deterministic, for demos, tests and benchmarks (format: `examples/README.md`).
//!
//! It keeps no state between calls. Which step to play is read off the request alone:
//! the rule is picked by the last user message, and the step index is the number of
//! assistant steps already in the history after that message. So a daemon restart, a
//! fork or a retried turn plays exactly what the same history played before. The file
//! is re-read on every call so edits apply to the next step.

use super::config::SCRIPT_ENV;
use super::{
    OutputItem, ProviderConfig, ProviderFailure, ProviderRequest, ProviderResponse, StreamEvent,
    Usage,
};
use agentd_proto::replay::ReplayItem;
use agentd_proto::{AgentError, ErrorKind};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub const EXHAUSTED_TEXT: &str = "(script exhausted)";
const DEFAULT_CHUNK_CHARS: usize = 8;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Substring of the last user message; a rule without one is the fallback.
    #[serde(rename = "match", default)]
    pub pattern: Option<String>,
    #[serde(default)]
    pub steps: Vec<ScriptStep>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptStep {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptCall>,
    #[serde(default)]
    pub delay_ms: u64,
    #[serde(default)]
    pub chunk_chars: Option<usize>,
    #[serde(default)]
    pub error: Option<ScriptError>,
    #[serde(default)]
    pub usage: Option<ScriptUsage>,
    /// The provider stop reason this step reports (default `stop`, or `tool_calls` when
    /// it calls tools); `max_tokens` or `refusal` end the turn with that stop reason.
    #[serde(default)]
    pub stop_reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    pub name: String,
    #[serde(default = "empty_object")]
    pub args: Value,
}

fn empty_object() -> Value {
    json!({})
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptError {
    pub kind: String,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub cached_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub reasoning_tokens: u64,
    #[serde(default)]
    pub total_tokens: Option<u64>,
}

/// Text of the last `User` item, and how many assistant steps follow it. A step is a
/// maximal run of assistant-side items (reasoning, text, calls); tool outputs end it.
pub fn position(items: &[ReplayItem]) -> (&str, usize) {
    let last_user = items
        .iter()
        .rposition(|i| matches!(i, ReplayItem::User { .. }));
    let (text, rest) = match last_user {
        Some(p) => match &items[p] {
            ReplayItem::User { text, .. } => (text.as_str(), &items[p + 1..]),
            _ => ("", items),
        },
        None => ("", items),
    };
    let mut steps = 0;
    let mut in_step = false;
    for item in rest {
        let assistant_side = matches!(
            item,
            ReplayItem::Assistant { .. }
                | ReplayItem::FunctionCall { .. }
                | ReplayItem::Reasoning { .. }
        );
        if assistant_side && !in_step {
            steps += 1;
        }
        in_step = assistant_side;
    }
    (text, steps)
}

/// The rule for `user_text`: the first whose `match` it contains, else the first fallback.
pub fn choose_rule<'a>(script: &'a Script, user_text: &str) -> Option<&'a Rule> {
    script
        .rules
        .iter()
        .find(|r| r.pattern.as_deref().is_some_and(|p| user_text.contains(p)))
        .or_else(|| script.rules.iter().find(|r| r.pattern.is_none()))
}

pub fn load(path: &Path) -> Result<Script, AgentError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        AgentError::invalid_args(format!("cannot read script file {}: {e}", path.display()))
    })?;
    serde_json::from_str(&text).map_err(|e| {
        AgentError::invalid_args(format!(
            "script file {} is not a valid script: {e}",
            path.display()
        ))
    })
}

#[derive(Debug, Clone)]
pub struct ScriptProvider {
    pub(crate) config: ProviderConfig,
}

impl ScriptProvider {
    pub(crate) fn new(config: ProviderConfig) -> Self {
        ScriptProvider { config }
    }

    /// `script:PATH` in the model wins, then config `script`, then `$AGENTD_SCRIPT`.
    fn script_path(&self, model: &str) -> Result<PathBuf, AgentError> {
        if let Some(p) = model.strip_prefix("script:") {
            return Ok(PathBuf::from(p));
        }
        if let Some(p) = &self.config.script {
            return Ok(p.clone());
        }
        match std::env::var_os(SCRIPT_ENV) {
            Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
            _ => Err(AgentError::invalid_args(format!(
                "provider '{}' has no script: use model `script:PATH`, set `script` in [providers.{}], or set {SCRIPT_ENV}",
                self.config.name, self.config.name
            ))),
        }
    }

    pub(crate) async fn stream(
        &self,
        req: ProviderRequest,
        tx: mpsc::Sender<StreamEvent>,
        cancel: CancellationToken,
    ) -> Result<ProviderResponse, ProviderFailure> {
        let path = self.script_path(&req.model).map_err(ProviderFailure::new)?;
        // A script file is read and parsed on the blocking pool, like any file.
        let script = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || load(&path))
                .await
                .map_err(|e| {
                    ProviderFailure::new(AgentError::internal(format!("script task: {e}")))
                })?
                .map_err(ProviderFailure::new)?
        };
        let (user_text, k) = position(&req.items);
        let rule = choose_rule(&script, user_text).ok_or_else(|| {
            ProviderFailure::new(AgentError::new(
                ErrorKind::ProviderError,
                format!(
                    "no rule of script {} matches the last user message, and it has no fallback rule",
                    path.display()
                ),
            ))
        })?;
        let exhausted = ScriptStep {
            text: Some(EXHAUSTED_TEXT.to_string()),
            ..ScriptStep::default()
        };
        let step = rule.steps.get(k).unwrap_or(&exhausted);
        let turn = req
            .items
            .iter()
            .filter(|i| matches!(i, ReplayItem::User { .. }))
            .count();
        let model = if req.model.is_empty() {
            self.config.model.clone().unwrap_or_else(|| "script".into())
        } else {
            req.model.clone()
        };
        let mut player = Player {
            tx: &tx,
            cancel: &cancel,
            partial: String::new(),
        };
        player.play(step, &req, turn, k, model).await
    }
}

struct Player<'a> {
    tx: &'a mpsc::Sender<StreamEvent>,
    cancel: &'a CancellationToken,
    partial: String,
}

impl Player<'_> {
    fn fail(&self, kind: ErrorKind, message: String) -> ProviderFailure {
        ProviderFailure {
            error: AgentError::new(kind, message),
            partial_text: self.partial.clone(),
        }
    }

    /// Sends `text` in chunks of `chunk` chars, waiting `delay` before each chunk; the
    /// wait ends at once when the call is cancelled.
    async fn chunks(
        &mut self,
        text: &str,
        chunk: usize,
        delay: Duration,
        reasoning: bool,
    ) -> Result<(), ProviderFailure> {
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(chunk.max(1)) {
            if self.cancel.is_cancelled() {
                return Err(self.fail(ErrorKind::Interrupted, "provider call interrupted".into()));
            }
            if !delay.is_zero() {
                tokio::select! {
                    _ = self.cancel.cancelled() => {
                        return Err(self.fail(ErrorKind::Interrupted, "provider call interrupted".into()));
                    }
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            let piece: String = piece.iter().collect();
            let ev = if reasoning {
                StreamEvent::ReasoningDelta(piece)
            } else {
                self.partial.push_str(&piece);
                StreamEvent::TextDelta(piece)
            };
            // Nobody listening is fine (the answer is still returned); a full channel
            // must not delay an interrupt.
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    return Err(self.fail(ErrorKind::Interrupted, "provider call interrupted".into()));
                }
                _ = self.tx.send(ev) => {}
            }
        }
        Ok(())
    }

    async fn play(
        &mut self,
        step: &ScriptStep,
        req: &ProviderRequest,
        turn: usize,
        k: usize,
        model: String,
    ) -> Result<ProviderResponse, ProviderFailure> {
        if self.cancel.is_cancelled() {
            return Err(self.fail(ErrorKind::Interrupted, "provider call interrupted".into()));
        }
        let chunk = step.chunk_chars.unwrap_or(DEFAULT_CHUNK_CHARS);
        let delay = Duration::from_millis(step.delay_ms);
        let mut output = Vec::new();
        let mut out_chars = 0usize;
        let mut reasoning_chars = 0usize;
        if let Some(r) = step.reasoning.as_deref().filter(|r| !r.is_empty()) {
            self.chunks(r, chunk, delay, true).await?;
            reasoning_chars = r.chars().count();
            output.push(OutputItem::Reasoning {
                item: json!({
                    "type": "reasoning",
                    "id": format!("rs_{turn}_{k}"),
                    "summary": [{"type": "summary_text", "text": r}],
                }),
            });
        }
        if let Some(t) = step.text.as_deref().filter(|t| !t.is_empty()) {
            self.chunks(t, chunk, delay, false).await?;
            out_chars += t.chars().count();
            output.push(OutputItem::Message {
                text: t.to_string(),
            });
        }
        if let Some(e) = &step.error {
            let kind = ErrorKind::parse(&e.kind).unwrap_or(ErrorKind::ProviderError);
            let message = if e.message.is_empty() {
                format!("script step {k} failed with {}", kind)
            } else {
                e.message.clone()
            };
            return Err(self.fail(kind, message));
        }
        for (i, c) in step.tool_calls.iter().enumerate() {
            let args = if c.args.is_object() {
                c.args.clone()
            } else {
                json!({"_raw": c.args.to_string()})
            };
            out_chars += c.name.chars().count() + args.to_string().chars().count();
            output.push(OutputItem::ToolCall {
                call_id: format!("call_{turn}_{k}_{i}"),
                name: c.name.clone(),
                args,
            });
        }
        let usage = match &step.usage {
            Some(u) => Usage {
                input_tokens: u.input_tokens,
                cached_tokens: u.cached_tokens,
                output_tokens: u.output_tokens,
                reasoning_tokens: u.reasoning_tokens,
                total_tokens: u
                    .total_tokens
                    .unwrap_or(u.input_tokens.saturating_add(u.output_tokens)),
            },
            None => {
                let input_chars = serde_json::to_string(&req.items)
                    .map(|s| s.chars().count())
                    .unwrap_or(0);
                let input_tokens = input_chars.div_ceil(4) as u64;
                let output_tokens = (out_chars + reasoning_chars).div_ceil(4) as u64;
                Usage {
                    input_tokens,
                    cached_tokens: 0,
                    output_tokens,
                    reasoning_tokens: reasoning_chars.div_ceil(4) as u64,
                    total_tokens: input_tokens + output_tokens,
                }
            }
        };
        let has_calls = !step.tool_calls.is_empty();
        Ok(ProviderResponse {
            output,
            usage,
            model,
            stop_reason: Some(
                step.stop_reason
                    .clone()
                    .unwrap_or_else(|| if has_calls { "tool_calls" } else { "stop" }.to_string()),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(t: &str) -> ReplayItem {
        ReplayItem::User {
            text: t.into(),
            images: Vec::new(),
        }
    }
    fn call(id: &str) -> ReplayItem {
        ReplayItem::FunctionCall {
            call_id: id.into(),
            name: "shell".into(),
            arguments: "{}".into(),
        }
    }
    fn output(id: &str) -> ReplayItem {
        ReplayItem::FunctionCallOutput {
            call_id: id.into(),
            output: "ok".into(),
            ok: true,
            synthetic: false,
            images: Vec::new(),
        }
    }
    fn assistant(t: &str) -> ReplayItem {
        ReplayItem::Assistant { text: t.into() }
    }

    #[test]
    fn step_index_counts_assistant_steps_after_last_user() {
        let dev = ReplayItem::Developer { text: "ws".into() };
        assert_eq!(position(&[]), ("", 0));
        assert_eq!(position(&[dev.clone(), user("hi")]), ("hi", 0));
        // Text + two calls of one step, then their outputs: one step.
        let items = vec![
            dev.clone(),
            user("hi"),
            assistant("a"),
            call("1"),
            call("2"),
            output("1"),
            output("2"),
        ];
        assert_eq!(position(&items), ("hi", 1));
        let mut more = items.clone();
        more.extend([call("3"), output("3")]);
        assert_eq!(position(&more), ("hi", 2));
        // A new user message restarts the count; earlier turns do not matter.
        more.extend([assistant("done"), user("again")]);
        assert_eq!(position(&more), ("again", 0));
    }

    #[test]
    fn rule_choice_prefers_matches_then_fallback() {
        let script: Script = serde_json::from_value(json!({"rules": [
            {"steps": [{"text": "fallback"}]},
            {"match": "list", "steps": [{"text": "listing"}]},
        ]}))
        .unwrap();
        assert_eq!(
            choose_rule(&script, "please list files").unwrap().steps[0]
                .text
                .as_deref(),
            Some("listing")
        );
        assert_eq!(
            choose_rule(&script, "hello").unwrap().steps[0]
                .text
                .as_deref(),
            Some("fallback")
        );
        let no_fallback: Script =
            serde_json::from_value(json!({"rules": [{"match": "x", "steps": []}]})).unwrap();
        assert!(choose_rule(&no_fallback, "y").is_none());
    }

    #[test]
    fn unknown_script_keys_are_refused() {
        let r: Result<Script, _> =
            serde_json::from_value(json!({"rules": [{"steps": [{"txt": "typo"}]}]}));
        assert!(r.is_err());
    }
}

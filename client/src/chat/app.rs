//! The chat's state and what it does with keys, daemon messages and replies. It never
//! talks to the socket itself: every call it wants is returned as an [`Effect`] that the
//! loop (`chat::run`) carries out, and the reply comes back through [`App::on_reply`].

use super::attach::PendingImage;
use super::input::{Action, Editor};
use crate::params::title_from_prompt;
use crate::render::{self, one_line, relative_time};
use crate::rpc::to_params;
use crate::view::{args_summary, NoticeKind, TurnState, View};
use agentd_proto::rpc::{self, method};
use agentd_proto::{AgentError, ErrorKind};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::PathBuf;

/// How many of a session's newest events an attach draws (older ones stay in the Log:
/// `agentctl log`, `/export`).
pub const HISTORY_EVENTS: u64 = 1500;

/// The slash commands, with their help line.
pub const COMMANDS: &[(&str, &str)] = &[
    ("/help", "keys and commands"),
    (
        "/model",
        "[provider:model] the model of the next turns (no argument: list)",
    ),
    (
        "/mode",
        "auto|ask|read_only: the permission mode of the next turns",
    ),
    (
        "/effort",
        "minimal|low|medium|high|default: the reasoning effort of the next turns",
    ),
    (
        "/image",
        "PATH attach an image to the next prompt (PNG, JPEG, GIF, WebP); clear: drop them",
    ),
    (
        "/compact",
        "[--tail N] compact the history into a checkpoint",
    ),
    (
        "/fork",
        "[seq] fork the session (at seq, default its end) and switch to the child",
    ),
    ("/tree", "the session's fork tree, this session marked"),
    ("/sessions", "the sessions of this directory"),
    ("/diff", "what the session changed in its workspace"),
    (
        "/revert",
        "[seq] put the files back as they were at seq (default: before the last turn)",
    ),
    ("/rename", "TITLE rename the session"),
    (
        "/export",
        "[path] export the session (.md, .html or .jsonl; default SID.md)",
    ),
    ("/mcp", "MCP servers and their tools"),
    ("/usage", "token usage of this session"),
    (
        "/goal",
        "[--max-turns N] [--budget TOKENS] OBJECTIVE: keep working until done; no argument: show; clear: end it",
    ),
    ("/quit", "leave (the session stays; a running turn goes on)"),
];

/// What a call's reply is for.
#[derive(Debug, Clone, PartialEq)]
pub enum Tag {
    List,
    LastPrompt(String),
    Create,
    /// `agentd/show` on attaching: whether a turn runs.
    Show,
    /// The newest page of history on attaching (`agentd/events` with `tail`).
    Tail,
    Events,
    Subscribe,
    Unsubscribe,
    Turn(String),
    Steer(String),
    Queue(String),
    Interrupt,
    Rename,
    Fork,
    Model(String),
    /// A command whose result is shown as a notice.
    Show2(&'static str),
    /// An older page of history: events after `.0`, up to the drawn part's start.
    Older(Option<u64>),
}

/// Something the loop must do for the app.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// A daemon call: its params are one of `agentd_proto::rpc`'s types as JSON (see
    /// [`call`]).
    Call(Tag, &'static str, Value),
    /// A call whose params could not be encoded: answered with the error as its reply.
    Fail(Tag, AgentError),
    Respond(Value, Value),
    RespondError(Value, &'static str),
    Quit,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Screen {
    Picker,
    Chat,
}

/// One row of the session picker.
#[derive(Debug, Clone)]
pub struct PickerEntry {
    pub session_id: String,
    pub title: String,
    pub age: String,
    pub status: String,
    pub last_prompt: String,
}

/// A permission request waiting for the user.
#[derive(Debug, Clone)]
pub struct Pending {
    pub id: Value,
    /// The subagent that asks (docs/subagents.md), when the request is not the attached
    /// session's own.
    pub subagent: Option<String>,
    pub tool: String,
    pub summary: String,
    pub grant: Option<String>,
    pub justification: Option<String>,
}

/// Options that shape the chat's turns (from the command line, changed by commands).
#[derive(Debug, Clone, Default)]
pub struct TurnSettings {
    pub model: Option<String>,
    pub permission_mode: Option<String>,
    pub effort: Option<String>,
    pub sandbox: Option<Value>,
}

pub struct App {
    pub screen: Screen,
    pub cwd: PathBuf,
    pub session_id: Option<String>,
    pub subscription: Option<Value>,
    pub view: View,
    pub editor: Editor,
    pub picker: Vec<PickerEntry>,
    pub picker_sel: usize,
    /// The picker was opened from a chat (Esc goes back to it).
    pub picker_return: bool,
    pub connected: bool,
    /// Attaching: history still loading.
    pub loading: bool,
    pub hint: Option<String>,
    /// Lines scrolled up from the bottom of the transcript.
    pub scroll: u16,
    pub show_reasoning: bool,
    pub expand_tools: bool,
    pub permissions: VecDeque<Pending>,
    /// Typing a deny reason for the first pending request.
    pub deny_reason: Option<Editor>,
    pub settings: TurnSettings,
    pub quit_armed: bool,
    /// Prompt calls cut by a lost connection, sent again (same `client_request_id`, so
    /// the daemon answers the turn it already admitted) once the chat is back.
    pub retry: Vec<Effect>,
    /// The transcript starts after this seq (`None`: at the session's start).
    pub history_after: Option<u64>,
    older_pending: bool,
    /// Images attached with `/image`, sent with the next prompt that starts a turn.
    pub images: Vec<PendingImage>,
    /// The images of the turn last sent, given back if the daemon refuses it.
    sent_images: Vec<PendingImage>,
    /// Prompt calls awaiting their reply.
    inflight: Vec<Effect>,
    request_ids: u64,
}

fn sid_ok(e: &Value, sid: &str) -> bool {
    e.get("session_id")
        .and_then(Value::as_str)
        .is_none_or(|s| s == sid)
}

impl App {
    pub fn new(cwd: PathBuf, settings: TurnSettings) -> App {
        App {
            screen: Screen::Chat,
            cwd,
            session_id: None,
            subscription: None,
            view: View::default(),
            editor: Editor::default(),
            picker: Vec::new(),
            picker_sel: 0,
            picker_return: false,
            connected: true,
            loading: false,
            hint: None,
            scroll: 0,
            show_reasoning: false,
            expand_tools: false,
            permissions: VecDeque::new(),
            deny_reason: None,
            settings,
            quit_armed: false,
            retry: Vec::new(),
            history_after: None,
            older_pending: false,
            images: Vec::new(),
            sent_images: Vec::new(),
            inflight: Vec::new(),
            request_ids: 0,
        }
    }

    pub fn running(&self) -> bool {
        matches!(self.view.turn, TurnState::Running { .. })
    }

    fn sid(&self) -> String {
        self.session_id.clone().unwrap_or_default()
    }

    fn info(&mut self, text: impl Into<String>) {
        self.view.notice(NoticeKind::Info, text);
        self.scroll = 0;
    }

    fn error(&mut self, text: impl Into<String>) {
        self.view.notice(NoticeKind::Error, text);
        self.scroll = 0;
    }

    /// Opens the picker of the current directory's sessions.
    pub fn open_picker(&mut self, from_chat: bool) -> Vec<Effect> {
        self.screen = Screen::Picker;
        self.picker_return = from_chat;
        self.picker_sel = 0;
        vec![call(
            Tag::List,
            method::LIST,
            &rpc::ListParams {
                workspace: Some(self.cwd.to_string_lossy().into_owned()),
                limit: Some(50),
                ..Default::default()
            },
        )]
    }

    /// Creates a session in the current directory and attaches to it.
    pub fn create(&mut self) -> Vec<Effect> {
        self.screen = Screen::Chat;
        self.loading = true;
        let p = rpc::CreateParams {
            workspace: self.cwd.to_string_lossy().into_owned(),
            model: self.settings.model.clone(),
            sandbox: self.settings.sandbox.clone(),
            ..Default::default()
        };
        vec![call(Tag::Create, method::CREATE, &p)]
    }

    /// Attaches to `sid`: its newest history, then its live events.
    pub fn attach(&mut self, sid: &str) -> Vec<Effect> {
        let mut fx = Vec::new();
        if let Some(sub) = self.subscription.take() {
            fx.push(call(
                Tag::Unsubscribe,
                method::UNSUBSCRIBE,
                &rpc::UnsubscribeParams { subscription: sub },
            ));
        }
        self.screen = Screen::Chat;
        self.session_id = Some(sid.to_string());
        self.view = View::default();
        self.permissions.clear();
        self.deny_reason = None;
        self.scroll = 0;
        self.loading = true;
        self.history_after = None;
        self.older_pending = false;
        // The newest page and then the live events, answered from the Log's end even
        // while the daemon still loads a long session; `show` (whether a turn runs)
        // waits for the whole session and only sets the status line.
        let p = rpc::EventsParams {
            session_id: sid.to_string(),
            tail: Some(HISTORY_EVENTS as usize),
            ..Default::default()
        };
        fx.push(call(Tag::Tail, method::EVENTS, &p));
        fx.push(call(Tag::Show, method::SHOW, &session(sid)));
        fx
    }

    fn events_call(&self, after: Option<u64>) -> Effect {
        let p = rpc::EventsParams {
            session_id: self.sid(),
            after_seq: after,
            limit: Some(HISTORY_EVENTS as usize),
            types: None,
            tail: None,
        };
        call(Tag::Events, method::EVENTS, &p)
    }

    fn subscribe_call(&self) -> Effect {
        let p = rpc::SubscribeParams {
            session_id: self.sid(),
            after_seq: self.view.last_seq,
            permissions: true,
        };
        call(Tag::Subscribe, method::SUBSCRIBE, &p)
    }

    /// The connection is gone: say so; what streamed comes back recorded.
    pub fn on_disconnected(&mut self) {
        if self.connected {
            self.connected = false;
            self.subscription = None;
            self.permissions.clear();
            self.deny_reason = None;
            self.view.end_streams();
        }
    }

    /// A new connection: catch up from the last seq seen, then follow.
    pub fn on_connected(&mut self) -> Vec<Effect> {
        self.connected = true;
        match (&self.screen, &self.session_id) {
            (Screen::Chat, Some(_)) => {
                self.loading = true;
                let mut fx = vec![self.events_call(self.view.last_seq)];
                fx.append(&mut self.retry);
                fx
            }
            (Screen::Picker, _) => self.open_picker(self.picker_return),
            _ => Vec::new(),
        }
    }

    /// An `agentd/event` notification's event.
    pub fn on_event(&mut self, event: &Value) -> Vec<Effect> {
        let Some(sid) = &self.session_id else {
            return Vec::new();
        };
        if !sid_ok(event, sid) {
            return Vec::new();
        }
        if event.get("type").and_then(Value::as_str) == Some("lagged") {
            // The subscription fell behind: renew it from the last seq applied.
            return vec![self.subscribe_call()];
        }
        self.view.apply(event);
        Vec::new()
    }

    /// A server→client request (`agentd/permission`).
    pub fn on_request(&mut self, id: Value, method_name: &str, params: &Value) -> Vec<Effect> {
        if method_name != method::PERMISSION {
            return vec![Effect::RespondError(
                id,
                "agentctl chat does not serve this method",
            )];
        }
        let s = |k: &str| params.get(k).and_then(Value::as_str).unwrap_or("");
        let tool = s("tool").to_string();
        // The daemon sends this chat its session's requests and, in `ask` mode, those
        // of the session's subagents (their parent's client answers for them).
        let Some(own) = self.session_id.as_deref() else {
            return vec![Effect::Respond(id, json!({"decision": "deny"}))];
        };
        let asker = s("session_id");
        if asker.is_empty() {
            return vec![Effect::Respond(id, json!({"decision": "deny"}))];
        }
        let subagent = (asker != own).then(|| asker.to_string());
        let grant = params
            .get("sandbox_grant")
            .filter(|g| !g.is_null())
            .map(|g| one_line(&g.to_string(), 200));
        let null = Value::Null;
        self.permissions.push_back(Pending {
            id,
            subagent,
            summary: args_summary(&tool, params.get("args").unwrap_or(&null)),
            tool,
            grant,
            justification: params
                .get("justification")
                .and_then(Value::as_str)
                .map(str::to_string),
        });
        self.scroll = 0;
        Vec::new()
    }

    fn answer(&mut self, decision: &str, reason: Option<String>) -> Vec<Effect> {
        let Some(p) = self.permissions.pop_front() else {
            return Vec::new();
        };
        let mut result = json!({"decision": decision});
        match decision {
            "session" if p.grant.is_some() => {
                result = json!({"decision": "allow", "scope": "session"});
            }
            // The daemon remembers the tool for the session and asks no more.
            "session" => result = json!({"decision": "allow_always"}),
            _ => {}
        }
        if let Some(r) = reason.filter(|r| !r.trim().is_empty()) {
            result["reason"] = json!(r);
            self.info(format!("denied {}: {r}", p.tool));
        }
        vec![Effect::Respond(p.id, result)]
    }

    /// A pasted block goes into the box as it is.
    pub fn on_paste(&mut self, text: &str) {
        if self.screen != Screen::Chat {
            return;
        }
        match &mut self.deny_reason {
            Some(e) => e.insert_str(&text.replace('\n', " ")),
            None => self.editor.insert_str(text),
        }
    }

    pub fn on_key(&mut self, key: KeyEvent) -> Vec<Effect> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        if key.code != KeyCode::Char('c') || !key.modifiers.contains(KeyModifiers::CONTROL) {
            self.quit_armed = false;
        }
        if self.screen == Screen::Picker {
            return self.picker_key(key);
        }
        if !self.permissions.is_empty() {
            if let Some(fx) = self.permission_key(key) {
                return fx;
            }
        }
        let action = self.editor.key(key, self.running());
        self.hint = None;
        match action {
            Action::Submit => self.submit(false),
            Action::Queue => self.submit(true),
            Action::Interrupt => self.interrupt(),
            Action::CtrlC => {
                if self.running() {
                    self.interrupt()
                } else if !self.editor.is_empty() {
                    self.editor.clear();
                    Vec::new()
                } else if self.quit_armed {
                    vec![Effect::Quit]
                } else {
                    self.quit_armed = true;
                    self.hint = Some("press Ctrl-C again to quit".into());
                    Vec::new()
                }
            }
            Action::Quit => vec![Effect::Quit],
            Action::Complete => {
                self.complete();
                Vec::new()
            }
            Action::ScrollUp => {
                self.scroll = self.scroll.saturating_add(10);
                Vec::new()
            }
            Action::ScrollDown => {
                self.scroll = self.scroll.saturating_sub(10);
                Vec::new()
            }
            Action::ScrollBottom => {
                self.scroll = 0;
                Vec::new()
            }
            Action::ToggleReasoning => {
                self.show_reasoning = !self.show_reasoning;
                Vec::new()
            }
            Action::ToggleTools => {
                self.expand_tools = !self.expand_tools;
                Vec::new()
            }
            Action::Edited | Action::None => Vec::new(),
        }
    }

    /// Keys while a permission request waits; `None` lets the key through.
    fn permission_key(&mut self, key: KeyEvent) -> Option<Vec<Effect>> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if let Some(reason) = &mut self.deny_reason {
            return Some(match key.code {
                KeyCode::Enter => {
                    let r = reason.text.clone();
                    self.deny_reason = None;
                    self.answer("deny", Some(r))
                }
                KeyCode::Esc => {
                    self.deny_reason = None;
                    Vec::new()
                }
                KeyCode::Char('c') if ctrl => {
                    self.deny_reason = None;
                    self.answer("deny", None)
                }
                _ => {
                    reason.key(key, false);
                    Vec::new()
                }
            });
        }
        match key.code {
            KeyCode::Char('y') | KeyCode::Char('Y') if !ctrl => Some(self.answer("allow", None)),
            KeyCode::Char('a') | KeyCode::Char('A') if !ctrl => Some(self.answer("session", None)),
            KeyCode::Char('n') | KeyCode::Char('N') if !ctrl => {
                self.deny_reason = Some(Editor::default());
                Some(Vec::new())
            }
            KeyCode::Char('c') | KeyCode::Char('d') if ctrl => None,
            KeyCode::Esc => None,
            _ => Some(Vec::new()),
        }
    }

    fn picker_key(&mut self, key: KeyEvent) -> Vec<Effect> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let n = self.picker.len() + 1;
        match key.code {
            KeyCode::Up => self.picker_sel = (self.picker_sel + n - 1) % n,
            KeyCode::Down => self.picker_sel = (self.picker_sel + 1) % n,
            KeyCode::Enter => {
                if self.picker_sel == 0 {
                    return self.create();
                }
                if let Some(e) = self.picker.get(self.picker_sel - 1) {
                    let sid = e.session_id.clone();
                    return self.attach(&sid);
                }
            }
            KeyCode::Esc if self.picker_return => self.screen = Screen::Chat,
            KeyCode::Esc | KeyCode::Char('q') => return vec![Effect::Quit],
            KeyCode::Char('c') | KeyCode::Char('d') if ctrl => return vec![Effect::Quit],
            _ => {}
        }
        Vec::new()
    }

    fn complete(&mut self) {
        let t = self.editor.text.clone();
        if !t.starts_with('/') || t.contains(' ') {
            return;
        }
        let matches: Vec<&str> = COMMANDS
            .iter()
            .map(|(c, _)| *c)
            .filter(|c| c.starts_with(&t))
            .collect();
        match matches.as_slice() {
            [] => self.hint = Some(format!("no command starts with {t}")),
            [one] => self.editor.set(&format!("{one} ")),
            many => {
                let mut common = many[0].to_string();
                for m in &many[1..] {
                    while !m.starts_with(&common) {
                        common.pop();
                    }
                }
                self.editor.set(&common);
                self.hint = Some(many.join("  "));
            }
        }
    }

    fn interrupt(&mut self) -> Vec<Effect> {
        if !self.running() {
            return Vec::new();
        }
        self.hint = Some("interrupting…".into());
        vec![call(
            Tag::Interrupt,
            method::INTERRUPT,
            &rpc::InterruptParams {
                session_id: self.sid(),
                reason: Some("chat".into()),
            },
        )]
    }

    /// A prompt's call, remembered until its reply so a lost connection can send it again.
    fn prompt_call<P: Serialize>(&mut self, tag: Tag, method: &'static str, params: &P) -> Effect {
        let call = call(tag, method, params);
        if matches!(call, Effect::Call(..)) {
            self.inflight.push(call.clone());
        }
        call
    }

    /// A new idempotency key for one prompt: process, time and a counter.
    fn request_id(&mut self) -> String {
        self.request_ids += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("chat-{}-{nanos}-{}", std::process::id(), self.request_ids)
    }

    fn turn_params(&mut self, input: &str) -> rpc::TurnParams {
        rpc::TurnParams {
            session_id: self.sid(),
            input: input.to_string(),
            wait: Some(false),
            client_request_id: Some(self.request_id()),
            model: self.settings.model.clone(),
            permission_mode: self.settings.permission_mode.clone(),
            reasoning_effort: self.settings.effort.clone(),
            sandbox: self.settings.sandbox.clone(),
            ..Default::default()
        }
    }

    fn submit(&mut self, queue: bool) -> Vec<Effect> {
        if self.editor.text.trim().is_empty() {
            return Vec::new();
        }
        if self.session_id.is_none() || !self.connected || self.loading {
            self.hint = Some(if self.connected {
                "still attaching: the prompt stays here; Enter again once idle".into()
            } else {
                "disconnected: the prompt stays here until the chat reconnects".into()
            });
            return Vec::new();
        }
        let text = self.editor.take();
        self.scroll = 0;
        if text.starts_with('/') {
            return self.command(text.trim());
        }
        if queue {
            let mut p = self.turn_params(&text);
            p.queue = Some(true);
            self.with_images(&mut p);
            return vec![self.prompt_call(Tag::Queue(text), method::TURN, &p)];
        }
        if self.running() {
            self.sent_images = std::mem::take(&mut self.images);
            let p = rpc::SteerParams {
                session_id: self.sid(),
                input: text.clone(),
                client_request_id: Some(self.request_id()),
                images: super::attach::param(&self.sent_images),
            };
            return vec![self.prompt_call(Tag::Steer(text), method::STEER, &p)];
        }
        let mut fx = Vec::new();
        if self.view.title.is_none() && self.view.items.is_empty() {
            fx.push(call(
                Tag::Rename,
                method::RENAME,
                &rpc::RenameParams {
                    session_id: self.sid(),
                    title: title_from_prompt(&text),
                },
            ));
        }
        let mut p = self.turn_params(&text);
        self.with_images(&mut p);
        fx.push(self.prompt_call(Tag::Turn(text), method::TURN, &p));
        fx
    }

    /// Moves the attached images into a turn's params (given back if it is refused).
    fn with_images(&mut self, p: &mut rpc::TurnParams) {
        self.sent_images = std::mem::take(&mut self.images);
        p.images = super::attach::param(&self.sent_images);
    }

    fn command(&mut self, line: &str) -> Vec<Effect> {
        let (name, arg) = line.split_once(' ').unwrap_or((line, ""));
        let arg = arg.trim();
        let sid = self.sid();
        fn show<P: Serialize>(what: &'static str, m: &'static str, p: &P) -> Vec<Effect> {
            vec![call(Tag::Show2(what), m, p)]
        }
        match name {
            "/help" => {
                self.info(help_text());
                Vec::new()
            }
            "/quit" | "/exit" => vec![Effect::Quit],
            "/model" if arg.is_empty() => {
                show("models", method::MODELS, &rpc::ModelsParams::default())
            }
            "/model" => vec![call(
                Tag::Model(arg.to_string()),
                method::PREFLIGHT,
                &rpc::PreflightParams {
                    model: Some(arg.to_string()),
                    provider: None,
                },
            )],
            "/mode" => match arg {
                "auto" | "ask" | "read_only" => {
                    self.settings.permission_mode = Some(arg.to_string());
                    self.info(format!("permission mode of the next turns: {arg}"));
                    Vec::new()
                }
                _ => {
                    self.error("usage: /mode auto|ask|read_only");
                    Vec::new()
                }
            },
            "/image" => {
                match super::attach::command(&mut self.images, arg, &self.cwd) {
                    Ok(said) => self.info(said),
                    Err(e) => self.error(e),
                }
                Vec::new()
            }
            "/effort" => match arg {
                "minimal" | "low" | "medium" | "high" => {
                    self.settings.effort = Some(arg.to_string());
                    self.info(format!("reasoning effort of the next turns: {arg}"));
                    Vec::new()
                }
                "default" => {
                    self.settings.effort = None;
                    self.info("reasoning effort of the next turns: the provider's default");
                    Vec::new()
                }
                _ => {
                    self.error("usage: /effort minimal|low|medium|high|default");
                    Vec::new()
                }
            },
            "/compact" => {
                let mut p = rpc::CompactParams {
                    session_id: sid,
                    ..Default::default()
                };
                if !arg.is_empty() {
                    let n = arg.trim_start_matches("--tail").trim().parse::<usize>();
                    match n {
                        Ok(n) => p.tail_events = Some(n),
                        Err(_) => {
                            self.error("usage: /compact [--tail N]");
                            return Vec::new();
                        }
                    }
                }
                show("compact", method::COMPACT, &p)
            }
            "/fork" => {
                let mut p = rpc::ForkParams {
                    session_id: sid,
                    ..Default::default()
                };
                if !arg.is_empty() {
                    match arg.parse::<u64>() {
                        Ok(n) => p.to_seq = Some(n),
                        Err(_) => {
                            self.error("usage: /fork [seq]");
                            return Vec::new();
                        }
                    }
                }
                vec![call(Tag::Fork, method::FORK, &p)]
            }
            "/tree" => show(
                "tree",
                method::TREE,
                &rpc::TreeParams {
                    session_id: Some(sid),
                    ..Default::default()
                },
            ),
            "/sessions" => self.open_picker(true),
            "/diff" => show(
                "diff",
                method::DIFF,
                &rpc::DiffParams {
                    session_id: sid,
                    ..Default::default()
                },
            ),
            "/revert" => {
                let to = if arg.is_empty() {
                    self.view.last_turn_seq.map(|s| s.saturating_sub(1))
                } else {
                    arg.parse::<u64>().ok()
                };
                match to {
                    Some(to) => show(
                        "revert",
                        method::REVERT,
                        &rpc::RevertParams {
                            session_id: sid,
                            to_seq: to,
                            ..Default::default()
                        },
                    ),
                    None => {
                        self.error("usage: /revert SEQ (no turn to revert yet)");
                        Vec::new()
                    }
                }
            }
            "/rename" if arg.is_empty() => {
                self.error("usage: /rename TITLE");
                Vec::new()
            }
            "/rename" => show(
                "rename",
                method::RENAME,
                &rpc::RenameParams {
                    session_id: sid,
                    title: arg.to_string(),
                },
            ),
            "/export" => {
                let path = if arg.is_empty() {
                    self.cwd.join(format!("{sid}.md"))
                } else {
                    self.cwd.join(arg)
                };
                let format = match path.extension().and_then(|e| e.to_str()) {
                    Some("html") => "html",
                    Some("jsonl") => "jsonl",
                    _ => "markdown",
                };
                show(
                    "export",
                    method::EXPORT,
                    &rpc::ExportParams {
                        session_id: sid,
                        format: format.to_string(),
                        output_path: Some(path.to_string_lossy().into_owned()),
                        install: None,
                    },
                )
            }
            "/mcp" => vec![
                call(
                    Tag::Show2("mcp_servers"),
                    method::MCP_LIST,
                    &rpc::McpListParams {
                        session_id: Some(sid.clone()),
                    },
                ),
                call(
                    Tag::Show2("mcp"),
                    method::MCP_TOOLS,
                    &rpc::McpToolsParams {
                        session_id: Some(sid),
                        ..Default::default()
                    },
                ),
            ],
            "/usage" => show(
                "usage",
                method::USAGE,
                &rpc::UsageParams {
                    session_id: Some(sid),
                    ..Default::default()
                },
            ),
            "/goal" if arg.is_empty() => show("goal", method::GOAL_GET, &session(&sid)),
            "/goal" if arg == "clear" => show("goal", method::GOAL_CLEAR, &session(&sid)),
            "/goal" => match goal_params(&sid, arg, self.settings.model.as_deref()) {
                Ok(p) => show("goal", method::GOAL_SET, &p),
                Err(e) => {
                    self.error(e);
                    Vec::new()
                }
            },
            _ => {
                self.error(format!("unknown command {name}; /help lists them"));
                Vec::new()
            }
        }
    }

    /// PgUp reached the top of the drawn transcript: the page of events before it.
    pub fn load_older(&mut self) -> Vec<Effect> {
        let Some(start) = self.history_after else {
            return Vec::new();
        };
        if self.older_pending || self.view.items.len() >= crate::view::MAX_ITEMS / 2 {
            return Vec::new();
        }
        self.older_pending = true;
        let from = start.checked_sub(HISTORY_EVENTS);
        let p = rpc::EventsParams {
            session_id: self.sid(),
            after_seq: from,
            limit: Some(from.map_or(start + 1, |f| start - f) as usize),
            types: None,
            tail: None,
        };
        vec![call(Tag::Older(from), method::EVENTS, &p)]
    }

    /// Puts an older page's items before the drawn ones.
    fn prepend(&mut self, from: Option<u64>, events: &[Value]) {
        self.older_pending = false;
        let Some(start) = self.history_after else {
            return;
        };
        let mut older = View::default();
        for e in events {
            if e.get("seq")
                .and_then(Value::as_u64)
                .is_some_and(|s| s <= start)
            {
                older.apply(e);
            }
        }
        // The notice about the earlier events is the first item; it is replaced.
        if matches!(self.view.items.front(), Some(crate::view::Item::Notice { kind: NoticeKind::Info, text }) if text.contains("earlier events"))
        {
            self.view.items.pop_front();
        }
        for item in older.items.into_iter().rev() {
            self.view.items.push_front(item);
        }
        if let Some(f) = from {
            self.view.items.push_front(crate::view::Item::Notice {
                kind: NoticeKind::Info,
                text: earlier_notice(f),
            });
        }
        self.view.revision += 1;
        self.history_after = from;
    }

    /// A reply to one of the app's calls.
    pub fn on_reply(&mut self, tag: Tag, result: Result<Value, AgentError>) -> Vec<Effect> {
        if let (Tag::Turn(_) | Tag::Steer(_) | Tag::Queue(_), Err(e)) = (&tag, &result) {
            if e.kind == ErrorKind::DaemonUnavailable {
                if let Some(i) = self
                    .inflight
                    .iter()
                    .position(|c| matches!(c, Effect::Call(t, ..) if *t == tag))
                {
                    let call = self.inflight.remove(i);
                    self.retry.push(call);
                    self.hint = Some("disconnected: the prompt is sent again on reconnect".into());
                    return Vec::new();
                }
            }
        }
        if let Some(i) = self
            .inflight
            .iter()
            .position(|c| matches!(c, Effect::Call(t, ..) if *t == tag))
        {
            self.inflight.remove(i);
        }
        match (tag, result) {
            (Tag::List, Ok(v)) => {
                let now = time::OffsetDateTime::now_utc();
                self.picker = v
                    .get("sessions")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|s| {
                                let st = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("");
                                PickerEntry {
                                    session_id: st("session_id").into(),
                                    title: one_line(st("title"), 50),
                                    age: relative_time(st("updated_at"), now),
                                    status: st("status").into(),
                                    last_prompt: String::new(),
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                self.picker_sel = self.picker_sel.min(self.picker.len());
                let counts: Vec<(String, u64)> = v
                    .get("sessions")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .take(20)
                            .map(|s| {
                                (
                                    s.get("session_id")
                                        .and_then(Value::as_str)
                                        .unwrap_or("")
                                        .to_string(),
                                    s.get("event_count").and_then(Value::as_u64).unwrap_or(0),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                counts
                    .into_iter()
                    .map(|(sid, n)| {
                        let p = rpc::EventsParams {
                            session_id: sid.clone(),
                            after_seq: (n > 300).then(|| n - 300),
                            types: Some(vec!["user_message".to_string()]),
                            tail: None,
                            limit: None,
                        };
                        call(Tag::LastPrompt(sid), method::EVENTS, &p)
                    })
                    .collect()
            }
            (Tag::LastPrompt(sid), Ok(v)) => {
                let last = v
                    .get("events")
                    .and_then(Value::as_array)
                    .and_then(|a| a.last())
                    .and_then(|e| e.pointer("/data/text"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if let Some(e) = self.picker.iter_mut().find(|e| e.session_id == sid) {
                    e.last_prompt = one_line(last, 60);
                }
                Vec::new()
            }
            (Tag::LastPrompt(_), Err(_)) | (Tag::Unsubscribe, _) | (Tag::Rename, _) => Vec::new(),
            (Tag::Create, Ok(v)) => match v.get("session_id").and_then(Value::as_str) {
                Some(sid) => {
                    let sid = sid.to_string();
                    self.attach(&sid)
                }
                None => {
                    self.error("agentd/create returned no session_id");
                    Vec::new()
                }
            },
            (Tag::Show, Ok(v)) => {
                // A running turn whose start is older than the drawn page; unless the
                // view already holds events newer than this answer describes.
                let last = v.get("last_seq").and_then(Value::as_u64);
                let stale = self
                    .view
                    .last_seq
                    .is_some_and(|seen| last.is_none_or(|l| seen > l));
                if !stale
                    && self.view.turn == TurnState::Idle
                    && v.get("status").and_then(Value::as_str) == Some("running")
                {
                    self.view.turn = TurnState::Running {
                        turn_id: String::new(),
                    };
                }
                Vec::new()
            }
            (Tag::Tail, Ok(v)) => {
                let events = v.get("events").and_then(Value::as_array);
                let first = events
                    .and_then(|e| e.first())
                    .and_then(|e| e.get("seq"))
                    .and_then(Value::as_u64);
                let start = first.and_then(|f| f.checked_sub(1));
                self.history_after = start;
                if let Some(s) = start {
                    self.view.notice(NoticeKind::Info, earlier_notice(s));
                }
                for e in events.into_iter().flatten() {
                    self.view.apply(e);
                }
                vec![self.subscribe_call()]
            }
            (Tag::Older(from), Ok(v)) => {
                let events = v
                    .get("events")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                self.prepend(from, &events);
                Vec::new()
            }
            (Tag::Older(_), Err(e)) => {
                self.older_pending = false;
                self.error(format!(
                    "cannot load earlier history: {}: {}",
                    e.kind, e.message
                ));
                Vec::new()
            }
            (Tag::Events, Ok(v)) => {
                if let Some(events) = v.get("events").and_then(Value::as_array) {
                    for e in events {
                        self.view.apply(e);
                    }
                }
                match v.get("next_after_seq").and_then(Value::as_u64) {
                    Some(n) if self.view.last_seq.is_none_or(|l| n > l) => {
                        vec![self.events_call(Some(n))]
                    }
                    Some(_)
                        if v.get("events")
                            .and_then(Value::as_array)
                            .is_some_and(|a| !a.is_empty()) =>
                    {
                        vec![self.events_call(self.view.last_seq)]
                    }
                    _ => vec![self.subscribe_call()],
                }
            }
            (Tag::Subscribe, Ok(v)) => {
                self.loading = false;
                self.subscription = v.get("subscription").cloned().or(Some(v));
                Vec::new()
            }
            (Tag::Turn(text), Err(e)) => {
                self.editor.set(&text);
                if !self.sent_images.is_empty() && self.images.is_empty() {
                    self.images = std::mem::take(&mut self.sent_images);
                }
                if e.kind == ErrorKind::Busy {
                    self.hint = Some(
                        "a turn is running: Enter steers it, Alt+Enter queues after it".into(),
                    );
                } else {
                    self.error(format!("turn refused: {}: {}", e.kind, e.message));
                }
                Vec::new()
            }
            (Tag::Turn(_), Ok(_)) => {
                self.sent_images.clear();
                Vec::new()
            }
            (Tag::Steer(text), Err(e)) => {
                if e.kind == ErrorKind::NotRunning {
                    // The turn ended meanwhile: the prompt starts the next one, with the
                    // images it carried.
                    let mut p = self.turn_params(&text);
                    p.images = super::attach::param(&self.sent_images);
                    return vec![self.prompt_call(Tag::Turn(text), method::TURN, &p)];
                }
                self.editor.set(&text);
                if !self.sent_images.is_empty() && self.images.is_empty() {
                    self.images = std::mem::take(&mut self.sent_images);
                }
                if e.kind == ErrorKind::Unsupported {
                    self.hint = Some(
                        "this daemon cannot steer a running turn: wait for it (Esc interrupts)"
                            .into(),
                    );
                } else {
                    self.error(format!("steer refused: {}: {}", e.kind, e.message));
                }
                Vec::new()
            }
            (Tag::Steer(_), Ok(_)) => {
                self.sent_images.clear();
                self.hint = Some("sent to the running turn".into());
                Vec::new()
            }
            (Tag::Queue(text), Err(e)) => {
                self.editor.set(&text);
                if !self.sent_images.is_empty() && self.images.is_empty() {
                    self.images = std::mem::take(&mut self.sent_images);
                }
                // A daemon without queueing refuses the key, or ignores it and is busy.
                if e.kind == ErrorKind::Busy
                    || (e.kind == ErrorKind::InvalidArgs && e.message.contains("queue"))
                {
                    self.hint =
                        Some("this daemon does not queue prompts: wait for the turn to end".into());
                } else {
                    self.error(format!("queue refused: {}: {}", e.kind, e.message));
                }
                Vec::new()
            }
            (Tag::Queue(text), Ok(v)) => {
                self.sent_images.clear();
                let status = v.get("status").and_then(Value::as_str).unwrap_or("");
                if status == "queued" {
                    self.info(format!("queued: {}", one_line(&text, 80)));
                }
                Vec::new()
            }
            (Tag::Interrupt, Err(e)) => {
                self.error(format!("interrupt failed: {}: {}", e.kind, e.message));
                Vec::new()
            }
            (Tag::Interrupt, Ok(_)) => Vec::new(),
            (Tag::Fork, Ok(v)) => match v
                .get("child_session_id")
                .or_else(|| v.get("session_id"))
                .and_then(Value::as_str)
            {
                Some(child) => {
                    let parent = self.sid();
                    let child = child.to_string();
                    let fx = self.attach(&child);
                    self.view.notice(
                        NoticeKind::Info,
                        format!("forked from {parent}: now in {child}"),
                    );
                    fx
                }
                None => {
                    self.error("agentd/fork returned no child session id");
                    Vec::new()
                }
            },
            (Tag::Model(m), Ok(v)) => {
                let model = v.get("model").and_then(Value::as_str).unwrap_or(&m);
                let provider = v.get("provider").and_then(Value::as_str).unwrap_or("");
                self.info(format!("model of the next turns: {provider} {model}"));
                self.settings.model = Some(m);
                Vec::new()
            }
            (Tag::Show2(what), Ok(v)) => {
                let text = self.command_output(what, &v);
                self.info(text);
                Vec::new()
            }
            (Tag::Subscribe | Tag::Events | Tag::Tail | Tag::Show | Tag::Create, Err(e)) => {
                self.loading = false;
                if e.kind != ErrorKind::DaemonUnavailable {
                    self.error(format!("cannot attach: {}: {}", e.kind, e.message));
                }
                Vec::new()
            }
            (_, Err(e)) => {
                if e.kind != ErrorKind::DaemonUnavailable {
                    self.error(format!("{}: {}", e.kind, e.message));
                }
                Vec::new()
            }
        }
    }

    fn command_output(&self, what: &str, v: &Value) -> String {
        let sid = self.sid();
        match what {
            "tree" => {
                let drawing = render::tree_result(v);
                drawing
                    .lines()
                    .map(|l| {
                        if l.contains(&sid) {
                            format!("{l}  ◀ this session")
                        } else {
                            l.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            "diff" => render::diff_result(v),
            "revert" => render::revert_result(v),
            "compact" => {
                let r = v.get("range").cloned().unwrap_or(Value::Null);
                format!(
                    "compacted seq {}..{} into a checkpoint",
                    r.get("from_seq").map(Value::to_string).unwrap_or_default(),
                    r.get("to_seq").map(Value::to_string).unwrap_or_default()
                )
            }
            "rename" => format!(
                "renamed: {}",
                v.get("title").and_then(Value::as_str).unwrap_or("")
            ),
            "export" => format!(
                "exported {} bytes to {}",
                v.get("bytes").map(Value::to_string).unwrap_or_default(),
                v.get("output_path").and_then(Value::as_str).unwrap_or("")
            ),
            "models" => {
                let mut out = format!(
                    "model of the next turns: {}\n",
                    self.settings
                        .model
                        .as_deref()
                        .or(self.view.model.as_deref())
                        .unwrap_or("the session's default")
                );
                for m in v
                    .get("models")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let _ = writeln!(
                        out,
                        "  {}:{}",
                        m.get("provider").and_then(Value::as_str).unwrap_or(""),
                        m.get("model").and_then(Value::as_str).unwrap_or("")
                    );
                }
                out.push_str("/model provider:model picks one");
                out
            }
            "mcp_servers" => {
                let mut out = String::from("MCP servers:");
                let config = v.get("config").and_then(Value::as_array);
                for c in config.into_iter().flatten() {
                    let name = c.get("name").and_then(Value::as_str).unwrap_or("");
                    let state = v
                        .get("sessions")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .flat_map(|s| {
                            s.get("servers")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                        })
                        .find(|s| s.get("name").and_then(Value::as_str) == Some(name))
                        .and_then(|s| s.get("state").and_then(Value::as_str))
                        .unwrap_or("not started");
                    let enabled = c.get("enabled").and_then(Value::as_bool) != Some(false);
                    let _ = write!(
                        out,
                        "\n  {name}  {state}{}",
                        if enabled { "" } else { " (disabled)" }
                    );
                }
                if config.is_none_or(|c| c.is_empty()) {
                    out.push_str(" none configured ([mcp_servers.NAME] in config.toml)");
                }
                out
            }
            "mcp" => {
                let tools = v.get("tools").and_then(Value::as_array);
                match tools {
                    Some(t) if !t.is_empty() => {
                        let mut out = String::from("MCP tools:\n");
                        for tool in t {
                            let _ = writeln!(
                                out,
                                "  {}  {}",
                                tool.get("name").and_then(Value::as_str).unwrap_or(""),
                                one_line(
                                    tool.get("description")
                                        .and_then(Value::as_str)
                                        .unwrap_or(""),
                                    60
                                )
                            );
                        }
                        out
                    }
                    _ => "no MCP servers or tools for this session ([mcp_servers] in config.toml)"
                        .into(),
                }
            }
            "goal" => render::goal(v).trim_end().to_string(),
            "usage" => {
                let t = v.get("total").cloned().unwrap_or(Value::Null);
                let n = |k: &str| t.get(k).map(Value::to_string).unwrap_or("0".into());
                let mut out = format!(
                    "usage: {} calls, {} input tokens ({} cached), {} output tokens",
                    n("calls"),
                    n("input_tokens"),
                    n("cached_tokens"),
                    n("output_tokens")
                );
                if let Some(c) = t.get("cost").filter(|c| !c.is_null()) {
                    let _ = write!(out, ", cost {c}");
                }
                out
            }
            _ => one_line(&v.to_string(), 400),
        }
    }
}

/// `agentd/goal_set` params of `/goal [--max-turns N] [--budget TOKENS] OBJECTIVE`; the
/// goal's turns use the model the chat picked (`/model`), if any.
fn goal_params(sid: &str, arg: &str, model: Option<&str>) -> Result<rpc::GoalSetParams, String> {
    const USAGE: &str =
        "usage: /goal [--max-turns N] [--budget TOKENS] OBJECTIVE | /goal | /goal clear";
    let mut p = rpc::GoalSetParams {
        session_id: sid.to_string(),
        model: model.map(str::to_string),
        ..Default::default()
    };
    let mut rest = arg.trim();
    loop {
        let (key, turns) = if let Some(r) = rest.strip_prefix("--max-turns") {
            (r, true)
        } else if let Some(r) = rest.strip_prefix("--budget") {
            (r, false)
        } else {
            break;
        };
        let key = key.trim_start();
        let (num, after) = key.split_once(' ').unwrap_or((key, ""));
        if turns {
            p.max_turns = Some(num.parse().map_err(|_| USAGE.to_string())?);
        } else {
            p.token_budget = Some(num.parse().map_err(|_| USAGE.to_string())?);
        }
        rest = after.trim_start();
    }
    if rest.is_empty() {
        return Err(USAGE.into());
    }
    p.objective = rest.to_string();
    Ok(p)
}

/// The effect of a daemon call of `tag` with `params`, one of `agentd_proto::rpc`'s
/// param types (the ones the daemon parses them with).
fn call<P: Serialize>(tag: Tag, m: &'static str, params: &P) -> Effect {
    match to_params(params) {
        Ok(p) => Effect::Call(tag, m, p),
        Err(e) => Effect::Fail(tag, e),
    }
}

/// `agentd/show`'s and the goal getters' params: the session alone.
fn session(sid: &str) -> rpc::SessionParams {
    rpc::SessionParams {
        session_id: sid.to_string(),
    }
}

fn earlier_notice(after: u64) -> String {
    format!(
        "{} earlier events (PgUp at the top draws them; agentctl log shows them all)",
        after + 1
    )
}

pub fn help_text() -> String {
    let mut out = String::from(
        "Keys: Enter sends · Shift+Enter, Alt+Enter or Ctrl-J: new line · Up/Down: history\n\
         While a turn runs: Enter steers it (the text joins the running turn), Alt+Enter\n\
         queues it as the next turn, Esc interrupts. Ctrl-C interrupts, clears the input,\n\
         or quits when pressed twice on an idle screen. Ctrl-D quits.\n\
         PgUp/PgDn scroll · Ctrl-End back to the bottom · Ctrl-R shows reasoning · Ctrl-O\n\
         unfolds tool results · Tab completes commands.\n\
         Permission requests: y allows once, a allows for the session, n denies (type a\n\
         reason, Enter).\nCommands:\n",
    );
    for (c, h) in COMMANDS {
        let _ = writeln!(out, "  {c:<10} {h}");
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests;

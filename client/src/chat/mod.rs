//! `agentctl chat`: a full-screen terminal client of the daemon, attached live to one
//! session. Everything goes through the socket API; the chat keeps no state the daemon
//! does not have (its transcript is the session's events folded by `crate::view`).
//!
//! Module map: `app` (the state and what keys, events and replies do to it; it returns
//! the calls it wants as effects), `ui` (the frame drawn from the state, pure),
//! `markdown` (answers' Markdown and code highlighting), `input` (the input box's editor
//! and the key map). This file is the loop: the terminal (raw mode, alternate screen,
//! restored on every exit, panic and SIGTERM/SIGHUP), the connection (calls, server
//! requests, reconnect with backoff) and drawing after each change.

pub mod app;
pub mod attach;
pub mod input;
pub mod markdown;
pub mod ui;

use crate::cli::ChatArgs;
use crate::daemon::{self, Target};
use crate::output;
use crate::rpc::{connection_lost, Conn, Incoming};
use agentd_proto::rpc::EVENT_NOTIFICATION;
use agentd_proto::AgentError;
use app::{App, Effect, Tag, TurnSettings};
use crossterm::event::{
    DisableBracketedPaste, EnableBracketedPaste, Event, EventStream, KeyboardEnhancementFlags,
    PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use futures::StreamExt;
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

/// Undoes raw mode, the alternate screen, bracketed paste and the keyboard protocol.
/// Safe to call more than once.
fn restore_terminal() {
    let mut out = std::io::stdout();
    let _ = crossterm::execute!(
        out,
        PopKeyboardEnhancementFlags,
        DisableBracketedPaste,
        LeaveAlternateScreen,
        crossterm::cursor::Show
    );
    let _ = disable_raw_mode();
    let _ = out.flush();
}

/// Holds the terminal in chat mode; dropping it (or a panic) restores it.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> std::io::Result<TerminalGuard> {
        let previous = std::panic::take_hook();
        // A panic anywhere (the loop or a task) restores the terminal, prints the message
        // on the normal screen and ends the chat: a chat that lost a task must not go on.
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
            eprintln!("agentctl chat: internal error; the session is safe in the daemon");
            std::process::exit(101);
        }));
        enable_raw_mode()?;
        let mut out = std::io::stdout();
        // Terminals without the keyboard protocol ignore the push; those with it report
        // Shift+Enter apart from Enter.
        crossterm::execute!(
            out,
            EnterAlternateScreen,
            EnableBracketedPaste,
            PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES)
        )?;
        Ok(TerminalGuard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Debug builds only: `AGENTCTL_CHAT_FAULT=panic` panics on the first key, so the
/// tests can check that a panic restores the terminal (docs/chat.md#faults).
#[cfg(debug_assertions)]
fn fault_on_key() {
    if std::env::var("AGENTCTL_CHAT_FAULT").as_deref() == Ok("panic") {
        panic!("AGENTCTL_CHAT_FAULT=panic: a panic on a key, as asked");
    }
}

#[cfg(not(debug_assertions))]
fn fault_on_key() {}

/// What reaches the loop besides keys and daemon messages.
enum Msg {
    Reply(Tag, Result<Value, AgentError>),
    Connected(Conn),
}

/// Reconnects with backoff (0.1 s doubling to 2 s) until a daemon answers; never starts
/// one (a daemon restarting under its service manager must not race a second one).
fn spawn_reconnect(target: Target, tx: mpsc::UnboundedSender<Msg>) {
    tokio::spawn(async move {
        let mut wait = Duration::from_millis(100);
        loop {
            tokio::time::sleep(wait).await;
            if let Ok(c) = daemon::connect_existing(&target).await {
                let _ = tx.send(Msg::Connected(c.conn));
                return;
            }
            if tx.is_closed() {
                return;
            }
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    });
}

async fn next_incoming(rx: &mut Option<mpsc::UnboundedReceiver<Incoming>>) -> Option<Incoming> {
    match rx {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Runs `agentctl chat`; returns the exit code.
pub async fn run(target: Target, args: &ChatArgs) -> i32 {
    if let Some(s) = &args.session_id {
        if let Err(e) = crate::params::check_sid(s) {
            return output::fail(false, &e);
        }
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return output::fail(
            false,
            &AgentError::invalid_args(
                "agentctl chat needs a terminal (for one prompt from a script: agentctl turn)",
            ),
        );
    }
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => {
            return output::fail(
                false,
                &AgentError::invalid_args(format!("cannot read the current directory: {e}")),
            )
        }
    };
    // The daemon first: unavailable is the same error and exit code as every command.
    let connected = match daemon::connect_or_start(&target).await {
        Ok(c) => c,
        Err(e) => return output::fail(false, &e),
    };
    let settings = TurnSettings {
        model: args.model.clone(),
        permission_mode: args.permission_mode.map(|m| m.as_str().to_string()),
        effort: args.effort.map(|e| e.as_str().to_string()),
        sandbox: args.sandbox.to_param(),
    };
    let mut app = App::new(cwd, settings);
    let first = if args.new {
        app.create()
    } else if let Some(sid) = &args.session_id {
        app.attach(sid)
    } else {
        app.open_picker(false)
    };
    let guard = match TerminalGuard::enter() {
        Ok(g) => g,
        Err(e) => {
            restore_terminal();
            return output::fail(
                false,
                &AgentError::internal(format!("cannot set up the terminal: {e}")),
            );
        }
    };
    let code = match Terminal::new(CrosstermBackend::new(std::io::stdout())) {
        Ok(mut term) => event_loop(&mut term, &mut app, target, connected.conn, first).await,
        Err(e) => {
            drop(guard);
            return output::fail(
                false,
                &AgentError::internal(format!("cannot set up the terminal: {e}")),
            );
        }
    };
    drop(guard);
    if let Some(sid) = &app.session_id {
        output::stderr(&format!(
            "session {sid} (agentctl chat {sid} comes back to it)\n"
        ));
    }
    code
}

type Term = Terminal<CrosstermBackend<std::io::Stdout>>;

async fn event_loop(
    term: &mut Term,
    app: &mut App,
    target: Target,
    conn: Conn,
    first: Vec<Effect>,
) -> i32 {
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut incoming = conn.take_incoming();
    let mut conn: Option<Arc<Conn>> = Some(Arc::new(conn));
    let mut keys = EventStream::new();
    let (Ok(mut sigterm), Ok(mut sighup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return output::fail(
            false,
            &AgentError::internal("cannot install signal handlers"),
        );
    };
    let mut pending = first;
    loop {
        // Carry out what the app asked for; a reply comes back as a message.
        while !pending.is_empty() {
            let mut next = Vec::new();
            for fx in pending.drain(..) {
                match fx {
                    Effect::Quit => return 0,
                    Effect::Fail(tag, e) => next.extend(app.on_reply(tag, Err(e))),
                    Effect::Call(tag, method, params) => match &conn {
                        Some(c) => {
                            let c = c.clone();
                            let tx = tx.clone();
                            tokio::spawn(async move {
                                let r = c.call(method, params).await;
                                let _ = tx.send(Msg::Reply(tag, r));
                            });
                        }
                        None => {
                            next.extend(app.on_reply(tag, Err(connection_lost("reconnecting"))))
                        }
                    },
                    Effect::Respond(id, result) => {
                        if let Some(c) = &conn {
                            let c = c.clone();
                            tokio::spawn(async move {
                                let _ = c.respond(id, result).await;
                            });
                        }
                    }
                    Effect::RespondError(id, message) => {
                        if let Some(c) = &conn {
                            let c = c.clone();
                            tokio::spawn(async move {
                                let _ = c.respond_error(id, -32601, message).await;
                            });
                        }
                    }
                }
            }
            pending = next;
        }
        if term.draw(|f| ui::draw(app, f)).is_err() {
            return 1;
        }
        tokio::select! {
            key = keys.next() => match key {
                Some(Ok(Event::Key(k))) => {
                    fault_on_key();
                    pending = app.on_key(k);
                    if k.code == crossterm::event::KeyCode::PageUp && app.history_after.is_some() {
                        // At the top of what is drawn: the page before it.
                        let size = term.size().unwrap_or_default();
                        let shown = size.height.saturating_sub(4) as usize;
                        if app.scroll as usize + shown >= ui::total_rows(app, size.width) {
                            pending.extend(app.load_older());
                        }
                    }
                }
                Some(Ok(Event::Paste(s))) => app.on_paste(&s),
                Some(Ok(_)) => {} // resize: the next draw fits the new size
                Some(Err(_)) | None => return 0,
            },
            msg = next_incoming(&mut incoming) => match msg {
                Some(Incoming::Notification { method, params }) => {
                    if method == EVENT_NOTIFICATION {
                        if let Some(e) = params.get("result") {
                            pending = app.on_event(e);
                        }
                    }
                }
                Some(Incoming::Request { id, method, params }) => {
                    pending = app.on_request(id, &method, &params);
                }
                None => {
                    incoming = None;
                    conn = None;
                    app.on_disconnected();
                    spawn_reconnect(target.clone(), tx.clone());
                }
            },
            msg = rx.recv() => match msg {
                Some(Msg::Reply(tag, r)) => pending = app.on_reply(tag, r),
                Some(Msg::Connected(c)) => {
                    incoming = c.take_incoming();
                    conn = Some(Arc::new(c));
                    pending = app.on_connected();
                }
                None => {}
            },
            _ = sigterm.recv() => return 143,
            _ = sighup.recv() => return 129,
        }
    }
}

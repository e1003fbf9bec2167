//! Command line arguments → JSON-RPC method and params (docs/protocol.md#methods).
//!
//! Params are built as `agentd-proto`'s types, the same ones the daemon parses them
//! with, and carry only what the user said (the types leave out absent options and
//! `false` flags; the daemon owns the defaults). Pure apart from resolving relative
//! paths against a given `cwd`, so every mapping is unit-tested. Session ids are checked
//! here with the same rule the daemon applies, so a bad id fails before any connection
//! is made, with the same error kind.

use crate::cli::{Command, DialectArg, ForkFilesArg, LsArgs, NewArgs, TurnOptions};
use agentd_proto::replay::Dialect;
use agentd_proto::rpc::{self, method};
use agentd_proto::{session_id, AgentError, EventDraft};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

pub use crate::rpc::to_params;

/// One call to make.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: &'static str,
    pub params: Value,
}

impl Request {
    /// `method` with `params` (one of `agentd_proto::rpc`'s param types).
    pub fn new<P: Serialize>(method: &'static str, params: &P) -> Result<Request, AgentError> {
        Ok(Request {
            method,
            params: to_params(params)?,
        })
    }
}

/// An absolute form of `dir` (default `cwd`), canonical when it exists so the daemon and
/// the user see the same path the tools will be confined to.
pub fn abs_dir(dir: Option<&Path>, cwd: &Path) -> String {
    let joined = match dir {
        Some(d) if d.is_absolute() => d.to_path_buf(),
        Some(d) => cwd.join(d),
        None => cwd.to_path_buf(),
    };
    std::fs::canonicalize(&joined)
        .unwrap_or(joined)
        .to_string_lossy()
        .into_owned()
}

/// Checks a session id with the daemon's own rule.
pub fn check_sid(id: &str) -> Result<(), AgentError> {
    session_id::validate(id)
}

/// `id`, checked, as an owned param.
pub fn sid(id: &str) -> Result<String, AgentError> {
    check_sid(id)?;
    Ok(id.to_string())
}

/// `agentd/show`, `agentd/checkpoint`, the goal getters and the session verbs: the
/// session's id alone.
pub fn session(id: &str) -> Result<rpc::SessionParams, AgentError> {
    Ok(rpc::SessionParams {
        session_id: sid(id)?,
    })
}

pub fn create_params(a: &NewArgs, cwd: &Path) -> Result<rpc::CreateParams, AgentError> {
    if let Some(id) = &a.session_id {
        check_sid(id)?;
    }
    Ok(rpc::CreateParams {
        workspace: abs_dir(a.workspace.as_deref(), cwd),
        title: a.title.clone(),
        model: a.model.clone(),
        provider: a.provider.clone(),
        session_id: a.session_id.clone(),
        sandbox: a.sandbox.to_param(),
        mcp_servers: None,
    })
}

pub fn turn_params(
    sid: &str,
    prompt: &str,
    t: &TurnOptions,
) -> Result<rpc::TurnParams, AgentError> {
    check_sid(sid)?;
    Ok(rpc::TurnParams {
        session_id: sid.to_string(),
        input: prompt.to_string(),
        model: t.model.clone(),
        provider: t.provider.clone(),
        max_iterations: t.max_iterations,
        permission_mode: t.permission_mode.map(|m| m.as_str().to_string()),
        reasoning_effort: t.effort.map(|e| e.as_str().to_string()),
        images: images_param(&t.images)?,
        sandbox: t.sandbox.to_param(),
        ..Default::default()
    })
}

/// `--image PATH`s as `images: [{path}]`, each made absolute (the daemon reads it).
pub fn images_param(paths: &[std::path::PathBuf]) -> Result<Vec<rpc::TurnImage>, AgentError> {
    let mut out = Vec::new();
    for p in paths {
        let abs = std::path::absolute(p)
            .map_err(|e| AgentError::invalid_args(format!("--image {}: {e}", p.display())))?;
        out.push(rpc::TurnImage {
            path: Some(abs.to_string_lossy().into_owned()),
            data: None,
            mime_type: None,
        });
    }
    Ok(out)
}

pub fn events_params(
    sid: &str,
    after_seq: Option<u64>,
    types: &[String],
) -> Result<rpc::EventsParams, AgentError> {
    check_sid(sid)?;
    Ok(rpc::EventsParams {
        session_id: sid.to_string(),
        after_seq,
        limit: None,
        types: (!types.is_empty()).then(|| types.to_vec()),
        tail: None,
    })
}

/// `agentd/list` for `ls`: its first page (`--all` follows `next_cursor`).
pub fn list_params(a: &LsArgs, cwd: &Path) -> rpc::ListParams {
    rpc::ListParams {
        workspace: a.workspace.as_deref().map(|w| abs_dir(Some(w), cwd)),
        limit: Some(a.limit),
        include_archived: a.all,
        cursor: None,
    }
}

/// A title for `run`: the prompt's first non-empty line, clipped to 60 characters.
pub fn title_from_prompt(prompt: &str) -> String {
    let first = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    crate::render::one_line(first, 60)
}

impl DialectArg {
    pub fn to_proto(self) -> Dialect {
        match self {
            DialectArg::Responses => Dialect::Responses,
            DialectArg::Chat => Dialect::Chat,
            DialectArg::Anthropic => Dialect::Anthropic,
        }
    }
}

impl ForkFilesArg {
    pub fn to_proto(self) -> rpc::ForkFiles {
        match self {
            ForkFilesArg::Keep => rpc::ForkFiles::Keep,
            ForkFilesArg::Restore => rpc::ForkFiles::Restore,
            ForkFilesArg::Worktree => rpc::ForkFiles::Worktree,
        }
    }
}

/// The single call of a one-shot command; `None` for commands that need more than one
/// call or none (daemon, status, socket-path, log, run, turn). `append --data -` must be
/// resolved by the caller first.
pub fn simple_request(cmd: &Command, cwd: &Path) -> Result<Option<Request>, AgentError> {
    let req = match cmd {
        Command::New(a) => Request::new(method::CREATE, &create_params(a, cwd)?),
        Command::Ls(a) => Request::new(method::LIST, &list_params(a, cwd)),
        Command::Show(a) => Request::new(method::SHOW, &session(&a.session_id)?),
        Command::Hooks(a) if a.cmd.is_none() => Request::new(
            method::HOOKS,
            &rpc::HooksParams {
                workspace: abs_dir(a.workspace.as_deref(), cwd),
            },
        ),
        Command::Instructions(a) => Request::new(
            method::INSTRUCTIONS,
            &match &a.session_id {
                Some(s) => rpc::InstructionsParams {
                    session_id: Some(sid(s)?),
                    workspace: None,
                },
                None => rpc::InstructionsParams {
                    session_id: None,
                    workspace: Some(abs_dir(None, cwd)),
                },
            },
        ),
        Command::Models(a) => {
            Request::new(method::MODELS, &rpc::ModelsParams { refresh: a.refresh })
        }
        Command::Checkpoint(a) => Request::new(
            method::CHECKPOINT,
            &rpc::CheckpointParams {
                session_id: sid(&a.session_id)?,
                caps: None,
            },
        ),
        Command::Append(a) => {
            let data: Value = serde_json::from_str(&a.data)
                .map_err(|e| AgentError::invalid_args(format!("--data is not valid JSON: {e}")))?;
            if !data.is_object() {
                return Err(AgentError::invalid_args("--data must be a JSON object"));
            }
            Request::new(
                method::APPEND,
                &rpc::AppendParams {
                    session_id: sid(&a.session_id)?,
                    events: vec![EventDraft {
                        kind: a.kind.clone(),
                        data,
                    }],
                    expect_seq: a.expect_seq,
                    client_request_id: None,
                },
            )
        }
        Command::Goal(a) if a.show => Request::new(method::GOAL_GET, &session(&a.session_id)?),
        Command::Goal(a) if a.clear => Request::new(method::GOAL_CLEAR, &session(&a.session_id)?),
        Command::Goal(a) => {
            let session_id = sid(&a.session_id)?;
            let Some(objective) = a.objective.clone() else {
                return Err(AgentError::invalid_args(
                    "goal needs an objective (or --show, or --clear)",
                )
                .with_details(serde_json::json!({"field": "objective"})));
            };
            Request::new(
                method::GOAL_SET,
                &rpc::GoalSetParams {
                    session_id,
                    objective,
                    max_turns: a.max_turns,
                    token_budget: a.budget,
                    model: a.model.clone(),
                },
            )
        }
        Command::Dequeue(a) => Request::new(
            method::DEQUEUE,
            &rpc::DequeueParams {
                session_id: sid(&a.session_id)?,
                turn_id: a.turn_id.clone(),
            },
        ),
        Command::Interrupt(a) => Request::new(
            method::INTERRUPT,
            &rpc::InterruptParams {
                session_id: sid(&a.session_id)?,
                reason: a.reason.clone(),
            },
        ),
        Command::Reconcile(a) => Request::new(
            method::RECONCILE,
            &rpc::ReconcileParams {
                session_id: sid(&a.session_id)?,
                dry_run: a.dry_run,
            },
        ),
        Command::Context(a) => Request::new(
            method::CONTEXT,
            &rpc::ContextParams {
                session_id: sid(&a.session_id)?,
                after_seq: a.after_seq,
                dialect: a.dialect.map(DialectArg::to_proto),
            },
        ),
        Command::Compact(a) => Request::new(
            method::COMPACT,
            &rpc::CompactParams {
                session_id: sid(&a.session_id)?,
                tail_events: a.tail_events,
                dry_run: a.dry_run,
                strategy: a.strategy.map(|s| s.as_str().to_string()),
            },
        ),
        Command::Fork(a) => {
            if let Some(c) = &a.child_session_id {
                check_sid(c)?;
            }
            Request::new(
                method::FORK,
                &rpc::ForkParams {
                    session_id: sid(&a.session_id)?,
                    to_seq: a.to_seq,
                    summarize: a.summarize,
                    dry_run: a.dry_run,
                    child_session_id: a.child_session_id.clone(),
                    title: a.title.clone(),
                    files: a.files.map(ForkFilesArg::to_proto),
                    force: a.force,
                    worktree: a.worktree.as_deref().map(|w| abs_dir(Some(w), cwd)),
                },
            )
        }
        Command::Diff(a) => Request::new(
            method::DIFF,
            &rpc::DiffParams {
                session_id: sid(&a.session_id)?,
                from_seq: a.from_seq,
                to_seq: a.to_seq,
                turn_id: a.turn.clone(),
            },
        ),
        Command::Revert(a) => Request::new(
            method::REVERT,
            &rpc::RevertParams {
                session_id: sid(&a.session_id)?,
                to_seq: a.to_seq,
                dry_run: a.dry_run,
                force: a.force,
            },
        ),
        Command::Tree(a) => Request::new(
            method::TREE,
            &match &a.session_id {
                Some(s) => rpc::TreeParams {
                    session_id: Some(sid(s)?),
                    max_depth: a.max_depth,
                    ..Default::default()
                },
                None => rpc::TreeParams {
                    workspace: Some(abs_dir(a.workspace.as_deref(), cwd)),
                    max_depth: a.max_depth,
                    ..Default::default()
                },
            },
        ),
        // Discovery makes several calls (`crate::discover`).
        Command::Import(a) if a.discover => return Ok(None),
        Command::Import(a) => Request::new(
            method::IMPORT,
            &rpc::ImportParams {
                format: a.format.as_str().to_string(),
                path: abs_dir(Some(a.file.as_deref().unwrap_or(Path::new("."))), cwd),
                source_session: a.source_session.clone(),
                workspace: a.workspace.as_deref().map(|w| abs_dir(Some(w), cwd)),
                session_id: None,
                once: false,
                strict: a.strict,
            },
        ),
        // Session verbs build their requests in `verbs` (which uses this module's checks).
        Command::Rename(_)
        | Command::Archive(_)
        | Command::Unarchive(_)
        | Command::Restore(_)
        | Command::Search(_)
        | Command::Usage(_)
        | Command::Rm(_)
        | Command::Export(_)
        | Command::Config(_) => return Ok(None),
        Command::Daemon(_)
        | Command::Status
        | Command::SocketPath
        | Command::Log(_)
        | Command::Run(_)
        | Command::Turn(_)
        | Command::Steer(_)
        | Command::Service(_)
        | Command::Completions(_)
        | Command::Doctor
        | Command::Store(_)
        | Command::Mcp(_)
        | Command::Hooks(_)
        | Command::Acp(_)
        | Command::Chat(_)
        | Command::McpServer(_)
        | Command::AppServer(_) => return Ok(None),
    };
    req.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use agentd_proto::ErrorKind;
    use clap::Parser;
    use serde_json::json;

    fn req(args: &[&str]) -> Result<Option<Request>, AgentError> {
        let cli = Cli::try_parse_from(std::iter::once("agentctl").chain(args.iter().copied()))
            .expect("parses");
        simple_request(&cli.command, Path::new("/nonexistent-cwd"))
    }

    fn ok(args: &[&str]) -> (String, Value) {
        let r = req(args).unwrap().unwrap();
        (r.method.to_string(), r.params)
    }

    #[test]
    fn maps_commands_to_methods_and_params() {
        assert_eq!(
            ok(&[
                "new",
                "--title",
                "T",
                "--workspace",
                "proj",
                "--session-id",
                "s1"
            ]),
            (
                "agentd/create".into(),
                json!({"workspace": "/nonexistent-cwd/proj", "title": "T", "session_id": "s1"})
            )
        );
        assert_eq!(ok(&["new"]).1, json!({"workspace": "/nonexistent-cwd"}));
        assert_eq!(
            ok(&["ls", "--limit", "5"]),
            ("agentd/list".into(), json!({"limit": 5}))
        );
        assert_eq!(ok(&["show", "s1"]).1, json!({"session_id": "s1"}));
        assert_eq!(
            ok(&[
                "append",
                "s1",
                "--type",
                "user_message",
                "--data",
                r#"{"text":"hi"}"#,
                "--expect-seq",
                "3"
            ]),
            (
                "agentd/append".into(),
                json!({"session_id":"s1","events":[{"type":"user_message","data":{"text":"hi"}}],"expect_seq":3})
            )
        );
        assert_eq!(
            ok(&["interrupt", "s1", "--reason", "user"]).1,
            json!({"session_id":"s1","reason":"user"})
        );
        assert_eq!(
            ok(&["reconcile", "s1", "--dry-run"]).1,
            json!({"session_id":"s1","dry_run":true})
        );
        assert_eq!(
            ok(&[
                "context",
                "s1",
                "--after-seq",
                "4",
                "--dialect",
                "anthropic"
            ])
            .1,
            json!({"session_id":"s1","after_seq":4,"dialect":"anthropic"})
        );
        assert_eq!(
            ok(&[
                "compact",
                "s1",
                "--tail-events",
                "10",
                "--dry-run",
                "--strategy",
                "model"
            ])
            .1,
            json!({"session_id":"s1","tail_events":10,"dry_run":true,"strategy":"model"})
        );
        assert_eq!(ok(&["compact", "s1"]).1, json!({"session_id":"s1"}));
        assert_eq!(
            ok(&[
                "fork",
                "s1",
                "--to-seq",
                "7",
                "--summarize",
                "--child-session-id",
                "c1",
                "--title",
                "alt"
            ])
            .1,
            json!({"session_id":"s1","to_seq":7,"summarize":true,"child_session_id":"c1","title":"alt"})
        );
        assert_eq!(
            ok(&["tree", "s1", "--max-depth", "2"]).1,
            json!({"session_id":"s1","max_depth":2})
        );
        assert_eq!(
            ok(&["tree", "--workspace", "/w"]).1,
            json!({"workspace":"/w"})
        );
        assert_eq!(
            ok(&["import", "--format", "pixir", "log.ndjson"]),
            (
                "agentd/import".into(),
                json!({"format":"pixir","path":"/nonexistent-cwd/log.ndjson"})
            )
        );
        assert_eq!(ok(&["checkpoint", "s1"]).0, "agentd/checkpoint");
        assert!(req(&["daemon", "status"]).unwrap().is_none());
    }

    /// The exact bytes of the params: only what the user gave, in a fixed key order.
    #[test]
    fn wire_bytes_carry_only_what_was_given_in_a_fixed_order() {
        let bytes = |args: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("agentctl").chain(args.iter().copied()))
                .expect("parses");
            let cwd = Path::new("/nonexistent-cwd");
            let r = simple_request(&cli.command, cwd).unwrap();
            let r = r.or_else(|| crate::verbs::request(&cli.command, cwd).unwrap());
            serde_json::to_string(&r.expect("one request").params).unwrap()
        };
        assert_eq!(
            bytes(&[
                "fork",
                "s1",
                "--to-seq",
                "7",
                "--summarize",
                "--dry-run",
                "--child-session-id",
                "c1",
                "--title",
                "alt",
                "--files",
                "keep",
                "--force",
            ]),
            r#"{"session_id":"s1","to_seq":7,"summarize":true,"dry_run":true,"child_session_id":"c1","title":"alt","files":"keep","force":true}"#
        );
        assert_eq!(bytes(&["fork", "s1"]), r#"{"session_id":"s1"}"#);
        assert_eq!(
            bytes(&[
                "search",
                "q",
                "--types",
                "user_message,tool_call",
                "--cursor",
                "c"
            ]),
            r#"{"query":"q","types":["user_message","tool_call"],"limit":20,"cursor":"c"}"#
        );
        assert_eq!(
            bytes(&["ls", "--limit", "5", "--all"]),
            r#"{"limit":5,"include_archived":true}"#
        );
        let cli = Cli::try_parse_from([
            "agentctl",
            "turn",
            "s1",
            "hi",
            "--model",
            "m",
            "--effort",
            "high",
            "--image",
            "/i.png",
            "--sandbox",
            "read_only",
        ])
        .unwrap();
        let Command::Turn(t) = cli.command else {
            panic!()
        };
        let mut p = turn_params(&t.session_id, &t.prompt, &t.turn).unwrap();
        p.queue = Some(true);
        p.wait = Some(false);
        p.client_request_id = Some("r1".into());
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"session_id":"s1","input":"hi","model":"m","reasoning_effort":"high","images":[{"path":"/i.png"}],"sandbox":{"mode":"read_only"},"queue":true,"wait":false,"client_request_id":"r1"}"#
        );
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli =
            Cli::try_parse_from(["agentctl", "show", "s1", "--json", "--socket", "/s"]).unwrap();
        assert!(cli.json);
        assert_eq!(cli.socket.as_deref(), Some(Path::new("/s")));
    }

    #[test]
    fn bad_ids_and_data_fail_before_sending() {
        for args in [
            &["show", "../etc"][..],
            &["new", "--session-id", "a/b"],
            &["fork", "s1", "--child-session-id", ".."],
            &["log", "x"], // not simple: returns None, checked elsewhere
        ] {
            match req(args) {
                Err(e) => assert_eq!(e.kind, ErrorKind::InvalidArgs, "{args:?}"),
                Ok(None) => assert_eq!(args[0], "log"),
                Ok(Some(r)) => panic!("{args:?} gave {r:?}"),
            }
        }
        let e = req(&["append", "s1", "--type", "x", "--data", "{nope"]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
        let e = req(&["append", "s1", "--type", "x", "--data", "[1]"]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
    }

    #[test]
    fn usage_errors_are_clap_errors() {
        for args in [
            &["compact", "s1", "--strategy", "magic"][..],
            &["turn", "s1"],
            &["context", "s1", "--dialect", "xml"],
            &["import"],
            &["import", "f", "--discover"],
            &["import", "--format", "word", "f"],
            &["import", "--agent", "pi"],
            &["tree", "s1", "--workspace", "/w"],
            &["frobnicate"],
        ] {
            let e = Cli::try_parse_from(std::iter::once("agentctl").chain(args.iter().copied()))
                .unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn turn_params_carry_only_given_options() {
        let cli = Cli::try_parse_from([
            "agentctl",
            "turn",
            "s1",
            "hello",
            "--permission-mode",
            "read_only",
            "--max-iterations",
            "3",
        ])
        .unwrap();
        let Command::Turn(t) = cli.command else {
            panic!()
        };
        assert_eq!(
            to_params(&turn_params(&t.session_id, &t.prompt, &t.turn).unwrap()).unwrap(),
            json!({"session_id":"s1","input":"hello","max_iterations":3,"permission_mode":"read_only"})
        );
        assert_eq!(title_from_prompt("\n  fix the bug\nplease"), "fix the bug");
        assert_eq!(
            to_params(&events_params("s1", Some(3), &["a".into(), "b".into()]).unwrap()).unwrap(),
            json!({"session_id":"s1","after_seq":3,"types":["a","b"]})
        );
    }
}

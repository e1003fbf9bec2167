//! Command line arguments → JSON-RPC method and params (docs/protocol.md#methods).
//!
//! Pure apart from resolving relative paths against a given `cwd`, so every mapping is
//! unit-tested. Session ids are checked here with the same rule the daemon applies, so a
//! bad id fails before any connection is made, with the same error kind.

use crate::cli::{Command, NewArgs, TurnOptions};
use agentd_proto::rpc::method;
use agentd_proto::{session_id, AgentError};
use serde_json::{json, Map, Value};
use std::path::Path;

/// One call to make.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: &'static str,
    pub params: Value,
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

/// An object from `(key, value)` pairs, leaving out `None`s and `false` flags so params
/// carry only what the user said (the daemon owns the defaults).
pub fn object(pairs: Vec<(&str, Option<Value>)>) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        match v {
            None | Some(Value::Bool(false)) => {}
            Some(v) => {
                m.insert(k.to_string(), v);
            }
        }
    }
    Value::Object(m)
}

fn opt<T: Into<Value>>(v: Option<T>) -> Option<Value> {
    v.map(Into::into)
}

fn flag(b: bool) -> Option<Value> {
    Some(Value::Bool(b))
}

pub fn create_params(a: &NewArgs, cwd: &Path) -> Result<Value, AgentError> {
    if let Some(id) = &a.session_id {
        check_sid(id)?;
    }
    Ok(object(vec![
        (
            "workspace",
            Some(abs_dir(a.workspace.as_deref(), cwd).into()),
        ),
        ("title", opt(a.title.clone())),
        ("model", opt(a.model.clone())),
        ("provider", opt(a.provider.clone())),
        ("session_id", opt(a.session_id.clone())),
        ("sandbox", a.sandbox.to_param()),
    ]))
}

pub fn turn_params(sid: &str, prompt: &str, t: &TurnOptions) -> Result<Value, AgentError> {
    check_sid(sid)?;
    Ok(object(vec![
        ("session_id", Some(sid.into())),
        ("input", Some(prompt.into())),
        ("model", opt(t.model.clone())),
        ("provider", opt(t.provider.clone())),
        ("max_iterations", opt(t.max_iterations)),
        (
            "permission_mode",
            opt(t.permission_mode.map(|m| m.as_str())),
        ),
        ("reasoning_effort", opt(t.effort.map(|e| e.as_str()))),
        ("images", images_param(&t.images)?),
        ("sandbox", t.sandbox.to_param()),
    ]))
}

/// `--image PATH`s as `images: [{path}]`, each made absolute (the daemon reads it).
fn images_param(paths: &[std::path::PathBuf]) -> Result<Option<Value>, AgentError> {
    if paths.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for p in paths {
        let abs = std::path::absolute(p)
            .map_err(|e| AgentError::invalid_args(format!("--image {}: {e}", p.display())))?;
        out.push(json!({"path": abs}));
    }
    Ok(Some(Value::Array(out)))
}

pub fn events_params(
    sid: &str,
    after_seq: Option<u64>,
    types: &[String],
) -> Result<Value, AgentError> {
    check_sid(sid)?;
    let types = (!types.is_empty()).then(|| json!(types));
    Ok(object(vec![
        ("session_id", Some(sid.into())),
        ("after_seq", opt(after_seq)),
        ("types", types),
    ]))
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

/// The single call of a one-shot command; `None` for commands that need more than one
/// call or none (daemon, status, socket-path, log, run, turn). `append --data -` must be
/// resolved by the caller first.
pub fn simple_request(cmd: &Command, cwd: &Path) -> Result<Option<Request>, AgentError> {
    let sid = |s: &str| -> Result<Option<Value>, AgentError> {
        check_sid(s)?;
        Ok(Some(s.into()))
    };
    let (method, params) = match cmd {
        Command::New(a) => (method::CREATE, create_params(a, cwd)?),
        Command::Ls(a) => (
            method::LIST,
            object(vec![
                (
                    "workspace",
                    a.workspace.as_deref().map(|w| abs_dir(Some(w), cwd).into()),
                ),
                ("limit", Some(a.limit.into())),
                ("include_archived", flag(a.all)),
            ]),
        ),
        Command::Show(a) => (
            method::SHOW,
            object(vec![("session_id", sid(&a.session_id)?)]),
        ),
        Command::Hooks(a) if a.cmd.is_none() => (
            method::HOOKS,
            object(vec![(
                "workspace",
                Some(abs_dir(a.workspace.as_deref(), cwd).into()),
            )]),
        ),
        Command::Instructions(a) => (
            method::INSTRUCTIONS,
            match &a.session_id {
                Some(s) => object(vec![("session_id", sid(s)?)]),
                None => object(vec![("workspace", Some(abs_dir(None, cwd).into()))]),
            },
        ),
        Command::Models(a) => (
            method::MODELS,
            object(vec![("refresh", a.refresh.then_some(true.into()))]),
        ),
        Command::Checkpoint(a) => (
            method::CHECKPOINT,
            object(vec![("session_id", sid(&a.session_id)?)]),
        ),
        Command::Append(a) => {
            let data: Value = serde_json::from_str(&a.data)
                .map_err(|e| AgentError::invalid_args(format!("--data is not valid JSON: {e}")))?;
            if !data.is_object() {
                return Err(AgentError::invalid_args("--data must be a JSON object"));
            }
            (
                method::APPEND,
                object(vec![
                    ("session_id", sid(&a.session_id)?),
                    ("events", Some(json!([{"type": a.kind, "data": data}]))),
                    ("expect_seq", opt(a.expect_seq)),
                ]),
            )
        }
        Command::Goal(a) if a.show => (
            method::GOAL_GET,
            object(vec![("session_id", sid(&a.session_id)?)]),
        ),
        Command::Goal(a) if a.clear => (
            method::GOAL_CLEAR,
            object(vec![("session_id", sid(&a.session_id)?)]),
        ),
        Command::Goal(a) => (
            method::GOAL_SET,
            object(vec![
                ("session_id", sid(&a.session_id)?),
                ("objective", opt(a.objective.clone())),
                ("max_turns", opt(a.max_turns)),
                ("token_budget", opt(a.budget)),
                ("model", opt(a.model.clone())),
            ]),
        ),
        Command::Dequeue(a) => (
            method::DEQUEUE,
            object(vec![
                ("session_id", sid(&a.session_id)?),
                ("turn_id", Some(a.turn_id.clone().into())),
            ]),
        ),
        Command::Interrupt(a) => (
            method::INTERRUPT,
            object(vec![
                ("session_id", sid(&a.session_id)?),
                ("reason", opt(a.reason.clone())),
            ]),
        ),
        Command::Reconcile(a) => (
            method::RECONCILE,
            object(vec![
                ("session_id", sid(&a.session_id)?),
                ("dry_run", flag(a.dry_run)),
            ]),
        ),
        Command::Context(a) => (
            method::CONTEXT,
            object(vec![
                ("session_id", sid(&a.session_id)?),
                ("after_seq", opt(a.after_seq)),
                ("dialect", opt(a.dialect.map(|d| d.as_str()))),
            ]),
        ),
        Command::Compact(a) => (
            method::COMPACT,
            object(vec![
                ("session_id", sid(&a.session_id)?),
                ("tail_events", opt(a.tail_events)),
                ("dry_run", flag(a.dry_run)),
                ("strategy", opt(a.strategy.map(|s| s.as_str()))),
            ]),
        ),
        Command::Fork(a) => {
            if let Some(c) = &a.child_session_id {
                check_sid(c)?;
            }
            (
                method::FORK,
                object(vec![
                    ("session_id", sid(&a.session_id)?),
                    ("to_seq", opt(a.to_seq)),
                    ("summarize", flag(a.summarize)),
                    ("dry_run", flag(a.dry_run)),
                    ("child_session_id", opt(a.child_session_id.clone())),
                    ("title", opt(a.title.clone())),
                    ("files", opt(a.files.map(|f| f.as_str()))),
                    ("force", a.force.then_some(Value::Bool(true))),
                    (
                        "worktree",
                        a.worktree.as_deref().map(|w| abs_dir(Some(w), cwd).into()),
                    ),
                ]),
            )
        }
        Command::Diff(a) => (
            method::DIFF,
            object(vec![
                ("session_id", sid(&a.session_id)?),
                ("turn_id", opt(a.turn.clone())),
                ("from_seq", opt(a.from_seq)),
                ("to_seq", opt(a.to_seq)),
            ]),
        ),
        Command::Revert(a) => (
            method::REVERT,
            object(vec![
                ("session_id", sid(&a.session_id)?),
                ("to_seq", Some(a.to_seq.into())),
                ("dry_run", flag(a.dry_run)),
                ("force", flag(a.force)),
            ]),
        ),
        Command::Tree(a) => {
            let target = match &a.session_id {
                Some(s) => ("session_id", sid(s)?),
                None => (
                    "workspace",
                    Some(abs_dir(a.workspace.as_deref(), cwd).into()),
                ),
            };
            (
                method::TREE,
                object(vec![target, ("max_depth", opt(a.max_depth))]),
            )
        }
        // Discovery makes several calls (`crate::discover`).
        Command::Import(a) if a.discover => return Ok(None),
        Command::Import(a) => (
            method::IMPORT,
            object(vec![
                ("format", Some(a.format.as_str().into())),
                (
                    "path",
                    Some(abs_dir(Some(a.file.as_deref().unwrap_or(Path::new("."))), cwd).into()),
                ),
                ("source_session", a.source_session.clone().map(Into::into)),
                (
                    "workspace",
                    a.workspace.as_deref().map(|w| abs_dir(Some(w), cwd).into()),
                ),
                ("strict", a.strict.then_some(true.into())),
            ]),
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
    Ok(Some(Request { method, params }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use agentd_proto::ErrorKind;
    use clap::Parser;

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
            turn_params(&t.session_id, &t.prompt, &t.turn).unwrap(),
            json!({"session_id":"s1","input":"hello","max_iterations":3,"permission_mode":"read_only"})
        );
        assert_eq!(title_from_prompt("\n  fix the bug\nplease"), "fix the bug");
        assert_eq!(
            events_params("s1", Some(3), &["a".into(), "b".into()]).unwrap(),
            json!({"session_id":"s1","after_seq":3,"types":["a","b"]})
        );
    }
}

//! Code the user's own git runs later: every way a command or a file tool could plant
//! something in a repository that git executes outside the sandbox, each run with and
//! without user namespaces (full and degraded). A case passes only if the user's own
//! `git status` and `git commit`, run on the host after the daemon stopped, run nothing
//! planted. Ordinary git work keeps working in a default session.

use super::{builder, is_type, output, outside, q, shell, turn_calling, Outside};
use agentd_tests::{Daemon, RpcConn};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The two levels every case runs at: full (user namespaces) and degraded.
const LEVELS: [(&str, &str); 2] = [("", "full"), ("no_userns", "degraded")];

/// A repository outside `/tmp` (a sandbox's private `/tmp` would hide `/tmp`) with one
/// commit, and the marker a planted program would create.
struct Repo {
    o: Outside,
    ws: PathBuf,
    pwned: PathBuf,
}

/// The user's git on the host, never looking for a repository above the test's own
/// directory (`home`'s parent): a workspace whose `.git` was quarantined must not lead
/// it to whatever repository holds the test directory.
fn host_git(dir: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CEILING_DIRECTORIES", home.parent().unwrap())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "host")
        .env("GIT_AUTHOR_EMAIL", "host@example.com")
        .env("GIT_COMMITTER_NAME", "host")
        .env("GIT_COMMITTER_EMAIL", "host@example.com")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("git is needed by the sandbox tests (.ci/sandbox.sh installs it)")
}

#[track_caller]
fn ok_git(dir: &Path, home: &Path, args: &[&str]) -> String {
    let out = host_git(dir, home, args);
    assert!(out.status.success(), "git {args:?} in {dir:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo(init: bool) -> Repo {
    let o = outside();
    let ws = o.root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    if init {
        ok_git(&ws, &o.home, &["init", "-q", "-b", "main"]);
        std::fs::write(ws.join("a.txt"), "a\n").unwrap();
        ok_git(&ws, &o.home, &["add", "a.txt"]);
        ok_git(&ws, &o.home, &["commit", "-qm", "init"]);
    }
    let pwned = o.root.join("out/pwned");
    Repo { o, ws, pwned }
}

impl Repo {
    fn daemon(&self, force: &str) -> Daemon {
        let mut b = builder(&self.o);
        if !force.is_empty() {
            b = b.env("AGENTD_SANDBOX_FORCE", force);
        }
        b.start()
    }

    fn session(&self, c: &mut RpcConn, ws: &Path) -> String {
        c.call_ok("agentd/create", json!({"workspace": ws}))["session_id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A script that leaves the marker: what a planted hook or config would run.
    fn payload(&self) -> String {
        format!("#!/bin/sh\ntouch \"{}\"\n", self.pwned.display())
    }

    /// The user's own git after the daemon stopped: nothing planted may run.
    #[track_caller]
    fn user_git_runs_nothing(&self, dir: &Path, level: &str) {
        for args in [
            &["status"][..],
            &["commit", "-q", "--allow-empty", "-m", "user"][..],
            &[
                "checkout",
                "-q",
                "-b",
                &format!("u{}", rand::random::<u32>()),
            ][..],
        ] {
            host_git(dir, &self.o.home, args);
        }
        assert!(
            !self.pwned.exists(),
            "{level}: the user's git in {dir:?} ran planted code"
        );
    }
}

fn quarantined(r: &Value) -> Vec<String> {
    r["sandbox"]["denials"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["kind"] == "quarantined")
        .map(|d| d["path"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Runs `setup` on the host, one session in `ws`, each command as one turn, stops the
/// daemon, then the user's git in `check`. Returns each turn's tool result.
fn attack(
    setup: impl Fn(&Repo),
    init: bool,
    cmds: &[&str],
    check: &dyn Fn(&Repo) -> PathBuf,
) -> Vec<(String, Vec<Value>)> {
    let mut all = Vec::new();
    for (force, level) in LEVELS {
        let r = repo(init);
        setup(&r);
        let mut d = r.daemon(force);
        let mut c = d.connect();
        let sid = r.session(&mut c, &r.ws);
        let mut results = Vec::new();
        for cmd in cmds {
            let cmd = cmd
                .replace("PAYLOAD", &q(Path::new(&r.payload())))
                .replace("PWNED", &q(&r.pwned));
            let res = shell(&d, &mut c, &sid, &cmd, json!({}));
            assert_eq!(res["sandbox"]["level"], level, "{res:#}");
            results.push(res);
        }
        drop(c);
        d.shutdown(std::time::Duration::from_secs(20));
        drop(d);
        r.user_git_runs_nothing(&check(&r), level);
        all.push((level.to_string(), results));
    }
    all
}

fn ws_of(r: &Repo) -> PathBuf {
    r.ws.clone()
}

#[test]
fn a_redirected_commondir_is_quarantined() {
    // A bare repository in the workspace with a hostile config, and `.git/commondir`
    // pointing at it: git would read that config.
    let runs = attack(
        |_| {},
        true,
        &["git init -q --bare evil && git --git-dir=evil config core.fsmonitor \"$PWD/evil/fsm\" \
           && printf %s PAYLOAD > evil/fsm && chmod +x evil/fsm \
           && echo ../evil > .git/commondir && echo PLANTED"],
        &ws_of,
    );
    for (level, rs) in runs {
        let q = quarantined(&rs[0]);
        assert!(
            q.iter().any(|p| p.ends_with(".git/commondir")),
            "{level}: {:#}",
            rs[0]
        );
        assert!(
            output(&rs[0]).contains("quarantined by the sandbox"),
            "{level}: {:#}",
            rs[0]
        );
    }
}

#[test]
fn an_included_config_file_is_protected_even_before_it_exists() {
    let runs = attack(
        |r| {
            ok_git(
                &r.ws,
                &r.o.home,
                &["config", "include.path", "../shared.gitconfig"],
            );
            ok_git(
                &r.ws,
                &r.o.home,
                &["config", "includeIf.gitdir:/.path", "../later.gitconfig"],
            );
            std::fs::write(r.ws.join("shared.gitconfig"), "[user]\n\tname = u\n").unwrap();
        },
        true,
        &[
            "printf %s PAYLOAD > fsm; chmod +x fsm
             printf '[core]\\n\\tfsmonitor = %s/fsm\\n' \"$PWD\" >> shared.gitconfig 2>/dev/null && echo BAD-SHARED
             printf '[core]\\n\\tfsmonitor = %s/fsm\\n' \"$PWD\" > later.gitconfig; true",
        ],
        &ws_of,
    );
    for (level, rs) in runs {
        let text = output(&rs[0]);
        if level == "full" {
            assert!(!text.contains("BAD-SHARED"), "{level}: {:#}", rs[0]);
        }
        assert!(
            quarantined(&rs[0])
                .iter()
                .any(|p| p.ends_with("later.gitconfig")),
            "{level}: {:#}",
            rs[0]
        );
    }
}

#[test]
fn a_hooks_path_is_found_as_git_finds_it_even_before_it_exists() {
    // Set after a comment line, in mixed case, and in the user's global config.
    let runs = attack(
        |r| {
            let cfg = r.ws.join(".git/config");
            let mut text = std::fs::read_to_string(&cfg).unwrap();
            text.push_str("[CORE]\n\t# the team's hooks\n\tHooksPath = \"team hooks\"\n");
            std::fs::write(&cfg, text).unwrap();
            std::fs::create_dir(r.ws.join("team hooks")).unwrap();
            std::fs::write(
                r.o.home.join(".gitconfig"),
                "; mine\n[core]\n\t# later\n\thooksPath = .myhooks\n",
            )
            .unwrap();
        },
        true,
        &[
            "printf %s PAYLOAD > 'team hooks/post-commit' 2>/dev/null && echo BAD-TEAM
             chmod +x 'team hooks/post-commit' 2>/dev/null
             mkdir -p .myhooks && printf %s PAYLOAD > .myhooks/post-checkout && chmod +x .myhooks/post-checkout
             git status >/dev/null; echo DONE",
        ],
        &ws_of,
    );
    for (level, rs) in runs {
        let text = output(&rs[0]);
        assert!(text.contains("DONE"), "{level}: {:#}", rs[0]);
        if level == "full" {
            assert!(!text.contains("BAD-TEAM"), "{level}: {:#}", rs[0]);
        }
        assert!(
            quarantined(&rs[0]).iter().any(|p| p.ends_with(".myhooks")),
            "{level}: {:#}",
            rs[0]
        );
    }
}

#[test]
fn a_linked_worktrees_commondir_and_gitdir_are_protected() {
    let runs = attack(
        |r| {
            let wt = r.o.root.join("linked");
            ok_git(
                &r.ws,
                &r.o.home,
                &["worktree", "add", "-q", wt.to_str().unwrap(), "-b", "lw"],
            );
        },
        true,
        &["git init -q --bare evil && git --git-dir=evil config core.fsmonitor \"$PWD/evil/fsm\" \
           && printf %s PAYLOAD > evil/fsm && chmod +x evil/fsm
           echo \"$PWD/evil\" > .git/worktrees/linked/commondir 2>/dev/null && echo BAD-COMMONDIR
           true"],
        &|r| r.o.root.join("linked"),
    );
    for (level, rs) in runs {
        if level == "full" {
            assert!(
                !output(&rs[0]).contains("BAD-COMMONDIR"),
                "{level}: {:#}",
                rs[0]
            );
        }
    }
}

#[test]
fn a_nested_repository_from_an_earlier_turn_has_its_hooks_protected() {
    let runs = attack(
        |_| {},
        true,
        &[
            "git init -q vendor/lib && echo INIT",
            "printf %s PAYLOAD > vendor/lib/.git/hooks/post-commit 2>/dev/null && echo BAD-HOOK
             chmod +x vendor/lib/.git/hooks/post-commit 2>/dev/null; true",
        ],
        &|r| r.ws.join("vendor/lib"),
    );
    for (level, rs) in runs {
        assert!(output(&rs[0]).contains("INIT"), "{level}: {:#}", rs[0]);
        // A plain `git init` runs nothing: it is kept.
        assert!(quarantined(&rs[0]).is_empty(), "{level}: {:#}", rs[0]);
        if level == "full" {
            assert!(!output(&rs[1]).contains("BAD-HOOK"), "{level}: {:#}", rs[1]);
        }
    }
}

/// Degraded, `.git/hooks` is writable during the command and put back after it: a
/// directory nested deeper than the restore removes, planted next to the hooks (names
/// before and after theirs), must not make it leave them.
#[test]
fn a_hook_planted_next_to_a_directory_too_deep_to_remove_never_runs() {
    let deep = "d/".repeat(80);
    let plant = format!(
        "mkdir -p .git/hooks/aaa/{deep} .git/hooks/zzz/{deep} 2>/dev/null
         for h in pre-commit post-commit post-checkout; do
           printf %s PAYLOAD > .git/hooks/$h 2>/dev/null && chmod +x .git/hooks/$h && echo PLANTED-$h
         done; true"
    );
    let runs = attack(|_| {}, true, &[&plant], &ws_of);
    for (level, rs) in runs {
        if level == "degraded" {
            // The attack ran for real: the hooks were written during the command.
            assert!(
                output(&rs[0]).contains("PLANTED-pre-commit"),
                "{level}: {:#}",
                rs[0]
            );
        }
    }
}

#[test]
fn dot_git_cannot_be_renamed_replaced_or_swapped_for_a_symlink() {
    let runs = attack(
        |_| {},
        true,
        &[
            "mv .git .git-old 2>/dev/null && echo MOVED; git init -q . 2>/dev/null; \
             git config core.fsmonitor \"$PWD/fsm\" 2>/dev/null; printf %s PAYLOAD > fsm; chmod +x fsm; true",
            "mv .git .git-real 2>/dev/null && ln -s .git-real .git && echo SWAPPED; true",
            "printf %s PAYLOAD > .git/hooks/post-commit 2>/dev/null; chmod +x .git/hooks/post-commit 2>/dev/null; true",
        ],
        &ws_of,
    );
    for (level, rs) in runs {
        let moved = output(&rs[0]).contains("MOVED");
        if level == "full" {
            // A `.git` is a mount point in the sandbox: it cannot be moved.
            assert!(!moved, "{level}: {:#}", rs[0]);
            assert!(!output(&rs[1]).contains("SWAPPED"), "{level}: {:#}", rs[1]);
        } else {
            // Without mounts it can: the new one is quarantined after the command.
            assert!(moved, "{level}: {:#}", rs[0]);
            assert!(
                quarantined(&rs[0]).iter().any(|p| p.ends_with(".git")),
                "{level}: {:#}",
                rs[0]
            );
        }
    }
}

#[test]
fn a_new_repository_with_code_running_config_is_quarantined_unless_granted() {
    let runs = attack(
        |_| {},
        false,
        &[
            "git init -q && git config core.fsmonitor \"$PWD/fsm\" && printf %s PAYLOAD > fsm \
           && chmod +x fsm && echo PLANTED",
        ],
        &ws_of,
    );
    for (level, rs) in runs {
        assert!(output(&rs[0]).contains("PLANTED"), "{level}: {:#}", rs[0]);
        let qd = quarantined(&rs[0]);
        assert!(
            qd.iter().any(|p| p.ends_with("ws/.git")),
            "{level}: {:#}",
            rs[0]
        );
        let hint = rs[0]["sandbox"]["denials"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["kind"] == "quarantined")
            .unwrap()["hint"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            hint.contains("core.fsmonitor") && hint.contains("git:init"),
            "{hint}"
        );
    }
}

#[test]
fn the_file_tools_write_nothing_git_runs() {
    for (force, level) in LEVELS {
        let r = repo(true);
        ok_git(&r.ws, &r.o.home, &["init", "-q", "vendor/lib"]);
        std::os::unix::fs::symlink(".git/hooks", r.ws.join("h")).unwrap();
        let d = r.daemon(force);
        let mut c = d.connect();
        let sid = r.session(&mut c, &r.ws);
        let hook = "#!/bin/sh\ntouch /nonexistent\n";
        for path in [
            ".git/commondir",
            "h/post-commit",
            "vendor/lib/.git/hooks/post-commit",
            "sub/.git",
            ".git",
        ] {
            let (_, evs) = turn_calling(
                &d,
                &mut c,
                &sid,
                &[("write_file", json!({"path": path, "content": hook}))],
                json!({}),
            );
            let res = evs
                .iter()
                .rev()
                .find(|e| is_type(e, "tool_result"))
                .unwrap();
            assert_eq!(
                res["data"]["error"]["kind"], "permission_denied",
                "{level} {path}: {res:#}"
            );
        }
        assert!(!r.ws.join(".git/commondir").exists());
        assert!(!r.ws.join(".git/hooks/post-commit").exists());
        assert!(!r.ws.join("vendor/lib/.git/hooks/post-commit").exists());
        assert!(!r.ws.join("sub/.git").exists());
    }
}

#[test]
fn ordinary_git_work_keeps_working_and_git_config_says_why_it_cannot() {
    for (force, level) in LEVELS {
        let r = repo(true);
        let d = r.daemon(force);
        let mut c = d.connect();
        let sid = r.session(&mut c, &r.ws);
        let res = shell(
            &d,
            &mut c,
            &sid,
            "export GIT_AUTHOR_NAME=m GIT_AUTHOR_EMAIL=m@example.com GIT_COMMITTER_NAME=m GIT_COMMITTER_EMAIL=m@example.com
             set -e
             echo b > b.txt && git add b.txt && git commit -qm two
             git branch side && git checkout -q side && echo c > c.txt && git add c.txt && git commit -qm three
             git checkout -q main && git merge -q --no-edit side
             echo d > a.txt && git stash -q && git stash pop -q && git checkout -q -- a.txt
             git gc -q && git log --oneline | wc -l
             echo WORKED
             set +e
             git config user.email m@example.com; echo config-exit=$?",
            json!({}),
        );
        let text = output(&res);
        assert!(text.contains("WORKED"), "{level}: {res:#}");
        assert!(
            ok_git(&r.ws, &r.o.home, &["log", "--format=%s"]).contains("three"),
            "{level}"
        );
        if level == "full" {
            assert!(!text.contains("config-exit=0"), "{level}: {res:#}");
            assert!(
                text.contains("git -c user.name=NAME") && text.contains("`git_config` tool"),
                "{level}: the failure names the ways around it: {res:#}"
            );
        }
        // Without mounts the write lands and is put back after the command.
        let cfg = std::fs::read_to_string(r.ws.join(".git/config")).unwrap();
        assert!(!cfg.contains("m@example.com"), "{level}: {cfg}");
        drop(d);
    }
}

/// The `git_config` tool: the daemon sets an identity key in the repository's own config
/// (outside the sandbox, recorded); a key that makes git run code is refused with the
/// way to do it instead and the config is left as it was; `read_only` refuses the tool.
#[test]
fn git_config_sets_identity_keys_and_refuses_keys_that_run_code() {
    for (force, level) in LEVELS {
        let r = repo(true);
        let before = ok_git(&r.ws, &r.o.home, &["config", "--local", "--list"]);
        let d = r.daemon(force);
        let mut c = d.connect();
        let sid = r.session(&mut c, &r.ws);
        let p = q(&r.pwned);
        let bad = [
            ("core.hooksPath", "/tmp/hooks".to_string()),
            ("core.fsmonitor", format!("touch {p}")),
            ("alias.st", format!("!touch {p}")),
            ("Include.Path", "../evil.cfg".to_string()),
        ];
        let mut calls = vec![(
            "git_config",
            json!({"key": "user.email", "value": "model@example.com"}),
        )];
        calls.extend(
            bad.iter()
                .map(|(k, v)| ("git_config", json!({"key": k, "value": v}))),
        );
        let (r1, evs) = turn_calling(&d, &mut c, &sid, &calls, json!({}));
        assert_eq!(r1["status"], "completed", "{level}: {r1}");
        let results: Vec<&Value> = evs.iter().filter(|e| is_type(e, "tool_result")).collect();
        let recorded: Vec<&Value> = evs
            .iter()
            .filter(|e| is_type(e, "tool_call") && e["data"]["name"] == "git_config")
            .collect();
        assert_eq!(recorded.len(), 1 + bad.len(), "{level}: {evs:#?}");
        assert_eq!(recorded[0]["data"]["args"]["value"], "model@example.com");
        let ok = &results[0]["data"];
        assert_eq!(ok["ok"], true, "{level}: {ok:#}");
        let out = output(ok);
        assert!(
            out.contains("user.email")
                && out.contains("was unset")
                && out.contains("now \"model@example.com\""),
            "{level}: the result says what changed: {ok:#}"
        );
        for (res, (key, _)) in results[1..].iter().zip(bad.iter()) {
            let e = &res["data"]["error"];
            assert_eq!(e["kind"], "permission_denied", "{level} {key}: {res:#}");
            assert_eq!(e["details"]["key"], *key, "{level}: {res:#}");
            let msg = e["message"].as_str().unwrap();
            assert!(
                msg.contains("git config --local KEY VALUE") && msg.contains("git -c KEY=VALUE"),
                "{level} {key}: the refusal says how instead: {msg}"
            );
        }
        let email = ok_git(
            &r.ws,
            &r.o.home,
            &["config", "--local", "--get", "user.email"],
        );
        assert_eq!(email.trim(), "model@example.com", "{level}");
        let after = ok_git(&r.ws, &r.o.home, &["config", "--local", "--list"]);
        assert_eq!(
            after,
            format!("{before}user.email=model@example.com\n"),
            "{level}: only the identity key changed"
        );

        // A later command sees it, and neither loses it (the degraded level puts
        // protected files back after a command) nor changes it for good.
        let res = shell(
            &d,
            &mut c,
            &sid,
            "git config --get user.email; git config user.email other@example.com 2>/dev/null; true",
            json!({}),
        );
        assert!(
            output(&res).starts_with("model@example.com"),
            "{level}: {res:#}"
        );
        let email = ok_git(
            &r.ws,
            &r.o.home,
            &["config", "--local", "--get", "user.email"],
        );
        assert_eq!(email.trim(), "model@example.com", "{level}");

        // `read_only` refuses it like any mutating tool, and records the decision.
        let (_, evs) = turn_calling(
            &d,
            &mut c,
            &sid,
            &[("git_config", json!({"key": "user.name", "value": "Model"}))],
            json!({"permission_mode": "read_only"}),
        );
        let res = evs
            .iter()
            .rev()
            .find(|e| is_type(e, "tool_result"))
            .unwrap();
        assert_eq!(
            res["data"]["error"]["kind"], "permission_denied",
            "{level}: {res:#}"
        );
        assert!(
            evs.iter()
                .any(|e| is_type(e, "permission_decision") && e["data"]["reason"] == "read_only"),
            "{level}"
        );
        assert!(
            host_git(
                &r.ws,
                &r.o.home,
                &["config", "--local", "--get", "user.name"]
            )
            .stdout
            .is_empty(),
            "{level}"
        );
        drop(d);
        r.user_git_runs_nothing(&r.ws, level);
    }
}

/// The files other tools run (`[sandbox] protect`): read-only or quarantined for
/// commands; refused to the file tools in `auto` mode, written when the user approves
/// the call in `ask` mode.
#[test]
fn files_other_tools_run_are_protected_and_need_an_approved_call() {
    for (force, level) in LEVELS {
        let r = repo(true);
        std::fs::write(r.ws.join(".envrc"), "export A=1\n").unwrap();
        std::fs::create_dir_all(r.ws.join(".husky")).unwrap();
        std::fs::create_dir_all(r.ws.join(".vscode")).unwrap();
        std::fs::write(r.ws.join("tools.sh"), "echo tools\n").unwrap();
        let mut b = builder(&r.o).config("[sandbox]\nprotect = [\"tools.sh\"]\n");
        if !force.is_empty() {
            b = b.env("AGENTD_SANDBOX_FORCE", force);
        }
        let mut d = b.start();
        let mut c = d.connect();
        let sid = r.session(&mut c, &r.ws);
        let p = q(&r.pwned);
        let res = shell(
            &d,
            &mut c,
            &sid,
            &format!(
                "echo 'touch {p}' >> .envrc 2>/dev/null && echo BAD-ENVRC
                 echo 'touch {p}' > .husky/pre-commit 2>/dev/null && echo BAD-HUSKY
                 echo 'touch {p}' >> tools.sh 2>/dev/null && echo BAD-TOOLS
                 echo '{{\"terminal.integrated.shell.linux\": \"/x\"}}' > .vscode/settings.json
                 echo DONE"
            ),
            json!({}),
        );
        let text = output(&res);
        assert!(text.contains("DONE"), "{level}: {res:#}");
        if level == "full" {
            for bad in ["BAD-ENVRC", "BAD-HUSKY", "BAD-TOOLS"] {
                assert!(!text.contains(bad), "{level} {bad}: {res:#}");
            }
        }
        let qd = quarantined(&res);
        assert!(
            qd.iter().any(|p| p.ends_with(".vscode/settings.json")),
            "{level}: {res:#}"
        );
        assert!(text.contains("write grant"), "{level}: {res:#}");

        // The file tools in `auto` mode: refused, with the way to do it.
        let (_, evs) = turn_calling(
            &d,
            &mut c,
            &sid,
            &[(
                "write_file",
                json!({"path": ".envrc", "content": format!("touch {p}\n")}),
            )],
            json!({}),
        );
        let tr = evs
            .iter()
            .rev()
            .find(|e| is_type(e, "tool_result"))
            .unwrap();
        assert_eq!(
            tr["data"]["error"]["kind"], "permission_denied",
            "{level}: {tr:#}"
        );
        assert!(
            tr["data"]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("`ask`"),
            "{level}: {tr:#}"
        );

        // In `ask` mode, a call the user approves writes it (and the approval is in the
        // Log).
        let mut client = d.connect();
        client.call_ok(
            "agentd/subscribe",
            json!({"session_id": sid, "permissions": true}),
        );
        let script = d.root().join(format!("a{}.json", rand::random::<u64>()));
        let body = json!({"rules": [{"steps": [
            {"tool_calls": [{"name": "write_file", "args": {"path": ".envrc", "content": "export B=2\n"}}]},
            {"text": "done"}
        ]}]});
        std::fs::write(&script, serde_json::to_vec(&body).unwrap()).unwrap();
        let params = json!({"session_id": sid, "input": "go", "permission_mode": "ask",
            "model": format!("script:{}", script.display())});
        let mut turn_conn = d.connect();
        let running = std::thread::spawn(move || turn_conn.try_call("agentd/turn", params));
        let req = client
            .wait_for(
                |m| m["method"] == "agentd/permission" && m.get("id").is_some(),
                std::time::Duration::from_secs(30),
            )
            .expect("a permission request");
        let reply = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"decision": "allow"}});
        client.send_raw(format!("{reply}\n").as_bytes()).unwrap();
        let t = running.join().unwrap().unwrap();
        assert_eq!(t["result"]["status"], "completed", "{t}");
        assert_eq!(
            std::fs::read_to_string(r.ws.join(".envrc")).unwrap(),
            "export B=2\n",
            "{level}"
        );
        drop((c, client));
        d.shutdown(std::time::Duration::from_secs(20));
        drop(d);
        // The user's tools afterwards: direnv-style sourcing, husky's hook, the script.
        for script in [".envrc", ".husky/pre-commit", "tools.sh"] {
            let _ = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("cd {} && . ./{script}", q(&r.ws)))
                .output();
        }
        assert!(!r.pwned.exists(), "{level}: a planted file ran");
        r.user_git_runs_nothing(&r.ws, level);
    }
}

/// A workspace that is `$HOME`: a warning at creation, and `auto` mode refused unless
/// the config forces it.
#[test]
fn a_workspace_that_is_home_warns_and_refuses_auto() {
    let o = outside();
    let d = builder(&o).start();
    let mut c = d.connect();
    let created = c.call_ok("agentd/create", json!({"workspace": o.home}));
    assert!(
        created["warning"]
            .as_str()
            .unwrap_or("")
            .contains("home directory"),
        "{created}"
    );
    let sid = created["session_id"].as_str().unwrap().to_string();
    let script = o.root.join("h.json");
    std::fs::write(
        &script,
        serde_json::to_vec(&json!({"rules": [{"steps": [{"text": "hi"}]}]})).unwrap(),
    )
    .unwrap();
    let model = format!("script:{}", script.display());
    let r = c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": "go", "model": model}),
    );
    assert_eq!(r["error"]["data"]["kind"], "permission_denied", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("allow_auto_in_home"),
        "{r}"
    );
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "go", "model": model, "permission_mode": "read_only"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    // A project directory gets no warning.
    let created = c.call_ok("agentd/create", json!({"workspace": d.workspace()}));
    assert!(created.get("warning").is_none(), "{created}");
    drop(c);
    drop(d);
    let d = builder(&o)
        .config("[sandbox]\nallow_auto_in_home = true\n")
        .start();
    let mut c = d.connect();
    let sid = c.call_ok("agentd/create", json!({"workspace": o.home}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "go", "model": model}),
    );
    assert_eq!(r["status"], "completed", "{r}");
}

/// The user's own `git config` on the host while a command runs renames a new
/// `.git/config` over the old one, which drops the read-only mount over it in the
/// command's mount namespace (the full level). A command that waits for that moment and
/// then writes `core.fsmonitor` into the config (and tries a hook) has its write put back
/// after it ends, recorded as a `protected` denial: the user's next git runs nothing.
/// The degraded level, which has no mounts, puts it back the same way.
#[test]
fn a_config_the_user_rewrites_mid_command_is_put_back_after_the_command() {
    use std::io::Write;
    for (force, level) in LEVELS {
        let r = repo(true);
        let fifo = r.ws.join("go.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo (coreutils) is needed");
        assert!(made.success());
        let ready = r.ws.join("ready");
        let before = std::fs::read_to_string(r.ws.join(".git/config")).unwrap();
        let d = r.daemon(force);
        let mut c = d.connect();
        let sid = r.session(&mut c, &r.ws);
        // Held open (read-write: never blocks) until the turn ended, so the line the
        // host writes waits in the pipe whenever the command opens it.
        let mut release = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap();
        let host = {
            let (ws, home, ready) = (r.ws.clone(), r.o.home.clone(), ready.clone());
            let mut release = release.try_clone().unwrap();
            std::thread::spawn(move || {
                let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
                while !ready.exists() && std::time::Instant::now() < end {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                let seen = ready.exists();
                // The user's git, outside the sandbox: `config.lock` renamed over
                // `.git/config`.
                let set = host_git(&ws, &home, &["config", "user.name", "Host User"]);
                release.write_all(b"go\n").unwrap();
                (seen, set.status.success())
            })
        };
        let cmd = format!(
            "printf %s {payload} > fsm && chmod +x fsm
             touch ready
             read line < go.fifo
             printf '[core]\\n\\tfsmonitor = %s/fsm\\n' \"$PWD\" >> .git/config 2>/dev/null && echo PLANTED-CONFIG
             printf %s {payload} > .git/hooks/pre-commit 2>/dev/null && chmod +x .git/hooks/pre-commit && echo PLANTED-HOOK
             true",
            payload = q(Path::new(&r.payload())),
        );
        let (t, evs) = turn_calling(
            &d,
            &mut c,
            &sid,
            &[("shell", json!({"command": cmd, "timeout_s": 150}))],
            json!({}),
        );
        let _ = release.write_all(b"go\n");
        let (seen, set) = host.join().unwrap();
        assert!(seen, "{level}: the command never got to wait");
        assert!(set, "{level}: the user's git config failed");
        assert_eq!(t["status"], "completed", "{level}: {t}");
        let res = evs
            .iter()
            .rev()
            .find(|e| is_type(e, "tool_result"))
            .expect("a tool_result")["data"]
            .clone();
        assert_eq!(res["sandbox"]["level"], level, "{res:#}");
        let cfg = std::fs::read_to_string(r.ws.join(".git/config")).unwrap();
        assert!(!cfg.contains("fsmonitor"), "{level}: {cfg}\n{res:#}");
        assert!(!r.ws.join(".git/hooks/pre-commit").exists(), "{level}");
        if output(&res).contains("PLANTED-CONFIG") {
            // The write landed in the command's view: it is put back, as it was when
            // the command started, and the model and the user are told.
            assert_eq!(cfg, before, "{level}");
            let protected: Vec<&Value> = res["sandbox"]["denials"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"] == "protected")
                .collect();
            assert!(
                protected
                    .iter()
                    .any(|d| d["path"].as_str().unwrap_or("").ends_with(".git/config")),
                "{level}: {res:#}"
            );
        }
        drop(c);
        let mut d = d;
        d.shutdown(std::time::Duration::from_secs(20));
        drop(d);
        r.user_git_runs_nothing(&r.ws, level);
    }
}

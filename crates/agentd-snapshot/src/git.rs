//! Running the `git` command against a shadow repository.
//!
//! Every call gets a clean environment: the shadow `GIT_DIR`, the workspace as
//! `GIT_WORK_TREE`, an explicit `GIT_INDEX_FILE`, no system or global config (a user's
//! `core.fsmonitor`, filters or hooks must not run inside the daemon), literal pathspecs
//! (a file named `*.rs` is a name, not a pattern) and the C locale (stable messages).
//! Git runs as a child process on the runtime's reactor (tokio::process), never on a
//! worker thread, and is killed when it outlives the timeout.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// Why a git command did not give its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitError {
    /// No `git` on `PATH`.
    Missing,
    /// The workspace (git's working directory) is gone or unreadable.
    Workspace(String),
    Timeout {
        command: String,
        after_s: u64,
    },
    Failed {
        command: String,
        code: Option<i32>,
        stderr: String,
    },
}

impl GitError {
    /// A shadow repository git cannot read any more (rebuilding it is the cure).
    pub fn is_corruption(&self) -> bool {
        let GitError::Failed { stderr, .. } = self else {
            return false;
        };
        const SIGNS: [&str; 10] = [
            "corrupt",
            "bad signature",
            "not a git repository",
            "bad object",
            "invalid object",
            "unable to read",
            "index file smaller",
            "unknown index entry",
            "bad index",
            "object file",
        ];
        let s = stderr.to_ascii_lowercase();
        SIGNS.iter().any(|sign| s.contains(sign))
    }

    /// The `kind` recorded in events and error details.
    pub fn kind(&self) -> &'static str {
        match self {
            GitError::Missing => "git_missing",
            GitError::Workspace(_) => "workspace_missing",
            GitError::Timeout { .. } => "timeout",
            GitError::Failed { .. } => "git_failed",
        }
    }
}

impl std::fmt::Display for GitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GitError::Missing => write!(f, "the git command was not found on PATH"),
            GitError::Workspace(m) => write!(f, "workspace unavailable: {m}"),
            GitError::Timeout { command, after_s } => {
                write!(f, "git {command} did not finish within {after_s} s")
            }
            GitError::Failed {
                command,
                code,
                stderr,
            } => {
                let code = code.map_or_else(|| "a signal".to_string(), |c| c.to_string());
                write!(f, "git {command} exited with {code}: {}", stderr.trim())
            }
        }
    }
}

/// One shadow repository seen through one work tree and one index file.
#[derive(Debug, Clone)]
pub struct Git {
    pub git_dir: PathBuf,
    pub work_tree: PathBuf,
    pub index: PathBuf,
    pub timeout: Duration,
    /// The workspace's own `.git/info/exclude`, honoured like `.gitignore`.
    pub excludes_file: Option<PathBuf>,
}

impl Git {
    /// The same repository with another index file (restores and materializations use
    /// a temporary one so the shadow index, the snapshot's stat cache, stays intact).
    pub fn with_index(&self, index: PathBuf) -> Git {
        Git {
            index,
            ..self.clone()
        }
    }

    /// The same repository checking out into another directory.
    pub fn with_work_tree(&self, work_tree: PathBuf) -> Git {
        Git {
            work_tree,
            excludes_file: None,
            ..self.clone()
        }
    }

    fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut c = Command::new("git");
        c.env_clear();
        for key in ["PATH", "HOME", "TMPDIR"] {
            if let Some(v) = std::env::var_os(key) {
                c.env(key, v);
            }
        }
        c.env("LC_ALL", "C")
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.work_tree)
            .env("GIT_INDEX_FILE", &self.index)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_LITERAL_PATHSPECS", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_OPTIONAL_LOCKS", "0");
        if let Some(x) = &self.excludes_file {
            c.arg("-c")
                .arg(format!("core.excludesFile={}", x.display()));
        }
        c.args(args)
            .current_dir(&self.work_tree)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Runs `git ARGS`, feeding `stdin`; its stdout, or why not.
    pub async fn run<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        stdin: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, GitError> {
        let (out, code, stderr) = self.run_status(args, stdin).await?;
        match code {
            Some(0) => Ok(out),
            _ => Err(self.failed(args, code, stderr)),
        }
    }

    /// Like [`run`](Self::run) but a non-zero exit is returned, not an error (`add
    /// --ignore-errors` exits 1 after adding everything it could).
    pub async fn run_status<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        stdin: Option<Vec<u8>>,
    ) -> Result<(Vec<u8>, Option<i32>, String), GitError> {
        if !self.work_tree.is_dir() {
            return Err(GitError::Workspace(format!(
                "{} is not a directory",
                self.work_tree.display()
            )));
        }
        let mut cmd = self.command(args);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound if !self.work_tree.is_dir() => {
                GitError::Workspace(e.to_string())
            }
            std::io::ErrorKind::NotFound => GitError::Missing,
            _ => GitError::Workspace(e.to_string()),
        })?;
        if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // Written from a task of its own so a large input never deadlocks against
            // git filling its stdout.
            tokio::spawn(async move {
                let _ = pipe.write_all(&bytes).await;
            });
        }
        let out = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(GitError::Workspace(e.to_string())),
            // Dropping the future drops the child, which kills it (kill_on_drop).
            Err(_) => {
                return Err(GitError::Timeout {
                    command: name(args),
                    after_s: self.timeout.as_secs(),
                })
            }
        };
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        Ok((out.stdout, out.status.code(), stderr))
    }

    pub fn failed<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        code: Option<i32>,
        stderr: String,
    ) -> GitError {
        let mut stderr = stderr;
        if stderr.len() > 2000 {
            let mut cut = 2000;
            while !stderr.is_char_boundary(cut) {
                cut -= 1;
            }
            stderr.truncate(cut);
        }
        GitError::Failed {
            command: name(args),
            code,
            stderr,
        }
    }
}

fn name<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.first()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// NUL-separated git output as paths (git prints them relative to the work tree).
pub fn split_nul(out: &[u8]) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    out.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| PathBuf::from(OsStr::from_bytes(s)))
        .collect()
}

/// Paths joined with NUL, for `--pathspec-from-file=- --pathspec-file-nul` / `--stdin -z`.
pub fn join_nul<P: AsRef<Path>>(paths: &[P]) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut v = Vec::new();
    for p in paths {
        v.extend_from_slice(p.as_ref().as_os_str().as_bytes());
        v.push(0);
    }
    v
}

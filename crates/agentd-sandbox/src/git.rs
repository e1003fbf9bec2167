//! What the user's own git runs later, found wherever it lives, so the sandbox can protect
//! it before a command and audit it after (docs/sandbox.md#git).
//!
//! - [`config::parse`]: git's config syntax (sections, subsections, case, quoting,
//!   escapes, continuations, comments), so `core.hooksPath` after a comment line or in
//!   an included file is found as git finds it.
//! - [`scan`]: every git directory under the writable roots (the workspace's, its common
//!   dir, linked worktrees' gitdirs, submodules' and nested repositories', including
//!   ones a previous command created), with the files in them that run code
//!   (`hooks`, `config` and what it includes, `info`, `commondir`, `gitdir`,
//!   `worktrees/*/commondir|gitdir`, `.gitmodules`, the hooks path from the repository's
//!   and the user's global config) and every `.git` entry by identity.
//! - [`audit`]: after a command, what it created that git would run: a new or replaced
//!   `.git` (a symlink, a pointer file, or a directory with hooks, a `commondir` or
//!   code-running config), a file that appeared where a protected one was missing, a
//!   linked worktree whose `commondir` leads elsewhere. Each is moved aside
//!   ([`quarantine`]) and reported.
//!
//! The walk for nested repositories remembers each directory's entries by its ctime
//! (which no process can set back), so a later scan stats directories and lists only
//! the ones that changed; it does not descend into `.git` directories or directories
//! tagged `CACHEDIR.TAG` (cargo's `target/`).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// git's config file syntax.
pub mod config {
    /// One `section.subsection.key = value` line. Section and key are lower-cased (git
    /// compares them case-insensitively); the subsection keeps its case, except in the
    /// legacy `[section.sub]` form.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Entry {
        pub section: String,
        pub subsection: Option<String>,
        pub key: String,
        /// `None` for a bare `key` (boolean true).
        pub value: Option<String>,
    }

    impl Entry {
        /// `section.key` or `section.subsection.key`, lower-cased but for the subsection.
        pub fn name(&self) -> String {
            match &self.subsection {
                Some(s) => format!("{}.{}.{}", self.section, s, self.key),
                None => format!("{}.{}", self.section, self.key),
            }
        }
    }

    fn skip_line(b: &[char], i: &mut usize) {
        while *i < b.len() && b[*i] != '\n' {
            *i += 1;
        }
    }

    fn value(b: &[char], i: &mut usize) -> String {
        let n = b.len();
        while *i < n && (b[*i] == ' ' || b[*i] == '\t') {
            *i += 1;
        }
        let mut v = String::new();
        let mut ws = String::new();
        let mut quoted = false;
        while *i < n {
            let c = b[*i];
            if c == '\n' {
                *i += 1;
                break;
            }
            if !quoted && (c == '#' || c == ';') {
                skip_line(b, i);
                break;
            }
            if c == '\\' {
                *i += 1;
                if *i >= n {
                    break;
                }
                let e = b[*i];
                *i += 1;
                match e {
                    '\n' => continue,
                    '\r' if b.get(*i) == Some(&'\n') => {
                        *i += 1;
                        continue;
                    }
                    _ => {}
                }
                v.push_str(&std::mem::take(&mut ws));
                v.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'b' => '\u{8}',
                    other => other,
                });
                continue;
            }
            if c == '"' {
                quoted = !quoted;
                *i += 1;
                continue;
            }
            if !quoted && (c == ' ' || c == '\t' || c == '\r') {
                ws.push(c);
                *i += 1;
                continue;
            }
            v.push_str(&std::mem::take(&mut ws));
            v.push(c);
            *i += 1;
        }
        v
    }

    /// Parses `text` leniently: a line git would reject is skipped, the rest still read
    /// (git refuses a malformed file outright, so reading more is the safe side).
    pub fn parse(text: &str) -> Vec<Entry> {
        let b: Vec<char> = text.chars().collect();
        let n = b.len();
        let mut i = 0;
        let mut section = String::new();
        let mut sub: Option<String> = None;
        let mut out = Vec::new();
        while i < n {
            let c = b[i];
            if c.is_whitespace() || c == '\u{feff}' {
                i += 1;
                continue;
            }
            if c == '#' || c == ';' {
                skip_line(&b, &mut i);
                continue;
            }
            if c == '[' {
                i += 1;
                let mut name = String::new();
                while i < n && b[i] != ']' && b[i] != '"' && b[i] != '\n' && !b[i].is_whitespace() {
                    name.push(b[i]);
                    i += 1;
                }
                while i < n && (b[i] == ' ' || b[i] == '\t') {
                    i += 1;
                }
                let mut quoted_sub = None;
                if i < n && b[i] == '"' {
                    i += 1;
                    let mut s = String::new();
                    while i < n && b[i] != '"' && b[i] != '\n' {
                        if b[i] == '\\' && i + 1 < n {
                            i += 1;
                        }
                        s.push(b[i]);
                        i += 1;
                    }
                    if i < n && b[i] == '"' {
                        i += 1;
                    }
                    quoted_sub = Some(s);
                }
                while i < n && b[i] != ']' && b[i] != '\n' {
                    i += 1;
                }
                if i < n && b[i] == ']' {
                    i += 1;
                }
                let lower = name.to_ascii_lowercase();
                match (quoted_sub, lower.split_once('.')) {
                    (Some(s), _) => {
                        section = lower;
                        sub = Some(s);
                    }
                    (None, Some((a, s))) => {
                        section = a.to_string();
                        sub = Some(s.to_string());
                    }
                    (None, None) => {
                        section = lower;
                        sub = None;
                    }
                }
                // A key may follow the header on the same line.
                continue;
            }
            if c.is_ascii_alphabetic() {
                let mut key = String::new();
                while i < n && (b[i].is_ascii_alphanumeric() || b[i] == '-') {
                    key.push(b[i].to_ascii_lowercase());
                    i += 1;
                }
                while i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r') {
                    i += 1;
                }
                let v = if i < n && b[i] == '=' {
                    i += 1;
                    Some(value(&b, &mut i))
                } else {
                    skip_line(&b, &mut i);
                    None
                };
                out.push(Entry {
                    section: section.clone(),
                    subsection: sub.clone(),
                    key,
                    value: v,
                });
                continue;
            }
            skip_line(&b, &mut i);
        }
        out
    }

    /// Whether `e` can make git run something (a program, a hook path, an include, a
    /// redirect), judged by an allowlist: anything not known harmless counts.
    pub fn runs_code(e: &Entry) -> bool {
        let (s, k) = (e.section.as_str(), e.key.as_str());
        let sub = e.subsection.is_some();
        let harmless = match s {
            "core" if !sub => matches!(
                k,
                "repositoryformatversion"
                    | "filemode"
                    | "bare"
                    | "logallrefupdates"
                    | "ignorecase"
                    | "precomposeunicode"
                    | "symlinks"
                    | "autocrlf"
                    | "eol"
                    | "safecrlf"
                    | "quotepath"
                    | "abbrev"
                    | "compression"
                    | "sharedrepository"
                    | "checkstat"
                    | "trustctime"
                    | "untrackedcache"
                    | "splitindex"
                    | "commentchar"
                    | "whitespace"
                    | "excludesfile"
                    | "attributesfile"
                    | "worktree"
            ),
            "user" | "author" | "committer" | "init" | "extensions" | "color" | "advice"
            | "i18n" | "status" | "log" | "format" | "gc" | "pack" | "index" | "feature"
            | "rerere" | "column" | "help" => true,
            "remote" => matches!(
                k,
                "url" | "pushurl" | "fetch" | "push" | "tagopt" | "prune" | "mirror"
            ),
            "branch" => matches!(
                k,
                "remote" | "merge" | "rebase" | "pushremote" | "description"
            ),
            "pull" => matches!(k, "rebase" | "ff"),
            "push" => matches!(k, "default" | "autosetupremote" | "followtags"),
            "fetch" => matches!(k, "prune" | "prunetags" | "parallel"),
            "merge" if !sub => matches!(k, "ff" | "conflictstyle" | "log"),
            "rebase" => matches!(k, "autostash" | "autosquash" | "updaterefs"),
            "commit" => matches!(k, "gpgsign" | "verbose" | "cleanup"),
            "submodule" => matches!(k, "url" | "active" | "branch" | "recurse"),
            _ => false,
        };
        !harmless
    }
}

/// The user's home and environment as the user's own git will see them.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub home: Option<PathBuf>,
    pub vars: BTreeMap<String, String>,
}

impl Env {
    /// From the daemon's own environment.
    pub fn from_process() -> Env {
        Env {
            home: std::env::var_os("HOME").map(PathBuf::from),
            vars: std::env::vars()
                .filter(|(k, _)| k.starts_with("GIT_CONFIG") || k == "XDG_CONFIG_HOME")
                .collect(),
        }
    }

    /// The system and global config files git reads, in order.
    fn global_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let var = |k: &str| {
            self.vars
                .get(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if !self.vars.contains_key("GIT_CONFIG_NOSYSTEM") {
            out.push(var("GIT_CONFIG_SYSTEM").unwrap_or_else(|| "/etc/gitconfig".into()));
        }
        match var("GIT_CONFIG_GLOBAL") {
            Some(g) => out.push(g),
            None => {
                let xdg = var("XDG_CONFIG_HOME")
                    .or_else(|| self.home.as_ref().map(|h| h.join(".config")));
                if let Some(x) = xdg {
                    out.push(x.join("git/config"));
                }
                if let Some(h) = &self.home {
                    out.push(h.join(".gitconfig"));
                }
            }
        }
        out
    }

    fn expand(&self, v: &str, base: &Path) -> Option<PathBuf> {
        let p = if let Some(rest) = v.strip_prefix("~/") {
            self.home.as_ref()?.join(rest)
        } else {
            let p = Path::new(v);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        Some(crate::policy::normalize(&p))
    }
}

/// A config file with everything it includes (`include.path`, and every
/// `includeIf.*.path` whatever its condition), depth-first as git reads them.
#[derive(Debug, Default)]
struct Loaded {
    /// Every file read or named (included files that do not exist too).
    files: Vec<PathBuf>,
    entries: Vec<config::Entry>,
}

type Stamp = (i64, i64, u64, u64);
type Memo<T> = OnceLock<Mutex<HashMap<PathBuf, (Stamp, Arc<T>)>>>;
type Listing = Vec<(OsString, bool)>;

fn stamp(m: &std::fs::Metadata) -> Stamp {
    (m.ctime(), m.ctime_nsec(), m.ino(), m.len())
}

/// A small file's text, read again only when its ctime, inode or size changed.
fn read_cached(path: &Path) -> Option<Arc<String>> {
    static M: Memo<String> = OnceLock::new();
    let m = std::fs::metadata(path).ok()?;
    if !m.is_file() || m.len() > 1 << 20 {
        return None;
    }
    let memo = M.get_or_init(Default::default);
    let st = stamp(&m);
    if let Some((s, t)) = memo.lock().unwrap_or_else(|e| e.into_inner()).get(path) {
        if *s == st {
            return Some(t.clone());
        }
    }
    let text = Arc::new(std::fs::read_to_string(path).ok()?);
    let mut g = memo.lock().unwrap_or_else(|e| e.into_inner());
    if g.len() > 10_000 {
        g.clear();
    }
    g.insert(path.to_path_buf(), (st, text.clone()));
    Some(text)
}

/// A directory's entries (name, is a directory), listed again only when its ctime
/// changed. `None` when it is not a directory.
fn listing(dir: &Path) -> Option<Arc<Vec<(OsString, bool)>>> {
    static M: Memo<Listing> = OnceLock::new();
    let m = std::fs::symlink_metadata(dir).ok()?;
    if !m.is_dir() {
        return None;
    }
    let memo = M.get_or_init(Default::default);
    let st = (m.ctime(), m.ctime_nsec(), m.ino(), 0);
    if let Some((s, l)) = memo.lock().unwrap_or_else(|e| e.into_inner()).get(dir) {
        if *s == st {
            return Some(l.clone());
        }
    }
    let l: Vec<(OsString, bool)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| (e.file_name(), e.file_type().is_ok_and(|t| t.is_dir())))
        .collect();
    let l = Arc::new(l);
    let mut g = memo.lock().unwrap_or_else(|e| e.into_inner());
    if g.len() > 10_000 {
        g.clear();
    }
    g.insert(dir.to_path_buf(), (st, l.clone()));
    Some(l)
}

fn load(path: &Path, env: &Env, out: &mut Loaded, depth: usize) {
    if depth > 10 || out.files.iter().any(|f| f == path) {
        return;
    }
    out.files.push(path.to_path_buf());
    let Some(text) = read_cached(path) else {
        return;
    };
    let base = path.parent().unwrap_or(Path::new("/"));
    for e in config::parse(&text) {
        let include = e.key == "path" && (e.section == "include" || e.section == "includeif");
        if include {
            if let Some(p) = e.value.as_deref().and_then(|v| env.expand(v, base)) {
                out.entries.push(e);
                load(&p, env, out, depth + 1);
                continue;
            }
        }
        out.entries.push(e);
    }
}

/// What a `.git` entry was when scanned: a replaced one is a different inode or kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    pub kind: Kind,
    pub dev: u64,
    pub ino: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

fn ident(p: &Path) -> Option<Ident> {
    let m = std::fs::symlink_metadata(p).ok()?;
    let ft = m.file_type();
    let kind = if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else {
        Kind::Other
    };
    Some(Ident {
        kind,
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// The scan's result.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Existing paths to keep read-only (bound over themselves; saved and put back
    /// without a mount namespace). Missing `hooks`/`info` directories of a git dir are
    /// listed too (the helper creates them empty).
    pub protected: Vec<PathBuf>,
    /// Paths that do not exist and must not appear: a hooks path, an included file, a
    /// `commondir` or `config.worktree` where there is none. Quarantined by [`audit`]
    /// when a command creates them.
    pub watch: Vec<PathBuf>,
    /// Paths of the protect set (files other tools run) that do not exist: quarantined
    /// by [`audit`] when a command creates them.
    pub watch_tools: Vec<PathBuf>,
    /// `.git` directories, bound over themselves so that they cannot be renamed,
    /// replaced or removed.
    pub pinned: Vec<PathBuf>,
    /// A linked worktree's gitdir and common dir, made writable so commits work.
    pub extra_roots: Vec<PathBuf>,
    /// Every `.git` entry under the walked roots, by identity.
    pub repos: BTreeMap<PathBuf, Ident>,
    /// The linked worktrees' entries (`<common>/worktrees/NAME`) that existed.
    pub worktrees: Vec<PathBuf>,
    /// Common dirs whose `worktrees/` is audited for new entries.
    pub common_dirs: Vec<PathBuf>,
    /// The walk stopped early (too many directories); what it did not reach is not
    /// known.
    pub truncated: bool,
}

/// Directories visited per walk at most.
const MAX_DIRS: usize = 100_000;

#[derive(Debug, Clone)]
struct DirMemo {
    ctime: (i64, i64),
    ino: u64,
    subdirs: Arc<Vec<OsString>>,
    git: bool,
    skip: bool,
}

fn memo() -> &'static Mutex<HashMap<PathBuf, DirMemo>> {
    static M: OnceLock<Mutex<HashMap<PathBuf, DirMemo>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `fstatat(root, dir relative to root, AT_SYMLINK_NOFOLLOW)`.
fn stat_beneath(root_fd: &std::fs::File, root: &Path, dir: &Path) -> Option<libc::stat> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let rel = dir.strip_prefix(root).ok()?;
    let rel = if rel.as_os_str().is_empty() {
        std::ffi::CString::new(".").ok()?
    } else {
        std::ffi::CString::new(rel.as_os_str().as_bytes()).ok()?
    };
    // SAFETY: `st` is plain data the kernel fills; `rel` outlives the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::fstatat(
            root_fd.as_raw_fd(),
            rel.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    (rc == 0).then_some(st)
}

/// Every `.git` entry (any kind) beneath `root`, not descending into `.git` or
/// `CACHEDIR.TAG` directories. Returns whether the walk was cut short.
fn find_dot_git(root: &Path, out: &mut Vec<PathBuf>) -> bool {
    #[cfg(target_os = "linux")]
    if !NO_WATCHES.load(std::sync::atomic::Ordering::Relaxed) {
        if let Some(cut) = find_dot_git_watched(root, out) {
            return cut;
        }
    }
    find_dot_git_stat(root, out)
}

/// Walks by `stat` only, never from inotify watches (set by the `git_scan` bench to
/// measure both in one run).
static NO_WATCHES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Chooses how [`scan`] and [`audit`] walk for `.git` entries: inotify watches (the
/// default on Linux) or `stat` only. For benchmarks.
#[doc(hidden)]
pub fn use_watches(on: bool) {
    NO_WATCHES.store(!on, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(target_os = "linux")]
fn watches() -> Option<&'static Mutex<crate::git_watch::Watches>> {
    static W: OnceLock<Option<Mutex<crate::git_watch::Watches>>> = OnceLock::new();
    W.get_or_init(|| crate::git_watch::Watches::new().map(Mutex::new))
        .as_ref()
}

/// [`find_dot_git`] with inotify watches ([`crate::git_watch`]): a directory nothing
/// changed since it was listed is not looked at again, and a root nothing changed in is
/// answered from its last walk. `None` without inotify.
#[cfg(target_os = "linux")]
fn find_dot_git_watched(root: &Path, out: &mut Vec<PathBuf>) -> Option<bool> {
    use std::os::fd::AsRawFd;
    let mut w = watches()?.lock().unwrap_or_else(|e| e.into_inner());
    w.drain();
    if let Some(found) = w.walk(root) {
        out.extend(found.iter().cloned());
        return Some(false);
    }
    let at = w.generation();
    let Ok(root_dir) = std::fs::File::open(root) else {
        return Some(false);
    };
    let mut found = Vec::new();
    let mut complete = true;
    let mut stack = vec![root.to_path_buf()];
    let mut visited = 0usize;
    while let Some(dir) = stack.pop() {
        visited += 1;
        if visited > MAX_DIRS {
            out.extend(found);
            return Some(true);
        }
        let listing = match w.trusted(&dir) {
            Some(l) => l,
            None => {
                let rel = dir.strip_prefix(root).unwrap_or(Path::new(""));
                match w.list(root_dir.as_raw_fd(), rel, &dir) {
                    Some((l, watched)) => {
                        complete &= watched;
                        l
                    }
                    None => continue,
                }
            }
        };
        if listing.git {
            found.push(dir.join(".git"));
        }
        if !listing.skip {
            for s in &listing.subdirs {
                stack.push(dir.join(s));
            }
        }
    }
    if complete {
        w.walked(root, at, found.clone());
    }
    out.extend(found);
    Some(false)
}

/// [`find_dot_git`] by `stat`: each directory's entries remembered by its ctime.
fn find_dot_git_stat(root: &Path, out: &mut Vec<PathBuf>) -> bool {
    let mut memo = memo().lock().unwrap_or_else(|e| e.into_inner());
    if memo.len() > 4 * MAX_DIRS {
        memo.clear();
    }
    // Directories are looked up relative to the root's descriptor: a shorter path
    // walk per stat than from `/`, which is most of what a stat costs here.
    let Ok(root_dir) = std::fs::File::open(root) else {
        return false;
    };
    let mut stack = vec![root.to_path_buf()];
    let mut visited = 0usize;
    while let Some(dir) = stack.pop() {
        visited += 1;
        if visited > MAX_DIRS {
            return true;
        }
        let Some(m) = stat_beneath(&root_dir, root, &dir) else {
            memo.remove(&dir);
            continue;
        };
        if (m.st_mode & libc::S_IFMT) != libc::S_IFDIR {
            continue;
        }
        #[allow(clippy::unnecessary_cast)] // not i64 on every target
        let ctime = (m.st_ctime as i64, m.st_ctime_nsec as i64);
        #[allow(clippy::unnecessary_cast)] // not u64 on every target
        let ino = m.st_ino as u64;
        let cached = memo
            .get(&dir)
            .filter(|d| d.ctime == ctime && d.ino == ino)
            .cloned();
        let d = match cached {
            Some(d) => d,
            None => {
                let mut subdirs = Vec::new();
                let mut git = false;
                let mut skip = false;
                if let Ok(rd) = std::fs::read_dir(&dir) {
                    for e in rd.flatten() {
                        let name = e.file_name();
                        if name == ".git" {
                            git = true;
                            continue;
                        }
                        if name == "CACHEDIR.TAG" {
                            skip = true;
                        }
                        if e.file_type().is_ok_and(|t| t.is_dir()) {
                            subdirs.push(name);
                        }
                    }
                }
                let d = DirMemo {
                    ctime,
                    ino,
                    subdirs: Arc::new(subdirs),
                    git,
                    skip,
                };
                memo.insert(dir.clone(), d.clone());
                d
            }
        };
        if d.git {
            out.push(dir.join(".git"));
        }
        if !d.skip {
            for s in d.subdirs.iter() {
                stack.push(dir.join(s));
            }
        }
    }
    false
}

fn push(v: &mut Vec<PathBuf>, p: PathBuf) {
    if !v.contains(&p) {
        v.push(p);
    }
}

struct Scanner<'a> {
    roots: Vec<PathBuf>,
    env: &'a Env,
    global: Loaded,
    out: Scan,
    seen_gitdirs: Vec<PathBuf>,
}

impl Scanner<'_> {
    fn in_roots(&self, p: &Path) -> bool {
        self.roots.iter().any(|r| p.starts_with(r))
    }

    /// Protected when it exists, watched when it does not (inside the roots only: what
    /// lies outside cannot be written anyway).
    fn guard(&mut self, p: PathBuf) {
        if !self.in_roots(&p) {
            return;
        }
        if std::fs::symlink_metadata(&p).is_ok() {
            push(&mut self.out.protected, p);
        } else {
            push(&mut self.out.watch, p);
        }
    }

    fn hooks_path(&mut self, entries: &[config::Entry], worktree: &Path) {
        // The last value wins in git, but every one named is guarded: the next git to
        // run may read them in another order (a conditional include).
        let mut values: Vec<String> = Vec::new();
        for e in self.global.entries.iter().chain(entries) {
            if e.section == "core" && e.subsection.is_none() && e.key == "hookspath" {
                if let Some(v) = &e.value {
                    values.push(v.clone());
                }
            }
        }
        for v in values {
            if let Some(p) = self.env.expand(&v, worktree) {
                // Resolved only when it exists (a missing path has nothing to resolve).
                let p = match std::fs::symlink_metadata(&p) {
                    Ok(_) => p.canonicalize().unwrap_or(p),
                    Err(_) => p,
                };
                self.guard(p);
            }
        }
    }

    /// Protected when `exists`, watched otherwise (inside the roots only).
    fn guard_known(&mut self, p: PathBuf, exists: bool) {
        if !self.in_roots(&p) {
            return;
        }
        if exists {
            push(&mut self.out.protected, p);
        } else {
            push(&mut self.out.watch, p);
        }
    }

    fn gitdir(&mut self, g: &Path, worktree: Option<&Path>, depth: usize) {
        if depth > 8 || self.seen_gitdirs.iter().any(|s| s == g) {
            return;
        }
        self.seen_gitdirs.push(g.to_path_buf());
        let Some(names) = listing(g) else { return };
        let has = |n: &str| names.iter().any(|(e, _)| e == n);
        let has_dir = |n: &str| names.iter().any(|(e, d)| e == n && *d);
        if self.in_roots(g) {
            for n in ["hooks", "info"] {
                push(&mut self.out.protected, g.join(n));
            }
        }
        for n in ["config", "config.worktree", "commondir", "gitdir"] {
            self.guard_known(g.join(n), has(n));
        }
        let mut loaded = Loaded::default();
        load(&g.join("config"), self.env, &mut loaded, 0);
        if has("config.worktree") {
            load(&g.join("config.worktree"), self.env, &mut loaded, 0);
        }
        for f in loaded.files.iter().skip(1) {
            if !f.ends_with("config.worktree") || f.parent() != Some(g) {
                self.guard(f.clone());
            }
        }
        if let Some(wt) = worktree {
            self.hooks_path(&loaded.entries, wt);
        }
        // A worktree's gitdir points at its common dir.
        if has("commondir") {
            if let Some(c) = read_cached(&g.join("commondir")) {
                if let Ok(c) = g.join(c.trim()).canonicalize() {
                    self.gitdir(&c, worktree, depth + 1);
                }
            }
        }
        if has_dir("modules") {
            for (m, d) in listing(&g.join("modules")).unwrap_or_default().iter() {
                if *d {
                    self.gitdir(&g.join("modules").join(m), None, depth + 1);
                }
            }
        }
        if has_dir("worktrees") {
            push(&mut self.out.common_dirs, g.to_path_buf());
            for (w, d) in listing(&g.join("worktrees")).unwrap_or_default().iter() {
                if !*d {
                    continue;
                }
                let w = g.join("worktrees").join(w);
                let inner = listing(&w).unwrap_or_default();
                for n in ["commondir", "gitdir", "config.worktree"] {
                    let exists = inner.iter().any(|(e, _)| e == n);
                    self.guard_known(w.join(n), exists);
                }
                push(&mut self.out.worktrees, w);
            }
        } else if has_dir("objects") {
            push(&mut self.out.common_dirs, g.to_path_buf());
        }
    }

    fn dot_git(&mut self, dot: &Path, top_level: bool) {
        let Some(id) = ident(dot) else { return };
        self.out.repos.insert(dot.to_path_buf(), id.clone());
        let wt = dot.parent().unwrap_or(Path::new("/")).to_path_buf();
        // A new `.gitmodules` cannot run code (git refuses `update = !cmd` from it): only
        // an existing one is protected.
        let modules = wt.join(".gitmodules");
        if self.in_roots(&modules) && std::fs::symlink_metadata(&modules).is_ok() {
            push(&mut self.out.protected, modules);
        }
        match id.kind {
            Kind::Dir => {
                if self.in_roots(dot) {
                    push(&mut self.out.pinned, dot.to_path_buf());
                }
                self.gitdir(dot, Some(&wt), 0);
            }
            Kind::File => {
                push(&mut self.out.protected, dot.to_path_buf());
                let Ok(text) = std::fs::read_to_string(dot) else {
                    return;
                };
                let Some(gd) = text.lines().find_map(|l| l.strip_prefix("gitdir:")) else {
                    return;
                };
                let Ok(gd) = wt.join(gd.trim()).canonicalize() else {
                    return;
                };
                let common = std::fs::read_to_string(gd.join("commondir"))
                    .ok()
                    .and_then(|c| gd.join(c.trim()).canonicalize().ok());
                if top_level && !self.in_roots(&gd) {
                    push(&mut self.out.extra_roots, gd.clone());
                    if let Some(c) = &common {
                        push(&mut self.out.extra_roots, c.clone());
                    }
                }
                // Now inside the (possibly widened) roots: guard what runs there too.
                for x in self.out.extra_roots.clone() {
                    push(&mut self.roots, x);
                }
                self.gitdir(&gd, Some(&wt), 0);
            }
            // A symlinked `.git`: protect what it points to as a git dir.
            Kind::Symlink => {
                if let Ok(t) = dot.canonicalize() {
                    if t.is_dir() {
                        self.gitdir(&t, Some(&wt), 0);
                    }
                }
            }
            Kind::Other => {}
        }
    }
}

/// Scans `walk_roots` (the writable roots worth walking: not the toolchain caches) for
/// every git directory, and names what must not change. `roots` are all writable roots
/// (canonical).
pub fn scan(roots: &[PathBuf], walk_roots: &[PathBuf], env: &Env) -> Scan {
    let mut global = Loaded::default();
    for f in env.global_files() {
        load(&f, env, &mut global, 0);
    }
    let mut s = Scanner {
        roots: roots.to_vec(),
        env,
        global,
        out: Scan::default(),
        seen_gitdirs: Vec::new(),
    };
    // The global files and what they include, when a root holds them (a workspace that
    // is $HOME).
    for f in s.global.files.clone() {
        s.guard(f);
    }
    for r in walk_roots {
        let mut dots = Vec::new();
        s.out.truncated |= find_dot_git(r, &mut dots);
        dots.sort();
        for d in dots {
            let top = d.parent() == Some(r.as_path());
            s.dot_git(&d, top);
        }
        // A root inside a repository (a subdirectory of a checkout): the repository's
        // git dir is above it; its hooks path may point inside.
        if !s.out.repos.keys().any(|k| k.parent() == Some(r.as_path())) {
            if let Some(above) = r.ancestors().skip(1).find(|a| a.join(".git").exists()) {
                let dot = above.join(".git");
                if dot.is_dir() {
                    s.gitdir(&dot, Some(above), 0);
                }
            }
        }
        // The user's global hooks path applies to repositories created later too.
        s.hooks_path(&[], r);
    }
    // A protected path that is a symlink (`.git/hooks -> ../my-hooks`): what it points
    // to is protected too (the link itself gets its parent protected by the helper).
    let targets: Vec<PathBuf> = s
        .out
        .protected
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()))
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    s.out.protected.extend(targets);
    let mut out = s.out;
    out.protected.sort();
    out.protected.dedup();
    out.watch.sort();
    out.watch.dedup();
    out.pinned.sort();
    out
}

/// One thing [`audit`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub path: PathBuf,
    /// Where it was moved; `None` when moving it failed (see `what`).
    pub moved_to: Option<PathBuf>,
    pub what: String,
    /// The grant that would have kept it: `git:init`, or `write` (a write grant for the
    /// path, asked for in `ask` mode).
    pub grant: &'static str,
}

fn has_hooks(g: &Path) -> Option<String> {
    let rd = std::fs::read_dir(g.join("hooks")).ok()?;
    let names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".sample"))
        .collect();
    (!names.is_empty()).then(|| format!("hooks ({})", names.join(", ")))
}

fn risky_config(g: &Path, env: &Env) -> Option<String> {
    let mut loaded = Loaded::default();
    load(&g.join("config"), env, &mut loaded, 0);
    load(&g.join("config.worktree"), env, &mut loaded, 0);
    let names: Vec<String> = loaded
        .entries
        .iter()
        .filter(|e| config::runs_code(e))
        .map(config::Entry::name)
        .collect();
    (!names.is_empty()).then(|| format!("config that runs code ({})", names.join(", ")))
}

/// Why a new git dir would run code; `None` when it would not.
fn new_gitdir_risk(g: &Path, env: &Env) -> Option<String> {
    let mut why = Vec::new();
    why.extend(has_hooks(g));
    why.extend(risky_config(g, env));
    if g.join("commondir").exists() {
        why.push("a commondir redirect".into());
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Moves `p` aside in its own directory (`NAME.agentd-quarantine-SECS`), never following
/// a symlink on the way (the directory is opened without one).
pub fn quarantine(p: &Path) -> std::io::Result<PathBuf> {
    let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
        return Err(std::io::Error::other("no parent"));
    };
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut new = OsString::from(name);
    new.push(format!(".agentd-quarantine-{secs}"));
    let mut k = 0;
    while std::fs::symlink_metadata(dir.join(&new)).is_ok() {
        k += 1;
        new = OsString::from(name);
        new.push(format!(".agentd-quarantine-{secs}-{k}"));
    }
    rename_in(dir, name, &new)?;
    Ok(dir.join(new))
}

#[cfg(target_os = "linux")]
fn rename_in(dir: &Path, from: &std::ffi::OsStr, to: &std::ffi::OsStr) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &std::ffi::OsStr| {
        std::ffi::CString::new(s.as_bytes()).map_err(|_| std::io::Error::other("NUL in a name"))
    };
    /// `struct open_how` of `linux/openat2.h`.
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    let d = c(dir.as_os_str())?;
    // SAFETY: openat2 with a NUL-terminated path and a correctly sized open_how.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            d.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        // No openat2 (before Linux 5.6, or refused by a container's filter): by path.
        if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) {
            return std::fs::rename(dir.join(from), dir.join(to));
        }
        return Err(e);
    }
    // SAFETY: a fresh descriptor the kernel returned.
    let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: both strings outlive the call; the descriptor is open.
    let rc = unsafe { libc::renameat(fd.as_raw_fd(), f.as_ptr(), fd.as_raw_fd(), t.as_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn rename_in(dir: &Path, from: &std::ffi::OsStr, to: &std::ffi::OsStr) -> std::io::Result<()> {
    std::fs::rename(dir.join(from), dir.join(to))
}

fn put_aside(p: &Path, why: String, out: &mut Vec<Finding>) {
    put_aside_for(p, why, "git:init", out)
}

fn put_aside_for(p: &Path, why: String, grant: &'static str, out: &mut Vec<Finding>) {
    match quarantine(p) {
        Ok(to) => out.push(Finding {
            path: p.to_path_buf(),
            moved_to: Some(to.clone()),
            what: format!("{why}; moved aside to {}", to.display()),
            grant,
        }),
        Err(e) => out.push(Finding {
            path: p.to_path_buf(),
            moved_to: None,
            what: format!("{why}; moving it aside failed: {e}"),
            grant,
        }),
    }
}

/// After a command: quarantines what it created that the user's git would run, unless
/// `git_init` allows new repositories (a replaced `.git`, a planted hooks path or
/// include and a redirected worktree are quarantined regardless).
pub fn audit(before: &Scan, walk_roots: &[PathBuf], env: &Env, git_init: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    for w in &before.watch {
        let Ok(m) = std::fs::symlink_metadata(w) else {
            continue;
        };
        // An empty directory runs nothing; the next scan protects it.
        if m.is_dir() && std::fs::read_dir(w).is_ok_and(|mut r| r.next().is_none()) {
            continue;
        }
        put_aside(
            w,
            "created where git would read it and run code".into(),
            &mut out,
        );
    }
    for w in &before.watch_tools {
        if std::fs::symlink_metadata(w).is_err() {
            continue;
        }
        put_aside_for(
            w,
            "created where other tools run it (an editor, direnv, a hook manager, CI)".into(),
            "write",
            &mut out,
        );
    }
    let mut dots = Vec::new();
    for r in walk_roots {
        find_dot_git(r, &mut dots);
    }
    for d in dots {
        let Some(now) = ident(&d) else { continue };
        match before.repos.get(&d) {
            Some(was) if *was == now => continue,
            Some(_) => {
                put_aside(&d, "a .git that was replaced".into(), &mut out);
                continue;
            }
            None => {}
        }
        let why = match now.kind {
            Kind::Symlink => Some("a new .git symlink".to_string()),
            Kind::Other => Some("a new .git that is not a file or directory".into()),
            Kind::File => {
                // A pointer file (`git worktree add`, `git submodule add`) is fine when it
                // leads into a known repository's git dir and what it leads to is clean.
                let target = std::fs::read_to_string(&d).ok().and_then(|t| {
                    let gd = t
                        .lines()
                        .find_map(|l| l.strip_prefix("gitdir:"))?
                        .trim()
                        .to_string();
                    d.parent()?.join(gd).canonicalize().ok()
                });
                match target {
                    Some(t) if before.common_dirs.iter().any(|c| t.starts_with(c)) => {
                        let mut why: Vec<String> = Vec::new();
                        why.extend(has_hooks(&t));
                        why.extend(risky_config(&t, env));
                        (!why.is_empty()).then(|| {
                            format!("a new linked worktree or submodule with {}", why.join("; "))
                        })
                    }
                    _ if git_init => None,
                    _ => Some("a new .git pointer file to an unknown git dir".into()),
                }
            }
            Kind::Dir if git_init => None,
            Kind::Dir => new_gitdir_risk(&d, env).map(|w| format!("a new repository with {w}")),
        };
        if let Some(why) = why {
            put_aside(&d, why, &mut out);
        }
    }
    // New linked worktrees must point back at their own common dir.
    for c in &before.common_dirs {
        let Ok(rd) = std::fs::read_dir(c.join("worktrees")) else {
            continue;
        };
        for w in rd.flatten() {
            let w = w.path();
            if before.worktrees.contains(&w) {
                continue;
            }
            let back = std::fs::read_to_string(w.join("commondir"))
                .ok()
                .and_then(|t| w.join(t.trim()).canonicalize().ok());
            let why = if back.as_deref() != Some(c.as_path()) {
                Some("a linked worktree whose commondir leads elsewhere".to_string())
            } else {
                risky_config(&w, env)
            };
            if let Some(why) = why {
                put_aside(&w, why, &mut out);
            }
        }
    }
    out
}

#[cfg(all(test, target_os = "linux"))]
mod watch_tests {
    use super::*;

    /// Every `.git` below `d`, by a plain recursive walk that remembers nothing.
    fn fresh(d: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        let entries: Vec<_> = rd.flatten().collect();
        if entries.iter().any(|e| e.file_name() == "CACHEDIR.TAG") {
            if entries.iter().any(|e| e.file_name() == ".git") {
                out.push(d.join(".git"));
            }
            return;
        }
        for e in entries {
            if e.file_name() == ".git" {
                out.push(d.join(".git"));
            } else if e.file_type().is_ok_and(|t| t.is_dir()) {
                fresh(&e.path(), out);
            }
        }
    }

    fn watched(root: &Path) -> Vec<PathBuf> {
        let mut v = Vec::new();
        assert_eq!(find_dot_git_watched(root, &mut v), Some(false));
        v.sort();
        v
    }

    /// A small xorshift: the same sequence of changes on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// After each of thousands of changes (directories made, removed, renamed over
    /// each other and moved in and out, `.git` made and removed, `CACHEDIR.TAG`
    /// written, a directory swapped for a symlink), the watched walk, which looks only
    /// where events said something changed, finds exactly what a fresh walk finds.
    #[test]
    fn the_watched_walk_finds_what_a_fresh_walk_finds_after_every_change() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        let root = base.join("ws");
        let aside = base.join("aside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&aside).unwrap();
        let names = ["a", "b", "c", ".git"];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut held: Vec<std::fs::File> = Vec::new();
        let pick = |rng: &mut Rng, depth: usize| {
            let mut p = root.clone();
            for _ in 0..=rng.next(depth) {
                p.push(names[rng.next(3)]);
            }
            p
        };
        for step in 0..3000 {
            let p = pick(&mut rng, 4);
            let op = rng.next(9);
            let dbg = format!("{op} {p:?}");
            match op {
                0 | 1 => {
                    let _ = std::fs::create_dir_all(&p);
                }
                2 => {
                    let _ = std::fs::create_dir_all(p.join(".git/hooks"));
                }
                3 => {
                    let _ = std::fs::remove_dir_all(&p);
                }
                4 => {
                    // Held open, a directory renamed over lives on (no delete event
                    // for it) while its name leads to another one.
                    let q = pick(&mut rng, 3);
                    if !q.starts_with(&p) {
                        if let Ok(f) = std::fs::File::open(&q) {
                            held.push(f);
                        }
                        let _ = std::fs::rename(&p, &q);
                    }
                }
                5 => {
                    let out = aside.join(format!("t{step}"));
                    if std::fs::rename(&p, &out).is_ok() && rng.next(2) == 0 {
                        let q = pick(&mut rng, 3);
                        let _ = std::fs::rename(&out, &q);
                    }
                }
                6 => {
                    if p.is_dir() {
                        let _ = std::fs::write(p.join("CACHEDIR.TAG"), "Signature");
                    }
                }
                7 => {
                    let _ = std::fs::remove_file(p.join("CACHEDIR.TAG"));
                    let _ = std::fs::remove_dir_all(p.join(".git"));
                }
                _ => {
                    if std::fs::remove_dir_all(&p).is_ok() {
                        let _ = std::os::unix::fs::symlink(&aside, &p);
                    } else {
                        let _ = std::fs::remove_file(&p);
                    }
                }
            }
            let mut want = Vec::new();
            fresh(&root, &mut want);
            want.sort();
            assert_eq!(watched(&root), want, "after step {step}: {dbg}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::config::{parse, runs_code};
    use super::*;

    fn names(text: &str) -> Vec<(String, Option<String>)> {
        parse(text)
            .into_iter()
            .map(|e| (e.name(), e.value))
            .collect()
    }

    #[test]
    fn config_syntax_as_git_reads_it() {
        let text = "# comment\n[core]\n\t; another\n\tbare = false\n\
                    [CORE] HooksPath = \"my hooks\" # trailing\n\
                    [includeIf \"gitdir:/x/\"]\n path = ../inc.cfg\n\
                    [remote.Origin]\nurl = a\\\n b\n[alias]\n co = !sh -c 'x;y' ; c\nflag\n";
        let got = names(text);
        assert_eq!(
            got,
            vec![
                ("core.bare".into(), Some("false".into())),
                ("core.hookspath".into(), Some("my hooks".into())),
                (
                    "includeif.gitdir:/x/.path".into(),
                    Some("../inc.cfg".into())
                ),
                ("remote.origin.url".into(), Some("a b".into())),
                ("alias.co".into(), Some("!sh -c 'x".into())),
                ("alias.flag".into(), None),
            ]
        );
    }

    #[test]
    fn only_known_keys_are_harmless() {
        let e = |t: &str| {
            parse(t)
                .into_iter()
                .map(|e| runs_code(&e))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            e(
                "[core]\nrepositoryformatversion = 0\nfsmonitor = x\nhooksPath = h\n\
               [user]\nemail = a\n[remote \"o\"]\nurl = u\nuploadpack = x\n\
               [include]\npath = p\n[filter \"lfs\"]\nclean = c\n"
            ),
            vec![false, true, true, false, false, true, true, true]
        );
    }

    fn gitdir(g: &Path, config: &str) {
        std::fs::create_dir_all(g.join("objects")).unwrap();
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(g.join("config"), config).unwrap();
    }

    #[test]
    fn scan_finds_nested_repositories_includes_and_hooks_paths_and_audit_quarantines() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let (ws, home) = (root.join("ws"), root.join("home"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join(".gitconfig"), "# x\n[Core]\n  hooksPath = ~/gh\n").unwrap();
        gitdir(
            &ws.join(".git"),
            "[include]\n\tpath = ../inc.cfg\n[core]\n; c\n\thooksPath = \"hk\"\n",
        );
        gitdir(&ws.join("vendor/lib/.git"), "");
        std::fs::create_dir_all(ws.join("target/x/.git")).unwrap();
        std::fs::write(ws.join("target/CACHEDIR.TAG"), "").unwrap();
        let env = Env {
            home: Some(home.clone()),
            vars: [("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string())].into(),
        };
        let roots = vec![ws.clone(), home.clone()];
        let walk = vec![ws.clone()];
        let s = scan(&roots, &walk, &env);
        for p in [
            ".git/hooks",
            ".git/config",
            "vendor/lib/.git/hooks",
            "vendor/lib/.git/config",
        ] {
            assert!(s.protected.contains(&ws.join(p)), "{p}: {s:#?}");
        }
        for p in [
            ws.join("inc.cfg"),
            ws.join("hk"),
            ws.join(".git/commondir"),
            home.join("gh"),
        ] {
            assert!(s.watch.contains(&p), "{p:?}: {s:#?}");
        }
        assert_eq!(s.pinned, vec![ws.join(".git"), ws.join("vendor/lib/.git")]);
        assert!(!s.repos.contains_key(&ws.join("target/x/.git")), "{s:#?}");
        // Nothing changed: nothing to report.
        assert!(audit(&s, &walk, &env, false).is_empty());
        // A planted hooks path and a new repository with code-running config go; a plain
        // new repository stays.
        std::fs::create_dir(ws.join("hk")).unwrap();
        std::fs::write(ws.join("hk/pre-commit"), "x").unwrap();
        gitdir(&ws.join("evil/.git"), "[core]\n\tfsmonitor = x\n");
        gitdir(&ws.join("plain/.git"), "[core]\n\tbare = false\n");
        let f = audit(&s, &walk, &env, false);
        let paths: Vec<&Path> = f.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(
            paths,
            vec![ws.join("hk").as_path(), ws.join("evil/.git").as_path()]
        );
        assert!(f[1].what.contains("core.fsmonitor"), "{f:?}");
        assert!(!ws.join("hk").exists() && !ws.join("evil/.git").exists());
        assert!(f
            .iter()
            .all(|f| f.moved_to.as_ref().is_some_and(|m| m.exists())));
        assert!(ws.join("plain/.git").exists());
    }
}

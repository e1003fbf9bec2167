//! The sandbox policy: the `[sandbox]` config shape, per-session and per-turn requests,
//! grants, and the pure function [`effective`] that turns them into what a command may
//! touch (writable roots, hidden set, environment rules).
//!
//! Everything here is pure and deterministic: no filesystem access, no environment
//! reads. The caller passes the home directory, `$XDG_RUNTIME_DIR`, agentd's own
//! directories and the daemon's environment in [`Inputs`]. Paths are normalized
//! lexically (`.` and `..` removed); relative paths are dropped.
//!
//! Invariant (checked by [`EffectivePolicy::check`] and the fuzz target): a hidden path
//! is never inside or equal to a writable root's subtree grant *and* readable; a
//! writable root that lies inside a hidden path is dropped. Only a per-call grant
//! ([`Grant::ReadHidden`] in [`Inputs::call_grants`]) that names a hidden path takes it
//! out of the hidden set.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// How much of the filesystem a command may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Writes to the workspace, the private `/tmp`, extra roots and granted caches.
    #[default]
    WorkspaceWrite,
    /// Writes only to the private `/tmp`.
    ReadOnly,
    /// No OS sandbox at all (the environment is still scrubbed). Only by explicit
    /// config, flag or grant; recorded.
    FullAccess,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::WorkspaceWrite => "workspace_write",
            Mode::ReadOnly => "read_only",
            Mode::FullAccess => "full_access",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "workspace_write" | "workspace-write" => Some(Mode::WorkspaceWrite),
            "read_only" | "read-only" => Some(Mode::ReadOnly),
            "full_access" | "full-access" => Some(Mode::FullAccess),
            _ => None,
        }
    }
}

/// Whether a command may use the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// No inet sockets at all (own network namespace, seccomp, Landlock TCP rules).
    #[default]
    None,
    /// The host's network.
    Host,
}

impl Network {
    pub fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Host => "host",
        }
    }

    pub fn parse(s: &str) -> Option<Network> {
        match s {
            "none" => Some(Network::None),
            "host" => Some(Network::Host),
            _ => None,
        }
    }
}

/// What to do when the sandbox cannot be built (no Landlock or no seccomp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnavailable {
    /// Refuse to run the command (error kind `sandbox_unavailable`).
    #[default]
    Refuse,
    /// Run it unconfined, recorded as `level: "none"` with the reason.
    Warn,
}

/// Toolchain caches a grant can make writable (`cache:<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CachePreset {
    Cargo,
    Npm,
    Pip,
    Go,
}

impl CachePreset {
    pub const ALL: [CachePreset; 4] = [
        CachePreset::Cargo,
        CachePreset::Npm,
        CachePreset::Pip,
        CachePreset::Go,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CachePreset::Cargo => "cache:cargo",
            CachePreset::Npm => "cache:npm",
            CachePreset::Pip => "cache:pip",
            CachePreset::Go => "cache:go",
        }
    }

    pub fn parse(s: &str) -> Option<CachePreset> {
        CachePreset::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The directories this preset makes writable. Never `~/.cargo/bin`, credentials or
    /// toolchains.
    pub fn roots(self, home: Option<&Path>, env: &BTreeMap<String, String>) -> Vec<PathBuf> {
        let abs = |k: &str| {
            env.get(k)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|p| normalize(&p))
        };
        let under_home = |rel: &str| home.map(|h| h.join(rel));
        let mut out = Vec::new();
        match self {
            CachePreset::Cargo => {
                if let Some(c) = abs("CARGO_HOME").or_else(|| under_home(".cargo")) {
                    out.push(c.join("registry"));
                    out.push(c.join("git"));
                }
            }
            CachePreset::Npm => {
                out.extend(abs("npm_config_cache").or_else(|| under_home(".npm")));
            }
            CachePreset::Pip => {
                out.extend(abs("PIP_CACHE_DIR").or_else(|| under_home(".cache/pip")));
            }
            CachePreset::Go => {
                out.extend(abs("GOMODCACHE").or_else(|| {
                    abs("GOPATH")
                        .map(|g| g.join("pkg/mod"))
                        .or_else(|| under_home("go/pkg/mod"))
                }));
                out.extend(abs("GOCACHE").or_else(|| under_home(".cache/go-build")));
            }
        }
        out
    }
}

/// The `[sandbox]` table of `config.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: Mode,
    pub network: Network,
    /// Extra absolute paths commands may write.
    pub writable_roots: Vec<PathBuf>,
    pub on_unavailable: OnUnavailable,
    /// Cache presets granted for every session (`"cache:cargo"`, ...).
    pub caches: Vec<String>,
    /// Extra variables set in every command's environment (explicit, so not scrubbed).
    pub env: BTreeMap<String, String>,
    /// Names of daemon environment variables passed through to commands (explicit, so
    /// not scrubbed; `AGENTD_*` never passes).
    pub env_pass: Vec<String>,
    /// Per-command process cap (cgroup `pids.max`; `RLIMIT_NPROC` for a non-root
    /// daemon without a delegated cgroup). 0: the default, 512.
    pub pids_max: u64,
    /// Per-command memory cap in bytes (cgroup `memory.max`). 0: the default, 4 GiB.
    pub memory_max: u64,
    /// Workspace-relative paths other tools run (`dir/**` for a whole directory), added
    /// to [`DEFAULT_PROTECT`]: read-only to commands, refused to the file tools unless
    /// the call was approved in `ask` mode.
    pub protect: Vec<String>,
    /// Allow `auto` permission mode in a session whose workspace is `$HOME` (refused
    /// otherwise: everything the user's tools read from their home would be writable).
    pub allow_auto_in_home: bool,
    /// Extra paths hidden from commands and the file tools: absolute, or `~/…` under
    /// the daemon's home directory.
    pub hide: Vec<String>,
    /// Unix sockets commands may connect to, by path (a socket, or a directory of
    /// them, such as `/run/postgresql`): with network `none` every other host socket is
    /// out of reach, and the container engines' sockets are out of reach with either
    /// network. Absolute paths.
    pub sockets: Vec<PathBuf>,
}

/// Files other tools run or load, protected by default (git's own files are found by
/// the git scan).
pub const DEFAULT_PROTECT: &[&str] = &[
    ".vscode/settings.json",
    ".vscode/tasks.json",
    ".envrc",
    ".husky/**",
    ".pre-commit-config.yaml",
    ".idea/workspace.xml",
    ".devcontainer/**",
    ".github/workflows/**",
];

/// `pattern` without a trailing `/**`, when it is a relative path that stays inside.
pub fn protect_path(pattern: &str) -> Option<PathBuf> {
    let p = Path::new(pattern.strip_suffix("/**").unwrap_or(pattern));
    let ok = !p.as_os_str().is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    ok.then(|| p.to_path_buf())
}

/// `sandbox: {mode?, network?}` of `agentd/create` / `agentd/turn`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxRequest {
    pub mode: Option<Mode>,
    pub network: Option<Network>,
}

impl SandboxRequest {
    pub fn is_empty(&self) -> bool {
        self.mode.is_none() && self.network.is_none()
    }
}

/// A widening of the policy, approved for a session or for one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "grant", rename_all = "snake_case")]
pub enum Grant {
    Cache {
        cache: CachePreset,
    },
    WriteRoot {
        path: PathBuf,
    },
    Network {
        network: Network,
    },
    /// Makes a hidden path readable; honoured only for one call.
    ReadHidden {
        path: PathBuf,
    },
    FullAccess,
    /// New git repositories a command creates are kept even when git would run
    /// something in them (hooks, code-running config); without it they are quarantined.
    GitInit,
    /// A Unix socket (or a directory of them) commands may connect to
    /// (`socket:/run/postgresql`).
    Socket {
        path: PathBuf,
    },
}

/// Everything [`effective`] depends on.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub config: SandboxConfig,
    pub session: SandboxRequest,
    pub turn: SandboxRequest,
    /// Grants approved for the session.
    pub grants: Vec<Grant>,
    /// Grants approved for this one call (the only way to unhide a path).
    pub call_grants: Vec<Grant>,
    /// Canonical workspace.
    pub workspace: PathBuf,
    pub home: Option<PathBuf>,
    pub xdg_runtime_dir: Option<PathBuf>,
    /// agentd's home and config directory.
    pub agentd_dirs: Vec<PathBuf>,
    /// agentd's socket path.
    pub agentd_socket: Option<PathBuf>,
    /// The daemon's environment (toolchain homes for the cache presets, and the source
    /// of the command's environment).
    pub env: BTreeMap<String, String>,
    /// Secrets found on disk by [`discover_hidden`] (`.env` files outside the workspace,
    /// shell histories); those inside the workspace are left readable.
    pub found_hidden: Vec<PathBuf>,
}

/// What a command may do, as decided before anything is looked up on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectivePolicy {
    pub mode: Mode,
    pub network: Network,
    /// Directories (and files) writable beneath; the private `/tmp` is added by the
    /// mechanism.
    pub writable_roots: Vec<PathBuf>,
    /// Not readable, not writable, not connectable.
    pub hidden: Vec<PathBuf>,
    /// Cache presets in force.
    pub caches: Vec<CachePreset>,
    /// The command's environment, minus `TMPDIR` (set by the mechanism).
    pub env: BTreeMap<String, String>,
    /// Writable roots dropped because they lie in the hidden set.
    pub dropped_roots: Vec<PathBuf>,
    /// `git:init` granted: new repositories with hooks or code-running config are kept.
    #[serde(default)]
    pub git_init: bool,
    /// Files other tools run (the protect set resolved in the workspace), minus those a
    /// write grant covers.
    #[serde(default)]
    pub protect: Vec<PathBuf>,
    /// Unix sockets granted by path (config `sockets` and `socket:` grants): reachable
    /// with network `none`, and the container engines' among them with either network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sockets: Vec<PathBuf>,
}

/// Home-relative credential files and folders hidden from commands.
pub const HOME_HIDDEN: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".password-store",
    ".local/share/keyrings",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".gem/credentials",
    ".config/op",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/agentd",
    ".local/share/agentd",
    ".local/state/agentd",
    // Other coding agents' credentials and session stores.
    ".codex",
    ".claude",
    ".claude.json",
    ".gemini",
    ".config/github-copilot",
    ".pi",
    ".local/share/opencode",
    ".config/opencode",
    ".aider.conf.yml",
    // Database and cloud clients.
    ".pgpass",
    ".my.cnf",
    ".mylogin.cnf",
    ".config/rclone",
    ".s3cfg",
    ".config/doctl",
    ".oci",
    ".config/hcloud",
    // Shell and REPL histories (others matching `.*_history` are found on disk).
    ".bash_history",
    ".zsh_history",
    ".history",
    ".histfile",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".lesshst",
    ".local/share/fish",
];

/// Whether a file name is a secret wherever it lies outside the workspace: `.env`,
/// `.env.*` and shell histories (`.*_history`).
pub fn is_secret_name(name: &str) -> bool {
    name == ".env"
        || (name.starts_with(".env.") && name.len() > 5)
        || (name.starts_with('.') && name.ends_with("_history"))
}

/// Secrets on disk that a fixed list cannot name: `.env`/`.env.*` files in the
/// workspace's ancestors and in the home, and `.*_history` files in the home. Reads a
/// handful of directory listings; [`effective`] keeps the ones outside the workspace.
pub fn discover_hidden(home: Option<&Path>, workspace: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = workspace
        .ancestors()
        .skip(1)
        .map(Path::to_path_buf)
        .collect();
    if let Some(h) = home.filter(|h| h.is_absolute()) {
        push_unique(&mut dirs, h.to_path_buf());
    }
    let mut out = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten().take(4096) {
            let name = e.file_name();
            if name.to_str().is_some_and(is_secret_name) {
                out.push(d.join(name));
            }
        }
    }
    out.sort();
    out
}

/// System sockets and runtime directories hidden from commands.
pub const SYSTEM_HIDDEN: &[&str] = &[
    "/run/user",
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd",
    "/run/podman",
    "/run/dbus",
    "/run/snapd.socket",
    "/run/systemd/private",
    "/run/systemd/io.system.ManagedOOM",
    "/tmp/.X11-unix",
    "/tmp/.ICE-unix",
];

/// File names of container engines' sockets: whoever reaches one runs a container as
/// root on the host. Covered wherever they are bound, with either network, unless a
/// socket grant names them.
pub const ENGINE_SOCKETS: &[&str] = &[
    "docker.sock",
    "containerd.sock",
    "containerd.sock.ttrpc",
    "podman.sock",
    "crio.sock",
    "cri-dockerd.sock",
    "buildkitd.sock",
];

/// Whether `p` is a container engine's socket (by file name).
pub fn is_engine_socket(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| ENGINE_SOCKETS.contains(&n))
}

/// Directories too shared to hide whole when agentd's socket sits in one: the socket
/// file alone is hidden then.
const SHARED_DIRS: &[&str] = &["/", "/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm"];

/// Lexical normalization: `.` dropped, `..` pops. Relative input stays relative.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => {}
        }
    }
    out
}

/// Whether `p` is `base` or lies beneath it (component-wise).
pub fn is_within(p: &Path, base: &Path) -> bool {
    p.starts_with(base)
}

fn push_unique(v: &mut Vec<PathBuf>, p: PathBuf) {
    if !v.contains(&p) {
        v.push(p);
    }
}

/// The effective mode and network after config, session and turn (later wins), and
/// session or call grants (a grant only widens).
pub fn mode_and_network(inputs: &Inputs) -> (Mode, Network) {
    let mut mode = inputs.config.mode;
    let mut network = inputs.config.network;
    for r in [inputs.session, inputs.turn] {
        if let Some(m) = r.mode {
            mode = m;
        }
        if let Some(n) = r.network {
            network = n;
        }
    }
    for g in inputs.grants.iter().chain(&inputs.call_grants) {
        match g {
            Grant::FullAccess => mode = Mode::FullAccess,
            Grant::Network {
                network: Network::Host,
            } => network = Network::Host,
            _ => {}
        }
    }
    if mode == Mode::FullAccess {
        network = Network::Host;
    }
    (mode, network)
}

/// Set in a command's environment with network `none` (unless set already), so that
/// package managers fail fast instead of retrying.
pub const NETWORK_OFF_ENV: &[(&str, &str)] = &[
    ("npm_config_offline", "true"),
    ("npm_config_fetch_retries", "0"),
    ("PIP_RETRIES", "0"),
];

/// Computes the effective policy. Pure: same inputs, same output.
pub fn effective(inputs: &Inputs) -> EffectivePolicy {
    let (mode, network) = mode_and_network(inputs);
    let home = inputs
        .home
        .as_deref()
        .filter(|h| h.is_absolute())
        .map(normalize);

    // Hidden set.
    let mut hidden: Vec<PathBuf> = Vec::new();
    if let Some(h) = &home {
        for rel in HOME_HIDDEN {
            push_unique(&mut hidden, h.join(rel));
        }
    }
    for s in SYSTEM_HIDDEN {
        push_unique(&mut hidden, PathBuf::from(s));
    }
    for h in &inputs.config.hide {
        let p = match (h.strip_prefix("~/"), &home) {
            (Some(rest), Some(home)) => home.join(rest),
            (Some(_), None) => continue,
            (None, _) => PathBuf::from(h),
        };
        if p.is_absolute() {
            push_unique(&mut hidden, normalize(&p));
        }
    }
    if let Some(x) = inputs
        .xdg_runtime_dir
        .as_deref()
        .filter(|p| p.is_absolute())
    {
        let x = normalize(x);
        if !SHARED_DIRS.iter().any(|s| Path::new(s) == x) && Some(&x) != home.as_ref() {
            push_unique(&mut hidden, x);
        }
    }
    let workspace = normalize(&inputs.workspace);
    // `.env` files and histories: the user's own project is the model's to read.
    for f in inputs.found_hidden.iter().filter(|p| p.is_absolute()) {
        let f = normalize(f);
        if !is_within(&f, &workspace) {
            push_unique(&mut hidden, f);
        }
    }
    // agentd's default homes wherever the XDG variables put them, not only the running
    // daemon's: another daemon's Logs are as private as this one's.
    for var in ["XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"] {
        if let Some(v) = inputs.env.get(var).map(PathBuf::from) {
            let d = normalize(&v.join("agentd"));
            if v.is_absolute() && !is_within(&workspace, &d) {
                push_unique(&mut hidden, d);
            }
        }
    }
    // agentd's own directories, except one holding the workspace (hiding it would
    // hide the workspace; its Logs and config files are still listed one by one).
    for d in inputs.agentd_dirs.iter().filter(|p| p.is_absolute()) {
        let d = normalize(d);
        if !is_within(&workspace, &d) {
            push_unique(&mut hidden, d);
        }
    }
    if let Some(sock) = inputs.agentd_socket.as_deref().filter(|p| p.is_absolute()) {
        let sock = normalize(sock);
        push_unique(&mut hidden, sock.clone());
        if let Some(dir) = sock.parent() {
            let shared = SHARED_DIRS.iter().any(|s| Path::new(s) == dir)
                || Some(dir) == home.as_deref()
                || is_within(&workspace, dir);
            if !shared {
                push_unique(&mut hidden, dir.to_path_buf());
            }
        }
    }
    // A hidden path that is the workspace, or an ancestor of it, would hide the
    // workspace itself: the home and shared dirs never are; others are kept (the
    // workspace then becomes unreachable, which the spawner reports).
    hidden.retain(|h| h.is_absolute() && h != Path::new("/"));
    // Per-call unhiding.
    for g in &inputs.call_grants {
        if let Grant::ReadHidden { path } = g {
            let p = normalize(path);
            hidden.retain(|h| h != &p);
        }
    }
    // Socket grants: a system socket path the grant names (Docker's, say) is no longer
    // hidden; the home's credentials and runtime directories stay hidden whatever the
    // grant says.
    let mut sockets: Vec<PathBuf> = Vec::new();
    if mode != Mode::FullAccess {
        let granted = inputs.config.sockets.iter().chain(
            inputs
                .grants
                .iter()
                .chain(&inputs.call_grants)
                .filter_map(|g| match g {
                    Grant::Socket { path } => Some(path),
                    _ => None,
                }),
        );
        for s in granted.filter(|p| p.is_absolute()) {
            push_unique(&mut sockets, normalize(s));
        }
    }
    hidden.retain(|h| {
        !(SYSTEM_HIDDEN
            .iter()
            .any(|s| Path::new(s) == h && *s != "/run/user")
            && sockets.iter().any(|g| is_within(h, g)))
    });
    sockets.sort();
    hidden.sort();
    hidden.dedup();

    // Caches.
    let mut caches: Vec<CachePreset> = inputs
        .config
        .caches
        .iter()
        .filter_map(|c| CachePreset::parse(c))
        .collect();
    for g in inputs.grants.iter().chain(&inputs.call_grants) {
        if let Grant::Cache { cache } = g {
            caches.push(*cache);
        }
    }
    caches.sort();
    caches.dedup();

    // Writable roots.
    let mut roots: Vec<PathBuf> = Vec::new();
    if mode == Mode::WorkspaceWrite {
        if workspace.is_absolute() {
            push_unique(&mut roots, workspace.clone());
        }
        for r in &inputs.config.writable_roots {
            if r.is_absolute() {
                push_unique(&mut roots, normalize(r));
            }
        }
        for c in &caches {
            for r in c.roots(home.as_deref(), &inputs.env) {
                push_unique(&mut roots, r);
            }
        }
    }
    if mode != Mode::FullAccess {
        for g in inputs.grants.iter().chain(&inputs.call_grants) {
            if let Grant::WriteRoot { path } = g {
                if path.is_absolute() {
                    push_unique(&mut roots, normalize(path));
                }
            }
        }
    }
    if mode == Mode::FullAccess {
        roots.clear();
    }
    let mut dropped = Vec::new();
    roots.retain(|r| {
        let inside_hidden = hidden.iter().any(|h| is_within(r, h));
        if inside_hidden {
            dropped.push(r.clone());
        }
        !inside_hidden && r != Path::new("/")
    });

    let mut protect = Vec::new();
    if mode == Mode::WorkspaceWrite && workspace.is_absolute() {
        let granted: Vec<PathBuf> = inputs
            .grants
            .iter()
            .chain(&inputs.call_grants)
            .filter_map(|g| match g {
                Grant::WriteRoot { path } if path.is_absolute() => Some(normalize(path)),
                _ => None,
            })
            .collect();
        for pat in DEFAULT_PROTECT
            .iter()
            .copied()
            .chain(inputs.config.protect.iter().map(String::as_str))
        {
            if let Some(rel) = protect_path(pat) {
                let p = workspace.join(rel);
                if !granted
                    .iter()
                    .any(|g| p.starts_with(g) || g.starts_with(&p))
                {
                    push_unique(&mut protect, p);
                }
            }
        }
    }

    let mut env = crate::env::scrub(&inputs.env, &inputs.config.env_pass, &inputs.config.env);
    if network == Network::None {
        // Package managers that would retry a network that is not there for a minute
        // fail at once instead (npm: from its cache only, ENOTCACHED otherwise).
        for (k, v) in NETWORK_OFF_ENV {
            env.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
    }

    EffectivePolicy {
        mode,
        network,
        writable_roots: roots,
        hidden,
        caches,
        env,
        dropped_roots: dropped,
        git_init: inputs
            .grants
            .iter()
            .chain(&inputs.call_grants)
            .any(|g| matches!(g, Grant::GitInit)),
        protect,
        sockets,
    }
}

impl EffectivePolicy {
    /// The invariants every policy keeps; `Err` names the broken one.
    pub fn check(&self) -> Result<(), String> {
        for r in &self.writable_roots {
            if !r.is_absolute() {
                return Err(format!("relative writable root {}", r.display()));
            }
            if let Some(h) = self.hidden.iter().find(|h| is_within(r, h)) {
                return Err(format!(
                    "writable root {} inside hidden {}",
                    r.display(),
                    h.display()
                ));
            }
        }
        for k in self.env.keys() {
            if k.starts_with("AGENTD_") {
                return Err(format!("{k} in the environment"));
            }
        }
        if self.mode == Mode::FullAccess && !self.writable_roots.is_empty() {
            return Err("full_access lists roots".into());
        }
        Ok(())
    }

    /// A short stable hash of the policy, for the Log.
    pub fn digest(&self) -> String {
        let s = serde_json::to_string(self).unwrap_or_default();
        // FNV-1a 64: stable across builds, no dependency.
        let mut h: u64 = 0xcbf29ce484222325;
        for b in s.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        format!("{h:016x}")
    }

    /// The policy as recorded in the Log (env names, never values).
    pub fn to_record(&self) -> serde_json::Value {
        serde_json::json!({
            "mode": self.mode.as_str(),
            "network": self.network.as_str(),
            "writable_roots": self.writable_roots,
            "hidden": self.hidden,
            "caches": self.caches.iter().map(|c| c.name()).collect::<Vec<_>>(),
            "env": self.env.keys().collect::<Vec<_>>(),
            "dropped_roots": self.dropped_roots,
            "git_init": self.git_init,
            "protect": self.protect,
            "sockets": self.sockets,
            "digest": self.digest(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files_outside_the_workspace_and_config_hide_are_hidden() {
        let mut i = base();
        i.found_hidden = vec![
            "/home/u/.env".into(),
            "/home/u/ws/.env".into(),
            "/home/u/ws/sub/.env.local".into(),
            "/home/.env.production".into(),
        ];
        i.config.hide = vec!["~/vault".into(), "/srv/secrets".into(), "rel".into()];
        i.env
            .insert("XDG_STATE_HOME".into(), "/home/u/state".into());
        let p = effective(&i);
        for h in [
            "/home/u/.env",
            "/home/.env.production",
            "/home/u/vault",
            "/srv/secrets",
            "/home/u/state/agentd",
            "/home/u/.codex",
            "/home/u/.pgpass",
        ] {
            assert!(p.hidden.contains(&PathBuf::from(h)), "{h} not hidden");
        }
        for h in ["/home/u/ws/.env", "/home/u/ws/sub/.env.local", "rel"] {
            assert!(!p.hidden.contains(&PathBuf::from(h)), "{h} hidden");
        }
        assert!(is_secret_name(".env") && is_secret_name(".env.local"));
        assert!(is_secret_name(".zsh_history") && !is_secret_name(".envrc"));
        assert!(!is_secret_name(".env.") && !is_secret_name("env"));
    }

    fn base() -> Inputs {
        Inputs {
            workspace: "/home/u/ws".into(),
            home: Some("/home/u".into()),
            xdg_runtime_dir: Some("/run/user/1000".into()),
            agentd_dirs: vec!["/home/u/.local/state/agentd".into()],
            agentd_socket: Some("/run/user/1000/agentd/agentd.sock".into()),
            ..Default::default()
        }
    }

    #[test]
    fn socket_grants_unhide_only_the_engine_paths_they_name() {
        let mut i = base();
        i.config.sockets = vec!["/run/postgresql".into(), "rel".into()];
        i.grants.push(Grant::Socket {
            path: "/var/run/docker.sock".into(),
        });
        i.call_grants.push(Grant::Socket {
            path: "/run/user/1000/podman".into(),
        });
        let p = effective(&i);
        assert_eq!(
            p.sockets,
            [
                "/run/postgresql",
                "/run/user/1000/podman",
                "/var/run/docker.sock"
            ]
            .map(PathBuf::from)
        );
        assert!(!p.hidden.contains(&PathBuf::from("/var/run/docker.sock")));
        // Not named by a grant, or a runtime directory: still hidden.
        for h in ["/run/docker.sock", "/run/user/1000", "/run/containerd"] {
            assert!(p.hidden.contains(&PathBuf::from(h)), "{h} not hidden");
        }
        assert!(is_engine_socket(Path::new("/srv/x/docker.sock")));
        assert!(!is_engine_socket(Path::new(
            "/run/postgresql/.s.PGSQL.5432"
        )));
        i.turn.mode = Some(Mode::FullAccess);
        assert!(effective(&i).sockets.is_empty());
    }

    #[test]
    fn default_policy_hides_credentials_and_writes_workspace() {
        let p = effective(&base());
        assert_eq!(p.mode, Mode::WorkspaceWrite);
        assert_eq!(p.network, Network::None);
        assert_eq!(p.writable_roots, vec![PathBuf::from("/home/u/ws")]);
        for h in [
            "/home/u/.ssh",
            "/home/u/.aws",
            "/run/user/1000",
            "/run/user/1000/agentd",
            "/home/u/.local/state/agentd",
            "/run/docker.sock",
            "/tmp/.X11-unix",
        ] {
            assert!(p.hidden.contains(&PathBuf::from(h)), "{h} not hidden");
        }
        p.check().unwrap();
    }

    #[test]
    fn roots_inside_hidden_are_dropped_and_call_grant_unhides() {
        let mut i = base();
        i.config.writable_roots = vec!["/home/u/.ssh/x".into(), "/srv/data/../out".into()];
        let p = effective(&i);
        assert!(p.writable_roots.contains(&PathBuf::from("/srv/out")));
        assert_eq!(p.dropped_roots, vec![PathBuf::from("/home/u/.ssh/x")]);
        i.grants.push(Grant::ReadHidden {
            path: "/home/u/.ssh".into(),
        });
        assert!(effective(&i)
            .hidden
            .contains(&PathBuf::from("/home/u/.ssh")));
        i.call_grants.push(Grant::ReadHidden {
            path: "/home/u/.ssh".into(),
        });
        let p = effective(&i);
        assert!(!p.hidden.contains(&PathBuf::from("/home/u/.ssh")));
        p.check().unwrap();
    }

    #[test]
    fn later_requests_win_and_full_access_means_host() {
        let mut i = base();
        i.config.mode = Mode::ReadOnly;
        i.session.network = Some(Network::Host);
        i.turn.mode = Some(Mode::WorkspaceWrite);
        let p = effective(&i);
        assert_eq!((p.mode, p.network), (Mode::WorkspaceWrite, Network::Host));
        i.turn.mode = Some(Mode::FullAccess);
        i.turn.network = Some(Network::None);
        let p = effective(&i);
        assert_eq!((p.mode, p.network), (Mode::FullAccess, Network::Host));
        assert!(p.writable_roots.is_empty());
        i.turn = SandboxRequest::default();
        i.config.mode = Mode::ReadOnly;
        i.session.network = None;
        assert!(effective(&i).writable_roots.is_empty());
    }

    #[test]
    fn cache_presets_never_include_bin() {
        let mut i = base();
        i.grants.push(Grant::Cache {
            cache: CachePreset::Cargo,
        });
        let p = effective(&i);
        assert!(p
            .writable_roots
            .contains(&PathBuf::from("/home/u/.cargo/registry")));
        assert!(!p.writable_roots.iter().any(|r| r.ends_with("bin")));
        assert!(p
            .hidden
            .contains(&PathBuf::from("/home/u/.cargo/credentials.toml")));
    }

    #[test]
    fn shared_socket_dir_hides_only_the_socket() {
        let mut i = base();
        i.agentd_socket = Some("/tmp/agentd.sock".into());
        let p = effective(&i);
        assert!(p.hidden.contains(&PathBuf::from("/tmp/agentd.sock")));
        assert!(!p.hidden.contains(&PathBuf::from("/tmp")));
    }

    #[test]
    fn protect_set_defaults_config_and_write_grants() {
        let mut i = base();
        i.config.protect = vec!["tools/**".into(), "../escape".into(), "/abs".into()];
        let p = effective(&i);
        for x in [
            ".envrc",
            ".husky",
            ".vscode/settings.json",
            ".github/workflows",
            "tools",
        ] {
            assert!(
                p.protect.contains(&Path::new("/home/u/ws").join(x)),
                "{x}: {:?}",
                p.protect
            );
        }
        assert!(
            !p.protect.iter().any(|x| !x.starts_with("/home/u/ws")),
            "{:?}",
            p.protect
        );
        i.call_grants.push(Grant::WriteRoot {
            path: "/home/u/ws/.husky/pre-commit".into(),
        });
        let p = effective(&i);
        assert!(!p.protect.contains(&PathBuf::from("/home/u/ws/.husky")));
        assert!(p.protect.contains(&PathBuf::from("/home/u/ws/.envrc")));
        i.config.mode = Mode::ReadOnly;
        assert!(effective(&i).protect.is_empty());
    }

    #[test]
    fn digest_is_stable() {
        assert_eq!(effective(&base()).digest(), effective(&base()).digest());
    }
}

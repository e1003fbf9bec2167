//! `sandbox_policy`: a structured input (`arbitrary`) for the sandbox's effective policy:
//! config (mode, network, writable roots, caches, env), session and turn requests,
//! session and per-call grants, and the paths it depends on (workspace, home,
//! `$XDG_RUNTIME_DIR`, agentd's directories and socket), drawn from a vocabulary that
//! makes them overlap, nest and escape with `..`.
//!
//! Invariants: `EffectivePolicy::check` holds; every path hidden by default (the home's
//! credential paths, the system sockets, agentd's own directories and socket) stays
//! hidden (it or an ancestor is in the hidden set) unless a per-call grant names it
//! exactly, and session grants never unhide anything; no writable root lies in a hidden
//! path; the environment holds no `AGENTD_*` and nothing secret-looking that config did
//! not name; the function is pure (same inputs, same policy and digest).

use agentd_sandbox::env::is_denied;
use agentd_sandbox::policy::{
    effective, is_within, normalize, CachePreset, Grant, Inputs, Mode, Network, SandboxConfig,
    SandboxRequest, HOME_HIDDEN, SYSTEM_HIDDEN,
};
use arbitrary::Arbitrary;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const PARTS: [&str; 16] = [
    "home", "u", "ws", ".ssh", "..", ".", "run", "user", "1000", "agentd", "tmp", ".cargo",
    ".config", "gh", "state", "",
];

/// A path: absolute or relative, from a vocabulary, under a default-hidden path, or raw.
#[derive(Arbitrary, Debug)]
pub enum P {
    Abs(Vec<u8>),
    Rel(Vec<u8>),
    /// `/home/u/<HOME_HIDDEN[i]>/<parts>`.
    HomeHidden(u8, Vec<u8>),
    /// `<SYSTEM_HIDDEN[i]>/<parts>`.
    SystemHidden(u8, Vec<u8>),
    Raw(String),
}

fn parts(v: &[u8]) -> PathBuf {
    v.iter()
        .take(8)
        .map(|i| PARTS[*i as usize % PARTS.len()])
        .collect()
}

impl P {
    fn path(&self) -> PathBuf {
        match self {
            P::Abs(v) => Path::new("/").join(parts(v)),
            P::Rel(v) => parts(v),
            P::HomeHidden(i, v) => Path::new("/home/u")
                .join(HOME_HIDDEN[*i as usize % HOME_HIDDEN.len()])
                .join(parts(v)),
            P::SystemHidden(i, v) => {
                Path::new(SYSTEM_HIDDEN[*i as usize % SYSTEM_HIDDEN.len()]).join(parts(v))
            }
            P::Raw(s) => PathBuf::from(s),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum G {
    Cache(u8),
    WriteRoot(P),
    Network(bool),
    ReadHidden(P),
    FullAccess,
}

const MODES: [Mode; 3] = [Mode::WorkspaceWrite, Mode::ReadOnly, Mode::FullAccess];

impl G {
    fn grant(&self) -> Grant {
        match self {
            G::Cache(i) => Grant::Cache {
                cache: CachePreset::ALL[*i as usize % CachePreset::ALL.len()],
            },
            G::WriteRoot(p) => Grant::WriteRoot { path: p.path() },
            G::Network(host) => Grant::Network {
                network: if *host { Network::Host } else { Network::None },
            },
            G::ReadHidden(p) => Grant::ReadHidden { path: p.path() },
            G::FullAccess => Grant::FullAccess,
        }
    }
}

#[derive(Arbitrary, Debug)]
pub struct Req {
    mode: Option<u8>,
    network: Option<bool>,
}

impl Req {
    fn request(&self) -> SandboxRequest {
        SandboxRequest {
            mode: self.mode.map(|m| MODES[m as usize % 3]),
            network: self
                .network
                .map(|h| if h { Network::Host } else { Network::None }),
        }
    }
}

const ENV_NAMES: [&str; 12] = [
    "PATH",
    "HOME",
    "CARGO_HOME",
    "GOPATH",
    "AGENTD_SOCKET",
    "GITHUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "SSH_AUTH_SOCK",
    "LC_ALL",
    "npm_config_cache",
    "MY_PASSWORD",
    "TERM",
];

#[derive(Arbitrary, Debug)]
pub enum Name {
    Known(u8),
    Raw(String),
}

impl Name {
    fn name(&self) -> String {
        match self {
            Name::Known(i) => ENV_NAMES[*i as usize % ENV_NAMES.len()].to_string(),
            Name::Raw(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub struct PolicyInput {
    mode: u8,
    network: bool,
    writable_roots: Vec<P>,
    caches: Vec<String>,
    config_env: Vec<(Name, String)>,
    env_pass: Vec<Name>,
    session: Req,
    turn: Req,
    grants: Vec<G>,
    call_grants: Vec<G>,
    workspace: P,
    home: Option<P>,
    xdg_runtime_dir: Option<P>,
    agentd_dirs: Vec<P>,
    agentd_socket: Option<P>,
    env: Vec<(Name, P)>,
}

impl PolicyInput {
    fn inputs(&self) -> Inputs {
        Inputs {
            config: SandboxConfig {
                mode: MODES[self.mode as usize % 3],
                network: if self.network {
                    Network::Host
                } else {
                    Network::None
                },
                writable_roots: self.writable_roots.iter().take(8).map(P::path).collect(),
                caches: self.caches.iter().take(8).cloned().collect(),
                env: self
                    .config_env
                    .iter()
                    .take(8)
                    .map(|(k, v)| (k.name(), v.clone()))
                    .collect(),
                env_pass: self.env_pass.iter().take(8).map(Name::name).collect(),
                ..SandboxConfig::default()
            },
            session: self.session.request(),
            turn: self.turn.request(),
            grants: self.grants.iter().take(8).map(G::grant).collect(),
            call_grants: self.call_grants.iter().take(8).map(G::grant).collect(),
            workspace: self.workspace.path(),
            home: self.home.as_ref().map(P::path),
            xdg_runtime_dir: self.xdg_runtime_dir.as_ref().map(P::path),
            agentd_dirs: self.agentd_dirs.iter().take(4).map(P::path).collect(),
            agentd_socket: self.agentd_socket.as_ref().map(P::path),
            env: self
                .env
                .iter()
                .take(16)
                .map(|(k, v)| (k.name(), v.path().to_string_lossy().into_owned()))
                .collect(),
            found_hidden: Vec::new(),
        }
    }
}

/// Paths hidden whatever the workspace: the home's credential paths and the system
/// sockets (agentd's own directories are hidden unless they hold the workspace).
fn always_hidden(inputs: &Inputs) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = SYSTEM_HIDDEN.iter().map(PathBuf::from).collect();
    if let Some(h) = inputs.home.as_deref().filter(|h| h.is_absolute()) {
        let h = normalize(h);
        v.extend(HOME_HIDDEN.iter().map(|r| h.join(r)));
    }
    v.retain(|p| p != Path::new("/"));
    v
}

fn assert_hidden(hidden: &[PathBuf], p: &Path, what: &str) {
    assert!(
        hidden.iter().any(|h| is_within(p, h)),
        "{what}: {} is not hidden (hidden set {hidden:?})",
        p.display()
    );
}

pub fn run(input: &PolicyInput) {
    let inputs = input.inputs();
    let pol = effective(&inputs);
    if let Err(e) = pol.check() {
        panic!("policy check: {e}\n{pol:#?}");
    }
    // Pure: the same inputs give the same policy.
    let again = effective(&inputs);
    assert_eq!(pol, again, "effective is not deterministic");
    assert_eq!(pol.digest(), again.digest());

    let unhidden: Vec<PathBuf> = inputs
        .call_grants
        .iter()
        .filter_map(|g| match g {
            Grant::ReadHidden { path } => Some(normalize(path)),
            _ => None,
        })
        .collect();
    for p in always_hidden(&inputs) {
        if !unhidden.contains(&p) {
            assert_hidden(&pol.hidden, &p, "a default-hidden path");
        }
    }
    for r in &pol.writable_roots {
        assert!(
            !pol.hidden.iter().any(|h| is_within(r, h)),
            "writable root {} lies in a hidden path",
            r.display()
        );
    }
    // Session grants never unhide: the same grants for the whole session hide all.
    let mut session_only = inputs.clone();
    session_only.grants.append(&mut session_only.call_grants);
    let pol2 = effective(&session_only);
    for p in always_hidden(&session_only) {
        assert_hidden(&pol2.hidden, &p, "with session grants");
    }
    // The environment: nothing of agentd's, nothing secret-looking unless config names it.
    let named: Vec<&String> = inputs
        .config
        .env
        .keys()
        .chain(inputs.config.env_pass.iter())
        .collect();
    for k in pol.env.keys() {
        assert!(
            !k.to_ascii_uppercase().starts_with("AGENTD_"),
            "{k} reaches the command"
        );
        assert!(
            !is_denied(k) || named.contains(&k),
            "{k} reaches the command though config does not name it"
        );
    }
    let _ = pol.to_record();
    let _: BTreeMap<_, _> = pol.env;
}

//! Daemon lifecycle (docs/protocol.md#the-socket): the home lock, the socket (0700 dir, 0600 socket,
//! stale-socket detection), serving, and the shutdown sequence.
//!
//! Shutdown order matters: running turns are ended first (their `turn_ended` is
//! durable before anything closes), then the listener stops accepting, connections
//! finish in-flight calls and flush their responses, and finally the socket file is
//! unlinked (unless a service manager passed it: `activation`) and the lock released.

use crate::activation::{self, Activation};
use crate::api::{self, Api};
use crate::config::Config;
use crate::registry::Registry;
use crate::server::Listener;
use crate::store::Home;
use std::fs::{self, File};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;

pub struct Options {
    pub home: PathBuf,
    pub socket: PathBuf,
    pub config: PathBuf,
    /// What a service manager handed over (inherited socket, notify socket).
    pub activation: Activation,
}

pub async fn run(opts: Options) -> Result<(), String> {
    // SIGTERM and SIGINT are caught from here on, before the socket exists: a client
    // that saw the daemon answer may stop it at once, and that stop must be clean.
    let signals = StopSignals::install();
    let config = Config::load(&opts.config)?;
    crate::store::set_group_sync(config.group_sync);
    // The socket must be 0600 from birth; a chmod after bind would race a connect.
    unsafe { libc::umask(0o077) };
    let home = Home::open(&opts.home).map_err(|e| format!("home {}: {e}", opts.home.display()))?;
    let _lock = lock_home(&home)?;
    // Temp files of creates cut short by a crash; only safe to remove under the lock.
    let swept = crate::sweep::sweep_leftovers(&home);
    // Per-command cgroups of daemons killed before they removed them; before any command
    // of ours runs (docs/sandbox.md#when-the-daemon-dies).
    #[cfg(target_os = "linux")]
    crate::tools::sandboxing::sweep_cgroups(agentd_sandbox::Owners::Gone);
    let mut activation = opts.activation;
    let (listener, managed_by) =
        activation::listener(&mut activation, &opts.socket, || bind_socket(&opts.socket))?;
    if let Some(m) = managed_by {
        crate::provider::preflight::set_service_manager(m.as_str());
    }
    let started = std::time::Instant::now();
    let store = open_store(&home, &config).await?;
    let registry =
        Registry::open_with(home, config, store).map_err(|e| format!("index sessions: {e}"))?;
    registry
        .leftover_tmp_removed
        .store(swept.removed, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        socket = %opts.socket.display(),
        home = %registry.home.root().display(),
        store = %registry.store.describe(),
        sessions = registry.sessions_total(),
        durability = registry.config.durability.as_str(),
        ready_ms = started.elapsed().as_millis() as u64,
        "agentd ready"
    );
    activation.ready(&format!("{} sessions", registry.sessions_total()));
    let shutdown_requested = CancellationToken::new();
    let stop_serving = CancellationToken::new();
    let turns = crate::turn::TurnManager::new(registry.clone());
    let mut methods = api::methods(Api {
        registry: registry.clone(),
        turns: turns.clone(),
        shutdown_requested: shutdown_requested.clone(),
    });
    methods
        .merge(crate::verbs::methods(registry.clone(), turns.clone()))
        .map_err(|e| format!("register session verbs: {e}"))?;
    let server = tokio::spawn(
        Listener {
            listener,
            methods,
            max_message_bytes: registry.config.max_message_bytes,
            shutdown: stop_serving.clone(),
            connections: registry.connections.clone(),
            direct: Some(std::sync::Arc::new(api::DirectCalls::new(registry.clone()))),
        }
        .run(),
    );
    // Turns a crash cut finish now (docs/durability.md).
    turns.resume_marked();
    // Open goals go on (docs/goals.md).
    turns.resume_goals();
    if managed_by.is_some() && registry.config.idle_exit_s > 0 {
        let (r, t) = (registry.clone(), turns.clone());
        tokio::spawn(activation::idle_exit(
            std::time::Duration::from_secs(registry.config.idle_exit_s),
            move || {
                r.connections.load(std::sync::atomic::Ordering::Relaxed) == 0
                    && t.running_count() == 0
                    && r.loaded_count() == 0
            },
            shutdown_requested.clone(),
        ));
    }
    wait_for_stop(&shutdown_requested, signals).await;
    tracing::info!("shutting down");
    activation.stopping("ending running turns");
    turns.interrupt_all("daemon_shutdown").await;
    // MCP servers go after the turns that used them ended durably, each as a whole
    // process group, in parallel.
    turns.mcp.stop_all().await;
    // Whatever is still in one of our per-command cgroups (a hook, a command cut by the
    // interrupts above) is killed and the cgroups go.
    #[cfg(target_os = "linux")]
    let _ = tokio::task::spawn_blocking(|| {
        crate::tools::sandboxing::sweep_cgroups(agentd_sandbox::Owners::Own)
    })
    .await;
    stop_serving.cancel();
    let _ = server.await;
    // Nobody can connect any more: the socket file goes now, before the last commits.
    // An inherited socket is the service manager's and stays.
    if managed_by.is_none() {
        let _ = fs::remove_file(&opts.socket);
    }
    // Every command already queued to an actor (appends a client sent before the
    // shutdown) is committed before the runtime goes away: a query is served only after
    // everything queued ahead of it.
    for h in registry.loaded_handles() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), h.query(|_| ())).await;
    }
    // Nothing more is written: a shared store's leases go back to the pool now, so
    // another daemon can take the sessions over at once.
    let store = registry.store.clone();
    let _ = tokio::task::spawn_blocking(move || store.shutdown()).await;
    tracing::info!("stopped");
    Ok(())
}

/// The store `config` names: the home's files, or a PostgreSQL database.
async fn open_store(
    home: &Home,
    config: &Config,
) -> Result<std::sync::Arc<dyn crate::store::LogStore>, String> {
    let Some(url) = config.store.clone() else {
        return Ok(std::sync::Arc::new(crate::store::FileStore {
            home: home.clone(),
        }));
    };
    let opts = crate::pgstore::PgOptions {
        spec: crate::pgstore::ConnSpec {
            url,
            password_file: config.store_password_file.clone(),
        },
        lease: std::time::Duration::from_secs_f64(config.lease_s),
        owner_id: crate::pgstore::home_owner_id(home.root())?,
    };
    let store = tokio::task::spawn_blocking(move || crate::pgstore::PgStore::open(&opts))
        .await
        .map_err(|e| format!("open store: {e}"))??;
    Ok(store)
}

/// SIGTERM and SIGINT, caught (a signal that arrives before they are awaited waits in
/// its stream).
struct StopSignals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl StopSignals {
    fn install() -> StopSignals {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => StopSignals(Some((term, int))),
            _ => StopSignals(None),
        }
    }
}

async fn wait_for_stop(requested: &CancellationToken, signals: StopSignals) {
    let Some((mut term, mut int)) = signals.0 else {
        requested.cancelled().await;
        return;
    };
    tokio::select! {
        _ = requested.cancelled() => {}
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// One daemon per home: a non-blocking exclusive flock held for the process lifetime.
fn lock_home(home: &Home) -> Result<File, String> {
    let path = home.lock_path();
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("lock {}: {e}", path.display()))?;
    // SAFETY: flock on a valid open fd.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(format!(
            "another agentd already runs with home {} (lock {} is held); stop it with `agentctl daemon stop` or use another --home",
            home.root().display(),
            path.display()
        ));
    }
    let _ = file.set_len(0);
    let _ = std::io::Write::write_all(&mut &file, format!("{}\n", std::process::id()).as_bytes());
    Ok(file)
}

fn bind_socket(path: &Path) -> Result<UnixListener, String> {
    let dir = path
        .parent()
        .ok_or_else(|| format!("socket path {} has no directory", path.display()))?;
    if !dir.exists() {
        fs::create_dir_all(dir).map_err(|e| format!("socket dir {}: {e}", dir.display()))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("socket dir {}: {e}", dir.display()))?;
    }
    let meta = fs::metadata(dir).map_err(|e| format!("socket dir {}: {e}", dir.display()))?;
    let uid = unsafe { libc::geteuid() };
    if meta.mode() & 0o077 != 0 {
        // An existing directory is not ours to re-permission (it may be shared, like
        // /tmp); the socket itself is still 0600 and peers are uid-checked.
        tracing::warn!(dir = %dir.display(), mode = format!("{:o}", meta.mode() & 0o777), "socket directory is not 0700");
    }
    if meta.uid() != uid {
        return Err(format!(
            "socket dir {} is owned by uid {}, not by us ({uid})",
            dir.display(),
            meta.uid()
        ));
    }
    if let Ok(meta) = fs::symlink_metadata(path) {
        // Never delete something that is not a socket (a file a user put there, a
        // symlink): refuse and say so.
        if !meta.file_type().is_socket() {
            return Err(format!(
                "socket path {} exists and is not a socket; refusing to remove it (move it away or use --socket)",
                path.display()
            ));
        }
        // Only a refused connect proves the socket is stale; a live socket means another
        // daemon serves it and must not be hijacked.
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(format!(
                    "another agentd is already listening on {}",
                    path.display()
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                fs::remove_file(path)
                    .map_err(|e| format!("remove stale socket {}: {e}", path.display()))?;
            }
            Err(e) => {
                return Err(format!(
                    "socket path {} exists and is not a usable socket: {e}",
                    path.display()
                ));
            }
        }
    }
    // 0600 from birth: bind under a umask that clears the execute bits too, then
    // return to the daemon-wide 0077.
    unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    unsafe { libc::umask(0o077) };
    let listener = bound.map_err(|e| format!("bind {}: {e}", path.display()))?;
    Ok(listener)
}

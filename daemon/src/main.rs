//! `agentd`: runs the daemon in the foreground until SIGTERM/SIGINT or `agentd/shutdown`.

use clap::Parser;

mod cli;
use cli::Args;

// Loading a Log allocates a JSON tree per event; mimalloc makes that markedly cheaper
// than the system allocator (cold load throughput, peak RSS).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// Part of the mimalloc library the allocator above links (`mimalloc.h`).
extern "C" {
    fn mi_collect(force: bool);
    #[cfg(target_os = "linux")]
    fn mi_option_set(option: libc::c_int, value: libc::c_long);
}

/// `mi_option_arena_eager_commit` in `mimalloc.h`'s `mi_option_t`.
#[cfg(target_os = "linux")]
const MI_OPTION_ARENA_EAGER_COMMIT: libc::c_int = 4;

/// Commits mimalloc's arena memory as it is used instead of all at once. mimalloc's
/// default on Linux commits a whole arena when it reserves it; the daemon then kept
/// about 15 MiB more resident after loading a 65 MiB Log (108 vs 93 MiB in the history
/// bench) and peaked about 25 MiB higher through its first context, for no measured
/// gain in speed (docs/performance.md). `MIMALLOC_ARENA_EAGER_COMMIT` in the environment still
/// decides when set.
///
/// Runs as an ELF constructor: the option is read when the first arena is reserved,
/// which is the first allocation, before `main`. It allocates nothing itself.
#[cfg(target_os = "linux")]
extern "C" fn commit_arenas_on_demand() {
    // SAFETY: getenv reads the environment with a NUL-terminated name; nothing else
    // runs yet. mi_option_set takes plain integers.
    unsafe {
        if libc::getenv(c"MIMALLOC_ARENA_EAGER_COMMIT".as_ptr()).is_null() {
            mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        }
    }
}

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static COMMIT_ARENAS_ON_DEMAND: extern "C" fn() = commit_arenas_on_demand;

/// Returns the pages mimalloc holds freed to the OS now (it otherwise purges them only
/// on later allocations, which an idle daemon does not make).
fn release_freed() {
    // SAFETY: mi_collect takes a flag and is safe to call from any thread.
    unsafe { mi_collect(true) }
}
use std::process::ExitCode;

fn main() -> ExitCode {
    // The command sandbox's helper is this binary re-executed: it must run before
    // anything else (in particular before PR_SET_DUMPABLE below, which would stop it
    // writing its own uid map).
    #[cfg(target_os = "linux")]
    if agentd_sandbox::is_helper_invocation() {
        agentd_sandbox::helper_main();
    }
    let _ = agentd::allocator::RELEASE_FREED.set(release_freed);
    // Not dumpable: /proc/<agentd pid>/environ (and mem, maps, …) become unreadable to
    // other processes of the same uid, so a tool's shell command cannot copy the
    // provider API keys out of the daemon's environment (`/proc/$PPID/environ`), which
    // removing the variables from the child's environment alone does not prevent. It
    // also disables core dumps and same-uid ptrace of the daemon. Root can still read
    // them; tool output is scrubbed of the keys' values as well (`tools::redact`).
    // Linux only (macOS has no PR_SET_DUMPABLE; its hardened runtime is the packager's).
    // SAFETY: prctl(PR_SET_DUMPABLE) takes plain integers and touches no memory.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    // The user's umask, read before `daemon::run` sets the daemon's own to 0077:
    // umask(2) can only be read by setting it, so set and restore at once.
    // SAFETY: umask has no memory-safety preconditions; nothing else runs yet.
    let user_umask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    agentd::tools::set_user_umask(user_umask as u32);
    let args = Args::parse();
    if let Some(cli::Cmd::Store(cli::StoreCmd::Copy { from, to, session })) = &args.command {
        return store_copy(from, to, session.as_deref());
    }
    if let Some(cli::Cmd::Store(cli::StoreCmd::Check { url, password_file })) = &args.command {
        return store_check(url, password_file.clone());
    }
    if let Some(cli::Cmd::Config(cli::ConfigCmd::Check)) = &args.command {
        let path = args
            .config
            .clone()
            .unwrap_or_else(agentd_proto::paths::default_config);
        return config_check(&path);
    }
    // Before any thread exists: it clears LISTEN_*/NOTIFY_SOCKET from the environment.
    let activation = match agentd::activation::Activation::from_env() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("agentd: {msg}");
            return ExitCode::from(1);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTD_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let opts = agentd::daemon::Options {
        home: args.home.unwrap_or_else(agentd_proto::paths::default_home),
        socket: args
            .socket
            .unwrap_or_else(agentd_proto::paths::default_socket),
        config: args
            .config
            .unwrap_or_else(agentd_proto::paths::default_config),
        activation,
    };
    // The sandbox helper is this very executable, through /proc/self/exe: it still runs
    // after the installed binary was replaced or removed by an upgrade.
    #[cfg(target_os = "linux")]
    agentd::tools::sandboxing::install(
        std::path::PathBuf::from("/proc/self/exe"),
        opts.socket.clone(),
        opts.home.clone(),
        opts.config.clone(),
        &std::env::var("AGENTD_SANDBOX_FORCE").unwrap_or_default(),
    );
    if let Err(msg) = agentd::fault::init_from_env() {
        eprintln!("agentd: AGENTD_FAULTS: {msg}");
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentd: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let run = async {
        let r = agentd::daemon::run(opts).await;
        // The spare sandbox helper exits and its cgroup is removed.
        #[cfg(target_os = "linux")]
        if let Some(sb) = agentd::tools::sandboxing::runtime() {
            sb.sandbox.release_spares();
        }
        r
    };
    match rt.block_on(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("agentd: {msg}");
            ExitCode::from(1)
        }
    }
}

/// `agentd config check`: the daemon's own validation of the config file, as one JSON
/// document (what `agentctl doctor` reports from).
fn config_check(path: &std::path::Path) -> ExitCode {
    let run = || -> Result<serde_json::Value, agentd_proto::AgentError> {
        let cfg =
            agentd::config::Config::load(path).map_err(agentd_proto::AgentError::invalid_args)?;
        let providers = cfg.providers_config();
        let default = cfg
            .default_provider
            .clone()
            .unwrap_or_else(|| "openai".to_string());
        let all: serde_json::Map<String, serde_json::Value> = providers
            .all()
            .into_iter()
            .map(|(name, p)| {
                let v = serde_json::json!({"kind": p.kind.as_str(), "api_key_env": p.api_key_env, "model": p.model});
                (name, v)
            })
            .collect();
        Ok(serde_json::json!({
            "path": path.display().to_string(),
            "exists": path.exists(),
            "default_provider": default,
            "default_provider_configured": cfg.default_provider.is_some(),
            "providers": all,
            "turns": {
                "permission_mode": cfg.turns.permission_mode.as_str(),
                "max_iterations": cfg.turns.max_iterations,
            },
        }))
    };
    report("config check", run())
}

/// `agentd store copy`: one JSON document on stdout, the error's exit code on failure.
fn store_copy(from: &str, to: &str, session: Option<&str>) -> ExitCode {
    use agentd::storecopy::{copy, Side};
    use agentd_proto::store_url::redact;
    let run = || -> Result<serde_json::Value, agentd_proto::AgentError> {
        let open = |s: &str, must: bool| {
            Side::open(s, must)
                .map_err(|m| agentd_proto::AgentError::new(agentd_proto::ErrorKind::InvalidArgs, m))
        };
        let src = open(from, true)?;
        let dst = open(to, false)?;
        let copied = copy(&src, &dst, session)?;
        let events: u64 = copied.iter().map(|c| c.events).sum();
        Ok(serde_json::json!({
            "from": redact_if_url(from, redact),
            "to": redact_if_url(to, redact),
            "sessions": copied,
            "events": events,
        }))
    };
    report("store copy", run())
}

/// Prints a `store` command's JSON document (its result, or `{"error": …}` with the
/// message also on stderr) and gives the exit code of its outcome.
fn report(what: &str, res: Result<serde_json::Value, agentd_proto::AgentError>) -> ExitCode {
    match res {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agentd: {what}: {e}");
            println!(
                "{}",
                serde_json::json!({"error": {"kind": e.kind.as_str(), "message": e.message, "details": e.details}})
            );
            ExitCode::from(e.kind.exit_code().clamp(1, 255) as u8)
        }
    }
}

fn store_check(url: &str, password_file: Option<std::path::PathBuf>) -> ExitCode {
    let spec = agentd::pgstore::conn::ConnSpec {
        url: url.to_string(),
        password_file,
    };
    let res = if agentd_proto::store_url::is_postgres_url(url) {
        agentd::pgstore::check::check(&spec)
    } else {
        Err(agentd_proto::AgentError::invalid_args(format!(
            "not a postgres:// URL: {}",
            agentd_proto::store_url::redact(url)
        )))
    };
    report("store check", res)
}

fn redact_if_url(s: &str, redact: fn(&str) -> String) -> String {
    if agentd_proto::store_url::is_postgres_url(s) {
        redact(s)
    } else {
        s.to_string()
    }
}

//! `agentd`: runs the daemon in the foreground until SIGTERM/SIGINT or `agentd/shutdown`.

use clap::Parser;

// Loading a Log allocates a JSON tree per event; mimalloc makes that markedly cheaper
// than the system allocator (cold load throughput, peak RSS).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "agentd",
    version,
    about = "The agentd daemon: owns durable coding-agent session Logs and serves JSON-RPC on a Unix socket."
)]
struct Args {
    /// Home directory for Logs, resources and the lock [env: AGENTD_HOME]
    #[arg(long)]
    home: Option<PathBuf>,
    /// Unix socket path to listen on [env: AGENTD_SOCKET]
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Config file [env: AGENTD_CONFIG]
    #[arg(long)]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
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
    };
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
    match rt.block_on(agentd::daemon::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("agentd: {msg}");
            ExitCode::from(1)
        }
    }
}

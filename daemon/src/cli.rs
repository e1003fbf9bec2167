//! The command line of the `agentd` binary (not part of the library).
//!
//! Architecture Invariant: depends on clap only; the `xtask` crate compiles this file
//! too, to render `agentd.1`.

use clap::Parser;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
agentd runs in the foreground until SIGTERM, SIGINT or `agentd/shutdown`; running turns
end as interrupted, durably, before it exits. It binds its socket (directory 0700,
socket 0600) and removes it on exit, unless a service manager passed one: a systemd
socket unit (LISTEN_FDS) or a launchd `Sockets` entry named Listeners. An inherited
socket is never removed. Under systemd it reports READY=1 and STOPPING=1 (Type=notify).
With `idle_exit_s` set in the config, an activated agentd exits after that many idle
seconds; the service manager starts it again on the next connection.

Environment: AGENTD_HOME, AGENTD_SOCKET, AGENTD_CONFIG, AGENTD_LOG (tracing filter,
default info), AGENTD_DURABILITY (sync|batch|none), and the provider key variables named
in the config (OPENAI_API_KEY, ANTHROPIC_API_KEY by default).

`agentd store copy --from HOME_OR_URL --to URL_OR_HOME [--session SID]` copies sessions
between a file home and a PostgreSQL store (`agentctl store copy` runs it).
`agentd config check` validates the config file as the daemon does at start
(`agentctl doctor` runs it). An invalid config file stops the daemon at start with a
message naming the key and its line.

`agentctl service install` sets agentd up as a login service; `agentctl doctor` checks
the setup.";

#[derive(Parser, Debug)]
#[command(
    name = "agentd",
    version,
    about = "The agentd daemon: owns durable coding-agent session Logs and serves JSON-RPC on a Unix socket.",
    after_help = AFTER_HELP
)]
pub struct Args {
    /// Home directory for Logs, resources and the lock [env: AGENTD_HOME]
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Unix socket path to listen on [env: AGENTD_SOCKET]
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Config file [env: AGENTD_CONFIG]
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

#[derive(clap::Subcommand, Debug)]
pub enum Cmd {
    /// Work on a store without running the daemon.
    #[command(subcommand)]
    Store(StoreCmd),
    /// Check the config file without running the daemon.
    #[command(subcommand)]
    Config(ConfigCmd),
}

#[derive(clap::Subcommand, Debug)]
pub enum ConfigCmd {
    /// Validate the config file (`--config`, AGENTD_CONFIG, else the default path) as
    /// the daemon does at start: every key known, every value of its type, provider
    /// tables complete. Prints one JSON document: the effective default provider and
    /// each provider's kind and key variable, or the error (key and line) with exit 2.
    Check,
}

#[derive(clap::Subcommand, Debug)]
pub enum StoreCmd {
    /// Copy sessions between a file home and a PostgreSQL database, either way, keeping
    /// their ids; each copy is read back and checked (line count and SHA-256). Prints
    /// one JSON document.
    Copy {
        /// Source: a home directory or a postgres:// URL
        #[arg(long)]
        from: String,
        /// Destination: a home directory (created if needed) or a postgres:// URL
        #[arg(long)]
        to: String,
        /// Copy only this session
        #[arg(long)]
        session: Option<String>,
    },
    /// Connect to a PostgreSQL store as the daemon would and report what `agentctl
    /// doctor` shows: the server version, whether the connection uses TLS, the schema
    /// version, the sessions and which hosts hold leases. Only reads. Prints one JSON
    /// document.
    Check {
        /// The store: a postgres:// URL (from the environment, it stays out of the
        /// process list)
        #[arg(long, env = "AGENTD_STORE", hide_env_values = true)]
        url: String,
        /// A file whose first line is the password (config's `store_password_file`)
        #[arg(long)]
        password_file: Option<std::path::PathBuf>,
    },
}

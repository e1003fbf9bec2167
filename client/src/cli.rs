//! The command line of `agentctl`: every command, flag and its help text. The `--help`
//! output is the manual, so the doc comments here are written for users.
//!
//! Architecture Invariant: this file depends on clap (and clap_complete's `Shell`)
//! only. The `xtask` crate compiles it too, to render the man pages and completion
//! scripts that the packages install.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Socket: --socket, else AGENTD_SOCKET, else $XDG_RUNTIME_DIR/agentd/agentd.sock, else
$TMPDIR/agentd-$UID/agentd.sock. Home: --home, else AGENTD_HOME, else
$XDG_STATE_HOME/agentd (~/.local/state/agentd).

When no daemon answers, agentctl starts one (`agentd --socket S [--home H]`, found next to
agentctl, else on PATH, or named by AGENTD_BIN), detached, logging to <home>/agentd.log.

Output: human text by default; with --json exactly one JSON document on stdout,
{\"ok\":true,...} or {\"ok\":false,\"error\":{\"kind\",\"message\",\"details\"}}
(exception: `log --follow --json` streams NDJSON, one event per line).

Exit codes: 0 ok, 1 error, 2 usage / invalid_args / not_found, 3 permission_denied /
outside_workspace, 4 daemon_unavailable, 5 busy / seq_conflict, 130 interrupted.";

/// Command line client for agentd, the daemon that keeps AI coding-agent sessions as
/// durable, append-only Logs.
#[derive(Debug, Parser)]
#[command(name = "agentctl", version, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    /// Unix socket of the daemon.
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Daemon home (Logs, lock, agentd.log); used when agentctl starts the daemon.
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// Print exactly one JSON document on stdout instead of human text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start, stop or inspect the daemon.
    #[command(subcommand)]
    Daemon(DaemonCmd),
    /// Same as `daemon status`.
    Status,
    /// Print the socket path, starting the daemon if none answers (for editor extensions).
    SocketPath,
    /// Create a new session and print its id.
    New(NewArgs),
    /// List sessions, newest first.
    Ls(LsArgs),
    /// Show a session: workspace, counts, pending tool calls, Log damage.
    Show(SidArg),
    /// Print a session's events, one line each (`seq  time  type  summary`).
    Log(LogArgs),
    /// Append events to a session's Log (for harnesses that run turns themselves).
    Append(AppendArgs),
    /// Open a full-screen chat on a session: the picker of this directory's sessions, a
    /// new session (--new), or the session SID; it follows turns from every client live.
    Chat(ChatArgs),
    /// Create a session in a workspace and run one turn, streaming the answer.
    Run(RunArgs),
    /// Serve the Agent Client Protocol (ACP v1) on stdio, for editors that launch agents
    /// (Zed, JetBrains, Neovim plugins); every ACP session is an agentd session.
    Acp(AcpArgs),
    /// Serve agentd's sessions as an MCP server on stdio, for other agents (Claude Code,
    /// Codex): read-only tools by default (list, search, show, context, tree, checkpoint).
    McpServer(McpServerArgs),
    /// Serve the Codex app-server protocol (v2), so Codex's own clients (`codex --remote`,
    /// its VS Code extension) drive agentd sessions; on stdio, a Unix socket or loopback.
    AppServer(AppServerArgs),
    /// Run a turn in an existing session, streaming the answer.
    Turn(TurnArgs),
    /// Add input to the running turn: it goes with the turn's next provider call.
    Steer(SteerArgs),
    /// Withdraw a queued turn that has not started.
    Dequeue(DequeueArgs),
    /// Set a goal: the daemon keeps running turns toward the objective until the model
    /// declares it done or a budget is spent; --show and --clear read and end it.
    Goal(GoalArgs),
    /// Interrupt the running turn; orphan tool calls get a recorded closure.
    Interrupt(InterruptArgs),
    /// Close tool calls that have no result (orphans) with a recorded error result.
    Reconcile(ReconcileArgs),
    /// Show the exact provider input that replaying the session would send.
    Context(ContextArgs),
    /// Show the deterministic checkpoint and the text replay injects for it.
    Checkpoint(SidArg),
    /// Show what the next turn sends besides the history: the base prompt and the
    /// instruction files (AGENTS.md, CLAUDE.md), each with where it came from.
    Instructions(InstructionsArgs),
    /// List the models clients may offer: the configured ones, and what the models
    /// endpoints of `list_models` providers return.
    Models(ModelsArgs),
    /// Compact old history into a checkpoint event; the Log keeps every event.
    Compact(CompactArgs),
    /// Create a child session from a prefix of a session's Log.
    Fork(ForkArgs),
    /// Draw the fork tree of a session, or of every session in a workspace.
    Tree(TreeArgs),
    /// Import another agent's session (a file, an opencode database) as a new agentd
    /// session, or with --discover every session other agents keep under $HOME.
    Import(ImportArgs),
    /// Show what the session changed in its workspace, as a unified diff per file.
    Diff(DiffArgs),
    /// Put the files the session changed after a seq back as they were there.
    Revert(RevertArgs),
    /// Give a session a new title (recorded as session_info).
    Rename(RenameArgs),
    /// Hide a session from `ls` and workspace trees; it stays loadable.
    Archive(SidArg),
    /// Show an archived session in `ls` and trees again.
    Unarchive(SidArg),
    /// Move a session to the trash under home (or remove it for good with --purge).
    /// Refused while a turn runs; forks keep working.
    Rm(RmArgs),
    /// Bring a session back from the trash.
    Restore(SidArg),
    /// Full-text search over messages, tool arguments and tool output, newest first.
    Search(SearchArgs),
    /// Export a session as Markdown, self-contained HTML, or its raw Log (jsonl).
    Export(ExportArgs),
    /// Token usage (and cost, with [prices] in the config) from provider_usage events.
    Usage(UsageArgs),
    /// Write a commented config.toml.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Run agentd as a login service (systemd user units, launchd agent).
    #[command(subcommand)]
    Service(ServiceCmd),
    /// Print a shell completion script on stdout.
    Completions(CompletionsArgs),
    /// Check socket, home, config, provider keys and service; print the fix for each
    /// problem. Exits 0 only when everything is healthy. Never starts a daemon.
    Doctor,
    /// Move sessions between stores (a file home, a PostgreSQL database).
    #[command(subcommand)]
    Store(StoreCmd),
    /// MCP servers (`[mcp_servers.NAME]` in config.toml): their state, their tools, and
    /// importing entries from another agent's configuration.
    #[command(subcommand)]
    Mcp(McpCmd),
    /// The hooks a turn in a workspace runs (`[[hooks.EVENT]]` in config.toml and the
    /// workspace's .agentd/hooks.toml), and trusting that project file.
    Hooks(HooksArgs),
}

#[derive(Debug, Args)]
pub struct HooksArgs {
    #[command(subcommand)]
    pub cmd: Option<HooksCmd>,
    /// Workspace directory [default: current dir].
    #[arg(long, value_name = "DIR", global = true)]
    pub workspace: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum HooksCmd {
    /// Trust the workspace's .agentd/hooks.toml as it is now; its hooks run from the
    /// next turn. An edit to the file needs trusting again.
    Trust,
}

#[derive(Debug, Subcommand)]
pub enum McpCmd {
    /// The configured MCP servers and, for sessions that started theirs, each server's
    /// state, tool count, pid and last error. MCP tools run outside the workspace
    /// confinement of the built-in file tools.
    List(McpListArgs),
    /// The tools of the MCP servers: a session's (`--session`), or else each configured
    /// server started once, listed and stopped.
    Tools(McpToolsArgs),
    /// Copy MCP server entries from another agent's file (`.mcp.json`, Claude's or
    /// Cursor's `{"mcpServers": {...}}`, or a Codex config.toml) into agentd's
    /// config.toml. Prints the entries (with env values hidden) and writes them only with
    /// --yes: running the commands a file names is code execution.
    Import(McpImportArgs),
}

#[derive(Debug, Args)]
pub struct McpListArgs {
    /// Only this session.
    #[arg(long = "session", value_name = "ID")]
    pub session_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct McpToolsArgs {
    /// Only this server.
    pub server: Option<String>,
    /// The tools of this session's running servers.
    #[arg(long = "session", value_name = "ID")]
    pub session_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct McpImportArgs {
    /// The file to read.
    pub file: PathBuf,
    /// Write the entries into config.toml (entries whose name config already has are
    /// left alone).
    #[arg(long)]
    pub yes: bool,
    /// The config file to write (default: AGENTD_CONFIG, else ~/.config/agentd/config.toml).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum StoreCmd {
    /// Copy sessions between a file home and a postgres:// database, either way,
    /// keeping their ids; each copy is read back and checked (line count and SHA-256).
    /// Runs `agentd store copy`; no daemon is needed.
    Copy(StoreCopyArgs),
}

#[derive(Debug, Args)]
pub struct StoreCopyArgs {
    /// Source: a home directory or a postgres:// URL.
    #[arg(long)]
    pub from: String,
    /// Destination: a home directory (created if needed) or a postgres:// URL.
    #[arg(long)]
    pub to: String,
    /// Copy only this session.
    #[arg(long)]
    pub session: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ServiceCmd {
    /// Write the unit files (or plist) pointing at this agentd, enable and start the
    /// socket. A daemon running without the service manager is stopped first; a unit
    /// file not written by agentctl is never overwritten (without --force).
    Install(ServiceArgs),
    /// Stop and disable the service and remove the files `install` wrote. Keeps the
    /// provider-key env file and the daemon home.
    Uninstall(ServiceArgs),
    /// Whether the service is installed, enabled and running, and which socket clients use.
    Status(ManagerArg),
}

#[derive(Debug, Args)]
pub struct ManagerArg {
    /// Service manager [default: systemd on Linux, launchd on macOS].
    #[arg(long, value_enum, value_name = "M")]
    pub manager: Option<ServiceManager>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ServiceManager {
    /// systemd user units (Linux).
    Systemd,
    /// A launchd agent in the gui domain (macOS).
    Launchd,
}

#[derive(Debug, Args)]
pub struct ServiceArgs {
    /// Print every step (and every file's content) without changing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Overwrite or remove unit files that agentctl did not write.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub manager: ManagerArg,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// Shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Session id.
    pub session_id: String,
    /// Only what this turn changed (its turn_id, as `log` shows on turn_started).
    #[arg(long, value_name = "T", conflicts_with_all = ["from_seq", "to_seq"])]
    pub turn: Option<String>,
    /// Start after this seq [default: the session's first snapshot].
    #[arg(long, value_name = "N")]
    pub from_seq: Option<u64>,
    /// End at this seq [default: the last].
    #[arg(long, value_name = "N")]
    pub to_seq: Option<u64>,
}

#[derive(Debug, Args)]
pub struct RevertArgs {
    /// Session id.
    pub session_id: String,
    /// Restore the files as they were at this seq.
    #[arg(long, value_name = "N")]
    pub to_seq: u64,
    /// Show the files it would restore, and any conflicts, without changing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Also overwrite files changed outside the session since its snapshots (refused
    /// with `conflict`, exit 5, otherwise).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ForkFilesArg {
    /// Leave the workspace files as they are.
    Keep,
    /// Revert the files the parent changed after the fork point (like `revert`).
    Restore,
    /// Check the files at the fork point out into a new directory for the child.
    Worktree,
}

#[derive(Debug, Subcommand)]
pub enum DaemonCmd {
    /// Start the daemon if none answers; print its pid and socket.
    Start,
    /// Ask the daemon to shut down (running turns end as interrupted) and wait until it
    /// is gone. Succeeds when no daemon runs.
    Stop,
    /// Show uptime, session and turn counts, durability mode. Never starts a daemon;
    /// exits 4 when none answers.
    Status,
}

#[derive(Debug, Args)]
pub struct SidArg {
    /// Session id.
    pub session_id: String,
}

#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// Ask the providers' models endpoints again instead of the ten-minute cache.
    #[arg(long)]
    pub refresh: bool,
}

#[derive(Debug, Args)]
pub struct InstructionsArgs {
    /// Session id [default: a new turn in the current directory].
    pub session_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Workspace directory the session's tools are confined to [default: current dir].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Human title shown by `ls` and `tree`.
    #[arg(long, value_name = "T")]
    pub title: Option<String>,
    /// Default model for the session's turns.
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// Default provider (as named in the daemon config) for the session's turns.
    #[arg(long, value_name = "P")]
    pub provider: Option<String>,
    /// Use this id instead of a generated one (1..=128 bytes of [A-Za-z0-9_][A-Za-z0-9_.-]*).
    #[arg(long, value_name = "ID")]
    pub session_id: Option<String>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// The command sandbox's mode (docs/sandbox.md#contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxMode {
    /// Commands write only the workspace, a private /tmp and granted roots.
    #[value(name = "workspace_write")]
    WorkspaceWrite,
    /// Commands write only a private /tmp.
    #[value(name = "read_only")]
    ReadOnly,
    /// No sandbox (recorded).
    #[value(name = "full_access")]
    FullAccess,
}

/// The command sandbox's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NetworkArg {
    None,
    Host,
}

/// `--sandbox MODE` and `--network none|host`.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct SandboxArgs {
    /// How the model's commands are confined [default: config, else workspace_write].
    #[arg(long = "sandbox", id = "sandbox_mode", value_enum, value_name = "MODE")]
    pub mode: Option<SandboxMode>,
    /// Whether the model's commands may use the network [default: config, else none].
    #[arg(long, value_enum, value_name = "NET")]
    pub network: Option<NetworkArg>,
}

impl SandboxArgs {
    /// `{mode?, network?}` for `agentd/create` / `agentd/turn`, when either is set.
    pub fn to_param(self) -> Option<serde_json::Value> {
        if self.mode.is_none() && self.network.is_none() {
            return None;
        }
        let mut v = serde_json::json!({});
        if let Some(m) = self.mode {
            v["mode"] = serde_json::json!(match m {
                SandboxMode::WorkspaceWrite => "workspace_write",
                SandboxMode::ReadOnly => "read_only",
                SandboxMode::FullAccess => "full_access",
            });
        }
        if let Some(n) = self.network {
            v["network"] = serde_json::json!(match n {
                NetworkArg::None => "none",
                NetworkArg::Host => "host",
            });
        }
        Some(v)
    }
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only sessions of this workspace [default: every workspace].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// At most this many sessions (per page with --all).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub limit: usize,
    /// Fetch every page instead of stopping after --limit sessions, archived sessions
    /// included.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Session id.
    pub session_id: String,
    /// Only events with seq greater than N.
    #[arg(long, value_name = "N")]
    pub after_seq: Option<u64>,
    /// Keep printing new events as they are appended (Ctrl-C stops, exit 0). With --json
    /// the output is NDJSON: one event object per line, since it streams.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only these event types (comma separated), e.g. `user_message,assistant_message`.
    /// In follow mode, naming an ephemeral type (text_delta, status, ...) shows it live.
    #[arg(long, value_name = "a,b", value_delimiter = ',')]
    pub types: Vec<String>,
}

#[derive(Debug, Args)]
pub struct AppendArgs {
    /// Session id.
    pub session_id: String,
    /// Event type, e.g. `user_message`. Ephemeral types are refused.
    #[arg(long = "type", value_name = "T")]
    pub kind: String,
    /// The event's data object as JSON; `-` reads it from stdin.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub data: String,
    /// Fail with seq_conflict (exit 5) unless the event would get this seq.
    #[arg(long, value_name = "N")]
    pub expect_seq: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PermissionMode {
    /// Every tool runs.
    Auto,
    /// Mutating tools ask this terminal (denied when stdin is not a terminal).
    Ask,
    /// Mutating tools are denied.
    #[value(name = "read_only")]
    ReadOnly,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Auto => "auto",
            PermissionMode::Ask => "ask",
            PermissionMode::ReadOnly => "read_only",
        }
    }
}

/// How hard the model thinks (`reasoning_effort`, docs/turns-and-providers.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
}

impl Effort {
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

#[derive(Debug, Args)]
pub struct TurnOptions {
    /// Model for this turn [default: the session's].
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// Provider for this turn [default: the session's].
    #[arg(long, value_name = "P")]
    pub provider: Option<String>,
    /// Stop after this many provider calls.
    #[arg(long, value_name = "N")]
    pub max_iterations: Option<u32>,
    /// Which tools may run without asking.
    #[arg(long, value_enum, value_name = "MODE")]
    pub permission_mode: Option<PermissionMode>,
    /// Reasoning effort of this turn [default: the provider config's].
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub effort: Option<Effort>,
    /// An image sent with the prompt (PNG, JPEG, GIF or WebP, up to 20 MiB); repeatable.
    #[arg(long = "image", value_name = "PATH")]
    pub images: Vec<PathBuf>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The prompt.
    pub prompt: String,
    /// Workspace of the new session [default: current dir].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Title of the new session [default: the prompt's first line, clipped].
    #[arg(long, value_name = "T")]
    pub title: Option<String>,
    #[command(flatten)]
    pub turn: TurnOptions,
}

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Session to attach to [default: a picker of the current directory's sessions].
    #[arg(conflicts_with = "new")]
    pub session_id: Option<String>,
    /// Start a new session in the current directory.
    #[arg(long)]
    pub new: bool,
    /// Model of the chat's turns [default: the session's].
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// Which tools may run without asking (`ask` asks in the chat).
    #[arg(long, value_enum, value_name = "MODE")]
    pub permission_mode: Option<PermissionMode>,
    /// Reasoning effort of the chat's turns [default: the provider config's].
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub effort: Option<Effort>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

#[derive(Debug, Args)]
pub struct TurnArgs {
    /// Session id.
    pub session_id: String,
    /// The prompt.
    pub prompt: String,
    /// When a turn is running, queue this one behind it (durably) instead of failing
    /// busy; prints the turn id and returns without waiting.
    #[arg(long)]
    pub queue: bool,
    #[command(flatten)]
    pub turn: TurnOptions,
}

#[derive(Debug, Args)]
pub struct SteerArgs {
    /// Session id.
    pub session_id: String,
    /// The input for the running turn.
    pub input: String,
    /// An image that goes with the input (PNG, JPEG, GIF or WebP, up to 20 MiB);
    /// repeatable.
    #[arg(long = "image", value_name = "PATH")]
    pub images: Vec<PathBuf>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("goal_action").args(["objective", "show", "clear"]).required(true)))]
pub struct GoalArgs {
    /// Session id.
    pub session_id: String,
    /// The objective the session's turns work toward.
    pub objective: Option<String>,
    /// Turns the goal may run (default 20).
    #[arg(long, value_name = "N", conflicts_with_all = ["show", "clear"])]
    pub max_turns: Option<u32>,
    /// Provider tokens (input + output) the goal may spend.
    #[arg(long, value_name = "TOKENS", conflicts_with_all = ["show", "clear"])]
    pub budget: Option<u64>,
    /// Model of the goal's turns (default: the session's).
    #[arg(long, value_name = "MODEL", conflicts_with_all = ["show", "clear"])]
    pub model: Option<String>,
    /// Show the session's goal and how much of its budget is spent.
    #[arg(long)]
    pub show: bool,
    /// End the open goal (a running turn finishes; no further turn starts).
    #[arg(long)]
    pub clear: bool,
}

#[derive(Debug, Args)]
pub struct DequeueArgs {
    /// Session id.
    pub session_id: String,
    /// The queued turn's id (printed by `turn --queue`).
    pub turn_id: String,
}

#[derive(Debug, Args)]
pub struct InterruptArgs {
    /// Session id.
    pub session_id: String,
    /// Why; recorded in the turn_ended event.
    #[arg(long, value_name = "R")]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Session id.
    pub session_id: String,
    /// List the orphan calls without recording anything.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DialectArg {
    /// OpenAI Responses API items.
    Responses,
    /// Chat Completions messages.
    Chat,
    /// Anthropic Messages API.
    Anthropic,
}

#[derive(Debug, Args)]
pub struct ContextArgs {
    /// Session id.
    pub session_id: String,
    /// Inspect the context as it was after event N.
    #[arg(long, value_name = "N")]
    pub after_seq: Option<u64>,
    /// Wire shape of the items.
    #[arg(long, value_enum, value_name = "DIALECT")]
    pub dialect: Option<DialectArg>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
    /// A pure reducer over events; same Log, same bytes.
    Deterministic,
    /// Ask the session's provider for a summary; falls back to deterministic.
    Model,
}

impl StrategyArg {
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyArg::Deterministic => "deterministic",
            StrategyArg::Model => "model",
        }
    }
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Session id.
    pub session_id: String,
    /// Keep this many recent events raw [default: the config's `[compaction] tail_events`, 40].
    #[arg(long, value_name = "N")]
    pub tail_events: Option<usize>,
    /// Show the plan without recording anything.
    #[arg(long)]
    pub dry_run: bool,
    /// How the summary is made.
    #[arg(long, value_enum, value_name = "S")]
    pub strategy: Option<StrategyArg>,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Parent session id (never modified).
    pub session_id: String,
    /// Copy events up to and including this seq [default: the last].
    #[arg(long, value_name = "N")]
    pub to_seq: Option<u64>,
    /// Append a deterministic branch_summary of what the parent did after the cut.
    #[arg(long)]
    pub summarize: bool,
    /// Show what would be created without writing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Id of the child [default: generated].
    #[arg(long, value_name = "ID")]
    pub child_session_id: Option<String>,
    /// Title of the child.
    #[arg(long, value_name = "T")]
    pub title: Option<String>,
    /// What happens to the workspace files [daemon default: keep].
    #[arg(long, value_enum, value_name = "MODE")]
    pub files: Option<ForkFilesArg>,
    /// With --files restore: overwrite files changed outside the session.
    #[arg(long)]
    pub force: bool,
    /// With --files worktree: the new directory [default: <home>/worktrees/<child id>].
    #[arg(long, value_name = "DIR")]
    pub worktree: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TreeArgs {
    /// Draw this session and the forks below it [default: every tree of --workspace].
    pub session_id: Option<String>,
    /// Draw every session tree of this workspace [default: current dir].
    #[arg(long, value_name = "DIR", conflicts_with = "session_id")]
    pub workspace: Option<PathBuf>,
    /// Stop descending after N levels (cut nodes are marked).
    #[arg(long, value_name = "N")]
    pub max_depth: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFormat {
    /// pi session JSONL.
    Pi,
    /// Pixir Log (NDJSON with the same envelope).
    Pixir,
    /// Codex rollout JSONL.
    Codex,
    /// Claude Code transcript JSONL (~/.claude/projects/*/*.jsonl).
    Claude,
    /// opencode database (opencode.db) or `opencode export` JSON.
    Opencode,
    /// Gemini CLI chat JSONL (~/.gemini/tmp/*/chats/*.jsonl).
    Gemini,
    /// Recognise the format from the content.
    Auto,
}

impl ImportFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ImportFormat::Pi => "pi",
            ImportFormat::Pixir => "pixir",
            ImportFormat::Codex => "codex",
            ImportFormat::Claude => "claude",
            ImportFormat::Opencode => "opencode",
            ImportFormat::Gemini => "gemini",
            ImportFormat::Auto => "auto",
        }
    }
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Source format.
    #[arg(long, value_enum, default_value = "auto")]
    pub format: ImportFormat,
    /// The file to import (never modified).
    #[arg(required_unless_present = "discover")]
    pub file: Option<PathBuf>,
    /// The session to take from a source holding many (an opencode database)
    /// [default: the newest session of --workspace].
    #[arg(long = "session", value_name = "ID")]
    pub source_session: Option<String>,
    /// Find the sessions other agents keep under $HOME and import each one not
    /// imported yet.
    #[arg(long, conflicts_with_all = ["file", "source_session", "workspace"])]
    pub discover: bool,
    /// With --discover: only this agent's sessions (claude, codex, pi, opencode, gemini).
    #[arg(long, value_name = "NAME", requires = "discover")]
    pub agent: Option<String>,
    /// With --discover: only sessions changed on or after DATE (YYYY-MM-DD or RFC 3339).
    #[arg(long, value_name = "DATE", requires = "discover")]
    pub since: Option<String>,
    /// With --discover: list what would be imported, import nothing.
    #[arg(long, requires = "discover")]
    pub dry_run: bool,
    /// Workspace of the new session [default: the one recorded in the file].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Fail instead of importing with warnings: every prompt, answer, tool call and
    /// result must carry over exactly or with a recorded reason.
    #[arg(long)]
    pub strict: bool,
}

/// Options of `agentctl acp`.
#[derive(Debug, Clone, Args)]
pub struct AcpArgs {
    /// Model for new sessions (e.g. `gpt-5`, `script:/abs/path.json`). Repeat it to offer
    /// several in the editor's model picker; the first is the default. Without it the
    /// daemon's configured default applies.
    #[arg(long = "model", value_name = "MODEL")]
    pub models: Vec<String>,
    /// Provider for new sessions (a name from config.toml).
    #[arg(long)]
    pub provider: Option<String>,
    /// Initial mode of every session: `ask` (mutating tools ask the editor), `auto` or
    /// `read_only`. The editor can switch it per session.
    #[arg(long, value_name = "MODE", default_value = "ask")]
    pub mode: String,
    /// Sessions per `session/list` page.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub page_size: usize,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Options of `agentctl app-server`.
#[derive(Debug, Clone, Args)]
pub struct AppServerArgs {
    /// Where to serve: `stdio://` (JSON lines on stdin/stdout), `unix://PATH` (WebSocket
    /// over a Unix socket, what `codex --remote unix://PATH` connects to; mode 0600) or
    /// `ws://127.0.0.1:PORT` (WebSocket on a loopback TCP port).
    #[arg(long, value_name = "URL", default_value = "stdio://")]
    pub listen: String,
    /// Accept `ws://` on an address other than loopback. Requires --auth-token-env.
    #[arg(long)]
    pub allow_remote: bool,
    /// Name of the environment variable holding the bearer token WebSocket clients must
    /// send (`Authorization: Bearer TOKEN`; Codex: `--remote-auth-token-env VAR`).
    #[arg(long, value_name = "VAR")]
    pub auth_token_env: Option<String>,
    /// Model for new threads (`provider:model`, a model name, `script:/abs/path.json`);
    /// without it the daemon's default applies. Codex's model picker offers the daemon's
    /// choices (`agentd/models`) either way.
    #[arg(long = "model", value_name = "MODEL")]
    pub model: Option<String>,
    /// Permission mode when the client names no approval policy: `ask` (mutating tools
    /// ask the client), `auto` or `read_only`.
    #[arg(long, value_name = "MODE", default_value = "ask")]
    pub mode: String,
}

/// Options of `agentctl mcp-server`.
#[derive(Debug, Clone, Args)]
pub struct McpServerArgs {
    /// Also offer the tools that change sessions: `fork` and `turn` (runs a model turn
    /// in a session). Off by default: a read-only server cannot alter what it serves.
    #[arg(long)]
    pub allow_writes: bool,
}

// ---- Session verbs (docs/sessions-and-history.md#session-verbs); run by `verbs.rs` ----

#[derive(Debug, Args)]
pub struct RenameArgs {
    /// Session id.
    pub session_id: String,
    /// The new title (one line, at most 512 bytes).
    pub title: String,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// Session id.
    pub session_id: String,
    /// Remove the Log and resources for good instead of moving them to the trash
    /// (also purges a session already in the trash). Asks first unless --yes.
    #[arg(long)]
    pub purge: bool,
    /// Do not ask before purging.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Text to find (literal, case-insensitive unless --case-sensitive).
    pub query: String,
    /// Treat QUERY as a regular expression.
    #[arg(long)]
    pub regex: bool,
    /// Match case exactly.
    #[arg(long)]
    pub case_sensitive: bool,
    /// Only sessions of this workspace.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Only these event types (comma separated): user_message, assistant_message,
    /// tool_call, tool_result.
    #[arg(long, value_name = "a,b", value_delimiter = ',')]
    pub types: Vec<String>,
    /// At most this many hits.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: usize,
    /// Continue after the `next_cursor` of a previous search.
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// A Markdown transcript.
    Markdown,
    /// One self-contained HTML file (no network assets), tool calls collapsible.
    Html,
    /// The Log's bytes as they are.
    Jsonl,
    /// A Claude Code transcript (`claude --resume ID`).
    ClaudeCode,
    /// A Codex rollout (`codex resume ID`).
    Codex,
    /// A pi session file (`pi --session ID`).
    Pi,
}

impl ExportFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ExportFormat::Markdown => "markdown",
            ExportFormat::Html => "html",
            ExportFormat::Jsonl => "jsonl",
            ExportFormat::ClaudeCode => "claude-code",
            ExportFormat::Codex => "codex",
            ExportFormat::Pi => "pi",
        }
    }
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Session id.
    pub session_id: String,
    #[arg(long, value_enum, default_value = "markdown")]
    pub format: ExportFormat,
    /// Write to this file (replaced atomically) instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "install")]
    pub output: Option<PathBuf>,
    /// With claude-code, codex or pi: write the session where that agent looks for its
    /// sessions (as a new session, never over one) and print the command that resumes it.
    #[arg(long)]
    pub install: bool,
    /// With --install: the home directory the agent's directory is under [default: $HOME].
    #[arg(long, value_name = "DIR", requires = "install")]
    pub home: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UsageBy {
    Model,
    Session,
    Day,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Only this session [default: every session].
    pub session_id: Option<String>,
    /// Only usage recorded since this date (YYYY-MM-DD) or RFC 3339 time.
    #[arg(long, value_name = "DATE")]
    pub since: Option<String>,
    /// Group rows by.
    #[arg(long, value_enum, default_value = "model")]
    pub by: UsageBy,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Write a commented config.toml (at --config, AGENTD_CONFIG or
    /// $XDG_CONFIG_HOME/agentd/config.toml); refuses to replace one unless --force.
    Init {
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
        /// Where to write it.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

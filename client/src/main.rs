//! `agentctl`: the command line client of agentd (docs/getting-started.md#using-it).
//!
//! Module map: `cli` (the clap surface, which is the manual), `params` (arguments →
//! JSON-RPC params, pure), `rpc` (NDJSON JSON-RPC client over the Unix socket),
//! `daemon` (socket discovery, auto-start, stop), `stream` (streamed turns and
//! `log --follow`), `render` (human text, pure), `output` (JSON documents, errors,
//! exit codes), `commands` (runs one command), `service` (login-service plans),
//! `service_status`, `service_cmd` (`service`, `completions`), `doctor` (setup checks),
//! `acp` (the ACP agent on stdio), `app_server` (the Codex app-server bridge), `mcp_server`
//! (the MCP server on stdio), `mcp` (`mcp import` and doctor's MCP probe), `view` (a
//! session's events folded into a conversation view, no terminal library), `chat`
//! (`agentctl chat`, the full-screen terminal client).

mod acp;
mod app_server;
mod chat;
mod cli;
mod commands;
mod daemon;
mod discover;
mod doctor;
mod mcp;
mod mcp_server;
mod output;
mod params;
mod render;
mod rpc;
mod service;
mod service_cmd;
mod service_status;
mod stream;
mod verbs;
mod view;

use clap::error::ErrorKind as ClapErrorKind;
use clap::Parser;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match cli::Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let informational = matches!(
                e.kind(),
                ClapErrorKind::DisplayHelp | ClapErrorKind::DisplayVersion
            );
            // Usage errors under --json still print one JSON document (exit 2).
            if !informational && args.iter().any(|a| a == "--json") {
                std::process::exit(output::fail(true, &commands::usage_error(&e)));
            }
            e.exit()
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let err = agentd_proto::AgentError::internal(format!("cannot start runtime: {e}"));
            std::process::exit(output::fail(cli.json, &err));
        }
    };
    let code = runtime.block_on(commands::run(cli));
    // Drop the runtime (and any connection) before exiting so replies are flushed.
    drop(runtime);
    std::process::exit(code);
}

//! The `service` and `completions` commands: argument handling around `service`'s
//! plans and clap_complete's generators.

use crate::cli::{Cli, ServiceCmd};
use crate::daemon::Target;
use crate::output::Outcome;
use crate::service::{self, Manager, Places};
use agentd_proto::AgentError;
use clap::CommandFactory;
use serde_json::json;

pub async fn run(cmd: &ServiceCmd, target: &Target) -> Result<Outcome, AgentError> {
    let places = Places::from_env()?;
    let manager = |m: Option<Manager>| m.unwrap_or_else(Manager::native);
    match cmd {
        ServiceCmd::Install(a) => {
            let m = manager(a.manager.manager);
            let plan = service::plan_install(m, &places, &target.socket, a.force).await?;
            if !a.dry_run {
                service::execute(&plan).await?;
            }
            let (value, human) = service::report(m, &plan, a.dry_run);
            Ok(Outcome::Result { value, human })
        }
        ServiceCmd::Uninstall(a) => {
            let m = manager(a.manager.manager);
            let plan = service::plan_uninstall(m, &places, a.force)?;
            if !a.dry_run {
                service::execute(&plan).await?;
            }
            let (value, human) = service::report(m, &plan, a.dry_run);
            Ok(Outcome::Result { value, human })
        }
        ServiceCmd::Status(a) => {
            let (value, human) =
                crate::service_status::status(manager(a.manager), &places, &target.socket).await?;
            Ok(Outcome::Result { value, human })
        }
    }
}

/// The completion script for `shell`, generated from the same clap definition that
/// parses the command line, so it never lags behind it.
pub fn script(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "agentctl", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

pub fn completions(shell: clap_complete::Shell, human: bool) -> Result<Outcome, AgentError> {
    let text = script(shell);
    if human {
        // Raw script only, so `agentctl completions bash > file` works.
        return Ok(Outcome::Result {
            value: json!({}),
            human: text,
        });
    }
    Ok(Outcome::Result {
        value: json!({"shell": shell.to_string(), "script": text}),
        human: String::new(),
    })
}

//! `cargo xtask dist [DIR]`: renders what the packages install besides the binaries,
//! from the same sources the binaries use, into DIR (default `target/dist`):
//!
//! - `man/agentd.1`, `man/agentctl.1` and `man/agentctl-<command>.1` (clap_mangen, from
//!   the clap definitions in `daemon/src/cli.rs` and `client/src/cli.rs`);
//! - `completions/agentctl.bash`, `completions/_agentctl`, `completions/agentctl.fish`
//!   (clap_complete);
//! - `systemd/agentd.socket` and `systemd/agentd.service` with `ExecStart` set to
//!   `BINDIR/agentd` (`--bindir`, default `/usr/bin`), the user units of the packages.
//!
//! `cargo xtask tidy`: the layering checks of [`tidy`] (crate graph against
//! ARCHITECTURE.md, a pure `agentd-history`, no module cycles, crate docs, file sizes).
//!
//! The CLI files are compiled in with `#[path]`: they depend on clap alone, so this
//! crate does not link the daemon or the client.

use clap::CommandFactory;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod tidy;

#[path = "../../client/src/cli.rs"]
#[allow(dead_code)]
mod agentctl_cli;
#[path = "../../daemon/src/cli.rs"]
#[allow(dead_code)]
mod agentd_cli;

const SOCKET_UNIT: &str = include_str!("../../packaging/systemd/agentd.socket");
const SERVICE_UNIT: &str = include_str!("../../packaging/systemd/agentd.service");

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: cargo xtask dist [--bindir DIR] [OUT_DIR] | cargo xtask tidy";
    if args.first().map(String::as_str) == Some("tidy") {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the workspace");
        return match tidy::tidy(root) {
            Ok(problems) if problems.is_empty() => {
                println!("tidy: crate graph, pure history, module cycles, crate docs and file sizes hold");
                ExitCode::SUCCESS
            }
            Ok(problems) => {
                for p in problems {
                    eprintln!("tidy: {p}");
                }
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("xtask tidy: {e}");
                ExitCode::from(1)
            }
        };
    }
    let mut out = PathBuf::from("target/dist");
    let mut bindir = PathBuf::from("/usr/bin");
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("dist") => {}
        _ => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    }
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bindir" => match it.next() {
                Some(d) => bindir = PathBuf::from(d),
                None => {
                    eprintln!("{usage}");
                    return ExitCode::from(2);
                }
            },
            other if !other.starts_with('-') => out = PathBuf::from(other),
            _ => {
                eprintln!("{usage}");
                return ExitCode::from(2);
            }
        }
    }
    match dist(&out, &bindir) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask dist: {e}");
            ExitCode::from(1)
        }
    }
}

fn write(files: &mut Vec<PathBuf>, path: PathBuf, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, bytes)?;
    files.push(path);
    Ok(())
}

fn man_page(cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut buf)?;
    Ok(buf)
}

/// Renders everything into `out`; returns the files written.
pub fn dist(out: &Path, bindir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let man = out.join("man");
    write(
        &mut files,
        man.join("agentd.1"),
        &man_page(agentd_cli::Args::command())?,
    )?;
    let mut agentctl = agentctl_cli::Cli::command();
    agentctl.build();
    write(
        &mut files,
        man.join("agentctl.1"),
        &man_page(agentctl.clone())?,
    )?;
    for sub in agentctl
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
    {
        // clap takes `&'static str` names without its `string` feature; a build tool
        // that runs once can leak the few it makes.
        let name: &'static str = Box::leak(format!("agentctl-{}", sub.get_name()).into());
        let page = sub.clone().name(name).display_name(name);
        write(&mut files, man.join(format!("{name}.1")), &man_page(page)?)?;
    }

    let comp = out.join("completions");
    for (shell, file) in [
        (clap_complete::Shell::Bash, "agentctl.bash"),
        (clap_complete::Shell::Zsh, "_agentctl"),
        (clap_complete::Shell::Fish, "agentctl.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(
            shell,
            &mut agentctl_cli::Cli::command(),
            "agentctl",
            &mut buf,
        );
        write(&mut files, comp.join(file), &buf)?;
    }

    let units = out.join("systemd");
    write(
        &mut files,
        units.join("agentd.socket"),
        SOCKET_UNIT.as_bytes(),
    )?;
    let service = SERVICE_UNIT.replace("@AGENTD@", &bindir.join("agentd").to_string_lossy());
    write(&mut files, units.join("agentd.service"), service.as_bytes())?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dist_renders_man_pages_completions_and_units() {
        let dir = tempfile::tempdir().unwrap();
        let files = dist(dir.path(), Path::new("/usr/bin")).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        let agentd = read("man/agentd.1");
        assert!(
            agentd.starts_with(".ie") || agentd.contains(".TH agentd 1"),
            "{agentd}"
        );
        assert!(agentd.contains("\\-\\-socket"), "{agentd}");
        let agentctl = read("man/agentctl.1");
        assert!(agentctl.contains(".TH agentctl 1"), "{agentctl}");
        assert!(agentctl.contains("service"), "{agentctl}");
        assert!(read("man/agentctl-service.1").contains("install"));
        assert!(read("completions/agentctl.bash").contains("complete -F"));
        assert!(read("completions/_agentctl").starts_with("#compdef agentctl"));
        assert!(read("completions/agentctl.fish").contains("complete -c agentctl"));
        let unit = read("systemd/agentd.service");
        assert!(unit.contains("\nExecStart=/usr/bin/agentd\n"), "{unit}");
        assert!(!unit.contains('@'), "unfilled placeholder: {unit}");
        assert!(files.len() > 10, "{files:?}");
    }
}

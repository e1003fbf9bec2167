//! Daily work inside the command sandbox's default session (docs/sandbox.md): the
//! tightening that keeps commands from planting code and reaching the host's sockets
//! must not break an offline build, an install from a lockfile or a test that serves
//! itself on 127.0.0.1. Real cargo, npm and node run through real turns with the
//! `script` provider; a tool missing from `PATH` fails the case, naming it.

use agentd_tests::{is_type, Daemon, DaemonBuilder, RpcConn};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A home outside `/tmp` (the sandbox's private `/tmp` would hide it).
fn fake_home() -> tempfile::TempDir {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base).unwrap();
    tempfile::Builder::new()
        .prefix("friction")
        .tempdir_in(&base)
        .unwrap()
}

/// The directory holding `tool` on the test's `PATH`; panics naming it when absent.
fn tool_dir(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|d| d.join(tool).is_file())
        .unwrap_or_else(|| panic!("`{tool}` is not on PATH: this case needs it installed"))
}

/// The real toolchain's `bin` (cargo and rustc themselves, not rustup's proxies, which
/// would look for their toolchains under the daemon's fake home).
fn toolchain_bin() -> PathBuf {
    let out = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc on PATH: this case needs a Rust toolchain");
    let sysroot = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let bin = sysroot.join("bin");
    assert!(bin.join("cargo").is_file(), "no cargo in {}", bin.display());
    bin
}

fn daemon(home: &Path, path: &[PathBuf], config: &str) -> Daemon {
    let mut dirs = path.to_vec();
    dirs.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
    let b: DaemonBuilder = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .env("HOME", home)
        .env("PATH", std::env::join_paths(dirs).unwrap());
    b.config(config).start()
}

/// Runs `cmd` as one `shell` call in a turn of a fresh default session; returns the
/// `tool_result` data.
fn shell(d: &Daemon, cmd: &str) -> Value {
    let mut c: RpcConn = d.connect();
    let sid = c.call_ok("agentd/create", json!({"workspace": d.workspace()}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let script = d.root().join(format!("m{}.json", rand::random::<u64>()));
    let body = json!({"rules": [{"steps": [
        {"tool_calls": [{"name": "shell", "args": {"command": cmd, "timeout_s": 300}}]},
        {"text": "done"}]}]});
    std::fs::write(&script, serde_json::to_vec(&body).unwrap()).unwrap();
    c.set_call_timeout(Duration::from_secs(400));
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "go",
               "model": format!("script:{}", script.display())}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    evs.iter()
        .rev()
        .find(|e| is_type(e, "tool_result"))
        .expect("a tool_result")["data"]
        .clone()
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// `cargo build --offline` of a crate whose only dependency is a path, then its tests
/// (one serves and calls itself on 127.0.0.1), with network `none`, with and without
/// the `cache:cargo` grant.
#[test]
fn an_offline_cargo_build_and_a_loopback_test_work_in_a_default_session() {
    let home = fake_home();
    std::fs::create_dir_all(home.path().join(".cargo/registry")).unwrap();
    let toolchain = toolchain_bin();
    for config in ["", "[sandbox]\ncaches = [\"cache:cargo\"]\n"] {
        let d = daemon(home.path(), std::slice::from_ref(&toolchain), config);
        let ws = d.workspace();
        write(
            ws,
            "Cargo.toml",
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\ngreeter = { path = \"greeter\" }\n",
        );
        write(
            ws,
            "src/main.rs",
            "fn main() { println!(\"{}\", greeter::greet(\"sandbox\")); }\n\n\
             #[cfg(test)]\nmod tests {\n    use std::io::{Read, Write};\n\n    \
             #[test]\n    fn serves_itself_on_loopback() {\n        \
             let l = std::net::TcpListener::bind(\"127.0.0.1:0\").unwrap();\n        \
             let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();\n        \
             let (mut s, _) = l.accept().unwrap();\n        \
             c.write_all(b\"pong\").unwrap();\n        \
             let mut b = [0u8; 4];\n        s.read_exact(&mut b).unwrap();\n        \
             assert_eq!(&b, b\"pong\");\n    }\n}\n",
        );
        write(
            ws,
            "greeter/Cargo.toml",
            "[package]\nname = \"greeter\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        );
        write(
            ws,
            "greeter/src/lib.rs",
            "pub fn greet(who: &str) -> String { format!(\"hello from a path dependency, {who}\") }\n",
        );
        let r = shell(
            &d,
            "cargo build --offline -q 2>&1 && ./target/debug/app && \
             cargo test --offline -q 2>&1 | grep -E 'test result|FAILED|panicked'",
        );
        let text = r["output"].as_str().unwrap_or("");
        assert_eq!(r["sandbox"]["level"], "full", "{config}: {r:#}");
        assert!(
            text.contains("hello from a path dependency, sandbox"),
            "{config}: {r:#}"
        );
        assert!(
            text.contains("test result: ok. 1 passed"),
            "{config}: {r:#}"
        );
    }
}

/// `npm ci` from a lockfile whose only dependency is a local package, with network
/// `none` and the `cache:npm` grant, then node loads what it installed.
#[test]
fn npm_ci_of_a_lockfile_without_registry_dependencies_works_in_a_default_session() {
    let home = fake_home();
    std::fs::create_dir_all(home.path().join(".npm")).unwrap();
    let node = tool_dir("node");
    let npm = tool_dir("npm");
    let d = daemon(
        home.path(),
        &[node, npm],
        "[sandbox]\ncaches = [\"cache:npm\"]\n",
    );
    let ws = d.workspace();
    write(
        ws,
        "package.json",
        r#"{"name": "app", "version": "1.0.0", "private": true,
            "dependencies": {"local-greeter": "file:local-greeter"}}"#,
    );
    write(
        ws,
        "local-greeter/package.json",
        r#"{"name": "local-greeter", "version": "1.0.0", "main": "index.js"}"#,
    );
    write(
        ws,
        "local-greeter/index.js",
        "module.exports = (who) => `hello from a local package, ${who}`;\n",
    );
    write(
        ws,
        "package-lock.json",
        r#"{
  "name": "app",
  "version": "1.0.0",
  "lockfileVersion": 3,
  "requires": true,
  "packages": {
    "": {"name": "app", "version": "1.0.0", "dependencies": {"local-greeter": "file:local-greeter"}},
    "local-greeter": {"version": "1.0.0"},
    "node_modules/local-greeter": {"resolved": "local-greeter", "link": true}
  }
}
"#,
    );
    let r = shell(
        &d,
        "npm ci --no-audit --no-fund 2>&1 | tail -5; \
         node -e 'console.log(require(\"local-greeter\")(\"sandbox\"))'",
    );
    let text = r["output"].as_str().unwrap_or("");
    assert_eq!(r["sandbox"]["level"], "full", "{r:#}");
    assert!(
        text.contains("hello from a local package, sandbox"),
        "{r:#}"
    );
}

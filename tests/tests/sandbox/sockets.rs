//! Local sockets: a host's Unix socket is the door to whatever serves it (a database
//! superuser's `COPY … TO PROGRAM`, a container engine, a terminal multiplexer). Each
//! case runs in full and in degraded mode (no user namespaces) and, through
//! `.ci/sandbox.sh`, unprivileged too; the listeners live on the host, outside `/tmp`
//! and `/run`, and the host side checks what reached them.

use super::{builder, create, outside, q, Outside};
use agentd_tests::{bin, DaemonBuilder};
use serde_json::{json, Value};
use std::os::unix::net::UnixListener;
use std::path::Path;

/// The two sandbox levels a case runs at.
const LEVELS: [(&str, Option<&str>); 2] = [("full", None), ("degraded", Some("no_userns"))];

fn at_level(o: &Outside, force: Option<&str>) -> DaemonBuilder {
    let b = builder(o);
    match force {
        Some(f) => b.env("AGENTD_SANDBOX_FORCE", f),
        None => b,
    }
}

fn listen(p: &Path) -> UnixListener {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let l = UnixListener::bind(p).unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

/// The probe line `NAME-unix: …` of the command's output.
fn line<'a>(text: &'a str, name: &str) -> &'a str {
    let prefix = format!("{name}: ");
    text.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in: {text}"))
}

/// Whether anything connected to `l` since the last call (drains the backlog).
fn reached(l: &UnixListener) -> bool {
    let mut any = false;
    while l.accept().is_ok() {
        any = true;
    }
    any
}

fn run(d: &agentd_tests::Daemon, network: &str, cmd: &str) -> Value {
    let mut c = d.connect();
    let sid = create(&mut c, d, Some(json!({"network": network})));
    super::shell(d, &mut c, &sid, cmd, json!({}))
}

/// A listener a user's tool keeps in a project directory, a Docker socket where
/// `DOCKER_HOST` put it, another socket, and an abstract socket, all on the host.
/// Without a grant: with network `none` none is reachable; with `host` the Docker
/// socket stays out of reach (and at the degraded level, which cannot tell one socket
/// from another, every pathname socket is). Granted by path (`[sandbox] sockets`), the
/// granted ones are reachable with either network; with `none` at the full level the
/// others still are not.
#[test]
fn host_unix_sockets_are_out_of_reach_unless_granted_by_path() {
    for (level, force) in LEVELS {
        let o = outside();
        let planted = o.root.join("planted/agent.sock");
        let docker = o.root.join("engine/docker.sock");
        let other = o.root.join("other/x.sock");
        let (lp, ld, lo) = (listen(&planted), listen(&docker), listen(&other));
        let abs_name = format!("agentd-sockets-{}", rand::random::<u64>());
        let abs = UnixListener::bind_addr(
            &<std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(
                abs_name.as_bytes(),
            )
            .unwrap(),
        )
        .unwrap();
        abs.set_nonblocking(true).unwrap();
        let probe = q(&bin("sandbox-probe"));
        let cmd = format!(
            "{probe} unix {p} | sed s/^/planted-/; {probe} unix {d} | sed s/^/docker-/
             {probe} unix {x} | sed s/^/other-/; {probe} abstract {abs_name}",
            p = q(&planted),
            d = q(&docker),
            x = q(&other),
        );

        let d = at_level(&o, force).start();
        for network in ["none", "host"] {
            let r = run(&d, network, &cmd);
            let text = super::output(&r);
            let at = format!("{level}, network {network}");
            assert_eq!(r["sandbox"]["level"], level, "{at}: {r:#}");
            assert_ne!(
                line(&text, "docker-unix"),
                "docker-unix: ok",
                "{at}: {text}"
            );
            assert_ne!(line(&text, "abstract"), "abstract: ok", "{at}: {text}");
            if network == "none" || level == "degraded" {
                assert_ne!(
                    line(&text, "planted-unix"),
                    "planted-unix: ok",
                    "{at}: {text}"
                );
                assert_ne!(line(&text, "other-unix"), "other-unix: ok", "{at}: {text}");
            } else {
                // Network `host` at the full level: a user's own socket stays usable.
                assert_eq!(
                    line(&text, "planted-unix"),
                    "planted-unix: ok",
                    "{at}: {text}"
                );
            }
            assert!(
                r["sandbox"]["unix_sockets"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{at}: {r:#}"
            );
            let open = network == "host" && level == "full";
            assert_eq!(reached(&lp), open, "{at}: {text}");
            assert_eq!(reached(&lo), open, "{at}: {text}");
            assert!(!reached(&ld), "{at}: the Docker socket was reached");
        }
        assert!(!reached(&abs), "{level}: the abstract socket was reached");
        drop(d);

        let d = at_level(&o, force)
            .config(&format!(
                "[sandbox]\nsockets = [{:?}, {:?}]\n",
                planted.parent().unwrap(),
                docker
            ))
            .start();
        for network in ["none", "host"] {
            let r = run(&d, network, &cmd);
            let text = super::output(&r);
            let at = format!("{level}, network {network}, granted");
            assert_eq!(
                line(&text, "planted-unix"),
                "planted-unix: ok",
                "{at}: {text}"
            );
            assert_eq!(
                line(&text, "docker-unix"),
                "docker-unix: ok",
                "{at}: {text}"
            );
            if level == "full" && network == "none" {
                assert_ne!(line(&text, "other-unix"), "other-unix: ok", "{at}: {text}");
            }
            let fact = r["sandbox"]["unix_sockets"].as_str().unwrap_or("");
            assert!(
                fact.contains(&planted.parent().unwrap().display().to_string()),
                "{at}: {r:#}"
            );
            assert!(reached(&lp) && reached(&ld), "{at}: {text}");
            if level == "full" && network == "none" {
                assert!(!reached(&lo), "{at}: the socket not granted was reached");
            }
            reached(&lo);
        }
        assert!(!reached(&abs), "{level}: the abstract socket was reached");
    }
}

/// A test suite that serves and calls itself on 127.0.0.1 works with network `none` at
/// the full level (its own loopback), and reaches nothing on the host's. The degraded
/// level has no network namespace to offer one: inet sockets stay refused there.
#[test]
fn a_server_on_loopback_works_with_network_none_and_reaches_nothing_outside() {
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    for (level, force) in LEVELS {
        let o = outside();
        let d = at_level(&o, force).start();
        let probe = q(&bin("sandbox-probe"));
        let cmd = format!(
            "{probe} loopback
             (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo BAD-HOST-TCP; echo end"
        );
        // Twice: the second command joins the workspace's network namespace.
        for round in 0..2 {
            let r = run(&d, "none", &cmd);
            let text = super::output(&r);
            assert!(text.contains("end"), "{level}: {r:#}");
            assert!(!text.contains("BAD-HOST-TCP"), "{level}: {text}");
            if level == "full" {
                assert!(
                    text.contains("loopback: ok echo=ping"),
                    "{level} {round}: {r:#}"
                );
                let ns = r["sandbox"]["namespaces"].to_string();
                assert!(ns.contains("loopback only"), "{level}: {r:#}");
            } else {
                assert!(text.contains("loopback: EPERM"), "{level}: {r:#}");
            }
        }
        assert!(
            host.accept().is_err(),
            "{level}: the host's loopback was reached"
        );
    }
}

/// A socket the host binds while a command runs (a database restarted, a tool started by
/// the user), outside `/run` and `/tmp`: not in the list the daemon covered when the
/// command started. Refused at the degraded level (no `socket(AF_UNIX)`) and, at the
/// full level, by Landlock where it limits connects by path (ABI 9+). Below that the
/// command's record says that such a socket is not covered (docs/threat-model.md).
#[test]
fn a_socket_bound_on_the_host_during_a_command_is_refused_or_the_limit_is_recorded() {
    use std::io::Write;
    for (level, force) in LEVELS {
        let o = outside();
        let late = o.root.join("late/agent.sock");
        std::fs::create_dir_all(late.parent().unwrap()).unwrap();
        let d = at_level(&o, force).start();
        let fifo = d.workspace().join("go.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo (coreutils) is needed");
        assert!(made.success());
        let ready = d.workspace().join("ready");
        // Held open read-write until the command ended: the line written waits in the
        // pipe whenever the command opens it.
        let mut release = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap();
        let host = {
            let (ready, late) = (ready.clone(), late.clone());
            let mut release = release.try_clone().unwrap();
            std::thread::spawn(move || {
                let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
                while !ready.exists() && std::time::Instant::now() < end {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                let seen = ready.exists();
                let l = listen(&late);
                release.write_all(b"go\n").unwrap();
                (seen, l)
            })
        };
        let probe = q(&bin("sandbox-probe"));
        let cmd = format!(
            "touch ready; read line < go.fifo; {probe} unix {late} | sed s/^/late-/",
            late = q(&late)
        );
        let r = run(&d, "none", &cmd);
        let _ = release.write_all(b"go\n");
        let (seen, l) = host.join().unwrap();
        assert!(seen, "{level}: the command never got to wait: {r:#}");
        let text = super::output(&r);
        let at = format!("{level}, landlock {}", r["sandbox"]["landlock"]);
        assert_eq!(r["sandbox"]["level"], level, "{at}: {r:#}");
        let got = line(&text, "late-unix").to_string();
        let fact = r["sandbox"]["unix_sockets"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let abi = r["sandbox"]["landlock"]["abi"].as_i64().unwrap_or(0);
        if level == "degraded" || abi >= 9 {
            assert_ne!(got, "late-unix: ok", "{at}: {text}");
            assert!(!reached(&l), "{at}: the late socket was reached");
        } else {
            assert!(
                fact.contains("one bound on the host after that") && fact.contains("ABI < 9"),
                "{at}: the record hides that a late socket is not covered: {r:#}"
            );
        }
        if level == "full" && abi >= 9 {
            assert!(
                fact.contains("one bound after the command started included"),
                "{at}: {fact}"
            );
        }
    }
}

//! Set-up overhead of the command sandbox: `true` run plainly and through the helper
//! (full: namespaces, mounts, Landlock, seccomp; and degraded: no namespaces), in
//! alternating rounds, p50 and p90 of each. `cargo bench -p agentd-sandbox`.
//! `AGENTD_BENCH_RUNS` sets the runs per configuration (default 200).

#[cfg(target_os = "linux")]
fn main() {
    use agentd_sandbox::{
        effective, CommandRequest, Inputs, Knobs, Limits, OnUnavailable, Sandbox,
    };
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let runs: usize = std::env::var("AGENTD_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let helper = env!("CARGO_BIN_EXE_sandbox-helper-test");
    let full = Sandbox::new(helper.into(), Knobs::default());
    let degraded = Sandbox::new(
        helper.into(),
        Knobs {
            force_no_userns: true,
            ..Default::default()
        },
    );
    assert_eq!(full.probe().level, "full", "{:?}", full.probe());
    let inputs = Inputs {
        workspace: ws.clone(),
        home: std::env::var_os("HOME").map(Into::into),
        env: std::env::vars().collect(),
        ..Default::default()
    };
    let policy = effective(&inputs);
    let sandboxed = |sb: &Sandbox| {
        let t = Instant::now();
        let req = CommandRequest {
            policy: &policy,
            on_unavailable: OnUnavailable::Refuse,
            argv: vec!["true".into()],
            cwd: &ws,
            umask: 0o022,
            limits: Limits::default(),
        };
        let mut p = sb.prepare(&req).unwrap();
        // Taken out and dropped once run, as the daemon does: the `Command` holds the
        // parent's copy of the report pipe, whose EOF the degraded level waits for (up
        // to 10 s a run otherwise).
        let mut cmd = std::mem::replace(&mut p.command, Command::new("true"));
        let st = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        drop(cmd);
        assert!(st.success());
        let facts = p.finish(b"");
        assert!(facts.get("error").is_none(), "{facts}");
        t.elapsed()
    };
    let plain = || {
        let t = Instant::now();
        let st = Command::new("true").stdin(Stdio::null()).status().unwrap();
        assert!(st.success());
        t.elapsed()
    };
    // Warm-up (the probe, page cache).
    for _ in 0..10 {
        plain();
        sandboxed(&full);
        sandboxed(&degraded);
    }
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        a.push(plain());
        b.push(sandboxed(&full));
        c.push(sandboxed(&degraded));
    }
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
    };
    println!("setup overhead of `true`, {runs} alternating runs each (ms)");
    println!("{:<28} {:>8} {:>8}", "configuration", "p50", "p90");
    for (name, v) in [
        ("unsandboxed", &mut a),
        ("sandbox full", &mut b),
        ("sandbox degraded", &mut c),
    ] {
        let (p50, p90) = (pct(v, 0.5), pct(v, 0.9));
        println!("{name:<28} {p50:>8.2} {p90:>8.2}");
    }
    println!(
        "full minus unsandboxed p50: {:.2} ms",
        pct(&mut b, 0.5) - pct(&mut a, 0.5)
    );
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("the sandbox bench runs on Linux only");
}

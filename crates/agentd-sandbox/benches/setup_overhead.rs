//! Set-up overhead of the command sandbox: `true` run plainly and through the helper
//! (full: namespaces, mounts, Landlock, seccomp; and degraded: no namespaces), each
//! level with a spare helper taken (as the `shell` tool starts commands) and with a
//! helper started for the command (no spare), in alternating rounds, p50 and p90 of
//! each. `cargo bench -p agentd-sandbox`.
//! `AGENTD_BENCH_RUNS` sets the runs per configuration (default 200);
//! `AGENTD_BENCH_GAP_MS` a pause before each sandboxed run (default 0), as between a
//! model's commands: moving a process into a cgroup v1 is fast only right after another
//! move, so back-to-back runs hide what a command after a pause pays;
//! `AGENTD_BENCH_HELPER` the helper executable (default: this crate's small test helper;
//! the daemon runs itself, `target/release/agentd`, which takes longer to start). With
//! `--features trace` it also prints where the time goes: the median of each stage
//! (the time from the mark before it), daemon and helper side, per level.

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
    let gap = Duration::from_millis(
        std::env::var("AGENTD_BENCH_GAP_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let helper = std::env::var("AGENTD_BENCH_HELPER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_sandbox-helper-test").to_string());
    let helper = helper.as_str();
    // agentd's home, as the daemon sets it up: hidden from commands, holding the cache
    // layers and the degraded level's private TMPDIRs.
    let home_dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let home = home_dir.path().canonicalize().unwrap();
    let sandbox = |knobs| {
        Sandbox::new(helper.into(), knobs)
            .with_cache_layers(home.join("sandbox-caches"))
            .with_tmp_dirs(home.join("sandbox-tmp"))
    };
    let degraded_knobs = Knobs {
        force_no_userns: true,
        ..Default::default()
    };
    // Spare helpers are started from the runtime (as in the daemon).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let _ctx = rt.enter();
    let full = sandbox(Knobs::default()).with_spares(false);
    let degraded = sandbox(degraded_knobs).with_spares(false);
    let full_spare = sandbox(Knobs::default());
    let degraded_spare = sandbox(degraded_knobs);
    assert_eq!(full.probe().level, "full", "{:?}", full.probe());
    let inputs = Inputs {
        workspace: ws.clone(),
        home: std::env::var_os("HOME").map(Into::into),
        env: std::env::vars().collect(),
        agentd_dirs: vec![home.clone()],
        ..Default::default()
    };
    let policy = effective(&inputs);
    // Per configuration: the runs' stage marks (feature `trace`).
    type Runs = Vec<Vec<(String, u64)>>;
    let traces: std::cell::RefCell<[Runs; 4]> = Default::default();
    let null = || -> std::os::fd::OwnedFd {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap()
            .into()
    };
    let sandboxed = |sb: &Sandbox, which: usize, measured: bool| {
        std::thread::sleep(gap);
        let t = Instant::now();
        let t0 = agentd_sandbox::trace::now_ns();
        let req = CommandRequest {
            policy: &policy,
            on_unavailable: OnUnavailable::Refuse,
            argv: vec!["true".into()],
            cwd: &ws,
            umask: 0o022,
            limits: Limits::default(),
        };
        // As the `shell` tool: prepared (a spare taken if one is ready), then started
        // with its stdio, then waited for.
        let mut p = sb.prepare_to_start(&req).unwrap();
        let spawn = agentd_sandbox::trace::now_ns();
        let mut child = p.start(None, null(), null()).unwrap();
        let st = rt.block_on(child.wait()).unwrap();
        let exited = agentd_sandbox::trace::now_ns();
        assert!(st.success());
        let facts = p.finish(b"");
        assert!(facts.get("error").is_none(), "{facts}");
        if measured {
            // Every measured run with spares found one ready.
            assert_eq!(facts["spare"], which % 2 == 1, "{facts}");
        }
        let elapsed = t.elapsed();
        if let Some(m) = facts.get("marks") {
            let mut marks: Vec<(String, u64)> = serde_json::from_value(m.clone()).unwrap();
            marks.push(("bench: helper spawned".into(), spawn));
            marks.push(("bench: command exited, helper reaped".into(), exited));
            marks.sort_by_key(|m| m.1);
            marks.insert(0, ("start".into(), t0));
            traces.borrow_mut()[which].push(marks);
        }
        elapsed
    };
    let plain = || {
        let t = Instant::now();
        let st = Command::new("true").stdin(Stdio::null()).status().unwrap();
        assert!(st.success());
        t.elapsed()
    };
    let configs = [&full, &full_spare, &degraded, &degraded_spare];
    // Warm-up (the probe, page cache, the first spares).
    for _ in 0..10 {
        plain();
        for (i, sb) in configs.iter().enumerate() {
            sandboxed(sb, i, false);
        }
    }
    let mut a = Vec::new();
    let mut bs: [Vec<Duration>; 4] = Default::default();
    for _ in 0..runs {
        a.push(plain());
        for (i, sb) in configs.iter().enumerate() {
            bs[i].push(sandboxed(sb, i, true));
        }
    }
    let [mut b, mut b_spare, mut c, mut c_spare] = bs;
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
    };
    println!(
        "setup overhead of `true`, {runs} alternating runs each, {} ms before each \
         sandboxed run, helper {helper} (ms)",
        gap.as_millis()
    );
    println!("{:<28} {:>8} {:>8}", "configuration", "p50", "p90");
    for (name, v) in [
        ("unsandboxed", &mut a),
        ("sandbox full, no spare", &mut b),
        ("sandbox full, spare", &mut b_spare),
        ("sandbox degraded, no spare", &mut c),
        ("sandbox degraded, spare", &mut c_spare),
    ] {
        let (p50, p90) = (pct(v, 0.5), pct(v, 0.9));
        println!("{name:<28} {p50:>8.2} {p90:>8.2}");
    }
    for (name, v) in [("full", &mut b_spare), ("degraded", &mut c_spare)] {
        println!(
            "{name} (spare) minus unsandboxed p50: {:.2} ms",
            pct(v, 0.5) - pct(&mut a, 0.5)
        );
    }
    let names = [
        "full, no spare",
        "full, spare",
        "degraded, no spare",
        "degraded, spare",
    ];
    for (level, runs) in names.iter().zip(traces.borrow().iter()) {
        if runs.is_empty() {
            continue;
        }
        // Stage names in the order of the first run; each stage's time is from the
        // mark before it, in that run.
        let mut stages: Vec<(String, Vec<u64>)> = Vec::new();
        for marks in runs {
            for w in marks.windows(2) {
                let d = w[1].1.saturating_sub(w[0].1);
                match stages.iter_mut().find(|s| s.0 == w[1].0) {
                    Some(s) => s.1.push(d),
                    None => stages.push((w[1].0.clone(), vec![d])),
                }
            }
        }
        println!("\n{level} level, time to each mark from the previous one (ms)");
        println!("  {:<44} {:>8} {:>8} {:>8}", "stage", "p50", "p90", "mean");
        let mut sum = 0.0;
        for (name, mut v) in stages {
            v.sort();
            let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1e6;
            let mean = v.iter().sum::<u64>() as f64 / v.len() as f64 / 1e6;
            sum += mean;
            println!("  {name:<44} {:>8.3} {:>8.3} {mean:>8.3}", at(0.5), at(0.9));
        }
        println!(
            "  {:<44} {:>8} {:>8} {sum:>8.3}",
            "total (sum of means)", "", ""
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("the sandbox bench runs on Linux only");
}

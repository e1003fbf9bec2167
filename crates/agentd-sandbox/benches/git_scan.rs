//! What the git scan costs per command (docs/sandbox.md#cost): `git::scan` before a
//! command plus `git::audit` after it, on a workspace of 20 nested repositories and a
//! linked worktree in a source tree of a few hundred directories, against the same on a
//! workspace with one plain repository, and against what asking git itself would cost
//! (`git config --show-origin --list`, once per repository), in alternating rounds.
//! Each workspace is walked both ways in the same run: from inotify watches (the
//! default) and by `stat` only (the walk before watches). p50 and p90 of each. `cargo
//! bench -p agentd-sandbox --bench git_scan`; `AGENTD_BENCH_RUNS` sets the rounds
//! (default 300). Needs `git`. In the same rounds: what pinning the protected paths
//! before a command and checking them after it costs at the full level (a read-only
//! mount is dropped when the host replaces the file beneath it), against saving their
//! contents as the degraded level does.

use agentd_sandbox::git::{audit, scan, use_watches, Env};
use agentd_sandbox::linux::restore::Snapshot;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.com")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.com")
        .output()
        .expect("the git scan bench needs git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A source tree: `dirs` directories of three files each.
fn tree(root: &Path, dirs: usize) {
    for i in 0..dirs {
        let d = root.join(format!("src/m{}/s{}", i / 10, i % 10));
        std::fs::create_dir_all(&d).unwrap();
        for f in 0..3 {
            std::fs::write(d.join(format!("f{f}.rs")), "fn x() {}\n").unwrap();
        }
    }
}

/// CPU time of this thread (user and system): what the scan costs whatever else the
/// machine is running.
fn cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

fn main() {
    let runs: usize = std::env::var("AGENTD_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().canonicalize().unwrap();
    let home = root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".gitconfig"), "[core]\n\thooksPath = .githooks\n").unwrap();

    // The big one: a repository, 20 nested ones (each with its own small tree), a
    // linked worktree inside the workspace, a cargo target dir.
    let big = root.join("big");
    std::fs::create_dir_all(&big).unwrap();
    git(&big, &["init", "-q", "-b", "main"]);
    tree(&big, 200);
    git(&big, &["add", "-A"]);
    git(&big, &["commit", "-qm", "init"]);
    git(&big, &["worktree", "add", "-q", "linked", "-b", "lw"]);
    for n in 0..20 {
        let sub = big.join(format!("vendor/lib{n}"));
        std::fs::create_dir_all(&sub).unwrap();
        git(&sub, &["init", "-q"]);
        tree(&sub, 5);
    }
    std::fs::create_dir_all(big.join("target/debug/deps")).unwrap();
    std::fs::write(
        big.join("target/CACHEDIR.TAG"),
        "Signature: 8a477f597d28d172789f06886806bc55\n",
    )
    .unwrap();
    for i in 0..500 {
        std::fs::create_dir_all(big.join(format!("target/debug/build/b{i}/out"))).unwrap();
    }
    // The baseline: one plain repository with the same main tree.
    let plain = root.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    git(&plain, &["init", "-q"]);
    tree(&plain, 200);

    let env = Env {
        home: Some(home.clone()),
        vars: [("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string())].into(),
    };
    let one = |ws: &PathBuf| {
        let roots = vec![ws.clone()];
        let (t, c) = (Instant::now(), cpu());
        let s = scan(&roots, &roots, &env);
        let f = audit(&s, &roots, &env, false);
        let took = (t.elapsed(), cpu() - c);
        assert!(f.is_empty(), "{f:?}");
        (took, s)
    };
    // As a command that writes a file does: the audit after it sees the directory it
    // changed (and the next scan the removal).
    let edited = |ws: &PathBuf| {
        let roots = vec![ws.clone()];
        let (t, c) = (Instant::now(), cpu());
        let s = scan(&roots, &roots, &env);
        let (t1, c1) = (t.elapsed(), cpu() - c);
        let f = ws.join("src/m3/s4/new.rs");
        std::fs::write(&f, "fn y() {}\n").unwrap();
        let (t, c) = (Instant::now(), cpu());
        let found = audit(&s, &roots, &env, false);
        let took = (t1 + t.elapsed(), c1 + (cpu() - c));
        std::fs::remove_file(&f).unwrap();
        assert!(found.is_empty(), "{found:?}");
        took
    };
    let ((cold, _), s) = one(&big);
    assert_eq!(s.repos.len(), 22, "{:?}", s.repos.keys());
    let repos: Vec<PathBuf> = s
        .repos
        .keys()
        .map(|k| k.parent().unwrap().to_path_buf())
        .collect();

    // [big, plain] x [watched, stat], then big with an edit x [watched, stat]: wall and
    // CPU samples.
    let mut samples: Vec<(Vec<Duration>, Vec<Duration>)> = vec![Default::default(); 10];
    let protected = |ws: &PathBuf| {
        let roots = vec![ws.clone()];
        (scan(&roots, &roots, &env).protected, roots)
    };
    let saved = [protected(&big), protected(&plain)];
    let mut g = Vec::new();
    for i in 0..runs {
        for (k, (ws, watched)) in [(&big, true), (&plain, true), (&big, false), (&plain, false)]
            .into_iter()
            .enumerate()
        {
            use_watches(watched);
            let ((w, c), _) = one(ws);
            samples[k].0.push(w);
            samples[k].1.push(c);
        }
        for (k, watched) in [(4, true), (5, false)] {
            use_watches(watched);
            let (w, c) = edited(&big);
            samples[k].0.push(w);
            samples[k].1.push(c);
        }
        // The protected paths saved before a command and checked after it (nothing
        // changed: nothing put back).
        for (k, (paths, roots), pinned) in [
            (6, &saved[0], true),
            (7, &saved[1], true),
            (8, &saved[0], false),
            (9, &saved[1], false),
        ] {
            let (t, c) = (Instant::now(), cpu());
            let snap = if pinned {
                Snapshot::take_pinned(paths, roots)
            } else {
                Snapshot::take_existing(paths, roots)
            };
            let back = snap.restore();
            samples[k].0.push(t.elapsed());
            samples[k].1.push(cpu() - c);
            assert!(back.is_empty(), "{back:?}");
        }
        // Asking git instead: one `git config` per repository (fewer rounds: slow).
        if i % 10 == 0 {
            let t = Instant::now();
            for r in &repos {
                let out = Command::new("git")
                    .args(["config", "--show-origin", "--list"])
                    .current_dir(r)
                    .env("HOME", &home)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .output()
                    .unwrap();
                assert!(out.status.success());
            }
            g.push(t.elapsed());
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "git scan + audit per command ({runs} rounds, same run; wall, and CPU of the thread):"
    );
    println!("  first scan, cold: {:.3} ms", ms(cold));
    let names = [
        "20 nested repositories + linked worktree + target/, inotify watches",
        "one plain repository (baseline), inotify watches",
        "20 nested repositories + linked worktree + target/, stat walk",
        "one plain repository (baseline), stat walk",
        "20 nested repositories..., a file written between scan and audit, inotify watches",
        "20 nested repositories..., a file written between scan and audit, stat walk",
        "protected paths pinned before + checked after (full), 20 nested repositories...",
        "protected paths pinned before + checked after (full), one plain repository",
        "protected paths saved before + checked after (degraded), 20 nested repositories...",
        "protected paths saved before + checked after (degraded), one plain repository",
    ];
    for (name, (w, c)) in names.iter().zip(samples.iter_mut()) {
        println!(
            "  {name}: wall p50 {:.3} ms p90 {:.3} ms; cpu p50 {:.3} ms p90 {:.3} ms",
            ms(pct(w, 0.5)),
            ms(pct(w, 0.9)),
            ms(pct(c, 0.5)),
            ms(pct(c, 0.9))
        );
    }
    println!(
        "  `git config --show-origin --list` x{} instead: wall p50 {:.3} ms p90 {:.3} ms",
        repos.len(),
        ms(pct(&mut g, 0.5)),
        ms(pct(&mut g, 0.9))
    );
}

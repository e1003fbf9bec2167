//! Durable append throughput, measured against baselines on the same disk in the same
//! run (docs/log-format.md#durability):
//!
//! (a) raw `write` + `fdatasync` of 512-byte lines (one file; 64 files from 64 threads;
//! 64 files from one thread through io_uring; one file written by a bare thread that
//! answers one client over a Unix socket, the ceiling for any daemon), (b) SQLite WAL `synchronous=FULL`
//! single-row inserts, (c) agentd acknowledged appends over the socket: one session
//! with one sequential client, one session with 64 concurrent clients, 64 sessions
//! with one client each; plus p50/p99 round trips of `agentd/hello` and of a
//! non-durable append. Each agentd case is compared with the raw one-file loop run
//! right before it.
//!
//! Run: `cargo bench -p agentd --bench log_append` (env `BENCH_OPS` scales the work,
//! `BENCH_CASES` picks among agentd's cases `seq`, `w64`, `s64`).

mod support;

use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{appends, env_usize, payload, start_with, Conn, Daemon};

fn ops() -> usize {
    env_usize("BENCH_OPS", 400)
}

/// A 512-byte NDJSON-sized line, what every raw loop writes.
fn raw_line() -> Vec<u8> {
    let mut line = vec![b'x'; 511];
    line.push(b'\n');
    line
}

/// A file opened for appending as a Log is (0600).
fn raw_file(path: &Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .expect("open raw file")
}

fn raw_fsync(dir: &Path, n: usize) -> f64 {
    let mut f = raw_file(&dir.join("raw.ndjson"));
    let line = raw_line();
    let t = Instant::now();
    for _ in 0..n {
        f.write_all(&line).expect("write");
        f.sync_data().expect("fdatasync");
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// The ceiling for any daemon that answers one client over a Unix socket: a thread
/// takes a request line, writes and `fdatasync`s a 512-byte line, and answers, with no
/// parsing, framing or hand-off at all. `best` adds both tricks a server has on this
/// machine: it spins on its nonblocking socket instead of sleeping, and it peeks the
/// request and takes it out of the socket only after answering (taking it out first
/// frees the client's buffer space, which wakes the client blocked on its answer for
/// nothing). The client and the server are two tasks, so each append costs the client
/// one wake-up by another task, as it does with agentd; the raw loop never pays that.
fn socket_server_ceiling(dir: &Path, n: usize, best: bool) -> f64 {
    let path = dir.join("served.ndjson");
    support::bare_round_trips(n, move |server| {
        let mut f = raw_file(&path);
        let line = raw_line();
        let mut append = move || {
            f.write_all(&line).expect("write");
            f.sync_data().expect("fdatasync");
        };
        if !best {
            return support::answer_each_line(server, append);
        }
        use std::os::fd::AsRawFd;
        let mut w = server.try_clone().expect("clone socket");
        let fd = server.as_raw_fd();
        let mut req = vec![0u8; 64 * 1024];
        loop {
            // Peek until a whole line is there (from the queue's head: the request
            // before it was taken out after its answer).
            let len = loop {
                // SAFETY: `fd` is open; recv writes at most `req.len()` bytes.
                let got = unsafe {
                    libc::recv(
                        fd,
                        req.as_mut_ptr().cast(),
                        req.len(),
                        libc::MSG_PEEK | libc::MSG_DONTWAIT,
                    )
                };
                if got == 0 {
                    return;
                }
                if got > 0 {
                    if let Some(i) = req[..got as usize].iter().position(|&b| b == b'\n') {
                        break i + 1;
                    }
                }
                std::hint::spin_loop();
            };
            append();
            w.write_all(b"{\"ok\":true}\n").expect("answer");
            // SAFETY: as above; takes out the `len` bytes peeked.
            unsafe { libc::recv(fd, req.as_mut_ptr().cast(), len, 0) };
        }
    })
}

/// The device's ceiling for independent Logs: `threads` raw write+fdatasync loops on
/// as many files at once (what 64 sessions syncing in parallel can at best reach).
fn raw_fsync_parallel(dir: &Path, threads: usize, per_thread: usize) -> f64 {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let path = dir.join(format!("raw-{i}.ndjson"));
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut f = raw_file(&path);
                let line = raw_line();
                barrier.wait();
                for _ in 0..per_thread {
                    f.write_all(&line).expect("write");
                    f.sync_data().expect("fdatasync");
                }
            })
        })
        .collect();
    barrier.wait();
    let t = Instant::now();
    for h in handles {
        h.join().expect("raw thread");
    }
    (threads * per_thread) as f64 / t.elapsed().as_secs_f64()
}

/// The same ceiling reached from one thread through io_uring: every file keeps one
/// linked `write` → `fdatasync` pair in flight, and a file's next pair is submitted as
/// soon as its sync completes (as 64 sessions with one client each would). Measures
/// whether a commit engine on io_uring could beat commit threads on this machine.
fn uring_parallel(dir: &Path, files: usize, per_file: usize) -> Result<f64, String> {
    use io_uring::{opcode, squeue, types, IoUring};
    use std::os::fd::AsRawFd;
    // The line and the files are declared before the ring, so they outlive it even
    // when an error returns with entries in flight.
    let line = raw_line();
    let handles: Vec<std::fs::File> = (0..files)
        .map(|i| {
            std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(dir.join(format!("uring-{i}.ndjson")))
                .expect("open uring file")
        })
        .collect();
    let fds: Vec<i32> = handles.iter().map(|f| f.as_raw_fd()).collect();
    let mut ring = IoUring::new((files * 2).next_power_of_two() as u32)
        .map_err(|e| format!("io_uring_setup: {e}"))?;
    // Syncs run on the kernel's io-wq workers, bounded by default to 4 per CPU: allow
    // one per file, as many as the threads of the raw loop above.
    let mut max = [files as u32, files as u32];
    ring.submitter()
        .register_iowq_max_workers(&mut max)
        .map_err(|e| format!("io_uring max workers: {e}"))?;
    let mut written = vec![0usize; files];
    let push = |ring: &mut IoUring, i: usize, n: usize| -> Result<(), String> {
        let write = opcode::Write::new(types::Fd(fds[i]), line.as_ptr(), line.len() as u32)
            .offset((n * line.len()) as u64)
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data((i as u64) << 1);
        let sync = opcode::Fsync::new(types::Fd(fds[i]))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(((i as u64) << 1) | 1);
        // SAFETY: `line` and the files outlive the ring (declared before it), and on
        // success every pushed entry is waited for before this function returns.
        unsafe {
            let mut sq = ring.submission();
            sq.push(&write).map_err(|e| e.to_string())?;
            sq.push(&sync).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    let t = Instant::now();
    for i in 0..files {
        push(&mut ring, i, 0)?;
    }
    let mut left = files * per_file;
    while left > 0 {
        ring.submit_and_wait(1)
            .map_err(|e| format!("io_uring_enter: {e}"))?;
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (data, res) in done {
            if res < 0 {
                return Err(format!(
                    "io_uring op failed: {}",
                    std::io::Error::from_raw_os_error(-res)
                ));
            }
            if data & 1 == 1 {
                let i = (data >> 1) as usize;
                written[i] += 1;
                left -= 1;
                if written[i] < per_file {
                    push(&mut ring, i, written[i])?;
                }
            }
        }
    }
    Ok((files * per_file) as f64 / t.elapsed().as_secs_f64())
}

fn sqlite(dir: &Path, n: usize) -> f64 {
    let conn = rusqlite::Connection::open(dir.join("bench.sqlite")).expect("sqlite open");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("sync full");
    conn.execute(
        "CREATE TABLE ev (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)",
        [],
    )
    .expect("table");
    let body = "x".repeat(512);
    let t = Instant::now();
    for i in 0..n {
        conn.execute(
            "INSERT INTO ev (seq, body) VALUES (?1, ?2)",
            rusqlite::params![i as i64, body],
        )
        .expect("insert");
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// A daemon on its own home under `base` with the given durability, and its socket.
fn start(base: &Path, durability: &str) -> (tempfile::TempDir, Daemon, PathBuf) {
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    let (d, _) = start_with(dir.path(), "", &[("AGENTD_DURABILITY", durability)]);
    let socket = dir.path().join("run").join("agentd.sock");
    (dir, d, socket)
}

fn create(socket: &Path, sid: &str, ws: &Path) {
    Conn::connect(socket)
        .expect("connect")
        .call("agentd/create", json!({"workspace": ws, "session_id": sid}));
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6;
    (p(0.50), p(0.99))
}

fn latency(socket: &Path, n: usize, method: &str, params: Value) -> (f64, f64) {
    let mut c = Conn::connect(socket).expect("connect");
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        c.call(method, params.clone());
        v.push(t.elapsed());
    }
    percentiles(v)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` / test discovery
    }
    let n = ops();
    let chosen = std::env::var_os("BENCH_DIR").map(PathBuf::from);
    let base = chosen.clone().unwrap_or_else(std::env::temp_dir);
    let ws = tempfile::tempdir_in(&base).expect("workspace");
    let scratch = tempfile::tempdir_in(&base).expect("scratch");
    // The directory is named only when chosen, so pasted output carries no local path.
    let disk = match &chosen {
        Some(p) => p.display().to_string(),
        None => "the temp dir (set BENCH_DIR to choose)".to_string(),
    };
    println!("disk: {disk} (ops per measurement: {n})");

    let a = raw_fsync(scratch.path(), n);
    println!("(a) raw write+fdatasync, 512 B lines     {a:>10.0} ops/s");
    let a64 = raw_fsync_parallel(scratch.path(), 64, (n / 4).max(16));
    println!("(a) raw write+fdatasync, 64 files in parallel {a64:>7.0} ops/s  ({:.2}x a: the device's ceiling for 64 sessions)", a64 / a);
    match uring_parallel(scratch.path(), 64, (n / 4).max(16)) {
        Ok(u) => println!(
            "(a) io_uring, 1 thread, 64 files, linked write->fdatasync {u:>7.0} ops/s  ({:.2}x a)",
            u / a
        ),
        Err(e) => println!("(a) io_uring, 64 files: unavailable here ({e})"),
    }
    let b = sqlite(scratch.path(), n);
    println!(
        "(b) SQLite WAL synchronous=FULL inserts  {b:>10.0} ops/s  ({:.2}x a)",
        b / a
    );

    let mode = std::env::var("BENCH_DURABILITY").unwrap_or_else(|_| "sync".into());
    let (_home, d, socket) = start(&base, &mode);
    println!("agentd durability: {mode}");
    create(&socket, "seq", ws.path());
    // `BENCH_CASES` (e.g. `seq,s64`) runs only some of the agentd cases, for profiling one.
    let cases = std::env::var("BENCH_CASES").unwrap_or_else(|_| "seq,w64,s64".into());
    let wanted = |c: &str| cases.split(',').any(|x| x.trim() == c);
    let per = (n / 4).max(16);
    // Each case's ratio is to the raw loop run right before it: the disk's speed drifts
    // over a run (by a quarter on a VM), and a baseline from minutes earlier would put
    // that drift into the ratio.
    let raw_now = || raw_fsync(scratch.path(), n);
    if wanted("seq") {
        let a = raw_now();
        let plain = socket_server_ceiling(scratch.path(), n, false);
        let best = socket_server_ceiling(scratch.path(), n, true);
        let ceiling = plain.max(best);
        let c_seq = appends(&socket, 1, n, |_| "seq".into());
        println!(
            "(a) bare server on a socket, 1 client    {plain:>10.0} ops/s  ({:.2}x a: read a request, write+fdatasync, answer); busy-polling, request taken out after the answer: {best:.0} ops/s ({:.2}x a)",
            plain / a,
            best / a
        );
        println!(
            "(c) agentd 1 session, 1 client           {c_seq:>10.0} ops/s  ({:.2}x a of {a:.0} just before, target >= 0.8x; {:.2}x the better bare server)",
            c_seq / a,
            c_seq / ceiling
        );
    }
    if wanted("w64") {
        create(&socket, "shared", ws.path());
        let a = raw_now();
        let c_64w = appends(&socket, 64, per, |_| "shared".into());
        println!(
            "(c) agentd 1 session, 64 clients         {c_64w:>10.0} ops/s  ({:.2}x a of {a:.0} just before, target >= 6x)",
            c_64w / a
        );
    }
    if wanted("s64") {
        for i in 0..64 {
            create(&socket, &format!("s{i}"), ws.path());
        }
        let a = raw_now();
        let c_64s = appends(&socket, 64, per, |i| format!("s{i}"));
        println!(
            "(c) agentd 64 sessions, 1 client each    {c_64s:>10.0} ops/s  ({:.2}x a of {a:.0} just before, target >= 5x)",
            c_64s / a
        );
    }
    let (h50, h99) = latency(&socket, 2000, "agentd/hello", json!({}));
    println!("agentd/hello round trip                  p50 {h50:>7.1} us  p99 {h99:>7.1} us");
    drop(d);

    let (_home, _d, socket) = start(&base, "none");
    create(&socket, "nosync", ws.path());
    let (a50, a99) = latency(
        &socket,
        2000,
        "agentd/append",
        json!({"session_id": "nosync", "events": payload()}),
    );
    println!("append round trip, durability=none       p50 {a50:>7.1} us  p99 {a99:>7.1} us");
}

//! The commit threads: every store's appends go through them ([`WriterThread`]), with
//! the batches of several file Logs on one filesystem made durable by one `syncfs`
//! (group sync) and those of one database store by one transaction (group commit).

use crate::{GroupKey, LogAppender};
use agentd_proto::{AgentError, ErrorKind};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Whether batches of several file Logs on one filesystem share one `syncfs`
/// (config `group_sync`, default on).
static GROUP_SYNC: AtomicBool = AtomicBool::new(true);

/// Turns grouped syncs on or off for the whole process (config `group_sync`).
pub fn set_group_sync(on: bool) {
    GROUP_SYNC.store(on, Ordering::SeqCst);
}

/// A session's Log writer, served by the process's commit threads. The actor hands it
/// each group commit: the write and its `fdatasync` never block a runtime worker, and a
/// hand-off to a parked thread costs far less than the blocking pool's (measured by
/// `benches/log_append`). A session has at most one batch in flight (the actor applies
/// one before it commits the next), so any idle commit thread may take it and a
/// session's batches still reach its Log in order; sessions sync in parallel, up to
/// [`COMMIT_THREADS`] at once. The Log's file closes when the actor drops this handle
/// and no batch of it is in flight.
pub struct WriterThread {
    writer: Arc<Mutex<Box<dyn LogAppender>>>,
    /// The appender's [`LogAppender::sync_group`].
    group: Option<GroupKey>,
}

/// Runs on the commit thread right after a write, with its outcome: the session uses it
/// to answer appenders and publish the batch without a trip back through the runtime.
pub type AfterWrite = Box<dyn FnOnce(&Result<(), AgentError>) + Send>;

struct WriteJob {
    writer: Arc<Mutex<Box<dyn LogAppender>>>,
    /// The filesystem whose `syncfs`, or the store whose transaction, may cover this
    /// job with others.
    group: Option<GroupKey>,
    bytes: Vec<u8>,
    sync: bool,
    after: Option<AfterWrite>,
    done: tokio::sync::oneshot::Sender<Result<(), AgentError>>,
}

impl WriteJob {
    /// Synced, on a filesystem whose `syncfs` may cover it with others, while grouped
    /// syncs are on. (A store's batches are [`shared`](Self::shared) instead.)
    fn groupable(&self) -> bool {
        matches!(self.group, Some(GroupKey::Device(_)))
            && self.sync
            && GROUP_SYNC.load(Ordering::Relaxed)
    }

    /// The store whose transactions commit this batch with others' (always grouped).
    fn shared(&self) -> Option<usize> {
        match self.group {
            Some(GroupKey::Store(key)) => Some(key),
            _ => None,
        }
    }

    fn run(self) {
        let res = match self.writer.lock() {
            Ok(mut w) => w.append(&self.bytes, self.sync),
            Err(_) => Err(writer_failed_earlier()),
        };
        self.finish(res);
    }

    /// Publication and answers first, the outcome last: once the actor has applied the
    /// batch (after the outcome), its lines have been broadcast, so a subscriber that
    /// joins then gets them in its backlog and never also live
    /// (`soak`, `transport.rs::subscription_catch_up_has_no_gap_and_no_duplicate`).
    fn finish(self, res: Result<(), AgentError>) {
        if let Some(after) = self.after {
            after(&res);
        }
        let _ = self.done.send(res);
    }
}

/// Most syncs of groupable batches running at once: later batches queue and go
/// together into the next sync that ends.
const GROUPS_IN_FLIGHT: usize = 2;

/// Most batches one grouped sync covers.
const MAX_SYNC_GROUP: usize = 256;

/// Takes from `queue` the batches that may share `first`'s sync: synced batches of
/// other Logs on the same filesystem, in queue order, up to [`MAX_SYNC_GROUP`] in all.
/// Empty when `first` syncs alone. The rest keep their order.
fn take_group(first: &WriteJob, queue: &mut std::collections::VecDeque<WriteJob>) -> Vec<WriteJob> {
    let mut group = Vec::new();
    if !first.groupable() && first.shared().is_none() {
        return group;
    }
    let joins = |j: &WriteJob, group: &[WriteJob]| {
        (j.sync || j.shared().is_some())
            && j.group == first.group
            && !Arc::ptr_eq(&j.writer, &first.writer)
            && !group.iter().any(|g| Arc::ptr_eq(&g.writer, &j.writer))
    };
    if !queue.iter().any(|j| joins(j, &group)) {
        return group;
    }
    let mut rest = std::collections::VecDeque::with_capacity(queue.len());
    for j in queue.drain(..) {
        if group.len() + 1 < MAX_SYNC_GROUP && joins(&j, &group) {
            group.push(j);
        } else {
            rest.push_back(j);
        }
    }
    *queue = rest;
    group
}

/// Commits batches of several Logs on one filesystem together: each batch is written,
/// one `syncfs` makes them all durable, then each writer settles its batch with that
/// outcome and each batch's answers and outcome go out, in order. A batch whose write
/// fails fails alone; a failed sync fails every batch written before it.
fn run_group(jobs: Vec<WriteJob>) {
    let mut results: Vec<Option<Result<(), AgentError>>> = Vec::with_capacity(jobs.len());
    let mut written = Vec::with_capacity(jobs.len());
    let mut fd = None;
    for job in &jobs {
        let mut guard = match job.writer.lock() {
            Ok(g) => g,
            Err(_) => {
                results.push(Some(Err(writer_failed_earlier())));
                written.push(None);
                continue;
            }
        };
        let wrote = match guard.grouped() {
            Some(g) => g.write_unsynced(&job.bytes).map(|()| g.sync_fd()),
            // Not groupable after all: its own append, synced.
            None => {
                results.push(Some(guard.append(&job.bytes, true)));
                written.push(None);
                continue;
            }
        };
        match wrote {
            Ok(raw) => {
                fd.get_or_insert(raw);
                results.push(None);
                written.push(Some(guard));
            }
            Err(e) => {
                results.push(Some(Err(e)));
                written.push(None);
            }
        }
    }
    let synced = match fd {
        Some(fd) => syncfs(fd),
        None => Ok(()),
    };
    for ((job, guard), result) in jobs.iter().zip(written.iter_mut()).zip(results.iter_mut()) {
        if let Some(mut w) = guard.take() {
            let g = w
                .grouped()
                .expect("a written member of the group is grouped");
            *result = Some(g.finish(job.bytes.len(), &synced));
        }
    }
    drop(written);
    for (job, result) in jobs.into_iter().zip(results) {
        job.finish(result.unwrap_or_else(|| Err(writer_failed_earlier())));
    }
}

/// Commits batches of several sessions of one store together: each appender stages its
/// batch, the first commits them all (one transaction where it can), then, while the
/// next group may already commit, each appender settles its batch with its own outcome
/// and each batch's answers and outcome go out, in order. A batch that fails to stage,
/// or whose session was fenced, fails alone.
fn run_shared_group(jobs: Vec<WriteJob>, committing: &mut Committing) {
    let mut results: Vec<Option<Result<(), AgentError>>> = Vec::with_capacity(jobs.len());
    let mut staged_by = Vec::with_capacity(jobs.len());
    let mut staged = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let mut guard = match job.writer.lock() {
            Ok(g) => g,
            Err(_) => {
                results.push(Some(Err(writer_failed_earlier())));
                staged_by.push(None);
                continue;
            }
        };
        match guard.shared_commit().map(|c| c.stage(&job.bytes, job.sync)) {
            Some(Ok(batch)) => {
                staged.push(batch);
                results.push(None);
                staged_by.push(Some(guard));
            }
            Some(Err(e)) => {
                results.push(Some(Err(e)));
                staged_by.push(None);
            }
            // Not shared after all: its own append.
            None => {
                results.push(Some(guard.append(&job.bytes, job.sync)));
                staged_by.push(None);
            }
        }
    }
    let outcomes = match staged_by.iter_mut().flatten().next() {
        Some(first) => first
            .shared_commit()
            .map(|c| c.commit(staged))
            .unwrap_or_default(),
        None => Vec::new(),
    };
    // The next group may commit while this one is settled and answered: no batch of
    // this group's Logs is queued until its outcome goes out below.
    committing.release();
    let mut outcomes = outcomes.into_iter();
    for ((job, guard), result) in jobs
        .iter()
        .zip(staged_by.iter_mut())
        .zip(results.iter_mut())
    {
        if let Some(mut w) = guard.take() {
            let res = outcomes.next().unwrap_or_else(|| Err(no_outcome()));
            *result = Some(match w.shared_commit() {
                Some(c) => c.settle(job.bytes.len(), res),
                None => res,
            });
        }
    }
    drop(staged_by);
    for (job, result) in jobs.into_iter().zip(results) {
        job.finish(result.unwrap_or_else(|| Err(writer_failed_earlier())));
    }
}

/// `syncfs(2)` of the filesystem holding `fd` (Linux; elsewhere no Log joins a group, see
/// [`group_device`]).
#[cfg(not(target_os = "linux"))]
fn syncfs(_fd: std::os::fd::RawFd) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(target_os = "linux")]
fn syncfs(fd: std::os::fd::RawFd) -> io::Result<()> {
    // SAFETY: a plain system call on a descriptor a locked writer keeps open.
    if unsafe { libc::syncfs(fd) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The error of a batch whose group commit ended without an outcome for it.
pub fn no_outcome() -> AgentError {
    AgentError::new(
        ErrorKind::LogWriteFailed,
        "the group commit stopped before this batch's outcome was known",
    )
}

fn writer_failed_earlier() -> AgentError {
    AgentError::new(ErrorKind::LogWriteFailed, "the Log writer failed earlier")
}

/// Most commit threads file Logs use: as many Logs sync at once. Measured on a
/// 2-vCPU VM, 16 threads syncing 64 files reach what 64 threads do; fewer do not.
pub const COMMIT_THREADS: usize = 16;

/// Jobs queued and not yet taken, readable without the pool's lock.
static QUEUED: AtomicUsize = AtomicUsize::new(0);
/// Commit threads running a batch.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// A commit thread is polling the queue right after a batch (one at most).
static SPINNING: AtomicBool = AtomicBool::new(false);
/// How long a thread that just committed polls for the next batch before it parks.
const SPIN: std::time::Duration = std::time::Duration::from_micros(150);

/// After a batch, one commit thread polls the queue for a short while: a session's
/// next batch usually follows its answer within a round trip, and taking it from the
/// queue costs nothing, where a parked thread costs a futex wake and (on a VM) the
/// wake of a halted vCPU. Only when no other batch is being committed: with several
/// in flight the CPUs are busy and the next batch finds a thread anyway.
fn spin_for_next() {
    if QUEUED.load(Ordering::SeqCst) > 0 || RUNNING.load(Ordering::SeqCst) > 0 {
        return;
    }
    if SPINNING
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return;
    }
    let start = std::time::Instant::now();
    while QUEUED.load(Ordering::SeqCst) == 0 && start.elapsed() < SPIN {
        // Yields rather than spins: a runnable thread of this CPU (the runtime parsing
        // the next requests, a client) runs first; with none, the vCPU stays awake.
        std::thread::yield_now();
    }
    // Stops counting as a spinner before it looks under the lock, so a job pushed
    // after this point is signalled as usual and one pushed before is seen.
    SPINNING.store(false, Ordering::SeqCst);
}

/// A batch (or group) a commit thread is running, in [`RUNNING`] and, when it may sync
/// in a group, in the pool's `groups_running`.
struct Running {
    groupable: bool,
}

impl Running {
    fn new(groupable: bool) -> Running {
        RUNNING.fetch_add(1, Ordering::SeqCst);
        Running { groupable }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        if self.groupable {
            // Under the lock: a batch left queued for a running group (see `submit`)
            // is seen by this thread's next look at the queue.
            pool_lock().groups_running -= 1;
        }
    }
}

/// A store whose group commit a thread is running, in the pool's `committing`: the
/// store's batches queue meanwhile, and all of them go into its next commit, which
/// starts as soon as this one ends (see [`run_shared_group`]).
struct Committing {
    key: Option<usize>,
}

impl Committing {
    /// Ends the commit: a thread is woken for the batches that queued meanwhile.
    fn release(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        let mut st = pool_lock();
        st.committing.retain(|k| *k != key);
        if !st.queue.iter().any(|j| j.shared() == Some(key)) {
            return;
        }
        if st.idle > st.signaled {
            st.signaled += 1;
            drop(st);
            POOL.ready.notify_one();
        } else if st.threads < COMMIT_THREADS && spawn_commit_thread().is_ok() {
            st.threads += 1;
        }
        // Otherwise the next thread to finish (this one, once its group is answered)
        // takes them.
    }
}

impl Drop for Committing {
    fn drop(&mut self) {
        self.release();
    }
}

fn spawn_commit_thread() -> io::Result<()> {
    let spawned = std::thread::Builder::new()
        .name("log-commit".into())
        .stack_size(256 * 1024)
        .spawn(CommitPool::serve);
    match spawned {
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::error!(error = %e, "cannot start a Log commit thread");
            Err(e)
        }
    }
}

/// The commit threads: started as batches find none idle, up to [`COMMIT_THREADS`],
/// then kept parked for the next.
struct CommitPool {
    state: Mutex<PoolState>,
    ready: std::sync::Condvar,
}

struct PoolState {
    queue: std::collections::VecDeque<WriteJob>,
    threads: usize,
    idle: usize,
    /// Idle threads woken and not yet running.
    signaled: usize,
    /// Threads running a batch that may sync in a group (alone or with others).
    groups_running: usize,
    /// Stores ([`GroupKey::Store`]) with a group commit running.
    committing: Vec<usize>,
}

static POOL: CommitPool = CommitPool {
    state: Mutex::new(PoolState {
        queue: std::collections::VecDeque::new(),
        threads: 0,
        idle: 0,
        signaled: 0,
        groups_running: 0,
        committing: Vec::new(),
    }),
    ready: std::sync::Condvar::new(),
};

fn pool_lock() -> std::sync::MutexGuard<'static, PoolState> {
    // Nothing panics while holding it; a poisoned lock still holds a valid queue.
    POOL.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl CommitPool {
    fn submit(job: WriteJob) {
        let mut st = pool_lock();
        st.queue.push_back(job);
        let ahead = QUEUED.fetch_add(1, Ordering::SeqCst);
        if st.queue.back().is_some_and(WriteJob::groupable) && st.groups_running >= GROUPS_IN_FLIGHT
        {
            // The batch waits for a running group to end: its thread then takes every
            // batch queued meanwhile into one sync, where a thread of its own would
            // sync this one alone beside it.
            return;
        }
        if let Some(key) = st.queue.back().and_then(WriteJob::shared) {
            if st.committing.contains(&key) {
                // Its store is committing: the batch goes into the store's next commit,
                // for which the running one wakes a thread as it ends.
                return;
            }
        }
        if ahead == 0 && SPINNING.load(Ordering::SeqCst) {
            // A thread that just finished a batch is polling the queue: it takes this
            // one without a futex wake (and, on a VM, without waking a halted vCPU).
            // A second batch queued meanwhile is signalled as usual, so two sessions'
            // batches never wait on the one poller.
            return;
        }
        if st.idle > st.signaled {
            st.signaled += 1;
            drop(st);
            POOL.ready.notify_one();
            return;
        }
        if st.threads >= COMMIT_THREADS {
            return; // the next thread to finish takes it
        }
        match spawn_commit_thread() {
            Ok(()) => st.threads += 1,
            Err(e) if st.threads == 0 => {
                // Nobody would ever take it: fail it rather than hang.
                if let Some(job) = st.queue.pop_back() {
                    QUEUED.fetch_sub(1, Ordering::SeqCst);
                    drop(st);
                    job.finish(Err(AgentError::new(
                        ErrorKind::LogWriteFailed,
                        format!("cannot start a Log commit thread: {e}"),
                    )));
                }
            }
            Err(_) => {} // the next thread to finish takes it
        }
    }

    fn serve() {
        let mut st = pool_lock();
        loop {
            // A store's batches wait while its commit runs (they go into its next one).
            let next = st
                .queue
                .iter()
                .position(|j| j.shared().is_none_or(|key| !st.committing.contains(&key)));
            if let Some(job) = next.and_then(|i| st.queue.remove(i)) {
                let mut group = take_group(&job, &mut st.queue);
                QUEUED.fetch_sub(1 + group.len(), Ordering::SeqCst);
                let groupable = job.groupable();
                st.groups_running += usize::from(groupable);
                let shared = job.shared();
                if let Some(key) = shared {
                    st.committing.push(key);
                }
                drop(st);
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    // Counted out even if the batch's code unwinds: a group that never
                    // ended would leave later batches queued for it forever.
                    let _running = Running::new(groupable);
                    let mut committing = Committing { key: shared };
                    if shared.is_some() {
                        group.insert(0, job);
                        run_shared_group(group, &mut committing);
                    } else if group.is_empty() {
                        job.run();
                    } else {
                        group.insert(0, job);
                        run_group(group);
                    }
                }));
                if ran.is_err() {
                    // Its appenders see the writer gone (their outcomes were dropped)
                    // and the thread stays in the pool.
                    tracing::error!("a Log commit panicked; its batches failed");
                }
                spin_for_next();
                st = pool_lock();
                continue;
            }
            st.idle += 1;
            st = POOL.ready.wait(st).unwrap_or_else(|p| p.into_inner());
            st.idle -= 1;
            st.signaled = st.signaled.saturating_sub(1);
        }
    }
}

/// The outcome of one write handed to a [`WriterThread`], sent as soon as it is known.
pub type WriteOutcome = tokio::sync::oneshot::Receiver<Result<(), AgentError>>;

impl WriterThread {
    pub fn spawn(writer: Box<dyn LogAppender>, _sid: &str) -> WriterThread {
        WriterThread {
            group: writer.sync_group(),
            writer: Arc::new(Mutex::new(writer)),
        }
    }

    /// Writes whole lines, synced when `sync`; resolves once they are on disk.
    pub async fn write(&self, bytes: Vec<u8>, sync: bool) -> Result<(), AgentError> {
        self.write_then(bytes, sync, None).await
    }

    /// Like [`write`](Self::write), and runs `after` on the commit thread as soon as
    /// the outcome is known (before this resolves).
    pub async fn write_then(
        &self,
        bytes: Vec<u8>,
        sync: bool,
        after: Option<AfterWrite>,
    ) -> Result<(), AgentError> {
        outcome(self.submit(bytes, sync, after)).await
    }

    /// Hands a write to a commit thread without waiting: `after` runs there with the
    /// outcome, which the returned receiver also carries (see [`outcome`]). The caller
    /// hands the next write of this Log only after this one's outcome.
    pub fn submit(&self, bytes: Vec<u8>, sync: bool, after: Option<AfterWrite>) -> WriteOutcome {
        let (done, rx) = tokio::sync::oneshot::channel();
        CommitPool::submit(WriteJob {
            writer: self.writer.clone(),
            group: self.group,
            bytes,
            sync,
            after,
            done,
        });
        rx
    }
}

/// Waits for the outcome of a write handed to a [`WriterThread`].
pub async fn outcome(rx: WriteOutcome) -> Result<(), AgentError> {
    rx.await.map_err(|_| writer_gone())?
}

fn writer_gone() -> AgentError {
    AgentError::new(ErrorKind::LogWriteFailed, "log writer thread is gone")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filestore::open_appender;
    use crate::filestore::tests::FailingSync;
    use crate::tests::home;
    use crate::{LogFile, LogWriter, SharedCommit, StagedBatch};
    use serde_json::json;
    use std::fs::{self, File, OpenOptions};
    use std::io::Write;

    /// Batches handed over at every distance from the previous one's end (inside the
    /// spin window, at its edge, long after it) are all taken: none waits in the queue
    /// with every thread parked or a spinner that gave up without seeing it.
    #[test]
    fn batches_arriving_around_the_spin_window_are_never_stranded() {
        let (_d, home) = home();
        let spin = SPIN.as_micros() as u64;
        let gaps_us = [0u64, 20, spin - 5, spin, spin + 5, 400];
        let clients: Vec<_> = (0..4)
            .map(|i| {
                let path = home.sessions_dir().join(format!("spin{i}.ndjson"));
                fs::write(&path, b"").unwrap();
                let w = WriterThread::spawn(open_appender(&path).unwrap(), "spin");
                std::thread::spawn(move || {
                    for n in 0..300usize {
                        let (tx, rx) = std::sync::mpsc::channel();
                        let after: AfterWrite = Box::new(move |r| {
                            let _ = tx.send(r.is_ok());
                        });
                        drop(w.submit(format!("{i}:{n}\n").into_bytes(), false, Some(after)));
                        let ok = rx
                            .recv_timeout(std::time::Duration::from_secs(10))
                            .unwrap_or_else(|_| panic!("batch {n} of Log {i} was never taken"));
                        assert!(ok);
                        let gap = gaps_us[(n + i) % gaps_us.len()];
                        std::thread::sleep(std::time::Duration::from_micros(gap));
                    }
                    path
                })
            })
            .collect();
        for (i, c) in clients.into_iter().enumerate() {
            let path = c.join().unwrap();
            let want: String = (0..300).map(|n| format!("{i}:{n}\n")).collect();
            assert_eq!(fs::read_to_string(path).unwrap(), want);
        }
    }

    /// More Logs than commit threads, each with batches in a row: every batch lands in
    /// its own Log, in order, and the outcome of each arrives.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn logs_share_the_commit_threads_and_keep_their_order() {
        let (_d, home) = home();
        let logs = COMMIT_THREADS * 2 + 3;
        let mut tasks = Vec::new();
        for i in 0..logs {
            let path = home.sessions_dir().join(format!("c{i}.ndjson"));
            fs::write(&path, b"").unwrap();
            let w = WriterThread::spawn(open_appender(&path).unwrap(), "c");
            tasks.push(tokio::spawn(async move {
                for n in 0..20 {
                    let line = format!("{i}:{n}\n").into_bytes();
                    w.write(line, n % 2 == 0).await.unwrap();
                }
                path
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            let path = t.await.unwrap();
            let want: String = (0..20).map(|n| format!("{i}:{n}\n")).collect();
            assert_eq!(fs::read_to_string(path).unwrap(), want);
        }
    }

    /// An appender that panics in the middle of its commit.
    struct Panics;

    impl LogAppender for Panics {
        fn append(&mut self, _: &[u8], _: bool) -> Result<(), AgentError> {
            panic!("injected panic in a Log commit");
        }
        fn sync_group(&self) -> Option<GroupKey> {
            Some(GroupKey::Device(u64::MAX))
        }
    }

    struct Fine;

    impl LogAppender for Fine {
        fn append(&mut self, _: &[u8], _: bool) -> Result<(), AgentError> {
            Ok(())
        }
        fn sync_group(&self) -> Option<GroupKey> {
            Some(GroupKey::Device(u64::MAX))
        }
    }

    /// A commit that panics fails its own batch (`log_write_failed`), and the pool
    /// goes on committing: more panics than grouped syncs may run at once leave no
    /// later batch queued for a group that never ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_that_panics_fails_its_batch_and_the_pool_keeps_serving() {
        let ten = std::time::Duration::from_secs(10);
        for _ in 0..GROUPS_IN_FLIGHT + 2 {
            // Past the spin window, so each batch needs the pool to hand it to a thread.
            tokio::time::sleep(SPIN * 4).await;
            let w = WriterThread::spawn(Box::new(Panics), "p");
            let e = tokio::time::timeout(ten, w.write(b"x\n".to_vec(), true))
                .await
                .expect("a batch queued after a panic was never taken")
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::LogWriteFailed, "{e:?}");
        }
        tokio::time::sleep(SPIN * 4).await;
        let w = WriterThread::spawn(Box::new(Fine), "f");
        tokio::time::timeout(ten, w.write(b"x\n".to_vec(), true))
            .await
            .expect("a batch after the panics was never taken")
            .unwrap();
    }

    fn job(
        writer: &Arc<Mutex<Box<dyn LogAppender>>>,
        group: Option<u64>,
        sync: bool,
        bytes: &[u8],
    ) -> (WriteJob, WriteOutcome) {
        let (done, rx) = tokio::sync::oneshot::channel();
        let job = WriteJob {
            writer: writer.clone(),
            group: group.map(GroupKey::Device),
            bytes: bytes.to_vec(),
            sync,
            after: None,
            done,
        };
        (job, rx)
    }

    fn writer_of(w: impl LogAppender) -> Arc<Mutex<Box<dyn LogAppender>>> {
        Arc::new(Mutex::new(Box::new(w)))
    }

    /// A group takes synced batches of other Logs on the first one's filesystem, in
    /// queue order; the rest (another filesystem, unsynced, the same Log again, a Log
    /// that syncs alone) stay queued in their order.
    #[test]
    fn a_group_takes_only_other_logs_synced_batches_on_the_same_filesystem() {
        let w: Vec<_> = (0..6)
            .map(|_| writer_of(LogWriter::with_file(FailingSync { bytes: vec![] }, 0)))
            .collect();
        let (first, _r0) = job(&w[0], Some(1), true, b"0\n");
        let mut queue = std::collections::VecDeque::new();
        let mut rx = Vec::new();
        for (writer, group, sync, tag) in [
            (&w[1], Some(1), true, "a"),  // joins
            (&w[2], Some(2), true, "b"),  // another filesystem
            (&w[0], Some(1), true, "c"),  // the first batch's own Log
            (&w[3], Some(1), false, "d"), // not synced
            (&w[4], None, true, "e"),     // syncs alone
            (&w[5], Some(1), true, "f"),  // joins
            (&w[1], Some(1), true, "g"),  // a Log already in the group
        ] {
            let (j, r) = job(writer, group, sync, tag.as_bytes());
            queue.push_back(j);
            rx.push(r);
        }
        let group = take_group(&first, &mut queue);
        let tags = |js: &mut dyn Iterator<Item = &WriteJob>| -> String {
            js.map(|j| String::from_utf8_lossy(&j.bytes).into_owned())
                .collect()
        };
        assert_eq!(tags(&mut group.iter()), "af");
        assert_eq!(tags(&mut queue.iter()), "bcdeg");
        let (alone, _r) = job(&w[4], None, true, b"x\n");
        assert!(take_group(&alone, &mut queue).is_empty());
        assert_eq!(queue.len(), 5);
    }

    /// A real Log file whose share of a group's sync fails (as an `EIO` from `syncfs`
    /// reported for it would).
    struct ShareFails(File);

    impl LogFile for ShareFails {
        fn write_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
            Write::write_all(&mut self.0, bytes)
        }
        fn sync_data(&mut self) -> io::Result<()> {
            self.0.sync_data()
        }
        fn set_len(&mut self, len: u64) -> io::Result<()> {
            self.0.set_len(len)
        }
        fn raw_fd(&self) -> std::os::fd::RawFd {
            std::os::fd::AsRawFd::as_raw_fd(&self.0)
        }
        fn group_synced(&mut self, _: &io::Result<()>) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::EIO))
        }
    }

    /// One `syncfs` settles a whole group: each good Log holds its batch and the next
    /// batch lands after it; the Log whose share failed is cut back to what was
    /// acknowledged, its writer stops (`writer_stopped`, `acked_bytes`) and refuses
    /// the next batch, and the other Logs of the group do not notice.
    #[tokio::test]
    async fn a_group_shares_one_sync_and_a_failed_share_stops_only_its_writer() {
        let (_d, home) = home();
        let path = |i: usize| home.sessions_dir().join(format!("g{i}.ndjson"));
        let open = |i: usize| {
            fs::write(path(i), b"old\n").unwrap();
            OpenOptions::new().append(true).open(path(i)).unwrap()
        };
        let good: Vec<_> = (0..3)
            .map(|i| writer_of(LogWriter::with_file(open(i), 4).with_group(Some(7))))
            .collect();
        let bad = writer_of(LogWriter::with_file(ShareFails(open(3)), 4).with_group(Some(7)));
        let mut jobs = Vec::new();
        let mut rx = Vec::new();
        for (i, w) in good.iter().chain([&bad]).enumerate() {
            let (j, r) = job(w, Some(7), true, format!("new{i}\n").as_bytes());
            jobs.push(j);
            rx.push(r);
        }
        run_group(jobs);
        let mut outcomes = Vec::new();
        for r in rx {
            outcomes.push(outcome(r).await);
        }
        for (i, o) in outcomes[..3].iter().enumerate() {
            assert!(o.is_ok(), "{o:?}");
            assert_eq!(
                fs::read_to_string(path(i)).unwrap(),
                format!("old\nnew{i}\n")
            );
        }
        let e = outcomes[3].as_ref().unwrap_err();
        assert_eq!(e.kind, ErrorKind::IoError, "{e:?}");
        assert_eq!(e.details["errno"], json!(libc::EIO));
        assert_eq!(e.details["writer_stopped"], json!(true));
        assert_eq!(e.details["acked_bytes"], json!(4));
        assert_eq!(fs::read_to_string(path(3)).unwrap(), "old\n");

        let (j, r) = job(&good[0], Some(7), true, b"next\n");
        let (k, s) = job(&bad, Some(7), true, b"never\n");
        run_group(vec![j, k]);
        outcome(r).await.unwrap();
        assert!(outcome(s).await.is_err());
        assert_eq!(fs::read_to_string(path(0)).unwrap(), "old\nnew0\nnext\n");
        assert_eq!(fs::read_to_string(path(3)).unwrap(), "old\n");
    }

    /// A database store in miniature: records each group commit's batches, fails the
    /// batches of fenced sessions, and can hold its first commit until told to go on.
    #[derive(Default)]
    struct FakeStore {
        commits: Mutex<Vec<Vec<String>>>,
        fenced: Vec<String>,
        /// Told when a commit starts.
        started: Mutex<Option<std::sync::mpsc::Sender<()>>>,
        /// The first commit waits for this.
        hold: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    }

    struct FakeAppender {
        store: Arc<FakeStore>,
        sid: String,
        acked: usize,
        stopped: bool,
    }

    fn fake(store: &Arc<FakeStore>, sid: &str) -> Arc<Mutex<Box<dyn LogAppender>>> {
        writer_of(FakeAppender {
            store: store.clone(),
            sid: sid.into(),
            acked: 0,
            stopped: false,
        })
    }

    impl LogAppender for FakeAppender {
        fn append(&mut self, _: &[u8], _: bool) -> Result<(), AgentError> {
            Err(AgentError::internal("a store's batch committed on its own"))
        }
        fn sync_group(&self) -> Option<GroupKey> {
            Some(GroupKey::Store(Arc::as_ptr(&self.store) as usize))
        }
        fn shared_commit(&mut self) -> Option<&mut dyn SharedCommit> {
            Some(self)
        }
    }

    impl SharedCommit for FakeAppender {
        fn stage(&mut self, bytes: &[u8], _: bool) -> Result<StagedBatch, AgentError> {
            if self.stopped {
                return Err(AgentError::new(ErrorKind::LogWriteFailed, "stopped"));
            }
            let text = String::from_utf8_lossy(bytes).trim_end().to_string();
            Ok(Box::new((self.sid.clone(), text)))
        }
        fn commit(&mut self, batches: Vec<StagedBatch>) -> Vec<Result<(), AgentError>> {
            if let Some(tx) = self.store.started.lock().unwrap().as_ref() {
                let _ = tx.send(());
            }
            let hold = self.store.hold.lock().unwrap().take();
            if let Some(rx) = hold {
                let _ = rx.recv();
            }
            let batches: Vec<(String, String)> = batches
                .into_iter()
                .map(|b| *b.downcast::<(String, String)>().unwrap())
                .collect();
            self.store
                .commits
                .lock()
                .unwrap()
                .push(batches.iter().map(|(_, t)| t.clone()).collect());
            batches
                .iter()
                .map(|(sid, _)| {
                    if self.store.fenced.contains(sid) {
                        Err(AgentError::new(ErrorKind::Busy, "fenced"))
                    } else {
                        Ok(())
                    }
                })
                .collect()
        }
        fn settle(&mut self, len: usize, res: Result<(), AgentError>) -> Result<(), AgentError> {
            match res {
                Ok(()) => self.acked += len,
                Err(_) => self.stopped = true,
            }
            res
        }
    }

    fn shared_job(
        writer: &Arc<Mutex<Box<dyn LogAppender>>>,
        bytes: &str,
        answered: &Arc<Mutex<Vec<String>>>,
    ) -> (WriteJob, WriteOutcome) {
        let (done, rx) = tokio::sync::oneshot::channel();
        let group = writer.lock().unwrap().sync_group();
        let (answered, tag) = (answered.clone(), bytes.trim_end().to_string());
        let job = WriteJob {
            writer: writer.clone(),
            group,
            bytes: bytes.as_bytes().to_vec(),
            sync: true,
            after: Some(Box::new(move |res: &Result<(), AgentError>| {
                answered
                    .lock()
                    .unwrap()
                    .push(format!("{tag}:{}", if res.is_ok() { "ok" } else { "err" }));
            })),
            done,
        };
        (job, rx)
    }

    /// A store's group is one commit; each batch then gets its own outcome (a fenced
    /// session's fails and stops its appender alone, a stopped appender's batch never
    /// reaches the commit), and the answers go out in the group's order.
    #[tokio::test]
    async fn a_store_group_is_one_commit_with_an_outcome_per_batch() {
        let store = Arc::new(FakeStore {
            fenced: vec!["b".into()],
            ..FakeStore::default()
        });
        let (a, b, c) = (fake(&store, "a"), fake(&store, "b"), fake(&store, "c"));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let mut rx = Vec::new();
        let mut jobs = Vec::new();
        for (w, text) in [(&a, "a1\n"), (&b, "b1\n"), (&c, "c1\n")] {
            let (j, r) = shared_job(w, text, &answered);
            jobs.push(j);
            rx.push(r);
        }
        run_shared_group(jobs, &mut Committing { key: None });
        let mut outcomes = Vec::new();
        for r in rx {
            outcomes.push(outcome(r).await);
        }
        assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
        assert_eq!(outcomes[1].as_ref().unwrap_err().kind, ErrorKind::Busy);
        assert_eq!(
            *store.commits.lock().unwrap(),
            vec![vec!["a1".to_string(), "b1".into(), "c1".into()]]
        );
        assert_eq!(*answered.lock().unwrap(), ["a1:ok", "b1:err", "c1:ok"]);

        // b's appender stopped: its next batch fails without reaching the commit.
        let (j1, r1) = shared_job(&a, "a2\n", &answered);
        let (j2, r2) = shared_job(&b, "b2\n", &answered);
        run_shared_group(vec![j1, j2], &mut Committing { key: None });
        outcome(r1).await.unwrap();
        assert_eq!(
            outcome(r2).await.unwrap_err().kind,
            ErrorKind::LogWriteFailed
        );
        assert_eq!(store.commits.lock().unwrap()[1], ["a2"]);
    }

    /// Batches of a store that queue while its commit runs wait for it (no thread takes
    /// them alone) and all go into the store's next commit together.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stores_batches_queued_during_its_commit_form_its_next_commit() {
        let (started_tx, started) = std::sync::mpsc::channel();
        let (go, hold) = std::sync::mpsc::channel();
        let store = Arc::new(FakeStore {
            started: Mutex::new(Some(started_tx)),
            hold: Mutex::new(Some(hold)),
            ..FakeStore::default()
        });
        let first = WriterThread::spawn(
            Box::new(FakeAppender {
                store: store.clone(),
                sid: "first".into(),
                acked: 0,
                stopped: false,
            }),
            "first",
        );
        let held = first.submit(b"first\n".to_vec(), true, None);
        started
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the first commit never started");
        let mut queued = Vec::new();
        for i in 0..8 {
            let w = WriterThread::spawn(
                Box::new(FakeAppender {
                    store: store.clone(),
                    sid: format!("s{i}"),
                    acked: 0,
                    stopped: false,
                }),
                "s",
            );
            queued.push((w.submit(format!("s{i}\n").into_bytes(), true, None), w));
        }
        go.send(()).unwrap();
        let ten = std::time::Duration::from_secs(10);
        tokio::time::timeout(ten, outcome(held))
            .await
            .unwrap()
            .unwrap();
        for (rx, _w) in queued {
            tokio::time::timeout(ten, outcome(rx))
                .await
                .unwrap()
                .unwrap();
        }
        let commits = store.commits.lock().unwrap().clone();
        let want: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
        assert_eq!(commits, vec![vec!["first".to_string()], want]);
    }
}

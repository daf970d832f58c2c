//! The SQLite store's one writer: a thread that owns the write connection and commits every
//! write waiting for it together (group commit).
//!
//! SQLite has one writer at a time anyway; what a group shares is the commit — one fsync
//! (`synchronous = FULL`) for every write in it. Each write runs in its own savepoint, so one that
//! fails (a version conflict, a duplicate key) is rolled back alone; callers are answered only
//! after COMMIT returned, so nothing is acknowledged before it is durable, and when the commit
//! fails every write of the group gets the failure (none was acknowledged).
//!
//! The writer talks to SQLite synchronously (rusqlite, cached prepared statements): a write is a
//! handful of statements of a few microseconds each, and running them on the thread that owns
//! the connection, instead of handing every statement to a connection worker and back, is what
//! makes a group as short as its fsync. Reads stay on the store's pool.
//!
//! Checkpoints (copying committed WAL frames into the database file, then syncing it) run on a
//! thread of their own with its own connection (PASSIVE: they never block the writer or a
//! reader), woken after commits; the writer's automatic checkpoint is off, so no group waits for
//! one. Durability does not depend on them: a commit is durable once its WAL frames are synced.

use super::StoreError;
use rusqlite::{Connection, OpenFlags};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Duration;

/// Most writes committed together.
pub const MAX_GROUP: usize = 128;

/// A write: statements run inside the group's transaction (`run`, in a savepoint; `false` rolls
/// the savepoint back), then the caller is answered with the commit's outcome (`finish`).
trait Job: Send {
    fn run(&mut self, conn: &mut Connection) -> bool;
    fn finish(self: Box<Self>, group_failure: Option<StoreError>);
}

/// A write with a typed result for its caller.
struct Typed<T, F> {
    write: Option<F>,
    outcome: Option<Result<T, StoreError>>,
    reply: tokio::sync::oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for Typed<T, F>
where
    T: Send,
    F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, conn: &mut Connection) -> bool {
        let write = self.write.take().expect("a write runs once");
        let r = catch_unwind(AssertUnwindSafe(|| write(conn)))
            .unwrap_or_else(|_| Err(StoreError::Unavailable("a write panicked".into())));
        let ok = r.is_ok();
        self.outcome = Some(r);
        ok
    }

    fn finish(self: Box<Self>, group_failure: Option<StoreError>) {
        let answer = match (self.outcome, group_failure) {
            // A write that failed was rolled back whatever the group did.
            (Some(Err(e)), _) => Err(e),
            (_, Some(e)) => Err(e),
            (Some(Ok(v)), None) => Ok(v),
            (None, None) => Err(StoreError::Unavailable("the write did not run".into())),
        };
        let _ = self.reply.send(answer);
    }
}

/// The handle of the writer thread (it stops when the last handle is dropped).
#[derive(Debug, Clone)]
pub struct Writer {
    jobs: tokio::sync::mpsc::Sender<Box<dyn Job>>,
}

impl std::fmt::Debug for dyn Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the SQLite writer has stopped".into())
}

pub fn unavailable(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// A UNIQUE or PRIMARY KEY constraint refused the row.
pub fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
            || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
}

/// A read-write connection to the database file at `path` (waiting up to 10 s for a lock).
fn open(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(unavailable)?;
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(unavailable)?;
    Ok(conn)
}

impl Writer {
    /// Opens the write connection to the database file at `path` (WAL, `synchronous = FULL`,
    /// foreign keys on; the schema must be in place) and starts the writer thread.
    pub fn start(path: &Path) -> Result<Self, StoreError> {
        let conn = open(path)?;
        conn.execute_batch(
            // temp_store = MEMORY: each write's savepoint journals the pages it changes in a
            // statement journal; in memory, not a temporary file (it is never needed after a
            // crash: an uncommitted transaction is simply absent from the WAL).
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
             PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 0;",
        )
        .map_err(unavailable)?;
        conn.set_prepared_statement_cache_capacity(64);
        let checkpoints = Checkpointer::start(path)?;
        let (jobs, rx) = tokio::sync::mpsc::channel(4 * MAX_GROUP);
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || run(conn, rx, checkpoints))
            .map_err(|e| StoreError::Unavailable(format!("cannot start the SQLite writer: {e}")))?;
        Ok(Writer { jobs })
    }

    /// Runs `write` in the next group; its result once the group is durable.
    pub async fn write<T, F>(&self, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (job, answer) = job(write);
        self.jobs.send(job).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Queues `write` now, behind every write queued before it (the writer runs them in queue
    /// order); its result once its group is durable. `None` when the queue is full or the writer
    /// stopped (nothing was queued).
    pub fn queue<T, F>(
        &self,
        write: F,
    ) -> Option<impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (job, answer) = job(write);
        self.jobs.try_send(job).ok()?;
        Some(async move { answer.await.map_err(|_| stopped())? })
    }
}

/// Where a write's answer arrives.
type Answer<T> = tokio::sync::oneshot::Receiver<Result<T, StoreError>>;

/// A write as a job, and where its answer arrives.
fn job<T, F>(write: F) -> (Box<dyn Job>, Answer<T>)
where
    T: Send + 'static,
    F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
{
    let (reply, answer) = tokio::sync::oneshot::channel();
    let job: Box<dyn Job> = Box::new(Typed {
        write: Some(write),
        outcome: None,
        reply,
    });
    (job, answer)
}

/// Pause between checkpoints, so that one copies many commits' frames (a checkpoint syncs the
/// database file each time). The WAL grows by at most what the writer commits in this time plus
/// one checkpoint's duration.
const CHECKPOINT_PAUSE: Duration = Duration::from_millis(100);

/// The checkpoint thread's doorbell: rung after every commit, it stops when dropped.
struct Checkpointer(std::sync::mpsc::SyncSender<()>);

impl Checkpointer {
    /// Opens a connection of its own to `path` and starts the checkpoint thread.
    fn start(path: &Path) -> Result<Self, StoreError> {
        let conn = open(path)?;
        // One pending ring is enough: a checkpoint copies every frame committed before it.
        let (bell, rung) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                while rung.recv().is_ok() {
                    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, i64>(2)?,
                        ))
                    });
                    match done {
                        Ok((_, log, copied)) => {
                            metrics::gauge!("privacy_ledger_sqlite_wal_frames").set(log as f64);
                            metrics::gauge!("privacy_ledger_sqlite_wal_frames_uncopied")
                                .set((log - copied) as f64);
                        }
                        Err(e) => tracing::warn!(error = %e, "SQLite checkpoint failed"),
                    }
                    std::thread::sleep(CHECKPOINT_PAUSE);
                }
            })
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot start the SQLite checkpointer: {e}"))
            })?;
        Ok(Checkpointer(bell))
    }

    /// Asks for a checkpoint (never waits: one already asked for will copy these frames too).
    fn ring(&self) {
        let _ = self.0.try_send(());
    }
}

/// The writer thread: takes every write waiting (up to [`MAX_GROUP`]), runs them in one
/// transaction, commits, answers, and asks for a checkpoint.
fn run(
    mut conn: Connection,
    mut jobs: tokio::sync::mpsc::Receiver<Box<dyn Job>>,
    checkpoints: Checkpointer,
) {
    while let Some(first) = jobs.blocking_recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(j) => group.push(j),
                Err(_) => break,
            }
        }
        metrics::histogram!("privacy_ledger_group_commit_size").record(group.len() as f64);
        let started = std::time::Instant::now();
        let failure = run_group(&mut conn, &mut group).err();
        metrics::histogram!("privacy_ledger_group_commit_seconds")
            .record(started.elapsed().as_secs_f64());
        if failure.is_some() {
            // Leave no transaction open for the next group.
            let _ = conn.execute_batch("ROLLBACK");
        }
        for job in group {
            job.finish(failure.clone());
        }
        checkpoints.ring();
    }
}

/// BEGIN, each write in a savepoint, COMMIT; the failure of the whole, if any.
fn run_group(conn: &mut Connection, group: &mut [Box<dyn Job>]) -> Result<(), StoreError> {
    exec(conn, "BEGIN IMMEDIATE", [])?;
    for job in group.iter_mut() {
        exec(conn, "SAVEPOINT job", [])?;
        if !job.run(conn) {
            exec(conn, "ROLLBACK TO job", [])?;
        }
        exec(conn, "RELEASE job", [])?;
    }
    let started = std::time::Instant::now();
    let done = exec(conn, "COMMIT", []).map(drop);
    metrics::histogram!("privacy_ledger_commit_seconds").record(started.elapsed().as_secs_f64());
    done
}

/// Runs a cached statement; the number of rows it changed.
pub fn exec(conn: &Connection, q: &str, p: impl rusqlite::Params) -> Result<usize, StoreError> {
    conn.prepare_cached(q)
        .and_then(|mut s| s.execute(p))
        .map_err(unavailable)
}

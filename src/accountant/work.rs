//! Cooperative limits on accountant work: every computation the service starts runs under a
//! [`Work`] (a deadline and a cancel flag), and the process can stop them all at shutdown.
//!
//! The accountant stays synchronous and free of I/O: the limit is installed for the current thread
//! by [`run`], and the engine's long loops (each convolution, each discretisation, each event of a
//! composition, each calibration step) call [`check`], which fails once the request was abandoned
//! (its future dropped: client gone, request timed out), its deadline passed, or the process is
//! shutting down. Each step between two checks is itself bounded by the size limits checked before
//! allocation, so a stopped computation frees its core within one step. Outside [`run`] (tests,
//! the CLI) [`check`] only observes shutdown.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Set once the process is shutting down: every computation stops at its next check.
static STOPPING: AtomicBool = AtomicBool::new(false);

thread_local! {
    static CURRENT: RefCell<Option<Arc<Work>>> = const { RefCell::new(None) };
}

/// One computation's limits.
#[derive(Debug)]
pub struct Work {
    cancelled: AtomicBool,
    deadline: Instant,
    limit: Duration,
}

/// Why a computation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The request that started it was abandoned.
    Cancelled,
    /// It ran past its time limit (the limit, in seconds).
    Deadline(u64),
    /// The process is shutting down.
    Shutdown,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Cancelled => write!(f, "the request was abandoned"),
            Stopped::Deadline(s) => write!(
                f,
                "the accounting did not finish within its {s} s limit; use a coarser grid_step, \
                 fewer events or smaller counts"
            ),
            Stopped::Shutdown => write!(f, "the service is shutting down; retry"),
        }
    }
}

impl Work {
    /// A computation allowed to run for `limit`.
    pub fn new(limit: Duration) -> Arc<Self> {
        Arc::new(Work {
            cancelled: AtomicBool::new(false),
            deadline: Instant::now() + limit,
            limit,
        })
    }

    /// Stops the computation at its next check.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }
}

/// Runs `f` on this thread under `work`'s limits.
pub fn run<T>(work: Arc<Work>, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<Arc<Work>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            CURRENT.with(|c| *c.borrow_mut() = self.0.take());
        }
    }
    let _reset = Reset(CURRENT.with(|c| c.borrow_mut().replace(work)));
    f()
}

/// `f`, made to run on another thread under this thread's limits: a computation's helper threads
/// (one per ordering, or per part of a grid) stop when it does. Without this a helper thread ran
/// outside [`run`] and its checks observed shutdown only, so an abandoned or late request's second
/// ordering ran on to its end.
pub(crate) fn carried<T>(f: impl FnOnce() -> T) -> impl FnOnce() -> T {
    let work = CURRENT.with(|c| c.borrow().clone());
    move || match work {
        Some(w) => run(w, f),
        None => f(),
    }
}

/// Stops every computation (at its next check) and refuses new ones: the process is shutting down.
pub fn stop_all() {
    STOPPING.store(true, Ordering::Relaxed);
}

/// Whether the current computation may go on.
pub fn check() -> Result<(), Stopped> {
    if STOPPING.load(Ordering::Relaxed) {
        return Err(Stopped::Shutdown);
    }
    CURRENT.with(|c| match c.borrow().as_deref() {
        Some(w) if w.cancelled.load(Ordering::Relaxed) => Err(Stopped::Cancelled),
        Some(w) if Instant::now() > w.deadline => Err(Stopped::Deadline(w.limit.as_secs())),
        _ => Ok(()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_computation_stops_when_cancelled_or_late_and_the_limit_ends_with_run() {
        let w = Work::new(Duration::from_secs(60));
        let w2 = w.clone();
        let r = run(w, || {
            check()?;
            w2.cancel();
            check()
        });
        assert_eq!(r, Err(Stopped::Cancelled));
        // Outside `run` nothing limits the thread.
        assert_eq!(check(), Ok(()));
        let late = Work::new(Duration::from_millis(0));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(run(late, check), Err(Stopped::Deadline(0)));
    }

    /// A helper thread of a cancelled computation sees the cancellation (the engine's second
    /// ordering runs on one, through `pld::both`).
    #[test]
    fn helper_threads_carry_the_computation_s_limits() {
        let w = Work::new(Duration::from_secs(60));
        w.cancel();
        let (a, b) = run(w, || crate::accountant::pld::both(check, check));
        assert_eq!((a, b), (Err(Stopped::Cancelled), Err(Stopped::Cancelled)));
        // And none outside a computation.
        assert_eq!(crate::accountant::pld::both(check, check), (Ok(()), Ok(())));
    }
}

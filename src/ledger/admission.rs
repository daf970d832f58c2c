//! How much accountant work runs at once: bounded memory and CPU under any request storm.
//!
//! Work is classed before it starts. **Light** work is closed-form (μ-GDP arithmetic: a Gaussian
//! charge on a Gaussian ledger, its report, a calibration of a Gaussian mechanism): microseconds
//! and no allocation worth counting, so it never waits. **Heavy** work uses the numerical engine
//! (privacy-loss distributions, FFT convolutions): each computation's memory is bounded by the
//! engine's size limits (checked before allocation; up to a few hundred MB at the finest grids),
//! so the service bounds *how many* run at once. At most `concurrent` heavy computations run; up
//! to `queue` more wait, each at most `max_wait`; beyond that the request is refused at once with
//! 503 `overloaded` and Retry-After, before anything is allocated. Peak memory is therefore about
//! `concurrent` × one computation's peak (documented in the README), whatever the traffic, and
//! by default one core stays free for cheap requests (`concurrent` = cores − 1).
//!
//! A permit is held by the computation itself, not by the request: a computation whose request
//! was abandoned keeps its permit until it reaches its next check and stops, so abandoned work
//! cannot pile up beyond the limit.

use super::error::LedgerError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default bound on heavy computations at once, whatever the core count: one computation at the
/// engine's largest grid (2^22 points) peaks near 600 MB (measured: `privacy-ledger account` on
/// 10,000 Poisson-subsampled Gaussian steps at grid 1e-5, 580 MB maximum resident). The process's
/// worst case is then about 50 MB + the caches (composed states 128 MiB, discretised mechanisms
/// 64 MiB, FFT plans ≈ 100 MB) + 600 MB per computation: ≈ 1.5 GB with two, under the 2 GiB the
/// Kubernetes manifest sets (≈ 0.9 GB with one, the default on two cores).
pub const DEFAULT_MAX_CONCURRENT: usize = 2;

/// What a computation costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// Closed forms: never waits.
    Light,
    /// The numerical engine: admitted by [`Admission::enter`].
    Heavy,
}

impl Cost {
    /// Light when the work is closed-form, else heavy.
    pub fn light_if(closed_form: bool) -> Self {
        if closed_form {
            Cost::Light
        } else {
            Cost::Heavy
        }
    }
}

/// Limits on heavy work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Heavy computations running at once.
    pub concurrent: usize,
    /// Heavy computations waiting at once (beyond: 503 at once).
    pub queue: usize,
    /// Longest a heavy computation waits to start (then 503).
    pub max_wait: Duration,
}

impl Default for AdmissionConfig {
    /// One heavy computation per core but one, at least one and at most
    /// [`DEFAULT_MAX_CONCURRENT`] (memory: see the module docs); four waiting per running one,
    /// waiting at most 10 s.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let concurrent = cores.saturating_sub(1).clamp(1, DEFAULT_MAX_CONCURRENT);
        AdmissionConfig {
            concurrent,
            queue: 4 * concurrent,
            max_wait: Duration::from_secs(10),
        }
    }
}

/// The gate in front of heavy work.
#[derive(Debug)]
pub struct Admission {
    config: AdmissionConfig,
    running: Arc<Semaphore>,
    waiting: AtomicUsize,
}

/// Seconds a refused client is told to wait.
const RETRY_AFTER_SECS: u64 = 2;

impl Admission {
    pub fn new(config: AdmissionConfig) -> Self {
        Admission {
            running: Arc::new(Semaphore::new(config.concurrent.max(1))),
            waiting: AtomicUsize::new(0),
            config,
        }
    }

    /// The limits in force.
    pub fn config(&self) -> AdmissionConfig {
        self.config
    }

    /// Admits a computation of `cost`: `None` for light work; for heavy work a permit to hold
    /// while it runs, or [`LedgerError::Overloaded`] when the queue is full or the wait too long.
    pub async fn enter(&self, cost: Cost) -> Result<Option<OwnedSemaphorePermit>, LedgerError> {
        if cost == Cost::Light {
            return Ok(None);
        }
        if let Ok(p) = self.running.clone().try_acquire_owned() {
            return Ok(Some(p));
        }
        // Join the queue only if there is room (counted before waiting, so a burst cannot
        // overshoot it).
        let joined = self
            .waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w < self.config.queue).then_some(w + 1)
            })
            .is_ok();
        if !joined {
            metrics::counter!("privacy_ledger_computations_shed_total", "why" => "queue_full")
                .increment(1);
            return Err(LedgerError::Overloaded(RETRY_AFTER_SECS));
        }
        struct Leave<'a>(&'a AtomicUsize);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _leave = Leave(&self.waiting);
        match tokio::time::timeout(self.config.max_wait, self.running.clone().acquire_owned()).await
        {
            Ok(Ok(p)) => Ok(Some(p)),
            Ok(Err(_)) => Err(LedgerError::Internal("the work semaphore closed".into())),
            Err(_) => {
                metrics::counter!("privacy_ledger_computations_shed_total", "why" => "waited_too_long")
                    .increment(1);
                Err(LedgerError::Overloaded(RETRY_AFTER_SECS))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn heavy_work_runs_up_to_the_limit_queues_briefly_then_is_refused() {
        let a = Arc::new(Admission::new(AdmissionConfig {
            concurrent: 2,
            queue: 1,
            max_wait: Duration::from_millis(50),
        }));
        assert!(a.enter(Cost::Light).await.unwrap().is_none());
        let p1 = a.enter(Cost::Heavy).await.unwrap();
        let _p2 = a.enter(Cost::Heavy).await.unwrap();
        // Light work never waits, even now.
        assert!(a.enter(Cost::Light).await.is_ok());
        // One may wait: it waits too long and is refused.
        assert!(matches!(
            a.enter(Cost::Heavy).await,
            Err(LedgerError::Overloaded(_))
        ));
        // One waiting, a second is refused at once; the waiter gets the freed permit.
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.enter(Cost::Heavy).await.map(|p| p.is_some()) })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        let t = std::time::Instant::now();
        assert!(matches!(
            a.enter(Cost::Heavy).await,
            Err(LedgerError::Overloaded(_))
        ));
        assert!(t.elapsed() < Duration::from_millis(20), "refused at once");
        drop(p1);
        assert!(waiter.await.unwrap().unwrap());
    }
}

//! Where numerical work runs: the blocking pool or a low-priority thread, under admission,
//! a time limit and cancellation when the request is abandoned.

use super::admission;
use super::error::LedgerError;
use crate::accountant::composition::Composition;
use crate::accountant::work::Work;
use crate::accountant::{work, AccountantError, Event, NeighboringRelation};
use std::sync::Arc;

/// Longest one accountant computation may run (a little below the default request timeout, so
/// the client gets the reason rather than a bare timeout).
pub const COMPUTE_LIMIT: std::time::Duration = std::time::Duration::from_secs(50);

/// Runs accountant work on the blocking pool under a [`Work`] limit: it stops at its next check
/// once [`COMPUTE_LIMIT`] passes, or once this future is dropped (the request was abandoned: client
/// gone, request timed out) — the cancel guard below fires on drop — or at shutdown.
///
/// Heavy work first passes `admission` ([`admission::Admission::enter`]); its permit moves into the
/// computation and is released when the computation ends, not when the request does.
pub(super) async fn blocking<T: Send + 'static>(
    admission: &admission::Admission,
    cost: admission::Cost,
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, LedgerError> {
    let permit = admission.enter(cost).await?;
    struct CancelOnDrop(Arc<Work>);
    impl Drop for CancelOnDrop {
        fn drop(&mut self) {
            self.0.cancel();
        }
    }
    let w = Work::new(COMPUTE_LIMIT);
    let _guard = CancelOnDrop(w.clone());
    let span = tracing::Span::current();
    let run = move || {
        let _permit = permit;
        let r = span.in_scope(|| work::run(w, f));
        if let Err(LedgerError::Accountant(AccountantError::Stopped(why))) = &r {
            let why = match why {
                work::Stopped::Cancelled => "abandoned",
                work::Stopped::Deadline(_) => "deadline",
                work::Stopped::Shutdown => "shutdown",
            };
            metrics::counter!("privacy_ledger_computations_stopped_total", "why" => why)
                .increment(1);
        }
        r
    };
    if cost == admission::Cost::Light {
        return tokio::task::spawn_blocking(run)
            .await
            .map_err(|e| LedgerError::Internal(format!("accountant task failed: {e}")))?;
    }
    // Heavy work gets a thread of its own at a lower priority (nice 10; a thread cannot raise
    // its priority again, so pooled threads are not used): under load the scheduler prefers the
    // threads answering cheap requests, and heavy work still has every idle cycle.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("accountant-heavy".into())
        .spawn(move || {
            // Nice 10 under the normal policy (the crate maps 0..99 onto nice 19..-20).
            let _ = thread_priority::set_current_thread_priority(
                thread_priority::ThreadPriority::Crossplatform(
                    22u8.try_into().expect("a valid priority"),
                ),
            );
            let _ = tx.send(run());
        })
        .map_err(|e| LedgerError::Internal(format!("cannot start an accountant thread: {e}")))?;
    rx.await
        .map_err(|_| LedgerError::Internal("the accountant thread failed".into()))?
}

/// Whether `event` has a closed form (exact μ-GDP) under `relation`.
pub(super) fn analytic(event: &Event, relation: NeighboringRelation) -> bool {
    crate::accountant::analytic::gdp_terms(
        event,
        relation,
        &crate::accountant::json::JsonPath::root(),
        1,
        &mut Vec::new(),
    )
    .is_ok()
}

/// The exact composition with one more event, and its μ at the budget's δ (display only).
pub(super) fn exact_with(
    base: &Composition,
    event: &Event,
    delta: f64,
) -> Result<(Composition, Option<f64>), LedgerError> {
    let path = crate::accountant::json::JsonPath::root().field("event");
    let mut state = base.clone();
    state.push(event, &path)?;
    let mu = state.guarantee()?.mu_upper(delta);
    Ok((state, mu))
}

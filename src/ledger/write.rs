//! The one write loop of a state change on one ledger.
//!
//! Every such change (a budget, a run's declaration, a start, commit or release) is a *plan*: a
//! function of the ledger's row as the store has it now that says what to append and what to
//! answer. [`Ledgers::write`] owns everything around it: the dataset's lock in this process, the
//! replay of a request whose idempotency key is known, the check that the row is the one its
//! audit log last stated, the store's compare-and-swap on the row's version (so a plan never lands
//! on a row it did not see), and the retries with back-off when another writer (a replica) moved
//! the ledger first. Charges and chunks take the pipelined path of [`Ledgers::admit`] (appends
//! queued behind the previous one of the dataset), and multi-ledger writes append on several rows
//! in one transaction; both keep the same order: replay, gate on what was read, compare-and-swap.

use super::keys::IdemKey;
use super::{back_off, LedgerError, Ledgers, MAX_ATTEMPTS};
use crate::store::{DatasetRow, DatasetUpdate, EntryRow};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;

/// A plan's work: it borrows what the request holds (for `'a`), and is `Send` (so the handler's
/// future is).
pub(super) type PlanFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<Plan<T>, LedgerError>> + Send + 'a>>;

/// What a plan decided.
pub(super) enum Plan<T> {
    /// Append `entry` with `update` at the row's version + 1, then answer `answer`.
    Append {
        entry: Box<EntryRow>,
        update: Box<DatasetUpdate>,
        answer: T,
    },
    /// Nothing to write (the change is already in place): answer now.
    Answer(T),
}

/// How a write ended.
pub(super) enum Written<T> {
    /// The plan's answer, after its append (`true`) or without one (`false`).
    Planned(T, bool),
    /// The stored answer of an earlier request with the same idempotency key.
    Replayed(Value),
}

impl Ledgers {
    /// Runs `plan` on dataset `id` until its append lands (see the module docs): at most
    /// [`MAX_ATTEMPTS`] attempts, then [`LedgerError::Busy`]. The caller has authorised the
    /// change; `key` and `request_hash` identify the request for replays.
    pub(super) async fn write<'a, T>(
        &self,
        id: &str,
        key: Option<&IdemKey>,
        request_hash: &str,
        mut plan: impl FnMut(DatasetRow) -> PlanFuture<'a, T> + Send,
    ) -> Result<Written<T>, LedgerError> {
        let _guard = self.lock(id).await?;
        for attempt in 0..MAX_ATTEMPTS as u32 {
            back_off(attempt).await;
            if let Some(body) = self.replay(id, key, request_hash).await? {
                return Ok(Written::Replayed(body));
            }
            let row = self.row(id).await?;
            self.check_state(&row).await?;
            let version = row.version;
            match plan(row).await? {
                Plan::Answer(answer) => return Ok(Written::Planned(answer, false)),
                Plan::Append {
                    entry,
                    update,
                    answer,
                } => {
                    if self.append(id, version, &entry, &update).await? {
                        return Ok(Written::Planned(answer, true));
                    }
                }
            }
        }
        Err(LedgerError::Busy)
    }
}

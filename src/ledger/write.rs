//! The one write loop of a state change on one ledger or several, and what surrounds every write.
//!
//! Every such change is a *plan*: a function of the ledger's row as the store has it now that
//! says what to write and what to answer ([`Plan`]: one append, an append on a partitioned dataset
//! and all its blocks in one transaction, a block's creation, or nothing). Budgets, quotas, runs'
//! declarations, chunks, starts, commits, releases and blocks' declarations are plans.
//! [`Ledgers::write`] owns everything around them: the dataset's lock in this process, the replay
//! of a request whose idempotency key is known, the check that the row is the one its audit log
//! last stated, the store's compare-and-swap on the row's version (so a plan never lands on a row
//! it did not see), the kept gate inputs after it, and the retries with back-off when another
//! writer (a replica) moved the ledger first. A unit's plan ([`Ledgers::plan_unit`]) is shared by
//! chunks (through `write`) and by charges, which take the pipelined path of [`Ledgers::admit`]
//! (their first attempt gates on kept inputs and queues its append behind the dataset's previous
//! one, keeping the same order: replay, gate on what was read, compare-and-swap). Charges on
//! several ledgers are plans too ([`Ledgers::write_many`]): the loop takes their locks in id order
//! and their plan appends on every ledger in one transaction ([`super::multi`]).
//!
//! Replays: a request's outcome is stored with its entry ([`stored_response`]) and answered again,
//! with its unit's status now, for a retry with the same idempotency key ([`Ledgers::replay`]).

use super::compositions::SNAPSHOT_UNITS;
use super::error::LedgerError;
use super::kept::GateInputs;
use super::keys::IdemKey;
use super::{keys, Ledgers};
use crate::store::{
    AuditDraft, DatasetRow, DatasetUpdate, EntryRow, LedgerAppend, NewBlock, QuotaRow, SharedBody,
    StoreError,
};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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
    /// Append on several ledgers in one transaction ([`crate::store::Store::append_many`]): a
    /// partitioned dataset and its blocks (a quota), or the ledgers a charge reads; `shared` is
    /// the response every entry refers to, stored once.
    AppendMany {
        items: Vec<LedgerAppend>,
        shared: Option<SharedBody>,
        answer: T,
    },
    /// Create a block ledger of the dataset ([`crate::store::Store::create_block`]), its budget
    /// and quotas copied from the dataset's row at the version the plan read; answered as
    /// appended (`true`) when it is new, not (`false`) when it existed.
    CreateBlock { block: Box<BlockPlan>, answer: T },
    /// Nothing to write (the change is already in place): answer now.
    Answer(T),
}

/// A block to create (see [`Plan::CreateBlock`]).
pub(super) struct BlockPlan {
    pub(super) row: DatasetRow,
    /// Its empty exact composition.
    pub(super) state: Vec<u8>,
    /// Its quota rows: the dataset's quotas, nothing spent.
    pub(super) quotas: Vec<QuotaRow>,
    /// The record on the dataset's chain, and the first of the block's own.
    pub(super) audit: AuditDraft,
    pub(super) record: AuditDraft,
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
    /// [`MAX_ATTEMPTS`] attempts within [`MAX_WRITE_WAIT`], then [`LedgerError::Busy`]. The caller has authorised the
    /// change; `key` and `request_hash` identify the request for replays. Each attempt gives the
    /// plan the row as the store has it, checked against its audit log.
    pub(super) async fn write<'a, T>(
        &self,
        id: &str,
        key: Option<&IdemKey>,
        request_hash: &str,
        mut plan: impl FnMut(DatasetRow) -> PlanFuture<'a, T> + Send,
    ) -> Result<Written<T>, LedgerError> {
        let scope = Scope {
            locks: &[id],
            replay_at: id,
            row: Some(id),
        };
        self.write_in(
            scope,
            key,
            request_hash,
            move |row: Option<DatasetRow>| match row {
                Some(row) => plan(row),
                None => {
                    Box::pin(async { Err(super::error::internal("a ledger's row was not read")) })
                }
            },
        )
        .await
    }

    /// [`Ledgers::write`] on several ledgers at once (a charge on blocks and datasets, see
    /// [`super::multi`]): their locks taken in the order of `locks` (increasing ids, so two
    /// writers never wait on each other in a cycle), a replay looked for on `replay_at`, and a plan
    /// that reads (and checks) the ledgers it needs itself and answers [`Plan::AppendMany`] or
    /// [`Plan::Answer`].
    pub(super) async fn write_many<'a, T>(
        &self,
        locks: &[&str],
        replay_at: &str,
        key: Option<&IdemKey>,
        request_hash: &str,
        mut plan: impl FnMut() -> PlanFuture<'a, T> + Send,
    ) -> Result<Written<T>, LedgerError> {
        let scope = Scope {
            locks,
            replay_at,
            row: None,
        };
        self.write_in(scope, key, request_hash, move |_| plan())
            .await
    }

    /// The one write loop: locks, then per attempt the replay, the row (if the scope names one),
    /// the plan, and its compare-and-swap.
    async fn write_in<'a, T>(
        &self,
        scope: Scope<'_>,
        key: Option<&IdemKey>,
        request_hash: &str,
        plan: impl FnMut(Option<DatasetRow>) -> PlanFuture<'a, T> + Send,
    ) -> Result<Written<T>, LedgerError> {
        let deadline = turn_deadline();
        let mut guards = Vec::with_capacity(scope.locks.len());
        for id in scope.locks {
            guards.push(self.lock(id, deadline).await?);
        }
        let attempts = self
            .attempts(scope, key, request_hash, deadline, plan)
            .await;
        noted(&mut guards, attempts)
    }

    /// [`Self::write_in`]'s attempts, under the scope's locks.
    async fn attempts<'a, T>(
        &self,
        scope: Scope<'_>,
        key: Option<&IdemKey>,
        request_hash: &str,
        deadline: tokio::time::Instant,
        mut plan: impl FnMut(Option<DatasetRow>) -> PlanFuture<'a, T> + Send,
    ) -> Result<Written<T>, LedgerError> {
        for attempt in 0..MAX_ATTEMPTS as u32 {
            back_off(attempt).await;
            if attempt > 0 && tokio::time::Instant::now() >= deadline {
                break;
            }
            if let Some(body) = self.replay(scope.replay_at, key, request_hash).await? {
                return Ok(Written::Replayed(body));
            }
            let row = match scope.row {
                Some(id) => {
                    let row = self.row(id).await?;
                    self.check_state(&row).await?;
                    Some(row)
                }
                None => None,
            };
            // The ledger and version an `Append` or `CreateBlock` plan writes at.
            let at = scope.row.zip(row.as_ref().map(|r| r.version));
            let at = || at.ok_or_else(|| super::error::internal("a plan on no ledger"));
            match plan(row).await? {
                Plan::Answer(answer) => return Ok(Written::Planned(answer, false)),
                Plan::Append {
                    entry,
                    update,
                    answer,
                } => {
                    let (id, version) = at()?;
                    if self.append(id, version, &entry, &update).await? {
                        return Ok(Written::Planned(answer, true));
                    }
                }
                Plan::AppendMany {
                    items,
                    shared,
                    answer,
                } => match self
                    .append_many(&items, shared.as_ref(), key, request_hash)
                    .await?
                {
                    Landed::Yes => return Ok(Written::Planned(answer, true)),
                    Landed::Replayed(body) => return Ok(Written::Replayed(body)),
                    Landed::No => {}
                },
                Plan::CreateBlock { block, answer } => {
                    let (id, version) = at()?;
                    let b = NewBlock {
                        row: &block.row,
                        state: &block.state,
                        parent: (id, version),
                        quotas: &block.quotas,
                        audit: Some(&block.audit),
                        record: Some(&block.record),
                    };
                    match self.store.create_block(&b).await {
                        Ok(()) => return Ok(Written::Planned(answer, true)),
                        Err(StoreError::AlreadyExists) => {
                            return Ok(Written::Planned(answer, false))
                        }
                        Err(StoreError::VersionConflict) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Err(LedgerError::Busy)
    }

    /// Appends on several ledgers in one transaction and keeps their gate inputs current. A key
    /// already on one of them (the same request, committed concurrently, is replayed; another
    /// request's use of the key is a 422 from [`Ledgers::replay`], not a retry); a ledger moved
    /// by another writer: start over.
    async fn append_many(
        &self,
        items: &[LedgerAppend],
        shared: Option<&SharedBody>,
        key: Option<&IdemKey>,
        request_hash: &str,
    ) -> Result<Landed, LedgerError> {
        let result = self.store.append_many(items, shared).await;
        for it in items {
            let v = it.expected_version;
            self.keep(&it.id, v, &it.update, &result.clone().map(|()| v + 1));
        }
        match result {
            Ok(()) => {
                for it in items {
                    self.alerts.nudge(&it.id);
                }
                Ok(Landed::Yes)
            }
            Err(StoreError::DuplicateKey) => {
                for it in items {
                    if let Some(body) = self.replay(&it.id, key, request_hash).await? {
                        return Ok(Landed::Replayed(body));
                    }
                }
                Ok(Landed::No)
            }
            Err(StoreError::VersionConflict) => Ok(Landed::No),
            Err(StoreError::NotFound) => Err(LedgerError::NotFound(
                items.first().map(|i| i.id.clone()).unwrap_or_default(),
            )),
            Err(e) => Err(e.into()),
        }
    }
}

/// Which ledgers a write locks, where it looks for a replay, and whose row each attempt reads.
struct Scope<'s> {
    locks: &'s [&'s str],
    replay_at: &'s str,
    row: Option<&'s str>,
}

/// How an append on several ledgers ended.
enum Landed {
    Yes,
    /// The same request had landed: its stored answer.
    Replayed(Value),
    /// Another writer moved a ledger: start over.
    No,
}

/// Waits a random 0 to 2^min(n,6) − 1 ms before the (n+1)-th attempt after losing a
/// compare-and-swap to another replica (none before the first), so replicas contending for one
/// dataset spread out instead of colliding again.
pub(super) async fn back_off(n: u32) {
    if n == 0 {
        return;
    }
    let ms = (uuid::Uuid::new_v4().as_u128() as u64) % (1u64 << n.min(6));
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// How often a charge is retried when another writer appended first (within [`MAX_WRITE_WAIT`]).
pub(super) const MAX_ATTEMPTS: usize = 64;

/// How long a writer waits for a dataset's lock before checking that the store answers.
pub(super) const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);
/// Longest a write waits for its turn on a dataset: for the dataset's lock in this process
/// (first come, first served), then through compare-and-swap attempts against other replicas.
/// Past it the write is refused with 503 `busy` and `Retry-After` (nothing was written; a retry
/// with the same Idempotency-Key is safe), instead of queueing without bound (a report found
/// 39 s tails with 1,000 charges on one dataset across three replicas).
pub(super) const MAX_WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The moment a write that starts now stops waiting for its turn ([`MAX_WRITE_WAIT`]).
pub(super) fn turn_deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + MAX_WRITE_WAIT
}

/// The key of a stored response that is kept whole as a shared body.
pub(super) const SHARED_BODY: &str = "$body";

/// The key of a stored response's report that names its shared body.
pub(super) const SHARED: &str = "$shared";

/// A response as stored for replays, and the part of it stored once for many entries: the
/// report without its count of invocations (the same for every charge within the budget) goes
/// to a [`SharedBody`] and the response keeps `{"$shared": digest, "invocations": n}` in its
/// place (a few dozen bytes instead of kilobytes per charge). [`Ledgers::replay`] puts it back:
/// the replayed body equals `body`.
pub(super) fn stored_response(body: &Value) -> (String, Option<SharedBody>) {
    let Some(Value::Object(report)) = body.get("report") else {
        return (body.to_string(), None);
    };
    let mut rest = report.clone();
    let Some(invocations) = rest.remove("invocations") else {
        return (body.to_string(), None);
    };
    let shared = SharedBody::new(Value::Object(rest).to_string());
    let mut stored = body.clone();
    stored["report"] = serde_json::json!({SHARED: shared.digest, "invocations": invocations});
    (stored.to_string(), Some(shared))
}

/// A dataset's write lock, held. It keeps when a holder last failed for want of the store, so
/// writers queued behind it during an outage fail at once ([`Ledgers::lock`]) instead of each
/// spending a store timeout in turn.
pub(super) type DatasetGuard = tokio::sync::OwnedMutexGuard<Option<std::time::Instant>>;

/// `r`, noted on `guards` when it failed for want of the store (see [`DatasetGuard`]).
pub(super) fn noted<T>(
    guards: &mut [DatasetGuard],
    r: Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    if matches!(r, Err(LedgerError::Unavailable(_))) {
        let now = std::time::Instant::now();
        for g in guards {
            **g = Some(now);
        }
    }
    r
}

impl Ledgers {
    pub(super) fn lock_for(&self, id: &str) -> Arc<tokio::sync::Mutex<Option<std::time::Instant>>> {
        let mut m = self.locks.lock().expect("lock map");
        m.entry(id.to_owned()).or_default().clone()
    }

    /// The dataset's write lock. A writer that cannot take it at once checks that the store
    /// answers before queueing: during an outage the holder is itself waiting for the store, and
    /// queueing would turn each request's pool timeout into a sum of them (503s arriving after
    /// 3 s, 6 s, 9 s…). So a request fails within one store timeout, and never waits longer than
    /// `deadline` ([`MAX_WRITE_WAIT`]; then [`LedgerError::Busy`], 503 with Retry-After). A writer that queued
    /// while the store still answered, and gets the lock from a holder that failed for want of
    /// the store after it queued, fails at once (503 `store_unavailable`): otherwise each writer
    /// queued before an outage would spend a store timeout in turn (48 writers: the last 503
    /// after 12.3 s where the store timeout is 3 s).
    pub(super) async fn lock(
        &self,
        id: &str,
        deadline: tokio::time::Instant,
    ) -> Result<DatasetGuard, LedgerError> {
        let lock = self.lock_for(id);
        if let Ok(g) = lock.clone().try_lock_owned() {
            return Ok(g);
        }
        let queued = std::time::Instant::now();
        let mut waiting = std::pin::pin!(lock.lock_owned());
        let g = tokio::select! {
            g = &mut waiting => g,
            _ = tokio::time::sleep(LOCK_PATIENCE) => {
                self.store.ping().await?;
                tokio::time::timeout_at(deadline, waiting)
                    .await
                    .map_err(|_| LedgerError::Busy)?
            }
        };
        if g.is_some_and(|failed| failed >= queued) {
            return Err(LedgerError::Unavailable(
                crate::store::StoreError::Unavailable(
                    "the store failed for the writer ahead of this one on the dataset".into(),
                ),
            ));
        }
        Ok(g)
    }

    /// Appends `entry` at `version + 1` (the store's compare-and-swap) with `update`, and keeps
    /// the cache current. `Ok(false)` when another writer (a replica) appended first or took the
    /// idempotency key: the caller re-reads and tries again.
    pub(super) async fn append(
        &self,
        id: &str,
        version: i64,
        entry: &EntryRow,
        update: &DatasetUpdate,
    ) -> Result<bool, LedgerError> {
        let result = self.store.append(id, version, entry, update).await;
        self.keep(id, version, update, &result);
        match result {
            Ok(_) => {
                // Off this request's path: the ledger's use against its alert thresholds.
                self.alerts.nudge(id);
                Ok(true)
            }
            Err(StoreError::VersionConflict) | Err(StoreError::DuplicateKey) => Ok(false),
            Err(StoreError::NotFound) => Err(LedgerError::NotFound(id.to_owned())),
            Err(e) => Err(e.into()),
        }
    }

    /// The stored outcome of an earlier request with this idempotency key (in its scope: the same
    /// principal, operation and target, [`keys`]), or an error if the key was used for another
    /// request (another body). A unit's outcome answers the unit's status now ([`Ledgers::now_of`]).
    pub(super) async fn replay(
        &self,
        id: &str,
        key: Option<&keys::IdemKey>,
        request_hash: &str,
    ) -> Result<Option<Value>, LedgerError> {
        let Some(key) = key else {
            return Ok(None);
        };
        let e = match self.store.find_entry_by_key(id, key.stored()).await? {
            Some(e) => e,
            None => {
                // An entry written before keys were scoped: this client's only if it recorded
                // this principal, or none and the caller is a global admin (and its key is not
                // itself a scoped one).
                match self.store.find_entry_by_key(id, key.legacy()).await? {
                    Some(e)
                        if key.may_replay_legacy(e.principal.as_deref())
                            && e.idempotency_key.as_deref().is_some_and(keys::is_legacy) =>
                    {
                        e
                    }
                    _ => return Ok(None),
                }
            }
        };
        if e.request_hash.as_deref() != Some(request_hash) {
            return Err(LedgerError::IdempotencyKeyReused(key.raw().to_owned()));
        }
        let body = self.stored_body(&e).await?;
        self.now_of(id, body).await.map(Some)
    }

    /// A replayed outcome with its unit's status as it is now: a unit reserved (or started) by the
    /// original request may since have been started, committed or released. A released unit's
    /// outcome is an error ([`LedgerError::UnitReleased`]): a retried job must not run on budget
    /// that was refunded (and may have been spent again).
    pub(super) async fn now_of(&self, id: &str, mut body: Value) -> Result<Value, LedgerError> {
        let open = |s: &str| matches!(s, "reserved" | "started");
        let Some(charge_id) = body
            .get("charge")
            .filter(|c| c.get("status").and_then(Value::as_str).is_some_and(open))
            .and_then(|c| c.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Ok(body);
        };
        let charge = self
            .store
            .find_charge(id, &charge_id)
            .await?
            .ok_or_else(|| LedgerError::Corrupt(id.to_owned(), format!("charge {charge_id}")))?;
        let status = charge.status.unwrap_or_else(|| "committed".into());
        body["charge"]["status"] = Value::String(status.clone());
        if status == "released" {
            return Err(LedgerError::UnitReleased {
                charge: charge_id,
                view: Box::new(body["charge"].clone()),
            });
        }
        Ok(body)
    }

    /// An entry's stored response, with its shared parts put back.
    pub(super) async fn stored_body(&self, e: &EntryRow) -> Result<Value, LedgerError> {
        let unreadable = || LedgerError::Internal("stored outcome unreadable".into());
        let mut body: Value = e
            .response
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .ok_or_else(unreadable)?;
        // A response kept whole for every ledger of a multi-ledger charge ([`multi`]).
        if let Some(digest) = body.get(SHARED_BODY).and_then(Value::as_str) {
            let text = self
                .store
                .shared_body(digest)
                .await?
                .ok_or_else(unreadable)?;
            return serde_json::from_str(&text).map_err(|_| unreadable());
        }
        // A report stored once for many charges ([`stored_response`]): put back in place.
        let shared = body.get("report").and_then(|r| {
            Some((
                r.get(SHARED)?.as_str()?.to_owned(),
                r.get("invocations")?.clone(),
            ))
        });
        if let Some((digest, invocations)) = shared {
            let text = self
                .store
                .shared_body(&digest)
                .await?
                .ok_or_else(unreadable)?;
            let mut report: Value = serde_json::from_str(&text).map_err(|_| unreadable())?;
            report
                .as_object_mut()
                .ok_or_else(unreadable)?
                .insert("invocations".into(), invocations);
            body["report"] = report;
        }
        Ok(body)
    }

    /// Refuses to write on a ledger whose stored state is not the one its audit log last stated
    /// ([`crate::store::LedgerState`], written in the same transaction as every change): a reset
    /// `mu_sq_spent`, a rolled-back row or an edited budget would otherwise let the gate admit
    /// past the budget. Ledgers whose last change predates audited states are not checked.
    pub(super) async fn check_state(&self, row: &DatasetRow) -> Result<(), LedgerError> {
        use crate::store::LedgerState;
        let Some(rec) = self.store.last_state_audit(&row.id).await? else {
            // None stated: fine for a ledger not written since states were audited; one that was
            // must have its records (a deleted chain hides nothing).
            if row.states_from.is_some_and(|v| row.version >= v) {
                return Err(LedgerError::StateCorrupt(
                    row.id.clone(),
                    format!(
                        "it is at version {} but its audit log states none of its states since \
                         version {} (its audit chain, or its head's pointer to the last stated \
                         state, was deleted outside the service)",
                        row.version,
                        row.states_from.unwrap_or(0)
                    ),
                ));
            }
            return Ok(());
        };
        let (Some(stated), Some(stored)) =
            (LedgerState::of_audit(&rec.draft), LedgerState::of_row(row))
        else {
            return Ok(());
        };
        // The row is read first: a newer audited state is another writer's append since (a
        // replica), which the append's compare-and-swap will see; the same version must match in
        // every field, and an older one means the row moved without an audited change.
        if stated.version > stored.version {
            return Ok(());
        }
        if stated != stored {
            return Err(LedgerError::StateCorrupt(
                row.id.clone(),
                format!(
                    "its stored state {stored:?} is not the state its audit log last recorded \
                     (record {} of its chain: {stated:?}); it was changed outside the service, \
                     so nothing is admitted on it until an operator restores it \
                     (`privacy-ledger audit verify` lists the differences)",
                    rec.seq
                ),
            ));
        }
        Ok(())
    }
}

impl Ledgers {
    /// The caches after an append at `version + 1` with `update` that ended in `result` (or is
    /// queued and assumed to succeed: [`Ledgers::forget`] undoes that if not).
    pub(super) fn keep(
        &self,
        id: &str,
        version: i64,
        update: &DatasetUpdate,
        result: &Result<i64, StoreError>,
    ) {
        // Kept gate inputs stay only if they described the version appended on: then they move
        // to the next version exactly as the store's row did. Anything else drops them.
        {
            let mut gates = self.gates.lock().expect("gate inputs");
            let key = id.to_owned();
            match (&result, gates.get(&key)) {
                (Ok(_), Some(g)) if g.row.version == version => {
                    let (row, quotas) = update.applied(&g.row, &g.quotas);
                    let next = Arc::new(GateInputs {
                        row,
                        quotas,
                        legacy_keys: g.legacy_keys,
                    });
                    let size = next.bytes();
                    gates.insert(key, next, size);
                }
                _ => gates.remove(&key),
            }
        }
    }

    /// Drops what is kept of dataset `id` (a queued append failed: what was kept assumed it).
    pub(super) fn forget(&self, id: &str) {
        self.gates
            .lock()
            .expect("gate inputs")
            .remove(&id.to_owned());
    }

    /// What the gate of dataset `id` reads (its row and quotas), as the store has it now; kept
    /// for the next charge ([`Ledgers::append`] keeps it current).
    pub(super) async fn gate_inputs(&self, id: &str) -> Result<Arc<GateInputs>, LedgerError> {
        let row = self.row(id).await?;
        self.check_state(&row).await?;
        let quotas = self.store.list_quotas(id).await?;
        let known_clean = self
            .no_legacy_keys
            .lock()
            .expect("legacy keys")
            .contains(id);
        let legacy_keys = !known_clean && self.store.has_legacy_keys(id).await?;
        if !legacy_keys && !known_clean {
            let mut clean = self.no_legacy_keys.lock().expect("legacy keys");
            // Bounded: forgetting only costs a query.
            if clean.len() >= 1 << 20 {
                clean.clear();
            }
            clean.insert(id.to_owned());
        }
        let inputs = Arc::new(GateInputs {
            row,
            quotas,
            legacy_keys,
        });
        let bytes = inputs.bytes();
        self.gates
            .lock()
            .expect("gate inputs")
            .insert(id.to_owned(), inputs.clone(), bytes);
        Ok(inputs)
    }

    /// After an append at `version` that added a unit (`analytic`: a closed-form one) to dataset
    /// `id`: its exact composition is caught up in the background — soon after every numerical
    /// unit, so a report finds it current, and every [`SNAPSHOT_UNITS`] versions
    /// on closed-form ledgers (a report composes their tail in microseconds per unit), so the
    /// stored snapshot keeps up.
    pub(super) fn composed_later(&self, id: &str, version: i64, analytic: bool) {
        if !analytic || version % SNAPSHOT_UNITS == 0 {
            self.compositions.nudge(id);
        }
    }
}

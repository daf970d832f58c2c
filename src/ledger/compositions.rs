//! The exact composition of a ledger's committed charges: a report, computed off the write path.
//!
//! The gate decides from the filter's sums alone ([`super::filter`]); the exact composition of the
//! charges is shown beside them, valid only had the sequence been fixed in advance. No charge,
//! chunk, commit or release composes anything or writes it: a report (or the dashboard) asks for
//! the composition at the ledger's version, and it is built here from the newest base this
//! process holds — a cached composition, else the stored snapshot — plus the entries appended
//! since. A write nudges the dataset ([`Compositions::nudge`]): a background task catches the
//! cached composition up a moment later, never holding the dataset's lock, so a report finds it
//! (nearly) current. Snapshots are written by [`crate::store::Store::put_snapshot`] in small
//! parts, at most every [`SNAPSHOT_UNITS`] entries or [`SNAPSHOT_AGE`], never by an append.
//!
//! # Which charges a composition at version v holds
//! Every charge *committed* at or before v, each once: a charge created committed counts at its
//! own entry; a charge created reserved counts at the `commit` entry that commits it (a released
//! one never counts). Both facts are immutable — the status a charge was created with is the one
//! in its stored response, and entries are never rewritten — so the composition at v is the
//! composition at any b ≤ v plus the units counted by the entries in (b, v], whatever happened
//! after v and however the entries were paged.
//!
//! Units counted by one step are grouped by event (a run's identical chunks become one k-fold
//! self-composition, which the engine composes by squaring): the figure is the engine's for the
//! same multiset of events, a different but equally sound discretisation of it.

use super::admission::{self, Admission};
use super::compute::blocking;
use super::error::LedgerError;
use crate::accountant::cache::ByteCache;
use crate::accountant::composition::Composition;
use crate::accountant::event::Count;
use crate::accountant::json::JsonPath;
use crate::accountant::{AccountantError, Event};
use crate::store::{DatasetRow, EntryRow, Store, StoreError};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Entries read (and composed) per step: a step's events are bounded, and each step's result is
/// kept, so a long catch-up that is abandoned resumes where it stopped.
pub const TAIL_STEP: i64 = 4096;

/// A snapshot is written once the stored one lags by this many entries…
pub const SNAPSHOT_UNITS: i64 = 256;
/// …or by any entry and this long since this process last wrote one for the dataset.
pub const SNAPSHOT_AGE: Duration = Duration::from_secs(60);
/// Never more often than this per dataset.
pub const SNAPSHOT_MIN_INTERVAL: Duration = Duration::from_secs(5);
/// How long a nudged dataset waits before its composition is caught up (writes in between share
/// one catch-up).
pub const NUDGE_DELAY: Duration = Duration::from_millis(200);

/// A dataset's exact composition at one version.
#[derive(Debug)]
pub struct Composed {
    /// The ledger version it describes.
    pub version: i64,
    /// The composition, or why there is none (an event the engine cannot compose within its
    /// limits: from then on the ledger has no exact composition, only the filter's figures).
    pub state: Result<Arc<Composition>, String>,
    /// μ (upper) at a δ, as computed last: (δ's bits, μ).
    mu: Mutex<Option<(u64, Option<f64>)>>,
}

impl Composed {
    fn new(version: i64, state: Result<Arc<Composition>, String>) -> Self {
        Composed {
            version,
            state,
            mu: Mutex::new(None),
        }
    }

    /// Whether its figures are closed-form (or there are none): light work.
    fn is_light(&self) -> bool {
        self.state.as_ref().map_or(true, |s| s.is_analytic())
    }

    fn bytes(&self) -> usize {
        64 + self.state.as_ref().map_or(0, |c| c.heap_bytes())
    }

    /// μ (upper) of the composition at δ (`None`: no composition, or no finite μ); computed
    /// once per δ. Heavy for a numerical composition: call on the blocking pool.
    fn mu_at(&self, delta: f64) -> Result<Option<f64>, AccountantError> {
        let lock = || self.mu.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((d, mu)) = *lock() {
            if d == delta.to_bits() {
                return Ok(mu);
            }
        }
        let mu = match &self.state {
            Ok(c) => match c.guarantee() {
                Ok(g) => g.mu_upper(delta),
                Err(e @ AccountantError::Stopped(_)) => return Err(e),
                Err(_) => None,
            },
            Err(_) => None,
        };
        *lock() = Some((delta.to_bits(), mu));
        Ok(mu)
    }
}

/// The compositions this process holds, and their background catch-up.
pub struct Compositions {
    store: Arc<dyn Store>,
    admission: Arc<Admission>,
    cache: Mutex<ByteCache<String, Arc<Composed>>>,
    /// One catch-up at a time per dataset (never the dataset's write lock).
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Datasets nudged and not yet caught up.
    pending: Mutex<HashSet<String>>,
    /// When this process last wrote each dataset's snapshot.
    written: Mutex<HashMap<String, Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Compositions {
    pub fn new(store: Arc<dyn Store>, admission: Arc<Admission>, cache_bytes: usize) -> Arc<Self> {
        Arc::new(Compositions {
            store,
            admission,
            cache: Mutex::new(ByteCache::new(cache_bytes)),
            locks: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashSet::new()),
            written: Mutex::new(HashMap::new()),
        })
    }

    /// The cached composition of dataset `id`, if any (at whatever version it describes).
    pub fn cached(&self, id: &str) -> Option<Arc<Composed>> {
        lock(&self.cache).get(&id.to_owned())
    }

    /// The composition of `row`'s dataset at `row.version` or later, and its μ at δ.
    pub async fn mu_at(
        self: &Arc<Self>,
        row: &DatasetRow,
        delta: f64,
    ) -> Result<(Arc<Composed>, Option<f64>), LedgerError> {
        let c = self.at_least(row).await?;
        let cost = admission::Cost::light_if(c.is_light());
        let c2 = c.clone();
        let mu = blocking(&self.admission, cost, move || Ok(c2.mu_at(delta)?)).await?;
        Ok((c, mu))
    }

    /// Asks for dataset `id`'s composition to be caught up in the background (once per
    /// [`NUDGE_DELAY`], however many writes nudge it meanwhile). Needs a tokio runtime.
    pub fn nudge(self: &Arc<Self>, id: &str) {
        if !lock(&self.pending).insert(id.to_owned()) {
            return;
        }
        let (this, id) = (self.clone(), id.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(NUDGE_DELAY).await;
            lock(&this.pending).remove(&id);
            let row = match this.store.get_dataset(&id).await {
                Ok(Some(row)) => row,
                _ => return,
            };
            if let Err(e) = this.at_least(&row).await {
                tracing::debug!(dataset_id = %id, error = %e, "background composition not caught up");
            }
        });
    }

    fn lock_for(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.locks);
        if locks.len() > 1 << 16 {
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        locks.entry(id.to_owned()).or_default().clone()
    }

    /// The composition of `row`'s dataset at `row.version` or later: the cached one if current,
    /// else the newest base caught up over the entries since, one [`TAIL_STEP`] at a time.
    pub async fn at_least(
        self: &Arc<Self>,
        row: &DatasetRow,
    ) -> Result<Arc<Composed>, LedgerError> {
        let fresh =
            |c: &Option<Arc<Composed>>| c.as_ref().filter(|c| c.version >= row.version).cloned();
        if let Some(c) = fresh(&self.cached(&row.id)) {
            return Ok(c);
        }
        let l = self.lock_for(&row.id);
        let _guard = l.lock().await;
        // The stored snapshot's seq: the row's, or the one just read (a replica's may be newer).
        let (mut base, snapshot_seq) = match self.cached(&row.id) {
            Some(c) => (c, row.state_seq),
            None => {
                let c = self.stored(row).await?;
                let seq = c.version.max(row.state_seq);
                (c, seq)
            }
        };
        loop {
            if base.version >= row.version {
                break;
            }
            let Ok(state) = &base.state else {
                // No exact composition from here on: only its version moves.
                base = Arc::new(Composed::new(row.version, base.state.clone()));
                self.keep(&row.id, &base);
                break;
            };
            let tail = self.tail(&row.id, base.version).await?;
            if tail.last <= base.version {
                // The row is newer than its entries read now: cannot happen (the row is read
                // first and entries are never removed); stop rather than loop.
                return Err(LedgerError::Corrupt(
                    row.id.clone(),
                    format!("entries end at {} below version {}", tail.last, row.version),
                ));
            }
            let analytic = state.is_analytic() && tail.analytic(state);
            let (state, counted) = (state.clone(), tail.counted);
            let next = blocking(
                &self.admission,
                admission::Cost::light_if(analytic),
                move || compose(&state, &counted),
            )
            .await?;
            base = Arc::new(Composed::new(tail.last, next.map(Arc::new)));
            self.keep(&row.id, &base);
        }
        if base.state.is_ok() && self.due(&row.id, snapshot_seq, base.version) {
            self.write_snapshot(row, base.clone());
        }
        Ok(base)
    }

    fn keep(&self, id: &str, c: &Arc<Composed>) {
        lock(&self.cache).insert(id.to_owned(), c.clone(), c.bytes());
    }

    /// The stored snapshot as a base (an unreadable one is replaced by the empty composition at
    /// version 0, from which every entry is composed again).
    async fn stored(&self, row: &DatasetRow) -> Result<Arc<Composed>, LedgerError> {
        let empty = || -> Result<Arc<Composed>, LedgerError> {
            let c = Composition::new(
                super::rows::relation_of(row)?,
                super::rows::grid_step_of(row)?,
            );
            Ok(Arc::new(Composed::new(0, Ok(Arc::new(c)))))
        };
        for _ in 0..3 {
            match self.store.get_snapshot(&row.id).await {
                Ok(Some((seq, bytes))) => {
                    return match Composition::from_bytes(&bytes) {
                        Ok(c) => Ok(Arc::new(Composed::new(seq, Ok(Arc::new(c))))),
                        Err(e) => {
                            tracing::warn!(dataset_id = %row.id, error = %e, "unreadable snapshot: composing from the first entry");
                            empty()
                        }
                    };
                }
                Ok(None) => return Err(LedgerError::NotFound(row.id.clone())),
                Err(StoreError::VersionConflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        empty()
    }

    /// Whether a snapshot at `version` is due, the stored one being at `stored`.
    fn due(&self, id: &str, stored: i64, version: i64) -> bool {
        if version <= stored {
            return false;
        }
        let last = lock(&self.written).get(id).copied();
        let age = last.map_or(Duration::MAX, |t| t.elapsed());
        age >= SNAPSHOT_MIN_INTERVAL && (version - stored >= SNAPSHOT_UNITS || age >= SNAPSHOT_AGE)
    }

    /// Writes `c` as the dataset's snapshot in the background (serialised on the blocking pool).
    fn write_snapshot(self: &Arc<Self>, row: &DatasetRow, c: Arc<Composed>) {
        {
            let mut written = lock(&self.written);
            if written.len() > 1 << 16 {
                written.clear();
            }
            written.insert(row.id.clone(), Instant::now());
        }
        let (this, id, delta) = (self.clone(), row.id.clone(), row.budget_delta);
        tokio::spawn(async move {
            let cost = admission::Cost::light_if(c.is_light());
            let c2 = c.clone();
            let made = blocking(&this.admission, cost, move || {
                let mu = c2.mu_at(delta)?;
                let bytes = c2.state.as_ref().map(|s| s.to_bytes()).unwrap_or_default();
                Ok((bytes, mu))
            })
            .await;
            let result = match made {
                Ok((bytes, mu)) => this
                    .store
                    .put_snapshot(&id, c.version, &bytes, mu)
                    .await
                    .map_err(LedgerError::from),
                Err(e) => Err(e),
            };
            match result {
                Ok(_) => metrics::counter!("privacy_ledger_snapshots_written_total").increment(1),
                Err(e) => {
                    tracing::warn!(dataset_id = %id, error = %e, "snapshot not written");
                }
            }
        });
    }

    /// The units counted by the entries after `after` (at most [`TAIL_STEP`] of them).
    async fn tail(&self, id: &str, after: i64) -> Result<Tail, LedgerError> {
        let entries = self.store.list_entries(id, None, after, TAIL_STEP).await?;
        let mut tail = Tail {
            last: entries.last().map_or(after, |e| e.seq),
            counted: Vec::new(),
        };
        let mut index: HashMap<String, usize> = HashMap::new();
        for e in &entries {
            let event = match e.kind.as_str() {
                "charge" if created_committed(e) => e.event.clone(),
                "commit" => {
                    let charge_id = e.ref_id.as_deref().unwrap_or_default();
                    self.store
                        .find_charge(id, charge_id)
                        .await?
                        .and_then(|c| c.event)
                }
                _ => continue,
            };
            let event = event.ok_or_else(|| {
                LedgerError::Corrupt(
                    id.to_owned(),
                    format!("entry {}: a unit without its event", e.seq),
                )
            })?;
            match index.get(&event) {
                Some(&i) => tail.counted[i].1 += 1,
                None => {
                    index.insert(event.clone(), tail.counted.len());
                    tail.counted.push((event, 1));
                }
            }
        }
        Ok(tail)
    }
}

/// Whether a charge entry was created committed (so counts at its own entry): its stored response
/// says the status it was created with. Responses without one are committed: a multi-ledger
/// charge's (always committed) and every charge written before reservations existed.
fn created_committed(e: &EntryRow) -> bool {
    let Some(r) = e.response.as_deref() else {
        return true;
    };
    if !r.contains("\"reserved\"") {
        // Cheap common case: no status "reserved" anywhere in it.
        return true;
    }
    let status = serde_json::from_str::<Value>(r).ok().and_then(|v| {
        v.pointer("/charge/status")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    status.as_deref() != Some("reserved")
}

/// Units counted by a run of entries: each distinct event (its stored JSON) with its count.
struct Tail {
    /// The last entry read (the version the composition moves to).
    last: i64,
    counted: Vec<(String, u64)>,
}

impl Tail {
    /// Whether every counted event is closed-form under the composition's relation.
    fn analytic(&self, c: &Composition) -> bool {
        self.counted
            .iter()
            .all(|(json, _)| parse(json).is_ok_and(|e| super::compute::analytic(&e, c.relation())))
    }
}

fn parse(json: &str) -> Result<Event, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    super::input::parse_event(&v, &JsonPath::root().field("event")).map_err(|e| e.to_string())
}

/// `base` with the counted units composed in: `Err` (why) when one cannot be, and a stopped
/// computation passed on.
fn compose(
    base: &Composition,
    counted: &[(String, u64)],
) -> Result<Result<Composition, String>, LedgerError> {
    let mut events = Vec::with_capacity(counted.len());
    for (json, n) in counted {
        let e = match parse(json) {
            Ok(e) => e,
            Err(why) => return Ok(Err(format!("a charge's event is unreadable: {why}"))),
        };
        events.push(match Count::new(*n) {
            Ok(count) if *n > 1 => Event::SelfComposed {
                count,
                event: Box::new(e),
            },
            _ => e,
        });
    }
    let mut next = base.clone();
    let path = JsonPath::root().field("events");
    let all = match events.len() {
        0 => return Ok(Ok(next)),
        1 => events.pop().expect("one event"),
        _ => Event::Composed { events },
    };
    match next.push(&all, &path) {
        Ok(()) => Ok(Ok(next)),
        Err(e @ AccountantError::Stopped(_)) => Err(e.into()),
        Err(e) => Ok(Err(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(response: Option<&str>) -> EntryRow {
        EntryRow {
            response: response.map(str::to_owned),
            ..EntryRow::new("charge", "2026-01-01T00:00:00.000Z".into())
        }
    }

    #[test]
    fn a_charge_counts_where_it_was_created_committed() {
        // A reservation counts at its commit, whatever its status is now.
        let reserved = r#"{"charge":{"status":"reserved","label":"x"},"report":{"$shared":"d"}}"#;
        assert!(!created_committed(&charge(Some(reserved))));
        let direct = r#"{"charge":{"status":"committed"},"report":{"$shared":"d"}}"#;
        assert!(created_committed(&charge(Some(direct))));
        // A label or metadata saying "reserved" does not make a charge a reservation.
        let labelled = r#"{"charge":{"status":"committed","label":"reserved"}}"#;
        assert!(created_committed(&charge(Some(labelled))));
        // Multi-ledger charges (a shared body) and charges from before reservations.
        assert!(created_committed(&charge(Some(r#"{"$body":"abc"}"#))));
        assert!(created_committed(&charge(None)));
    }
}

//! The application layer: datasets, their μ-GDP budgets, and the gate that admits or rejects charges.
//!
//! Every charge is a *unit* whose parameters are fixed when it is admitted; it gets a certificate
//! (μᵢ, δᵢ) and the gate is the adaptive μ-GDP filter of [`filter`]: admit iff Σμᵢ² ≤ μ_B² and
//! Σδᵢ ≤ δ_B. The exact composition of all charges is still kept, and shown, but only as what the
//! ledger would be worth had the whole sequence been fixed in advance; it never admits anything.
//! Check and append are one step: per dataset, charges are serialised by an in-process lock, and the
//! store's append is a compare-and-swap on the ledger version, so concurrent charges (from this
//! process or another replica on the same database) never both pass against the same ledger state.
//!
//! Numerical work runs on tokio's blocking pool or a low-priority thread, never on the async
//! workers ([`compute`]).
//!
//! # Layout
//! This file is the front door: [`Ledgers`] and what it holds. Below it, from the floor up:
//! - the domain: [`filter`] (the gate's rule, written once), [`input`] (requests parsed into the
//!   ledger's types), [`auth`] and [`keys`] (principals, roles, scoped idempotency keys);
//! - components: `error` (the one error type), `views` (what the API answers), `rows` (a stored
//!   row read into checked types), `compute` (where numerical work runs), `verdict` (the gate's
//!   decision on one unit), `certificates` (their memo, kept across restarts), `kept` (the gate's
//!   inputs between charges), `compositions` (exact compositions, off the write path), `write`
//!   (the one write loop, replays and the compare-and-swap);
//! - one file per operation: `datasets`, `charge`, `units` (runs, commits, releases), [`multi`]
//!   (charges on several ledgers and blocks), [`quotas`], [`partition`], `calibration`,
//!   `reports`, [`dashboard`], [`audit`].

pub mod admission;
pub mod alerts;
pub mod audit;
pub mod auth;
pub mod budget;
mod calibration;
mod certificates;
mod charge;
mod compositions;
mod compute;
pub mod dashboard;
mod datasets;
mod error;
pub mod filter;
mod gauges;
pub mod headline;
pub mod input;
mod kept;
pub mod keys;
pub mod multi;
pub mod names;
pub mod oidc;
pub mod partition;
pub mod population;
pub mod principal;
pub mod quotas;
mod reports;
mod rows;
mod runs;
pub mod schema;
pub mod sessions;
mod units;
mod verdict;
mod views;
mod write;

pub use budget::{CertificateView, GATE_TOLERANCE};
pub use compute::COMPUTE_LIMIT;
pub use error::{LedgerError, Rejection, RunFit};
pub use filter::{Statement, Validity};
pub use kept::REPORT_CACHE_BYTES;
pub use runs::{RunPlan, RunView};
pub use views::{
    BalancedPoint, Calibrated, ChargeCreated, ChargeOutcome, ChargeView, CurvePointView,
    DatasetReport, DatasetView, EntryView, ExactComposition, Preview, Settled, TradeoffView,
    UnitCurve,
};

/// Empties this process's memo of certificates (what a restart does), for tests.
#[doc(hidden)]
pub fn forget_certificates() {
    certificates::forget_all();
}

use crate::accountant::cache::ByteCache;
use crate::store::Store;
use kept::FilterReports;
use kept::GateInputs;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The default δ of a unit that needs one (its privacy loss is unbounded, or bounded only up to
/// the engine's truncation), unless the charge names one: δ_B / 1000, the middle of the three the
/// gate chooses from (a decade either side, `certificate::AUTO_DELTA_STEPS`; `Gate::choose` takes
/// the one leaving the most room). A dataset can take a thousand such units before its δ is spent,
/// and a whole run's μ barely depends on δ at that scale (for the README's DP-SGD chunk, μ moves
/// by <1 % between δ_B/100 and δ_B/10000). Units whose fit at δ = 0 is within 0.1 % spend no δ at
/// all (see [`crate::accountant::certificate`]).
pub const DEFAULT_UNITS_PER_DELTA: f64 = 1000.0;

/// Bytes of composed states kept in memory (least recently used first out): 128 MiB.
pub const STATE_CACHE_BYTES: usize = 128 << 20;

/// Bytes of kept gate inputs (dataset rows and quotas, a few hundred bytes each): 16 MiB.
pub const GATE_CACHE_BYTES: usize = 16 << 20;

/// The datasets and their gate.
pub struct Ledgers {
    store: Arc<dyn Store>,
    /// One lock per dataset: charges on a dataset are gated one at a time in this process. It
    /// holds when a holder last failed for want of the store ([`write::DatasetGuard`]).
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<std::time::Instant>>>>>,
    /// Exact compositions (reports), kept and caught up off the write path.
    compositions: Arc<compositions::Compositions>,
    /// Bytes of compositions kept.
    composition_bytes: usize,
    /// What the gate reads of each dataset (row and quotas) as of this process's last write.
    gates: Mutex<ByteCache<String, Arc<GateInputs>>>,
    /// Filter reports with the default options.
    reports: FilterReports,
    /// JWTs from an identity provider, when configured.
    oidc: Option<Arc<oidc::Oidc>>,
    /// How much numerical work runs at once.
    admission: Arc<admission::Admission>,
    /// Datasets' partitionings (fixed at creation, and datasets are never deleted).
    partitionings: Mutex<ByteCache<String, Option<partition::Partitioning>>>,
    /// Runs' progress, by dataset and run.
    runs: Mutex<ByteCache<String, Arc<runs::RunProgress>>>,
    /// Block ledgers each principal created this minute.
    created: partition::CreationLimit,
    /// Datasets known to hold no idempotency key stored before scoping (every key written since
    /// is scoped, so the answer never changes back): their gate inputs skip that query.
    no_legacy_keys: Mutex<std::collections::HashSet<String>>,
    /// Budget alerts to the operator's webhook ([`alerts`]).
    alerts: Arc<alerts::Alerts>,
    /// When the budget gauges were last set ([`gauges`]).
    gauges_at: Mutex<Option<std::time::Instant>>,
}

/// Bytes of kept partitionings: 1 MiB.
const PARTITIONING_CACHE_BYTES: usize = 1 << 20;

impl Ledgers {
    /// The service over a store.
    pub fn new(store: Arc<dyn Store>) -> Self {
        let admission = Arc::new(admission::Admission::new(
            admission::AdmissionConfig::default(),
        ));
        let alerts = alerts::Alerts::new(store.clone(), None);
        Ledgers {
            compositions: compositions::Compositions::new(
                store.clone(),
                admission.clone(),
                STATE_CACHE_BYTES,
            ),
            composition_bytes: STATE_CACHE_BYTES,
            store,
            locks: Mutex::new(HashMap::new()),
            gates: Mutex::new(ByteCache::new(GATE_CACHE_BYTES)),
            reports: FilterReports::new(),
            oidc: None,
            admission,
            partitionings: Mutex::new(ByteCache::new(PARTITIONING_CACHE_BYTES)),
            runs: Mutex::new(ByteCache::new(runs::RUN_CACHE_BYTES)),
            created: partition::CreationLimit::default(),
            no_legacy_keys: Mutex::new(std::collections::HashSet::new()),
            gauges_at: Mutex::new(None),
            alerts,
        }
    }

    /// Sends budget alerts to `config`'s webhook (see [`alerts`]), and sweeps every dataset for
    /// crossings made by other replicas. Needs a tokio runtime.
    pub fn with_alerts(mut self, config: alerts::AlertConfig) -> Self {
        self.alerts = alerts::Alerts::new(self.store.clone(), Some(config));
        self.alerts.sweep_forever();
        self
    }

    /// Limits heavy accountant work as `config` says (default: see [`admission::AdmissionConfig`]).
    pub fn with_admission(mut self, config: admission::AdmissionConfig) -> Self {
        self.admission = Arc::new(admission::Admission::new(config));
        let bytes = self.composition_bytes;
        self.with_state_cache_bytes(bytes)
    }

    /// Keeps at most `bytes` of exact compositions (default [`STATE_CACHE_BYTES`]; tests use 0
    /// to make every report start from the stored snapshot).
    #[doc(hidden)]
    pub fn with_state_cache_bytes(mut self, bytes: usize) -> Self {
        self.composition_bytes = bytes;
        self.compositions =
            compositions::Compositions::new(self.store.clone(), self.admission.clone(), bytes);
        self
    }

    /// Also accepts JWTs from an identity provider as bearer tokens.
    pub fn with_oidc(mut self, oidc: Arc<oidc::Oidc>) -> Self {
        self.oidc = Some(oidc);
        self
    }

    /// Whether the store answers.
    pub async fn ready(&self) -> Result<(), LedgerError> {
        self.store.ping().await.map_err(LedgerError::from)
    }
}

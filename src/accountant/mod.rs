//! The privacy accountant: pure, synchronous, deterministic math.
//!
//! No I/O, no async runtime, no HTTP or database types: callers (the CLI, the ledger service) hand it
//! validated events and get numbers back. Submodules:
//!
//! - [`event`]: the closed event model and its validating parser;
//! - [`normal`]: Φ, Φ⁻¹ and log-tails, accurate far into the tails;
//! - [`gdp`]: μ-GDP closed forms (trade-off curve, privacy profile, composition, risk, conversions);
//! - [`tradeoff`]: piecewise-linear trade-off functions (inverse, symmetrisation, validity, profile);
//! - [`epsilon_delta`]: f_{ε,δ} and the exact compositions of (ε, δ)-DP mechanisms;
//! - [`subsample`]: the subsampling operator C_p;
//! - [`tv`]: η-TV closed forms and the exact composition of (ε, δ, η) mechanisms;
//! - [`clt`]: CLT / Berry–Esseen approximations (reported, never enforced);
//! - [`analytic`]: the exact engine for Gaussian-type ledgers;
//! - [`certificate`]: unit certificates (μᵢ, δᵢ) for the adaptive filter, and its guarantee;
//! - [`report`]: the one report shape every caller returns.
//!
//! # Soundness
//! Every figure may be loose, never optimistic: see [`rounding`] for how floating-point error is
//! pushed toward more privacy loss, and each function's `# Soundness` section for its direction.

pub mod account;
pub mod analytic;
pub mod cache;
pub mod calibrate;
pub mod certificate;
pub mod clt;
pub mod composition;
pub mod dp_event;
pub mod epsilon_delta;
pub mod event;
pub mod gdp;
pub mod guarantee;
pub mod json;
pub(crate) mod lines;
pub mod normal;
pub mod params;
pub mod pld;
pub mod renyi;
pub mod report;
pub mod rounding;
pub mod sampler;
pub mod subsample;
pub mod tradeoff;
pub mod tv;
pub mod work;
pub mod zcdp;

pub use event::Event;
pub use json::InputError;

/// Errors of the accountant layer (HTTP-agnostic; the service maps them to status codes).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AccountantError {
    /// The input does not parse into valid events or parameters.
    #[error(transparent)]
    Input(#[from] InputError),
    /// An event needs the numerical (privacy-loss distribution) engine.
    #[error(
        "{path}: a {event_type} event has no exact closed form here; it needs the numerical \
         (privacy-loss distribution) engine, which is not available in this version"
    )]
    NeedsNumericalEngine {
        /// JSON path of the event.
        path: String,
        /// Its type name.
        event_type: &'static str,
    },
    /// The computation would exceed the grid or work limits (bounded time and memory).
    #[error("{path}: {reason}")]
    TooLarge {
        /// JSON path of the event.
        path: String,
        /// What limit and how to stay within it.
        reason: String,
    },
    /// The computation was stopped (abandoned request, time limit, shutdown): see [`work`].
    #[error("{0}")]
    Stopped(work::Stopped),
    /// The event has no meaning under the neighbouring relation.
    #[error("{path}: {reason}")]
    Unsupported {
        /// JSON path of the event.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Which pairs of datasets count as neighbours.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum NeighboringRelation {
    /// Datasets that differ by adding or removing one record (dp_accounting's default).
    #[default]
    AddOrRemoveOne,
    /// Datasets of the same size that differ in one record.
    ReplaceOne,
}

impl NeighboringRelation {
    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "add_or_remove_one" => Some(Self::AddOrRemoveOne),
            "replace_one" => Some(Self::ReplaceOne),
            _ => None,
        }
    }

    /// Sensitivity, in units of the per-record contribution bound, of a query whose records each
    /// contribute at most that bound: 1 under add/remove, 2 under replace-one (a replaced record
    /// removes one contribution and adds another). `gaussian` and `laplace` noise multipliers are
    /// relative to the per-record bound, as in dp_accounting (`from_gaussian_mechanism` uses
    /// sensitivity 2 for REPLACE_ONE).
    pub fn sensitivity(self) -> f64 {
        match self {
            Self::AddOrRemoveOne => 1.0,
            Self::ReplaceOne => 2.0,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AddOrRemoveOne => "add_or_remove_one",
            Self::ReplaceOne => "replace_one",
        }
    }
}

impl From<work::Stopped> for AccountantError {
    fn from(s: work::Stopped) -> Self {
        AccountantError::Stopped(s)
    }
}

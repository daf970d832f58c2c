//! A run's declaration, its plan and its progress as its entries state them (the operations on
//! runs are in `units`).

use super::error::LedgerError;
use super::filter::{sqrt_up, FilterState};
use crate::accountant::certificate::Certificate;
use crate::accountant::event::Count;
use crate::accountant::rounding::{add_up, mul_up};
use crate::accountant::Event;
use crate::store::EntryRow;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

/// A declared run and its progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = Run)]
pub struct RunView {
    pub id: String,
    /// One step.
    #[schema(value_type = Object)]
    pub event: Value,
    pub steps: u64,
    pub chunk_steps: u64,
    pub chunks: u64,
    /// The δᵢ the caller set for each chunk, if any.
    pub delta: Option<f64>,
    pub label: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// The figures fixed at declaration.
    #[serde(flatten)]
    pub plan: RunPlan,
    /// Chunks committed, reserved (counted, not settled) and released (refunded).
    pub chunks_committed: u64,
    pub chunks_reserved: u64,
    pub chunks_released: u64,
    /// The chunk the next request admits (`None`: every chunk is admitted).
    pub next_chunk: Option<u64>,
    /// Steps in the chunks admitted and not released.
    pub steps_taken: u64,
    /// What the run's admitted chunks (committed or reserved) add to the filter: √Σμᵢ² and Σδᵢ,
    /// both rounded up.
    pub mu_used: f64,
    pub delta_used: f64,
    /// What the chunks not yet admitted would add at the plan's certificates: √Σμᵢ² and Σδᵢ,
    /// rounded up. A planning figure: the gate chooses each chunk's δᵢ when it is taken.
    pub mu_to_finish: f64,
    pub delta_to_finish: f64,
    /// What the declaration found worth saying: `chunking_cost` when the chunks cost more than
    /// the stated fraction over one unit (with `suggested_chunk_steps`).
    pub warnings: Vec<RunWarning>,
    /// Whether every chunk was reserved at declaration.
    pub reserved: bool,
    /// The batch sampler declared with the run, if one was.
    pub sampler: Option<SamplerView>,
    /// A reserved run's chunks held now, by chunk: the unit to start, commit or release (empty
    /// for a run whose chunks are taken one by one).
    pub reserved_chunks: Vec<HeldChunk>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// A chunk of a reserved run and the unit holding it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeldChunk {
    pub chunk: u64,
    pub charge_id: String,
    #[schema(value_type = super::schema::ChargeStatus)]
    pub status: String,
}

/// A warning about a run's declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunWarning {
    /// `chunking_cost`.
    pub code: String,
    pub message: String,
    /// A chunk size (steps) whose chunks cost at most the tolerance over one unit: the smallest
    /// of those tried, halving the number of chunks (at worst all the steps, one unit).
    pub suggested_chunk_steps: u64,
}

/// What a run costs, computed when it is declared (at the dataset's budget then), as if its chunks
/// were the only units on a fresh ledger of that budget. The gate chooses each chunk's δᵢ from the
/// ledger's sums when the chunk is taken (`docs/filter.md` §9), so on a ledger with other units a
/// chunk may be charged another of its certificates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunPlan {
    /// The certificate (μᵢ, δᵢ) of a full chunk (the first one's, as the gate would charge it).
    #[schema(value_type = super::budget::CertificateView)]
    pub chunk_unit: Certificate,
    /// The certificate of the last chunk when it is shorter.
    #[schema(value_type = Option<super::budget::CertificateView>)]
    pub last_chunk_unit: Option<Certificate>,
    /// What the whole run adds to the filter: √(Σ over its chunks of μᵢ²) (rounded up) and Σδᵢ.
    pub run_mu: f64,
    pub run_delta: f64,
    /// μ (upper, at the budget's δ) of the exact composition of all steps as one unit: what the run
    /// would cost with one chunk; the difference to `run_mu` is the price of chunking.
    pub run_mu_as_one_unit: Option<f64>,
}

/// A run's declaration as stored (`entries.event` of its `run` entry).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct RunSpec {
    pub(super) event: Value,
    pub(super) steps: u64,
    pub(super) chunk_steps: u64,
    pub(super) delta: Option<f64>,
    pub(super) plan: RunPlan,
    /// Absent in runs declared before warnings existed.
    #[serde(default)]
    pub(super) warnings: Vec<RunWarning>,
    /// Every chunk reserved at declaration (absent: false).
    #[serde(default)]
    pub(super) reserve: bool,
    /// The batch sampler the run declared (absent: none declared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) sampler: Option<SamplerView>,
}

/// A run's declared batch sampler, the rate derived from it and what checking the step found
/// ([`crate::accountant::sampler`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SamplerView {
    /// `poisson` or `without_replacement`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The expected (Poisson) or exact (without replacement) batch size.
    pub batch_size: u64,
    pub dataset_size: u64,
    /// The per-record rate per step derived from them (Poisson: B/N rounded up, the rate the
    /// step is accounted at when it stated B/N within rounding).
    pub rate: f64,
    /// Sampled events of the step checked against the sampler.
    pub checked: u64,
    /// What the check found worth saying (a stated rate above the sampler's; no sampled event).
    pub notes: Vec<String>,
}

impl SamplerView {
    /// The view of `sampler` checked as `check`.
    pub fn of(
        sampler: crate::accountant::sampler::Sampler,
        check: &crate::accountant::sampler::SamplerCheck,
    ) -> Self {
        use crate::accountant::sampler::Sampler;
        let (kind, b, n) = match sampler {
            Sampler::Poisson {
                expected_batch_size,
                dataset_size,
            } => ("poisson", expected_batch_size, dataset_size),
            Sampler::WithoutReplacement {
                batch_size,
                dataset_size,
            } => ("without_replacement", batch_size, dataset_size),
        };
        SamplerView {
            kind: kind.into(),
            batch_size: b.get(),
            dataset_size: n.get(),
            rate: check.rate,
            checked: check.checked as u64,
            notes: check.notes.clone(),
        }
    }
}

/// Steps in chunk `i` of a run.
pub(super) fn chunk_len(steps: u64, chunk_steps: u64, i: u64) -> u64 {
    chunk_steps.min(steps - i * chunk_steps)
}

/// `count` steps of `step` as one event.
pub(super) fn repeated(step: &Event, count: u64) -> Result<Event, LedgerError> {
    if count == 1 {
        return Ok(step.clone());
    }
    let count = Count::new(count).map_err(LedgerError::Internal)?;
    Ok(Event::SelfComposed {
        count,
        event: Box::new(step.clone()),
    })
}

pub(super) fn spec_of(decl: &EntryRow, id: &str) -> Result<RunSpec, LedgerError> {
    decl.event
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .ok_or_else(|| LedgerError::Corrupt(id.to_owned(), format!("run entry {}", decl.seq)))
}

/// The run's view from its entries (the declaration first, then its chunks): its progress moved
/// past all of them at once.
pub(super) fn run_view(entries: &[EntryRow], id: &str) -> Result<RunView, LedgerError> {
    let mut p = RunProgress::new(entries[0].clone(), id)?;
    p.advance(&entries[1..]);
    Ok(p.view())
}

/// A run's progress as its entries up to `seq` state it, moved forward by the entries appended
/// since: taking a chunk reads the run's new entries only, whatever its length. Each chunk charge's
/// status is the one read with it, then moved by the start, commit and release entries that
/// follow (idempotently: a status read after a settle already holds it), so the counts are what
/// [`run_view`] counts from the whole run.
#[derive(Debug, Clone)]
pub(super) struct RunProgress {
    pub(super) seq: i64,
    pub(super) decl: EntryRow,
    pub(super) spec: RunSpec,
    /// Chunk charges by id: (chunk, status now, certificate).
    pub(super) charges: HashMap<String, (u64, String, Option<Certificate>)>,
    /// Per chunk, the charges holding it (not released).
    pub(super) holders: Vec<u32>,
    pub(super) committed: u64,
    pub(super) reserved: u64,
    pub(super) released: u64,
    /// Chunks held, and their steps.
    pub(super) held: u64,
    pub(super) steps_taken: u64,
    /// The held chunks' certificates summed as the filter sums them.
    pub(super) used: FilterState,
}

impl RunProgress {
    pub(super) fn new(decl: EntryRow, id: &str) -> Result<Self, LedgerError> {
        let spec = spec_of(&decl, id)?;
        let chunks = spec.steps.div_ceil(spec.chunk_steps) as usize;
        Ok(RunProgress {
            seq: decl.seq,
            decl,
            spec,
            charges: HashMap::new(),
            holders: vec![0; chunks],
            committed: 0,
            reserved: 0,
            released: 0,
            held: 0,
            steps_taken: 0,
            used: FilterState::empty(),
        })
    }

    /// One more charge holds `chunk`.
    fn hold(&mut self, chunk: u64, unit: Option<&Certificate>) {
        if let Some(h) = self.holders.get_mut(chunk as usize) {
            *h += 1;
            if *h == 1 {
                self.held += 1;
                self.steps_taken += chunk_len(self.spec.steps, self.spec.chunk_steps, chunk);
            }
        }
        if let Some(c) = unit {
            self.used = self.used.with(c);
        }
    }

    /// A charge holding `chunk` was released.
    fn unhold(&mut self, chunk: u64, unit: Option<&Certificate>) {
        if let Some(h) = self.holders.get_mut(chunk as usize) {
            if *h == 1 {
                self.held -= 1;
                self.steps_taken = self.steps_taken.saturating_sub(chunk_len(
                    self.spec.steps,
                    self.spec.chunk_steps,
                    chunk,
                ));
            }
            *h = h.saturating_sub(1);
        }
        if let Some(c) = unit {
            self.used = self.used.without(c);
        }
    }

    pub(super) fn count(&mut self, status: &str, by: i64) {
        let c = match status {
            "released" => &mut self.released,
            "reserved" | "started" => &mut self.reserved,
            _ => &mut self.committed,
        };
        *c = c.saturating_add_signed(by);
    }

    /// Moves the progress past `entries` (the run's, after `self.seq`, in order).
    pub(super) fn advance(&mut self, entries: &[EntryRow]) {
        for e in entries {
            self.seq = self.seq.max(e.seq);
            let to = match e.kind.as_str() {
                "charge" => {
                    let (Some(id), Some(chunk)) = (&e.charge_id, e.chunk) else {
                        continue;
                    };
                    let status = e.status.clone().unwrap_or_else(|| "committed".into());
                    let unit = e
                        .unit_mu
                        .zip(e.unit_delta)
                        .and_then(|(mu, delta)| Certificate::new(mu, delta));
                    self.count(&status, 1);
                    if status != "released" {
                        self.hold(chunk as u64, unit.as_ref());
                    }
                    self.charges
                        .insert(id.clone(), (chunk as u64, status, unit));
                    continue;
                }
                "start" => "started",
                "commit" => "committed",
                "release" => "released",
                _ => continue,
            };
            let Some((chunk, from, unit)) =
                e.ref_id.as_ref().and_then(|r| self.charges.get(r)).cloned()
            else {
                continue;
            };
            if from == to || from == "released" {
                continue;
            }
            self.count(&from, -1);
            self.count(to, 1);
            if to == "released" {
                self.unhold(chunk, unit.as_ref());
            }
            if let Some(c) = e.ref_id.as_ref().and_then(|r| self.charges.get_mut(r)) {
                c.1 = to.to_owned();
            }
        }
    }

    /// What the chunks not held would add at the plan's certificates (the last one's when it is
    /// shorter): √Σμᵢ² and Σδᵢ, each product, sum and root rounded up; O(1).
    fn to_finish(&self) -> (f64, f64) {
        let plan = &self.spec.plan;
        let chunks = self.holders.len() as u64;
        let held = self.held;
        let last_shorter = plan.last_chunk_unit.filter(|_| chunks > 0);
        let last_free = self.holders.last().is_some_and(|h| *h == 0);
        // Full chunks not held (the shorter last one, if any, apart).
        let full_free = match (last_shorter, last_free) {
            (Some(_), true) => chunks - held - 1,
            _ => chunks - held,
        };
        let (mut mu_sq, mut delta) = (
            mul_up(
                full_free as f64,
                mul_up(plan.chunk_unit.mu(), plan.chunk_unit.mu()),
            ),
            mul_up(full_free as f64, plan.chunk_unit.delta()),
        );
        if let (Some(l), true) = (last_shorter, last_free) {
            mu_sq = add_up(mu_sq, mul_up(l.mu(), l.mu()));
            delta = add_up(delta, l.delta());
        }
        (sqrt_up(mu_sq), delta)
    }

    pub(super) fn bytes(&self) -> usize {
        512 + self.holders.len() * 4 + self.charges.len() * 96
    }

    pub(super) fn view(&self) -> RunView {
        let parse = |s: &Option<String>| s.as_deref().and_then(|t| serde_json::from_str(t).ok());
        let (mu_to_finish, delta_to_finish) = self.to_finish();
        RunView {
            id: self.decl.run_id.clone().unwrap_or_default(),
            event: self.spec.event.clone(),
            steps: self.spec.steps,
            chunk_steps: self.spec.chunk_steps,
            chunks: self.holders.len() as u64,
            delta: self.spec.delta,
            label: self.decl.label.clone(),
            metadata: parse(&self.decl.metadata),
            plan: self.spec.plan,
            chunks_committed: self.committed,
            chunks_reserved: self.reserved,
            chunks_released: self.released,
            next_chunk: self.holders.iter().position(|h| *h == 0).map(|i| i as u64),
            steps_taken: self.steps_taken,
            mu_used: self.used.mu(),
            delta_used: self.used.delta(),
            mu_to_finish,
            delta_to_finish,
            warnings: self.spec.warnings.clone(),
            reserved: self.spec.reserve,
            sampler: self.spec.sampler.clone(),
            reserved_chunks: if self.spec.reserve {
                let mut held: Vec<HeldChunk> = self
                    .charges
                    .iter()
                    .filter(|(_, (_, status, _))| status != "released")
                    .map(|(id, (chunk, status, _))| HeldChunk {
                        chunk: *chunk,
                        charge_id: id.clone(),
                        status: status.clone(),
                    })
                    .collect();
                held.sort_by_key(|h| h.chunk);
                held
            } else {
                Vec::new()
            },
            created_at: self.decl.created_at.clone(),
        }
    }
}

/// Bytes of kept run progress: 8 MiB.
pub(super) const RUN_CACHE_BYTES: usize = 8 << 20;

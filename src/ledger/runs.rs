//! A run's declaration, its plan and its progress as its entries state them (the operations on
//! runs are in `units`).

use super::error::LedgerError;
use crate::accountant::certificate::Certificate;
use crate::accountant::event::Count;
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
    #[schema(format = DateTime)]
    pub created_at: String,
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

/// The run's view from its entries (the declaration first, then its chunks).
pub(super) fn run_view(entries: &[EntryRow], id: &str) -> Result<RunView, LedgerError> {
    let decl = &entries[0];
    let spec = spec_of(decl, id)?;
    let chunks = spec.steps.div_ceil(spec.chunk_steps);
    let (mut committed, mut reserved, mut released) = (0, 0, 0);
    let mut taken = vec![false; chunks as usize];
    for e in entries.iter().filter(|e| e.kind == "charge") {
        match e.status.as_deref() {
            Some("released") => released += 1,
            s => {
                if matches!(s, Some("reserved" | "started")) {
                    reserved += 1;
                } else {
                    committed += 1;
                }
                if let Some(t) = e.chunk.and_then(|c| taken.get_mut(c as usize)) {
                    *t = true;
                }
            }
        }
    }
    let parse = |s: &Option<String>| s.as_deref().and_then(|t| serde_json::from_str(t).ok());
    Ok(RunView {
        id: decl.run_id.clone().unwrap_or_default(),
        event: spec.event,
        steps: spec.steps,
        chunk_steps: spec.chunk_steps,
        chunks,
        delta: spec.delta,
        label: decl.label.clone(),
        metadata: parse(&decl.metadata),
        plan: spec.plan,
        chunks_committed: committed,
        chunks_reserved: reserved,
        chunks_released: released,
        next_chunk: taken.iter().position(|t| !t).map(|i| i as u64),
        created_at: decl.created_at.clone(),
    })
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
    /// Chunk charges by id: (chunk, status now).
    pub(super) charges: HashMap<String, (u64, String)>,
    /// Per chunk, the charges holding it (not released).
    pub(super) holders: Vec<u32>,
    pub(super) committed: u64,
    pub(super) reserved: u64,
    pub(super) released: u64,
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
        })
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
                    self.count(&status, 1);
                    if status != "released" {
                        if let Some(h) = self.holders.get_mut(chunk as usize) {
                            *h += 1;
                        }
                    }
                    self.charges.insert(id.clone(), (chunk as u64, status));
                    continue;
                }
                "start" => "started",
                "commit" => "committed",
                "release" => "released",
                _ => continue,
            };
            let Some((chunk, from)) = e.ref_id.as_ref().and_then(|r| self.charges.get(r)).cloned()
            else {
                continue;
            };
            if from == to || from == "released" {
                continue;
            }
            self.count(&from, -1);
            self.count(to, 1);
            if to == "released" {
                if let Some(h) = self.holders.get_mut(chunk as usize) {
                    *h = h.saturating_sub(1);
                }
            }
            if let Some(c) = e.ref_id.as_ref().and_then(|r| self.charges.get_mut(r)) {
                c.1 = to.to_owned();
            }
        }
    }

    pub(super) fn bytes(&self) -> usize {
        512 + self.holders.len() * 4 + self.charges.len() * 96
    }

    pub(super) fn view(&self) -> RunView {
        let parse = |s: &Option<String>| s.as_deref().and_then(|t| serde_json::from_str(t).ok());
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
            created_at: self.decl.created_at.clone(),
        }
    }
}

/// Bytes of kept run progress: 8 MiB.
pub(super) const RUN_CACHE_BYTES: usize = 8 << 20;

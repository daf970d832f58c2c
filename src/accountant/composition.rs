//! The composed privacy state of a ledger: incremental, serialisable, and exact where it can be.
//!
//! Events are split as they arrive: every Gaussian-type leaf (`gaussian`, `gdp`) joins the exact
//! μ-GDP sum ([`GdpComposition`]), everything else is discretised and convolved into one PLD pair.
//! A ledger of Gaussian mechanisms therefore never touches the numerical engine, and a mixed ledger
//! only discretises its Gaussian part once, when it is queried. Adding an event costs the event's own
//! discretisation plus one convolution with the running PLD — independent of how many events came
//! before (the running PLD's size is bounded by the loss spread, i.e. by the budget, not by the count).

use super::analytic::{gdp_terms, GdpComposition};
use super::cache::ByteCache;
use super::clt::{self, CltSums, Functionals};
use super::event::{Event, NonNegative};
use super::guarantee::Guarantee;
use super::json::JsonPath;
use super::params::GridStep;
use super::pld::query::PldGuarantee;
use super::pld::{Pld, Pmf};
use super::{AccountantError, NeighboringRelation};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Version of the serialised form ([`Composition::to_bytes`]).
pub const STATE_FORMAT_VERSION: u32 = 1;
const MAGIC: &[u8; 4] = b"PLCS";

/// The running composition of a ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Composition {
    grid_step: f64,
    gdp: GdpComposition,
    pld: Option<Pld>,
    /// CLT sums; `None` once a component has no usable functionals.
    clt: Option<CltSums>,
    invocations: u64,
    /// Whether only the upper (sound) end is wanted: no lower PMFs are composed, and the lower
    /// ends of the figures fall back to the upper PMFs shifted by steps·h. For the gate and
    /// calibration, which read μ's upper end only; never stored.
    upper_only: bool,
}

impl Composition {
    /// An empty composition.
    pub fn new(relation: NeighboringRelation, grid_step: GridStep) -> Self {
        let grid_step = grid_step.get();
        Composition {
            grid_step,
            gdp: GdpComposition::new(relation),
            pld: None,
            clt: Some(CltSums::default()),
            invocations: 0,
            upper_only: false,
        }
    }

    /// This composition without its lower PMFs, composing none from here on (see the field
    /// `upper_only`): every upper figure is unchanged, at about half the cost.
    pub fn upper_only(mut self) -> Self {
        self.upper_only = true;
        if let Some(p) = self.pld.as_mut() {
            p.lower = None;
        }
        self
    }

    /// The neighbouring relation.
    pub fn relation(&self) -> NeighboringRelation {
        self.gdp.relation()
    }

    /// The grid step of the numerical part.
    pub fn grid_step(&self) -> GridStep {
        GridStep::new(self.grid_step).expect("checked when made or read")
    }

    /// Number of mechanism invocations composed.
    pub fn invocations(&self) -> u64 {
        self.invocations
    }

    /// Bytes held, for caches bounded by bytes.
    pub fn heap_bytes(&self) -> usize {
        512 + self.pld.as_ref().map_or(0, Pld::heap_bytes)
    }

    /// Whether the whole composition is exact μ-GDP (no numerical part).
    pub fn is_analytic(&self) -> bool {
        self.pld.is_none()
    }

    /// The exact μ-GDP part.
    pub fn gdp(&self) -> &GdpComposition {
        &self.gdp
    }

    /// The numerical part, if any.
    pub fn pld(&self) -> Option<&Pld> {
        self.pld.as_ref()
    }

    /// Adds an event (located at `path` for error messages). All-or-nothing: on error the
    /// composition is unchanged.
    pub fn push(&mut self, e: &Event, path: &JsonPath) -> Result<(), AccountantError> {
        self.push_within(e, path, SPLIT_MAX_POINTS)
    }

    /// [`Composition::push`], the halves of a split stopping past `max_points` held together.
    fn push_within(
        &mut self,
        e: &Event,
        path: &JsonPath,
        max_points: usize,
    ) -> Result<(), AccountantError> {
        let rel = self.relation();
        let mut gaussian: Vec<(Event, u64)> = Vec::new();
        let mut rest: Vec<(&Event, u64, JsonPath)> = Vec::new();
        split(e, rel, 1, path, &mut gaussian, &mut rest)?;
        let mut next = self.clone();
        for (g, n) in &gaussian {
            // Never fails: `split` only routes analytic leaves here.
            let mut terms = Vec::new();
            gdp_terms(g, rel, path, *n, &mut terms)?;
            next.gdp.add_terms(&terms);
        }
        // The leaves in two halves, one per core (each discretises and composes its own), while
        // their two running compositions together stay small (see `Split`); past that, or for
        // few leaves, one after another on this thread. Then the parts and the running PLD are
        // composed.
        let half = if rest.len() >= MIN_LEAVES_TO_SPLIT {
            rest.len() / 2
        } else {
            rest.len()
        };
        let (first, second) = rest.split_at(half);
        // The running PLD comes first, so each convolution has one spread-out operand (see
        // `compose_leaves`); the running CLT sums are added to like any part's.
        let mut all = Composed {
            pld: next.pld.take().map(|p| (p, path.clone())),
            clt: next.clt,
            done: 0,
        };
        if !second.is_empty() {
            let split = Split {
                max_points,
                ..Split::default()
            };
            let (a, b) = super::pld::both(
                || self.compose_leaves(first, Composed::empty(), Some(&split)),
                || self.compose_leaves(second, Composed::empty(), Some(&split)),
            );
            // What a half left undone (the split stopped) is composed one after another below.
            let (a, b) = (a?, b?);
            let (a_done, b_done) = (a.done, b.done);
            let halves = a.join(b).map_err(|x| x.at(path))?;
            all = all.join(halves).map_err(|x| x.at(path))?;
            all = self.compose_leaves(&first[a_done..], all, None)?;
            all = self.compose_leaves(&second[b_done..], all, None)?;
        } else {
            all = self.compose_leaves(first, all, None)?;
        }
        next.pld = all.pld.map(|(p, _)| p);
        next.clt = all.clt;
        next.invocations = self.invocations.saturating_add(e.invocations());
        *self = next;
        Ok(())
    }

    /// The composition of `leaves` (each with its multiplicity), discretised and composed one by
    /// one, left to right. (A balanced tree of convolutions was tried: about 5 % faster on 400
    /// distinct mechanisms, but it convolves pairs of concentrated PMFs, whose larger ‖·‖₂ raises
    /// the calibrated FFT round-off bound subtracted from every lower figure: the lower ε bracket
    /// widened by 1.3e-4 relative. Left to right, each convolution has one spread-out operand.)
    ///
    /// Starts from `from` (its `done` is ignored) and returns how many of `leaves` it composed:
    /// all of them, unless `split` says the two halves of a split hold too much, then it stops at
    /// a leaf boundary and the caller composes the rest.
    fn compose_leaves(
        &self,
        leaves: &[(&Event, u64, JsonPath)],
        from: Composed,
        split: Option<&Split>,
    ) -> Result<Composed, AccountantError> {
        let rel = self.relation();
        let Composed {
            mut pld, mut clt, ..
        } = from;
        let mut held = 0usize;
        for (done, (ev, n, p)) in leaves.iter().enumerate() {
            super::work::check()?;
            if let Some(s) = split {
                if s.stop.load(Ordering::Relaxed) {
                    return Ok(Composed { pld, clt, done });
                }
            }
            let one = leaf_pld(ev, rel, self.grid_step, p)?;
            if *one == Pld::identity(self.grid_step) {
                // No privacy loss at all (sampling rate 0, ε = δ = 0, ...): composing it changes
                // nothing, and it must not move an exact ledger onto the numerical engine.
                continue;
            }
            clt = match (clt, functionals(ev, rel, &one)) {
                (Some(mut s), Some(f)) => {
                    s.add(f, *n);
                    Some(s)
                }
                _ => None,
            };
            let mut one = (*one).clone();
            if self.upper_only {
                one.lower = None;
            }
            let many = if *n == 1 {
                one
            } else {
                one.self_compose(*n).map_err(|x| x.at(p))?
            };
            pld = Some(match pld {
                None => (many, p.clone()),
                Some((acc, _)) => (acc.compose(&many).map_err(|x| x.at(p))?, p.clone()),
            });
            if let (Some(s), Some((acc, _))) = (split, &pld) {
                let now = acc.grid_points();
                let total = if now >= held {
                    s.held.fetch_add(now - held, Ordering::Relaxed) + (now - held)
                } else {
                    s.held.fetch_sub(held - now, Ordering::Relaxed) - (held - now)
                };
                held = now;
                if total > s.max_points {
                    s.stop.store(true, Ordering::Relaxed);
                }
            }
        }
        Ok(Composed {
            pld,
            clt,
            done: leaves.len(),
        })
    }

    /// The composed guarantee, ready for queries: exact when analytic, else the PLD composed with the
    /// discretised Gaussian part.
    pub fn guarantee(&self) -> Result<Box<dyn Guarantee>, AccountantError> {
        let mut clt = self.clt;
        if let Some(s) = clt.as_mut() {
            s.merge(self.gdp.clt());
        }
        let Some(pld) = &self.pld else {
            return Ok(Box::new(self.gdp));
        };
        let mu = self.gdp.mu();
        let path = JsonPath::root();
        let gdp_mu = NonNegative::new(mu).map_err(|_| AccountantError::TooLarge {
            path: path.to_string(),
            reason: format!(
                "the Gaussian part of the composition has μ = {mu:e}, beyond what the numerical \
                 engine can discretise"
            ),
        })?;
        let total = if mu > 0.0 {
            let mut g = Pld::from_event(
                &Event::Gdp { mu: gdp_mu },
                self.relation(),
                self.grid_step,
                &path,
            )?;
            if self.upper_only {
                g.lower = None;
            }
            pld.compose(&g).map_err(|x| x.at(&path))?
        } else {
            pld.clone()
        };
        Ok(Box::new(PldGuarantee::new(&total, clt)))
    }

    /// A compact, versioned binary form: `PLCS`, u32 version, u32 header length, a JSON header with
    /// every scalar, then the PMF masses as little-endian f64.
    pub fn to_bytes(&self) -> Vec<u8> {
        let pmfs: Vec<&Pmf> = match &self.pld {
            None => vec![],
            Some(p) => {
                let mut all: Vec<&Pmf> = std::iter::once(&p.remove).chain(p.add.as_ref()).collect();
                if let Some(l) = &p.lower {
                    all.extend(std::iter::once(&l.remove).chain(l.add.as_ref()));
                }
                all
            }
        };
        let lower = self
            .pld
            .as_ref()
            .and_then(|p| p.lower.as_ref())
            .map_or(0, |l| 1 + usize::from(l.add.is_some()));
        let header = Header {
            grid_step: self.grid_step,
            gdp: self.gdp,
            clt: self.clt,
            invocations: self.invocations,
            pmfs: pmfs.iter().map(|p| PmfHeader::of(p)).collect(),
            lower,
        };
        let json = serde_json::to_vec(&header).expect("header serialises");
        let mut out =
            Vec::with_capacity(12 + json.len() + 8 * pmfs.iter().map(|p| p.len()).sum::<usize>());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&STATE_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(json.len() as u32).to_le_bytes());
        out.extend_from_slice(&json);
        for p in pmfs {
            for m in &p.mass {
                out.extend_from_slice(&m.to_le_bytes());
            }
        }
        out
    }

    /// Restores [`Composition::to_bytes`] output.
    pub fn from_bytes(b: &[u8]) -> Result<Self, String> {
        if b.len() < 12 || &b[..4] != MAGIC {
            return Err("not a privacy-ledger composition state".into());
        }
        let version = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
        if version != STATE_FORMAT_VERSION {
            return Err(format!("unsupported state format version {version}"));
        }
        let hlen = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")) as usize;
        let body = b.get(12..12 + hlen).ok_or("truncated header")?;
        let header: Header = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let mut off = 12 + hlen;
        let mut pmfs = Vec::new();
        for ph in header.pmfs {
            let end = off + 8 * ph.len;
            let raw = b.get(off..end).ok_or("truncated masses")?;
            let mass = raw
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            off = end;
            pmfs.push(ph.into_pmf(mass));
        }
        if off != b.len() {
            return Err("trailing bytes after the masses".into());
        }
        if header.lower > 2 || header.lower > pmfs.len() || pmfs.len() - header.lower > 2 {
            return Err("inconsistent PMF counts".into());
        }
        let lower_pmfs = pmfs.split_off(pmfs.len() - header.lower);
        let pair = |v: Vec<Pmf>| {
            let mut it = v.into_iter();
            it.next().map(|remove| Pld::from_pmfs(remove, it.next()))
        };
        let mut pld = pair(pmfs);
        if let Some(p) = pld.as_mut() {
            p.lower = pair(lower_pmfs).map(Box::new);
        }
        GridStep::new(header.grid_step).map_err(|e| format!("grid step {e}"))?;
        Ok(Composition {
            grid_step: header.grid_step,
            gdp: header.gdp,
            pld,
            clt: header.clt,
            invocations: header.invocations,
            upper_only: false,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct Header {
    grid_step: f64,
    gdp: GdpComposition,
    clt: Option<CltSums>,
    invocations: u64,
    pmfs: Vec<PmfHeader>,
    /// How many of the last `pmfs` are the lower PMFs (0 in states written before they existed).
    #[serde(default)]
    lower: usize,
}

#[derive(Serialize, Deserialize)]
struct PmfHeader {
    h: f64,
    lo: i64,
    len: usize,
    inf: f64,
    inf_trunc: f64,
    moved_up: f64,
    abs_err: f64,
    /// Absent in states written before it existed: then unknown (the conservative reading).
    #[serde(default)]
    bin_err: Option<f64>,
    rel_err: f64,
    steps: u64,
}

impl PmfHeader {
    fn of(p: &Pmf) -> Self {
        PmfHeader {
            h: p.h,
            lo: p.lo,
            len: p.mass.len(),
            inf: p.inf,
            inf_trunc: p.inf_trunc,
            moved_up: p.moved_up,
            abs_err: p.abs_err,
            bin_err: p.bin_err,
            rel_err: p.rel_err,
            steps: p.steps,
        }
    }

    fn into_pmf(self, mass: Vec<f64>) -> Pmf {
        Pmf {
            h: self.h,
            lo: self.lo,
            mass,
            inf: self.inf,
            inf_trunc: self.inf_trunc,
            moved_up: self.moved_up,
            abs_err: self.abs_err,
            bin_err: self.bin_err,
            rel_err: self.rel_err,
            steps: self.steps,
        }
    }
}

/// Bytes of discretised mechanisms kept in memory ([`leaf_pld`]): 64 MiB.
pub const PLD_CACHE_BYTES: usize = 64 << 20;

/// Fewest numerical leaves in one push for which they are split between the two cores (below it
/// a thread costs more than it saves).
const MIN_LEAVES_TO_SPLIT: usize = 4;

/// Most grid points the two halves of a split push may hold in their running compositions
/// together (both orderings and lower PMFs counted) before they stop and the rest is composed on
/// one thread: as many as one PMF at the engine's limit, a fraction of what a computation may hold
/// anyway, so splitting never raises a computation's peak memory beyond the one-thread bound the
/// service plans for.
const SPLIT_MAX_POINTS: usize = super::pld::MAX_GRID_POINTS;

/// What the two halves of a split push share: the grid points their running compositions hold,
/// the most they may ([`SPLIT_MAX_POINTS`]), and whether they must stop.
#[derive(Default)]
struct Split {
    held: AtomicUsize,
    max_points: usize,
    stop: AtomicBool,
}

/// Part of a push's numerical leaves, composed ([`Composition::compose_leaves`]): their PLD and the
/// path of the leaf named when composing it with more fails; their CLT sums (`None` when a leaf
/// has no usable functionals); how many leaves it composed.
struct Composed {
    pld: Option<(Pld, JsonPath)>,
    clt: Option<CltSums>,
    done: usize,
}

impl Composed {
    /// No leaves yet.
    fn empty() -> Composed {
        Composed {
            pld: None,
            clt: Some(CltSums::default()),
            done: 0,
        }
    }

    /// Both parts as one (their PLDs composed, their CLT sums merged; `done` is the caller's).
    fn join(self, other: Composed) -> Result<Composed, super::pld::PldError> {
        let pld = match (self.pld, other.pld) {
            (Some((a, at)), Some((b, _))) => Some((a.compose(&b)?, at)),
            (a, b) => a.or(b),
        };
        let clt = match (self.clt, other.clt) {
            (Some(mut s), Some(f)) => {
                s.merge(&f);
                Some(s)
            }
            _ => None,
        };
        Ok(Composed { pld, clt, done: 0 })
    }
}

/// The PLD of one (non-composite) event, memoised: a ledger charged step by step with the same
/// mechanism (DP-SGD) discretises it once, not once per charge. The cache is a pure memo of
/// `Pld::from_event` keyed by the event's canonical JSON, the relation and the grid step, bounded
/// by [`PLD_CACHE_BYTES`] (least recently used first out).
fn leaf_pld(
    ev: &Event,
    rel: NeighboringRelation,
    h: f64,
    path: &JsonPath,
) -> Result<Arc<Pld>, AccountantError> {
    type Key = (String, NeighboringRelation, u64);
    static CACHE: OnceLock<Mutex<ByteCache<Key, Arc<Pld>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(ByteCache::new(PLD_CACHE_BYTES)));
    let key = (ev.to_json().to_string(), rel, h.to_bits());
    if let Some(p) = cache.lock().expect("pld cache").get(&key) {
        return Ok(p);
    }
    let p = Arc::new(Pld::from_event(ev, rel, h, path)?);
    let bytes = p.heap_bytes();
    cache
        .lock()
        .expect("pld cache")
        .insert(key, p.clone(), bytes);
    Ok(p)
}

/// Splits an event into analytic Gaussian leaves and the rest, with multiplicities.
fn split<'a>(
    e: &'a Event,
    rel: NeighboringRelation,
    mult: u64,
    path: &JsonPath,
    gaussian: &mut Vec<(Event, u64)>,
    rest: &mut Vec<(&'a Event, u64, JsonPath)>,
) -> Result<(), AccountantError> {
    match e {
        Event::Composed { events } => {
            let p = path.field("events");
            for (i, ev) in events.iter().enumerate() {
                split(ev, rel, mult, &p.index(i), gaussian, rest)?;
            }
        }
        Event::SelfComposed { count, event } => split(
            event,
            rel,
            mult.saturating_mul(count.get()),
            &path.field("event"),
            gaussian,
            rest,
        )?,
        _ => match gdp_terms(e, rel, path, 1, &mut Vec::new()) {
            Ok(()) => gaussian.push((e.clone(), mult)),
            Err(AccountantError::NeedsNumericalEngine { .. }) => rest.push((e, mult, path.clone())),
            // Anything else (a μ that overflows, say) is the event's own error.
            Err(other) => return Err(other),
        },
    }
    Ok(())
}

/// CLT functionals of a non-Gaussian leaf, when they exist: DRS22 Lemma 4 for a subsampled
/// Gaussian, the exact discrete moments for any other symmetric PLD without mass at +∞.
fn functionals(e: &Event, rel: NeighboringRelation, pld: &Pld) -> Option<Functionals> {
    let gaussian_mu = |inner: &Event| match inner {
        Event::Gaussian { noise_multiplier } => Some(rel.sensitivity() / noise_multiplier.get()),
        Event::Gdp { mu } => Some(mu.get()),
        _ => None,
    };
    match e {
        Event::PoissonSampled {
            sampling_rate,
            event,
        } => gaussian_mu(event).and_then(|mu| clt::subsampled_gdp(mu, sampling_rate.get())),
        Event::SampledWithoutReplacement {
            sample_size,
            population_size,
            event,
        } => gaussian_mu(event).and_then(|mu| {
            clt::subsampled_gdp(mu, sample_size.get() as f64 / population_size.get() as f64)
        }),
        _ => {
            let p = &pld.remove;
            (pld.is_symmetric() && p.infinity_mass() == 0.0).then(|| {
                let atoms: Vec<(f64, f64)> = p
                    .mass
                    .iter()
                    .enumerate()
                    .map(|(j, &m)| (p.loss(j), m))
                    .collect();
                Functionals::from_atoms(&atoms)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// How far composition order may move ε at δ ≥ 1e-9: tails truncated (≤ 1e-15 of mass each)
    /// and round-off bounded at other places (see tests/integration/pld.rs, `ORDER_TOL`).
    const ORDER_TOL: f64 = 1e-6;

    fn events() -> Vec<Event> {
        (0..8)
            .map(|i| {
                let v = if i % 2 == 0 {
                    json!({"type": "laplace", "noise_multiplier": 5.0 + i as f64})
                } else {
                    json!({"type": "poisson_sampled", "sampling_rate": 0.01 * i as f64,
                           "event": {"type": "gaussian", "noise_multiplier": 1.0 + 0.1 * i as f64}})
                };
                Event::from_json(&v).unwrap()
            })
            .collect()
    }

    fn composition() -> Composition {
        Composition::new(
            NeighboringRelation::AddOrRemoveOne,
            GridStep::new(1e-4).unwrap(),
        )
    }

    /// A split whose halves hold more than allowed stops at a leaf boundary (here after each
    /// half's first leaf) and the rest is composed on one thread: every leaf counted once, the
    /// same figures as a split that never stops and as pushing one event at a time.
    #[test]
    fn a_split_holding_too_much_finishes_on_one_thread() {
        let all = Event::Composed { events: events() };
        let root = JsonPath::root();
        let mut free = composition();
        free.push_within(&all, &root, usize::MAX).unwrap();
        let mut capped = composition();
        capped.push_within(&all, &root, 1).unwrap();
        let mut one_by_one = composition();
        for e in events() {
            one_by_one.push(&e, &root).unwrap();
        }
        let g: Vec<_> = [&free, &capped, &one_by_one]
            .iter()
            .map(|c| c.guarantee().unwrap())
            .collect();
        for d in [1e-5, 1e-9] {
            let x = g[2].epsilon_bounds(d).1;
            for other in &g[..2] {
                let y = other.epsilon_bounds(d).1;
                assert!((x - y).abs() <= ORDER_TOL * x, "ε({d}): {x} vs {y}");
            }
        }
        assert_eq!(capped.invocations(), 8);
        assert_eq!(free.invocations(), 8);
    }
}

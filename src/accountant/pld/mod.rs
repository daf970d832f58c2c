//! The numerical accountant: privacy-loss distributions (PLDs) on a grid, composed by FFT.
//!
//! A mechanism's privacy is the distribution of its privacy loss L = ln(P/Q) (one distribution per
//! ordering of the neighbouring pair; "remove" and "add"). Composition adds losses, i.e. convolves
//! their distributions (Gomez et al., "(ε,δ) considered harmful" eq. (24)). Each mechanism is discretised on the grid k·h by
//! connect-the-dots ([`ctd`]) from its exact profile ([`source`]), compositions are FFT convolutions
//! with tails truncated *into* +∞ ([`pmf`]), and every query is answered as a bracket:
//!
//! - **upper** (sound): the profile of the pessimistic PMF, plus all truncated mass, widened by the
//!   recorded relative and absolute round-off bounds;
//! - **lower**: from *lower PMFs* composed alongside ([`ctd::discretise_lower`]: a chain of
//!   supporting lines of the profile with kinks at grid points, so each one's profile is below the
//!   truth at every ε while P's and Q's total masses are kept, and such profiles compose), with
//!   every mass floored by a bound on its own round-off.
//!   Mechanisms whose losses lie on a lattice ([`lattice`]) have theirs from the exact composition
//!   on the lattice, rounded down to the grid once per self-composed group. Where a component has
//!   no lower PMF (subsampled atom lists, ρ-zCDP, profiles of inner PLDs) its upper PMF stands in,
//!   shifted down by one grid step per discretisation (connect-the-dots puts each loss at most one
//!   step above the truth in the stochastic order); truncated and moved mass are left out.
//!
//! The trade-off curve comes from the profile (DRS22 Prop. 5/6: f(α) = sup_ε max{1 − δ(ε) − e^ε α,
//! e^{−ε}(1 − δ(ε) − α)}), with δ the larger of the two orderings' profiles, which symmetrises
//! add/remove exactly as min{f, f⁻¹}** (DRS22 Def. F.1); μ is fitted at the curve's vertices
//! (Gomez et al., "(ε,δ) considered harmful" eq. (11), generalised to a δ slack).

pub(crate) mod ctd;
mod lattice;
mod pmf;
mod profile;
pub mod query;
mod source;

pub use pmf::{Pmf, MAX_GRID_POINTS, TAIL_TRUNCATION};
pub use source::CTD_TAIL;

use super::event::Event;
use super::json::JsonPath;
use super::{AccountantError, NeighboringRelation};
use crate::accountant::rounding::{self, U};
use serde::{Deserialize, Serialize};
use source::Source;

/// The grid step h used when the caller gives none (dp_accounting's default).
pub const DEFAULT_GRID_STEP: f64 = 1e-4;
/// Smallest grid step accepted.
pub const MIN_GRID_STEP: f64 = 1e-6;
/// Largest grid step accepted.
pub const MAX_GRID_STEP: f64 = 0.1;

/// Why a PLD could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PldError {
    /// The computation would exceed the grid or work limits.
    #[error("{0}")]
    TooLarge(String),
    /// The event has no meaning under the ledger's neighbouring relation.
    #[error("{0}")]
    Unsupported(String),
    /// The computation was stopped (see [`crate::accountant::work`]).
    #[error("{0}")]
    Stopped(crate::accountant::work::Stopped),
}

impl PldError {
    /// The accountant's error for this one, located at `path` (the one conversion: a stopped
    /// computation stays a stop, never a size refusal).
    pub fn at(self, path: &JsonPath) -> AccountantError {
        match self {
            PldError::TooLarge(reason) => AccountantError::TooLarge {
                path: path.to_string(),
                reason,
            },
            PldError::Unsupported(reason) => AccountantError::Unsupported {
                path: path.to_string(),
                reason,
            },
            PldError::Stopped(s) => AccountantError::Stopped(s),
        }
    }
}

impl From<crate::accountant::work::Stopped> for PldError {
    fn from(s: crate::accountant::work::Stopped) -> Self {
        PldError::Stopped(s)
    }
}

/// The privacy-loss distributions of a mechanism: one PMF per ordering (`add = None` when the pair is
/// symmetric and both orderings have the same PMF).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pld {
    pub(crate) remove: Pmf,
    pub(crate) add: Option<Pmf>,
    /// Lower PMFs, composed alongside: each one's profile is at or below the true profile at every
    /// ε (after its own `steps`·h shift), see [`ctd::discretise_lower`]. `None` when no component
    /// had one: the lower bounds are then read off the upper PMFs shifted by steps·h. Never nested
    /// (the lower's own `lower` is `None`).
    #[serde(default)]
    pub(crate) lower: Option<Box<Pld>>,
    /// The lattice of a single mechanism whose losses lie on one ([`lattice`]): its n-fold
    /// self-composition takes its lower PMFs from the exact composition on the lattice, rounded to
    /// the grid once. `None` after any composition (and in stored states).
    #[serde(skip)]
    pub(crate) lattice: Option<std::sync::Arc<lattice::Lattice>>,
}

impl Pld {
    /// Bytes held (the masses of its PMFs, plus a fixed overhead), for caches bounded by bytes.
    pub fn heap_bytes(&self) -> usize {
        let masses = self.remove.len() + self.add.as_ref().map_or(0, Pmf::len);
        256 + 8 * masses
            + self.lower.as_ref().map_or(0, |l| l.heap_bytes())
            + self.lattice.as_ref().map_or(0, |l| l.heap_bytes())
    }

    /// The PMFs the lower bounds are read from: the lower PMFs if any, else these (shifted).
    pub(crate) fn lower_view(&self) -> &Pld {
        self.lower.as_deref().unwrap_or(self)
    }

    /// Whether dedicated lower PMFs are carried.
    pub fn has_lower(&self) -> bool {
        self.lower.is_some()
    }

    /// No privacy loss.
    pub fn identity(h: f64) -> Self {
        Self::from_pmfs(Pmf::identity(h), None)
    }

    /// A PLD from its PMFs (`add = None`: symmetric).
    pub fn from_pmfs(remove: Pmf, add: Option<Pmf>) -> Self {
        Pld {
            remove,
            add,
            lower: None,
            lattice: None,
        }
    }

    /// The PMF of the add ordering.
    pub fn add_pmf(&self) -> &Pmf {
        self.add.as_ref().unwrap_or(&self.remove)
    }

    /// The PMF of the remove ordering.
    pub fn remove_pmf(&self) -> &Pmf {
        &self.remove
    }

    /// Whether both orderings share one PMF.
    pub fn is_symmetric(&self) -> bool {
        self.add.is_none()
    }

    /// Composition (both orderings convolved; symmetric stays symmetric). The lower PMFs are
    /// composed too when either side carries them (a side without them lends its upper PMFs, whose
    /// `steps` then shift the result's lower bound).
    pub fn compose(&self, other: &Pld) -> Result<Pld, PldError> {
        let lower = (self.lower.is_some() || other.lower.is_some())
            .then(|| (self.lower_view(), other.lower_view()));
        // One FFT length for every pair composed where their lengths allow (as in
        // [`Pld::self_compose`]).
        let mut upper_lens = self.compose_lens(other);
        let mut lower_lens = lower.map(|(a, b)| a.compose_lens(b));
        share_lens(
            upper_lens.iter_mut().flatten().collect(),
            lower_lens.iter_mut().flatten().flatten().collect(),
        );
        let low = lower
            .zip(lower_lens)
            .map(|((a, b), lens)| move || a.compose_pmfs(b, lens));
        with_lower(
            self.is_symmetric() && other.is_symmetric(),
            || self.compose_pmfs(other, upper_lens),
            low,
        )
    }

    /// The FFT lengths of composing each ordering with `other`'s (`None` where a convolution is
    /// direct, and for the add ordering when both pairs are symmetric).
    fn compose_lens(&self, other: &Pld) -> [Option<usize>; 2] {
        if self.is_symmetric() && other.is_symmetric() {
            [self.remove.compose_len(&other.remove), None]
        } else {
            [
                self.remove.compose_len(&other.remove),
                self.add_pmf().compose_len(other.add_pmf()),
            ]
        }
    }

    /// The n-fold composition with itself (lower PMFs too, when carried). A mechanism on a lattice
    /// takes its lower PMFs from the exact n-fold composition on the lattice, rounded to the grid
    /// once ([`lattice::Lattice::lower_pld`]), instead of composing its one-copy lower PMFs, each of
    /// which is a grid step low: the bracket then stays one grid step wide whatever n.
    pub fn self_compose(&self, n: u64) -> Result<Pld, PldError> {
        let exact_lower = match (&self.lower, &self.lattice) {
            (Some(_), Some(l)) => l.lower_pld(n, self.remove.h)?,
            _ => None,
        };
        let composed_lower = self.lower.as_ref().filter(|_| exact_lower.is_none());
        let mut upper = self.self_compose_windows(n);
        let mut lower = composed_lower.map(|l| l.self_compose_windows(n));
        // One FFT length for every PMF (both orderings, upper and lower) where their windows allow
        // it, else one per pair of orderings: building a length's plans costs about as much as a
        // transform of that length, and a longer circular window only aliases less.
        share_lens(
            upper.iter_mut().flatten().map(|w| &mut w.fft_len).collect(),
            lower
                .iter_mut()
                .flatten()
                .flatten()
                .map(|w| &mut w.fft_len)
                .collect(),
        );
        let low = composed_lower
            .zip(lower)
            .map(|(low, w)| move || low.self_compose_pmfs(n, w));
        let mut out = with_lower(self.add.is_none(), || self.self_compose_pmfs(n, upper), low)?;
        if let Some(low) = exact_lower {
            out.lower = Some(Box::new(low));
        }
        Ok(out)
    }

    /// The self-composition windows of (remove, add); the add one is `None` for a symmetric pair.
    fn self_compose_windows(&self, n: u64) -> [Option<pmf::Window>; 2] {
        match &self.add {
            None => [self.remove.self_compose_window(n), None],
            Some(a) => {
                let (r, a) = both(
                    || self.remove.self_compose_window(n),
                    || a.self_compose_window(n),
                );
                [r, a]
            }
        }
    }

    /// [`Pld::compose`] of these PMFs only (the lower parts are ignored), with the FFT lengths of
    /// [`Pld::compose_lens`] (possibly raised).
    fn compose_pmfs(&self, other: &Pld, [lr, la]: [Option<usize>; 2]) -> Result<Pld, PldError> {
        for l in [lr, la].into_iter().flatten() {
            pmf::prepare_plans(l);
        }
        if self.is_symmetric() && other.is_symmetric() {
            return Ok(Pld::from_pmfs(
                self.remove.compose_at(&other.remove, lr)?,
                None,
            ));
        }
        let (remove, add) = both(
            || self.remove.compose_at(&other.remove, lr),
            || self.add_pmf().compose_at(other.add_pmf(), la),
        );
        Ok(Pld::from_pmfs(remove?, Some(add?)))
    }

    /// [`Pld::self_compose`] of these PMFs only, with the windows of
    /// [`Pld::self_compose_windows`] (their lengths possibly raised).
    fn self_compose_pmfs(
        &self,
        n: u64,
        [wr, wa]: [Option<pmf::Window>; 2],
    ) -> Result<Pld, PldError> {
        for l in [wr, wa].into_iter().flatten().map(|w| w.fft_len) {
            pmf::prepare_plans(l);
        }
        match &self.add {
            None => Ok(Pld::from_pmfs(self.remove.self_compose_at(n, wr)?, None)),
            Some(a) => {
                let (remove, add) = both(
                    || self.remove.self_compose_at(n, wr),
                    || a.self_compose_at(n, wa),
                );
                Ok(Pld::from_pmfs(remove?, Some(add?)))
            }
        }
    }

    /// Number of grid points held (both orderings, the lower PMFs included).
    pub fn grid_points(&self) -> usize {
        self.remove.len()
            + self.add.as_ref().map_or(0, Pmf::len)
            + self.lower.as_ref().map_or(0, |l| l.grid_points())
    }

    /// Builds the PLD of one event under a neighbouring relation on grid step h. `path` locates the
    /// event for error messages.
    pub fn from_event(
        e: &Event,
        rel: NeighboringRelation,
        h: f64,
        path: &JsonPath,
    ) -> Result<Pld, AccountantError> {
        let wrap = |err: PldError, p: &JsonPath| err.at(p);
        match e {
            Event::SelfComposed { count, event } => {
                let inner = Self::from_event(event, rel, h, &path.field("event"))?;
                inner.self_compose(count.get()).map_err(|x| wrap(x, path))
            }
            Event::Composed { events } => {
                let p = path.field("events");
                let mut acc = Pld::identity(h);
                for (i, ev) in events.iter().enumerate() {
                    let next = Self::from_event(ev, rel, h, &p.index(i))?;
                    acc = acc.compose(&next).map_err(|x| wrap(x, &p.index(i)))?;
                }
                Ok(acc)
            }
            _ => {
                let src = source_of(e, rel, h, path)?;
                match src {
                    None => Ok(Pld::identity(h)),
                    Some(s) => s.discretise(h).map_err(|x| wrap(x, path)),
                }
            }
        }
    }
}

/// Raises FFT lengths to one shared length, so that one pair of plans serves them all: every
/// length of `upper` and `lower` together where [`pmf::shared_len`]'s rule allows (the largest is
/// at most 25 % above the smallest), else each group's own.
fn share_lens<'a>(mut upper: Vec<&'a mut usize>, mut lower: Vec<&'a mut usize>) {
    let all = upper.iter_mut().chain(lower.iter_mut()).map(|l| &mut **l);
    if !share_len(all.collect()) {
        share_len(upper);
        share_len(lower);
    }
}

/// Raises every length given to their largest under [`pmf::shared_len`]'s rule; whether it did
/// (also when fewer than two are given).
fn share_len(mut lens: Vec<&mut usize>) -> bool {
    let lo = lens.iter().map(|l| **l).min();
    let hi = lens.iter().map(|l| **l).max();
    if lens.len() < 2 {
        return true;
    }
    let Some(shared) = pmf::shared_len(lo, hi) else {
        return false;
    };
    for l in &mut lens {
        **l = shared;
    }
    true
}

/// The PLD `upper` makes, with the PLD `lower` makes (when given) as its lower PMFs. With `split`
/// (a symmetric pair: one ordering each) the two run on a core each; otherwise one after the
/// other, as each already splits its two orderings between the cores.
fn with_lower<U, L>(split: bool, upper: U, lower: Option<L>) -> Result<Pld, PldError>
where
    U: FnOnce() -> Result<Pld, PldError> + Send,
    L: FnOnce() -> Result<Pld, PldError> + Send,
{
    match lower {
        Some(lower) if split => {
            let (up, low) = both(upper, lower);
            let mut out = up?;
            out.lower = Some(Box::new(low?));
            Ok(out)
        }
        lower => {
            let mut out = upper()?;
            if let Some(lower) = lower {
                out.lower = Some(Box::new(lower()?));
            }
            Ok(out)
        }
    }
}

/// Runs the two orderings' work on two threads (they are independent; the machine has ≥ 2 cores),
/// the second under the same limits as the first ([`crate::accountant::work::carried`]).
pub(crate) fn both<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    std::thread::scope(|s| {
        let hb = s.spawn(crate::accountant::work::carried(b));
        let ra = a();
        (
            ra,
            hb.join()
                .expect("the second ordering's computation panicked"),
        )
    })
}

/// The exact profile of a single (possibly subsampled) mechanism; `None` for no privacy loss.
///
/// Under replace-one the source is always symmetric (one pair for both orderings): the analyst may
/// choose, from earlier outputs, which of two neighbours plays which role at each step, so
/// composing a "remove" and an "add" ordering separately and taking the worse at the end would be
/// optimistic. The symmetrisation min{f, f⁻¹}** (Dong, Roth & Su, "Gaussian differential
/// privacy", Prop. F.2) is a single pair whose profile is max(δ_{A‖B}, δ_{B‖A}) at every ε ≥ 0.
/// Under add/remove the roles are fixed by the relation, so both orderings are kept.
fn source_of(
    e: &Event,
    rel: NeighboringRelation,
    h: f64,
    path: &JsonPath,
) -> Result<Option<Source>, AccountantError> {
    let s = pair_of(e, rel, h, path)?.filter(|s| !s.is_identity());
    Ok(match rel {
        NeighboringRelation::ReplaceOne => s.map(Source::symmetrised),
        NeighboringRelation::AddOrRemoveOne => s,
    })
}

/// The pair behind [`source_of`], before symmetrisation.
fn pair_of(
    e: &Event,
    rel: NeighboringRelation,
    h: f64,
    path: &JsonPath,
) -> Result<Option<Source>, AccountantError> {
    let unsupported = |reason: &str| AccountantError::Unsupported {
        path: path.to_string(),
        reason: reason.to_owned(),
    };
    let too_large_at = |err: PldError, field: &str| err.at(&path.field(field));
    Ok(Some(match e {
        Event::Gaussian { noise_multiplier } => {
            Source::gaussian(rel.sensitivity() / noise_multiplier.get())
        }
        Event::Gdp { mu } => {
            if mu.get() == 0.0 {
                return Ok(None);
            }
            Source::gaussian(mu.get())
        }
        Event::Laplace { noise_multiplier } => {
            Source::laplace(noise_multiplier.get() / rel.sensitivity())
        }
        Event::DiscreteLaplace {
            noise_parameter,
            sensitivity,
        } => Source::discrete_laplace(noise_parameter.get(), sensitivity.get())
            .map_err(|x| too_large_at(x, "sensitivity"))?,
        Event::DiscreteGaussian { sigma, sensitivity } => {
            Source::discrete_gaussian(sigma.get(), sensitivity.get())
                .map_err(|x| too_large_at(x, "sigma"))?
        }
        Event::RandomizedResponse {
            noise_parameter,
            num_buckets,
        } => {
            if rel == NeighboringRelation::AddOrRemoveOne {
                return Err(unsupported(
                    "randomized_response is defined for replace_one neighbours (a record's response \
                     is replaced, not removed); use a dataset with neighboring_relation replace_one",
                ));
            }
            if noise_parameter.get() >= 1.0 {
                return Ok(None);
            }
            Source::randomized_response(noise_parameter.get(), num_buckets.get())
        }
        Event::EpsilonDelta {
            epsilon,
            delta,
            total_variation,
        } => Source::epsilon_delta(epsilon.get(), delta.get(), total_variation.map(|t| t.get())),
        Event::Zcdp { rho, xi } => {
            let xi = xi.map_or(0.0, |x| x.get());
            if rho.get() == 0.0 && xi == 0.0 {
                return Ok(None);
            }
            Source::zcdp(rho.get(), xi)
        }
        Event::Rdp { orders, rdp } => {
            // Some order with divergence 0 makes the outputs identical: no privacy loss.
            if rdp.contains(&0.0) {
                return Ok(None);
            }
            Source::rdp(orders, rdp)
        }
        Event::PoissonSampled {
            sampling_rate,
            event,
        } => {
            let q = sampling_rate.get();
            if q == 0.0 {
                return Ok(None);
            }
            if q < 1.0 && rel == NeighboringRelation::ReplaceOne {
                if let Some(noise) = additive_noise(event) {
                    return Ok(Some(Source::replace_mixture(noise, q)));
                }
            }
            if q < 1.0 && rel == NeighboringRelation::AddOrRemoveOne {
                if let Event::SelfComposed { .. } | Event::Composed { .. } = **event {
                    let inner = Pld::from_event(event, rel, h, &path.field("event"))?;
                    return Ok(Some(of_composite(Source::poisson_of_pld(&inner, q), event)));
                }
            }
            let Some(inner) = inner_source(event, rel, h, &path.field("event"))? else {
                return Ok(None);
            };
            if q == 1.0 {
                inner
            } else {
                match rel {
                    NeighboringRelation::AddOrRemoveOne => inner.mixture_with_reference(q),
                    // A black box's replace-one guarantee says nothing about M(T ∪ {x}) against
                    // M(T): no amplification of ε, only of δ (see `mixture_with_disjoint`).
                    NeighboringRelation::ReplaceOne => inner.mixture_with_disjoint(q),
                }
            }
        }
        Event::SampledWithoutReplacement {
            sample_size,
            population_size,
            event,
        } => {
            if rel == NeighboringRelation::AddOrRemoveOne {
                return Err(unsupported(
                    "sampled_without_replacement is analysed for replace_one neighbours (the \
                     population size is fixed); use poisson_sampled under add_or_remove_one",
                ));
            }
            let Some(inner) = inner_source(event, rel, h, &path.field("event"))? else {
                return Ok(None);
            };
            if sample_size == population_size {
                inner
            } else {
                // (qP + (1−q)Q, Q) with (P, Q) the inner replace-one pair (for a Gaussian sum,
                // N(2/σ) vs N(0): the replaced record's slot is filled by another record),
                // symmetrised by `source_of` (its reverse ordering is never worse for ε ≥ 0).
                let q = sample_size.get() as f64 / population_size.get() as f64;
                inner.mixture_with_reference(rounding::prob_up(q, U))
            }
        }
        Event::SelfComposed { .. } | Event::Composed { .. } => {
            unreachable!("composite events are handled by Pld::from_event")
        }
    }))
}

/// Gaussian or Laplace noise added to a sum: Poisson-subsampled under replace-one, its exact mixture
/// pair is used instead of the black-box bound (the other sampled records are shared by both
/// datasets, so only the replaced record's contribution differs).
fn additive_noise(e: &Event) -> Option<source::Noise> {
    match e {
        Event::Gaussian { noise_multiplier } => {
            Some(source::Noise::Gaussian(noise_multiplier.get()))
        }
        Event::Laplace { noise_multiplier } => Some(source::Noise::Laplace(noise_multiplier.get())),
        _ => None,
    }
}

/// A source read off the composed PLD of composite event `e`: where a Rényi box is inside, its
/// upper PMFs bound that box's conversion, not the worst mechanism meeting its statement, so
/// their lower bounds would not be lower bounds of the truth; the constant mechanism stands in.
fn of_composite(s: Source, e: &Event) -> Source {
    if e.has_renyi_box() {
        s.with_witness(Source::constant())
    } else {
        s
    }
}

/// The source of a subsampled event's inner event: closed form for a single mechanism, or the
/// profile of its (numerically composed) PLD for a composite.
fn inner_source(
    e: &Event,
    rel: NeighboringRelation,
    h: f64,
    path: &JsonPath,
) -> Result<Option<Source>, AccountantError> {
    match e {
        Event::SelfComposed { .. } | Event::Composed { .. } => {
            let p = Pld::from_event(e, rel, h, path)?;
            let s = of_composite(Source::from_pld(&p), e);
            Ok(Some(match rel {
                NeighboringRelation::ReplaceOne => s.symmetrised(),
                NeighboringRelation::AddOrRemoveOne => s,
            }))
        }
        _ => source_of(e, rel, h, path),
    }
}

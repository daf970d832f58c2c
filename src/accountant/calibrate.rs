//! Calibration: the value of one free parameter of an event that just meets a μ-GDP target, on top
//! of an existing composition (a dataset's ledger) or an empty one.
//!
//! - [`FreeParameter::NoiseMultiplier`]: the `noise_multiplier` of the first `gaussian` or `laplace`
//!   event in a depth-first (pre-order) walk of the event; the result is the *smallest* noise
//!   multiplier σ such that `base ⊗ event(σ)` has μ upper ≤ target.
//! - [`FreeParameter::Count`]: the `count` of the first `self_composed` event in the same walk; the
//!   result is the *largest* count c ≥ 1 with μ upper ≤ target, or 0 when not even one fits.
//!
//! # Soundness
//! Every candidate is judged by the engine's own sound μ upper bound ([`Composition::push`] then
//! [`Composition::guarantee`]), and the value returned is always one that was evaluated and met the
//! target — never an interpolation. The search assumes μ is monotone in the parameter (more noise or
//! fewer steps, less privacy loss), which holds for the exact quantities; where the numerical
//! engine's discretisation makes it slightly non-monotone the answer may be slightly conservative
//! (a σ a little too large, a count a little too small), never one that misses the target.
//!
//! A μ that is unavailable (`MuReport::upper == None`, e.g. +∞ loss mass above the δ slack) and a
//! candidate the engine refuses as too large ([`AccountantError::TooLarge`]) count as exceeding the
//! target. Errors that do not depend on the parameter (an event with no meaning under the relation,
//! invalid input) are returned at once.
//!
//! # Work
//! Noise multiplier: bracketing by steps that double in log σ, then bisection on log σ down to a
//! relative bracket width of [`RELATIVE_PRECISION`]; at most about 35 evaluations over the whole
//! range [`MIN_NOISE_MULTIPLIER`, `MAX_NOISE_MULTIPLIER`]. Count: bracketing over exponents
//! (2¹, 2², 2⁴, …, 2³², 2⁵³), bisection of the exponent, then integer bisection; at most
//! [`MAX_EVALUATIONS`] evaluations for any count up to 2⁵³ (about 2·log₂ c + 8 in general).

use super::composition::Composition;
use super::event::{Count, Event, Positive};
use super::json::{InputError, JsonPath, MAX_EXACT_INTEGER};
use super::params::DeltaSlack;
use super::AccountantError;
use serde::Serialize;

/// Smallest noise multiplier the search considers (returned when even it meets the target, i.e.
/// when the event's privacy loss does not depend on its noise, such as a sampling rate of 0).
pub const MIN_NOISE_MULTIPLIER: f64 = 1e-12;

/// Largest noise multiplier the search considers; a target still missed there is unreachable.
pub const MAX_NOISE_MULTIPLIER: f64 = 1e12;

/// Relative width of the final bracket of a noise-multiplier search: the returned σ is at most this
/// factor above the smallest one that meets the target (under monotonicity).
pub const RELATIVE_PRECISION: f64 = 1e-6;

/// Upper bound on the number of μ evaluations of one calibration.
pub const MAX_EVALUATIONS: u32 = 66;

/// Which parameter of the event is solved for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FreeParameter {
    /// The `noise_multiplier` of the first `gaussian` or `laplace` event (depth-first).
    NoiseMultiplier,
    /// The `count` of the first `self_composed` event (depth-first).
    Count,
}

impl FreeParameter {
    /// Parses the wire name (`"noise_multiplier"`, `"count"`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "noise_multiplier" => Some(Self::NoiseMultiplier),
            "count" => Some(Self::Count),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoiseMultiplier => "noise_multiplier",
            Self::Count => "count",
        }
    }

    fn holds(self, e: &Event) -> bool {
        match self {
            Self::NoiseMultiplier => matches!(e, Event::Gaussian { .. } | Event::Laplace { .. }),
            Self::Count => matches!(e, Event::SelfComposed { .. }),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::NoiseMultiplier => "gaussian or laplace event (whose noise_multiplier is free)",
            Self::Count => "self_composed event (whose count is free)",
        }
    }
}

/// The result of a calibration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    /// The calibrated value: a noise multiplier, or a count (a whole number; 0 when not even one
    /// step fits).
    pub value: f64,
    /// The sound μ upper bound of `base ⊗ event(value)` (for a count of 0: the base's own μ, +∞ if
    /// the base has none).
    pub mu: f64,
    /// How many μ evaluations the search made.
    pub evaluations: u32,
}

/// Finds the value of `free` in `event` (located at `path`, for error messages) that just meets
/// `target_mu` once `event` is composed onto `base`, at δ slack `delta_slack`. See the module docs.
///
/// # Errors
/// - [`AccountantError::Input`] for a target that is not a finite number ≥ 0 or an invalid δ slack;
/// - [`AccountantError::Unsupported`] when the event has no such parameter, or (noise multiplier)
///   when the target is unreachable: the base alone already exceeds it, or even the largest noise
///   multiplier does not meet it;
/// - any engine error that does not depend on the parameter, or a [`AccountantError::TooLarge`]
///   that prevents every candidate (e.g. one step of a count calibration).
pub fn calibrate(
    base: &Composition,
    event: &Event,
    free: FreeParameter,
    target_mu: f64,
    delta_slack: DeltaSlack,
    path: &JsonPath,
) -> Result<Calibration, AccountantError> {
    if !(target_mu.is_finite() && target_mu >= 0.0) {
        return Err(InputError::new(
            path,
            format!("the target mu must be a finite number >= 0, got {target_mu}"),
        )
        .into());
    }
    let mut judge = MuTarget {
        base,
        target: target_mu,
        delta_slack: delta_slack.get(),
    };
    calibrate_by(event, free, &mut judge, path)
}

/// What a calibration searches against: whether a candidate event meets the target.
pub trait Judge {
    /// The candidate's μ when it meets the target, `None` when it does not (or its μ is
    /// unavailable). [`AccountantError::TooLarge`] counts as not meeting it; other errors end the
    /// search.
    fn judge(&mut self, event: &Event, path: &JsonPath) -> Result<Option<f64>, AccountantError>;
    /// `Err(why)` when no candidate can meet the target (e.g. the existing composition alone
    /// exceeds it).
    fn reachable(&mut self) -> Result<(), AccountantError>;
    /// The μ reported when not even one step fits (count 0).
    fn spent(&mut self) -> Result<f64, AccountantError>;
}

/// The stateless target: μ upper of `base ⊗ event` at the δ slack ≤ the target.
struct MuTarget<'a> {
    base: &'a Composition,
    target: f64,
    delta_slack: f64,
}

impl Judge for MuTarget<'_> {
    fn judge(&mut self, event: &Event, path: &JsonPath) -> Result<Option<f64>, AccountantError> {
        // Only μ's upper end is judged: no lower PMFs needed.
        let mut c = self.base.clone().upper_only();
        c.push(event, path)?;
        Ok(c.guarantee()?
            .mu_upper(self.delta_slack)
            .filter(|mu| *mu <= self.target))
    }

    fn reachable(&mut self) -> Result<(), AccountantError> {
        match self.base.guarantee()?.mu_upper(self.delta_slack) {
            Some(mu) if mu <= self.target => Ok(()),
            base => Err(AccountantError::Unsupported {
                path: String::new(),
                reason: format!(
                    "the target mu {} is unreachable: the existing composition alone {}",
                    self.target,
                    match base {
                        Some(mu) => format!("already has mu {mu} (upper bound)"),
                        None => format!("has no finite mu within delta slack {}", self.delta_slack),
                    }
                ),
            }),
        }
    }

    fn spent(&mut self) -> Result<f64, AccountantError> {
        Ok(self
            .base
            .guarantee()?
            .mu_upper(self.delta_slack)
            .unwrap_or(f64::INFINITY))
    }
}

/// [`calibrate`] against any [`Judge`] (the ledger's is its gate, so a calibrated unit is one the
/// gate admits).
pub fn calibrate_by(
    event: &Event,
    free: FreeParameter,
    judge: &mut dyn Judge,
    path: &JsonPath,
) -> Result<Calibration, AccountantError> {
    let (loc, leaf_path) =
        locate(event, free, path).ok_or_else(|| AccountantError::Unsupported {
            path: path.to_string(),
            reason: format!(
                "the event contains no {}: nothing to calibrate (the first one in a \
                 depth-first walk would be used)",
                free.describe()
            ),
        })?;
    let mut s = Search {
        judge,
        event: event.clone(),
        loc,
        free,
        path,
        evaluations: 0,
    };
    match free {
        FreeParameter::NoiseMultiplier => {
            let current = match node(event, &s.loc) {
                Event::Gaussian { noise_multiplier } | Event::Laplace { noise_multiplier } => {
                    noise_multiplier.get()
                }
                _ => unreachable!("located a noise multiplier"),
            };
            s.noise_multiplier(current, &leaf_path)
        }
        FreeParameter::Count => s.count(),
    }
}

/// `event` with its free parameter (as located by [`calibrate`]) set to `value`: the event to charge
/// once a calibration is accepted.
///
/// # Errors
/// [`AccountantError::Unsupported`] when the event has no such parameter;
/// [`AccountantError::Input`] when `value` is not a valid noise multiplier (finite, > 0) or count
/// (whole, in [1, 2⁵³]).
pub fn with_free_parameter(
    event: &Event,
    free: FreeParameter,
    value: f64,
    path: &JsonPath,
) -> Result<Event, AccountantError> {
    let (loc, leaf_path) =
        locate(event, free, path).ok_or_else(|| AccountantError::Unsupported {
            path: path.to_string(),
            reason: format!("the event contains no {}: nothing to set", free.describe()),
        })?;
    let field = leaf_path.field(free.as_str());
    let mut out = event.clone();
    match (free, node_mut(&mut out, &loc)) {
        (
            FreeParameter::NoiseMultiplier,
            Event::Gaussian { noise_multiplier } | Event::Laplace { noise_multiplier },
        ) => *noise_multiplier = Positive::new(value).map_err(|r| InputError::new(&field, r))?,
        (FreeParameter::Count, Event::SelfComposed { count, .. }) => {
            if !(value.fract() == 0.0 && value >= 1.0 && value <= MAX_EXACT_INTEGER as f64) {
                return Err(InputError::new(
                    &field,
                    format!("must be a whole number in [1, 2^53], got {value}"),
                )
                .into());
            }
            *count = Count::new(value as u64).map_err(|r| InputError::new(&field, r))?;
        }
        _ => unreachable!("located the free parameter"),
    }
    Ok(out)
}

/// The child-index route (0 for a wrapper's `event`, i for `events[i]`), root first, and the JSON
/// path of the first node holding `free`, depth-first, pre-order.
fn locate(e: &Event, free: FreeParameter, path: &JsonPath) -> Option<(Vec<usize>, JsonPath)> {
    locate_leaf_first(e, free, path).map(|(mut route, p)| {
        route.reverse();
        (route, p)
    })
}

fn locate_leaf_first(
    e: &Event,
    free: FreeParameter,
    path: &JsonPath,
) -> Option<(Vec<usize>, JsonPath)> {
    if free.holds(e) {
        return Some((Vec::new(), path.clone()));
    }
    let below = |i: usize, ev: &Event, p: &JsonPath| {
        locate_leaf_first(ev, free, p).map(|(mut route, p)| {
            route.push(i);
            (route, p)
        })
    };
    match e {
        Event::PoissonSampled { event, .. }
        | Event::SampledWithoutReplacement { event, .. }
        | Event::SelfComposed { event, .. } => below(0, event, &path.field("event")),
        Event::Composed { events } => {
            let p = path.field("events");
            events
                .iter()
                .enumerate()
                .find_map(|(i, ev)| below(i, ev, &p.index(i)))
        }
        _ => None,
    }
}

fn child(e: &Event, i: usize) -> &Event {
    match e {
        Event::PoissonSampled { event, .. }
        | Event::SampledWithoutReplacement { event, .. }
        | Event::SelfComposed { event, .. } => event,
        Event::Composed { events } => &events[i],
        _ => unreachable!("a located route only passes through wrappers"),
    }
}

fn child_mut(e: &mut Event, i: usize) -> &mut Event {
    match e {
        Event::PoissonSampled { event, .. }
        | Event::SampledWithoutReplacement { event, .. }
        | Event::SelfComposed { event, .. } => event,
        Event::Composed { events } => &mut events[i],
        _ => unreachable!("a located route only passes through wrappers"),
    }
}

fn node<'a>(e: &'a Event, loc: &[usize]) -> &'a Event {
    loc.iter().fold(e, |e, &i| child(e, i))
}

fn node_mut<'a>(e: &'a mut Event, loc: &[usize]) -> &'a mut Event {
    loc.iter().fold(e, |e, &i| child_mut(e, i))
}

/// What one evaluation found.
enum Outcome {
    /// μ upper ≤ target, with that μ.
    Fits(f64),
    /// μ upper > target or unavailable (`None`), or the engine refused the candidate as too large.
    Exceeds(Option<AccountantError>),
}

struct Search<'a> {
    judge: &'a mut dyn Judge,
    /// Working copy of the event; the free parameter is overwritten in place.
    event: Event,
    loc: Vec<usize>,
    free: FreeParameter,
    path: &'a JsonPath,
    evaluations: u32,
}

impl Search<'_> {
    fn eval(&mut self, value: f64) -> Result<Outcome, AccountantError> {
        super::work::check()?;
        match (self.free, node_mut(&mut self.event, &self.loc)) {
            (
                FreeParameter::NoiseMultiplier,
                Event::Gaussian { noise_multiplier } | Event::Laplace { noise_multiplier },
            ) => *noise_multiplier = Positive::new(value).expect("candidates are in range"),
            (FreeParameter::Count, Event::SelfComposed { count, .. }) => {
                *count = Count::new(value as u64).expect("candidates are in range")
            }
            _ => unreachable!("located the free parameter"),
        }
        self.evaluations += 1;
        match self.judge.judge(&self.event, self.path) {
            Ok(Some(mu)) => Ok(Outcome::Fits(mu)),
            Ok(None) => Ok(Outcome::Exceeds(None)),
            Err(e @ AccountantError::TooLarge { .. }) => Ok(Outcome::Exceeds(Some(e))),
            Err(e) => Err(e),
        }
    }

    fn done(&self, value: f64, mu: f64) -> Calibration {
        Calibration {
            value,
            mu,
            evaluations: self.evaluations,
        }
    }

    fn noise_multiplier(
        &mut self,
        current: f64,
        leaf: &JsonPath,
    ) -> Result<Calibration, AccountantError> {
        let unreachable = |reason: String| AccountantError::Unsupported {
            path: leaf.field("noise_multiplier").to_string(),
            reason,
        };
        self.evaluations += 1;
        if let Err(e) = self.judge.reachable() {
            return Err(match e {
                AccountantError::Unsupported { reason, .. } => unreachable(reason),
                other => other,
            });
        }
        let start = current.clamp(MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER);
        // Bracket: `lo` misses the target, `hi` meets it (with its μ).
        let mut step = 1.0_f64; // in log2 units, doubled after each miss
        let (mut lo, mut hi) = match self.eval(start)? {
            Outcome::Fits(mu) => {
                let mut hi = (start, mu);
                loop {
                    if hi.0 <= MIN_NOISE_MULTIPLIER {
                        return Ok(self.done(hi.0, hi.1));
                    }
                    let cand = (hi.0 / step.exp2()).max(MIN_NOISE_MULTIPLIER);
                    step *= 2.0;
                    match self.eval(cand)? {
                        Outcome::Fits(mu) => hi = (cand, mu),
                        Outcome::Exceeds(_) => break (cand, hi),
                    }
                }
            }
            Outcome::Exceeds(mut why) => {
                let mut lo = start;
                loop {
                    if lo >= MAX_NOISE_MULTIPLIER {
                        return Err(why.unwrap_or_else(|| {
                            unreachable(format!(
                                "the target is unreachable: even noise_multiplier \
                                 {MAX_NOISE_MULTIPLIER:e} exceeds it on top of the existing \
                                 composition"
                            ))
                        }));
                    }
                    let cand = (lo * step.exp2()).min(MAX_NOISE_MULTIPLIER);
                    step *= 2.0;
                    match self.eval(cand)? {
                        Outcome::Fits(mu) => break (lo, (cand, mu)),
                        Outcome::Exceeds(w) => {
                            lo = cand;
                            why = w;
                        }
                    }
                }
            }
        };
        // Bisection on log σ; `hi` always meets the target.
        while hi.0 / lo > 1.0 + RELATIVE_PRECISION && self.evaluations < MAX_EVALUATIONS {
            let mid = (lo.ln() + 0.5 * (hi.0.ln() - lo.ln())).exp();
            if !(mid > lo && mid < hi.0) {
                break;
            }
            match self.eval(mid)? {
                Outcome::Fits(mu) => hi = (mid, mu),
                Outcome::Exceeds(_) => lo = mid,
            }
        }
        Ok(self.done(hi.0, hi.1))
    }

    fn count(&mut self) -> Result<Calibration, AccountantError> {
        let mut lo = match self.eval(1.0)? {
            Outcome::Fits(mu) => (1u64, mu),
            // One step cannot even be accounted: say so rather than "nothing fits".
            Outcome::Exceeds(Some(e)) => return Err(e),
            Outcome::Exceeds(None) => {
                self.evaluations += 1;
                let mu = self.judge.spent()?;
                return Ok(self.done(0.0, mu));
            }
        };
        // Bracket over exponents: 2^lo_exp meets the target, 2^hi_exp does not.
        let mut lo_exp = 0u32;
        let mut hi_exp = None;
        for e in [1u32, 2, 4, 8, 16, 32, 53] {
            match self.eval((1u64 << e) as f64)? {
                Outcome::Fits(mu) => {
                    lo = (1u64 << e, mu);
                    lo_exp = e;
                }
                Outcome::Exceeds(_) => {
                    hi_exp = Some(e);
                    break;
                }
            }
        }
        let Some(mut hi_exp) = hi_exp else {
            // 2^53 = MAX_EXACT_INTEGER, the largest count.
            return Ok(self.done(lo.0 as f64, lo.1));
        };
        while hi_exp - lo_exp > 1 {
            let mid = (lo_exp + hi_exp) / 2;
            match self.eval((1u64 << mid) as f64)? {
                Outcome::Fits(mu) => {
                    lo = (1u64 << mid, mu);
                    lo_exp = mid;
                }
                Outcome::Exceeds(_) => hi_exp = mid,
            }
        }
        let mut hi = 1u64 << hi_exp;
        while hi - lo.0 > 1 {
            let mid = lo.0 + (hi - lo.0) / 2;
            match self.eval(mid as f64)? {
                Outcome::Fits(mu) => lo = (mid, mu),
                Outcome::Exceeds(_) => hi = mid,
            }
        }
        Ok(self.done(lo.0 as f64, lo.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::params::GridStep;
    use crate::accountant::params::DEFAULT_DELTA_SLACK;
    use crate::accountant::NeighboringRelation;
    use serde_json::{json, Value};

    const SLACK: f64 = DEFAULT_DELTA_SLACK;

    fn ev(v: Value) -> Event {
        Event::from_json(&v).unwrap()
    }

    fn empty() -> Composition {
        Composition::new(
            NeighboringRelation::AddOrRemoveOne,
            GridStep::new(1e-4).unwrap(),
        )
    }

    fn root() -> JsonPath {
        JsonPath::root()
    }

    /// μ upper of base ⊗ event(value), by the engine.
    fn mu_at(base: &Composition, e: &Event, free: FreeParameter, value: f64) -> Option<f64> {
        let e = with_free_parameter(e, free, value, &root()).unwrap();
        let mut c = base.clone();
        c.push(&e, &root()).ok()?;
        c.guarantee().ok()?.mu_upper(SLACK)
    }

    #[test]
    fn gaussian_noise_multiplier_matches_the_closed_form() {
        let e = ev(json!({"type": "gaussian", "noise_multiplier": 1.0}));
        for target in [0.05, 0.5, 1.0, 3.7, 40.0] {
            let c = calibrate(
                &empty(),
                &e,
                FreeParameter::NoiseMultiplier,
                target,
                DeltaSlack::new(SLACK).unwrap(),
                &root(),
            )
            .unwrap();
            let exact = 1.0 / target;
            assert!(
                (c.value - exact).abs() <= 1e-6 * exact,
                "{target}: {} vs {exact}",
                c.value
            );
            assert!(c.value >= exact * (1.0 - 1e-15), "never below the exact σ");
            assert!(c.mu <= target);
            assert_eq!(
                mu_at(&empty(), &e, FreeParameter::NoiseMultiplier, c.value),
                Some(c.mu)
            );
            assert!(c.evaluations <= MAX_EVALUATIONS, "{}", c.evaluations);
        }
    }

    #[test]
    fn replace_one_doubles_the_noise() {
        let base = Composition::new(
            NeighboringRelation::ReplaceOne,
            GridStep::new(1e-4).unwrap(),
        );
        let e = ev(json!({"type": "gaussian", "noise_multiplier": 1.0}));
        let c = calibrate(
            &base,
            &e,
            FreeParameter::NoiseMultiplier,
            0.5,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        assert!((c.value - 4.0).abs() <= 4e-6, "{}", c.value);
    }

    #[test]
    fn count_of_gaussian_steps_matches_the_closed_form() {
        for (sigma, target) in [(8.0, 1.01), (3.0, 2.5), (10.0, 1.0 + 1e-9), (2.0, 0.3)] {
            let e = ev(json!({"type": "self_composed", "count": 1,
                              "event": {"type": "gaussian", "noise_multiplier": sigma}}));
            let c = calibrate(
                &empty(),
                &e,
                FreeParameter::Count,
                target,
                DeltaSlack::new(SLACK).unwrap(),
                &root(),
            )
            .unwrap();
            let mu_step = 1.0 / sigma;
            let exact = ((target / mu_step) * (target / mu_step)).floor();
            assert_eq!(c.value, exact, "σ {sigma}, target {target}");
            assert!(c.mu <= target);
            assert!(c.evaluations <= MAX_EVALUATIONS);
        }
    }

    #[test]
    fn large_counts_stay_within_the_evaluation_bound() {
        let e = ev(json!({"type": "self_composed", "count": 7,
                          "event": {"type": "gaussian", "noise_multiplier": 1e6}}));
        let c = calibrate(
            &empty(),
            &e,
            FreeParameter::Count,
            1.5,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        // (1.5 / 1e-6)² = 2.25e12, up to rounding of the last unit.
        assert!((c.value - 2.25e12).abs() <= 1.0, "{}", c.value);
        assert!(c.evaluations <= MAX_EVALUATIONS, "{}", c.evaluations);
        let f = FreeParameter::Count;
        assert!(mu_at(&empty(), &e, f, c.value).unwrap() <= 1.5);
        assert!(mu_at(&empty(), &e, f, c.value + 1.0).unwrap() > 1.5);
        // Everything fits: the largest count.
        let e = ev(json!({"type": "self_composed", "count": 1,
                          "event": {"type": "poisson_sampled", "sampling_rate": 0.0,
                                    "event": {"type": "gaussian", "noise_multiplier": 1.0}}}));
        let c = calibrate(
            &empty(),
            &e,
            FreeParameter::Count,
            0.1,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        assert_eq!(c.value, MAX_EXACT_INTEGER as f64);
        assert_eq!(c.mu, 0.0);
    }

    #[test]
    fn dp_sgd_noise_multiplier_is_the_smallest_that_meets_the_target() {
        let base = empty();
        let e = ev(json!({"type": "self_composed", "count": 100,
                          "event": {"type": "poisson_sampled", "sampling_rate": 0.01,
                                    "event": {"type": "gaussian", "noise_multiplier": 1.0}}}));
        let target = 0.2;
        let f = FreeParameter::NoiseMultiplier;
        let c = calibrate(
            &base,
            &e,
            f,
            target,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        assert!(c.mu <= target);
        assert_eq!(mu_at(&base, &e, f, c.value), Some(c.mu));
        let below = mu_at(&base, &e, f, c.value * (1.0 - 1e-4));
        assert!(below.is_none_or(|m| m > target), "{below:?}");
        assert!(c.evaluations <= MAX_EVALUATIONS, "{}", c.evaluations);
        // Subsampling only helps: the unsampled 100-fold Gaussian needs σ = √100/0.2 = 50.
        assert!(c.value > 0.5 && c.value < 50.0, "{}", c.value);
    }

    #[test]
    fn laplace_noise_multiplier_meets_the_target() {
        let base = Composition::new(
            NeighboringRelation::AddOrRemoveOne,
            GridStep::new(1e-3).unwrap(),
        );
        let e = ev(json!({"type": "laplace", "noise_multiplier": 1.0}));
        let f = FreeParameter::NoiseMultiplier;
        let c = calibrate(&base, &e, f, 0.5, DeltaSlack::new(SLACK).unwrap(), &root()).unwrap();
        assert!(c.mu <= 0.5);
        assert!(mu_at(&base, &e, f, c.value * (1.0 - 1e-4)).is_none_or(|m| m > 0.5));
    }

    #[test]
    fn an_existing_ledger_leaves_the_remaining_budget() {
        let mut base = empty();
        base.push(&ev(json!({"type": "gdp", "mu": 0.6})), &root())
            .unwrap();
        // Remaining μ² = 1 − 0.36 = 0.64: σ = 1/0.8.
        let e = ev(json!({"type": "gaussian", "noise_multiplier": 1.0}));
        let c = calibrate(
            &base,
            &e,
            FreeParameter::NoiseMultiplier,
            1.0,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        assert!((c.value - 1.25).abs() <= 1.25e-6, "{}", c.value);
        assert!(c.mu <= 1.0);
        // Steps of μ 0.2: (1.01² − 0.36)/0.04 = 16.5.
        let e = ev(json!({"type": "self_composed", "count": 3,
                          "event": {"type": "gaussian", "noise_multiplier": 5.0}}));
        let c = calibrate(
            &base,
            &e,
            FreeParameter::Count,
            1.01,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        assert_eq!(c.value, 16.0);
    }

    #[test]
    fn the_parameter_is_found_depth_first_and_the_rest_is_kept() {
        let e = ev(json!({"type": "composed", "events": [
            {"type": "gdp", "mu": 0.3},
            {"type": "self_composed", "count": 4,
             "event": {"type": "gaussian", "noise_multiplier": 9.0}},
            {"type": "gaussian", "noise_multiplier": 2.0}
        ]}));
        let f = FreeParameter::NoiseMultiplier;
        // μ² = 0.09 + 4/σ² + 0.25 ≤ 1: σ = 2/√0.66.
        let c = calibrate(
            &empty(),
            &e,
            f,
            1.0,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        let exact = 2.0 / 0.66f64.sqrt();
        assert!((c.value - exact).abs() <= 1e-6 * exact, "{}", c.value);
        let set = with_free_parameter(&e, f, c.value, &root()).unwrap();
        let Event::Composed { events } = &set else {
            panic!()
        };
        assert_eq!(events[0], e_at(&e, 0));
        assert_eq!(events[2], e_at(&e, 2));
        // Count: (1 − 0.09 − 0.25)/(1/81) = 53.46.
        let c = calibrate(
            &empty(),
            &e,
            FreeParameter::Count,
            1.0,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        assert_eq!(c.value, 53.0);
    }

    fn e_at(e: &Event, i: usize) -> Event {
        match e {
            Event::Composed { events } => events[i].clone(),
            _ => panic!(),
        }
    }

    #[test]
    fn unreachable_targets() {
        let mut base = empty();
        base.push(&ev(json!({"type": "gdp", "mu": 2.0})), &root())
            .unwrap();
        let e = ev(json!({"type": "poisson_sampled", "sampling_rate": 0.5,
                          "event": {"type": "gaussian", "noise_multiplier": 1.0}}));
        let path = root().field("event");
        let err = calibrate(
            &base,
            &e,
            FreeParameter::NoiseMultiplier,
            1.0,
            DeltaSlack::new(SLACK).unwrap(),
            &path,
        )
        .unwrap_err();
        match &err {
            AccountantError::Unsupported { path, reason } => {
                assert_eq!(path, "$.event.event.noise_multiplier");
                assert!(reason.contains("unreachable"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Counts: nothing more fits, and the base's μ is reported.
        let e = ev(json!({"type": "self_composed", "count": 1,
                          "event": {"type": "gaussian", "noise_multiplier": 1.0}}));
        let c = calibrate(
            &base,
            &e,
            FreeParameter::Count,
            1.0,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        assert_eq!(c.value, 0.0);
        assert!((c.mu - 2.0).abs() < 1e-12, "{}", c.mu);
        // One step alone exceeds the target.
        let c = calibrate(
            &empty(),
            &e,
            FreeParameter::Count,
            0.5,
            DeltaSlack::new(SLACK).unwrap(),
            &root(),
        )
        .unwrap();
        assert_eq!((c.value, c.mu), (0.0, 0.0));
    }

    #[test]
    fn events_without_the_parameter_and_bad_targets_are_refused() {
        let e = ev(json!({"type": "gdp", "mu": 1.0}));
        let path = root().field("event");
        for f in [FreeParameter::NoiseMultiplier, FreeParameter::Count] {
            let err = calibrate(&empty(), &e, f, 1.0, DeltaSlack::new(SLACK).unwrap(), &path)
                .unwrap_err();
            assert!(
                matches!(&err, AccountantError::Unsupported { path, .. } if path == "$.event"),
                "{err:?}"
            );
        }
        let g = ev(json!({"type": "gaussian", "noise_multiplier": 1.0}));
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let err = calibrate(
                &empty(),
                &g,
                FreeParameter::NoiseMultiplier,
                bad,
                DeltaSlack::new(SLACK).unwrap(),
                &path,
            )
            .unwrap_err();
            assert!(matches!(err, AccountantError::Input(_)), "{err:?}");
        }
        // A δ slack out of range cannot even be passed: it is refused where it is parsed.
        assert!(DeltaSlack::new(0.5).is_err());
        // Errors that do not depend on the parameter come back as they are.
        let rr = ev(json!({"type": "composed", "events": [
            {"type": "randomized_response", "noise_parameter": 0.5, "num_buckets": 2},
            {"type": "gaussian", "noise_multiplier": 1.0}]}));
        let err = calibrate(
            &empty(),
            &rr,
            FreeParameter::NoiseMultiplier,
            5.0,
            DeltaSlack::new(SLACK).unwrap(),
            &path,
        )
        .unwrap_err();
        assert!(
            matches!(&err, AccountantError::Unsupported { path, .. } if path == "$.event.events[0]"),
            "{err:?}"
        );
    }

    #[test]
    fn with_free_parameter_validates_the_value() {
        let e = ev(json!({"type": "self_composed", "count": 2,
                          "event": {"type": "gaussian", "noise_multiplier": 1.0}}));
        let set = with_free_parameter(&e, FreeParameter::Count, 7.0, &root()).unwrap();
        assert_eq!(set.invocations(), 7);
        let err = with_free_parameter(&e, FreeParameter::Count, 2.5, &root()).unwrap_err();
        assert!(
            matches!(&err, AccountantError::Input(i) if i.path == "$.count"),
            "{err:?}"
        );
        let err =
            with_free_parameter(&e, FreeParameter::NoiseMultiplier, 0.0, &root()).unwrap_err();
        assert!(
            matches!(&err, AccountantError::Input(i) if i.path == "$.event.noise_multiplier"),
            "{err:?}"
        );
        assert_eq!(FreeParameter::parse("count"), Some(FreeParameter::Count));
        assert_eq!(FreeParameter::NoiseMultiplier.as_str(), "noise_multiplier");
    }
}

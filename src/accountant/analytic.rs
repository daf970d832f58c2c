//! The exact engine for Gaussian-type ledgers: every event is μ-GDP and the composition is μ-GDP
//! with μ = √Σμᵢ² (DRS22 Cor. 2), so the whole trade-off curve is G_μ, exactly.
//!
//! [`GdpComposition`] is incremental (O(1) per event, independent of the ledger's length) and
//! serialisable, so a ledger of Gaussian mechanisms never needs the numerical engine.

use super::clt::{self, CltSums};
use super::event::Event;
use super::json::{InputError, JsonPath};
use super::rounding::{self, SumOfSquares};
use super::{AccountantError, NeighboringRelation};
use serde::{Deserialize, Serialize};

/// The μ of an event if it is exactly μ-GDP in closed form, as (μ, multiplicity) terms.
///
/// Analytic events: `gdp`, `gaussian` (μ = s/noise_multiplier with the relation's sensitivity s,
/// see [`NeighboringRelation::sensitivity`]), their `self_composed` and `composed` combinations, and
/// trivially subsampled ones (`poisson_sampled` at rate 0 or 1, `sampled_without_replacement` of the
/// whole population). Every term is finite.
///
/// # Errors
/// [`AccountantError::NeedsNumericalEngine`] with the path and type of the first event that needs
/// the numerical engine; [`AccountantError::Input`] at `….noise_multiplier` when s/noise_multiplier
/// exceeds f64::MAX (a subnormal noise multiplier): such a mechanism has no finite μ, and +∞ must
/// not enter a persisted state.
///
/// # Soundness
/// μ = s/noise_multiplier is rounded up.
pub fn gdp_terms(
    e: &Event,
    rel: NeighboringRelation,
    path: &JsonPath,
    mult: u64,
    out: &mut Vec<(f64, u64)>,
) -> Result<(), AccountantError> {
    match e {
        Event::Gdp { mu } => out.push((mu.get(), mult)),
        Event::Gaussian { noise_multiplier } => {
            let (s, sigma) = (rel.sensitivity(), noise_multiplier.get());
            let mu = rounding::div_up(s, sigma);
            if !mu.is_finite() {
                return Err(AccountantError::Input(InputError::new(
                    &path.field("noise_multiplier"),
                    format!(
                        "gives μ = ∞; the sensitivity {s} divided by the noise multiplier {sigma:e} \
                         exceeds the largest double (1.8e308), so the mechanism has no finite \
                         privacy guarantee"
                    ),
                )));
            }
            out.push((mu, mult))
        }
        Event::SelfComposed { count, event } => match mult.checked_mul(count.get()) {
            Some(m) => gdp_terms(event, rel, &path.field("event"), m, out)?,
            None => {
                // More than 2⁶⁴ invocations: a saturated count would understate μ. Fold the outer
                // multiplicity into μ instead, μ·√mult rounded up (count·μ² = (μ√count)²).
                let mut inner = Vec::new();
                gdp_terms(event, rel, &path.field("event"), count.get(), &mut inner)?;
                let scale = (mult as f64).next_up().sqrt().next_up();
                for (mu, n) in inner {
                    let scaled = rounding::mul_up(mu, scale);
                    if !scaled.is_finite() {
                        return Err(AccountantError::TooLarge {
                            path: path.to_string(),
                            reason: format!(
                                "composes μ = {mu:e} more than 2^64 times: μ exceeds the largest \
                                 double (1.8e308)"
                            ),
                        });
                    }
                    out.push((scaled, n));
                }
            }
        },
        Event::Composed { events } => {
            let p = path.field("events");
            for (i, ev) in events.iter().enumerate() {
                gdp_terms(ev, rel, &p.index(i), mult, out)?;
            }
        }
        Event::PoissonSampled {
            sampling_rate,
            event,
        } if sampling_rate.get() == 0.0 || sampling_rate.get() == 1.0 => {
            if sampling_rate.get() == 1.0 {
                gdp_terms(event, rel, &path.field("event"), mult, out)?;
            } else {
                // Never runs on any record: no privacy loss, but the event must still be valid.
                gdp_terms(event, rel, &path.field("event"), mult, &mut Vec::new())?;
            }
        }
        Event::SampledWithoutReplacement {
            sample_size,
            population_size,
            event,
        } if sample_size == population_size => {
            gdp_terms(event, rel, &path.field("event"), mult, out)?
        }
        other => {
            return Err(AccountantError::NeedsNumericalEngine {
                path: path.to_string(),
                event_type: type_name(other),
            })
        }
    }
    Ok(())
}

/// The wire type name of an event.
pub fn type_name(e: &Event) -> &'static str {
    match e {
        Event::Gaussian { .. } => "gaussian",
        Event::Laplace { .. } => "laplace",
        Event::DiscreteLaplace { .. } => "discrete_laplace",
        Event::DiscreteGaussian { .. } => "discrete_gaussian",
        Event::RandomizedResponse { .. } => "randomized_response",
        Event::EpsilonDelta { .. } => "epsilon_delta",
        Event::Gdp { .. } => "gdp",
        Event::Zcdp { .. } => "zcdp",
        Event::Rdp { .. } => "rdp",
        Event::PoissonSampled { .. } => "poisson_sampled",
        Event::SampledWithoutReplacement { .. } => "sampled_without_replacement",
        Event::SelfComposed { .. } => "self_composed",
        Event::Composed { .. } => "composed",
    }
}

/// Per-term μ above which the CLT sums are not kept: the CLT divides by ‖κ₂‖₁ − ‖kl‖₂², which for
/// G_μ is (μ² + μ⁴/4) − μ⁴/4, so its relative rounding error is ≈ U·μ²/2 (5.6e-9 at μ = 1e4), and
/// beyond μ ≈ 1.3e77 the sums overflow. The CLT figure is reported only as an approximation.
const CLT_MAX_MU: f64 = 1e4;

/// The running composition of μ-GDP mechanisms: Σμᵢ² (scaled double-double with an exact error
/// bound, see [`SumOfSquares`]) plus CLT sums.
///
/// # Persistence
/// Serialised with serde as `{relation, sum_sq_hi, sum_sq_lo, sum_sq_exp, sum_sq_err, clt,
/// invocations}`. `sum_sq_exp` (the power-of-two scale, 0 whenever the sum fits a double) and
/// `sum_sq_err` (the error bound) are newer: states without them load as scale 0 with the error bound
/// the older summation had (see [`SumOfSquares::from_parts`]). Every field is finite, so the JSON
/// always reads back; a state with non-finite or negative components is rejected when read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "GdpCompositionRepr", into = "GdpCompositionRepr")]
pub struct GdpComposition {
    relation: NeighboringRelation,
    sum_sq: SumOfSquares,
    clt: CltSums,
    invocations: u64,
}

/// The wire form of [`GdpComposition`].
#[derive(Debug, Clone, Serialize, Deserialize)]
struct GdpCompositionRepr {
    relation: NeighboringRelation,
    sum_sq_hi: f64,
    sum_sq_lo: f64,
    #[serde(default)]
    sum_sq_exp: i32,
    #[serde(default)]
    sum_sq_err: Option<f64>,
    clt: CltSums,
    invocations: u64,
}

impl From<GdpComposition> for GdpCompositionRepr {
    fn from(c: GdpComposition) -> Self {
        let (hi, lo, exp, err) = c.sum_sq.parts();
        GdpCompositionRepr {
            relation: c.relation,
            sum_sq_hi: hi,
            sum_sq_lo: lo,
            sum_sq_exp: exp,
            sum_sq_err: Some(err),
            clt: c.clt,
            invocations: c.invocations,
        }
    }
}

impl TryFrom<GdpCompositionRepr> for GdpComposition {
    type Error = String;
    fn try_from(r: GdpCompositionRepr) -> Result<Self, String> {
        let sum_sq = SumOfSquares::from_parts(r.sum_sq_hi, r.sum_sq_lo, r.sum_sq_exp, r.sum_sq_err)
            .ok_or_else(|| {
                format!(
                    "invalid GDP composition state: sum of squares ({}, {}, 2^{}, ±{:?}) is not a \
                     finite non-negative number",
                    r.sum_sq_hi, r.sum_sq_lo, r.sum_sq_exp, r.sum_sq_err
                )
            })?;
        Ok(GdpComposition {
            relation: r.relation,
            sum_sq,
            clt: r.clt,
            invocations: r.invocations,
        })
    }
}

impl Default for GdpComposition {
    fn default() -> Self {
        GdpComposition::new(NeighboringRelation::default())
    }
}

impl GdpComposition {
    /// An empty composition (μ = 0) under a neighbouring relation.
    pub fn new(relation: NeighboringRelation) -> Self {
        GdpComposition {
            relation,
            sum_sq: SumOfSquares::default(),
            clt: CltSums::default(),
            invocations: 0,
        }
    }

    /// The neighbouring relation.
    pub fn relation(&self) -> NeighboringRelation {
        self.relation
    }

    /// Adds an event located at `path` (for error messages). O(size of the event), independent of
    /// how many events the composition already holds. On error nothing is added.
    pub fn push(&mut self, e: &Event, path: &JsonPath) -> Result<(), AccountantError> {
        let mut terms = Vec::new();
        gdp_terms(e, self.relation, path, 1, &mut terms)?;
        self.add_terms(&terms);
        self.invocations = self.invocations.saturating_add(e.invocations());
        Ok(())
    }

    /// Adds (μ, multiplicity) terms (from [`gdp_terms`], so finite).
    ///
    /// # Panics
    /// If a μ is not finite (see [`SumOfSquares::add`]).
    pub fn add_terms(&mut self, terms: &[(f64, u64)]) {
        for &(mu, n) in terms {
            self.sum_sq.add(mu, n);
            self.add_clt(mu, n);
        }
    }

    /// Adds a term's CLT functionals, or marks the CLT unavailable (see [`CLT_MAX_MU`]) by setting
    /// every sum to f64::MAX: then ‖κ₂‖₁ − ‖kl‖₂² = 0 and the Berry–Esseen figure is `None`, here and
    /// after merging with a numerical part's sums; and the persisted state stays finite.
    fn add_clt(&mut self, mu: f64, n: u64) {
        if !self.clt_available() {
            return;
        }
        let mut next = self.clt;
        if mu <= CLT_MAX_MU {
            next.add(clt::gdp(mu), n);
        }
        let finite = [next.kl, next.kappa2, next.kl_sq, next.kbar3]
            .iter()
            .all(|v| v.is_finite() && *v < f64::MAX);
        self.clt = if mu <= CLT_MAX_MU && finite {
            next
        } else {
            CltSums {
                kl: f64::MAX,
                kappa2: f64::MAX,
                kl_sq: f64::MAX,
                kbar3: f64::MAX,
            }
        };
    }

    /// Whether the CLT sums are meaningful (no term beyond [`CLT_MAX_MU`]).
    pub fn clt_available(&self) -> bool {
        self.clt.kl < f64::MAX
    }

    /// μ of the composition, rounded up: the smallest double ≥ √Σμᵢ² (DRS22 Cor. 2; see
    /// [`SumOfSquares::sqrt_up`]); +∞ only when √Σμᵢ² exceeds f64::MAX.
    pub fn mu(&self) -> f64 {
        self.sum_sq.sqrt_up()
    }

    /// A bracket [lower, upper] around the exact √Σμᵢ² (equal ends whenever the sum is held
    /// exactly, e.g. for a single term).
    pub fn mu_bounds(&self) -> (f64, f64) {
        (self.sum_sq.sqrt_down(), self.sum_sq.sqrt_up())
    }

    /// The CLT sums (for the approximate Berry–Esseen figure reported alongside).
    pub fn clt(&self) -> &CltSums {
        &self.clt
    }

    /// Number of mechanism invocations composed so far.
    pub fn invocations(&self) -> u64 {
        self.invocations
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gaussians_and_gdp_compose_exactly() {
        let e = Event::from_json(&json!({"type": "composed", "events": [
            {"type": "gdp", "mu": 0.3},
            {"type": "self_composed", "count": 4, "event": {"type": "gaussian", "noise_multiplier": 5.0}}
        ]}))
        .unwrap();
        let mut c = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
        c.push(&e, &JsonPath::root()).unwrap();
        // √(0.09 + 4·0.04) = 0.5
        assert!((c.mu() - 0.5).abs() < 1e-15, "{}", c.mu());
        assert_eq!(c.invocations(), 5);
    }

    #[test]
    fn the_upper_mu_alone_is_the_reports_upper_mu() {
        use crate::accountant::guarantee::Guarantee;
        let e = Event::from_json(&json!({"type": "composed", "events": [
            {"type": "gdp", "mu": 0.3},
            {"type": "gaussian", "noise_multiplier": 3.0}
        ]}))
        .unwrap();
        let mut c = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
        c.push(&e, &JsonPath::root()).unwrap();
        for slack in [0.0, 1e-9, 1e-5, 0.3] {
            assert_eq!(
                c.mu_upper(slack),
                Guarantee::mu(&c, slack).upper,
                "slack {slack}"
            );
        }
        let mut huge = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
        let big = Event::from_json(&json!({"type": "gdp", "mu": 1.5e308})).unwrap();
        huge.push(&big, &JsonPath::root()).unwrap();
        huge.push(&big, &JsonPath::root()).unwrap();
        assert_eq!(huge.mu_upper(1e-5), None);
        assert_eq!(Guarantee::mu(&huge, 1e-5).upper, None);
    }

    #[test]
    fn non_analytic_events_name_their_path() {
        let e = Event::from_json(&json!({"type": "composed", "events": [
            {"type": "gdp", "mu": 0.3},
            {"type": "poisson_sampled", "sampling_rate": 0.1, "event": {"type": "gaussian", "noise_multiplier": 1.0}}
        ]}))
        .unwrap();
        let mut c = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
        let err = c.push(&e, &JsonPath::root()).unwrap_err();
        assert_eq!(
            err,
            AccountantError::NeedsNumericalEngine {
                path: "$.events[1]".into(),
                event_type: "poisson_sampled"
            }
        );
        assert_eq!(c.mu(), 0.0, "a failed push adds nothing");
    }

    #[test]
    fn more_than_2_pow_64_invocations_are_not_undercounted() {
        // 2⁴⁰ × 2⁴⁰ = 2⁸⁰ copies of gdp 1e-20: μ = 2⁴⁰·1e-20 (a u64 count would saturate at 2⁶⁴).
        let e = Event::from_json(&json!({"type": "self_composed", "count": 1u64 << 40,
            "event": {"type": "self_composed", "count": 1u64 << 40,
                      "event": {"type": "gdp", "mu": 1e-20}}}))
        .unwrap();
        let mut c = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
        c.push(&e, &JsonPath::root()).unwrap();
        let want = (1u64 << 40) as f64 * 1e-20;
        assert!(
            c.mu() >= want && c.mu() <= want * (1.0 + 1e-15),
            "{}",
            c.mu()
        );
    }

    #[test]
    fn replace_one_doubles_the_sensitivity_of_noise_multipliers() {
        // dp_accounting: a Gaussian with noise multiplier σ under REPLACE_ONE has sensitivity 2.
        let e = Event::from_json(&json!({"type": "gaussian", "noise_multiplier": 4.0})).unwrap();
        let mut c = GdpComposition::new(NeighboringRelation::ReplaceOne);
        c.push(&e, &JsonPath::root()).unwrap();
        assert!((c.mu() - 0.5).abs() < 1e-15);
    }
}

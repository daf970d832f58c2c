//! The exact engine for Gaussian-type ledgers: every event is μ-GDP and the composition is μ-GDP
//! with μ = √Σμᵢ² (DRS22 Cor. 2), so the whole trade-off curve is G_μ, exactly.
//!
//! [`GdpComposition`] is incremental (O(1) per event, independent of the ledger's length) and
//! serialisable, so a ledger of Gaussian mechanisms never needs the numerical engine.

use super::clt::{self, CltSums};
use super::event::Event;
use super::json::JsonPath;
use super::rounding::SumOfSquares;
use super::{AccountantError, NeighboringRelation};
use serde::{Deserialize, Serialize};

/// The μ of an event if it is exactly μ-GDP in closed form, as (μ, multiplicity) terms.
///
/// Analytic events: `gdp`, `gaussian` (μ = s/noise_multiplier with the relation's sensitivity s,
/// see [`NeighboringRelation::sensitivity`]), their `self_composed` and `composed` combinations, and
/// trivially subsampled ones (`poisson_sampled` at rate 0 or 1, `sampled_without_replacement` of the
/// whole population). Anything else returns the path and type of the first event that needs the
/// numerical engine.
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
            out.push((rel.sensitivity() / noise_multiplier.get(), mult))
        }
        Event::SelfComposed { count, event } => gdp_terms(
            event,
            rel,
            &path.field("event"),
            mult.saturating_mul(count.get()),
            out,
        )?,
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
        Event::PoissonSampled { .. } => "poisson_sampled",
        Event::SampledWithoutReplacement { .. } => "sampled_without_replacement",
        Event::SelfComposed { .. } => "self_composed",
        Event::Composed { .. } => "composed",
    }
}

/// The running composition of μ-GDP mechanisms: Σμᵢ² in double-double plus CLT sums.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct GdpComposition {
    relation: NeighboringRelation,
    sum_sq_hi: f64,
    sum_sq_lo: f64,
    clt: CltSums,
    invocations: u64,
}

impl GdpComposition {
    /// An empty composition (μ = 0) under a neighbouring relation.
    pub fn new(relation: NeighboringRelation) -> Self {
        GdpComposition {
            relation,
            ..Self::default()
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

    /// Adds (μ, multiplicity) terms (from [`gdp_terms`]).
    pub fn add_terms(&mut self, terms: &[(f64, u64)]) {
        let mut acc = SumOfSquares::from_parts(self.sum_sq_hi, self.sum_sq_lo);
        for &(mu, n) in terms {
            acc.add(mu, n);
            self.clt.add(clt::gdp(mu), n);
        }
        (self.sum_sq_hi, self.sum_sq_lo) = acc.parts();
    }

    /// μ of the composition, rounded up (DRS22 Cor. 2; see [`SumOfSquares::sqrt_up`]).
    pub fn mu(&self) -> f64 {
        SumOfSquares::from_parts(self.sum_sq_hi, self.sum_sq_lo).sqrt_up()
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
    fn replace_one_doubles_the_sensitivity_of_noise_multipliers() {
        // dp_accounting: a Gaussian with noise multiplier σ under REPLACE_ONE has sensitivity 2.
        let e = Event::from_json(&json!({"type": "gaussian", "noise_multiplier": 4.0})).unwrap();
        let mut c = GdpComposition::new(NeighboringRelation::ReplaceOne);
        c.push(&e, &JsonPath::root()).unwrap();
        assert!((c.mu() - 0.5).abs() < 1e-15);
    }
}

//! The event model: what a caller says it ran on a dataset.
//!
//! A closed, tagged union (`{"type": "gaussian", ...}`) whose variants carry the meanings of Google
//! dp_accounting's `DpEvent`s of the same name (dp_accounting 0.6.0, `dp_event.py`), plus `gdp`.
//!
//! Sensitivity, as in dp_accounting: a `noise_multiplier` is the noise standard deviation (or Laplace
//! scale) divided by the per-record contribution bound C, so the query's sensitivity is C under
//! add/remove and 2C under replace-one (`NeighboringRelation::sensitivity`). Mechanisms with an
//! explicit integer `sensitivity` (discrete Laplace/Gaussian) and black boxes (`gdp`, `epsilon_delta`)
//! state their guarantee for the ledger's relation directly.
//!
//! # Versioning
//! [`EVENT_MODEL_VERSION`] names this model. Stored ledgers must stay re-accountable forever, so the
//! rules are dp_accounting's: a variant or field is never removed or renamed, its meaning never
//! changes, new fields are optional with a default that keeps the old meaning, and a new meaning is a
//! new variant.
//!
//! # Parsing
//! [`Event::from_json`] turns untrusted JSON into an `Event` whose parameters are validated newtypes;
//! after that the math never re-checks them. Rejections name the JSON path and the reason. Nesting
//! deeper than [`MAX_EVENT_DEPTH`] or more than [`MAX_EVENT_NODES`] events in one document are
//! rejected so adversarial input is bounded in time and memory.

use super::json::{self, Fields, InputError, JsonPath};
use serde::Serialize;
use serde_json::Value;

/// Version of the event model described in this module.
pub const EVENT_MODEL_VERSION: u32 = 1;

/// Deepest nesting of events (sampled/self_composed/composed wrappers) accepted in one document.
pub const MAX_EVENT_DEPTH: usize = 32;

/// Most points of one `rdp` event's curve.
pub const MAX_RDP_ORDERS: usize = 256;

/// Largest Rényi order accepted (beyond it the conversion gains nothing a double can show).
pub const MAX_RDP_ORDER: f64 = 1e6;

/// Most events (counting every nested one) accepted in one document.
pub const MAX_EVENT_NODES: usize = 100_000;

/// A finite number > 0.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Positive(f64);

/// A finite number ≥ 0 (−0 is read as 0).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct NonNegative(f64);

/// A probability in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Probability(f64);

/// A whole number ≥ 1 and ≤ 2^53.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Count(u64);

macro_rules! newtype_f64 {
    ($t:ident, $ok:expr, $what:literal) => {
        impl $t {
            /// Validates `x`; the error is the reason it was rejected.
            pub fn new(x: f64) -> Result<Self, String> {
                let x = if x == 0.0 { 0.0 } else { x };
                let ok: fn(f64) -> bool = $ok;
                if x.is_finite() && ok(x) {
                    Ok($t(x))
                } else {
                    Err(format!(concat!("must be ", $what, ", got {}"), x))
                }
            }
            /// The value.
            pub fn get(self) -> f64 {
                self.0
            }
        }
    };
}
newtype_f64!(Positive, |x| x > 0.0, "a finite number > 0");
newtype_f64!(NonNegative, |x| x >= 0.0, "a finite number >= 0");
newtype_f64!(
    Probability,
    |x| (0.0..=1.0).contains(&x),
    "a number in [0, 1]"
);

impl Count {
    /// Validates `n` (≥ 1, ≤ 2^53).
    pub fn new(n: u64) -> Result<Self, String> {
        if (1..=json::MAX_EXACT_INTEGER).contains(&n) {
            Ok(Count(n))
        } else {
            Err(format!("must be a whole number in [1, 2^53], got {n}"))
        }
    }
    /// The value.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// One mechanism invocation, or a composition of them. See the module docs for the semantics.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Gaussian noise with standard deviation `noise_multiplier` × L2 sensitivity.
    Gaussian { noise_multiplier: Positive },
    /// Laplace noise with scale `noise_multiplier` × L1 sensitivity.
    Laplace { noise_multiplier: Positive },
    /// Discrete Laplace noise P[x] ∝ exp(−noise_parameter·|x|) on an integer query of the given
    /// (integer) sensitivity.
    DiscreteLaplace {
        noise_parameter: Positive,
        sensitivity: Count,
    },
    /// Discrete Gaussian noise P[x] ∝ exp(−x²/(2 sigma²)) on an integer query of the given sensitivity.
    DiscreteGaussian { sigma: Positive, sensitivity: Count },
    /// With probability `noise_parameter` answer a uniformly random one of `num_buckets` buckets,
    /// otherwise the true bucket (dp_accounting's `RandomizedResponseDpEvent`).
    RandomizedResponse {
        noise_parameter: Probability,
        num_buckets: Count,
    },
    /// A black box known only to be (epsilon, delta)-DP, and optionally η-TV (its total variation
    /// between neighbouring outputs is at most `total_variation`; Ghazi & Issa, Ghazi & Issa).
    EpsilonDelta {
        epsilon: NonNegative,
        delta: Probability,
        #[serde(skip_serializing_if = "Option::is_none")]
        total_variation: Option<Probability>,
    },
    /// A mechanism known to be mu-GDP.
    Gdp { mu: NonNegative },
    /// A black box known only to be (xi, rho)-zCDP (Bun & Steinke 2016, Definition 1.1): its Rényi
    /// divergences between neighbouring outputs, both ways, are at most xi + rho·α for every order
    /// α > 1 (`xi` absent: ρ-zCDP; a stated 0 is parsed as absent, so both have one form).
    Zcdp {
        rho: NonNegative,
        #[serde(skip_serializing_if = "Option::is_none")]
        xi: Option<Positive>,
    },
    /// A black box known only by points of its Rényi-DP curve (Mironov 2017): for each i, the
    /// Rényi divergence of order `orders[i]` > 1 between neighbouring outputs, both ways, is at
    /// most `rdp[i]`.
    Rdp { orders: Vec<f64>, rdp: Vec<f64> },
    /// `event` run on a Poisson subsample: each record kept independently with `sampling_rate`.
    PoissonSampled {
        sampling_rate: Probability,
        event: Box<Event>,
    },
    /// `event` run on a uniformly random subset of `sample_size` of the `population_size` records.
    SampledWithoutReplacement {
        sample_size: Count,
        population_size: Count,
        event: Box<Event>,
    },
    /// `event` run `count` times (adaptively).
    SelfComposed { count: Count, event: Box<Event> },
    /// Each of `events` run in turn (adaptively).
    Composed { events: Vec<Event> },
}

/// Why shuffled batches are refused, as an event and as a run's sampler
/// ([`crate::accountant::sampler`] has the argument).
pub const SHUFFLE_REFUSAL: &str = "shuffled batches (one permutation per epoch) cannot be \
     certified: no accountant bounds their privacy loss today, and the known lower bounds (Chua et \
     al., ICML 2024; NeurIPS 2024) show that accounting them as Poisson sampling can understate it \
     badly. Sample batches with Poisson sampling (\"poisson\": Opacus' \
     UniformWithReplacementSampler, jax_privacy's Poisson batching) or fixed-size batches drawn \
     afresh each step (\"without_replacement\"), and account those";

/// The event type names, in the order the docs list them.
pub const EVENT_TYPES: &[&str] = &[
    "gaussian",
    "laplace",
    "discrete_laplace",
    "discrete_gaussian",
    "randomized_response",
    "epsilon_delta",
    "gdp",
    "zcdp",
    "rdp",
    "poisson_sampled",
    "sampled_without_replacement",
    "self_composed",
    "composed",
];

impl Event {
    /// Parses and validates one event at the document root.
    pub fn from_json(v: &Value) -> Result<Event, InputError> {
        Self::from_json_at(v, &JsonPath::root())
    }

    /// Parses and validates one event located at `path` (used for error messages).
    pub fn from_json_at(v: &Value, path: &JsonPath) -> Result<Event, InputError> {
        let mut budget = MAX_EVENT_NODES;
        parse(v, path, 0, &mut budget)
    }

    /// Parses a list of events located at `path`, sharing one node budget.
    pub fn list_from_json_at(v: &Value, path: &JsonPath) -> Result<Vec<Event>, InputError> {
        let mut budget = MAX_EVENT_NODES;
        parse_list(v, path, 0, &mut budget)
    }

    /// This event as JSON in the model's own form (round-trips through [`Event::from_json`]).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("events serialise to JSON")
    }

    /// Whether a black box known only by Rényi bounds (`zcdp`, `rdp`) is inside: its truth is a
    /// worst case over mechanisms, so lower bounds must come from a witness, never from the
    /// upper bound's own discretisation.
    pub fn has_renyi_box(&self) -> bool {
        match self {
            Event::Zcdp { .. } | Event::Rdp { .. } => true,
            Event::PoissonSampled { event, .. }
            | Event::SampledWithoutReplacement { event, .. }
            | Event::SelfComposed { event, .. } => event.has_renyi_box(),
            Event::Composed { events } => events.iter().any(Event::has_renyi_box),
            _ => false,
        }
    }

    /// The number of leaf mechanism invocations this event stands for (counts multiply), saturating.
    pub fn invocations(&self) -> u64 {
        match self {
            Event::PoissonSampled { event, .. }
            | Event::SampledWithoutReplacement { event, .. } => event.invocations(),
            Event::SelfComposed { count, event } => count.get().saturating_mul(event.invocations()),
            Event::Composed { events } => events
                .iter()
                .fold(0u64, |a, e| a.saturating_add(e.invocations())),
            _ => 1,
        }
    }
}

fn parse_list(
    v: &Value,
    path: &JsonPath,
    depth: usize,
    budget: &mut usize,
) -> Result<Vec<Event>, InputError> {
    let items = json::array(v, path)?;
    if items.len() > *budget {
        return Err(InputError::new(
            path,
            format!(
                "has {} events; at most {MAX_EVENT_NODES} events are allowed in one document",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, e)| parse(e, &path.index(i), depth, budget))
        .collect()
}

fn parse(
    v: &Value,
    path: &JsonPath,
    depth: usize,
    budget: &mut usize,
) -> Result<Event, InputError> {
    if depth >= MAX_EVENT_DEPTH {
        return Err(InputError::new(
            path,
            format!("events are nested more than {MAX_EVENT_DEPTH} levels deep"),
        ));
    }
    if *budget == 0 {
        return Err(InputError::new(
            path,
            format!("more than {MAX_EVENT_NODES} events in one document"),
        ));
    }
    *budget -= 1;
    let mut f = Fields::new(v, path)?;
    let (tv, tpath) = f.required("type")?;
    let ty = json::string(tv, &tpath)?;
    let positive = |f: &mut Fields<'_>, name| -> Result<Positive, InputError> {
        let (x, p) = f.required(name)?;
        Positive::new(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))
    };
    let nonneg = |f: &mut Fields<'_>, name| -> Result<NonNegative, InputError> {
        let (x, p) = f.required(name)?;
        NonNegative::new(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))
    };
    let prob = |f: &mut Fields<'_>, name| -> Result<Probability, InputError> {
        let (x, p) = f.required(name)?;
        Probability::new(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))
    };
    let count = |f: &mut Fields<'_>, name, min| -> Result<Count, InputError> {
        let (x, p) = f.required(name)?;
        Ok(Count(json::integer(x, &p, min)?))
    };
    let inner = |f: &mut Fields<'_>, budget: &mut usize| -> Result<Box<Event>, InputError> {
        let (x, p) = f.required("event")?;
        Ok(Box::new(parse(x, &p, depth + 1, budget)?))
    };
    let event = match ty {
        "gaussian" => Event::Gaussian {
            noise_multiplier: positive(&mut f, "noise_multiplier")?,
        },
        "laplace" => Event::Laplace {
            noise_multiplier: positive(&mut f, "noise_multiplier")?,
        },
        "discrete_laplace" => Event::DiscreteLaplace {
            noise_parameter: positive(&mut f, "noise_parameter")?,
            sensitivity: count(&mut f, "sensitivity", 1)?,
        },
        "discrete_gaussian" => Event::DiscreteGaussian {
            sigma: positive(&mut f, "sigma")?,
            sensitivity: count(&mut f, "sensitivity", 1)?,
        },
        "randomized_response" => {
            let noise_parameter = prob(&mut f, "noise_parameter")?;
            if noise_parameter.get() == 0.0 {
                return Err(InputError::new(
                    &path.field("noise_parameter"),
                    "must be > 0: with noise_parameter 0 the true bucket is always released, which is not differentially private",
                ));
            }
            Event::RandomizedResponse {
                noise_parameter,
                num_buckets: count(&mut f, "num_buckets", 2)?,
            }
        }
        "epsilon_delta" => {
            let epsilon = nonneg(&mut f, "epsilon")?;
            let delta = prob(&mut f, "delta")?;
            let total_variation = match f.optional("total_variation") {
                None => None,
                Some((x, p)) => Some(
                    Probability::new(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))?,
                ),
            };
            Event::EpsilonDelta {
                epsilon,
                delta,
                total_variation,
            }
        }
        "gdp" => Event::Gdp {
            mu: nonneg(&mut f, "mu")?,
        },
        "zcdp" => Event::Zcdp {
            rho: nonneg(&mut f, "rho")?,
            xi: match f.optional("xi") {
                None => None,
                Some((x, p)) => {
                    let xi = NonNegative::new(json::number(x, &p)?)
                        .map_err(|r| InputError::new(&p, r))?;
                    Positive::new(xi.get()).ok()
                }
            },
        },
        "rdp" => {
            let (o, po) = f.required("orders")?;
            let orders = json::number_list(o, &po, MAX_RDP_ORDERS, |a| {
                if a > 1.0 && a <= MAX_RDP_ORDER {
                    Ok(a)
                } else {
                    Err(format!(
                        "must be an order in (1, {MAX_RDP_ORDER:e}], got {a}"
                    ))
                }
            })?;
            let (r, pr) = f.required("rdp")?;
            let rdp = json::number_list(r, &pr, MAX_RDP_ORDERS, |t| {
                if t.is_finite() && t >= 0.0 {
                    Ok(if t == 0.0 { 0.0 } else { t })
                } else {
                    Err(format!("must be a finite number >= 0, got {t}"))
                }
            })?;
            if orders.is_empty() {
                return Err(InputError::new(&po, "must hold at least one order"));
            }
            if rdp.len() != orders.len() {
                return Err(InputError::new(
                    &pr,
                    format!(
                        "must have one value per order ({}), got {}",
                        orders.len(),
                        rdp.len()
                    ),
                ));
            }
            Event::Rdp { orders, rdp }
        }
        "poisson_sampled" => Event::PoissonSampled {
            sampling_rate: prob(&mut f, "sampling_rate")?,
            event: inner(&mut f, budget)?,
        },
        "sampled_without_replacement" => {
            let sample_size = count(&mut f, "sample_size", 1)?;
            let population_size = count(&mut f, "population_size", 1)?;
            if sample_size > population_size {
                return Err(InputError::new(
                    &path.field("sample_size"),
                    format!(
                        "must not exceed population_size ({}), got {}",
                        population_size.get(),
                        sample_size.get()
                    ),
                ));
            }
            Event::SampledWithoutReplacement {
                sample_size,
                population_size,
                event: inner(&mut f, budget)?,
            }
        }
        "self_composed" => Event::SelfComposed {
            count: count(&mut f, "count", 1)?,
            event: inner(&mut f, budget)?,
        },
        "composed" => {
            let (x, p) = f.required("events")?;
            Event::Composed {
                events: parse_list(x, &p, depth + 1, budget)?,
            }
        }
        "shuffled" | "shuffle" | "shuffled_batches" => {
            return Err(InputError::new(&tpath, SHUFFLE_REFUSAL))
        }
        other => {
            return Err(InputError::new(
                &tpath,
                format!(
                    "unknown event type {other:?}; known types are: {}",
                    EVENT_TYPES.join(", ")
                ),
            ))
        }
    };
    f.finish()?;
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> InputError {
        Event::from_json(&v).unwrap_err()
    }

    #[test]
    fn every_type_round_trips_through_json() {
        let v = json!({"type": "composed", "events": [
            {"type": "gaussian", "noise_multiplier": 1.5},
            {"type": "laplace", "noise_multiplier": 2.0},
            {"type": "discrete_laplace", "noise_parameter": 0.5, "sensitivity": 2},
            {"type": "discrete_gaussian", "sigma": 3.0, "sensitivity": 1},
            {"type": "randomized_response", "noise_parameter": 0.5, "num_buckets": 4},
            {"type": "epsilon_delta", "epsilon": 1.0, "delta": 1e-6},
            {"type": "epsilon_delta", "epsilon": 1.0, "delta": 0.0, "total_variation": 0.3},
            {"type": "gdp", "mu": 0.5},
            {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.0}},
            {"type": "sampled_without_replacement", "sample_size": 10, "population_size": 100,
             "event": {"type": "laplace", "noise_multiplier": 1.0}},
            {"type": "self_composed", "count": 100, "event": {"type": "gdp", "mu": 0.1}},
        ]});
        let e = Event::from_json(&v).unwrap();
        assert_eq!(Event::from_json(&e.to_json()).unwrap(), e);
        assert_eq!(e.invocations(), 110);
    }

    #[test]
    fn bad_parameters_are_rejected_with_their_path() {
        let e = err(json!({"type": "composed", "events": [
            {"type": "gdp", "mu": 1.0},
            {"type": "self_composed", "count": 3, "event": {"type": "gaussian", "noise_multiplier": -1.0}}
        ]}));
        assert_eq!(e.path, "$.events[1].event.noise_multiplier");
        assert!(e.reason.contains("> 0"), "{}", e.reason);
    }

    #[test]
    fn probabilities_outside_unit_interval_are_rejected() {
        let e = err(json!({"type": "poisson_sampled", "sampling_rate": 1.5,
                            "event": {"type": "gdp", "mu": 1}}));
        assert_eq!(e.path, "$.sampling_rate");
        let e = err(json!({"type": "epsilon_delta", "epsilon": 1, "delta": -0.1}));
        assert_eq!(e.path, "$.delta");
    }

    #[test]
    fn count_zero_and_fractional_counts_are_rejected() {
        let e =
            err(json!({"type": "self_composed", "count": 0, "event": {"type": "gdp", "mu": 1}}));
        assert_eq!(e.path, "$.count");
        let e =
            err(json!({"type": "self_composed", "count": 2.5, "event": {"type": "gdp", "mu": 1}}));
        assert_eq!(e.path, "$.count");
    }

    #[test]
    fn unknown_types_and_fields_are_rejected() {
        let e = err(json!({"type": "exponential", "epsilon": 1}));
        assert_eq!(e.path, "$.type");
        assert!(e.reason.contains("known types are"), "{}", e.reason);
        let e = err(json!({"type": "gdp", "mu": 1, "sigma": 2}));
        assert_eq!(e.path, "$.sigma");
        let e = err(json!({"mu": 1}));
        assert_eq!(e.path, "$.type");
        assert_eq!(e.reason, "is required");
    }

    #[test]
    fn non_numbers_are_rejected() {
        let e = err(json!({"type": "gdp", "mu": "1"}));
        assert_eq!(e.path, "$.mu");
        assert!(e.reason.contains("a string"), "{}", e.reason);
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_rejected() {
        let mut v = json!({"type": "gdp", "mu": 1});
        for _ in 0..MAX_EVENT_DEPTH {
            v = json!({"type": "self_composed", "count": 2, "event": v});
        }
        let e = err(v);
        assert!(e.reason.contains("nested"), "{}", e.reason);
        assert!(e.path.starts_with("$.event.event"), "{}", e.path);
    }

    #[test]
    fn sample_larger_than_population_is_rejected() {
        let e = err(
            json!({"type": "sampled_without_replacement", "sample_size": 11,
                            "population_size": 10, "event": {"type": "gdp", "mu": 1}}),
        );
        assert_eq!(e.path, "$.sample_size");
    }
}

//! A run's batch sampler, declared by what it does (batch size, dataset size) rather than by the
//! rate the caller computed: the rate is derived here and checked against the step's event.
//!
//! Why: the sampling rate is where practice most often goes wrong. Opacus #813 (2026) found a
//! weighted sampler whose real per-record rate was 781× to 45,000× the one accounted; a rate typed
//! by hand (q = 0.01 for batches of 256 from 60,000 records, where q = 0.00427) under-accounts
//! silently. With a declared sampler the service refuses a step whose stated rate is below the
//! sampler's, and accounts a rate stated within rounding of it at the sampler's own rate, rounded
//! up.
//!
//! Samplers:
//! - `poisson` {expected_batch_size B, dataset_size N}: each record in each batch independently
//!   with q = B/N (Opacus' `UniformWithReplacementSampler`, jax_privacy's Poisson batching). Every
//!   `poisson_sampled` node of the step must state B/N (within [`RATE_REL`], for the caller's
//!   floating-point division) and is accounted at B/N rounded up. A rate above B/N is refused as
//!   well as one below: it is sound, but the step and the sampler then describe different runs,
//!   so one of them is not what runs.
//! - `without_replacement` {batch_size B, dataset_size N}: a uniformly random batch of exactly B
//!   of the N records each step; every `sampled_without_replacement` node must state sample_size B
//!   and population_size N.
//! - `shuffle` (one permutation per epoch, batches in order) is refused: no accountant can certify
//!   its privacy today; the known results are lower bounds (Chua et al., "How private are DP-SGD
//!   implementations?", ICML 2024, and "Scalable DP-SGD: shuffling vs. Poisson subsampling",
//!   NeurIPS 2024), which show shuffled batches accounted as Poisson can be far more loss than
//!   claimed. Use Poisson sampling (or fixed-size batches) and say so.
//!
//! A step without a sampled node is accounted without amplification (sound, and noted).

use super::event::{Count, Event, Probability, SHUFFLE_REFUSAL};
use super::json::{self, Fields, InputError, JsonPath};
use super::rounding;
use serde_json::Value;

/// How far below B/N a stated Poisson rate may be and still be taken as B/N computed in floating
/// point (the caller's division rounded to nearest, or printed with 15 digits): a relative 1e-12.
/// Below that the stated rate disagrees with the sampler and the declaration is refused.
pub const RATE_REL: f64 = 1e-12;

/// A declared sampler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    Poisson {
        expected_batch_size: Count,
        dataset_size: Count,
    },
    WithoutReplacement {
        batch_size: Count,
        dataset_size: Count,
    },
}

/// What checking a step against its sampler found, for the declaration's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerCheck {
    /// The sampler's per-record rate per step: B/N rounded up (Poisson), B/N (without
    /// replacement).
    pub rate: f64,
    /// Sampled nodes of the step checked against it.
    pub checked: usize,
    /// Notes: no sampled node at all (no amplification accounted).
    pub notes: Vec<String>,
}

impl Sampler {
    /// Parses `{"type": "poisson", "expected_batch_size", "dataset_size"}`,
    /// `{"type": "without_replacement", "batch_size", "dataset_size"}`; `shuffle` is refused with
    /// the reason (module docs).
    pub fn from_json(v: &Value, path: &JsonPath) -> Result<Sampler, InputError> {
        let mut f = Fields::new(v, path)?;
        let (t, tp) = f.required("type")?;
        let kind = json::string(t, &tp)?;
        fn count(f: &mut Fields<'_>, name: &'static str) -> Result<(Count, JsonPath), InputError> {
            let (x, p) = f.required(name)?;
            let n = json::integer(x, &p, 1)?;
            Ok((Count::new(n).map_err(|e| InputError::new(&p, e))?, p))
        }
        let s = match kind {
            "poisson" => {
                let (b, _) = count(&mut f, "expected_batch_size")?;
                let (n, np) = count(&mut f, "dataset_size")?;
                if b > n {
                    return Err(InputError::new(
                        &np,
                        format!(
                            "must be at least expected_batch_size ({}), got {}",
                            b.get(),
                            n.get()
                        ),
                    ));
                }
                Sampler::Poisson {
                    expected_batch_size: b,
                    dataset_size: n,
                }
            }
            "without_replacement" => {
                let (b, _) = count(&mut f, "batch_size")?;
                let (n, np) = count(&mut f, "dataset_size")?;
                if b > n {
                    return Err(InputError::new(
                        &np,
                        format!("must be at least batch_size ({}), got {}", b.get(), n.get()),
                    ));
                }
                Sampler::WithoutReplacement {
                    batch_size: b,
                    dataset_size: n,
                }
            }
            "shuffle" | "shuffling" | "permutation" => {
                return Err(InputError::new(&tp, SHUFFLE_REFUSAL))
            }
            other => {
                return Err(InputError::new(
                    &tp,
                    format!("must be \"poisson\" or \"without_replacement\", got {other:?}"),
                ))
            }
        };
        f.finish()?;
        Ok(s)
    }

    /// The per-record rate per step: B/N, rounded up for Poisson (the rate accounted).
    pub fn rate(self) -> f64 {
        match self {
            Sampler::Poisson {
                expected_batch_size: b,
                dataset_size: n,
            } => rounding::div_up(b.get() as f64, n.get() as f64).min(1.0),
            Sampler::WithoutReplacement {
                batch_size: b,
                dataset_size: n,
            } => b.get() as f64 / n.get() as f64,
        }
    }

    /// Checks `step` (the event at `path`) against the sampler and returns the step to account:
    /// each `poisson_sampled` rate within [`RATE_REL`] of B/N accounted at B/N rounded up.
    /// Refuses a stated rate further from the sampler's, a fixed-size node of another batch or
    /// dataset size, and a node of the other kind of sampling.
    pub fn apply(self, step: Event, path: &JsonPath) -> Result<(Event, SamplerCheck), InputError> {
        let mut check = SamplerCheck {
            rate: self.rate(),
            checked: 0,
            notes: Vec::new(),
        };
        let step = self.walk(step, path, &mut check)?;
        if check.checked == 0 {
            check.notes.push(
                "the step has no sampled event: it is accounted without amplification by \
                 sampling (sound, but the sampler saves nothing)"
                    .into(),
            );
        }
        Ok((step, check))
    }

    fn walk(
        self,
        e: Event,
        path: &JsonPath,
        check: &mut SamplerCheck,
    ) -> Result<Event, InputError> {
        Ok(match e {
            Event::PoissonSampled {
                sampling_rate,
                event,
            } => {
                let Sampler::Poisson {
                    expected_batch_size: b,
                    dataset_size: n,
                } = self
                else {
                    return Err(InputError::new(
                        path,
                        "is Poisson sampling, but the declared sampler draws fixed-size batches: \
                         account them as sampled_without_replacement",
                    ));
                };
                let stated = sampling_rate.get();
                let exact = b.get() as f64 / n.get() as f64;
                if (stated - exact).abs() > exact * RATE_REL {
                    // Below: every step under-accounted. Above: sound, but the step and the
                    // sampler describe different runs, so one of them is wrong (the issue behind
                    // Opacus #813 was a sampler that did not do what the accounting assumed).
                    return Err(InputError::new(
                        &path.field("sampling_rate"),
                        format!(
                            "is {stated}, but the declared sampler (expected batches of {} from {} \
                             records) samples each record with probability {exact:.6e}{}: the \
                             step and the sampler describe different runs. State the sampler's \
                             rate ({exact:.17e}), or declare the sampler that runs",
                            b.get(),
                            n.get(),
                            if stated < exact {
                                "; the stated rate would under-account every step"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
                // Within rounding of B/N: accounted at B/N rounded up (never below it).
                let rate = stated.max(check.rate);
                check.checked += 1;
                let inner = self.walk(*event, &path.field("event"), check)?;
                Event::PoissonSampled {
                    sampling_rate: Probability::new(rate)
                        .map_err(|e| InputError::new(&path.field("sampling_rate"), e))?,
                    event: Box::new(inner),
                }
            }
            Event::SampledWithoutReplacement {
                sample_size,
                population_size,
                event,
            } => {
                let Sampler::WithoutReplacement {
                    batch_size: b,
                    dataset_size: n,
                } = self
                else {
                    return Err(InputError::new(
                        path,
                        "is sampling without replacement, but the declared sampler is Poisson: \
                         account it as poisson_sampled",
                    ));
                };
                if sample_size != b || population_size != n {
                    return Err(InputError::new(
                        path,
                        format!(
                            "samples {} of {} records, but the declared sampler draws batches of \
                             {} from {}",
                            sample_size.get(),
                            population_size.get(),
                            b.get(),
                            n.get()
                        ),
                    ));
                }
                check.checked += 1;
                let inner = self.walk(*event, &path.field("event"), check)?;
                Event::SampledWithoutReplacement {
                    sample_size,
                    population_size,
                    event: Box::new(inner),
                }
            }
            Event::SelfComposed { count, event } => Event::SelfComposed {
                count,
                event: Box::new(self.walk(*event, &path.field("event"), check)?),
            },
            Event::Composed { events } => Event::Composed {
                events: events
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| self.walk(e, &path.field("events").index(i), check))
                    .collect::<Result<_, _>>()?,
            },
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(q: f64) -> Event {
        Event::from_json(&json!({"type": "poisson_sampled", "sampling_rate": q,
            "event": {"type": "gaussian", "noise_multiplier": 1.0}}))
        .unwrap()
    }

    fn poisson(b: u64, n: u64) -> Sampler {
        Sampler::from_json(
            &json!({"type": "poisson", "expected_batch_size": b, "dataset_size": n}),
            &JsonPath::root().field("sampler"),
        )
        .unwrap()
    }

    #[test]
    fn a_rate_typed_by_hand_is_refused_and_the_computed_one_accounted_rounded_up() {
        // The case: q = 0.01 declared for batches of 256 from 60,000 records, where the
        // sampler's rate is 256/60000 = 0.0042667: refused (the two describe different runs), and
        // so is the under-accounting q = 0.001; the error names the field.
        let s = poisson(256, 60_000);
        for q in [0.01, 0.001] {
            let err = s
                .apply(step(q), &JsonPath::root().field("event"))
                .unwrap_err();
            assert_eq!(err.path, "$.event.sampling_rate");
            assert!(err.reason.contains("different runs"), "{}", err.reason);
            assert_eq!(
                err.reason.contains("under-account"),
                q < 0.004,
                "{}",
                err.reason
            );
        }
        // B/N as the caller's float division: accounted at B/N rounded up, never below B/N.
        let fl = 256.0 / 60_000.0;
        let (e, c) = s.apply(step(fl), &JsonPath::root()).unwrap();
        let Event::PoissonSampled { sampling_rate, .. } = e else {
            panic!()
        };
        assert!(sampling_rate.get() >= fl && sampling_rate.get() == c.rate);
        assert!(c.notes.is_empty() && c.checked == 1);
        // Exactly: the rate accounted times N is at least B.
        assert!(c.rate * 60_000.0 >= 256.0);
    }

    #[test]
    fn fixed_size_batches_must_match_and_kinds_must_agree() {
        let wor = Sampler::from_json(
            &json!({"type": "without_replacement", "batch_size": 10, "dataset_size": 1000}),
            &JsonPath::root(),
        )
        .unwrap();
        let e = |m: u64, n: u64| {
            Event::from_json(&json!({"type": "self_composed", "count": 5, "event":
                {"type": "sampled_without_replacement", "sample_size": m, "population_size": n,
                 "event": {"type": "gaussian", "noise_multiplier": 1.0}}}))
            .unwrap()
        };
        assert!(wor.apply(e(10, 1000), &JsonPath::root()).is_ok());
        let err = wor.apply(e(10, 2000), &JsonPath::root()).unwrap_err();
        assert_eq!(err.path, "$.event");
        assert!(wor.apply(step(0.01), &JsonPath::root()).is_err());
        assert!(poisson(10, 1000)
            .apply(e(10, 1000), &JsonPath::root())
            .is_err());
    }

    #[test]
    fn shuffling_is_refused_with_what_to_use_instead() {
        let err = Sampler::from_json(
            &json!({"type": "shuffle"}),
            &JsonPath::root().field("sampler"),
        )
        .unwrap_err();
        assert_eq!(err.path, "$.sampler.type");
        assert!(err.reason.contains("cannot be certified") && err.reason.contains("poisson"));
        let err = Sampler::from_json(
            &json!({"type": "poisson", "expected_batch_size": 10, "dataset_size": 5}),
            &JsonPath::root(),
        )
        .unwrap_err();
        assert_eq!(err.path, "$.dataset_size");
    }

    #[test]
    fn a_shuffled_event_is_refused_with_the_same_reason() {
        let err = Event::from_json(&json!({"type": "shuffled", "event": {"type": "gaussian",
            "noise_multiplier": 1.0}}))
        .unwrap_err();
        assert_eq!(err.path, "$.type");
        assert_eq!(err.reason, SHUFFLE_REFUSAL);
    }

    #[test]
    fn an_unsampled_step_is_noted() {
        let g = Event::from_json(&json!({"type": "gaussian", "noise_multiplier": 1.0})).unwrap();
        let (_, c) = poisson(1, 10).apply(g, &JsonPath::root()).unwrap();
        assert_eq!(c.checked, 0);
        assert!(c.notes[0].contains("without amplification"));
    }
}

//! Seeded random requests over every event type, both relations, extreme parameters, checked
//! against the applicable oracle (and, where there is none, for panics). Reproducible: the seed is
//! printed on failure and can be set with `SOUNDNESS_SEED`; the number of cases with
//! `SOUNDNESS_CASES`. The run stops drawing new cases after [`TIME_BUDGET`] so the binary stays
//! within its time budget on a 2-core machine.

use crate::check::{run, truth, violations, Outcome};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Default seed (any value works; fixed so a failure reproduces).
const SEED: u64 = 0x5eed_0f50_0d20_2026;
/// Default number of cases.
const CASES: usize = 120;
/// Wall-clock budget for drawing and checking cases.
const TIME_BUDGET: Duration = Duration::from_secs(25);

/// xorshift64* (Vigna 2016): tiny, deterministic, good enough to spread test inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize].clone()
    }
    /// Log-uniform in [a, b].
    pub fn log_uniform(&mut self, a: f64, b: f64) -> f64 {
        (a.ln() + (b.ln() - a.ln()) * self.unit()).exp()
    }
}

fn leaf(r: &mut Rng, replace: bool) -> Value {
    match r.below(if replace { 7 } else { 6 }) {
        0 => json!({"type": "gaussian", "noise_multiplier": r.log_uniform(1e-3, 1e4)}),
        1 => {
            let mu = if r.below(3) == 0 {
                r.pick(&[1e-200, 1e-5, 40.0, 1e154])
            } else {
                r.log_uniform(0.01, 5.0)
            };
            json!({"type": "gdp", "mu": mu})
        }
        2 => json!({"type": "laplace", "noise_multiplier": r.log_uniform(0.01, 100.0)}),
        3 => json!({"type": "discrete_laplace", "noise_parameter": r.log_uniform(0.05, 5.0),
                    "sensitivity": 1 + r.below(5)}),
        4 => json!({"type": "discrete_gaussian", "sigma": r.log_uniform(0.5, 30.0),
                    "sensitivity": 1 + r.below(4)}),
        5 => {
            let eps = if r.below(4) == 0 {
                0.0
            } else {
                50.0 * r.unit()
            };
            let delta = r.pick(&[0.0, 1e-300, 1e-17, 1e-6, 0.3]);
            let mut e = json!({"type": "epsilon_delta", "epsilon": eps, "delta": delta});
            if r.below(3) == 0 {
                let u = r.unit();
                e["total_variation"] = json!(r.pick(&[0.0, delta, 0.5, u]));
            }
            e
        }
        _ => json!({"type": "randomized_response", "noise_parameter": r.log_uniform(1e-3, 1.0),
                    "num_buckets": r.pick(&[2, 3, 10, 100])}),
    }
}

pub fn event(r: &mut Rng, replace: bool, depth: u32) -> Value {
    if depth == 0 || r.below(2) == 0 {
        return leaf(r, replace);
    }
    match r.below(4) {
        0 => {
            let q = match r.below(5) {
                0 => 0.0,
                1 => 1.0,
                _ => r.log_uniform(1e-6, 1.0),
            };
            json!({"type": "poisson_sampled", "sampling_rate": q, "event": event(r, replace, depth - 1)})
        }
        1 => {
            let n = r.pick(&[10u64, 100, 1000]);
            let m = 1 + r.below(n);
            json!({"type": "sampled_without_replacement", "sample_size": m, "population_size": n,
                   "event": event(r, replace, depth - 1)})
        }
        2 => json!({"type": "self_composed", "count": r.pick(&[2u64, 3, 5, 10]),
                    "event": event(r, replace, depth - 1)}),
        _ => {
            json!({"type": "composed", "events": [event(r, replace, depth - 1), event(r, replace, depth - 1)]})
        }
    }
}

/// One random request.
pub fn request(r: &mut Rng) -> Value {
    let replace = r.below(2) == 0;
    let n_events = 1 + r.below(2);
    let events: Vec<Value> = (0..n_events).map(|_| event(r, replace, 2)).collect();
    let mut deltas = vec![r.pick(&[0.0, 1e-300, 1e-17, 1e-6, 0.3])];
    deltas.push(r.log_uniform(1e-12, 0.1));
    let epsilons = vec![r.pick(&[0.0, 0.5, 2.0]), 50.0 * r.unit()];
    let alphas = vec![r.log_uniform(1e-12, 0.5), r.unit()];
    json!({
        "events": events,
        "neighboring_relation": if replace { "replace_one" } else { "add_or_remove_one" },
        "grid_step": r.log_uniform(1e-4, 0.05),
        "delta_slack": r.pick(&[0.0, 1e-10, 1e-6, 1e-3]),
        "deltas": deltas, "epsilons": epsilons, "alphas": alphas,
    })
}

/// Random requests, each checked against its oracle; every violation is listed with its seed.
#[test]
fn random_requests_never_panic_and_never_contradict_the_oracles() {
    let seed = std::env::var("SOUNDNESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let cases = std::env::var("SOUNDNESS_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CASES);
    let mut r = Rng::new(seed);
    let start = Instant::now();
    let (mut checked, mut refused, mut no_oracle) = (0, 0, 0);
    let mut failures = Vec::new();
    for i in 0..cases {
        if start.elapsed() > TIME_BUDGET {
            break;
        }
        let req = request(&mut r);
        let verbose = std::env::var("SOUNDNESS_VERBOSE").is_ok();
        if verbose {
            eprintln!("case {i}: {req}");
        }
        let t0 = Instant::now();
        let outcome = run(&req);
        let t_run = t0.elapsed();
        let v = match outcome {
            Outcome::Panicked(p) => vec![format!("panicked: {p}")],
            Outcome::Refused(_) => {
                refused += 1;
                vec![]
            }
            Outcome::Report(rep) => {
                let verdict = std::panic::catch_unwind(|| match truth(&req) {
                    Ok(m) => Some(violations(&rep, &m)),
                    Err(_) => None,
                });
                match verdict {
                    Ok(Some(v)) => {
                        checked += 1;
                        v
                    }
                    Ok(None) => {
                        no_oracle += 1;
                        vec![]
                    }
                    Err(e) => vec![format!(
                        "THE ORACLE panicked (a defect of this suite): {}",
                        crate::equivalence::panic_text(e)
                    )],
                }
            }
        };
        if verbose {
            eprintln!(
                "  accountant {t_run:?}, total {:?}, {} violation(s)",
                t0.elapsed(),
                v.len()
            );
        }
        if !v.is_empty() {
            failures.push(format!(
                "case {i} (seed {seed}): {req}\n    {}",
                v.iter().take(6).cloned().collect::<Vec<_>>().join("\n    ")
            ));
        }
    }
    eprintln!(
        "random: seed {seed}, {checked} checked against an oracle, {no_oracle} without oracle, \
         {refused} refused, {} failing, {:?}",
        failures.len(),
        start.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} failing random case(s) (seed {seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

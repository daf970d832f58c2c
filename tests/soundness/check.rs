//! Runs the accountant on a request and compares every figure of its report with the oracle.
//!
//! The comparisons are exact against the oracle's rigorous brackets (which already include the
//! oracle's own error, see [`crate::hp::REL_TOL`] and each model):
//! - upper figures must be ≥ the bracket's lower end: ε(δ) (null = +∞) — checked as δ_true(ε) ≤ δ,
//!   which is equivalent for the continuous, non-increasing δ_true and needs no root finding —,
//!   δ(ε), advantage (= δ(0) = TV), TPR = 1 − f(α) (against f's upper end), β_upper, μ.upper,
//!   infinity_mass;
//! - lower figures must be ≤ the bracket's upper end: ε_lower (via δ_true(ε_lower) ≥ δ; null
//!   claims ε = +∞), δ_lower, advantage_lower, β (the sound end of the curve), μ.lower;
//! - a null μ claims that no finite μ holds within the slack: false if the true μ is finite;
//! - no panic.

use crate::hp;
use crate::oracle::{Model, Rel, X};

/// Relative slack on a reported f64 figure: 4 ulps (4·2^-53). A figure is an f64 and the true value
/// is generally not representable; a figure that is the truth correctly rounded the wrong way is
/// off by ≤ 1 ulp. Those ulp-level misses are real but are reported separately (run with
/// `SOUNDNESS_STRICT=1` to make the slack 0); everything above 4 ulps is a defect here.
pub const F64_REL_SLACK: f64 = 4.0 * f64::EPSILON / 2.0;

fn slack() -> f64 {
    if std::env::var("SOUNDNESS_STRICT").is_ok_and(|v| v == "1") {
        0.0
    } else {
        F64_REL_SLACK
    }
}

/// A reported upper figure `v` is below the truth whose lower end is `lo`.
fn upper_violated(lo: &X, v: f64) -> bool {
    if v.is_nan() {
        return true;
    }
    if v == f64::INFINITY {
        return false;
    }
    lo.gt_f64(v + v.abs() * slack())
}

/// A reported lower figure `v` is above the truth whose upper end is `hi`.
fn lower_violated(hi: &X, v: f64) -> bool {
    if v.is_nan() {
        return true;
    }
    if v == f64::NEG_INFINITY {
        return false;
    }
    if v == f64::INFINITY {
        return matches!(hi, X::Fin(_));
    }
    hi.lt_f64(v - v.abs() * slack())
}
use privacy_ledger::accountant::account::{account, AccountRequest};
use privacy_ledger::accountant::report::Report;
use serde_json::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub enum Outcome {
    Report(Box<Report>),
    /// A clean error (input or accountant).
    Refused(String),
    Panicked(String),
}

/// Runs `account` on a JSON request, catching panics.
pub fn run(req: &Value) -> Outcome {
    let r = catch_unwind(AssertUnwindSafe(|| match AccountRequest::from_json(req) {
        Err(e) => Err(format!("input error at {}: {}", e.path, e.reason)),
        Ok(r) => account(&r).map_err(|e| e.to_string()),
    }));
    match r {
        Ok(Ok(rep)) => Outcome::Report(Box::new(rep)),
        Ok(Err(e)) => Outcome::Refused(e),
        Err(p) => Outcome::Panicked(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into()),
        ),
    }
}

/// The relation named in a request.
pub fn relation(req: &Value) -> Rel {
    match req.get("neighboring_relation").and_then(Value::as_str) {
        Some("replace_one") => Rel::Replace,
        _ => Rel::AddRemove,
    }
}

/// The oracle of a request's events, if this suite has one.
pub fn truth(req: &Value) -> Result<Model, String> {
    let events = req
        .get("events")
        .and_then(Value::as_array)
        .ok_or("no events")?;
    crate::oracle::compose_all(events, relation(req))
}

fn opt(x: Option<f64>) -> String {
    x.map_or("null".into(), |v| format!("{v:e}"))
}

/// Every violation of the report against the model (empty = sound).
pub fn violations(rep: &Report, m: &Model) -> Vec<String> {
    let mut out = Vec::new();
    // ε(δ).
    for p in &rep.epsilon {
        let d = p.delta;
        if let Some(e) = p.epsilon.filter(|e| e.is_finite()) {
            let t = m.delta(e + e.abs() * slack());
            if t.lo.gt_f64(d) {
                out.push(format!(
                    "epsilon at delta={d:e}: reported {e:e} but the true delta at that epsilon is {} > {d:e} (true epsilon ≈ {:e})",
                    t.show(),
                    m.eps_estimate(d)
                ));
            }
        }
        match p.epsilon_lower {
            Some(e) if e > 0.0 && e.is_finite() => {
                // ε_lower > ε_true ⟺ some ε' < ε_lower already has δ_true(ε') ≤ δ (δ_true is
                // non-increasing); ε' = ε_lower less the f64 slack (strictly below it).
                let t = m.delta(e - e.abs() * slack().max(f64::EPSILON));
                if !t.hi.gt_f64(d) {
                    out.push(format!(
                        "epsilon_lower at delta={d:e}: reported {e:e} but the true delta just below it is {} ≤ {d:e} (true epsilon ≈ {:e})",
                        t.show(),
                        m.eps_estimate(d)
                    ));
                }
            }
            Some(_) => {}
            None if m.eps_is_infinite(d) => {}
            None => {
                if let Some(w) = m.finite_eps_witness(d) {
                    out.push(format!(
                        "epsilon_lower at delta={d:e}: reported null (+inf) but the true delta at epsilon={w:e} is {} ≤ {d:e}",
                        m.delta(w).show()
                    ));
                }
            }
        }
        if p.epsilon.is_some() && m.eps_is_infinite(d) {
            out.push(format!(
                "epsilon at delta={d:e}: reported {} but the true epsilon is +inf",
                opt(p.epsilon)
            ));
        }
    }
    // δ(ε).
    for p in &rep.delta {
        let t = m.delta(p.epsilon);
        if upper_violated(&t.lo, p.delta) {
            out.push(format!(
                "delta at epsilon={:e}: reported {:e} < true {}",
                p.epsilon,
                p.delta,
                t.show()
            ));
        }
        if lower_violated(&t.hi, p.delta_lower) {
            out.push(format!(
                "delta_lower at epsilon={:e}: reported {:e} > true {}",
                p.epsilon,
                p.delta_lower,
                t.show()
            ));
        }
    }
    // Advantage = TV = δ(0).
    let tv = m.delta(0.0);
    if upper_violated(&tv.lo, rep.advantage) {
        out.push(format!(
            "advantage: reported {:e} < true {}",
            rep.advantage,
            tv.show()
        ));
    }
    if lower_violated(&tv.hi, rep.advantage_lower) {
        out.push(format!(
            "advantage_lower: reported {:e} > true {}",
            rep.advantage_lower,
            tv.show()
        ));
    }
    // Trade-off curve (the requested α's and the Tier-II rows).
    for p in rep.tradeoff.iter().chain(&rep.tier2.rows) {
        let t = m.tradeoff(p.alpha);
        if lower_violated(&t.hi, p.beta) {
            out.push(format!(
                "beta at alpha={:e}: reported {:e} > true f(alpha) {}",
                p.alpha,
                p.beta,
                t.show()
            ));
        }
        if upper_violated(&t.lo, p.beta_upper) {
            out.push(format!(
                "beta_upper at alpha={:e}: reported {:e} < true f(alpha) {}",
                p.alpha,
                p.beta_upper,
                t.show()
            ));
        }
        if let X::Fin(hi) = &t.hi {
            // 1 − hi loses hi's own relative error (REL_TOL of a number near 1) as absolute error:
            // the difference is only known to within REL_TOL.
            let tpr_true_lo = hp::one() - hi - hp::f(hp::REL_TOL);
            if p.tpr.is_nan() || tpr_true_lo > hp::f(p.tpr + p.tpr.abs() * slack()) {
                out.push(format!(
                    "tpr at alpha={:e}: reported {:e} < true 1 − f(alpha) ≥ {}",
                    p.alpha,
                    p.tpr,
                    hp::show(&tpr_true_lo)
                ));
            }
        }
    }
    // Mass at +∞.
    let inf = m.inf_mass();
    if upper_violated(&inf.lo, rep.infinity_mass) {
        out.push(format!(
            "infinity_mass: reported {:e} < true {}",
            rep.infinity_mass,
            inf.show()
        ));
    }
    // μ.
    let s = rep.mu.delta_slack;
    let t = m.mu(s);
    match rep.mu.upper {
        Some(u) if !u.is_finite() && matches!(t.hi, X::Fin(_)) => out.push(format!(
            "mu.upper (slack {s:e}): reported {u} (serialised as null, with no reason) but the true mu is finite: {}",
            t.show()
        )),
        Some(u) => {
            if upper_violated(&t.lo, u) {
                out.push(format!(
                    "mu.upper (slack {s:e}): reported {u:e} < true mu {}",
                    t.show()
                ));
            }
        }
        None => {
            let reason = rep.mu.reason.clone().unwrap_or_default();
            if let X::Fin(_) = t.hi {
                out.push(format!(
                    "mu: reported null ({reason}) but the true mu (slack {s:e}) is finite: {}",
                    t.show()
                ));
            } else if reason.contains("unbounded privacy loss")
                && !matches!(t.lo, X::Inf)
                && !inf.hi.gt_f64(s)
            {
                out.push(format!(
                    "mu: reported null with a false reason ({reason}): the true mass at +inf is {} ≤ the slack {s:e}",
                    inf.show()
                ));
            }
        }
    }
    if let Some(l) = rep.mu.lower {
        if lower_violated(&t.hi, l) {
            out.push(format!(
                "mu.lower (slack {s:e}): reported {l:e} > true mu {}",
                t.show()
            ));
        }
    }
    out
}

/// Runs a request and checks it against its oracle. Returns the violations (a panic is one; a
/// clean refusal is none; no oracle: only the panic check).
pub fn check(req: &Value) -> Vec<String> {
    match run(req) {
        Outcome::Panicked(p) => vec![format!("panicked: {p}")],
        Outcome::Refused(_) => vec![],
        Outcome::Report(rep) => match truth(req) {
            Ok(m) => violations(&rep, &m),
            Err(_) => vec![],
        },
    }
}

/// Asserts that a request's report is sound, printing the request and every violation otherwise.
pub fn assert_sound(req: &Value) {
    assert_none(req, &check(req), || {
        truth(req).map_or_else(|e| format!("none ({e})"), |m| m.describe())
    });
}

/// [`assert_sound`] for a request that must be both answered and covered by an oracle (a refusal
/// or a missing oracle would make [`check`] pass vacuously).
pub fn assert_sound_against_an_oracle(req: &Value) {
    let model = truth(req).unwrap_or_else(|e| panic!("request {req} has no oracle: {e}"));
    assert_none(req, &violations(&report(req), &model), || model.describe());
}

/// Fails, printing the request, its oracle and the first violations, unless `v` is empty.
fn assert_none(req: &Value, v: &[String], oracle: impl FnOnce() -> String) {
    const SHOWN: usize = 40;
    assert!(
        v.is_empty(),
        "request {}\noracle: {}\n{} violation(s){}:\n  {}",
        req,
        oracle(),
        v.len(),
        if v.len() > SHOWN {
            format!(" (first {SHOWN})")
        } else {
            String::new()
        },
        v[..v.len().min(SHOWN)].join("\n  ")
    );
}

/// The report of a request (panics with the refusal otherwise).
pub fn report(req: &Value) -> Report {
    match run(req) {
        Outcome::Report(r) => *r,
        Outcome::Refused(e) => panic!("request {req} was refused: {e}"),
        Outcome::Panicked(p) => panic!("request {req} panicked: {p}"),
    }
}

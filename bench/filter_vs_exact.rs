//! μ under the adaptive filter against the exact (non-adaptive) composition, for the workloads of
//! the README and of `bench/compare.py`, and the δᵢ default sweep of `docs/filter.md` §9.
//!
//! `cargo run --release --example filter_vs_exact` (≈1 min on 2 cores). Each workload is charged as
//! units of different sizes: the filter's μ is √Σμᵢ² over the units' certificates (a fixed δ
//! rule: δ = 0 when it costs ≤ 0.1 % μ, else δ_B/1000), the exact composition's μ is the numerical
//! engine's upper bound at δ_B for the same events composed as one fixed sequence. The last table
//! counts the units a budget admits under that fixed rule and under the gate's own choice among a
//! unit's candidates (`Gate::choose`, `docs/filter.md` §9).

use privacy_ledger::accountant::certificate::{certify, Certificate, UnitDelta};
use privacy_ledger::accountant::composition::Composition;
use privacy_ledger::accountant::json::JsonPath;
use privacy_ledger::accountant::params::GridStep;
use privacy_ledger::accountant::{Event, NeighboringRelation};
use privacy_ledger::ledger::budget::Budget;
use privacy_ledger::ledger::filter::{FilterState, Gate, Verdict};
use serde_json::{json, Value};

const H: f64 = 1e-4;
const REL: NeighboringRelation = NeighboringRelation::AddOrRemoveOne;

fn ev(v: Value) -> Event {
    Event::from_json(&v).expect("a valid event")
}
fn g(s: f64) -> Value {
    json!({"type": "gaussian", "noise_multiplier": s})
}
fn l(b: f64) -> Value {
    json!({"type": "laplace", "noise_multiplier": b})
}
fn ps(q: f64, e: Value) -> Value {
    json!({"type": "poisson_sampled", "sampling_rate": q, "event": e})
}
fn sc(n: u64, e: Value) -> Value {
    if n == 1 {
        return e;
    }
    json!({"type": "self_composed", "count": n, "event": e})
}

fn certs(e: &Value, d: UnitDelta) -> Option<Vec<Certificate>> {
    certify(
        &ev(e.clone()),
        REL,
        GridStep::new(H).unwrap(),
        d,
        &JsonPath::root(),
    )
    .ok()
}

fn cert(e: &Value, d: UnitDelta) -> Option<Certificate> {
    certs(e, d).map(|c| c[0])
}

/// The fixed δ rule (the service's before the gate chose among candidates): δ = 0 when its fit is
/// within 0.1 % of the fit at δ_B/1000, else δ_B/1000.
fn fixed_rule(e: &Value, delta_b: f64) -> Option<Certificate> {
    let (z, c) = (
        cert(e, UnitDelta::Fixed(0.0)),
        cert(e, UnitDelta::Fixed(delta_b / 1000.0)),
    );
    match (z, c) {
        (Some(z), Some(c)) if z.mu() <= c.mu() * 1.001 => Some(z),
        (_, Some(c)) => Some(c),
        (z, None) => z,
    }
}

/// How many units of `e` the gate admits one after another on a fresh budget (μ_B, δ_B), each
/// charged `candidates` (at most `cap`).
fn admitted(candidates: &[Certificate], mu_b: f64, delta_b: f64, cap: u64) -> u64 {
    let mut gate = Gate {
        budget: Budget::new(mu_b, delta_b).unwrap(),
        state: FilterState::empty(),
        share: None,
    };
    let mut n = 0;
    while n < cap {
        match gate.choose(candidates).0 {
            Verdict::Admitted(s, _) => gate.state = s,
            Verdict::Rejected(..) => break,
        }
        n += 1;
    }
    n
}

/// (μ, δ) of the filter over `units` (each (event, how many identical units)).
fn filter(units: &[(Value, u64)], delta_b: f64) -> (f64, f64) {
    let (mut sq, mut d) = (0.0, 0.0);
    for (e, n) in units {
        let c = fixed_rule(e, delta_b).expect("certified");
        sq += *n as f64 * c.mu() * c.mu();
        d += *n as f64 * c.delta();
    }
    (sq.sqrt(), d)
}

/// μ (upper, at δ_B) of the exact composition of `events`.
fn exact(events: &[Value], delta_b: f64) -> f64 {
    let mut c = Composition::new(REL, GridStep::new(H).unwrap());
    for e in events {
        c.push(&ev(e.clone()), &JsonPath::root()).expect("composes");
    }
    c.guarantee()
        .unwrap()
        .mu(delta_b)
        .upper
        .unwrap_or(f64::INFINITY)
}

/// A T-step DP-SGD run in chunks of `chunk` steps (the last possibly shorter).
fn chunks(step: &Value, t: u64, chunk: u64) -> Vec<(Value, u64)> {
    let full = t / chunk;
    let mut u = vec![(sc(chunk, step.clone()), full)];
    if !t.is_multiple_of(chunk) {
        u.push((sc(t % chunk, step.clone()), 1));
    }
    u
}

fn main() {
    let q_cifar = 16384.0 / 50000.0;
    let runs = [
        (
            "De et al. CIFAR-10, q=0.328, sigma=9.4, T=2000",
            ps(q_cifar, g(9.4)),
            2000u64,
            1e-5,
        ),
        (
            "De et al. CIFAR-10, q=0.328, sigma=40, T=906",
            ps(q_cifar, g(40.0)),
            906,
            1e-5,
        ),
        (
            "Opacus, q=0.04, sigma=1.5, T=2250",
            ps(0.04, g(1.5)),
            2250,
            1e-5,
        ),
    ];
    println!("| workload | units | filter mu | filter delta | exact mu (fixed sequence) | ratio |");
    println!("|---|---|---|---|---|---|");
    for (name, step, t, delta_b) in &runs {
        let ex = exact(&[sc(*t, step.clone())], *delta_b);
        for k in [1u64, 4, 10, 100, *t] {
            let chunk = t.div_ceil(k);
            let (m, d) = filter(&chunks(step, *t, chunk), *delta_b);
            let label = if k == 1 {
                "1 (the run)".to_string()
            } else if k == *t {
                format!("{t} (each step)")
            } else {
                format!("{k} chunks of {chunk}")
            };
            println!(
                "| {name} | {label} | {m:.4} | {d:.1e} | {ex:.4} | {:.2} |",
                m / ex
            );
        }
    }
    // 100 Laplace counts, b = 10.
    let lap = l(10.0);
    let ex = exact(&[sc(100, lap.clone())], 1e-5);
    for (label, units) in [
        ("1 (all 100)", vec![(sc(100, lap.clone()), 1)]),
        ("100 (each count)", vec![(lap.clone(), 100)]),
    ] {
        let (m, d) = filter(&units, 1e-5);
        println!(
            "| 100 Laplace counts, b=10 | {label} | {m:.4} | {d:.1e} | {ex:.4} | {:.2} |",
            m / ex
        );
    }
    // The mixed platform ledger of bench/compare.py.
    let parts = [
        sc(100, ps(5e-3, g(0.8))),
        sc(200, g(8.0)),
        sc(100, lap.clone()),
    ];
    let ex = exact(&parts, 1e-6);
    let (m, d) = filter(
        &parts.iter().map(|p| (p.clone(), 1)).collect::<Vec<_>>(),
        1e-6,
    );
    println!("| mixed ledger (100 DP-SGD steps, 200 Gaussians, 100 Laplace) | 3 | {m:.4} | {d:.1e} | {ex:.4} | {:.2} |", m / ex);
    let each = [(ps(5e-3, g(0.8)), 100), (g(8.0), 200), (lap.clone(), 100)];
    let (m, d) = filter(&each, 1e-6);
    println!(
        "| mixed ledger | 400 (each event) | {m:.4} | {d:.1e} | {ex:.4} | {:.2} |",
        m / ex
    );

    println!();
    println!(
        "| unit | mu at delta=0 | mu at dB/100 | mu at dB/1000 | mu at dB/10000 | auto (dB/1000) |"
    );
    println!("|---|---|---|---|---|---|");
    let delta_b = 1e-5;
    let units = [
        ("DP-SGD step, q=0.328, sigma=9.4", ps(q_cifar, g(9.4))),
        (
            "DP-SGD run, q=0.328, sigma=9.4, T=2000",
            sc(2000, ps(q_cifar, g(9.4))),
        ),
        (
            "DP-SGD chunk, q=0.04, sigma=1.5, 225 steps",
            sc(225, ps(0.04, g(1.5))),
        ),
        ("DP-SGD step, q=0.01, sigma=1.0", ps(0.01, g(1.0))),
        ("Laplace, b=10", lap.clone()),
        ("100 Laplace, b=10", sc(100, lap.clone())),
    ];
    for (name, u) in &units {
        let at = |d: f64| {
            cert(u, UnitDelta::Fixed(d)).map_or("none".to_string(), |c| format!("{:.4}", c.mu()))
        };
        let auto = fixed_rule(u, delta_b).unwrap();
        println!(
            "| {name} | {} | {} | {} | {} | mu {:.4}, delta {:e} |",
            at(0.0),
            at(delta_b / 100.0),
            at(delta_b / 1000.0),
            at(delta_b / 10000.0),
            auto.mu(),
            auto.delta()
        );
    }

    println!();
    println!("| unit | budget (mu_B, delta_B) | admitted, fixed rule | admitted, gate's choice | candidates (mu, delta) |");
    println!("|---|---|---|---|---|");
    let workloads = [
        (
            "DP-SGD step, q=0.01, sigma=1.0",
            ps(0.01, g(1.0)),
            1.0,
            1e-5,
        ),
        (
            "DP-SGD step, q=0.01, sigma=1.0",
            ps(0.01, g(1.0)),
            3.0,
            1e-6,
        ),
        (
            "DP-SGD chunk, q=0.04, sigma=1.5, 225 steps",
            sc(225, ps(0.04, g(1.5))),
            2.0,
            1e-5,
        ),
        (
            "DP-SGD chunk, q=0.328, sigma=9.4, 200 steps",
            sc(200, ps(q_cifar, g(9.4))),
            2.0,
            1e-5,
        ),
        ("100 Laplace, b=10", sc(100, lap.clone()), 5.0, 1e-8),
    ];
    for (name, u, mu_b, delta_b) in &workloads {
        let fixed = fixed_rule(u, *delta_b).expect("certified");
        let all = certs(u, UnitDelta::Auto(delta_b / 1000.0)).expect("certified");
        let listed: Vec<String> = all
            .iter()
            .map(|c| format!("({:.4}, {:e})", c.mu(), c.delta()))
            .collect();
        println!(
            "| {name} | ({mu_b}, {delta_b:e}) | {} | {} | {} |",
            admitted(&[fixed], *mu_b, *delta_b, 1_000_000),
            admitted(&all, *mu_b, *delta_b, 1_000_000),
            listed.join(", ")
        );
    }
}

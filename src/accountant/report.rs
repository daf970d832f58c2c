//! The report: one shape for every caller (the `account` command, the HTTP API).
//!
//! A report states what was spent in the terms the research asks for (Gomez et al., "(ε,δ) considered harmful", "Tier I/II"):
//! μ-GDP with its fit (regret) and δ slack, ε at chosen δ, δ at chosen ε, the trade-off curve f(α)
//! next to G_μ(α), membership-inference risk (advantage, TPR at FPR), the Tier-II table of Gomez et al. ("(ε,δ) considered harmful"), and
//! the CLT figure labelled approximate. Every figure is a bracket `[lower, upper]`: the plain field
//! (`epsilon`, `delta`, `beta`'s lower bound, `mu.upper`, `advantage`) is the sound one; the other end
//! shows how tight it is.

use super::event::EVENT_MODEL_VERSION;
use super::guarantee::{Guarantee, Method, MuReport};
use super::params::*;
use super::rounding;
use super::{gdp, NeighboringRelation};
use serde::Serialize;

/// ε at one δ.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpsilonPoint {
    pub delta: f64,
    /// Upper bound (sound); null means +∞ (no finite ε at this δ).
    pub epsilon: Option<f64>,
    pub epsilon_lower: Option<f64>,
}

/// δ at one ε.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeltaPoint {
    pub epsilon: f64,
    /// Upper bound (sound).
    pub delta: f64,
    pub delta_lower: f64,
}

/// The trade-off curve at one α.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TradeoffPoint {
    pub alpha: f64,
    /// Lower bound on f(α) (sound): any attack with false-positive rate α misses at least this often.
    pub beta: f64,
    pub beta_upper: f64,
    /// Upper bound on the attack's true-positive rate at FPR = α: 1 − f(α).
    pub tpr: f64,
    /// The certified fit at α, (1 − s)·G_μ(α/(1 − s)) at the reported μ and δ slack s (G_μ(α) when
    /// s = 0; null when μ is), for comparison: ≤ beta by construction.
    pub gdp_beta: Option<f64>,
}

/// The Tier-II table of Gomez et al. ("(ε,δ) considered harmful"): f at fixed small α plus α*.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tier2 {
    /// α* = the α attaining the largest advantage.
    pub alpha_star: f64,
    pub rows: Vec<TradeoffPoint>,
}

/// The CLT approximation, reported for comparison only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CltReport {
    /// Always true: a limit theorem, not a bound; never used to admit a charge.
    pub approximate: bool,
    /// μ = 2‖kl‖₁/√(‖κ₂‖₁ − ‖kl‖₂²) (DRS22 Thm. 5).
    pub mu: f64,
    /// Berry–Esseen γ (DRS22 Thm. 5).
    pub gamma: f64,
    /// Whether γ < 1/2, so the theorem's band G_μ(α+γ) − γ ≤ f(α) ≤ G_μ(α−γ) + γ holds.
    pub berry_esseen_applies: bool,
}

/// One (ε, δ) pair for a group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupPoint {
    pub epsilon: f64,
    pub delta: f64,
}

/// What the guarantee gives datasets that differ in `size` records (each step one neighbour of the
/// ledger's relation).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupReport {
    pub size: u64,
    /// k·μ, when the guarantee is μ-GDP with no δ slack: G_μ-DP implies G_{kμ}-DP for groups of k
    /// (Dong, Roth & Su, "Gaussian differential privacy", Thm. 2.14 with 1 − (1 − G_μ)^{∘k} =
    /// G_{kμ}); rounded up. Null otherwise (with a δ part the group curve is not of that form).
    pub mu: Option<f64>,
    /// For each finite (ε, δ) of `epsilon`: (kε, δ·(e^{kε} − 1)/(e^ε − 1)) (kδ at ε = 0), both
    /// rounded up (chaining the (ε, δ) inequality k times through neighbouring datasets; at most
    /// k·e^{(k−1)ε}·δ, the usual statement). Pairs whose δ reaches 1 are left out.
    pub epsilon: Vec<GroupPoint>,
    /// When the guarantee is G_μ ⊗ f_{0,δ} with δ > 0 (the filter's): the group's trade-off is at
    /// least G_{kμ}(α) − δ_k, i.e. its δ(ε) is at most δ_k + δ_{kμ}(ε) (Dong, Roth & Su Thm 2.14;
    /// [`super::gdp::group_delta`]). The δ part grows much faster than k·δ.
    pub gdp: Option<GroupGdp>,
}

/// A group's GDP statement with its additive δ part: f_group(α) ≥ G_μ(α) − δ.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupGdp {
    /// kμ, rounded up.
    pub mu: f64,
    /// δ_k, rounded up.
    pub delta: f64,
}

/// The group report from the (sound) upper figures; `filter` is the guarantee's (μ, δ) when it is
/// G_μ ⊗ f_{0,δ}.
fn group_report(
    k: u64,
    mu0: Option<f64>,
    filter: Option<(f64, f64)>,
    points: &[EpsilonPoint],
) -> GroupReport {
    let kf = k as f64;
    GroupReport {
        size: k,
        gdp: filter.filter(|(_, d)| *d > 0.0).map(|(mu, d)| GroupGdp {
            mu: super::gdp::group(mu, k),
            delta: super::gdp::group_delta(mu, d, k),
        }),
        mu: mu0
            .map(|m| rounding::mul_up(m, kf))
            .filter(|m| m.is_finite()),
        epsilon: points
            .iter()
            .filter_map(|p| {
                let e = p.epsilon?;
                let ek = rounding::mul_up(e, kf);
                let factor = if e == 0.0 {
                    kf
                } else {
                    // (e^{kε} − 1)/(e^ε − 1): numerator up, denominator down (expm1 within 1 ulp;
                    // 2U covers it, 4U the quotient).
                    rounding::up(
                        rounding::up(ek.exp_m1(), rounding::ULP_REL)
                            / rounding::down(e.exp_m1(), rounding::ULP_REL),
                        rounding::ARITH2_REL,
                    )
                };
                // One product, with a 2× margin.
                let dk = rounding::up(p.delta * factor, rounding::ARITH2_REL);
                (ek.is_finite() && dk < 1.0).then_some(GroupPoint {
                    epsilon: ek,
                    delta: dk,
                })
            })
            .collect(),
    }
}

/// Accountant identification, so a report can be reproduced.
/// Every figure of a report but μ, read off a guarantee (computed beside μ: see [`Report::build`]).
/// The trade-off rows are (α, β lower, β upper, TPR) until μ's fitted curve joins them.
struct Readings {
    epsilon: Vec<EpsilonPoint>,
    delta: Vec<DeltaPoint>,
    advantage: (f64, f64),
    tradeoff: Vec<(f64, f64, f64, f64)>,
    alpha_star: f64,
    tier2: Vec<(f64, f64, f64, f64)>,
    group: Option<GroupReport>,
}

impl Readings {
    fn of(g: &dyn Guarantee, opts: &ReportOptions) -> Self {
        let row = |alpha: f64| {
            let ((lo, hi), tpr) = g.beta_and_tpr(alpha);
            (alpha, lo, hi, tpr)
        };
        let alpha_star = g.alpha_star();
        let mut tier2_alphas = TIER2_ALPHAS.to_vec();
        tier2_alphas.push(alpha_star);
        let epsilon: Vec<EpsilonPoint> = opts
            .deltas
            .iter()
            .map(|d| {
                let d = d.get();
                let (lo, hi) = g.epsilon_bounds(d);
                EpsilonPoint {
                    delta: d,
                    epsilon: finite(hi),
                    epsilon_lower: finite(lo),
                }
            })
            .collect();
        let group = opts
            .group_size
            .map(|k| group_report(k, g.mu_upper(0.0), g.gdp_with_delta(), &epsilon));
        Readings {
            delta: opts
                .epsilons
                .iter()
                .map(|e| {
                    let e = e.get();
                    let (lo, hi) = g.delta_bounds(e);
                    DeltaPoint {
                        epsilon: e,
                        delta: hi,
                        delta_lower: lo,
                    }
                })
                .collect(),
            advantage: g.delta_bounds(0.0),
            tradeoff: opts.alphas.iter().map(|a| row(a.get())).collect(),
            tier2: tier2_alphas.into_iter().map(row).collect(),
            alpha_star,
            epsilon,
            group,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccountantInfo {
    pub name: &'static str,
    pub version: &'static str,
    pub event_model_version: u32,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub method: Method,
    pub neighboring_relation: NeighboringRelation,
    pub mu: MuReport,
    pub epsilon: Vec<EpsilonPoint>,
    pub delta: Vec<DeltaPoint>,
    /// Upper bound on the largest membership-inference advantage (TPR − FPR), = δ(0) = η-TV.
    pub advantage: f64,
    pub advantage_lower: f64,
    pub tradeoff: Vec<TradeoffPoint>,
    pub tier2: Tier2,
    /// Probability of unbounded privacy loss (moved there, never dropped).
    pub infinity_mass: f64,
    pub clt: Option<CltReport>,
    /// Number of mechanism invocations in the composition.
    pub invocations: u64,
    /// With a group size in the request: what the guarantee gives a group of that many records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupReport>,
    pub accountant: AccountantInfo,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

impl Report {
    /// Builds the report of a composed guarantee.
    pub fn build(
        g: &dyn Guarantee,
        relation: NeighboringRelation,
        invocations: u64,
        opts: &ReportOptions,
    ) -> Report {
        // μ (its fit, lower bound and regret: the costliest figures) on one core, every other
        // reading on the other; only the fitted curve's column waits for μ. (Closed forms take
        // microseconds, less than starting a thread.)
        let (mu, rest) = if g.method() == Method::Pld {
            super::pld::both(|| g.mu(opts.delta_slack.get()), || Readings::of(g, opts))
        } else {
            (g.mu(opts.delta_slack.get()), Readings::of(g, opts))
        };
        let point = |(alpha, lo, hi, tpr): (f64, f64, f64, f64)| TradeoffPoint {
            alpha,
            beta: lo,
            beta_upper: hi,
            tpr,
            // The certified fit G_μ ⊗ f_{0,s}: (1 − s)·G_μ(α/(1 − s)) (0 past α = 1 − s),
            // rounded down like G_μ itself.
            gdp_beta: mu.upper.map(|m| {
                let w = 1.0 - mu.delta_slack;
                if mu.delta_slack == 0.0 {
                    gdp::tradeoff(m, alpha)
                } else if alpha >= w {
                    0.0
                } else {
                    let g = w * gdp::tradeoff(m, rounding::div_up(alpha, w).min(1.0));
                    rounding::prob_down(g, rounding::ARITH4_REL) // 1 − s and the product
                }
            }),
        };
        let Readings {
            epsilon,
            delta,
            advantage: (adv_lo, adv_hi),
            tradeoff,
            alpha_star,
            tier2,
            group,
        } = rest;
        Report {
            method: g.method(),
            neighboring_relation: relation,
            epsilon,
            delta,
            advantage: adv_hi,
            advantage_lower: adv_lo,
            tradeoff: tradeoff.into_iter().map(point).collect(),
            tier2: Tier2 {
                alpha_star,
                rows: tier2.into_iter().map(point).collect(),
            },
            infinity_mass: g.infinity_mass(),
            clt: g
                .clt_sums()
                .and_then(|s| s.berry_esseen())
                .map(|be| CltReport {
                    approximate: true,
                    mu: be.mu,
                    gamma: be.gamma,
                    berry_esseen_applies: be.applies(),
                }),
            invocations,
            group,
            accountant: AccountantInfo {
                name: env!("CARGO_PKG_NAME"),
                version: env!("CARGO_PKG_VERSION"),
                event_model_version: EVENT_MODEL_VERSION,
            },
            mu,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::account::{account, AccountRequest};
    use serde_json::json;

    /// A μ = 1 GDP mechanism for groups of 3: k·μ = 3 (G_μ ⇒ G_{kμ}), and each group (ε, δ) pair
    /// holds for the true group curve G_3 (Dong, Roth & Su, closed form δ_{G_3}(ε)), the
    /// independent oracle; the pairs are also no looser than the textbook k·e^{(k−1)ε}·δ.
    #[test]
    fn group_privacy_of_gdp_holds_for_the_exact_group_curve() {
        let req = json!({"events": [{"type": "gdp", "mu": 1.0}], "group_size": 3,
                         "deltas": [1e-3, 1e-5, 1e-10]});
        let r = account(&AccountRequest::from_json(&req).unwrap()).unwrap();
        let g = r.group.unwrap();
        assert_eq!(g.size, 3);
        let mu = g.mu.unwrap();
        assert!((3.0..=3.0 * (1.0 + 1e-15)).contains(&mu), "{mu}");
        assert_eq!(g.epsilon.len(), 3);
        for (p, q) in g.epsilon.iter().zip(&r.epsilon) {
            let (e, d) = (q.epsilon.unwrap(), q.delta);
            assert!(p.epsilon >= 3.0 * e && p.epsilon <= 3.0 * e * (1.0 + 1e-15));
            let exact = gdp::delta_for_epsilon(3.0, p.epsilon);
            assert!(exact <= p.delta, "{p:?}: G_3 has δ {exact}");
            assert!(
                p.delta <= 3.0 * (2.0 * e).exp() * d * (1.0 + 1e-12),
                "{p:?}"
            );
        }
        // At δ = 1e-2 (ε ≈ 2.3) the group δ would exceed 1: the pair is left out.
        let req =
            json!({"events": [{"type": "gdp", "mu": 1.0}], "group_size": 3, "deltas": [1e-2]});
        let r = account(&AccountRequest::from_json(&req).unwrap()).unwrap();
        assert!(r.group.unwrap().epsilon.is_empty());
        // A filter-like guarantee with a δ part has no group μ; and group_size is checked.
        let req = json!({"events": [{"type": "epsilon_delta", "epsilon": 1.0, "delta": 1e-6}],
                         "group_size": 2, "deltas": [1e-5]});
        let r = account(&AccountRequest::from_json(&req).unwrap()).unwrap();
        let g = r.group.unwrap();
        assert!(g.mu.is_none());
        let e = AccountRequest::from_json(&json!({"events": [], "group_size": 0})).unwrap_err();
        assert_eq!(e.path, "$.group_size");
        let e = AccountRequest::from_json(&json!({"events": [], "group_size": 10001})).unwrap_err();
        assert_eq!(e.path, "$.group_size");
    }
}

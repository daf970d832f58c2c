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
use super::rounding::{self, U};
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

/// Accountant identification, so a report can be reproduced.
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
        let mu = g.mu(opts.delta_slack.get());
        let point = |alpha: f64| {
            let (lo, hi) = g.beta_bounds(alpha);
            TradeoffPoint {
                alpha,
                beta: lo,
                beta_upper: hi,
                tpr: g.tpr(alpha),
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
                        rounding::prob_down(g, 4.0 * U)
                    }
                }),
            }
        };
        let alpha_star = g.alpha_star();
        let mut tier2_alphas = TIER2_ALPHAS.to_vec();
        tier2_alphas.push(alpha_star);
        let (adv_lo, adv_hi) = g.delta_bounds(0.0);
        Report {
            method: g.method(),
            neighboring_relation: relation,
            epsilon: opts
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
                .collect(),
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
            advantage: adv_hi,
            advantage_lower: adv_lo,
            tradeoff: opts.alphas.iter().map(|a| point(a.get())).collect(),
            tier2: Tier2 {
                alpha_star,
                rows: tier2_alphas.into_iter().map(point).collect(),
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
            accountant: AccountantInfo {
                name: env!("CARGO_PKG_NAME"),
                version: env!("CARGO_PKG_VERSION"),
                event_model_version: EVENT_MODEL_VERSION,
            },
            mu,
        }
    }
}

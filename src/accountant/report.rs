//! The report: one shape for every caller (the `account` command, the HTTP API).
//!
//! A report states what was spent in the terms the research asks for (Gomez et al., "(ε,δ) considered harmful", "Tier I/II"):
//! μ-GDP with its fit (regret) and δ slack, ε at chosen δ, δ at chosen ε, the trade-off curve f(α)
//! next to G_μ(α), membership-inference risk (advantage, TPR at FPR), the Tier-II table of Gomez et al. ("(ε,δ) considered harmful"), and
//! the CLT figure labelled approximate. Every figure is a bracket `[lower, upper]`: the plain field
//! (`epsilon`, `delta`, `beta`'s lower bound, `mu.upper`, `advantage`) is the sound one; the other end
//! shows how tight it is.

use super::analytic::GdpComposition;
use super::clt::CltSums;
use super::composition::Composition;
use super::event::{Event, EVENT_MODEL_VERSION};
use super::json::{self, Fields, InputError, JsonPath};
use super::rounding::{self, U};
use super::{gdp, pld, AccountantError, NeighboringRelation};
use serde::Serialize;
use serde_json::Value;

/// The δ slack used when the caller gives none: the δ that +∞ privacy-loss mass (probability of a
/// total privacy failure) may use before μ is declared unavailable. Budgets use the same default.
/// It is at most 1e-10 and far above the numerical engine's own tail truncation.
pub const DEFAULT_DELTA_SLACK: f64 = 1e-10;

/// Largest δ slack a caller may choose (beyond this a "μ-GDP" statement would hide a real failure
/// probability).
pub const MAX_DELTA_SLACK: f64 = 1e-3;

/// Default δ values at which ε is reported.
pub const DEFAULT_DELTAS: &[f64] = &[1e-3, 1e-5, 1e-6, 1e-9];

/// Default ε values at which δ is reported.
pub const DEFAULT_EPSILONS: &[f64] = &[0.0, 0.5, 1.0, 2.0, 4.0, 8.0];

/// Default α values at which the trade-off curve is reported.
pub const DEFAULT_ALPHAS: &[f64] = &[
    1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9,
];

/// The α values of the Tier-II table of Gomez et al. ("(ε,δ) considered harmful") (α* is appended per report).
pub const TIER2_ALPHAS: &[f64] = &[1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1];

/// Most points a caller may ask for in each of `deltas`, `epsilons` and `alphas`.
pub const MAX_POINTS: usize = 1000;

/// What to report and how (validated).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    pub deltas: Vec<f64>,
    pub epsilons: Vec<f64>,
    pub alphas: Vec<f64>,
    pub delta_slack: f64,
    /// Grid step h of the numerical engine (ignored by analytic compositions).
    pub grid_step: f64,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            deltas: DEFAULT_DELTAS.to_vec(),
            epsilons: DEFAULT_EPSILONS.to_vec(),
            alphas: DEFAULT_ALPHAS.to_vec(),
            delta_slack: DEFAULT_DELTA_SLACK,
            grid_step: pld::DEFAULT_GRID_STEP,
        }
    }
}

/// Checks a δ query point.
pub fn check_delta(x: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("must be a number in [0, 1], got {x}"))
    }
}

/// Checks an ε query point.
pub fn check_epsilon(x: f64) -> Result<f64, String> {
    if (0.0..=1e6).contains(&x) {
        Ok(x)
    } else {
        Err(format!("must be a number in [0, 1e6], got {x}"))
    }
}

/// Checks an α query point.
pub fn check_alpha(x: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("must be a number in [0, 1], got {x}"))
    }
}

/// Checks a grid step.
pub fn check_grid_step(x: f64) -> Result<f64, String> {
    if (pld::MIN_GRID_STEP..=pld::MAX_GRID_STEP).contains(&x) {
        Ok(x)
    } else {
        Err(format!(
            "must be a number in [{:e}, {}], got {x}",
            pld::MIN_GRID_STEP,
            pld::MAX_GRID_STEP
        ))
    }
}

/// Checks a δ slack.
pub fn check_delta_slack(x: f64) -> Result<f64, String> {
    if (0.0..=MAX_DELTA_SLACK).contains(&x) {
        Ok(x)
    } else {
        Err(format!(
            "must be a number in [0, {MAX_DELTA_SLACK}], got {x}"
        ))
    }
}

/// The input of `privacy-ledger account` (and of the stateless compose endpoint).
#[derive(Debug, Clone, PartialEq)]
pub struct AccountRequest {
    pub events: Vec<Event>,
    pub neighboring_relation: NeighboringRelation,
    pub options: ReportOptions,
}

impl AccountRequest {
    /// Parses `{"events": [...], "neighboring_relation", "deltas", "epsilons", "alphas", "delta_slack"}`.
    pub fn from_json(v: &Value) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let (ev, p) = f.required("events")?;
        let items = json::array(ev, &p)?;
        if items.len() > super::event::MAX_EVENT_NODES {
            return Err(InputError::new(
                &p,
                format!(
                    "has {} events; at most {} are allowed",
                    items.len(),
                    super::event::MAX_EVENT_NODES
                ),
            ));
        }
        let events = items
            .iter()
            .enumerate()
            .map(|(i, e)| super::dp_event::parse_any_event(e, &p.index(i)))
            .collect::<Result<Vec<Event>, InputError>>()?;
        let neighboring_relation = match f.optional("neighboring_relation") {
            None => NeighboringRelation::default(),
            Some((x, p)) => {
                let s = json::string(x, &p)?;
                NeighboringRelation::parse(s).ok_or_else(|| {
                    InputError::new(
                        &p,
                        format!("must be \"add_or_remove_one\" or \"replace_one\", got {s:?}"),
                    )
                })?
            }
        };
        let mut options = ReportOptions::default();
        if let Some((x, p)) = f.optional("deltas") {
            options.deltas = json::number_list(x, &p, MAX_POINTS, check_delta)?;
        }
        if let Some((x, p)) = f.optional("epsilons") {
            options.epsilons = json::number_list(x, &p, MAX_POINTS, check_epsilon)?;
        }
        if let Some((x, p)) = f.optional("alphas") {
            options.alphas = json::number_list(x, &p, MAX_POINTS, check_alpha)?;
        }
        if let Some((x, p)) = f.optional("delta_slack") {
            options.delta_slack =
                check_delta_slack(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))?;
        }
        if let Some((x, p)) = f.optional("grid_step") {
            options.grid_step =
                check_grid_step(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))?;
        }
        f.finish()?;
        Ok(AccountRequest {
            events,
            neighboring_relation,
            options,
        })
    }
}

/// How the figures were computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Closed forms (μ-GDP composition): exact up to floating-point rounding.
    Analytic,
    /// Privacy-loss distributions composed numerically.
    Pld,
}

/// A composed privacy guarantee the report can query. Every method returns a bracket
/// `(lower, upper)` around the exact value; `upper` (or `lower` for β) is the sound end.
pub trait Guarantee {
    /// The computation method.
    fn method(&self) -> Method;
    /// ε(δ) bracket (+∞ allowed).
    fn epsilon_bounds(&self, delta: f64) -> (f64, f64);
    /// δ(ε) bracket.
    fn delta_bounds(&self, eps: f64) -> (f64, f64);
    /// β = f(α) bracket of the (symmetrised) trade-off curve.
    fn beta_bounds(&self, alpha: f64) -> (f64, f64);
    /// μ fit for a δ slack.
    fn mu(&self, delta_slack: f64) -> MuReport;
    /// Probability mass at +∞ privacy loss (0 when none).
    fn infinity_mass(&self) -> f64;
    /// The CLT sums, when every component has functionals.
    fn clt_sums(&self) -> Option<CltSums>;
    /// Upper bound on the TPR of an attack at this FPR: 1 − f(FPR), rounded up (1 − β is exact
    /// for β ≥ ½ and within an ulp below).
    fn tpr(&self, fpr: f64) -> f64 {
        super::rounding::prob_up(1.0 - self.beta_bounds(fpr).0, U)
    }
    /// The α maximising 1 − α − f(α) (where the best advantage is attained).
    fn alpha_star(&self) -> f64 {
        (1.0 - self.delta_bounds(0.0).1) / 2.0
    }
}

/// μ-GDP summary: the smallest μ with f ≥ G_μ ⊗ f_{0,δ_slack}.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MuReport {
    /// Upper bound on the tight μ (sound); null when no finite μ holds within the δ slack.
    pub upper: Option<f64>,
    /// Lower bound on the tight μ.
    pub lower: Option<f64>,
    /// The δ slack the fit may spend on +∞ mass and discretisation.
    pub delta_slack: f64,
    /// Regret Δ of the fit (Gomez et al., "(ε,δ) considered harmful" eq. (13)): how far G_μ is below the curve (0 = exact).
    pub regret: Option<f64>,
    /// Why μ is null, if it is.
    pub reason: Option<String>,
}

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
        let mu = g.mu(opts.delta_slack);
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
                .map(|&d| {
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
                .map(|&e| {
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
            tradeoff: opts.alphas.iter().map(|&a| point(a)).collect(),
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

/// The exact guarantee of a μ-GDP composition: every figure is a closed form of μ = √Σμᵢ²
/// (Dong, Roth & Su, "Gaussian differential privacy", Cor. 1–2).
///
/// # Soundness
/// The composition holds √Σμᵢ² as a bracket [μ⁻, μ⁺] ([`GdpComposition::mu_bounds`], equal ends
/// whenever the sum is exact). Every figure that grows with μ (ε, δ, TPR, advantage, μ itself) takes
/// its upper end at μ⁺ and its lower end at μ⁻; β = G_μ(α), which shrinks with μ, the other way.
impl Guarantee for GdpComposition {
    fn method(&self) -> Method {
        Method::Analytic
    }
    fn epsilon_bounds(&self, delta: f64) -> (f64, f64) {
        let (lo, hi) = self.mu_bounds();
        if lo == hi {
            return gdp::epsilon_bounds(hi, delta);
        }
        (
            gdp::epsilon_bounds(lo, delta).0,
            gdp::epsilon_bounds(hi, delta).1,
        )
    }
    fn delta_bounds(&self, eps: f64) -> (f64, f64) {
        let (lo, hi) = self.mu_bounds();
        (gdp::delta_bounds(lo, eps).0, gdp::delta_bounds(hi, eps).1)
    }
    fn beta_bounds(&self, alpha: f64) -> (f64, f64) {
        let (lo, hi) = self.mu_bounds();
        (gdp::tradeoff(hi, alpha), gdp::tradeoff_upper(lo, alpha))
    }
    /// `upper` is μ⁺ itself: G_μ ⊗ f_{0,s} ≤ G_μ, so μ is sound at any slack, and exact at s = 0.
    /// `lower` is a certified lower bound on the tight μ_s = sup_α [isf(α/(1−s)) + isf(G_μ(α)/(1−s))]
    /// ([`gdp::slack_mu_lower`] at μ⁻; μ⁻ itself at s = 0), the quantity the numerical engine brackets
    /// for a privacy-loss distribution. The regret of G_μ⁺ against the curve G_μ is 0 (the fit is
    /// the curve itself). μ⁺ = +∞ (√Σμᵢ² beyond f64::MAX) has no finite figure: null, with the reason.
    fn mu(&self, delta_slack: f64) -> MuReport {
        let (lo, hi) = self.mu_bounds();
        if !hi.is_finite() {
            return MuReport {
                upper: None,
                lower: None,
                delta_slack,
                regret: None,
                reason: Some(
                    "mu of the composition, sqrt(sum of mu_i^2), exceeds the largest double \
                     (1.8e308): no finite mu-GDP guarantee can be stated"
                        .into(),
                ),
            };
        }
        let lower = if delta_slack > 0.0 {
            gdp::slack_mu_lower(lo, delta_slack)
        } else {
            lo
        };
        MuReport {
            upper: Some(hi),
            lower: Some(lower.min(hi)),
            delta_slack,
            regret: Some(0.0),
            reason: None,
        }
    }
    fn infinity_mass(&self) -> f64 {
        0.0
    }
    fn clt_sums(&self) -> Option<CltSums> {
        self.clt_available().then(|| *self.clt())
    }
    fn tpr(&self, fpr: f64) -> f64 {
        gdp::tpr(self.mu_bounds().1, fpr)
    }
    fn alpha_star(&self) -> f64 {
        gdp::fixed_point(self.mu_bounds().1)
    }
}

/// Accounts for a request: exactly (closed forms) when every event is μ-GDP, otherwise with the
/// numerical engine for the non-Gaussian part.
///
/// # Errors
/// [`AccountantError::TooLarge`] or [`AccountantError::Unsupported`] naming the event at fault.
pub fn account(req: &AccountRequest) -> Result<Report, AccountantError> {
    let mut comp = Composition::new(req.neighboring_relation, req.options.grid_step);
    let path = JsonPath::root().field("events");
    for (i, e) in req.events.iter().enumerate() {
        comp.push(e, &path.index(i))?;
    }
    let g = comp.guarantee()?;
    Ok(Report::build(
        g.as_ref(),
        req.neighboring_relation,
        comp.invocations(),
        &req.options,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gaussian_ledger_reports_exact_mu_and_profile() {
        let req = AccountRequest::from_json(&json!({
            "events": [{"type": "self_composed", "count": 3,
                        "event": {"type": "gaussian", "noise_multiplier": 3f64.sqrt()}}],
            "epsilons": [1.0], "deltas": [1e-5], "alphas": [0.1]
        }))
        .unwrap();
        let r = account(&req).unwrap();
        let mu = r.mu.upper.unwrap();
        assert!((mu - 1.0).abs() < 1e-14, "{mu}");
        assert!((r.delta[0].delta - 0.126_936_737_506_644).abs() < 1e-13);
        assert!(r.delta[0].delta_lower <= r.delta[0].delta);
        let e = r.epsilon[0].epsilon.unwrap();
        assert!((e - 4.377_178_095_68).abs() < 1e-9);
        assert!(r.tradeoff[0].beta <= r.tradeoff[0].beta_upper);
        assert_eq!(r.method, Method::Analytic);
        assert!(r.clt.as_ref().unwrap().approximate);
    }

    #[test]
    fn request_fields_are_validated_with_paths() {
        let e =
            AccountRequest::from_json(&json!({"events": [], "deltas": [0.1, 2.0]})).unwrap_err();
        assert_eq!(e.path, "$.deltas[1]");
        let e = AccountRequest::from_json(&json!({"events": [], "neighboring_relation": "swap"}))
            .unwrap_err();
        assert_eq!(e.path, "$.neighboring_relation");
        let e = AccountRequest::from_json(&json!({"events": [], "delta_slack": 0.5})).unwrap_err();
        assert_eq!(e.path, "$.delta_slack");
        let e = AccountRequest::from_json(&json!({"events": [], "extra": 1})).unwrap_err();
        assert_eq!(e.path, "$.extra");
        let e = AccountRequest::from_json(&json!({})).unwrap_err();
        assert_eq!(e.path, "$.events");
    }

    #[test]
    fn events_without_meaning_under_the_relation_are_refused_with_a_clear_error() {
        let req = AccountRequest::from_json(&json!({"events": [
            {"type": "gdp", "mu": 1},
            {"type": "randomized_response", "noise_parameter": 0.5, "num_buckets": 2}
        ]}))
        .unwrap();
        let err = account(&req).unwrap_err();
        assert!(err.to_string().contains("$.events[1]"), "{err}");
        assert!(err.to_string().contains("replace_one"), "{err}");
    }
}

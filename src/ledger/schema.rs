//! The wire schema of the accountant's report, for the OpenAPI spec (the accountant's own types
//! carry no schema). These types are never built at run time: the service serialises the
//! accountant's [`Report`](crate::accountant::report::Report) itself, and a test checks that every
//! report serialises exactly as these types describe, so the spec cannot drift from it.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The neighbouring relation of a dataset's guarantee.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = NeighboringRelation)]
pub enum NeighboringRelationWire {
    /// Datasets differing by one record added or removed (the default).
    AddOrRemoveOne,
    /// Datasets differing by one record replaced.
    ReplaceOne,
}

/// The parameter a calibration searches.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FreeParameter {
    /// Of the first gaussian or laplace event, depth first: the smallest that fits.
    NoiseMultiplier,
    /// Of the first self_composed event: the largest that fits.
    Count,
}

/// A role on one dataset.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DatasetRole {
    Admin,
    Analyst,
    Auditor,
}

/// A token's global role (`none`: grants only).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GlobalRole {
    Admin,
    Analyst,
    Auditor,
    None,
}

/// A charge's status.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChargeStatus {
    /// Counted for good.
    Committed,
    /// Counted by the filter until committed or released.
    Reserved,
    /// Reserved, and its job has started reading the data: counted until committed; it can no
    /// longer be released.
    Started,
    /// Refunded: the caller stated no output of it was released.
    Released,
}

/// What a ledger entry records.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Charge,
    Budget,
    Quota,
    Run,
    Start,
    Commit,
    Release,
}

/// How a report was computed: closed forms (μ-GDP) or the numerical PLD engine.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportMethod {
    Analytic,
    Pld,
}

/// μ-GDP summary.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Mu)]
pub struct MuWire {
    /// Upper bound on the tight μ (sound); null when no finite μ holds within the δ slack.
    pub upper: Option<f64>,
    pub lower: Option<f64>,
    pub delta_slack: f64,
    /// Regret Δ of the fit (0 for Gaussian ledgers).
    pub regret: Option<f64>,
    /// Why μ is null.
    pub reason: Option<String>,
}

/// ε at one δ (null epsilon = +∞).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = EpsilonPoint)]
pub struct EpsilonPointWire {
    pub delta: f64,
    pub epsilon: Option<f64>,
    pub epsilon_lower: Option<f64>,
}

/// δ at one ε.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = DeltaPoint)]
pub struct DeltaPointWire {
    pub epsilon: f64,
    pub delta: f64,
    pub delta_lower: f64,
}

/// The trade-off curve at one α.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = TradeoffPoint)]
pub struct TradeoffPointWire {
    pub alpha: f64,
    /// Lower bound on f(α) (sound).
    pub beta: f64,
    pub beta_upper: f64,
    /// Upper bound on an attack's TPR at FPR α.
    pub tpr: f64,
    /// The certified fit (1 − s)·G_μ(α/(1 − s)) at the reported μ and δ slack s.
    pub gdp_beta: Option<f64>,
}

/// The Tier-II table of Gomez et al. ("(ε,δ) considered harmful").
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Tier2)]
pub struct Tier2Wire {
    pub alpha_star: f64,
    pub rows: Vec<TradeoffPointWire>,
}

/// CLT approximation (never enforced).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Clt)]
pub struct CltWire {
    pub approximate: bool,
    pub mu: f64,
    pub gamma: f64,
    pub berry_esseen_applies: bool,
}

/// One (ε, δ) pair for a group.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = GroupPoint)]
pub struct GroupPointWire {
    pub epsilon: f64,
    pub delta: f64,
}

/// What the guarantee gives datasets that differ in `size` records.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = GroupReport)]
pub struct GroupWire {
    pub size: u64,
    /// k·μ when the guarantee is μ-GDP with no δ slack (G_μ ⇒ G_{kμ} for groups of k; Dong, Roth
    /// & Su Thm. 2.14); null otherwise.
    pub mu: Option<f64>,
    /// (kε, δ·(e^{kε} − 1)/(e^ε − 1)) for each finite (ε, δ) of the report's `epsilon`.
    pub epsilon: Vec<GroupPointWire>,
    /// When the guarantee is G_μ ⊗ f_{0,δ} with δ > 0 (a dataset's statement): the group's
    /// trade-off is at least G_{kμ}(α) − δ_k, so its δ(ε) ≤ δ_k + δ_{kμ}(ε), with δ_1 = δ and
    /// δ_j = δ + Φ(Φ⁻¹(δ_{j−1}) + μ) (Dong, Roth & Su Thm 2.14; not k·δ).
    pub gdp: Option<GroupGdpWire>,
}

/// A group's GDP statement with an additive δ part: f(α) ≥ G_μ(α) − δ.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = GroupGdp)]
pub struct GroupGdpWire {
    pub mu: f64,
    pub delta: f64,
}

/// Accountant identification.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = AccountantInfo)]
pub struct AccountantWire {
    pub name: String,
    pub version: String,
    pub event_model_version: u32,
}

/// The privacy report.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Report)]
pub struct ReportWire {
    /// `analytic` or `pld`.
    #[schema(value_type = ReportMethod)]
    pub method: String,
    #[schema(value_type = NeighboringRelationWire)]
    pub neighboring_relation: String,
    pub mu: MuWire,
    pub epsilon: Vec<EpsilonPointWire>,
    pub delta: Vec<DeltaPointWire>,
    /// Upper bound on the largest membership-inference advantage (= δ(0) = η-TV).
    pub advantage: f64,
    pub advantage_lower: f64,
    pub tradeoff: Vec<TradeoffPointWire>,
    pub tier2: Tier2Wire,
    /// Probability of unbounded privacy loss (never dropped).
    pub infinity_mass: f64,
    pub clt: Option<CltWire>,
    pub invocations: u64,
    /// Present when a group size was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupWire>,
    pub accountant: AccountantWire,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::account::{account, AccountRequest};
    use serde_json::json;

    /// Every kind of report (closed form, numerical with CLT, μ unavailable) serialises exactly as
    /// the schema types describe: read into them and written back, nothing is lost or added.
    #[test]
    fn every_report_serialises_exactly_as_its_schema_describes() {
        for events in [
            json!([{"type": "gdp", "mu": 1.0}]),
            json!([{"type": "laplace", "noise_multiplier": 1.0}]),
            json!([{"type": "poisson_sampled", "sampling_rate": 0.01,
                    "event": {"type": "gaussian", "noise_multiplier": 1.0}}]),
            json!([{"type": "epsilon_delta", "epsilon": 1.0, "delta": 1e-3}]),
        ] {
            for group in [None, Some(3)] {
                let mut req = json!({"events": events});
                if let Some(k) = group {
                    req["group_size"] = json!(k);
                }
                let r = account(&AccountRequest::from_json(&req).unwrap()).unwrap();
                assert_eq!(r.group.is_some(), group.is_some());
                let sent = serde_json::to_value(&r).unwrap();
                let read: ReportWire = serde_json::from_value(sent.clone()).unwrap();
                assert_eq!(serde_json::to_value(&read).unwrap(), sent, "{events}");
            }
        }
    }
}

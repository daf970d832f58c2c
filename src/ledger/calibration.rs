//! Calibration against the gate itself, and a unit's certificate curve.

use super::budget::Budget;
use super::budget::GATE_TOLERANCE;
use super::compute::{analytic, blocking};
use super::error::LedgerError;
use super::filter::Limit;
use super::filter::{Gate, Verdict};
use super::principal::{Action, Actor};
use super::rows::{grid_step_of, relation_of};
use super::verdict::unit_delta;
use super::views::{BalancedPoint, Calibrated, CurvePointView, UnitCurve};
use super::{admission, certificates, input, Ledgers};
use crate::accountant::certificate::{Certificate, UnitDelta};
use crate::accountant::composition::Composition;
use crate::accountant::params::GridStep;
use crate::accountant::{AccountantError, Event, NeighboringRelation};
use std::sync::Arc;

/// The balanced point of `points` for `budget` (see [`BalancedPoint`]).
pub(super) fn balanced(points: &[CurvePointView], budget: Budget) -> Option<BalancedPoint> {
    points
        .iter()
        .filter_map(|p| {
            let mu = p.mu?;
            let d_share = if p.delta == 0.0 {
                0.0
            } else if budget.delta() > 0.0 {
                p.delta / budget.delta()
            } else {
                return None;
            };
            let f = (mu / budget.mu()).powi(2) + d_share;
            f.is_finite().then_some(BalancedPoint {
                delta: p.delta,
                mu,
                budget_fraction: f,
            })
        })
        .min_by(|a, b| a.budget_fraction.total_cmp(&b.budget_fraction))
}

pub(super) fn calibrated(
    base: &Composition,
    req: &input::CalibrateRequest,
    target: f64,
    slack: crate::accountant::params::DeltaSlack,
) -> Result<Calibrated, LedgerError> {
    use crate::accountant::calibrate::{calibrate, with_free_parameter};
    let path = crate::accountant::json::JsonPath::root().field("event");
    // Calibrate against what the gate admits, so the calibrated event is admitted.
    let admissible = target * (1.0 + GATE_TOLERANCE);
    let c = calibrate(
        base,
        &req.event,
        req.free_parameter,
        admissible,
        slack,
        &path,
    )?;
    let event = if c.value > 0.0 {
        Some(with_free_parameter(&req.event, req.free_parameter, c.value, &path)?.to_json())
    } else {
        None
    };
    Ok(Calibrated {
        free_parameter: req.free_parameter.as_str().to_owned(),
        value: c.value,
        mu: c.mu,
        mu_target: target,
        delta: slack.get(),
        event,
        evaluations: c.evaluations,
    })
}

/// A unit's certificates, computed once per (relation, grid step, δ rule) for the ledgers that
/// share them (the blocks of a range, the datasets of a join, a calibration's gates).
#[derive(Default)]
pub(super) struct Certified(Vec<(CertifiedKey, Arc<[Certificate]>)>);

/// What a unit's certificates depend on besides its event: (relation, grid step's bits, δ rule).
pub(super) type CertifiedKey = (NeighboringRelation, u64, UnitDelta);

impl Certified {
    /// [`certify`]'s candidates for `event` under `relation`, `h` and `rule`.
    pub(super) fn get(
        &mut self,
        event: &Event,
        relation: NeighboringRelation,
        h: GridStep,
        rule: UnitDelta,
        path: &crate::accountant::json::JsonPath,
    ) -> Result<&[Certificate], AccountantError> {
        let key = (relation, h.get().to_bits(), rule);
        let i = match self.0.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.0.push((
                    key,
                    certificates::certificates(event, relation, h, rule, path)?,
                ));
                self.0.len() - 1
            }
        };
        Ok(&self.0[i].1)
    }
}

/// The gate as a calibration's judge: a candidate fits iff [`Gate::choose`] admits one of
/// its certificates (the default δ rule) on every ledger's filter — the dataset's, or on a
/// partitioned dataset each block of the range (the tightest block decides).
pub(super) struct GateJudge {
    relation: NeighboringRelation,
    h: GridStep,
    /// Each ledger's gate, with the block's name (`None`: the dataset itself). Not empty.
    gates: Vec<(Option<String>, Gate)>,
}

impl GateJudge {
    /// The first refusal (in ledger order), else the admitted unit with the largest μ.
    fn verdict(
        &self,
        event: &Event,
        path: &crate::accountant::json::JsonPath,
    ) -> Result<(Verdict, Certificate), AccountantError> {
        // One certification per δ rule (blocks whose budgets differ may have different rules).
        let mut certified = Certified::default();
        let mut best: Option<(Verdict, Certificate)> = None;
        for (_, gate) in &self.gates {
            let rule = unit_delta(&gate.budget, None);
            let candidates = certified.get(event, self.relation, self.h, rule, path)?;
            let (verdict, unit) = gate.choose(candidates);
            if !verdict.admitted() {
                return Ok((verdict, unit));
            }
            if best.as_ref().is_none_or(|(_, u)| unit.mu() > u.mu()) {
                best = Some((verdict, unit));
            }
        }
        Ok(best.expect("a judge has at least one gate"))
    }

    /// The least remaining μ over the ledgers.
    fn remaining_mu(&self) -> f64 {
        self.gates
            .iter()
            .map(|(_, g)| g.remaining_mu())
            .fold(f64::INFINITY, f64::min)
    }
}

impl crate::accountant::calibrate::Judge for GateJudge {
    fn judge(
        &mut self,
        event: &Event,
        path: &crate::accountant::json::JsonPath,
    ) -> Result<Option<f64>, AccountantError> {
        Ok(match self.verdict(event, path)? {
            (Verdict::Admitted(..), unit) => Some(unit.mu()),
            (Verdict::Rejected(..), _) => None,
        })
    }

    fn reachable(&mut self) -> Result<(), AccountantError> {
        for (block, gate) in &self.gates {
            if gate.remaining_mu() > 0.0 {
                continue;
            }
            let whose = match block {
                Some(b) => format!("block {b:?}'s"),
                None => "the dataset's".to_owned(),
            };
            let reason = match &gate.share {
                Some(s) if s.budget.remaining_mu(&s.state) <= 0.0 => format!(
                    "nothing fits: the quota {:?} (mu {}) is spent (mu spent {})",
                    s.holder,
                    s.budget.mu(),
                    s.state.mu()
                ),
                _ => format!(
                    "nothing fits: {whose} mu budget {} is spent (mu spent {})",
                    gate.budget.mu(),
                    gate.state.mu()
                ),
            };
            return Err(AccountantError::Unsupported {
                path: String::new(),
                reason,
            });
        }
        Ok(())
    }

    fn spent(&mut self) -> Result<f64, AccountantError> {
        Ok(self
            .gates
            .iter()
            .map(|(_, g)| g.state.mu())
            .fold(0.0, f64::max))
    }
}

impl Ledgers {
    /// Calibrates one free parameter of a unit against the gate itself: the smallest noise
    /// multiplier, or the largest count, whose unit the gate admits now (its certificates by the
    /// default δ rule, [`Gate::choose`] on the dataset's filter). A charge of the
    /// calibrated event is admitted, and one a step beyond is not (up to the search's precision).
    pub async fn calibrate(
        &self,
        actor: &Actor,
        id: &str,
        req: input::CalibrateRequest,
    ) -> Result<Calibrated, LedgerError> {
        use crate::accountant::calibrate::{calibrate_by, with_free_parameter};
        self.authorize(actor, id, Action::Spend).await?;
        let row = self.row(id).await?;
        let gates = self
            .calibration_gates(actor, &row, req.blocks.as_ref())
            .await?;
        let (relation, h) = (relation_of(&row)?, grid_step_of(&row)?);
        let cost = admission::Cost::light_if(analytic(&req.event, relation));
        blocking(&self.admission, cost, move || {
            let path = crate::accountant::json::JsonPath::root().field("event");
            let mut judge = GateJudge { relation, h, gates };
            let c = calibrate_by(&req.event, req.free_parameter, &mut judge, &path)?;
            let (event, unit) = if c.value > 0.0 {
                let e = with_free_parameter(&req.event, req.free_parameter, c.value, &path)?;
                // The gate's verdict on the answer, once more: the unit it would charge.
                let (verdict, unit) = judge.verdict(&e, &path)?;
                if !verdict.admitted() {
                    return Err(LedgerError::Internal(
                        "calibrated a unit the gate rejects".into(),
                    ));
                }
                (Some(e.to_json()), Some(unit))
            } else {
                (None, None)
            };
            Ok(Calibrated {
                free_parameter: req.free_parameter.as_str().to_owned(),
                value: c.value,
                mu: unit.map_or(c.mu, |u| u.mu()),
                mu_target: judge.remaining_mu(),
                delta: unit.map_or(0.0, |u| u.delta()),
                event,
                evaluations: c.evaluations,
            })
        })
        .await
    }

    /// Calibrates one free parameter of an event against a μ target, on an empty ledger.
    pub async fn calibrate_stateless(
        &self,
        actor: &Actor,
        req: input::CalibrateRequest,
    ) -> Result<Calibrated, LedgerError> {
        self.may_account(actor).await?;
        let cost = admission::Cost::light_if(analytic(&req.event, req.neighboring_relation));
        blocking(&self.admission, cost, move || {
            let base = Composition::new(req.neighboring_relation, req.grid_step);
            let mu = req.mu.unwrap_or(0.0);
            calibrated(&base, &req, mu, req.delta_slack)
        })
        .await
    }

    /// A unit's certificate curve μᵢ(δᵢ), stateless.
    pub async fn certificate_curve(
        &self,
        actor: &Actor,
        req: input::CertificateRequest,
    ) -> Result<UnitCurve, LedgerError> {
        self.may_account(actor).await?;
        use crate::accountant::certificate::{curve, default_curve_deltas};
        let cost = admission::Cost::light_if(analytic(&req.event, req.neighboring_relation));
        blocking(&self.admission, cost, move || {
            let deltas = req.deltas.clone().unwrap_or_else(default_curve_deltas);
            let path = crate::accountant::json::JsonPath::root().field("event");
            let points: Vec<CurvePointView> = curve(
                &req.event,
                req.neighboring_relation,
                req.grid_step,
                &deltas,
                &path,
            )?
            .into_iter()
            .map(|p| CurvePointView {
                delta: p.delta,
                mu: p.mu,
                mu_lower: p.mu_lower,
                reason: p.reason,
            })
            .collect();
            let balanced = req.budget.and_then(|b| balanced(&points, b));
            Ok(UnitCurve { points, balanced })
        })
        .await
    }
}

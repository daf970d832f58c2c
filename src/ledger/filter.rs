//! The gate: a μ-GDP privacy filter over units (the one place its rule is written).
//!
//! Callers choose each next charge after seeing earlier results, so the exact composition of the
//! admitted charges is not a valid stopping rule (Tran, Koskela, Räisä & Honkela, "f-Differential
//! Privacy Filters: Validity and Approximate Solutions", 2026). The gate admits unit k, with
//! certificate (μₖ, δₖ) (see [`crate::accountant::certificate`]), iff
//! ```text
//! Σ_{i≤k} μᵢ² ≤ μ_B²   and   Σ_{i≤k} δᵢ ≤ δ_B
//! ```
//! Smith & Thakurta ("Fully adaptive composition for Gaussian differential privacy", 2022) prove the
//! first is a valid filter for μ-GDP; the δ parts add by a union bound over the units' "reveal"
//! events. The whole interaction is then G_{μ_B} ⊗ f_{0,δ_B}-DP. The argument is written out in
//! `docs/filter.md`.
//!
//! What is *spent* (√Σμᵢ², Σδᵢ along the path that happened) is budget use, not a guarantee: it
//! depends on the outputs, and a path's spent μ can be below the interaction's true μ (the review in
//! `docs/filter.md` has an example). The guarantee reported is the budget's, [`Limit::guarantee`].
//!
//! # Rounding
//! Both sums are rounded up as they grow (each μᵢ² and each addition), so the stored sums are never
//! below the exact ones. The comparison allows [`GATE_TOLERANCE`] relative: a Gaussian charge of
//! exactly the remaining μ must fit despite the rounding; the reported guarantee is always the
//! stored sums, so the slack is visible, never hidden.

use super::budget::{Budget, QuotaShare, Spent, GATE_TOLERANCE};
use crate::accountant::certificate::{Certificate, FilterGuarantee};
use crate::accountant::rounding;

/// The filter's running state for one dataset: Σμᵢ² and Σδᵢ (both rounded up) and the unit count.
/// Made by [`FilterState::empty`], [`FilterState::from_stored`] and [`Limit::admits`]; plans and
/// conversions of past units (which are not gated) use [`FilterState::with`], refunds
/// [`FilterState::without`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FilterState {
    mu_sq: f64,
    delta: f64,
    units: i64,
}

/// The outcome of [`Limit::admits`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    /// Admitted; the state after the unit.
    Admitted(FilterState),
    /// Rejected: which part of the budget would be exceeded.
    Rejected(Exceeded),
}

/// Which part of the budget a unit would exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    Mu,
    Delta,
}

impl FilterState {
    /// No unit yet.
    pub fn empty() -> Self {
        FilterState {
            mu_sq: 0.0,
            delta: 0.0,
            units: 0,
        }
    }

    /// A state read back from the store, checked: finite, non-negative, δ < 1. A state that fails
    /// is corrupt and must stop the dataset (never read as 0, which would make charges free).
    pub fn from_stored(mu_sq: f64, delta: f64, units: i64) -> Result<Self, String> {
        if !(mu_sq.is_finite() && mu_sq >= 0.0) {
            return Err(format!("filter state: sum of mu_i^2 is {mu_sq}"));
        }
        if !(delta.is_finite() && (0.0..1.0).contains(&delta)) {
            return Err(format!("filter state: sum of delta_i is {delta}"));
        }
        if units < 0 || (units == 0 && (mu_sq > 0.0 || delta > 0.0)) {
            return Err(format!(
                "filter state: {units} units with spending {mu_sq}, {delta}"
            ));
        }
        Ok(FilterState {
            mu_sq,
            delta,
            units,
        })
    }

    /// Σμᵢ² (rounded up).
    pub fn mu_sq(&self) -> f64 {
        self.mu_sq
    }
    /// μ spent: √Σμᵢ², rounded up.
    pub fn mu(&self) -> f64 {
        sqrt_up(self.mu_sq)
    }
    /// (Σμᵢ², Σδᵢ) with one more unit, each rounded up (+∞ when μ² overflows); what the gate
    /// compares and what a rejection reports.
    pub fn sums_with(&self, c: &Certificate) -> (f64, f64) {
        (
            rounding::add_up(self.mu_sq, rounding::mul_up(c.mu(), c.mu())),
            rounding::add_up(self.delta, c.delta()),
        )
    }
    /// The state with one more unit, not gated (a plan, or units that already happened).
    pub fn with(&self, c: &Certificate) -> Self {
        let (mu_sq, delta) = self.sums_with(c);
        FilterState {
            mu_sq,
            delta,
            units: self.units + 1,
        }
    }
    /// The state without one counted unit (a released reservation: its outputs were never
    /// released, so it is a unit with μ = 0). The subtraction is rounded up: the stored sum is at
    /// least the exact sum of the rounded-up terms added, and the term removed is recomputed
    /// bit-for-bit as it was added, so the result still bounds the remaining units' sum.
    pub fn without(&self, c: &Certificate) -> Self {
        if self.units <= 1 {
            return FilterState::empty();
        }
        FilterState {
            mu_sq: rounding::sub_up(self.mu_sq, rounding::mul_up(c.mu(), c.mu())).max(0.0),
            delta: rounding::sub_up(self.delta, c.delta()).max(0.0),
            units: self.units - 1,
        }
    }
    /// δ spent: Σδᵢ (rounded up).
    pub fn delta(&self) -> f64 {
        self.delta
    }
    /// Units admitted.
    pub fn units(&self) -> i64 {
        self.units
    }
}

/// A spent figure (μ or δ) as shown beside its limit, given the limit's used share
/// ([`Limit::used`]): while the share is at most 1 the spending is within the gate's tolerance of
/// the limit, so it is shown as at most the limit (an exactly spent budget never reads as an
/// overdraft); above 1 (a lowered limit) as it is.
pub fn shown_spent(spent: f64, limit: f64, used: f64) -> f64 {
    if used <= 1.0 {
        spent.min(limit)
    } else {
        spent
    }
}

/// √x rounded up (a correctly rounded square root may be below the exact one); √0 = 0 exactly
/// (an empty ledger spent nothing, not a subnormal).
pub(super) fn sqrt_up(x: f64) -> f64 {
    if x == 0.0 {
        return 0.0;
    }
    rounding::up(x.sqrt(), rounding::U)
}

/// What a filter compares its sums with: a dataset's [`Budget`], a [`QuotaShare`] of it, or a
/// [`Spent`] amount taken as a limit exactly used up. The rule (see the module docs) is written
/// once, here, for all three; each type gives only its figures.
pub trait Limit {
    /// (μ, δ) of the limit.
    fn figures(&self) -> (f64, f64);

    /// The largest δ the comparison accepts, δ·(1 + [`GATE_TOLERANCE`]).
    fn delta_limit(&self) -> f64 {
        self.figures().1 * (1.0 + GATE_TOLERANCE)
    }

    /// The guarantee of the whole adaptive interaction, however it goes on: G_μ ⊗ f_{0,δ} at the
    /// budget as the gate enforces it (with [`GATE_TOLERANCE`]), or at what was spent if that is
    /// larger (a budget lowered below the spending, or a converted version-1 ledger).
    fn guarantee(&self, s: &FilterState) -> FilterGuarantee {
        let mu = self.mu_limit().max(s.mu());
        let delta = self.delta_limit().max(s.delta).min(1.0 - f64::EPSILON);
        FilterGuarantee::new(
            Certificate::new(mu, delta).expect("a checked budget and state are finite"),
        )
    }

    /// The largest μ the comparison accepts, μ·(1 + [`GATE_TOLERANCE`]).
    fn mu_limit(&self) -> f64 {
        self.figures().0 * (1.0 + GATE_TOLERANCE)
    }

    /// The gate's rule (see the module docs): whether the unit with certificate `c` may follow the
    /// units summarised in `s`, and the state after it.
    fn admits(&self, s: &FilterState, c: &Certificate) -> Admission {
        let limit = self.mu_limit();
        // A unit above the whole budget is rejected before squaring (μ may be 1e200).
        if c.mu() > limit {
            return Admission::Rejected(Exceeded::Mu);
        }
        let (mu_sq, delta) = s.sums_with(c);
        // μ_sq ≤ limit² ⟸ μ_sq ≤ limit² rounded down.
        if mu_sq > rounding::mul_down(limit, limit) {
            return Admission::Rejected(Exceeded::Mu);
        }
        if delta > self.delta_limit() || delta >= 1.0 {
            return Admission::Rejected(Exceeded::Delta);
        }
        Admission::Admitted(FilterState {
            mu_sq,
            delta,
            units: s.units + 1,
        })
    }

    /// The larger of the shares of what is left that certificate `c` would take after `s`:
    /// max(μ_c² / (μ_B² − Σμᵢ²), δ_c / (δ_B − Σδᵢ)), where a part with nothing left counts as
    /// +∞ if `c` spends from it and 0 if not. Its reciprocal, less one, is how many more units
    /// like `c` the rest would hold after it (as [`Limit::more_like`], without the rounding down to
    /// a whole count), so the smaller share leaves room for more. Used only to *choose* between
    /// certificates that the gate admits, never to admit one: its rounding has no soundness role.
    fn share_of_rest(&self, s: &FilterState, c: &Certificate) -> f64 {
        let part = |take: f64, left: f64| {
            if take <= 0.0 {
                0.0
            } else if left <= 0.0 {
                f64::INFINITY
            } else {
                take / left
            }
        };
        let (mu_b, delta_b) = self.figures();
        part(c.mu() * c.mu(), mu_b * mu_b - s.mu_sq).max(part(c.delta(), delta_b - s.delta))
    }

    /// √(μ_B² − Σμᵢ²): the largest μ a further unit can have (rounded down, so a Gaussian unit of
    /// exactly this μ is admitted).
    fn remaining_mu(&self, s: &FilterState) -> f64 {
        // Nothing spent: the whole budget (a unit of exactly μ_B is admitted).
        if s.mu_sq == 0.0 {
            return self.figures().0;
        }
        let b2 = rounding::mul_down(self.figures().0, self.figures().0);
        if s.mu_sq >= b2 {
            return 0.0;
        }
        rounding::down(rounding::sub_down(b2, s.mu_sq).sqrt(), rounding::ULP_REL).max(0.0)
    }

    /// About how many more units of certificate `c` the dataset's budget has room for after `s`:
    /// the largest k with Σμᵢ² + k·μ_c² ≤ μ_B² and Σδᵢ + k·δ_c ≤ δ_B (what [`Limit::admits`]
    /// decides k times, without its per-step rounding and tolerance; each quotient rounded down
    /// after rounding its numerator down and its denominator up, so k never exceeds the exact
    /// count). A display figure ("about N more runs like the last one"): every charge is still
    /// decided by the gate. `None` when `c` spends nothing (no bound).
    fn more_like(&self, s: &FilterState, c: &Certificate) -> Option<u64> {
        let count = |room: f64, each: f64| -> Option<f64> {
            (each > 0.0).then(|| rounding::div_down(room.max(0.0), each).floor())
        };
        let b2 = rounding::mul_down(self.figures().0, self.figures().0);
        let mu_room = rounding::sub_down(b2, s.mu_sq);
        let by_mu = count(mu_room, rounding::mul_up(c.mu(), c.mu()));
        let by_delta = count(self.remaining_delta(s), c.delta());
        let k = match (by_mu, by_delta) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return None,
        };
        // Saturates: a float above u64::MAX casts to u64::MAX.
        Some(k.max(0.0) as u64)
    }

    /// The share of the limit used, in the filter's own terms: the larger of Σμᵢ²/μ² and Σδᵢ/δ
    /// (the filter adds μᵢ² and δᵢ, so the used and the remaining shares add up to the whole:
    /// spent μ² + remaining μ² = μ_B²). Each quotient rounded up (its numerator is a sum rounded
    /// up, its denominator rounded down). A part within the gate's tolerance above 1 is 1: the gate
    /// compares with the limit widened by [`GATE_TOLERANCE`], so that spending is the limit used
    /// exactly, and showing it above 100 % would report an overdraft that did not happen (the
    /// guarantee, [`Limit::guarantee`], includes the tolerance). Above 1 only when the limit was
    /// lowered below what had been spent. A zero limit is used up (1) once anything is spent
    /// from it.
    fn used(&self, s: &FilterState) -> f64 {
        let part = |spent: f64, limit: f64, widened: f64| {
            if spent <= 0.0 {
                0.0
            } else if limit <= 0.0 {
                1.0
            } else {
                let r = rounding::div_up(spent, limit);
                if r > 1.0 && spent <= widened {
                    1.0
                } else {
                    r
                }
            }
        };
        let (mu, delta) = self.figures();
        let mu_part = part(
            s.mu_sq,
            rounding::mul_down(mu, mu),
            rounding::mul_down(self.mu_limit(), self.mu_limit()),
        );
        mu_part.max(part(s.delta, delta, self.delta_limit()))
    }

    /// Nothing more that spends μ can be charged: the limit is used ([`Limit::used`] ≥ 1) or
    /// no μ is left (a zero share).
    fn exhausted(&self, s: &FilterState) -> bool {
        self.used(s) >= 1.0 || self.remaining_mu(s) <= 0.0
    }

    /// δ_B − Σδᵢ (rounded down, at least 0).
    fn remaining_delta(&self, s: &FilterState) -> f64 {
        rounding::sub_down(self.figures().1, s.delta).max(0.0)
    }
}

impl Limit for Budget {
    fn figures(&self) -> (f64, f64) {
        (self.mu(), self.delta())
    }
}

impl Limit for QuotaShare {
    fn figures(&self) -> (f64, f64) {
        (self.mu(), self.delta())
    }
}

impl Limit for Spent {
    fn figures(&self) -> (f64, f64) {
        (self.mu(), self.delta())
    }
}

/// A share of a dataset's budget that a unit must fit as well: a principal's quota, or the
/// unallocated rest (holder `*`) that principals without a quota spend from. Its budget and state
/// are those of a filter of their own, gated by the same rule ([`Limit::admits`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    pub holder: String,
    pub budget: QuotaShare,
    pub state: FilterState,
}

/// The gate of one unit: the dataset's filter and, when the dataset has quotas, the caller's share.
/// A unit is admitted iff both admit it. Stopping earlier than the dataset's filter would is still a
/// valid filter (the stopping rule only ever depends on the past), so quotas never weaken the
/// dataset's guarantee; and since the shares' squared μ (and δ) sum to at most the budget's, each
/// holder can spend its whole share whatever the others do.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub budget: Budget,
    pub state: FilterState,
    pub share: Option<Share>,
}

/// The outcome of [`Gate::admits`].
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Admitted: the dataset's state and the share's after the unit.
    Admitted(FilterState, Option<FilterState>),
    /// Rejected: by the share (its holder) or by the dataset's budget (`None`), and why.
    Rejected(Option<String>, Exceeded),
}

impl Verdict {
    pub fn admitted(&self) -> bool {
        matches!(self, Verdict::Admitted(..))
    }
}

impl Gate {
    /// The gate of `budget` with the sums `state` and no quota share: what a dataset's own
    /// filter decides (plans, and the conversion of an old ledger's past).
    pub fn of(budget: Budget, state: FilterState) -> Gate {
        Gate {
            budget,
            state,
            share: None,
        }
    }

    /// Whether a unit with certificate `c` is admitted (see the type's docs).
    pub fn admits(&self, c: &Certificate) -> Verdict {
        let after = match self.budget.admits(&self.state, c) {
            Admission::Admitted(a) => a,
            Admission::Rejected(why) => return Verdict::Rejected(None, why),
        };
        match &self.share {
            None => Verdict::Admitted(after, None),
            Some(s) => match s.budget.admits(&s.state, c) {
                Admission::Admitted(q) => Verdict::Admitted(after, Some(q)),
                Admission::Rejected(why) => Verdict::Rejected(Some(s.holder.clone()), why),
            },
        }
    }

    /// The certificate the gate charges for a unit, of its `candidates` (non-empty, in
    /// increasing δ, as [`crate::accountant::certificate::certify`] gives them), and the verdict:
    /// of the candidates the gate admits, the one that takes the smallest share of what is left
    /// ([`Limit::share_of_rest`], the larger of the dataset's and the share's), which leaves room
    /// for the most further units like it; on a tie the earlier (smaller δ). When none is
    /// admitted, the rejection of the first.
    ///
    /// Every candidate is a certificate of the unit, and which one is charged depends only on the
    /// unit and the past (the sums before it): a rule the filter's proof allows (`docs/filter.md`
    /// §4, assumption A2). The choice never admits a unit that no single fixed rule would.
    pub fn choose(&self, candidates: &[Certificate]) -> (Verdict, Certificate) {
        let share_of_rest = |c: &Certificate| {
            let d = self.budget.share_of_rest(&self.state, c);
            self.share
                .as_ref()
                .map_or(d, |s| d.max(s.budget.share_of_rest(&s.state, c)))
        };
        let mut best: Option<(Verdict, Certificate, f64)> = None;
        for c in candidates {
            let v = self.admits(c);
            if !v.admitted() {
                continue;
            }
            let cost = share_of_rest(c);
            // `<` keeps the earlier of equal costs; a NaN cost (none: both parts are ≥ 0 and
            // never 0·∞) would never replace a kept one.
            if best.as_ref().is_none_or(|(_, _, b)| cost < *b) {
                best = Some((v, *c, cost));
            }
        }
        match best {
            Some((v, c, _)) => (v, c),
            None => (self.admits(&candidates[0]), candidates[0]),
        }
    }

    /// [`Gate::choose`], and when it admits, the sums (the dataset's and the share's) moved past
    /// the unit: the certificate charged, or the refusal. What a sequence of units would do to
    /// this gate, one after another (a run's chunks at its declaration).
    pub fn take(&mut self, candidates: &[Certificate]) -> Result<Certificate, Verdict> {
        match self.choose(candidates) {
            (Verdict::Admitted(after, share_after), c) => {
                self.state = after;
                if let (Some(share), Some(s)) = (self.share.as_mut(), share_after) {
                    share.state = s;
                }
                Ok(c)
            }
            (refused, _) => Err(refused),
        }
    }

    /// The largest μ a further unit can have: the smaller of the dataset's and the share's.
    pub fn remaining_mu(&self) -> f64 {
        let d = self.budget.remaining_mu(&self.state);
        self.share
            .as_ref()
            .map_or(d, |s| d.min(s.budget.remaining_mu(&s.state)))
    }

    /// The δ left for a further unit: the smaller of the dataset's and the share's.
    pub fn remaining_delta(&self) -> f64 {
        let d = self.budget.remaining_delta(&self.state);
        self.share
            .as_ref()
            .map_or(d, |s| d.min(s.budget.remaining_delta(&s.state)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(mu: f64, delta: f64) -> Budget {
        Budget::new(mu, delta).unwrap()
    }

    /// `more_like` never promises a unit the gate would refuse: that many units of the same
    /// certificate are admitted one after another.
    #[test]
    fn as_many_more_units_as_promised_are_admitted() {
        let cases = [
            (2.0, 1e-6, 0.0, 0.0, 0.2, 0.0),
            (2.0, 1e-6, 1.5, 1e-7, 0.3, 1e-9),
            (1.0, 1e-10, 0.1, 0.0, 0.01, 1e-13),
            (3.0, 1e-5, 2.999, 9e-6, 0.05, 1e-7),
            (0.5, 1e-8, 0.0, 0.0, 0.123_456_789, 3.3e-10),
        ];
        for (mu_b, delta_b, spent_mu, spent_delta, mu, delta) in cases {
            let b = budget(mu_b, delta_b);
            let mut s = FilterState::empty();
            if spent_mu > 0.0 || spent_delta > 0.0 {
                s = s.with(&Certificate::new(spent_mu, spent_delta).unwrap());
            }
            let c = Certificate::new(mu, delta).unwrap();
            let k = b.more_like(&s, &c).unwrap();
            assert!(k < 1_000_000, "{k}");
            for i in 0..k {
                match b.admits(&s, &c) {
                    Admission::Admitted(n) => s = n,
                    r => panic!("unit {} of {k} promised for {c:?}: {r:?}", i + 1),
                }
            }
        }
        // A unit that spends nothing has no bound; the full budget has room for exactly one
        // unit of μ_B.
        let b = budget(1.0, 1e-6);
        let empty = FilterState::empty();
        assert_eq!(
            b.more_like(&empty, &Certificate::new(0.0, 0.0).unwrap()),
            None
        );
        assert_eq!(
            b.more_like(&empty, &Certificate::new(1.0, 0.0).unwrap()),
            Some(1)
        );
    }

    fn cert(mu: f64, delta: f64) -> Certificate {
        Certificate::new(mu, delta).unwrap()
    }

    /// A budget spent exactly (as the gate admits it, rounding up every sum) reads as 100 %,
    /// never above: one unit of μ_B; units of μ_B/√k for k = 2, 3, 7, 10 and 1000 (μ_B/√k rounded
    /// *up*, so the stored sum is above μ_B² by the roundings); the δ part alike. Half spent reads
    /// as a quarter in μ² terms when μ is half the budget's. Lowering the budget below the
    /// spending reads above 1: that overdraft happened.
    #[test]
    fn an_exactly_spent_budget_is_used_to_one_and_not_above() {
        for (mu_b, delta_b) in [(1.0, 1e-10), (3.0, 1e-6), (0.37, 1e-8), (1e3, 1e-12)] {
            let b = budget(mu_b, delta_b);
            for k in [1u32, 2, 3, 7, 10, 1000] {
                let each = rounding::up(mu_b / f64::from(k).sqrt(), 4.0 * f64::EPSILON);
                let c = cert(each, delta_b / f64::from(k));
                let mut s = FilterState::empty();
                for _ in 0..k {
                    match b.admits(&s, &c) {
                        Admission::Admitted(n) => s = n,
                        r => panic!("{k} units of {each} on {mu_b}: {r:?}"),
                    }
                }
                assert!(s.mu_sq() > 0.0);
                assert_eq!(b.used(&s), 1.0, "{k} units of {each} on {mu_b}: {s:?}");
                assert!(b.exhausted(&s));
            }
            let half = FilterState::empty().with(&cert(mu_b / 2.0, 0.0));
            let u = b.used(&half);
            assert!((0.25..0.25 * (1.0 + 1e-12)).contains(&u), "{u}");
            assert!(!b.exhausted(&half));
        }
        // The budget lowered to half of what was spent: 4 times its μ².
        let s = FilterState::empty().with(&cert(2.0, 0.0));
        let u = budget(1.0, 1e-10).used(&s);
        assert!((4.0..4.0 * (1.0 + 1e-12)).contains(&u), "{u}");
        // Nothing spent: 0; a zero share is exhausted without spending.
        assert_eq!(budget(1.0, 1e-10).used(&FilterState::empty()), 0.0);
        let zero = QuotaShare::new(0.0, 0.0).unwrap();
        assert_eq!(zero.used(&FilterState::empty()), 0.0);
        assert!(zero.exhausted(&FilterState::empty()));
    }

    fn gate(mu_b: f64, delta_b: f64, spent: Option<Certificate>) -> Gate {
        Gate {
            budget: budget(mu_b, delta_b),
            state: spent.map_or(FilterState::empty(), |c| FilterState::empty().with(&c)),
            share: None,
        }
    }

    /// The gate charges the admitted candidate that takes the smallest share of what is left,
    /// the smaller δ on a tie, and refuses with the first candidate's reason when none fits.
    #[test]
    fn the_gate_charges_the_candidate_that_leaves_the_most_room() {
        let cands = [cert(0.3, 0.0), cert(0.2, 1e-8), cert(0.1, 1e-6)];
        // Shares of (1, 1e-5): 0.09; max(0.04, 0.001) = 0.04; max(0.01, 0.1) = 0.1.
        let (v, c) = gate(1.0, 1e-5, None).choose(&cands);
        assert!(v.admitted());
        assert_eq!(c, cands[1]);
        // δ nearly spent: only δ = 0 is admitted, and it is charged.
        let g = gate(1.0, 1e-5, Some(cert(0.0, 1e-5 - 5e-9)));
        assert_eq!(g.choose(&cands), (g.admits(&cands[0]), cands[0]));
        // μ scarce, δ plentiful: the largest δ wins (0.1² of 0.19 against 0.2² of it).
        let g = gate(1.0, 1e-5, Some(cert(0.9, 0.0)));
        assert_eq!(g.choose(&cands).1, cands[2]);
        // A tie goes to the smaller δ.
        let tied = [cert(0.2, 0.0), cert(0.2, 1e-9)];
        assert_eq!(gate(1.0, 1e-5, None).choose(&tied).1, tied[0]);
        // Nothing fits: the first candidate's rejection.
        let g = gate(0.05, 1e-9, None);
        assert_eq!(
            g.choose(&cands),
            (Verdict::Rejected(None, Exceeded::Mu), cands[0])
        );
        // With a quota, the tighter of the two decides: a share with δ nearly gone pushes the
        // choice to δ = 0 although the dataset has δ to spare.
        let mut g = gate(1.0, 1e-5, None);
        g.share = Some(Share {
            holder: "alice".into(),
            budget: QuotaShare::new(1.0, 1e-8).unwrap(),
            state: FilterState::empty().with(&cert(0.0, 5e-9)),
        });
        assert_eq!(g.choose(&cands).1, cands[0]);
    }

    /// Whatever the state, the gate admits a unit iff it admits one of its candidates, and what
    /// it charges is one it admits.
    #[test]
    fn the_choice_admits_exactly_when_some_candidate_fits() {
        let cands = [
            cert(0.5, 0.0),
            cert(0.3, 1e-9),
            cert(0.25, 1e-8),
            cert(0.2, 1e-7),
        ];
        for mu_spent in [0.0, 0.5, 0.8, 0.9, 0.95, 0.97, 0.99] {
            for delta_spent in [0.0, 5e-8, 9e-8, 9.9e-8, 1e-7] {
                let g = gate(1.0, 1e-7, Some(cert(mu_spent, delta_spent)));
                let any = cands.iter().any(|c| g.admits(c).admitted());
                let (v, c) = g.choose(&cands);
                assert_eq!(v.admitted(), any, "{mu_spent} {delta_spent}");
                if any {
                    assert_eq!(v, g.admits(&c));
                    assert!(cands.contains(&c));
                }
            }
        }
    }

    #[test]
    fn gaussian_units_fill_the_budget_exactly_in_quadrature() {
        let b = budget(2.0, 1e-6);
        let mut s = FilterState::empty();
        for mu in [1.2, 1.6] {
            match b.admits(&s, &Certificate::new(mu, 0.0).unwrap()) {
                Admission::Admitted(n) => s = n,
                r => panic!("{mu}: {r:?}"),
            }
        }
        // 1.2² + 1.6² = 4: full.
        assert!((s.mu() - 2.0).abs() < 1e-12);
        assert_eq!(
            b.admits(&s, &Certificate::new(1e-3, 0.0).unwrap()),
            Admission::Rejected(Exceeded::Mu)
        );
        // The remaining μ is admitted exactly.
        let s = match b.admits(&FilterState::empty(), &Certificate::new(1.2, 0.0).unwrap()) {
            Admission::Admitted(n) => n,
            r => panic!("{r:?}"),
        };
        let rest = b.remaining_mu(&s);
        assert!((rest - 1.6).abs() < 1e-12);
        assert!(matches!(
            b.admits(&s, &Certificate::new(rest, 0.0).unwrap()),
            Admission::Admitted(_)
        ));
    }

    #[test]
    fn delta_parts_add_up_to_the_budget() {
        let b = budget(10.0, 1e-6);
        let mut s = FilterState::empty();
        for _ in 0..1000 {
            match b.admits(&s, &Certificate::new(0.01, 1e-9).unwrap()) {
                Admission::Admitted(n) => s = n,
                r => panic!("{r:?}"),
            }
        }
        assert_eq!(s.units(), 1000);
        assert_eq!(
            b.admits(&s, &Certificate::new(0.01, 1e-9).unwrap()),
            Admission::Rejected(Exceeded::Delta)
        );
    }

    #[test]
    fn huge_units_are_rejected_without_overflow_and_corrupt_states_refused() {
        let b = budget(2.0, 1e-6);
        let c = Certificate::new(1e200, 0.0).unwrap();
        assert_eq!(
            b.admits(&FilterState::empty(), &c),
            Admission::Rejected(Exceeded::Mu)
        );
        assert!(FilterState::from_stored(f64::NAN, 0.0, 1).is_err());
        assert!(FilterState::from_stored(f64::INFINITY, 0.0, 1).is_err());
        assert!(FilterState::from_stored(-1.0, 0.0, 1).is_err());
        assert!(FilterState::from_stored(1.0, 1.0, 1).is_err());
        assert!(FilterState::from_stored(1.0, 0.0, 0).is_err());
        assert!(FilterState::from_stored(1.0, 0.0, 1).is_ok());
    }

    #[test]
    fn a_released_unit_is_removed_without_going_below_the_rest() {
        let b = budget(3.0, 1e-6);
        let (a, c) = (
            Certificate::new(0.7, 1e-9).unwrap(),
            Certificate::new(1.3, 2e-9).unwrap(),
        );
        let mut s = FilterState::empty();
        for u in [a, c] {
            s = match b.admits(&s, &u) {
                Admission::Admitted(n) => n,
                r => panic!("{r:?}"),
            };
        }
        let only_a = s.without(&c);
        assert_eq!(only_a.units(), 1);
        // Never below the sum of what is left (0.7² = 0.49, rounded up when added).
        assert!(only_a.mu_sq() >= rounding::mul_up(0.7, 0.7));
        assert!(only_a.mu_sq() - 0.49 < 1e-15);
        assert!(only_a.delta() >= 1e-9 && only_a.delta() < 1e-9 * (1.0 + 1e-12));
        assert_eq!(only_a.without(&a), FilterState::empty());
    }
}

/// Whether the ledger's statement holds, and under what condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Validity {
    /// Holds however the charges and the budget changes are chosen: the budget's high-water mark
    /// has reached the cap fixed at creation, which no budget may pass.
    Always,
    /// Holds as long as the budget is never raised above the high-water mark (on any course the
    /// interaction could take: a raise chosen from the outputs voids it); up to the cap, if any,
    /// whose statement holds always.
    UnlessRaised,
    /// No filter statement holds for this ledger's past (see the note).
    Unknown,
}

/// What the ledger states about the whole interaction on it: G_μ ⊗ f_{0,δ} at the budget's
/// high-water mark (μ_max, δ_max) — the largest budget ever in force, which lowering the budget
/// never lowers — or at what was spent if that is larger. Every unit was admitted with
/// Σμᵢ² ≤ μ_B(t)² ≤ μ_max² and Σδᵢ ≤ δ_B(t) ≤ δ_max, so the filter theorem (`docs/filter.md`) holds
/// at (μ_max, δ_max) for every strategy whose budget never passes them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct Statement {
    /// μ and δ of the stated guarantee G_μ ⊗ f_{0,δ} (rounded up: the gate's tolerance included).
    pub mu: f64,
    pub delta: f64,
    pub validity: Validity,
    /// The cap fixed at creation: G_cap ⊗ f_{0,δ_cap} holds however the charges and the budget
    /// changes are chosen.
    #[schema(value_type = Option<super::budget::Budget>)]
    pub cap: Option<Budget>,
    /// The condition in words.
    pub note: String,
}

impl Statement {
    /// The statement of a ledger whose budget's high-water mark is `high`, with an optional `cap`,
    /// after spending `s`; `unknown` gives why no statement holds for its past.
    pub fn of(high: &Budget, cap: Option<Budget>, s: &FilterState, unknown: Option<&str>) -> Self {
        let (mu, delta) = high.guarantee(s).key();
        let (mu, delta) = (f64::from_bits(mu), f64::from_bits(delta));
        let (validity, note) = match (unknown, cap) {
            (Some(why), _) => (
                Validity::Unknown,
                format!("no filter statement holds for this ledger's past: {why}"),
            ),
            (None, Some(c)) if high.mu() > c.mu() || high.delta() > c.delta() => (
                Validity::UnlessRaised,
                format!(
                    "the budget passed the cap fixed at creation (mu = {}, delta = {:e}), so the \
                     cap promises nothing; this holds unless the budget is raised above mu = {}, \
                     delta = {:e}",
                    c.mu(),
                    c.delta(),
                    high.mu(),
                    high.delta()
                ),
            ),
            (None, Some(c)) if high.mu() == c.mu() && high.delta() == c.delta() => (
                Validity::Always,
                "the budget has reached its cap, which no change may pass: this holds however \
                 the charges and the budget changes were (and will be) chosen"
                    .to_owned(),
            ),
            (None, Some(c)) => (
                Validity::UnlessRaised,
                format!(
                    "holds unless the budget is raised above mu = {}, delta = {:e}; a raise may not \
                     pass the cap (mu = {}, delta = {:e}), whose statement holds always",
                    high.mu(),
                    high.delta(),
                    c.mu(),
                    c.delta()
                ),
            ),
            (None, None) => (
                Validity::UnlessRaised,
                format!(
                    "holds unless the budget is raised above mu = {}, delta = {:e} (no cap was \
                     fixed at creation)",
                    high.mu(),
                    high.delta()
                ),
            ),
        };
        Statement {
            mu,
            delta,
            validity,
            cap,
            note,
        }
    }
}

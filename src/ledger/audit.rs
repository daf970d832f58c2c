//! The audit log: one append-only record per state change, hash-chained.
//!
//! Every change (dataset created, budget, quota or grant changed, unit admitted, rejected,
//! reserved, committed or released, run declared, token created or revoked) is recorded with the
//! principal and the credential it used, the time, the request id, the client's address and the
//! values before and after. A record is written in the same transaction as the change it records
//! (a rejection, which changes nothing, in one of its own), so no change is acknowledged without
//! its record. Records form one chain per dataset (and one, `""`, for tokens): each carries the
//! hash of the one before ([`crate::store::audit_hash`]), and each chain's head (last seq, last
//! hash) is kept beside it. [`Ledgers::verify_audit`] recomputes every chain: an edited record
//! breaks its own hash, a deleted or inserted one breaks the link or the numbering, a deleted last
//! record disagrees with the head.
//!
//! Every record of a dataset's chain written by this release states the ledger's state after the
//! change ([`crate::store::LedgerState`]: version, Σμᵢ², Σδᵢ, units, budget, high-water mark), in
//! the same transaction. `audit verify` checks the stored row against the last stated state, that
//! every admitted or reserved unit's record states sums at least the previous ones plus its
//! certificate (rounded up) and one unit more, and that the high-water mark never falls below a
//! stated budget nor moves down; the service refuses to write on a ledger whose row disagrees with
//! its last stated state (409 `dataset_state_corrupt`).
//!
//! What a chain cannot show: someone who can write the database may rewrite a whole chain and its
//! head consistently. Keep the heads `privacy-ledger audit verify` prints somewhere else (a
//! ticket, a log shipper) to anchor them; a later verification whose heads do not extend the
//! anchored ones shows the rewrite.

use super::auth::{Action, Actor};
use super::{LedgerError, Ledgers};
use crate::store::{audit_hash, AuditDraft, AuditQuery, AuditRecord, AUDIT_GENESIS};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// A draft being built: `draft(..).before(..).after(..).done()`.
pub struct Builder(AuditDraft);

/// Starts the audit record of `action` by `actor` on dataset `dataset` (or on no dataset).
pub fn draft(actor: &Actor, action: &str, dataset: Option<&str>, target: Option<&str>) -> Builder {
    Builder(AuditDraft {
        chain: dataset.unwrap_or("").to_owned(),
        at: super::now(),
        principal: actor.principal.name.clone(),
        credential: Some(actor.principal.token_id.clone()),
        action: action.to_owned(),
        dataset_id: dataset.map(str::to_owned),
        target: target.map(str::to_owned),
        request_id: actor.request_id.clone(),
        client: actor.client.clone(),
        before: None,
        after: None,
    })
}

fn json<T: Serialize>(v: &T) -> Option<String> {
    match serde_json::to_value(v) {
        Ok(Value::Null) | Err(_) => None,
        Ok(v) => Some(v.to_string()),
    }
}

impl Builder {
    pub fn before<T: Serialize>(mut self, v: &T) -> Self {
        self.0.before = json(v);
        self
    }
    pub fn after<T: Serialize>(mut self, v: &T) -> Self {
        self.0.after = json(v);
        self
    }
    pub fn done(self) -> AuditDraft {
        self.0
    }
}

/// An audit record as served.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = AuditRecord)]
pub struct AuditView {
    /// Position in the whole log (the pagination cursor).
    pub id: i64,
    /// The chain (the dataset's id, or `""` for tokens) and the record's place in it (from 1).
    pub chain: String,
    pub seq: i64,
    #[schema(format = DateTime)]
    pub at: String,
    pub principal: String,
    /// The credential used (a token's id; `cli` at the command line).
    pub credential: Option<String>,
    pub action: String,
    pub dataset_id: Option<String>,
    pub target: Option<String>,
    pub request_id: Option<String>,
    pub client: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub before: Option<Value>,
    #[schema(value_type = Option<Object>)]
    pub after: Option<Value>,
    pub prev_hash: String,
    pub hash: String,
}

fn view(r: AuditRecord) -> AuditView {
    let parse = |s: Option<String>| s.and_then(|t| serde_json::from_str(&t).ok());
    AuditView {
        id: r.id,
        chain: r.draft.chain,
        seq: r.seq,
        at: r.draft.at,
        principal: r.draft.principal,
        credential: r.draft.credential,
        action: r.draft.action,
        dataset_id: r.draft.dataset_id,
        target: r.draft.target,
        request_id: r.draft.request_id,
        client: r.draft.client,
        before: parse(r.draft.before),
        after: parse(r.draft.after),
        prev_hash: r.prev_hash,
        hash: r.hash,
    }
}

/// What [`Ledgers::verify_audit`] found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verification {
    pub chains: usize,
    pub records: u64,
    /// Each chain's head (chain, last seq, last hash): anchor these elsewhere.
    pub heads: Vec<(String, i64, String)>,
    /// Every break found (empty: the log is intact).
    pub problems: Vec<String>,
}

/// Records read per page while verifying.
const VERIFY_PAGE: i64 = 1000;

impl Ledgers {
    /// Audit records by id after `q.after`, filtered. Global admins and auditors read everything;
    /// others must name a dataset on which they are admin or auditor.
    pub async fn list_audit(
        &self,
        actor: &Actor,
        q: AuditQuery,
    ) -> Result<(Vec<AuditView>, Option<i64>), LedgerError> {
        if actor.principal.may(Action::Audit).is_err() {
            match &q.dataset_id {
                Some(id) => self.authorize(actor, id, Action::Audit).await?,
                None => {
                    return Err(LedgerError::Forbidden(
                        "reading the whole audit log takes the global admin or auditor role; \
                         name a dataset you audit (dataset_id)"
                            .into(),
                    ))
                }
            }
        }
        let limit = q.limit;
        let rows = self
            .store
            .list_audit(&AuditQuery {
                limit: limit + 1,
                ..q
            })
            .await?;
        let more = rows.len() as i64 > limit;
        let items: Vec<AuditView> = rows.into_iter().take(limit as usize).map(view).collect();
        let next = if more {
            items.last().map(|r| r.id)
        } else {
            None
        };
        Ok((items, next))
    }

    /// Recomputes every chain of the audit log (see the module docs).
    pub async fn verify_audit(&self) -> Result<Verification, LedgerError> {
        let heads = self.store.audit_heads().await?;
        let mut problems = Vec::new();
        let mut records = 0u64;
        for (chain, head_seq, head_hash) in &heads {
            let (mut prev, mut seq) = (AUDIT_GENESIS.to_owned(), 0i64);
            let mut states = StateWalk::default();
            loop {
                let page = self.store.audit_chain(chain, seq, VERIFY_PAGE).await?;
                if page.is_empty() {
                    break;
                }
                for r in page {
                    records += 1;
                    states.check(chain, &r, &mut problems);
                    if r.seq != seq + 1 {
                        problems.push(format!(
                            "chain {chain:?}: record {} follows record {seq} (records missing)",
                            r.seq
                        ));
                    }
                    if r.prev_hash != prev {
                        problems.push(format!(
                            "chain {chain:?} record {}: its previous hash is not the hash of the \
                             record before it (a record was deleted, inserted or edited)",
                            r.seq
                        ));
                    }
                    if audit_hash(&r.prev_hash, r.seq, &r.draft) != r.hash {
                        problems.push(format!(
                            "chain {chain:?} record {} (id {}): its content does not match its \
                             hash (the record was edited)",
                            r.seq, r.id
                        ));
                    }
                    prev = r.hash;
                    seq = r.seq;
                }
            }
            // The stored row against the last state the chain recorded.
            if let (Some(last), false) = (states.last, chain.is_empty()) {
                match self.store.get_dataset(chain).await? {
                    None => problems.push(format!(
                        "chain {chain:?}: its dataset's row is missing (deleted outside the service)"
                    )),
                    Some(row) => match crate::store::LedgerState::of_row(&row) {
                        Some(stored) if stored == last => {}
                        stored => problems.push(format!(
                            "dataset {chain:?}: its stored state {stored:?} is not the state its \
                             audit log last recorded {last:?} (changed outside the service)"
                        )),
                    },
                }
            }
            if *head_seq < 0 {
                problems.push(format!(
                    "chain {chain:?}: {seq} records but no head (the head was deleted)"
                ));
            } else if seq != *head_seq || prev != *head_hash {
                problems.push(format!(
                    "chain {chain:?}: ends at record {seq}, but its head says {head_seq} (records \
                     after {seq} were deleted, or the head was edited)"
                ));
            }
        }
        for id in self.store.datasets_without_chain().await? {
            problems.push(format!(
                "dataset {id:?}: its audit chain is missing (deleted with its head: every change \
                 it had was recorded there)"
            ));
        }
        Ok(Verification {
            chains: heads.len(),
            records,
            heads,
            problems,
        })
    }
}

/// Relative allowance below the recomputed sums: the ledger adds each unit rounded up, exactly as
/// recomputed here, so stated sums equal the recomputation; this only absorbs a different order of
/// the same roundings. A stated sum further below is an under-count.
const SUM_SLACK: f64 = 1e-12;

/// The states a chain's records stated, walked in order.
#[derive(Default)]
struct StateWalk {
    last: Option<crate::store::LedgerState>,
}

impl StateWalk {
    /// Checks record `r` against the state before it, and moves on.
    fn check(&mut self, chain: &str, r: &AuditRecord, problems: &mut Vec<String>) {
        use crate::accountant::rounding::{add_up, mul_up};
        let Some(now) = crate::store::LedgerState::of_audit(&r.draft) else {
            return;
        };
        if let Some(before) = self.last {
            let at = format!("chain {chain:?} record {}", r.seq);
            if now.version != before.version + 1 {
                problems.push(format!(
                    "{at}: states version {} after {} (a change without its record)",
                    now.version, before.version
                ));
            }
            if now.mu_max < before.mu_max || now.delta_max < before.delta_max {
                problems.push(format!("{at}: the budget's high-water mark moved down"));
            }
            // Admitted or reserved units add their certificate (a single ledger's record holds
            // it under `charge.unit`, a multi-ledger charge's under `unit`).
            if matches!(r.draft.action.as_str(), "unit.admitted" | "unit.reserved") {
                let after: Option<Value> = r
                    .draft
                    .after
                    .as_deref()
                    .and_then(|a| serde_json::from_str(a).ok());
                let unit = after.as_ref().and_then(|a| {
                    let u = a
                        .get("charge")
                        .and_then(|c| c.get("unit"))
                        .or(a.get("unit"))?;
                    Some((u.get("mu")?.as_f64()?, u.get("delta")?.as_f64()?))
                });
                if let Some((mu, delta)) = unit {
                    let mu_sq = add_up(before.mu_sq_spent, mul_up(mu, mu));
                    let d = add_up(before.delta_spent, delta);
                    if now.mu_sq_spent < mu_sq * (1.0 - SUM_SLACK)
                        || now.delta_spent < d * (1.0 - SUM_SLACK)
                        || now.units != before.units + 1
                    {
                        problems.push(format!(
                            "{at}: states sums ({}, {}, {} units) below the previous state plus \
                             the unit ({mu_sq}, {d}, {} units)",
                            now.mu_sq_spent,
                            now.delta_spent,
                            now.units,
                            before.units + 1
                        ));
                    }
                }
            }
        }
        if now.mu_max < now.budget_mu || now.delta_max < now.budget_delta {
            problems.push(format!(
                "chain {chain:?} record {}: the high-water mark is below the budget",
                r.seq
            ));
        }
        self.last = Some(now);
    }
}

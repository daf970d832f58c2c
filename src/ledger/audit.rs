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
            loop {
                let page = self.store.audit_chain(chain, seq, VERIFY_PAGE).await?;
                if page.is_empty() {
                    break;
                }
                for r in page {
                    records += 1;
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
        Ok(Verification {
            chains: heads.len(),
            records,
            heads,
            problems,
        })
    }
}

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

use super::error::LedgerError;
use super::principal::{Action, Actor};
use super::Ledgers;
use crate::store::{
    audit_hash, AuditDraft, AuditQuery, AuditRecord, QuotaRow, QuotaState, AUDIT_GENESIS,
};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// A draft being built: `draft(..).before(..).after(..).done()`.
pub struct Builder(AuditDraft);

/// Starts the audit record of `action` by `actor` on dataset `dataset` (or on no dataset).
pub fn draft(actor: &Actor, action: &str, dataset: Option<&str>, target: Option<&str>) -> Builder {
    Builder(AuditDraft {
        chain: dataset.unwrap_or("").to_owned(),
        at: super::rows::now(),
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
    /// Position in the whole log, in the order records became visible (the pagination cursor: a
    /// record committed after a reader read position p gets a position above p, on every store).
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

/// A page of at most `limit` records from `rows` (read with one more, to know whether there are
/// more), and the next page's cursor: the last record's position, when there are more.
fn audit_page(rows: Vec<AuditRecord>, limit: i64) -> (Vec<AuditView>, Option<i64>) {
    let more = rows.len() as i64 > limit;
    let items: Vec<AuditView> = rows.into_iter().take(limit as usize).map(view).collect();
    let next = more.then(|| items.last().map(|r| r.id)).flatten();
    (items, next)
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
    /// SHA-256 (hex) of every head, one line `chain\tseq\thash\n` each in chain order: one value
    /// that pins the whole log's heads (the head of the heads).
    pub digest: String,
    /// Every break found (empty: the log is intact).
    pub problems: Vec<String>,
}

/// Records read per page while verifying.
const VERIFY_PAGE: i64 = 1000;

impl Ledgers {
    /// Audit records by id after `q.after`, filtered. Global admins and auditors read everything;
    /// others must name a dataset on which they are admin or auditor.
    /// [`Ledgers::list_audit`] newest first: records below position `before` (`None`: from the
    /// newest), and the cursor of the next (older) page.
    pub async fn list_audit_newest(
        &self,
        actor: &Actor,
        q: AuditQuery,
        before: Option<i64>,
    ) -> Result<(Vec<AuditView>, Option<i64>), LedgerError> {
        self.may_read_audit(actor, q.dataset_id.as_deref()).await?;
        let limit = q.limit;
        let rows = self
            .store
            .list_audit_newest(
                &AuditQuery {
                    limit: limit + 1,
                    ..q
                },
                before.unwrap_or(i64::MAX),
            )
            .await?;
        Ok(audit_page(rows, limit))
    }

    /// Whether `actor` may read the audit log (of dataset `dataset`, or all of it).
    async fn may_read_audit(
        &self,
        actor: &Actor,
        dataset: Option<&str>,
    ) -> Result<(), LedgerError> {
        if actor.principal.may(Action::Audit).is_err() {
            match dataset {
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
        Ok(())
    }

    pub async fn list_audit(
        &self,
        actor: &Actor,
        q: AuditQuery,
    ) -> Result<(Vec<AuditView>, Option<i64>), LedgerError> {
        self.may_read_audit(actor, q.dataset_id.as_deref()).await?;
        let limit = q.limit;
        let rows = self
            .store
            .list_audit(&AuditQuery {
                limit: limit + 1,
                ..q
            })
            .await?;
        Ok(audit_page(rows, limit))
    }

    /// Recomputes every chain of the audit log (see the module docs).
    pub async fn verify_audit(&self) -> Result<Verification, LedgerError> {
        self.verify_audit_against(&[]).await
    }

    /// [`Ledgers::verify_audit`], and each head in `kept` (chain, seq, hash: printed by an
    /// earlier verification and kept outside the database) still in the log: its chain reaches
    /// that record and the record has that hash. A database restored from an older copy, or a
    /// chain rewritten and its head rewritten to match, is consistent in itself; only a head
    /// kept elsewhere shows it.
    pub async fn verify_audit_against(
        &self,
        kept: &[(String, i64, String)],
    ) -> Result<Verification, LedgerError> {
        let mut heads = self.store.audit_heads().await?;
        heads.sort();
        let mut problems = Vec::new();
        let mut records = 0u64;
        for (chain, head_seq, head_hash) in &heads {
            let (mut prev, mut seq) = (AUDIT_GENESIS.to_owned(), 0i64);
            let mut states = StateWalk::default();
            let mut last_stated = None;
            loop {
                let page = self.store.audit_chain(chain, seq, VERIFY_PAGE).await?;
                if page.is_empty() {
                    break;
                }
                for r in page {
                    records += 1;
                    states.check(chain, &r, &mut problems);
                    if crate::store::sql::states_ledger(r.draft.after.as_deref()) {
                        last_stated = Some(r.seq);
                    }
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
            // The head's pointer, which the check before every write follows (schema 11),
            // against the last record that states a state: moved back, it would let a row
            // rolled back to that state pass that check.
            let pointed = self.store.last_state_audit(chain).await?.map(|r| r.seq);
            if pointed != last_stated {
                problems.push(format!(
                    "chain {chain:?}: its head points at record {pointed:?} as the last that \
                     states the ledger's state, but that is record {last_stated:?} (the head \
                     was edited)"
                ));
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
                let stored = self.store.list_quotas(chain).await?;
                states.compare_quotas(chain, &stored, &mut problems);
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
        for (chain, seq, hash) in kept {
            let now = heads.iter().find(|h| &h.0 == chain);
            match now {
                None => problems.push(format!(
                    "chain {chain:?}: kept at record {seq}, and gone from the log (deleted)"
                )),
                Some((_, head_seq, _)) if head_seq < seq => problems.push(format!(
                    "chain {chain:?}: kept at record {seq}, but the log ends at record \
                     {head_seq} (rolled back: restored from an older copy, or its last records \
                     deleted with the head)"
                )),
                Some(_) => {
                    let r = self.store.audit_chain(chain, seq - 1, 1).await?;
                    match r.first() {
                        Some(r) if r.seq == *seq && &r.hash == hash => {}
                        _ => problems.push(format!(
                            "chain {chain:?}: record {seq} is not the one kept (hash {hash}): \
                             the chain was rewritten at or before it"
                        )),
                    }
                }
            }
        }
        let digest = {
            use sha2::{Digest, Sha256};
            let mut h = Sha256::new();
            for (chain, seq, hash) in &heads {
                h.update(format!("{chain}\t{seq}\t{hash}\n"));
            }
            h.finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        Ok(Verification {
            chains: heads.len(),
            records,
            heads,
            digest,
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
    /// Each quota row as last stated.
    quotas: std::collections::BTreeMap<String, QuotaState>,
    /// Whether the chain's first stated state had its quota rows (every ledger created since
    /// records held them): then every stored row must be one the log stated. Older chains are
    /// checked for the rows they stated since.
    complete: Option<bool>,
}

impl StateWalk {
    /// The stored quota rows of the chain's ledger against the rows its log last stated.
    fn compare_quotas(&self, chain: &str, stored: &[QuotaRow], problems: &mut Vec<String>) {
        for q in stored {
            match self.quotas.get(&q.principal) {
                Some(stated) if *stated == QuotaState::of_row(q) => {}
                Some(stated) => problems.push(format!(
                    "dataset {chain:?}: its stored quota {:?} {:?} is not the one its audit log \
                     last recorded {stated:?} (changed outside the service)",
                    q.principal,
                    QuotaState::of_row(q)
                )),
                None if self.complete == Some(true) => problems.push(format!(
                    "dataset {chain:?}: its quota {:?} was never recorded in its audit log \
                     (inserted outside the service)",
                    q.principal
                )),
                None => {}
            }
        }
        for p in self.quotas.keys() {
            if !stored.iter().any(|q| &q.principal == p) {
                problems.push(format!(
                    "dataset {chain:?}: its quota {p:?} is in its audit log but not stored \
                     (deleted outside the service)"
                ));
            }
        }
    }

    /// The quota rows record `r` states, against the rows before it: a unit admitted or reserved
    /// moves exactly one share (the one that paid) by at least its certificate, and no share's
    /// spend passes its quota.
    fn check_quotas(
        &mut self,
        at: &str,
        r: &AuditRecord,
        unit: Option<(f64, f64)>,
        problems: &mut Vec<String>,
    ) {
        use crate::accountant::rounding::{add_up, mul_up};
        let rows = QuotaState::of_audit(&r.draft);
        if self.complete.is_none() {
            self.complete = Some(rows.is_some());
        }
        let Some(rows) = rows else {
            return;
        };
        let mut paid = 0;
        for q in rows {
            let before = self.quotas.get(&q.principal);
            let (b_sq, b_d, b_units) =
                before.map_or((0.0, 0.0, 0), |b| (b.mu_sq_spent, b.delta_spent, b.units));
            if let Some((mu, delta)) = unit {
                if q.units == b_units + 1 {
                    paid += 1;
                    let (sq, d) = (add_up(b_sq, mul_up(mu, mu)), add_up(b_d, delta));
                    if q.mu_sq_spent < sq * (1.0 - SUM_SLACK)
                        || q.delta_spent < d * (1.0 - SUM_SLACK)
                    {
                        problems.push(format!(
                            "{at}: quota {:?} states spend ({}, {}) below the previous plus the \
                             unit ({sq}, {d})",
                            q.principal, q.mu_sq_spent, q.delta_spent
                        ));
                    }
                } else if q.units != b_units || q.mu_sq_spent != b_sq || q.delta_spent != b_d {
                    problems.push(format!(
                        "{at}: quota {:?} changed its spend without paying the unit",
                        q.principal
                    ));
                }
            }
            let tol = 1.0 + super::budget::GATE_TOLERANCE;
            if q.principal != super::budget::UNALLOCATED
                && (q.mu_sq_spent.sqrt() > q.mu * tol || q.delta_spent > q.delta * tol)
            {
                problems.push(format!(
                    "{at}: quota {:?} states spend (mu {}, delta {}) past the quota (mu {}, delta \
                     {})",
                    q.principal,
                    q.mu_sq_spent.sqrt(),
                    q.delta_spent,
                    q.mu,
                    q.delta
                ));
            }
            self.quotas.insert(q.principal.clone(), q);
        }
        if unit.is_some() && paid > 1 {
            problems.push(format!("{at}: one unit paid by {paid} quotas"));
        }
    }

    /// Checks record `r` against the state before it, and moves on.
    fn check(&mut self, chain: &str, r: &AuditRecord, problems: &mut Vec<String>) {
        use crate::accountant::rounding::{add_up, mul_up};
        let Some(now) = crate::store::LedgerState::of_audit(&r.draft) else {
            return;
        };
        let at = format!("chain {chain:?} record {}", r.seq);
        // Admitted or reserved units add their certificate (a single ledger's record holds it
        // under `charge.unit`, a multi-ledger charge's under `unit`).
        let unit = if matches!(r.draft.action.as_str(), "unit.admitted" | "unit.reserved") {
            let after: Option<Value> = r
                .draft
                .after
                .as_deref()
                .and_then(|a| serde_json::from_str(a).ok());
            after.as_ref().and_then(|a| {
                let u = a
                    .get("charge")
                    .and_then(|c| c.get("unit"))
                    .or(a.get("unit"))?;
                Some((u.get("mu")?.as_f64()?, u.get("delta")?.as_f64()?))
            })
        } else {
            None
        };
        self.check_quotas(&at, r, unit, problems);
        if let Some(before) = self.last {
            if now.version != before.version + 1 {
                problems.push(format!(
                    "{at}: states version {} after {} (a change without its record)",
                    now.version, before.version
                ));
            }
            if now.mu_max < before.mu_max || now.delta_max < before.delta_max {
                problems.push(format!("{at}: the budget's high-water mark moved down"));
            }
            {
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

//! The store contract, run against SQLite always and PostgreSQL when `TEST_DATABASE_URL` is set.

use privacy_ledger::app::open_store;
use privacy_ledger::store::{
    audit_hash, lock_order, AuditDraft, AuditQuery, DatasetRow, DatasetUpdate, EntryRow,
    LedgerAppend, NewBlock, QuotaRow, SessionRow, SharedBody, Store, StoreError, TokenRow,
    AUDIT_GENESIS,
};
use std::sync::Arc;

/// The PostgreSQL URL for tests, if any (`.ci/run` sets it; without it those tests are skipped).
pub fn postgres_url() -> Option<String> {
    std::env::var("TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

fn dataset(id: &str) -> DatasetRow {
    DatasetRow {
        id: id.to_owned(),
        description: "d".into(),
        neighboring_relation: "add_or_remove_one".into(),
        budget_mu: 1.0,
        budget_delta: 1e-10,
        grid_step: 1e-4,
        version: 0,
        charges: 0,
        mu_spent: 0.0,
        mu_sq_spent: Some(0.0),
        delta_spent: Some(0.0),
        units: Some(0),
        exact_mu: Some(0.0),
        reserved: Some(0),
        create_hash: Some("h0".into()),
        mu_max: 1.5,
        delta_max: 1e-10,
        cap_mu: Some(4.0),
        cap_delta: Some(1e-9),
        statement_unknown: None,
        states_from: Some(0),
        state_seq: 0,
        budget_target: Some("{\"epsilon\":1}".into()),
        population: Some("{\"privacy_unit\":\"user\",\"size\":60000}".into()),
        created_at: "2026-01-01T00:00:00.000Z".into(),
        updated_at: "2026-01-01T00:00:00.000Z".into(),
    }
}

fn entry(key: Option<&str>) -> EntryRow {
    EntryRow {
        seq: 0,
        kind: "charge".into(),
        charge_id: Some("c".into()),
        event: Some("{\"type\":\"gdp\",\"mu\":0.1}".into()),
        label: None,
        metadata: None,
        idempotency_key: key.map(str::to_owned),
        request_hash: Some("h".into()),
        mu_after: Some(0.1),
        unit_mu: Some(0.1),
        unit_delta: Some(0.0),
        budget_mu: None,
        budget_delta: None,
        response: Some("{}".into()),
        ref_id: None,
        run_id: None,
        chunk: None,
        status: Some("committed".into()),
        principal: Some("alice".into()),
        quota: None,
        shared: None,
        created_at: "2026-01-01T00:00:01.000Z".into(),
    }
}

fn update(charges: i64, mu: f64) -> DatasetUpdate {
    DatasetUpdate {
        budget_mu: 1.0,
        budget_delta: 1e-10,
        mu_max: 1.5,
        delta_max: 1e-10,
        charges,
        mu_spent: mu,
        mu_sq_spent: mu * mu,
        delta_spent: 0.0,
        units: charges,
        reserved: 0,
        settle: None,
        quotas: Vec::new(),
        audit: None,
        budget_target: None,
        updated_at: "2026-01-01T00:00:01.000Z".into(),
    }
}

fn draft(chain: &str, action: &str) -> AuditDraft {
    AuditDraft {
        chain: chain.into(),
        at: "2026-01-01T00:00:02.000Z".into(),
        principal: "alice".into(),
        credential: Some("t1".into()),
        action: action.into(),
        dataset_id: (!chain.is_empty()).then(|| chain.to_owned()),
        target: None,
        request_id: Some("r1".into()),
        client: Some("127.0.0.1:5".into()),
        before: None,
        after: Some("{\"x\":1}".into()),
    }
}

async fn contract(store: Arc<dyn Store>) {
    let p = uuid::Uuid::new_v4().simple().to_string();
    let id = format!("{p}-a");
    store.ping().await.unwrap();
    store
        .create_dataset(&dataset(&id), b"s0", None, None)
        .await
        .unwrap();
    assert_eq!(
        store.create_dataset(&dataset(&id), b"s0", None, None).await,
        Err(StoreError::AlreadyExists)
    );
    assert_eq!(store.get_dataset(&id).await.unwrap().unwrap(), dataset(&id));

    // Alert rules and crossings (on a dataset of their own: its chain gets the rule's records):
    // a crossing is claimed once; a fall back below re-arms it.
    let aid = format!("{p}-alerts");
    store
        .create_dataset(&dataset(&aid), b"s0", None, None)
        .await
        .unwrap();
    assert_eq!(store.alert_rule(&aid).await.unwrap(), None);
    store
        .set_alert_rule(
            &aid,
            "[0.5]",
            "2026-01-01T00:00:00.000Z",
            &draft(&aid, "alerts.changed"),
        )
        .await
        .unwrap();
    store
        .set_alert_rule(
            &aid,
            "[0.25,0.5]",
            "2026-01-01T00:00:01.000Z",
            &draft(&aid, "alerts.changed"),
        )
        .await
        .unwrap();
    assert_eq!(
        store.alert_rule(&aid).await.unwrap().as_deref(),
        Some("[0.25,0.5]")
    );
    let at = "2026-01-01T00:00:02.000Z";
    assert!(store.claim_crossing(&aid, 0.5, at).await.unwrap());
    assert!(!store.claim_crossing(&aid, 0.5, at).await.unwrap());
    assert!(store.claim_crossing(&aid, 0.25, at).await.unwrap());
    assert_eq!(store.crossings(&aid).await.unwrap(), vec![0.25, 0.5]);
    assert_eq!(store.rearm_crossings(&aid, 0.3).await.unwrap(), 1);
    assert_eq!(store.crossings(&aid).await.unwrap(), vec![0.25]);
    assert!(store.claim_crossing(&aid, 0.5, at).await.unwrap());
    assert_eq!(store.rearm_crossings(&aid, 0.0).await.unwrap(), 2);
    assert!(store
        .get_dataset(&format!("{p}-zz"))
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        store.get_snapshot(&id).await.unwrap().unwrap(),
        (0, b"s0".to_vec())
    );

    // Append: compare-and-swap on the version, the entry numbered; the snapshot untouched.
    let seq = store
        .append(&id, 0, &entry(Some("k1")), &update(1, 0.1))
        .await
        .unwrap();
    assert_eq!(seq, 1);
    assert_eq!(
        store.get_snapshot(&id).await.unwrap().unwrap(),
        (0, b"s0".to_vec())
    );
    let row = store.get_dataset(&id).await.unwrap().unwrap();
    assert_eq!((row.version, row.charges, row.mu_spent), (1, 1, 0.1));
    // A stale version is refused and writes nothing.
    assert_eq!(
        store.append(&id, 0, &entry(None), &update(2, 0.2)).await,
        Err(StoreError::VersionConflict)
    );
    // A reused idempotency key is refused and writes nothing (the version stays).
    assert_eq!(
        store
            .append(&id, 1, &entry(Some("k1")), &update(2, 0.2))
            .await,
        Err(StoreError::DuplicateKey)
    );
    // A budget change.
    let mut b = entry(None);
    b.kind = "budget".into();
    b.budget_mu = Some(2.0);
    b.budget_delta = Some(1e-10);
    assert_eq!(store.append(&id, 1, &b, &update(1, 0.1)).await.unwrap(), 2);
    // Snapshots: written in parts, only when newer, never by an append.
    let big: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    assert!(store.put_snapshot(&id, 2, &big, Some(0.7)).await.unwrap());
    assert_eq!(
        store.get_snapshot(&id).await.unwrap().unwrap(),
        (2, big.clone())
    );
    let row = store.get_dataset(&id).await.unwrap().unwrap();
    assert_eq!(
        (row.state_seq, row.exact_mu, row.version),
        (2, Some(0.7), 2)
    );
    assert!(!store.put_snapshot(&id, 1, b"old", Some(0.1)).await.unwrap());
    assert!(!store
        .put_snapshot(&id, 2, b"same", Some(0.1))
        .await
        .unwrap());
    assert_eq!(store.get_snapshot(&id).await.unwrap().unwrap(), (2, big));
    assert!(store.put_snapshot(&id, 3, b"s3", None).await.unwrap());
    assert_eq!(
        store.get_snapshot(&id).await.unwrap().unwrap(),
        (3, b"s3".to_vec())
    );
    assert_eq!(store.get_snapshot(&format!("{p}-zz")).await.unwrap(), None);
    assert_eq!(
        store
            .append(&format!("{p}-zz"), 0, &entry(None), &update(1, 0.1))
            .await,
        Err(StoreError::NotFound)
    );

    // What an append writes is what `DatasetUpdate::applied` says it writes (the ledger keeps
    // that instead of reading the row back): every field, and quotas inserted or replaced.
    let qid = format!("{p}-q");
    store
        .create_dataset(&dataset(&qid), b"s0", None, None)
        .await
        .unwrap();
    let quota = |principal: &str, mu: f64| privacy_ledger::store::QuotaRow {
        dataset_id: qid.clone(),
        principal: principal.into(),
        mu,
        delta: 1e-12,
        mu_sq_spent: mu * mu / 4.0,
        delta_spent: 0.0,
        units: 3,
        updated_at: "2026-01-01T00:00:03.000Z".into(),
    };
    let sorted = |mut q: Vec<privacy_ledger::store::QuotaRow>| {
        q.sort_by(|a, b| a.principal.cmp(&b.principal));
        q
    };
    let mut before = (store.get_dataset(&qid).await.unwrap().unwrap(), Vec::new());
    for (n, (quotas, reserved)) in [
        (vec![quota("zed", 0.5), quota("*", 0.0)], 1),
        (vec![quota("zed", 0.25), quota("Amy", 0.125)], 0),
    ]
    .into_iter()
    .enumerate()
    {
        let up = DatasetUpdate {
            budget_mu: 3.0 + n as f64,
            budget_delta: 1e-9,
            mu_max: 3.5 + n as f64,
            delta_max: 2e-9,
            charges: 7,
            mu_spent: 0.3,
            mu_sq_spent: 0.09,
            delta_spent: 1e-11,
            units: 4,
            reserved,
            quotas,
            // A budget change's target is written with it; another entry leaves it.
            budget_target: (n == 0).then(|| Some(format!("{{\"epsilon\":{n}}}"))),
            updated_at: format!("2026-01-02T00:00:0{n}.000Z"),
            ..update(0, 0.0)
        };
        let mut e = entry(None);
        e.kind = "quota".into();
        let version = before.0.version;
        store.append(&qid, version, &e, &up).await.unwrap();
        let expected = up.applied(&before.0, &before.1);
        let now = (
            store.get_dataset(&qid).await.unwrap().unwrap(),
            store.list_quotas(&qid).await.unwrap(),
        );
        assert_eq!(now.0, expected.0);
        assert_eq!(sorted(now.1.clone()), sorted(expected.1));
        before = now;
    }

    let found = store.find_entry_by_key(&id, "k1").await.unwrap().unwrap();
    assert_eq!((found.seq, found.mu_after), (1, Some(0.1)));
    assert!(store.find_entry_by_key(&id, "k2").await.unwrap().is_none());
    let all = store.list_entries(&id, None, 0, 10).await.unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    let charges = store
        .list_entries(&id, Some("charge"), 0, 10)
        .await
        .unwrap();
    assert_eq!(charges.len(), 1);
    // The charges' summaries: the same charges, the same figures.
    let units = store.list_units(&id, 0, 10).await.unwrap();
    assert_eq!(units.len(), 1);
    let (u, c) = (&units[0], &charges[0]);
    assert_eq!(
        (
            u.seq,
            &u.charge_id,
            &u.label,
            u.mu_after,
            u.unit_mu,
            u.unit_delta
        ),
        (
            c.seq,
            &c.charge_id,
            &c.label,
            c.mu_after,
            c.unit_mu,
            c.unit_delta
        )
    );
    assert_eq!(
        (&u.status, &u.principal, &u.created_at),
        (&c.status, &c.principal, &c.created_at)
    );
    assert!(store.list_units(&id, u.seq, 10).await.unwrap().is_empty());
    assert_eq!(
        store.list_entries(&id, None, 1, 10).await.unwrap()[0].seq,
        2
    );

    // Reservations: a reserved chunk of a run, found by charge id and by run; settling it updates
    // its status in the same transaction, once.
    let mut r = entry(Some("k3"));
    (r.charge_id, r.status) = (Some("c3".into()), Some("reserved".into()));
    (r.run_id, r.chunk) = (Some("run1".into()), Some(0));
    assert_eq!(store.append(&id, 2, &r, &update(2, 0.2)).await, Ok(3));
    let c3 = store.find_charge(&id, "c3").await.unwrap().unwrap();
    assert_eq!((c3.seq, c3.status.as_deref()), (3, Some("reserved")));
    assert!(store.find_charge(&id, "nope").await.unwrap().is_none());
    let run = store.list_run(&id, "run1", 0).await.unwrap();
    assert_eq!(run.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3]);
    let settle_to = |from: &str, to: &str| {
        let mut u = update(2, 0.2);
        u.settle = Some(privacy_ledger::store::Settle {
            charge_id: "c3".into(),
            from: from.into(),
            to: to.into(),
        });
        u
    };
    let mut commit = entry(None);
    (commit.kind, commit.charge_id, commit.ref_id) = ("commit".into(), None, Some("c3".into()));
    // A status moves only from the one the ledger read.
    assert_eq!(
        store
            .append(&id, 3, &commit, &settle_to("started", "committed"))
            .await,
        Err(StoreError::VersionConflict)
    );
    let settle = settle_to("reserved", "committed");
    assert_eq!(store.append(&id, 3, &commit, &settle).await, Ok(4));
    let c3 = store.find_charge(&id, "c3").await.unwrap().unwrap();
    assert_eq!(c3.status.as_deref(), Some("committed"));
    // Settling a charge whose status moved on writes nothing.
    assert_eq!(
        store.append(&id, 4, &commit, &settle).await,
        Err(StoreError::VersionConflict)
    );
    assert_eq!(store.get_dataset(&id).await.unwrap().unwrap().version, 4);
    // Keys stored before scoping are found (k3 is one); scoped keys are not legacy.
    assert!(store.has_legacy_keys(&id).await.unwrap());
    let fresh = format!("{p}-scoped");
    store
        .create_dataset(&dataset(&fresh), b"", None, None)
        .await
        .unwrap();
    assert!(!store.has_legacy_keys(&fresh).await.unwrap());
    let scoped = privacy_ledger::ledger::keys::IdemKey::scoped(
        "alice",
        privacy_ledger::ledger::keys::Operation::Charge,
        &fresh,
        "k".into(),
    );
    let mut e = entry(Some(scoped.stored()));
    (e.charge_id, e.status) = (Some("c3".into()), Some("reserved".into()));
    assert_eq!(store.append(&fresh, 0, &e, &update(1, 0.1)).await, Ok(1));
    assert!(!store.has_legacy_keys(&fresh).await.unwrap());
    // reserved -> started -> committed.
    let (start, to_commit) = (
        settle_to("reserved", "started"),
        settle_to("started", "committed"),
    );
    assert_eq!(store.append(&fresh, 1, &commit, &start).await, Ok(2));
    assert_eq!(
        store.append(&fresh, 2, &commit, &start).await,
        Err(StoreError::VersionConflict)
    );
    assert_eq!(store.append(&fresh, 2, &commit, &to_commit).await, Ok(3));
    let c3 = store.find_charge(&fresh, "c3").await.unwrap().unwrap();
    assert_eq!(c3.status.as_deref(), Some("committed"));

    store
        .create_dataset(&dataset(&format!("{p}-b")), b"", None, None)
        .await
        .unwrap();
    let page = store
        .list_datasets(Some(&format!("{p}-a")), 10, None)
        .await
        .unwrap();
    assert!(page.iter().any(|d| d.id == format!("{p}-b")));
    assert!(page.iter().all(|d| d.id.as_str() > id.as_str()));

    // Grants: listing by grantee shows only granted datasets; a grant is changed and withdrawn,
    // each with its audit record.
    let b = format!("{p}-b");
    assert_eq!(store.grant(&b, "bob").await.unwrap(), None);
    let g = draft(&b, "grant.set");
    assert!(store
        .set_grant(&b, "bob", Some("analyst"), "t", &g)
        .await
        .unwrap());
    assert_eq!(
        store.grant(&b, "bob").await.unwrap().as_deref(),
        Some("analyst")
    );
    let mine = store
        .list_datasets(None, 10_000, Some("bob"))
        .await
        .unwrap();
    assert_eq!(
        mine.iter().map(|d| d.id.clone()).collect::<Vec<_>>(),
        vec![b.clone()]
    );
    assert!(store
        .set_grant(&b, "bob", Some("auditor"), "t", &g)
        .await
        .unwrap());
    assert_eq!(store.list_grants(&b).await.unwrap()[0].role, "auditor");
    assert!(store.set_grant(&b, "bob", None, "t", &g).await.unwrap());
    assert!(!store.set_grant(&b, "bob", None, "t", &g).await.unwrap());
    assert!(store
        .list_datasets(None, 10, Some("bob"))
        .await
        .unwrap()
        .is_empty());

    // Quotas are written with an append, in its transaction (not at all when it fails).
    let q = QuotaRow {
        dataset_id: id.clone(),
        principal: "alice".into(),
        mu: 0.5,
        delta: 0.0,
        mu_sq_spent: 0.01,
        delta_spent: 0.0,
        units: 1,
        updated_at: "t".into(),
    };
    let mut u = update(2, 0.2);
    u.quotas = vec![q.clone()];
    u.audit = Some(draft(&id, "quota.set"));
    assert_eq!(
        store.append(&id, 3, &entry(None), &u).await,
        Err(StoreError::VersionConflict)
    );
    assert!(store.list_quotas(&id).await.unwrap().is_empty());
    assert_eq!(store.append(&id, 4, &entry(None), &u).await, Ok(5));
    assert_eq!(store.list_quotas(&id).await.unwrap(), vec![q.clone()]);
    let e5 = store.list_entries(&id, None, 4, 1).await.unwrap();
    assert_eq!(e5[0].principal.as_deref(), Some("alice"));

    // The audit chain of the dataset: the three grant records went to chain b, the quota record
    // (once: the failed append wrote none) to chain id; hashes link, heads agree.
    store.audit(&draft(&id, "unit.rejected")).await.unwrap();
    let chain = store.audit_chain(&id, 0, 100).await.unwrap();
    assert_eq!(
        chain
            .iter()
            .map(|r| (r.seq, r.draft.action.as_str()))
            .collect::<Vec<_>>(),
        vec![(1, "quota.set"), (2, "unit.rejected")]
    );
    assert_eq!(chain[0].prev_hash, AUDIT_GENESIS);
    assert_eq!(chain[1].prev_hash, chain[0].hash);
    assert_eq!(
        chain[1].hash,
        audit_hash(&chain[0].hash, 2, &chain[1].draft)
    );
    let heads = store.audit_heads().await.unwrap();
    assert!(heads.contains(&(id.clone(), 2, chain[1].hash.clone())));
    assert_eq!(store.audit_chain(&b, 0, 100).await.unwrap().len(), 3);
    // Records are listed once placed in visibility order; on PostgreSQL a record waits until
    // every transaction older than its own has ended, and other tests share the database: wait
    // (bounded) for the two to be placed.
    let mut by_dataset = Vec::new();
    for _ in 0..100 {
        by_dataset = store
            .list_audit(&AuditQuery {
                dataset_id: Some(id.clone()),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        if by_dataset.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(by_dataset.len(), 2);
    assert!(by_dataset[0].id < by_dataset[1].id);
    let later = store
        .list_audit(&AuditQuery {
            dataset_id: Some(id.clone()),
            since: Some("2026-01-01T00:00:03.000Z".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(later.is_empty());
    // By the start of the action, on the server (a page holds only matches).
    let actions = |prefix: &'static str| {
        let (store, id) = (&store, id.clone());
        async move {
            store
                .list_audit(&AuditQuery {
                    dataset_id: Some(id),
                    action_prefix: Some(prefix.into()),
                    limit: 10,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.draft.action)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(actions("unit.").await, vec!["unit.rejected"]);
    assert_eq!(actions("quota").await, vec!["quota.set"]);
    assert!(actions("%").await.is_empty(), "no pattern characters");

    // Shared bodies: written with the entry that carries one (all or nothing), kept once
    // whatever number of entries share them, found by digest.
    let sid = format!("{p}-shared");
    store
        .create_dataset(&dataset(&sid), b"s0", None, None)
        .await
        .unwrap();
    let body = SharedBody::new(format!("{{\"report\": \"{p}\"}}"));
    let lost = SharedBody::new(format!("{{\"lost\": \"{p}\"}}"));
    assert_eq!(store.shared_body(&body.digest).await.unwrap(), None);
    let with = |b: &SharedBody| EntryRow {
        shared: Some(b.clone()),
        ..entry(None)
    };
    for version in 0..2 {
        store
            .append(&sid, version, &with(&body), &update(version + 1, 0.1))
            .await
            .unwrap();
    }
    assert_eq!(
        store.append(&sid, 0, &with(&lost), &update(3, 0.1)).await,
        Err(StoreError::VersionConflict)
    );
    assert_eq!(
        store.shared_body(&body.digest).await.unwrap().as_deref(),
        Some(body.body.as_str())
    );
    assert_eq!(store.shared_body(&lost.digest).await.unwrap(), None);
    append_many_contract(&*store, &p).await;
    session_contract(&*store, &p).await;
}

/// Dashboard sessions: found by hash with their token, trimmed per credential, ended by
/// sign-out and by the token's revocation, expired ones deleted at the next sign-in.
async fn session_contract(store: &dyn Store, p: &str) {
    let token = TokenRow {
        id: format!("{p}-tok"),
        name: format!("{p} user"),
        hash: format!("{p}-hash"),
        role: "auditor".into(),
        created_at: "2026-01-01T00:00:00.000Z".into(),
        expires_at: None,
        revoked_at: None,
    };
    let g = draft("", "token.created");
    assert!(store.create_token(&token, false, &g).await.unwrap());
    let row = |n: u32, created: &str, expires: &str| SessionRow {
        hash: format!("{p}-s{n}"),
        token_id: token.id.clone(),
        principal: token.name.clone(),
        role: "auditor".into(),
        created_at: created.into(),
        expires_at: expires.into(),
    };
    let opened = draft("", "session.opened");
    // An expired session is deleted when the next one opens (its end is before that start).
    let old = row(0, "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z");
    store.open_session(&old, 2, &opened).await.unwrap();
    assert!(store.session(&old.hash).await.unwrap().is_some());
    let (a, b, c) = (
        row(1, "2026-01-01T00:00:02.000Z", "2999-01-01T00:00:00.000Z"),
        row(2, "2026-01-01T00:00:03.000Z", "2999-01-01T00:00:00.000Z"),
        row(3, "2026-01-01T00:00:04.000Z", "2999-01-01T00:00:00.000Z"),
    );
    store.open_session(&a, 2, &opened).await.unwrap();
    assert_eq!(store.session(&old.hash).await.unwrap(), None);
    let (found, with) = store.session(&a.hash).await.unwrap().unwrap();
    assert_eq!(
        (found, with.map(|t| t.id)),
        (a.clone(), Some(token.id.clone()))
    );
    // Two kept per credential: the oldest goes.
    store.open_session(&b, 2, &opened).await.unwrap();
    store.open_session(&c, 2, &opened).await.unwrap();
    assert_eq!(store.session(&a.hash).await.unwrap(), None);
    assert!(store.session(&b.hash).await.unwrap().is_some());
    // Sign-out ends one (once); revoking the token ends the rest.
    let closed = draft("", "session.closed");
    assert!(store.close_session(&b.hash, &closed).await.unwrap());
    assert!(!store.close_session(&b.hash, &closed).await.unwrap());
    assert_eq!(store.session(&b.hash).await.unwrap(), None);
    let revoked = draft("", "token.revoked");
    let at = "2026-01-02T00:00:00.000Z";
    assert!(store.revoke_token(&token.id, at, &revoked).await.unwrap());
    assert_eq!(store.session(&c.hash).await.unwrap(), None);
}

/// A reader paging the audit log with `after` while writers commit concurrently: on PostgreSQL
/// ids are taken before commit, so paging by id skipped records (139 of 1,241 in the report
/// that found it); paging by position (schema 12) sees every record exactly once.
async fn tail_under_concurrent_writers(store: Arc<dyn Store>, writers: usize, each: usize) {
    let p = uuid::Uuid::new_v4().simple().to_string();
    let action = format!("tail.{p}");
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, action) = (store.clone(), action.clone());
        let chain = format!("{p}-w{w}");
        tasks.push(tokio::spawn(async move {
            for _ in 0..each {
                let mut d = draft(&chain, &action);
                d.dataset_id = None;
                store.audit(&d).await.unwrap();
            }
        }));
    }
    let total = writers * each;
    let mut seen = std::collections::HashSet::new();
    let (mut after, mut last_id) = (0, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while seen.len() < total {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {total} seen",
            seen.len()
        );
        let page = store
            .list_audit(&AuditQuery {
                action_prefix: Some(action.clone()),
                after,
                limit: 37,
                ..Default::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            if tasks.iter().all(|t| t.is_finished()) && seen.len() < total {
                // Every writer is done: what is still unseen was skipped, unless not yet
                // placed (PostgreSQL places after every older transaction ends): read again.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            tokio::task::yield_now().await;
            continue;
        }
        for r in page {
            assert!(r.id > last_id, "positions go up: {} after {last_id}", r.id);
            last_id = r.id;
            assert!(seen.insert((r.draft.chain.clone(), r.seq)), "seen twice");
        }
        after = last_id;
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(seen.len(), total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sqlite_audit_tailer_sees_every_record_under_concurrent_writers() {
    let dir = super::api::temp_dir("tail");
    let url = format!("sqlite://{}", dir.join("s.db").display());
    tail_under_concurrent_writers(open_store(&url).await.unwrap(), 8, 60).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_audit_tailer_sees_every_record_under_concurrent_writers() {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the PostgreSQL audit tailer check");
        return;
    };
    tail_under_concurrent_writers(open_store(&url).await.unwrap(), 16, 100).await;
}

/// `append_many`: all or nothing over several ledgers, creating blocks, the partitioning kept,
/// blocks listed by their parent and hidden from the dataset list.
async fn append_many_contract(store: &dyn Store, p: &str) {
    let parent = format!("{p}-parted");
    store
        .create_dataset(&dataset(&parent), b"e", Some("{\"type\":\"named\"}"), None)
        .await
        .unwrap();
    assert_eq!(
        store.partitioning(&parent).await.unwrap(),
        Some(Some("{\"type\":\"named\"}".to_owned()))
    );
    assert_eq!(
        store.partitioning(&format!("{p}-a")).await.unwrap(),
        Some(None)
    );
    assert_eq!(
        store.partitioning(&format!("{p}-none")).await.unwrap(),
        None
    );
    // An id that a linguistic collation would sort among the blocks ('1' between '@' and 'A'
    // when punctuation is ignored): never listed as one.
    store
        .create_dataset(&dataset(&format!("{parent}1")), b"e", None, None)
        .await
        .unwrap();
    let (b1, b2) = (format!("{parent}@b1"), format!("{parent}@b2"));
    let item = |id: &str, version: i64, create: bool, key: &str| LedgerAppend {
        id: id.to_owned(),
        expected_version: version,
        create: create.then(|| (dataset(id), Arc::new(b"e".to_vec()))),
        entry: entry(Some(key)),
        update: update(version + 1, 0.1),
        hold: None,
        blocks: None,
    };
    let shared = SharedBody::new("{\"charge\":1}".into());
    store
        .append_many(
            &[item(&b1, 0, true, "m1"), item(&b2, 0, true, "m1")],
            Some(&shared),
        )
        .await
        .unwrap();
    for b in [&b1, &b2] {
        let row = store.get_dataset(b).await.unwrap().unwrap();
        assert_eq!((row.version, row.charges), (1, 1));
        assert_eq!(
            store.get_snapshot(b).await.unwrap().unwrap(),
            (0, b"e".to_vec())
        );
        assert!(store.find_entry_by_key(b, "m1").await.unwrap().is_some());
    }
    assert_eq!(
        store.shared_body(&shared.digest).await.unwrap().as_deref(),
        Some(shared.body.as_str())
    );
    // b2 is at version 1, not 0: nothing is written, not even b1's entry or a new block b3.
    let b3 = format!("{parent}@b3");
    let lost = SharedBody::new("{\"charge\":2}".into());
    assert_eq!(
        store
            .append_many(
                &[
                    item(&b1, 1, false, "m2"),
                    item(&b2, 0, false, "m2"),
                    item(&b3, 0, true, "m2")
                ],
                Some(&lost),
            )
            .await,
        Err(StoreError::VersionConflict)
    );
    assert_eq!(store.get_dataset(&b1).await.unwrap().unwrap().version, 1);
    assert!(store.find_entry_by_key(&b1, "m2").await.unwrap().is_none());
    assert!(store.get_dataset(&b3).await.unwrap().is_none());
    assert_eq!(store.shared_body(&lost.digest).await.unwrap(), None);
    // A block another writer created meanwhile: the compare-and-swap at version 0 decides.
    assert_eq!(
        store.append_many(&[item(&b1, 0, true, "m3")], None).await,
        Err(StoreError::VersionConflict)
    );
    // A reused key on one ledger refuses the whole append.
    assert_eq!(
        store
            .append_many(
                &[item(&b1, 1, false, "m4"), item(&b2, 1, false, "m1")],
                None
            )
            .await,
        Err(StoreError::DuplicateKey)
    );
    assert_eq!(store.get_dataset(&b1).await.unwrap().unwrap().version, 1);
    // Blocks are listed by their parent, in order, and not among the datasets.
    let blocks = store.list_blocks(&parent, None, 10).await.unwrap();
    assert_eq!(
        blocks.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [b1.as_str(), b2.as_str()]
    );
    let after = store.list_blocks(&parent, Some(&b1), 10).await.unwrap();
    assert_eq!(after.len(), 1);
    let listed = store.list_datasets(Some(p), 1000, None).await.unwrap();
    assert!(listed.iter().all(|r| !r.id.contains('@')));
    assert!(listed.iter().any(|r| r.id == parent));
    holds_contract(store, &parent, &item).await;
}

/// `LedgerAppend::hold` and `blocks`, and `create_block`: a block copied from its parent is
/// created only while the parent is at the version it was copied at, and a write to the parent
/// and all its blocks fails when a block was created meanwhile.
async fn holds_contract(
    store: &dyn Store,
    parent: &str,
    item: &dyn Fn(&str, i64, bool, &str) -> LedgerAppend,
) {
    let v = store.get_dataset(parent).await.unwrap().unwrap().version;
    let b4 = format!("{parent}@b4");
    let held = |version: i64| LedgerAppend {
        hold: Some((parent.to_owned(), version)),
        ..item(&b4, 0, true, "h1")
    };
    assert_eq!(
        store.append_many(&[held(v + 1)], None).await,
        Err(StoreError::VersionConflict)
    );
    assert!(store.get_dataset(&b4).await.unwrap().is_none());
    store.append_many(&[held(v)], None).await.unwrap();
    assert_eq!(store.get_dataset(parent).await.unwrap().unwrap().version, v);
    // The parent's own write counts its blocks (b1, b2, b4) after taking its row.
    let counted = |n: i64| LedgerAppend {
        blocks: Some(n),
        ..item(parent, v, false, &format!("h-count-{n}"))
    };
    assert_eq!(
        store.append_many(&[counted(2)], None).await,
        Err(StoreError::VersionConflict)
    );
    assert_eq!(store.get_dataset(parent).await.unwrap().unwrap().version, v);
    store.append_many(&[counted(3)], None).await.unwrap();
    // A declared block: only at the parent's version, with its quota rows, once.
    let row = dataset(&format!("{parent}@b5"));
    let quota = QuotaRow {
        dataset_id: row.id.clone(),
        principal: "alice".into(),
        mu: 0.5,
        delta: 1e-9,
        mu_sq_spent: 0.0,
        delta_spent: 0.0,
        units: 0,
        updated_at: "2026-11-27T00:00:00Z".into(),
    };
    let block = |version: i64| NewBlock {
        row: &row,
        state: b"e",
        parent: (parent, version),
        quotas: std::slice::from_ref(&quota),
        audit: None,
        record: None,
    };
    assert_eq!(
        store.create_block(&block(v)).await,
        Err(StoreError::VersionConflict)
    );
    assert!(store.get_dataset(&row.id).await.unwrap().is_none());
    store.create_block(&block(v + 1)).await.unwrap();
    assert_eq!(
        store.list_quotas(&row.id).await.unwrap(),
        vec![quota.clone()]
    );
    assert_eq!(
        store.create_block(&block(v + 1)).await,
        Err(StoreError::AlreadyExists)
    );
    // Locks are taken by increasing id, holds among the items.
    let order = lock_order(&[item(&format!("{parent}0"), 0, false, "x"), held(3)]);
    let ids: Vec<String> = order
        .iter()
        .map(|o| match o {
            Ok(0) => format!("{parent}0"),
            Ok(_) => b4.clone(),
            Err((id, _)) => id.clone(),
        })
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    assert_eq!(order.len(), 3);
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_contract() {
    let dir = super::api::temp_dir("store");
    let url = format!("sqlite://{}", dir.join("s.db").display());
    contract(open_store(&url).await.unwrap()).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_postgres_store_keeps_the_contract() {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the PostgreSQL store contract");
        return;
    };
    contract(open_store(&url).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_on_postgres_never_both_win() {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the PostgreSQL concurrency check");
        return;
    };
    let store = open_store(&url).await.unwrap();
    let id = format!("{}-race", uuid::Uuid::new_v4().simple());
    store
        .create_dataset(&dataset(&id), b"", None, None)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (store, id) = (store.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            store.append(&id, 0, &entry(None), &update(1, 0.1)).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(StoreError::VersionConflict) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(wins, 1);
}

/// Text PostgreSQL cannot store (NUL) is the value's fault, not an outage: `InvalidValue` (a 422),
/// never `Unavailable` (a retryable 503). The HTTP edge refuses such text first; this is the backstop.
#[tokio::test]
async fn postgres_refuses_nul_text_as_an_invalid_value_not_an_outage() {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the PostgreSQL NUL check");
        return;
    };
    let store = open_store(&url).await.unwrap();
    let mut row = dataset(&format!("{}-nul", uuid::Uuid::new_v4().simple()));
    row.description = "a\0b".into();
    let e = store
        .create_dataset(&row, b"", None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(e, privacy_ledger::store::StoreError::InvalidValue(_)),
        "{e:?}"
    );
}

/// Group commit on SQLite: appends racing on one dataset at the same version are committed in
/// shared transactions, yet exactly one wins (the others are rolled back alone, as version
/// conflicts); appends on 16 datasets at once all commit, each exactly once, and are there when
/// the file is opened again.
/// What the ledger's pipelining rests on: SQLite appends queued one after another run in queue
/// order, so the append at the next version may be queued before its predecessor committed; when
/// the predecessor fails, the successor's compare-and-swap fails too. PostgreSQL never queues.
#[tokio::test]
async fn sqlite_queued_appends_run_in_order_and_fail_after_a_failed_predecessor() {
    let dir = crate::api::temp_dir("queued");
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let store = open_store(&url).await.unwrap();
    store
        .create_dataset(&dataset("q"), b"", None, None)
        .await
        .unwrap();
    let queue = |version: i64, key: &str| {
        store
            .append_queued("q", version, &entry(Some(key)), &update(version + 1, 0.1))
            .expect("SQLite queues appends")
    };
    // Queued back to back (neither awaited before the other is queued): both commit, in order.
    let (a, b) = (queue(0, "a"), queue(1, "b"));
    assert_eq!((a.await, b.await), (Ok(1), Ok(2)));
    // The predecessor fails (its key was used), so the successor's version never exists.
    let (c, d) = (queue(2, "a"), queue(3, "d"));
    assert_eq!(c.await, Err(StoreError::DuplicateKey));
    assert_eq!(d.await, Err(StoreError::VersionConflict));
    assert_eq!(store.get_dataset("q").await.unwrap().unwrap().version, 2);
    if let Some(pg) = postgres_url() {
        let pg = open_store(&pg).await.unwrap();
        assert!(pg
            .append_queued("q", 0, &entry(None), &update(1, 0.1))
            .is_none());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_group_commit_keeps_each_append_atomic_and_durable() {
    let dir = crate::api::temp_dir("group-commit");
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let store = open_store(&url).await.unwrap();
    store
        .create_dataset(&dataset("race"), b"", None, None)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.append("race", 0, &entry(None), &update(1, 0.1)).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(StoreError::VersionConflict) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(wins, 1);
    for d in 0..16 {
        store
            .create_dataset(&dataset(&format!("d{d}")), b"", None, None)
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for d in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("d{d}");
            for v in 0..10 {
                store
                    .append(&id, v, &entry(None), &update(v + 1, 0.1))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    drop(store);
    let store = open_store(&url).await.unwrap();
    for d in 0..16 {
        let id = format!("d{d}");
        let row = store.get_dataset(&id).await.unwrap().unwrap();
        assert_eq!(row.version, 10, "{id}");
        assert_eq!(
            store.list_entries(&id, None, 0, 100).await.unwrap().len(),
            10
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A ledger as the previous release (schema version 4: tokens, no grants, quotas or audit log)
/// left it, written with that version's columns; then opened by this release, which migrates it.
async fn previous_schema_upgrade(url: &str, kind: &str) {
    use sqlx::Connection;
    let n = |q: &str| {
        if kind == "postgres" {
            privacy_ledger::store::sql::numbered(q)
        } else {
            q.to_owned()
        }
    };
    match kind {
        "postgres" => privacy_ledger::store::postgres::PostgresStore::schema_at(url, 4)
            .await
            .unwrap(),
        _ => privacy_ledger::store::sqlite::SqliteStore::schema_at(url, 4)
            .await
            .unwrap(),
    }
    // A dataset with one GDP charge of μ 0.6 (the filter's fields as version 2 added them), a
    // budget entry, and a token, in version 4's columns.
    let token = "pl_0000000000000000000000000000000000000000000000000000000000000004";
    let hash = {
        use sha2::{Digest, Sha256};
        format!("{:x}", Sha256::digest(token.as_bytes()))
    };
    let event = r#"{"type":"gdp","mu":0.6}"#;
    let state = privacy_ledger::accountant::composition::Composition::new(
        privacy_ledger::accountant::NeighboringRelation::AddOrRemoveOne,
        privacy_ledger::accountant::params::GridStep::new(1e-4).unwrap(),
    )
    .to_bytes();
    let stmts: Vec<(String, Vec<String>)> =
        vec![
        (
            n("INSERT INTO datasets (id, description, neighboring_relation, budget_mu, \
               budget_delta, grid_step, version, charges, mu_spent, mu_spent_lower, mu_sq_spent, \
               delta_spent, units, exact_mu, reserved, create_hash, state, created_at, updated_at) \
               VALUES ('old', 'from v4', 'add_or_remove_one', 1.0, 1e-10, 1e-4, 2, 1, 0.6, 0.6, \
               0.36, 0.0, 1, 0.6, 0, NULL, ?, '2026-01-01T00:00:00.000Z', \
               '2026-01-02T00:00:00.000Z')"),
            vec![],
        ),
        (
            n("INSERT INTO entries (dataset_id, seq, kind, charge_id, event, idempotency_key, \
               request_hash, mu_after, unit_mu, unit_delta, response, status, created_at) \
               VALUES ('old', 1, 'charge', 'c-1', ?, 'k-1', 'h', 0.6, 0.6, 0.0, '{}', \
               'committed', '2026-01-01T00:00:01.000Z')"),
            vec![event.into()],
        ),
        (
            n("INSERT INTO entries (dataset_id, seq, kind, budget_mu, budget_delta, created_at) \
               VALUES ('old', 2, 'budget', 1.0, 1e-10, '2026-01-02T00:00:00.000Z')"),
            vec![],
        ),
        (
            n("INSERT INTO tokens (id, name, hash, role, created_at) \
               VALUES ('t-4', 'old admin', ?, 'admin', '2026-01-01T00:00:00.000Z')"),
            vec![hash.clone()],
        ),
    ];
    let version: i64 = if kind == "postgres" {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        for (i, (q, args)) in stmts.iter().enumerate() {
            let mut query = sqlx::query(q);
            if i == 0 {
                query = query.bind(state.clone());
            }
            for a in args {
                query = query.bind(a);
            }
            query.execute(&mut c).await.unwrap();
        }
        let v: i32 = sqlx::query_scalar("SELECT MAX(version) FROM schema_version")
            .fetch_one(&mut c)
            .await
            .unwrap();
        v.into()
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        for (i, (q, args)) in stmts.iter().enumerate() {
            let mut query = sqlx::query(q);
            if i == 0 {
                query = query.bind(state.clone());
            }
            for a in args {
                query = query.bind(a);
            }
            query.execute(&mut c).await.unwrap();
        }
        sqlx::query_scalar("SELECT MAX(version) FROM schema_version")
            .fetch_one(&mut c)
            .await
            .unwrap()
    };
    assert_eq!(
        version, 4,
        "{kind}: the ledger starts at the previous version"
    );

    // This release opens it: migrated to the latest version, nothing lost.
    let store = open_store(url).await.unwrap();
    let row = store.get_dataset("old").await.unwrap().unwrap();
    assert_eq!(
        (
            row.version,
            row.charges,
            row.mu_spent,
            row.mu_sq_spent,
            row.units
        ),
        (2, 1, 0.6, Some(0.36), Some(1)),
        "{kind}"
    );
    let entries = store.list_entries("old", None, 0, 10).await.unwrap();
    assert_eq!(entries.len(), 2, "{kind}");
    assert_eq!(
        (entries[0].unit_mu, entries[0].principal.as_deref()),
        (Some(0.6), None),
        "{kind}: version 5's columns are NULL on old rows"
    );
    assert_eq!(
        store.token_by_hash(&hash).await.unwrap().unwrap().name,
        "old admin"
    );
    assert!(store.list_quotas("old").await.unwrap().is_empty());
    assert!(store.list_grants("old").await.unwrap().is_empty());
    // The old token works, the old charge's key replays, and new charges gate on what was spent.
    let mut app = crate::api::TestApp::over_store(
        store.clone(),
        privacy_ledger::http::Limits::default(),
        crate::api::temp_dir("upgrade"),
    )
    .await;
    app.token = token.into();
    let (s, d) = app.get("/v1/datasets/old").await;
    assert_eq!(s, axum::http::StatusCode::OK, "{kind}: {d}");
    let (s, b) = app
        .post(
            "/v1/datasets/old/charges",
            serde_json::json!({"event": {"type": "gdp", "mu": 0.8}}),
        )
        .await;
    assert_eq!(s, axum::http::StatusCode::CREATED, "{kind}: {b}");
    assert!(
        (b["charge"]["mu_after"].as_f64().unwrap() - 1.0).abs() < 1e-9,
        "{kind}: {b}"
    );
    let (s, b) = app
        .post(
            "/v1/datasets/old/charges",
            serde_json::json!({"event": {"type": "gdp", "mu": 0.01}}),
        )
        .await;
    assert_eq!(s, axum::http::StatusCode::CONFLICT, "{kind}: {b}");
    // Version 5's audit log works on the upgraded ledger (the charges above are in it).
    let heads = store.audit_heads().await.unwrap();
    assert!(
        heads
            .iter()
            .any(|(chain, seq, _)| chain == "old" && *seq >= 2),
        "{kind}: {heads:?}"
    );
}

#[tokio::test]
async fn a_sqlite_ledger_of_the_previous_schema_is_upgraded() {
    let dir = crate::api::temp_dir("upgrade-sqlite");
    previous_schema_upgrade(
        &format!("sqlite://{}", dir.join("v4.db").display()),
        "sqlite",
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_postgres_ledger_of_the_previous_schema_is_upgraded() {
    use sqlx::Connection;
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the PostgreSQL upgrade test");
        return;
    };
    // A database of its own: the shared test database is at the latest version already.
    let name = format!("upgrade_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let base = url.rsplit_once('/').unwrap().0;
    previous_schema_upgrade(&format!("{base}/{name}"), "postgres").await;
    let _ = sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await;
}

/// A PostgreSQL database whose default collation is linguistic (ICU en-US), where `visits2`
/// sorts between `visits@` and `visitsA`: a partitioned dataset's blocks are still exactly its
/// blocks, listed and counted (`LedgerAppend::blocks`) byte by byte, so a quota change is not
/// fooled by another dataset into missing a block created meanwhile.
#[tokio::test]
async fn blocks_are_counted_byte_by_byte_under_a_linguistic_collation() {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the PostgreSQL collation check");
        return;
    };
    let name = format!("pl_icu_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    // Left by an earlier run that failed before its clean-up (only this test makes them).
    let old: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'pl\\_icu\\_%'")
            .fetch_all(&admin)
            .await
            .unwrap();
    for db in old {
        let _ = sqlx::query(&format!("DROP DATABASE {db} WITH (FORCE)"))
            .execute(&admin)
            .await;
    }
    let created = sqlx::query(&format!(
        "CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' \
         LOCALE 'C.UTF-8'"
    ))
    .execute(&admin)
    .await;
    if let Err(e) = created {
        eprintln!("skipped: this PostgreSQL cannot make an ICU database ({e})");
        return;
    }
    let (base, _) = url.rsplit_once('/').unwrap();
    let store = open_store(&format!("{base}/{name}")).await.unwrap();
    for id in ["visits", "visits2"] {
        store
            .create_dataset(&dataset(id), b"e", None, None)
            .await
            .unwrap();
    }
    let block = LedgerAppend {
        id: "visits@b1".into(),
        expected_version: 0,
        create: Some((dataset("visits@b1"), Arc::new(b"e".to_vec()))),
        entry: entry(Some("k1")),
        update: update(1, 0.1),
        hold: Some(("visits".into(), 0)),
        blocks: None,
    };
    store.append_many(&[block], None).await.unwrap();
    let listed = store.list_blocks("visits", None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    let parent = LedgerAppend {
        id: "visits".into(),
        expected_version: 0,
        create: None,
        entry: entry(Some("k2")),
        update: update(1, 0.1),
        hold: None,
        blocks: Some(1),
    };
    assert_eq!(store.append_many(&[parent], None).await, Ok(()));
    drop(store);
    let _ = sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&admin)
        .await;
}

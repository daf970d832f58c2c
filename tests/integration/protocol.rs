//! The protocol around the filter, attacked (issue 31): who may start, commit, release, replay or
//! take a chunk; when a refund is sound; what a replay answers. Each test replays a row of the
//! issue's table with other names and numbers, and checks the ledger's figures against the closed
//! form of what was really spent (GDP units compose to √Σμᵢ²).

use crate::api::{spawn_app, TestApp};
use axum::http::StatusCode;
use serde_json::{json, Value};

/// The ledger's sums are rounded up at each step: a few ulps above the closed form.
const SUM_TOLERANCE: f64 = 1e-12;

fn gdp(mu: f64) -> Value {
    json!({"type": "gdp", "mu": mu})
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A request as `who` (an `Authorization` header value), with an optional Idempotency-Key.
async fn as_(
    app: &TestApp,
    who: &str,
    method: &str,
    uri: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> (StatusCode, Value) {
    let mut headers = vec![("authorization", who)];
    if let Some(k) = key {
        headers.push(("idempotency-key", k));
    }
    app.call(method, uri, body.as_ref(), &headers).await
}

async fn mu_spent(app: &TestApp, id: &str) -> f64 {
    f(&app.get(&format!("/v1/datasets/{id}")).await.1["mu_spent"])
}

fn assert_spent(got: f64, units: &[f64]) {
    let closed = units.iter().map(|m| m * m).sum::<f64>().sqrt();
    assert!(
        got >= closed && got <= closed * (1.0 + SUM_TOLERANCE),
        "mu_spent {got}, closed form {closed}"
    );
}

/// Row 1: a principal other than the one that reserved a unit cannot release it and spend the
/// refund; an admin can, only with a reason, which is recorded.
#[tokio::test]
async fn only_the_owner_or_an_admin_with_a_reason_releases_a_reservation() {
    let app = spawn_app().await;
    app.dataset("claims", 1.5).await;
    let (ines, omar) = (
        app.bearer("ines", "analyst").await,
        app.bearer("omar", "analyst").await,
    );
    let (s, r) = as_(
        &app,
        &ines,
        "POST",
        "/v1/datasets/claims/charges",
        Some(json!({"event": gdp(1.5), "reserve": true})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{r}");
    let cid = r["charge"]["id"].as_str().unwrap().to_owned();
    let release = format!("/v1/datasets/claims/charges/{cid}/release");
    let stated = json!({"outputs_released": false});
    for uri in [
        release.clone(),
        format!("/v1/datasets/claims/charges/{cid}/commit"),
        format!("/v1/datasets/claims/charges/{cid}/start"),
    ] {
        let body = uri.ends_with("release").then(|| stated.clone());
        let (s, e) = as_(&app, &omar, "POST", &uri, body, None).await;
        assert_eq!(
            (s, e["error"].as_str()),
            (StatusCode::FORBIDDEN, Some("not_owner")),
            "{uri}: {e}"
        );
    }
    // Nothing moved: the reservation still holds the whole budget, so omar's own unit is refused.
    assert_spent(mu_spent(&app, "claims").await, &[1.5]);
    let (s, e) = as_(
        &app,
        &omar,
        "POST",
        "/v1/datasets/claims/charges",
        Some(json!({"event": gdp(1.5)})),
        None,
    )
    .await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("budget_exceeded"))
    );

    // An admin acting for ines must say why; then the release is recorded with the reason.
    let (s, e) = app.post(&release, stated.clone()).await;
    assert_eq!(
        (s, e["details"]["path"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("body.reason")),
        "{e}"
    );
    let (s, b) = app
        .post(
            &release,
            json!({"outputs_released": false, "reason": "ticket 4411: job never scheduled"}),
        )
        .await;
    assert_eq!(
        (s, b["charge"]["status"].as_str()),
        (StatusCode::OK, Some("released")),
        "{b}"
    );
    let (_, entries) = app.get("/v1/datasets/claims/charges").await;
    let last = entries["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["kind"], "release");
    assert_eq!(last["statement"]["for"], "ines");
    assert_eq!(
        last["statement"]["reason"],
        "ticket 4411: job never scheduled"
    );
    let (_, audit) = app.get("/v1/audit?dataset_id=claims").await;
    let rec = audit["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (rec["action"].as_str(), rec["principal"].as_str()),
        (Some("unit.released"), Some("tests"))
    );
    assert!(
        rec["after"]["statement"]
            .as_str()
            .unwrap()
            .contains("ticket 4411"),
        "{rec}"
    );
}

/// Row 2: replaying the key of a reservation that was released since is never answered
/// "reserved" (a retried job would run on refunded budget): 409 `unit_released`. A replay after a
/// start or a commit answers that status.
#[tokio::test]
async fn a_replayed_reservation_answers_its_status_now_and_never_reserved() {
    let app = spawn_app().await;
    app.dataset("visits", 2.0).await;
    let pia = app.bearer("pia", "analyst").await;
    let charges = "/v1/datasets/visits/charges";
    let body = json!({"event": gdp(0.7), "reserve": true, "label": "nightly"});
    let reserve = |key: &'static str| {
        let (app, pia, body) = (&app, &pia, body.clone());
        async move { as_(app, pia, "POST", charges, Some(body), Some(key)).await }
    };
    let settle = |cid: &str, what: &str| format!("{charges}/{cid}/{what}");

    // Released, then replayed: 409, with the unit's status.
    let (s, r) = reserve("night-1").await;
    assert_eq!(s, StatusCode::CREATED, "{r}");
    let cid = r["charge"]["id"].as_str().unwrap().to_owned();
    let (s, _) = as_(
        &app,
        &pia,
        "POST",
        &settle(&cid, "release"),
        Some(json!({"outputs_released": false})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, e) = reserve("night-1").await;
    assert_eq!(
        (
            s,
            e["error"].as_str(),
            e["details"]["charge"]["status"].as_str()
        ),
        (
            StatusCode::CONFLICT,
            Some("unit_released"),
            Some("released")
        ),
        "{e}"
    );
    assert_eq!(e["details"]["charge_id"], cid.as_str());
    // The budget spent again meanwhile is not handed to the retry: nothing was charged by it.
    assert_spent(mu_spent(&app, "visits").await, &[]);

    // Started, then replayed: 200 "started"; committed, then replayed: 200 "committed".
    let (_, r) = reserve("night-2").await;
    let cid = r["charge"]["id"].as_str().unwrap().to_owned();
    let (s, st) = as_(&app, &pia, "POST", &settle(&cid, "start"), None, None).await;
    assert_eq!(
        (s, st["charge"]["status"].as_str()),
        (StatusCode::OK, Some("started")),
        "{st}"
    );
    let (s, b) = reserve("night-2").await;
    assert_eq!(
        (s, b["charge"]["status"].as_str()),
        (StatusCode::OK, Some("started")),
        "{b}"
    );
    let (s, _) = as_(
        &app,
        &pia,
        "POST",
        &settle(&cid, "commit"),
        Some(json!({})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, b) = reserve("night-2").await;
    assert_eq!(
        (s, b["charge"]["status"].as_str()),
        (StatusCode::OK, Some("committed")),
        "{b}"
    );
    assert_spent(mu_spent(&app, "visits").await, &[0.7]);

    // The same for a run's reserved chunk.
    let (_, run) = as_(
        &app,
        &pia,
        "POST",
        "/v1/datasets/visits/runs",
        Some(json!({"event": gdp(0.2), "steps": 4, "chunk_steps": 2})),
        None,
    )
    .await;
    let chunks = format!(
        "/v1/datasets/visits/runs/{}/chunks",
        run["id"].as_str().unwrap()
    );
    let take = || {
        as_(
            &app,
            &pia,
            "POST",
            &chunks,
            Some(json!({"reserve": true})),
            Some("chunk-a"),
        )
    };
    let (s, c) = take().await;
    assert_eq!(s, StatusCode::CREATED, "{c}");
    let cid = c["charge"]["id"].as_str().unwrap().to_owned();
    let (s, _) = as_(
        &app,
        &pia,
        "POST",
        &settle(&cid, "release"),
        Some(json!({"outputs_released": false})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, e) = take().await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("unit_released")),
        "{e}"
    );
}

/// Row 3: once a unit's job has started reading the data, a failure is an outcome that depends on
/// the data, so the unit cannot be refunded: reserve → start → "fail" → release is refused, and
/// every such cycle stays counted until the budget refuses the next one.
#[tokio::test]
async fn a_started_unit_is_never_refunded_so_failed_jobs_spend_their_budget() {
    let app = spawn_app().await;
    app.dataset("genomes", 1.1).await;
    let charges = "/v1/datasets/genomes/charges";
    let unit = 0.35;
    let mut spent = Vec::new();
    // ⌊(1.1/0.35)²⌋ = 9 units fit; the 10th reservation is refused.
    for cycle in 0..12 {
        let (s, r) = app
            .post(charges, json!({"event": gdp(unit), "reserve": true}))
            .await;
        if cycle == 9 {
            assert_eq!(
                (s, r["error"].as_str()),
                (StatusCode::CONFLICT, Some("budget_exceeded")),
                "{r}"
            );
            break;
        }
        assert_eq!(s, StatusCode::CREATED, "cycle {cycle}: {r}");
        let cid = r["charge"]["id"].as_str().unwrap().to_owned();
        let (s, _) = app.post(&format!("{charges}/{cid}/start"), json!({})).await;
        assert_eq!(s, StatusCode::OK);
        // The job failed after reading the data: the refund is refused, whatever is stated.
        let (s, e) = app
            .post(
                &format!("{charges}/{cid}/release"),
                json!({"outputs_released": false, "reason": "job failed, results discarded"}),
            )
            .await;
        assert_eq!(
            (s, e["error"].as_str()),
            (StatusCode::CONFLICT, Some("unit_started")),
            "{e}"
        );
        spent.push(unit);
        assert_spent(mu_spent(&app, "genomes").await, &spent);
        let (s, c) = app
            .post(&format!("{charges}/{cid}/commit"), json!({}))
            .await;
        assert_eq!(
            (s, c["charge"]["status"].as_str()),
            (StatusCode::OK, Some("committed"))
        );
    }
    assert_eq!(spent.len(), 9);
    // A unit released before its start is refunded (the honest use).
    let (_, d) = app.get("/v1/datasets/genomes").await;
    assert_eq!(d["reserved_units"], 0);
}

/// Row 10: keys, runs and reservations of another principal. A key is scoped to its principal,
/// operation and target: another principal sending it gets its own request, never the owner's
/// outcome; runs and reservations are the owner's; listings hide other principals' keys and
/// metadata from analysts; a quota PUT's key is scoped to the quota's holder.
#[tokio::test]
async fn another_principal_can_neither_replay_nor_take_nor_settle_what_is_not_its_own() {
    let app = spawn_app().await;
    app.dataset("trips", 3.0).await;
    let (li, max) = (
        app.bearer("li", "analyst").await,
        app.bearer("max", "analyst").await,
    );
    let charges = "/v1/datasets/trips/charges";
    let body = json!({"event": gdp(0.9), "metadata": {"query": "li's secret question"}});
    let (s, a) = as_(
        &app,
        &li,
        "POST",
        charges,
        Some(body.clone()),
        Some("job-77"),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{a}");

    // max reads the listing: li's key and metadata are not shown to him (an admin sees them).
    let (_, list) = as_(&app, &max, "GET", charges, None, None).await;
    let c = &list["items"][0]["charge"];
    assert_eq!(
        (c["id"].as_str(), c["idempotency_key"].as_str()),
        (a["charge"]["id"].as_str(), None)
    );
    assert!(c["metadata"].is_null(), "{c}");
    let (_, list) = app.get(charges).await;
    assert_eq!(list["items"][0]["charge"]["idempotency_key"], "job-77");
    assert_eq!(
        list["items"][0]["charge"]["metadata"]["query"],
        "li's secret question"
    );

    // max sends li's key with li's body: a charge of his own (201, another id), never li's.
    let (s, b) = as_(
        &app,
        &max,
        "POST",
        charges,
        Some(body.clone()),
        Some("job-77"),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_ne!(b["charge"]["id"], a["charge"]["id"]);
    assert_spent(mu_spent(&app, "trips").await, &[0.9, 0.9]);
    // li's own retry still replays li's charge.
    let (s, r) = as_(&app, &li, "POST", charges, Some(body), Some("job-77")).await;
    assert_eq!(
        (s, &r["charge"]["id"]),
        (StatusCode::OK, &a["charge"]["id"])
    );

    // li's run: max cannot take its next chunk; li's own request gets chunk 0.
    let (_, run) = as_(
        &app,
        &li,
        "POST",
        "/v1/datasets/trips/runs",
        Some(json!({"event": gdp(0.25), "steps": 3, "chunk_steps": 1})),
        None,
    )
    .await;
    let chunks = format!(
        "/v1/datasets/trips/runs/{}/chunks",
        run["id"].as_str().unwrap()
    );
    let (s, e) = as_(&app, &max, "POST", &chunks, None, None).await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("not_owner")),
        "{e}"
    );
    let (s, c) = as_(
        &app,
        &li,
        "POST",
        &chunks,
        Some(json!({"reserve": true})),
        None,
    )
    .await;
    assert_eq!(
        (s, c["charge"]["chunk"].as_i64()),
        (StatusCode::CREATED, Some(0)),
        "{c}"
    );
    // An admin may take the next chunk for li, with a reason.
    let (s, e) = app.post(&chunks, json!({})).await;
    assert_eq!(
        (s, e["details"]["path"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("body.reason"))
    );
    let (s, c1) = app
        .post(
            &chunks,
            json!({"reserve": true, "reason": "li on leave, finishing her run"}),
        )
        .await;
    assert_eq!(
        (s, c1["charge"]["chunk"].as_i64()),
        (StatusCode::CREATED, Some(1)),
        "{c1}"
    );

    // max cannot commit li's reserved chunk (so li can still release it: cancelled job).
    let cid = c["charge"]["id"].as_str().unwrap();
    let (s, e) = as_(
        &app,
        &max,
        "POST",
        &format!("{charges}/{cid}/commit"),
        None,
        None,
    )
    .await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("not_owner"))
    );
    // Chunk 1, later, is held: it goes first. The admin took it, so it is the admin's unit (its
    // entry records who acted): li may not settle it, the admin may without a reason.
    let c1id = c1["charge"]["id"].as_str().unwrap();
    let stated = json!({"outputs_released": false, "reason": "cancelled"});
    let c1_release = format!("{charges}/{c1id}/release");
    let (s, e) = as_(&app, &li, "POST", &c1_release, Some(stated.clone()), None).await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("not_owner"))
    );
    let (s, e) = as_(
        &app,
        &format!("Bearer {}", app.token),
        "POST",
        &c1_release,
        Some(stated.clone()),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{e}");
    let (s, e) = as_(
        &app,
        &li,
        "POST",
        &format!("{charges}/{cid}/release"),
        Some(stated),
        None,
    )
    .await;
    assert_eq!(
        (s, e["charge"]["status"].as_str()),
        (StatusCode::OK, Some("released")),
        "{e}"
    );

    // A quota PUT's key is scoped to the quota's holder: the same key and body on another path
    // sets that quota too (it used to replay the first one's answer and set nothing).
    for who in ["li", "max"] {
        let (s, q) = app
            .call(
                "PUT",
                &format!("/v1/datasets/trips/quotas/{who}"),
                Some(&json!({"mu": 1.0, "delta": 0.0})),
                &[("idempotency-key", "quota-q1")],
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{q}");
    }
    let (_, quotas) = app.get("/v1/datasets/trips/quotas").await;
    let holders: Vec<&str> = quotas
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|q| q["principal"].as_str())
        .collect();
    assert!(
        holders.contains(&"li") && holders.contains(&"max"),
        "{quotas}"
    );
}

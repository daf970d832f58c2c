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

/// The statement's μ as reported, against the high-water mark it must state: μ_max·(1 + the gate's
/// tolerance), rounded up once more at most (the statement is never below it).
fn assert_states(d: &Value, mu_max: f64) {
    let mu = f(&d["statement"]["mu"]);
    let want = mu_max * (1.0 + privacy_ledger::ledger::GATE_TOLERANCE);
    assert!(
        mu >= want && mu <= want * (1.0 + SUM_TOLERANCE),
        "statement mu {mu}, high-water mark {mu_max}: {d}"
    );
}

/// Rows 4 and 6: lowering the budget restricts what may be spent from now on and never lowers the
/// statement (the gate admitted units against the higher budget, and on another course of the
/// interaction it could have spent up to it); raising it moves the high-water mark, and without a
/// cap the statement says it holds only unless the budget is raised.
#[tokio::test]
async fn the_statement_is_the_budgets_high_water_mark_whatever_the_budget_does_later() {
    let app = spawn_app().await;
    app.dataset("ads", 2.6).await;
    let charges = "/v1/datasets/ads/charges";
    let eps = json!({"event": {"type": "epsilon_delta", "epsilon": 0.8, "delta": 0.0}});
    let (s, a) = app.post(charges, eps).await;
    assert_eq!(s, StatusCode::CREATED, "{a}");
    let (s, b) = app.post(charges, json!({"event": gdp(1.9)})).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let patch = |mu: f64| {
        let app = &app;
        async move {
            app.call(
                "PATCH",
                "/v1/datasets/ads",
                Some(&json!({"budget": {"mu": mu}})),
                &[],
            )
            .await
        }
    };
    // Lowered below what was spent (√(μ₁² + 1.9²) ≈ 2.05): the statement stays at 2.6. The old
    // rule stated max(new budget, spent) ≈ 2.05 here, below what the gate allowed.
    let (s, d) = patch(1.9).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_states(&d, 2.6);
    assert_eq!(d["statement"]["validity"], "unless_raised");
    assert!(f(&d["mu_spent"]) < 2.6 && f(&d["mu_spent"]) > 1.9, "{d}");
    let (_, r) = app.get("/v1/datasets/ads/report").await;
    assert_states(&r, 2.6);
    // The report's figures are those of G_2.6 (its μ bracket's upper end at least 2.6).
    assert!(f(&r["mu"]["upper"]) >= 2.6, "{r}");
    // The issue's own path (RR(1), then GDP 1.7291 or RR(1.6482); budget 3 lowered to 2 or 2.13):
    // its true μ* = 2.13488 is below the statement's 3 there as it is below 2.6 here.
    // Nothing more fits under the lowered budget.
    let (s, e) = app.post(charges, json!({"event": gdp(0.1)})).await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("budget_exceeded"))
    );
    // Raised again, but not above the mark: the statement does not move.
    let (_, d) = patch(2.2).await;
    assert_states(&d, 2.6);
    // Raised above it (no cap): the mark moves, and the statement says the condition.
    let (_, d) = patch(5.0).await;
    assert_states(&d, 5.0);
    let (s, g) = app.post(charges, json!({"event": gdp(4.0)})).await;
    assert_eq!(s, StatusCode::CREATED, "{g}");
    let (_, d) = patch(1.0).await;
    assert_states(&d, 5.0);
    assert_eq!(d["statement"]["validity"], "unless_raised");
    assert!(
        d["statement"]["note"]
            .as_str()
            .unwrap()
            .contains("raised above mu = 5"),
        "{d}"
    );
    // A charge's report states the mark too, not the budget of the moment.
    let (_, d) = patch(5.0).await;
    assert_states(&d, 5.0);
    let (s, c) = app.post(charges, json!({"event": gdp(0.5)})).await;
    assert_eq!(s, StatusCode::CREATED, "{c}");
    assert!(f(&c["report"]["mu"]["upper"]) >= 5.0, "{c}");
}

/// Row 6 with a cap: a cap fixed at creation bounds every raise (409 `cap_exceeded`), so the
/// statement at the cap holds however the budget is changed; once the mark reaches the cap the
/// statement says so ("always").
#[tokio::test]
async fn a_cap_fixed_at_creation_bounds_every_raise_and_makes_the_statement_unconditional() {
    let app = spawn_app().await;
    let (s, d) = app
        .post(
            "/v1/datasets",
            json!({"id": "loans", "budget": {"mu": 0.8}, "cap": {"mu": 1.7, "delta": 1e-9}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{d}");
    assert_eq!(d["statement"]["validity"], "unless_raised");
    assert_eq!(d["statement"]["cap"]["mu"], 1.7);
    assert_states(&d, 0.8);
    let patch = |b: Value| {
        let app = &app;
        async move {
            app.call(
                "PATCH",
                "/v1/datasets/loans",
                Some(&json!({"budget": b})),
                &[],
            )
            .await
        }
    };
    for over in [json!({"mu": 1.71}), json!({"mu": 1.0, "delta": 2e-9})] {
        let (s, e) = patch(over.clone()).await;
        assert_eq!(
            (s, e["error"].as_str()),
            (StatusCode::CONFLICT, Some("cap_exceeded")),
            "{over}: {e}"
        );
    }
    let (s, d) = patch(json!({"mu": 1.7, "delta": 1e-9})).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["statement"]["validity"], "always");
    let (_, d) = patch(json!({"mu": 0.3})).await;
    assert_eq!(d["statement"]["validity"], "always");
    assert_states(&d, 1.7);
    // A cap below the budget is refused at creation, naming the field.
    let (s, e) = app
        .post(
            "/v1/datasets",
            json!({"id": "bad", "budget": {"mu": 2.0}, "cap": {"mu": 1.5}}),
        )
        .await;
    assert_eq!(
        (s, e["details"]["path"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("$.cap")),
        "{e}"
    );
}

/// Row 8: named partitions exist only once an admin declared them; a caller naming the same
/// records under another spelling gets a 422 and creates nothing, so one set of records has one
/// budget.
#[tokio::test]
async fn nobody_mints_a_fresh_budget_by_naming_a_partition_anew() {
    let app = spawn_app().await;
    let (s, _) = app
        .post(
            "/v1/datasets",
            json!({"id": "members", "budget": {"mu": 1.0}, "partitioning": {"type": "named"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, v) = app
        .call(
            "PUT",
            "/v1/datasets/members/blocks/m-0-499",
            Some(&json!({"description": "member ids 0 to 499"})),
            &[],
        )
        .await;
    assert_eq!(
        (s, v["description"].as_str()),
        (StatusCode::CREATED, Some("member ids 0 to 499"))
    );
    // Declaring it again changes nothing.
    let (s, _) = app
        .call("PUT", "/v1/datasets/members/blocks/m-0-499", None, &[])
        .await;
    assert_eq!(s, StatusCode::OK);
    let zoe = app.bearer("zoe", "analyst").await;
    let charge = |block: &str| json!({"datasets": [{"id": "members", "blocks": [block]}], "event": gdp(0.8)});
    let (s, b) = as_(
        &app,
        &zoe,
        "POST",
        "/v1/charges",
        Some(charge("m-0-499")),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    for alias in ["m-000-499", "M-0-499", "m-0-0499", "m-0-499.", "m_0_499"] {
        let (s, e) = as_(&app, &zoe, "POST", "/v1/charges", Some(charge(alias)), None).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{alias}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains("not declared"),
            "{e}"
        );
    }
    // The one name still has the one budget: 0.8 more does not fit (0.8² · 2 > 1).
    let (s, e) = as_(
        &app,
        &zoe,
        "POST",
        "/v1/charges",
        Some(charge("m-0-499")),
        None,
    )
    .await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("budget_exceeded"))
    );
    let (_, blocks) = app.get("/v1/datasets/members/blocks").await;
    assert_eq!(blocks["items"].as_array().unwrap().len(), 1, "{blocks}");
    // Time blocks are not declared.
    let (s, _) = app
        .post(
            "/v1/datasets",
            json!({"id": "clicks", "budget": {"mu": 1.0},
                   "partitioning": {"type": "time", "width": "day"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = app
        .call("PUT", "/v1/datasets/clicks/blocks/x", None, &[])
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
}

/// Row 9: time blocks can be charged up to a horizon (default: the current block and the next),
/// and a principal creates at most so many block ledgers per charge and per minute.
#[tokio::test]
async fn future_blocks_cannot_be_exhausted_today_and_block_creation_is_bounded() {
    let app = spawn_app().await;
    let (s, _) = app
        .post(
            "/v1/datasets",
            json!({"id": "rides", "budget": {"mu": 1.0},
                   "partitioning": {"type": "time", "width": "day", "time_zone": "UTC"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let today = chrono::Utc::now().date_naive();
    let day = |d: i64| {
        (today + chrono::Duration::days(d))
            .format("%Y-%m-%d")
            .to_string()
    };
    let blocks = |names: Vec<String>| json!({"datasets": [{"id": "rides", "blocks": names}], "event": gdp(0.1)});
    // Today and tomorrow: fine. The day after, or two years ahead: refused, nothing created.
    let (s, b) = app.post("/v1/charges", blocks(vec![day(0), day(1)])).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    for ahead in [2, 730] {
        let (s, e) = app.post("/v1/charges", blocks(vec![day(ahead)])).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{ahead}: {e}");
        assert!(e["message"].as_str().unwrap().contains("horizon"), "{e}");
    }
    let range = |from: i64, to: i64| {
        json!({"datasets": [{"id": "rides", "time_range": {
            "from": format!("{}T00:00:00Z", day(from)), "to": format!("{}T00:00:00Z", day(to))}}],
            "event": gdp(0.1)})
    };
    let (s, _) = app.post("/v1/charges", range(0, 10)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let (_, listed) = app.get("/v1/datasets/rides/blocks").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 2, "{listed}");
    // A dataset may allow a longer horizon.
    let (s, _) = app
        .post(
            "/v1/datasets",
            json!({"id": "weekly", "budget": {"mu": 1.0}, "partitioning":
                   {"type": "time", "width": "day", "time_zone": "UTC", "horizon_blocks": 7}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let mut week = range(0, 8);
    week["datasets"][0]["id"] = json!("weekly");
    let (s, b) = app.post("/v1/charges", week).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");

    // Past blocks: at most 400 new ledgers per charge, and 2000 per principal per minute.
    let (s, e) = app.post("/v1/charges", range(-1000, -599)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("at most 400"),
        "{e}"
    );
    let tim = app.bearer("tim", "analyst").await;
    let mut refused = None;
    for i in 0..6 {
        let (s, e) = as_(
            &app,
            &tim,
            "POST",
            "/v1/charges",
            Some(range(-3000 + 400 * i, -2600 + 400 * i)),
            None,
        )
        .await;
        if s != StatusCode::CREATED {
            refused = Some((i, s, e));
            break;
        }
    }
    let (i, s, e) = refused.expect("the sixth batch of 400 is refused");
    assert_eq!(
        (i, s, e["error"].as_str()),
        (
            5,
            StatusCode::TOO_MANY_REQUESTS,
            Some("too_many_new_ledgers")
        ),
        "{e}"
    );
    // Another principal is not held back by tim's flood.
    let (s, _) = app.post("/v1/charges", range(-3400, -3390)).await;
    assert_eq!(s, StatusCode::CREATED);
}

/// Row 11: a join charges each dataset what one of *its* records can move. In events ⋈ customers
/// with each joined row clipped to 1, a customer with up to 4 events moves the sum by 4: the
/// customers ledger is charged the same noise at sensitivity 4 (its own `event`), the events
/// ledger at sensitivity 1. Gaussian units: μ = sensitivity/σ, in closed form.
#[tokio::test]
async fn a_join_charges_each_dataset_at_its_own_records_sensitivity() {
    let app = spawn_app().await;
    app.dataset("orders", 2.0).await;
    app.dataset("buyers", 2.0).await;
    let sigma = 10.0;
    let body = json!({
        "datasets": [
            {"id": "orders"},
            {"id": "buyers", "event": {"type": "gaussian", "noise_multiplier": sigma / 4.0}}
        ],
        "event": {"type": "gaussian", "noise_multiplier": sigma},
        "label": "orders per buyer segment"
    });
    let (s, b) = app
        .call(
            "POST",
            "/v1/charges",
            Some(&body),
            &[("idempotency-key", "join-1")],
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let ledgers = b["charge"]["ledgers"].as_array().unwrap();
    let by_id = |id: &str| {
        ledgers
            .iter()
            .find(|l| l["ledger_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(f(&by_id("orders")["unit"]["mu"]), 1.0 / sigma);
    assert!(by_id("orders").get("event").is_none());
    let buyers_mu = f(&by_id("buyers")["unit"]["mu"]);
    assert!(
        buyers_mu >= 4.0 / sigma && buyers_mu <= 4.0 / sigma * (1.0 + SUM_TOLERANCE),
        "{b}"
    );
    assert_eq!(by_id("buyers")["event"]["noise_multiplier"], sigma / 4.0);
    assert_spent(mu_spent(&app, "orders").await, &[1.0 / sigma]);
    assert_spent(mu_spent(&app, "buyers").await, &[4.0 / sigma]);
    // Each ledger records the event it was charged.
    let (_, e) = app.get("/v1/datasets/buyers/charges").await;
    assert_eq!(
        e["items"][0]["charge"]["event"]["noise_multiplier"],
        sigma / 4.0
    );
    // A retry replays; nothing is charged twice.
    let (s, _) = app
        .call(
            "POST",
            "/v1/charges",
            Some(&body),
            &[("idempotency-key", "join-1")],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_spent(mu_spent(&app, "buyers").await, &[4.0 / sigma]);
    // A bad per-dataset event names its field.
    let bad = json!({"datasets": [{"id": "orders"}, {"id": "buyers", "event": {"type": "nope"}}],
                     "event": gdp(0.1)});
    let (s, e) = app.post("/v1/charges", bad).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert!(
        e["details"]["path"]
            .as_str()
            .unwrap()
            .starts_with("$.datasets[1].event"),
        "{e}"
    );
}

/// An app over a SQLite file (its URL returned, to tamper with and to restart over) with dataset
/// `census` of budget μ = 1.2.
async fn census_on_a_file(name: &str) -> (TestApp, String) {
    let dir = crate::api::temp_dir(name);
    let url = format!("sqlite://{}", dir.join("l.db").display());
    let app = TestApp::over_store(
        privacy_ledger::app::open_store(&url).await.unwrap(),
        privacy_ledger::http::Limits::default(),
        dir,
    )
    .await;
    app.dataset("census", 1.2).await;
    (app, url)
}

/// Row 13: a ledger reset behind the service's back (`UPDATE datasets SET mu_sq_spent = 0`) is
/// caught: every audited change states the ledger's state after it, the service refuses to write
/// on a ledger whose row disagrees with that (409 `dataset_state_corrupt`, on a restart as on any
/// replica), and `audit verify` reports it.
#[tokio::test]
async fn a_ledger_reset_behind_the_services_back_is_refused_and_reported() {
    use privacy_ledger::app::open_store;
    let (app, url) = census_on_a_file("reset").await;
    let charge = json!({"event": gdp(0.9)});
    let (s, _) = app
        .post("/v1/datasets/census/charges", charge.clone())
        .await;
    assert_eq!(s, StatusCode::CREATED);
    // 0.9² · 2 > 1.2²: the second does not fit.
    let (s, _) = app
        .post("/v1/datasets/census/charges", charge.clone())
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("UPDATE datasets SET mu_sq_spent = 0, mu_spent = 0, units = 0 WHERE id = 'census'")
        .execute(&raw)
        .await
        .unwrap();
    // A restarted service (nothing kept in memory) over the same file.
    let ledgers = privacy_ledger::ledger::Ledgers::new(open_store(&url).await.unwrap());
    let v = ledgers.verify_audit().await.unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("\"census\"") && p.contains("stored state")),
        "{:?}",
        v.problems
    );
    let restarted = TestApp::over_ledgers(
        ledgers,
        privacy_ledger::http::Limits::default(),
        crate::api::temp_dir("reset-2"),
    )
    .await;
    let (s, e) = restarted.post("/v1/datasets/census/charges", charge).await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("dataset_state_corrupt")),
        "{e}"
    );
    let multi = json!({"datasets": [{"id": "census"}], "event": gdp(0.9)});
    let (s, e) = restarted.post("/v1/charges", multi).await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("dataset_state_corrupt"))
    );
    // Put back, it is accepted again (and still refuses what does not fit).
    sqlx::query(
        "UPDATE datasets SET mu_sq_spent = 0.81, mu_spent = 0.9, units = 1 WHERE id = 'census'",
    )
    .execute(&raw)
    .await
    .unwrap();
    let (s, e) = restarted
        .post("/v1/datasets/census/charges", json!({"event": gdp(0.9)}))
        .await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("budget_exceeded")),
        "{e}"
    );
    let (s, _) = restarted
        .post("/v1/datasets/census/charges", json!({"event": gdp(0.5)}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    // Deleting its whole audit chain (records and head) as well hides nothing: the row says
    // which version its audited states start from.
    sqlx::query("DELETE FROM audit WHERE chain = 'census'")
        .execute(&raw)
        .await
        .unwrap();
    sqlx::query("DELETE FROM audit_heads WHERE chain = 'census'")
        .execute(&raw)
        .await
        .unwrap();
    let (s, e) = restarted
        .post("/v1/datasets/census/charges", json!({"event": gdp(0.9)}))
        .await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("dataset_state_corrupt")),
        "{e}"
    );
    let check = privacy_ledger::ledger::Ledgers::new(open_store(&url).await.unwrap());
    let v = check.verify_audit().await.unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("\"census\"") && p.contains("chain is missing")),
        "{:?}",
        v.problems
    );
}

/// The check before every write reads the chain's last stated state through its head's pointer
/// (schema 11: one record by its key, whatever the chain's length). A pointer moved to an older
/// record, or cleared, does not hide a reset: the restarted service
/// refuses the ledger, and accepts it again once the pointer is put back.
#[tokio::test]
async fn a_tampered_state_pointer_is_refused_not_trusted() {
    use privacy_ledger::app::open_store;
    let (app, url) = census_on_a_file("state-pointer").await;
    for mu in [0.3, 0.4] {
        let (s, _) = app
            .post("/v1/datasets/census/charges", json!({"event": gdp(mu)}))
            .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    let exec = |q: &'static str| {
        let raw = raw.clone();
        async move { sqlx::query(q).execute(&raw).await.unwrap() }
    };
    let (pointer, last): (i64, i64) = sqlx::query_as(
        "SELECT h.state_seq, (SELECT MAX(seq) FROM audit WHERE chain = 'census') FROM audit_heads h \
         WHERE chain = 'census'",
    )
    .fetch_one(&raw)
    .await
    .unwrap();
    assert_eq!(
        pointer, last,
        "the last record of the chain states the ledger's state"
    );
    let mu_sq: f64 = sqlx::query_scalar("SELECT mu_sq_spent FROM datasets WHERE id = 'census'")
        .fetch_one(&raw)
        .await
        .unwrap();
    let charge_after_restart = || async {
        let ledgers = privacy_ledger::ledger::Ledgers::new(open_store(&url).await.unwrap());
        let restarted = TestApp::over_ledgers(
            ledgers,
            privacy_ledger::http::Limits::default(),
            crate::api::temp_dir("state-pointer-2"),
        )
        .await;
        let (s, e) = restarted
            .post("/v1/datasets/census/charges", json!({"event": gdp(0.01)}))
            .await;
        (s, e["error"].as_str().map(str::to_owned))
    };
    let refused = (
        StatusCode::CONFLICT,
        Some("dataset_state_corrupt".to_owned()),
    );
    let verify = || async {
        let ledgers = privacy_ledger::ledger::Ledgers::new(open_store(&url).await.unwrap());
        ledgers.verify_audit().await.unwrap().problems
    };
    assert_eq!(verify().await, Vec::<String>::new());
    // The head pointed at an older record: `audit verify` names it; the row still matches no
    // state the pointer leads to, so writes are refused.
    exec("UPDATE audit_heads SET state_seq = state_seq - 1 WHERE chain = 'census'").await;
    let problems = verify().await;
    assert!(
        problems.iter().any(|p| p.contains("head points at")),
        "{problems:?}"
    );
    assert_eq!(charge_after_restart().await, refused);
    // The row reset as well: refused.
    exec("UPDATE datasets SET mu_sq_spent = 0 WHERE id = 'census'").await;
    assert_eq!(charge_after_restart().await, refused);
    // No pointer (cleared): refused, the ledger being past the version its states start from.
    exec("UPDATE audit_heads SET state_seq = NULL WHERE chain = 'census'").await;
    assert_eq!(charge_after_restart().await, refused);
    // Put back, the ledger is accepted again.
    sqlx::query("UPDATE datasets SET mu_sq_spent = ? WHERE id = 'census'")
        .bind(mu_sq)
        .execute(&raw)
        .await
        .unwrap();
    sqlx::query("UPDATE audit_heads SET state_seq = ? WHERE chain = 'census'")
        .bind(pointer)
        .execute(&raw)
        .await
        .unwrap();
    let (s, e) = charge_after_restart().await;
    assert_eq!(s, StatusCode::CREATED, "{e:?}");
    assert_eq!(verify().await, Vec::<String>::new());
}

/// Row 9, quotas: a quota on a partitioned dataset is its holder's share of *every* block: the
/// blocks that exist when it is set, the time blocks created later by their first charge, and the
/// named partitions declared before or after it. Each block keeps its own spend per holder
/// (GDP units in closed form). A change that one block cannot hold changes no block.
#[tokio::test]
async fn a_quota_on_a_partitioned_dataset_binds_every_block() {
    let app = spawn_app().await;
    let (s, _) = app
        .post(
            "/v1/datasets",
            json!({"id": "visits", "budget": {"mu": 1.0},
                   "partitioning": {"type": "time", "width": "day", "time_zone": "UTC"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (ana, ben) = (
        app.bearer("ana", "analyst").await,
        app.bearer("ben", "analyst").await,
    );
    let today = chrono::Utc::now().date_naive();
    let day = |d: i64| {
        (today + chrono::Duration::days(d))
            .format("%Y-%m-%d")
            .to_string()
    };
    let charge = |who: &str, d: i64, mu: f64| {
        let (app, who) = (&app, who.to_owned());
        let body = json!({"datasets": [{"id": "visits", "blocks": [day(d)]}], "event": gdp(mu)});
        async move { as_(app, &who, "POST", "/v1/charges", Some(body), None).await }
    };
    // Before any quota, ana spends 0.6 of yesterday's block (the unallocated share's, later).
    assert_eq!(charge(&ana, -1, 0.6).await.0, StatusCode::CREATED);
    let quota = |holder: &str, mu: f64| {
        let app = &app;
        let uri = format!("/v1/datasets/visits/quotas/{holder}");
        async move {
            app.call("PUT", &uri, Some(&json!({"mu": mu, "delta": 0.0})), &[])
                .await
        }
    };
    // 0.7² + 0.6² fits 1 in yesterday's block.
    let (s, q) = quota("ben", 0.7).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    for d in [-1, 0] {
        // In the block that existed, and in today's, created by this charge.
        let (s, b) = charge(&ben, d, 0.7).await;
        assert_eq!(s, StatusCode::CREATED, "{d}: {b}");
        let (s, e) = charge(&ben, d, 0.05).await;
        assert_eq!(
            (s, e["quota"].as_str()),
            (StatusCode::CONFLICT, Some("ben")),
            "{d}: {e}"
        );
    }
    // ana has the unallocated share of each block, √(1 − 0.49) = 0.714…, even of tomorrow's,
    // where the block's budget has room for more.
    let rest = (1.0f64 - 0.49).sqrt();
    let (s, e) = charge(&ana, 1, rest + 0.001).await;
    assert_eq!(
        (s, e["quota"].as_str()),
        (StatusCode::CONFLICT, Some("*")),
        "{e}"
    );
    let (s, b) = charge(&ana, 1, 0.3).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(charge(&ana, 0, 0.5).await.0, StatusCode::CREATED);
    assert_spent(
        mu_spent(&app, &format!("visits@{}", day(0))).await,
        &[0.7, 0.5],
    );
    // Each block shows its own spend per holder.
    let (_, qs) = app
        .get(&format!("/v1/datasets/visits@{}/quotas", day(0)))
        .await;
    let ben_row = qs
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["principal"] == "ben")
        .unwrap()
        .clone();
    assert_spent(f(&ben_row["mu_spent"]), &[0.7]);
    assert_eq!(ben_row["units"], 1);

    // Lowering ben's quota below what he spent in one block changes no block.
    let (s, e) = quota("ben", 0.5).await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("quota_conflict")),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("in block"), "{e}");
    let (_, parent) = app.get("/v1/datasets/visits/quotas").await;
    assert!(parent
        .as_array()
        .unwrap()
        .iter()
        .any(|q| q["principal"] == "ben" && q["mu"] == 0.7));
    // A block's quotas are its dataset's: none is set on a block alone.
    let (s, e) = app
        .call(
            "PUT",
            &format!("/v1/datasets/visits@{}/quotas/ben", day(0)),
            Some(&json!({"mu": 0.1, "delta": 0.0})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");

    // Blocks created while a quota is being set are never left without it.
    let (s, _) = quota("cy", 0.3).await;
    assert_eq!(s, StatusCode::OK);
    let mut tasks = Vec::new();
    for d in 2..12 {
        tasks.push(charge(&ana, -d, 0.1));
    }
    let set = quota("dee", 0.2);
    // Interleaved on one runtime thread: each charge reads the dataset's quotas, then awaits the
    // store, while the quota is set between them.
    let all = async {
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await);
        }
        out
    };
    let (results, (s, q)) = tokio::join!(all, set);
    assert_eq!(s, StatusCode::OK, "{q}");
    assert!(results.iter().all(|(s, _)| *s == StatusCode::CREATED));
    for d in 2..12 {
        let (_, qs) = app
            .get(&format!("/v1/datasets/visits@{}/quotas", day(-d)))
            .await;
        let holders: Vec<&str> = qs
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["principal"].as_str().unwrap())
            .collect();
        assert_eq!(holders, ["*", "ben", "cy", "dee"], "day {d}");
    }

    // Named partitions: declared before the quota or after it, each holds it.
    let (s, _) = app
        .post(
            "/v1/datasets",
            json!({"id": "cohorts", "budget": {"mu": 1.0}, "partitioning": {"type": "named"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let declare = |name: &str| {
        let (app, uri) = (&app, format!("/v1/datasets/cohorts/blocks/{name}"));
        async move { app.call("PUT", &uri, None, &[]).await.0 }
    };
    assert_eq!(declare("c0").await, StatusCode::CREATED);
    let (s, q) = app
        .call(
            "PUT",
            "/v1/datasets/cohorts/quotas/ben",
            Some(&json!({"mu": 0.5, "delta": 0.0})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{q}");
    assert_eq!(declare("c1").await, StatusCode::CREATED);
    for c in ["c0", "c1"] {
        let body = json!({"datasets": [{"id": "cohorts", "blocks": [c]}], "event": gdp(0.51)});
        let (s, e) = as_(&app, &ben, "POST", "/v1/charges", Some(body), None).await;
        assert_eq!(
            (s, e["quota"].as_str()),
            (StatusCode::CONFLICT, Some("ben")),
            "{c}: {e}"
        );
    }
}

/// Row 9, quotas, raced: blocks created by their first charges while quotas on their dataset are
/// set (each from a task of its own, on several threads) all end up with every quota. A charge
/// copies the dataset's quotas at the version it read; the store creates the block only if the
/// dataset is still at it, and a quota change fails if a block appeared after it listed them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blocks_created_while_quotas_change_all_hold_them() {
    let app = std::sync::Arc::new(
        crate::api::spawn_app_with(privacy_ledger::http::Limits {
            rate_per_second: 1e9,
            rate_burst: 1e9,
            ..Default::default()
        })
        .await,
    );
    let (s, _) = app
        .post(
            "/v1/datasets",
            json!({"id": "taps", "budget": {"mu": 1.0},
                   "partitioning": {"type": "time", "width": "day", "time_zone": "UTC"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let today = chrono::Utc::now().date_naive();
    let day = move |d: i64| {
        (today - chrono::Duration::days(d))
            .format("%Y-%m-%d")
            .to_string()
    };
    const HOLDERS: [&str; 6] = ["h0", "h1", "h2", "h3", "h4", "h5"];
    let mut tasks = tokio::task::JoinSet::new();
    for (i, h) in HOLDERS.iter().enumerate() {
        let app = app.clone();
        tasks.spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(5 + 10 * i as u64)).await;
            let uri = format!("/v1/datasets/taps/quotas/{h}");
            let (s, q) = app
                .call("PUT", &uri, Some(&json!({"mu": 0.1, "delta": 0.0})), &[])
                .await;
            assert_eq!(s, StatusCode::OK, "{q}");
        });
    }
    for d in 1..=120 {
        let app = app.clone();
        tasks.spawn(async move {
            // Subsampled: certified and composed off the async threads for a while between
            // reading the dataset's quotas and appending (each rate its own certificate).
            let event = json!({"type": "poisson_sampled", "sampling_rate": 0.01 + d as f64 * 1e-4,
                               "event": {"type": "gaussian", "noise_multiplier": 5.0}});
            let body = json!({"datasets": [{"id": "taps", "blocks": [day(d)]}], "event": event});
            loop {
                let (s, b) = app.post("/v1/charges", body.clone()).await;
                // At capacity, or past the bounded wait for a turn on the dataset (120 writers
                // at once on a loaded machine): retried, as a client does.
                if s == StatusCode::SERVICE_UNAVAILABLE
                    && (b["error"] == "overloaded" || b["error"] == "busy")
                {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
                assert_eq!(s, StatusCode::CREATED, "{b}");
                break;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    for d in 1..=120 {
        let (_, qs) = app
            .get(&format!("/v1/datasets/taps@{}/quotas", day(d)))
            .await;
        let got: Vec<&str> = qs
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["principal"].as_str().unwrap())
            .collect();
        assert_eq!(got, ["*", "h0", "h1", "h2", "h3", "h4", "h5"], "day -{d}");
    }
}

/// Row 13 / item 6, rollback: a chain cut back to an earlier record with its head rewritten to
/// match is consistent in itself, so `audit verify` alone passes; against the heads printed by an
/// earlier `audit verify` and kept elsewhere (`--expect`), it is reported. So is a kept record
/// whose hash the log no longer has (a chain rewritten). The output pins all heads in one digest.
#[tokio::test]
async fn a_rolled_back_log_is_seen_against_heads_kept_elsewhere() {
    let (app, url) = crate::access::sqlite_app("rollback").await;
    app.dataset("loans", 2.0).await;
    let bin = env!("CARGO_BIN_EXE_privacy-ledger");
    let verify = |expect: Option<&std::path::Path>| {
        let mut args = vec!["audit", "verify", "--database-url", &url];
        if let Some(p) = expect {
            args.extend(["--expect", p.to_str().unwrap()]);
        }
        let out = std::process::Command::new(bin)
            .args(&args)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8(out.stdout).unwrap())
    };
    let global_head = |out: &str| -> (i64, String) {
        let line = out.lines().find(|l| l.starts_with("head \"\" ")).unwrap();
        let parts: Vec<&str> = line.split(' ').collect();
        (parts[2].parse().unwrap(), parts[3].to_owned())
    };
    let (ok, early) = verify(None);
    assert!(ok, "{early}");
    assert!(early.contains("heads digest "), "{early}");
    // More tokens (each recorded on the global chain), then the heads are kept elsewhere.
    app.bearer("pia", "analyst").await;
    app.bearer("raj", "analyst").await;
    let (ok, late) = verify(None);
    assert!(ok, "{late}");
    let kept = std::env::temp_dir().join(format!("kept-{}.txt", uuid::Uuid::new_v4()));
    std::fs::write(&kept, &late).unwrap();
    assert!(verify(Some(&kept)).0, "the log only grew since");

    // Roll the global chain back to the early head, consistently: records and head.
    let (seq, hash) = global_head(&early);
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM audit WHERE chain = '' AND seq > ?")
        .bind(seq)
        .execute(&raw)
        .await
        .unwrap();
    sqlx::query("UPDATE audit_heads SET seq = ?, hash = ? WHERE chain = ''")
        .bind(seq)
        .bind(&hash)
        .execute(&raw)
        .await
        .unwrap();
    let (ok, out) = verify(None);
    assert!(ok, "consistent in itself: {out}");
    let (ok, out) = verify(Some(&kept));
    assert!(!ok);
    assert!(
        out.lines()
            .any(|l| l.starts_with("BROKEN") && l.contains("rolled back")),
        "{out}"
    );
    // A kept record the log no longer has: the chain was rewritten.
    let loans = late
        .lines()
        .find(|l| l.starts_with("head \"loans\" "))
        .unwrap();
    let forged = loans.rsplit_once(' ').unwrap().0.to_owned() + " " + &"ab".repeat(32);
    std::fs::write(&kept, format!("{forged}\n")).unwrap();
    let (ok, out) = verify(Some(&kept));
    assert!(!ok);
    assert!(out.contains("rewritten"), "{out}");
    let _ = std::fs::remove_file(&kept);
}

/// Item 6, quota shares: every ledger's audit log states the quota rows each change wrote (a
/// ledger's first record all of them), so `audit verify` recomputes each share's spend unit by
/// unit and compares the stored rows: intact after quotas on a plain dataset, a partitioned one,
/// a declared partition and a time block; a share's spend reset, a row deleted and a row
/// inserted outside the service are each reported.
#[tokio::test]
async fn audit_verify_recomputes_quota_shares_and_sees_them_changed() {
    let (app, url) = crate::access::sqlite_app("quota-audit").await;
    app.dataset("wages", 1.0).await;
    let (s, q) = app
        .call(
            "PUT",
            "/v1/datasets/wages/quotas/lea",
            Some(&json!({"mu": 0.5, "delta": 0.0})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{q}");
    let lea = app.bearer("lea", "analyst").await;
    for mu in [0.3, 0.4] {
        let (s, b) = as_(
            &app,
            &lea,
            "POST",
            "/v1/datasets/wages/charges",
            Some(json!({"event": gdp(mu)})),
            None,
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
    }
    // A partitioned dataset: a declared partition and a time block, both holding the quota.
    for (id, parts) in [
        ("teams", json!({"type": "named"})),
        (
            "shifts",
            json!({"type": "time", "width": "day", "time_zone": "UTC"}),
        ),
    ] {
        let (s, _) = app
            .post(
                "/v1/datasets",
                json!({"id": id, "budget": {"mu": 1.0}, "partitioning": parts}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
        let (s, _) = app
            .call(
                "PUT",
                &format!("/v1/datasets/{id}/quotas/lea"),
                Some(&json!({"mu": 0.5, "delta": 0.0})),
                &[],
            )
            .await;
        assert_eq!(s, StatusCode::OK);
    }
    assert_eq!(
        app.call("PUT", "/v1/datasets/teams/blocks/t1", None, &[])
            .await
            .0,
        StatusCode::CREATED
    );
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    for (id, block) in [("teams", "t1".to_owned()), ("shifts", today)] {
        let body = json!({"datasets": [{"id": id, "blocks": [block]}], "event": gdp(0.2)});
        let (s, b) = as_(&app, &lea, "POST", "/v1/charges", Some(body), None).await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
    }
    let ledgers =
        privacy_ledger::ledger::Ledgers::new(privacy_ledger::app::open_store(&url).await.unwrap());
    let v = ledgers.verify_audit().await.unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);

    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    let exec = |q: &'static str| {
        let raw = raw.clone();
        async move { sqlx::query(q).execute(&raw).await.unwrap() }
    };
    let reported = |needle: &'static str| {
        let ledgers = &ledgers;
        async move {
            let v = ledgers.verify_audit().await.unwrap();
            assert!(
                v.problems.iter().any(|p| p.contains(needle)),
                "{needle}: {:?}",
                v.problems
            );
        }
    };
    // lea's spend on wages reset, so she could spend her share again.
    exec("UPDATE quotas SET mu_sq_spent = 0, units = 0 WHERE dataset_id = 'wages' AND principal = 'lea'").await;
    reported("stored quota \"lea\"").await;
    // A block's quota row deleted, so lea spends from the unallocated share there.
    exec("DELETE FROM quotas WHERE dataset_id LIKE 'teams@%' AND principal = 'lea'").await;
    reported("not stored").await;
    // A share inserted outside the service.
    exec("INSERT INTO quotas (dataset_id, principal, mu, delta, mu_sq_spent, delta_spent, units, updated_at) VALUES ('shifts', 'mallory', 0.9, 0, 0, 0, 0, '2026-11-27T00:00:00Z')").await;
    reported("never recorded").await;
}

/// Row 8, aliases left from before declarations: an admin retires one by lowering its budget below
/// what it spent (audited, as any budget change): no further unit fits, however small, and the
/// block still states the budget it had (its high-water mark).
#[tokio::test]
async fn an_alias_is_retired_by_lowering_its_budget_below_its_spend() {
    let app = spawn_app().await;
    let (s, _) = app
        .post(
            "/v1/datasets",
            json!({"id": "members2", "budget": {"mu": 1.0}, "partitioning": {"type": "named"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(
        app.call("PUT", "/v1/datasets/members2/blocks/ids-000-999", None, &[])
            .await
            .0,
        StatusCode::CREATED
    );
    let charge = |mu: f64| {
        let body = json!({"datasets": [{"id": "members2", "blocks": ["ids-000-999"]}],
                          "event": gdp(mu)});
        let app = &app;
        async move { app.post("/v1/charges", body).await }
    };
    assert_eq!(charge(0.5).await.0, StatusCode::CREATED);
    let (s, b) = app
        .call(
            "PATCH",
            "/v1/datasets/members2@ids-000-999",
            Some(&json!({"budget": {"mu": 0.25}})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, e) = charge(1e-9).await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("budget_exceeded")),
        "{e}"
    );
    let (_, d) = app.get("/v1/datasets/members2@ids-000-999").await;
    // The statement is the high-water mark (with the gate's tolerance, rounded up), not 0.25.
    assert!(f(&d["statement"]["mu"]) >= 1.0, "{d}");
    assert_eq!(d["remaining_mu"], 0.0, "{d}");
}

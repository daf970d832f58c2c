//! Grants, quotas and the audit log (issue 11), through the real router.

use crate::api::{temp_dir, TestApp};
use axum::http::StatusCode;
use privacy_ledger::app::open_store;
use privacy_ledger::http::Limits;
use serde_json::{json, Value};

pub async fn sqlite_app(tag: &str) -> (TestApp, String) {
    let dir = temp_dir(tag);
    let url = format!("sqlite://{}", dir.join("l.db").display());
    let app = TestApp::over_store(open_store(&url).await.unwrap(), Limits::default(), dir).await;
    (app, url)
}

fn gdp(mu: f64) -> Value {
    json!({"event": {"type": "gdp", "mu": mu}})
}

/// Every dataset route, for a dataset id: (method, uri, body).
fn dataset_routes(id: &str) -> Vec<(&'static str, String, Option<Value>)> {
    vec![
        ("GET", format!("/v1/datasets/{id}"), None),
        (
            "PATCH",
            format!("/v1/datasets/{id}"),
            Some(json!({"budget": {"mu": 5.0}})),
        ),
        ("GET", format!("/v1/datasets/{id}/charges"), None),
        ("POST", format!("/v1/datasets/{id}/charges"), Some(gdp(0.1))),
        (
            "POST",
            format!("/v1/datasets/{id}/charges/preview"),
            Some(gdp(0.1)),
        ),
        ("POST", format!("/v1/datasets/{id}/charges/c/commit"), None),
        (
            "POST",
            format!("/v1/datasets/{id}/charges/c/release"),
            Some(json!({"outputs_released": false})),
        ),
        (
            "POST",
            format!("/v1/datasets/{id}/runs"),
            Some(json!({"event": {"type": "gdp", "mu": 0.1}, "steps": 2})),
        ),
        ("GET", format!("/v1/datasets/{id}/runs/r"), None),
        ("POST", format!("/v1/datasets/{id}/runs/r/chunks"), None),
        ("GET", format!("/v1/datasets/{id}/report"), None),
        ("GET", format!("/v1/datasets/{id}/tradeoff?points=5"), None),
        (
            "POST",
            format!("/v1/datasets/{id}/calibrate"),
            Some(
                json!({"event": {"type": "gaussian", "noise_multiplier": 1.0},
                        "free_parameter": "noise_multiplier"}),
            ),
        ),
        ("GET", format!("/v1/datasets/{id}/grants"), None),
        (
            "PUT",
            format!("/v1/datasets/{id}/grants/x"),
            Some(json!({"role": "analyst"})),
        ),
        ("DELETE", format!("/v1/datasets/{id}/grants/x"), None),
        ("GET", format!("/v1/datasets/{id}/quotas"), None),
        (
            "PUT",
            format!("/v1/datasets/{id}/quotas/x"),
            Some(json!({"mu": 0.1, "delta": 0.0})),
        ),
        ("GET", format!("/v1/audit?dataset_id={id}"), None),
    ]
}

/// Credentials and names that could be read two ways are refused (issue 34, row 9): two
/// `Authorization` headers (400, whichever the first is), and principal names that render alike
/// (runs of spaces, or leading and trailing ones: 422 naming the field).
#[tokio::test]
async fn ambiguous_credentials_and_names_are_refused() {
    let (app, _) = sqlite_app("ambiguous").await;
    let admin = format!("Bearer {}", app.token);
    for pair in [
        [admin.as_str(), "Bearer pl_nope"],
        ["Bearer pl_nope", admin.as_str()],
    ] {
        let (s, b) = app
            .call(
                "GET",
                "/v1/datasets",
                None,
                &[("authorization", pair[0]), ("authorization", pair[1])],
            )
            .await;
        assert_eq!(
            (s, b["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("duplicate_header")),
            "{b}"
        );
    }
    for name in ["data  team", " data team", "data team "] {
        let (s, b) = app
            .post("/v1/tokens", json!({"name": name, "role": "analyst"}))
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{name:?}: {b}");
        assert_eq!(b["details"]["path"], "$.name", "{b}");
    }
    let (s, b) = app
        .post(
            "/v1/tokens",
            json!({"name": "data team", "role": "analyst"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    // One field to keep (issue 36): `bearer_token` is the only secret and the only field whose
    // name says token; the rest is the token's description, flat, as `GET /v1/tokens` lists it.
    let keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys.iter()
            .filter(|k| k.contains("token") || k.contains("secret"))
            .collect::<Vec<_>>(),
        [&"bearer_token"],
        "{b}"
    );
    let bearer = b["bearer_token"].as_str().unwrap();
    assert!(bearer.starts_with("pl_") && bearer.len() == 67, "{b}");
    assert_eq!(
        (b["name"].as_str(), b["role"].as_str()),
        (Some("data team"), Some("analyst"))
    );
    let (s, listed) = app.get("/v1/tokens").await;
    assert_eq!(s, StatusCode::OK);
    let mine = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == b["id"])
        .unwrap();
    let mut described = b.clone();
    described.as_object_mut().unwrap().remove("bearer_token");
    assert_eq!(mine, &described);
}

/// The stateless accountant costs CPU: role `none` without any grant gets 403 on every route of
/// it (issue 34, row 6); a grant on some dataset (any role) or a global role that reads opens it.
#[tokio::test]
async fn the_stateless_accountant_needs_a_role_or_a_grant() {
    let (app, _) = sqlite_app("stateless").await;
    app.dataset("alpha", 1.0).await;
    let nobody = app.bearer("nobody", "none").await;
    let auditor = app.bearer("reader", "auditor").await;
    let routes = [
        (
            "/v1/accountant/compose",
            json!({"events": [{"type": "gdp", "mu": 0.5}]}),
        ),
        (
            "/v1/accountant/certificate",
            json!({"event": {"type": "gdp", "mu": 0.5}}),
        ),
        (
            "/v1/accountant/calibrate",
            json!({"event": {"type": "gaussian", "noise_multiplier": 1.0},
                   "free_parameter": "noise_multiplier", "mu": 0.5}),
        ),
    ];
    for (uri, body) in &routes {
        let (s, b) = app
            .call("POST", uri, Some(body), &[("authorization", &nobody)])
            .await;
        assert_eq!(
            (s, b["error"].as_str()),
            (StatusCode::FORBIDDEN, Some("forbidden")),
            "{uri}: {b}"
        );
        let (s, b) = app
            .call("POST", uri, Some(body), &[("authorization", &auditor)])
            .await;
        assert_eq!(s, StatusCode::OK, "{uri}: {b}");
    }
    let (s, _) = app
        .call(
            "PUT",
            "/v1/datasets/alpha/grants/nobody",
            Some(&json!({"role": "auditor"})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    for (uri, body) in &routes {
        let (s, b) = app
            .call("POST", uri, Some(body), &[("authorization", &nobody)])
            .await;
        assert_eq!(s, StatusCode::OK, "{uri}: {b}");
    }
}

/// A principal without a grant learns nothing about a dataset: every route answers exactly as for
/// a dataset that does not exist (404, same body but the id), the listing leaves it out, and
/// nothing is written. With a grant, its role decides (403 beyond it).
#[tokio::test]
async fn a_principal_sees_and_spends_only_where_it_holds_a_grant() {
    let (app, _) = sqlite_app("grants").await;
    app.dataset("alpha", 1.0).await;
    app.dataset("beta", 1.0).await;
    let carol = app.bearer("carol", "none").await;
    let as_carol = |m: &'static str, uri: String, body: Option<Value>| {
        let (app, carol) = (&app, carol.clone());
        async move {
            app.call(m, &uri, body.as_ref(), &[("authorization", &carol)])
                .await
        }
    };
    // No grant anywhere: an empty listing, 404 everywhere.
    let (s, b) = as_carol("GET", "/v1/datasets".into(), None).await;
    assert_eq!((s, b["items"].clone()), (StatusCode::OK, json!([])));
    let mut leaks = 0;
    for ((m, uri, body), (_, ghost, gbody)) in dataset_routes("beta")
        .into_iter()
        .zip(dataset_routes("no-such-dataset"))
    {
        let (s, b) = as_carol(m, uri.clone(), body).await;
        let (gs, gb) = as_carol(m, ghost, gbody).await;
        let same = s == gs
            && b["error"] == gb["error"]
            && b["message"]
                .as_str()
                .map(|t| t.replace("beta", "no-such-dataset"))
                == gb["message"].as_str().map(str::to_owned);
        if s != StatusCode::NOT_FOUND || !same {
            leaks += 1;
            eprintln!("leak: {m} {uri}: {s} {b} vs {gs} {gb}");
        }
    }
    assert_eq!(leaks, 0);
    // An analyst grant on alpha: listed, readable, spendable; administration refused (403).
    let (s, _) = app
        .call(
            "PUT",
            "/v1/datasets/alpha/grants/carol",
            Some(&json!({"role": "analyst"})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, b) = as_carol("GET", "/v1/datasets".into(), None).await;
    let ids: Vec<_> = b["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("alpha")]);
    let (s, b) = as_carol("POST", "/v1/datasets/alpha/charges".into(), Some(gdp(0.3))).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    for (m, uri, body) in [
        (
            "PATCH",
            "/v1/datasets/alpha",
            Some(json!({"budget": {"mu": 9.0}})),
        ),
        (
            "PUT",
            "/v1/datasets/alpha/grants/carol",
            Some(json!({"role": "admin"})),
        ),
        (
            "PUT",
            "/v1/datasets/alpha/quotas/carol",
            Some(json!({"mu": 1.0, "delta": 0.0})),
        ),
        ("GET", "/v1/datasets/alpha/grants", None),
        ("GET", "/v1/audit?dataset_id=alpha", None),
        ("GET", "/v1/audit", None),
        ("GET", "/v1/tokens", None),
        ("GET", "/metrics", None),
        (
            "POST",
            "/v1/datasets",
            Some(json!({"id": "gamma", "budget": {"mu": 1.0}})),
        ),
    ] {
        let (s, b) = as_carol(m, uri.into(), body).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{m} {uri}: {b}");
    }
    assert_eq!(app.get("/v1/datasets/alpha").await.1["budget"]["mu"], 1.0);
    // Beta is still invisible.
    assert_eq!(
        as_carol("GET", "/v1/datasets/beta".into(), None).await.0,
        StatusCode::NOT_FOUND
    );
    // An auditor grant: reads, including the dataset's audit records and grants; spends nothing.
    let dave = app.bearer("dave", "none").await;
    app.call(
        "PUT",
        "/v1/datasets/beta/grants/dave",
        Some(&json!({"role": "auditor"})),
        &[],
    )
    .await;
    let dv = |m: &'static str, uri: &'static str, body: Option<Value>| {
        let (app, dave) = (&app, dave.clone());
        async move {
            app.call(m, uri, body.as_ref(), &[("authorization", &dave)])
                .await
        }
    };
    assert_eq!(
        dv("GET", "/v1/datasets/beta/report", None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        dv("GET", "/v1/datasets/beta/grants", None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        dv("GET", "/v1/audit?dataset_id=beta", None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        dv("POST", "/v1/datasets/beta/charges", Some(gdp(0.1)))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        dv("GET", "/v1/datasets/alpha", None).await.0,
        StatusCode::NOT_FOUND
    );
    // Withdrawn: invisible again at once.
    let (s, _) = app
        .call("DELETE", "/v1/datasets/alpha/grants/carol", None, &[])
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(
        as_carol("GET", "/v1/datasets/alpha".into(), None).await.0,
        StatusCode::NOT_FOUND
    );
    // A global auditor sees everything and spends nothing (403, it knows the dataset).
    let eve = app.bearer("eve", "auditor").await;
    let (s, b) = app
        .call("GET", "/v1/datasets", None, &[("authorization", &eve)])
        .await;
    assert_eq!(
        (s, b["items"].as_array().unwrap().len()),
        (StatusCode::OK, 2)
    );
    let (s, _) = app
        .call(
            "POST",
            "/v1/datasets/beta/charges",
            Some(&gdp(0.1)),
            &[("authorization", &eve)],
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // Bad grants are refused with the field named.
    let (s, b) = app
        .call(
            "PUT",
            "/v1/datasets/alpha/grants/carol",
            Some(&json!({"role": "root"})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    let (s, _) = app
        .call(
            "PUT",
            "/v1/datasets/alpha/grants/%2A",
            Some(&json!({"role": "analyst"})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
}

/// Quotas are shares of the one budget (closed forms: Gaussian-type units are certified exactly,
/// δᵢ = 0): alice's μ_q = 0.6 admits a unit of 0.6 and nothing more; bob, without a quota, spends
/// from the unallocated √(1 − 0.6²) = 0.8; together they spend exactly the budget μ = 1.
#[tokio::test]
async fn quotas_are_shares_of_the_budget_enforced_by_the_same_filter() {
    let (app, _) = sqlite_app("quotas").await;
    app.dataset("d", 1.0).await;
    let alice = app.bearer("alice", "analyst").await;
    let bob = app.bearer("bob", "analyst").await;
    // Spending before the first quota belongs to the unallocated share.
    let (s, _) = app
        .call(
            "POST",
            "/v1/datasets/d/charges",
            Some(&gdp(0.3)),
            &[("authorization", &bob)],
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    // 0.6² + 0.3² fits 1; 0.96² + 0.3² does not.
    let (s, b) = app
        .call(
            "PUT",
            "/v1/datasets/d/quotas/alice",
            Some(&json!({"mu": 0.96, "delta": 0.0})),
            &[],
        )
        .await;
    assert_eq!(
        (s, b["error"].clone()),
        (StatusCode::CONFLICT, json!("quota_conflict")),
        "{b}"
    );
    let (s, q) = app
        .call(
            "PUT",
            "/v1/datasets/d/quotas/alice",
            Some(&json!({"mu": 0.6, "delta": 0.0})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{q}");
    assert_eq!(
        (q["mu"].clone(), q["remaining_mu"].clone()),
        (json!(0.6), json!(0.6))
    );
    let charge = |who: &String, mu: f64| {
        let (app, who) = (&app, who.clone());
        async move {
            app.call(
                "POST",
                "/v1/datasets/d/charges",
                Some(&gdp(mu)),
                &[("authorization", &who)],
            )
            .await
        }
    };
    // bob cannot take alice's share, though the dataset has room for it: the unallocated share
    // (0.8, 0.3 spent) refuses 0.75.
    let (s, b) = charge(&bob, 0.75).await;
    assert_eq!(
        (s, b["quota"].clone()),
        (StatusCode::CONFLICT, json!("*")),
        "{b}"
    );
    assert!(b["remaining_mu"].as_f64().unwrap() > 0.95, "{b}");
    let (s, b) = charge(&alice, 0.6).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = charge(&alice, 0.01).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(b["quota"], "alice", "{b}");
    assert!(b["message"].as_str().unwrap().contains("quota"), "{b}");
    // bob: the unallocated share is 0.8, of which 0.3 is spent: √(0.64 − 0.09) remains.
    let (s, b) = charge(&bob, (0.64f64 - 0.09).sqrt()).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = charge(&bob, 0.01).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    let d = app.get("/v1/datasets/d").await.1;
    assert!((d["mu_spent"].as_f64().unwrap() - 1.0).abs() < 1e-12, "{d}");
    // Quotas cannot drop below what was spent, nor the budget below the quotas.
    let (s, _) = app
        .call(
            "PUT",
            "/v1/datasets/d/quotas/alice",
            Some(&json!({"mu": 0.5, "delta": 0.0})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, b) = app
        .call(
            "PATCH",
            "/v1/datasets/d",
            Some(&json!({"budget": {"mu": 0.9}})),
            &[],
        )
        .await;
    assert_eq!(
        (s, b["error"].clone()),
        (StatusCode::CONFLICT, json!("quota_conflict")),
        "{b}"
    );
    // Each holder sees its own quota; admins see all, with the unallocated share.
    let (_, mine) = app
        .call(
            "GET",
            "/v1/datasets/d/quotas",
            None,
            &[("authorization", &alice)],
        )
        .await;
    assert_eq!(mine.as_array().unwrap().len(), 1);
    assert_eq!(mine[0]["principal"], "alice");
    assert_eq!(mine[0]["remaining_mu"], 0.0);
    let (_, all) = app.get("/v1/datasets/d/quotas").await;
    let holders: Vec<_> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["principal"].clone())
        .collect();
    assert_eq!(holders, vec![json!("*"), json!("alice")]);
    assert!((all[0]["mu"].as_f64().unwrap() - 0.8).abs() < 1e-12);
    // The ledger says who charged and which share paid.
    let (_, entries) = app.get("/v1/datasets/d/charges").await;
    let paid: Vec<_> = entries["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].clone(),
                e["principal"].clone(),
                e["quota"].clone(),
            )
        })
        .collect();
    assert_eq!(
        paid,
        vec![
            (json!("charge"), json!("bob"), json!(null)),
            (json!("quota"), json!("tests"), json!("alice")),
            (json!("charge"), json!("alice"), json!("alice")),
            (json!("charge"), json!("bob"), json!("*")),
        ]
    );
}

/// A released reservation refunds the share that paid for it, not only the dataset.
#[tokio::test]
async fn a_release_refunds_the_quota_too() {
    let (app, _) = sqlite_app("quota-release").await;
    app.dataset("d", 1.0).await;
    let alice = app.bearer("alice", "analyst").await;
    app.call(
        "PUT",
        "/v1/datasets/d/quotas/alice",
        Some(&json!({"mu": 0.5, "delta": 0.0})),
        &[],
    )
    .await;
    let body = json!({"event": {"type": "gdp", "mu": 0.5}, "reserve": true});
    let (s, b) = app
        .call(
            "POST",
            "/v1/datasets/d/charges",
            Some(&body),
            &[("authorization", &alice)],
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let id = b["charge"]["id"].as_str().unwrap().to_owned();
    let (_, q) = app
        .call(
            "GET",
            "/v1/datasets/d/quotas",
            None,
            &[("authorization", &alice)],
        )
        .await;
    assert_eq!(q[0]["remaining_mu"], 0.0);
    let (s, b) = app
        .call(
            "POST",
            &format!("/v1/datasets/d/charges/{id}/release"),
            Some(&json!({"outputs_released": false})),
            &[("authorization", &alice)],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, q) = app
        .call(
            "GET",
            "/v1/datasets/d/quotas",
            None,
            &[("authorization", &alice)],
        )
        .await;
    assert_eq!(
        (q[0]["remaining_mu"].clone(), q[0]["units"].clone()),
        (json!(0.5), json!(0))
    );
}

/// Under concurrency each share admits exactly what fits: alice's quota 0.5 takes 25 units of
/// 0.1 (25·0.01 = 0.25), the unallocated 0.75 takes 75, racing each other on one dataset.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quotas_admit_exactly_what_fits_under_concurrency() {
    let (app, _) = sqlite_app("quota-race").await;
    app.dataset("d", 1.0).await;
    let alice = app.bearer("alice", "analyst").await;
    let bob = app.bearer("bob", "analyst").await;
    app.call(
        "PUT",
        "/v1/datasets/d/quotas/alice",
        Some(&json!({"mu": 0.5, "delta": 0.0})),
        &[],
    )
    .await;
    let app = std::sync::Arc::new(app);
    let mut tasks = Vec::new();
    for i in 0..180 {
        let (app, who) = (
            app.clone(),
            if i % 2 == 0 {
                alice.clone()
            } else {
                bob.clone()
            },
        );
        tasks.push(tokio::spawn(async move {
            let (s, b) = app
                .call(
                    "POST",
                    "/v1/datasets/d/charges",
                    Some(&gdp(0.1)),
                    &[("authorization", &who)],
                )
                .await;
            (i % 2 == 0, s, b)
        }));
    }
    let (mut alice_ok, mut bob_ok) = (0, 0);
    for t in tasks {
        let (is_alice, s, b) = t.await.unwrap();
        match s {
            StatusCode::CREATED if is_alice => alice_ok += 1,
            StatusCode::CREATED => bob_ok += 1,
            StatusCode::CONFLICT => assert_eq!(b["error"], "budget_exceeded", "{b}"),
            other => panic!("{other}: {b}"),
        }
    }
    assert_eq!((alice_ok, bob_ok), (25, 75));
    let d = app.get("/v1/datasets/d").await.1;
    assert_eq!(d["units"], 100);
}

/// Every change leaves an audit record with who, when, the request id, the client and the values
/// before and after; the chain detects an edited record, a deleted one and a deleted last one,
/// through `Ledgers::verify_audit` and `privacy-ledger audit verify`.
#[tokio::test]
async fn the_audit_log_records_every_change_and_detects_tampering() {
    let (app, url) = sqlite_app("audit").await;
    app.dataset("d", 1.0).await;
    let alice = app.bearer("alice", "analyst").await;
    let rid = |id: &'static str| [("x-request-id", id)];
    app.call(
        "PATCH",
        "/v1/datasets/d",
        Some(&json!({"budget": {"mu": 2.0}})),
        &rid("req-budget"),
    )
    .await;
    app.call(
        "PUT",
        "/v1/datasets/d/grants/bob",
        Some(&json!({"role": "auditor"})),
        &[],
    )
    .await;
    app.call(
        "PUT",
        "/v1/datasets/d/quotas/alice",
        Some(&json!({"mu": 1.0, "delta": 0.0})),
        &[],
    )
    .await;
    let (s, _) = app
        .call(
            "POST",
            "/v1/datasets/d/charges",
            Some(&gdp(0.5)),
            &[("authorization", &alice), ("x-request-id", "req-charge")],
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = app
        .call(
            "POST",
            "/v1/datasets/d/charges",
            Some(&gdp(1.5)),
            &[("authorization", &alice)],
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (_, page) = app.get("/v1/audit?dataset_id=d").await;
    let items = page["items"].as_array().unwrap();
    let actions: Vec<_> = items
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        vec![
            "dataset.created",
            "budget.changed",
            "grant.set",
            "quota.set",
            "unit.admitted",
            "unit.rejected"
        ]
    );
    let budget = &items[1];
    assert_eq!(budget["principal"], "tests");
    assert_eq!(budget["request_id"], "req-budget");
    assert_eq!(budget["client"], "192.0.2.7:40000");
    assert_eq!(
        (
            budget["before"]["mu"].clone(),
            budget["after"]["mu"].clone()
        ),
        (json!(1.0), json!(2.0))
    );
    assert_eq!(items[4]["principal"], "alice");
    assert_eq!(items[4]["request_id"], "req-charge");
    assert_eq!(items[4]["after"]["charge"]["event"]["mu"], 0.5);
    assert!(items[5]["after"]["reason"]
        .as_str()
        .unwrap()
        .contains("quota"));
    for (i, r) in items.iter().enumerate() {
        assert_eq!(r["seq"], i as i64 + 1);
        if i > 0 {
            assert_eq!(r["prev_hash"], items[i - 1]["hash"]);
        }
    }
    // Filters and pages: by principal, by time, in pages that chain.
    let (_, by_alice) = app.get("/v1/audit?principal=alice").await;
    assert_eq!(by_alice["items"].as_array().unwrap().len(), 2);
    let (_, future) = app.get("/v1/audit?since=2999-01-01T00:00:00Z").await;
    assert_eq!(future["items"], json!([]));
    let (s, b) = app.get("/v1/audit?since=yesterday").await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    let (_, p1) = app.get("/v1/audit?limit=2").await;
    let (_, p2) = app
        .get(&format!("/v1/audit?limit=2&after={}", p1["next_cursor"]))
        .await;
    assert!(p2["items"][0]["id"].as_i64() > p1["items"][1]["id"].as_i64());
    // JSON lines.
    let req = axum::http::Request::get("/v1/audit?format=jsonl&dataset_id=d")
        .header("authorization", format!("Bearer {}", app.token))
        .body(axum::body::Body::empty())
        .unwrap();
    let res = tower::ServiceExt::oneshot(app.router.clone(), req)
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "application/x-ndjson");
    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    let lines: Vec<Value> = String::from_utf8(body.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[5]["action"], "unit.rejected");

    // Intact, then tampered with three ways.
    let ledgers = privacy_ledger::ledger::Ledgers::new(open_store(&url).await.unwrap());
    let v = ledgers.verify_audit().await.unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    assert!(
        v.records >= 8,
        "dataset records and token records: {}",
        v.records
    );
    let bin = env!("CARGO_BIN_EXE_privacy-ledger");
    let verify = || {
        std::process::Command::new(bin)
            .args(["audit", "verify", "--database-url", &url])
            .output()
            .unwrap()
    };
    assert!(verify().status.success());
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    let exec = |q: &'static str| {
        let raw = raw.clone();
        async move { sqlx::query(q).execute(&raw).await.unwrap() }
    };
    // 1. An edited record (the budget raised to 20 in the log).
    exec("UPDATE audit SET after_value = replace(after_value, '2.0', '20.0') WHERE chain = 'd' AND seq = 2").await;
    let v = ledgers.verify_audit().await.unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("record 2") && p.contains("edited")),
        "{:?}",
        v.problems
    );
    let out = verify();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("BROKEN"));
    exec("UPDATE audit SET after_value = replace(after_value, '20.0', '2.0') WHERE chain = 'd' AND seq = 2").await;
    assert!(ledgers.verify_audit().await.unwrap().problems.is_empty());
    // 2. A deleted record in the middle (the rejected charge's predecessor).
    exec("DELETE FROM audit WHERE chain = 'd' AND seq = 3").await;
    let v = ledgers.verify_audit().await.unwrap();
    assert!(
        v.problems.iter().any(|p| p.contains("missing")),
        "{:?}",
        v.problems
    );
    // 3. A deleted last record (the tokens' chain): seen against the chain's head.
    exec("DELETE FROM audit WHERE chain = '' AND seq = (SELECT MAX(seq) FROM audit WHERE chain = '')").await;
    let v = ledgers.verify_audit().await.unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("chain \"\"") && p.contains("head")),
        "{:?}",
        v.problems
    ); // 4. A deleted head: the chain's records are still checked, and the missing head reported.
    exec("DELETE FROM audit_heads WHERE chain = 'd'").await;
    let v = ledgers.verify_audit().await.unwrap();
    assert!(
        v.problems.iter().any(|p| p.contains("no head")),
        "{:?}",
        v.problems
    );
    assert!(
        v.problems.iter().any(|p| p.contains("missing")),
        "{:?}",
        v.problems
    );
}

/// Revocation on three replicas sharing PostgreSQL: made on one, refused on all three at once.
#[tokio::test]
async fn revocation_takes_effect_at_once_on_three_postgres_replicas() {
    let Some(url) = crate::store::postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the three-replica revocation test");
        return;
    };
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(
            TestApp::over_store(
                open_store(&url).await.unwrap(),
                Limits::default(),
                temp_dir(&format!("replica-{i}")),
            )
            .await,
        );
    }
    let name = format!("analyst-{}", uuid::Uuid::new_v4().simple());
    let (s, made) = replicas[0]
        .post("/v1/tokens", json!({"name": name, "role": "analyst"}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let bearer = format!("Bearer {}", made["bearer_token"].as_str().unwrap());
    for r in &replicas {
        let (s, _) = r
            .call(
                "GET",
                "/v1/datasets?limit=1",
                None,
                &[("authorization", &bearer)],
            )
            .await;
        assert_eq!(s, StatusCode::OK);
    }
    let id = made["id"].as_str().unwrap();
    let since = (chrono::Utc::now() - chrono::Duration::seconds(5))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (s, _) = replicas[1]
        .call("DELETE", &format!("/v1/tokens/{id}"), None, &[])
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    for r in &replicas {
        let (s, _) = r
            .call(
                "GET",
                "/v1/datasets?limit=1",
                None,
                &[("authorization", &bearer)],
            )
            .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    let (s, _) = replicas[2]
        .call("DELETE", &format!("/v1/tokens/{id}"), None, &[])
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "revoked once");
    // The revocation is in the audit log, with who did it.
    let (_, log) = replicas[2]
        .get(&format!(
            "/v1/audit?principal=tests&since={since}&limit=1000"
        ))
        .await;
    assert!(log["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["action"] == "token.revoked" && r["target"] == id));
}

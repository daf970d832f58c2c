//! Authentication: bearer tokens, secure by default (issue 11, first part).

use crate::api::{spawn_app, temp_dir, TestApp};
use crate::crash::{cli_token, http, Server};
use axum::http::StatusCode;
use privacy_ledger::app::open_store;
use privacy_ledger::http::Limits;
use serde_json::json;

#[tokio::test]
async fn every_dataset_route_needs_a_valid_token_and_says_how_to_get_one() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let uris = [
        ("GET", "/v1/datasets"),
        ("GET", "/v1/datasets/d"),
        ("POST", "/v1/datasets/d/charges"),
        ("GET", "/v1/datasets/d/report"),
        ("POST", "/v1/accountant/compose"),
        ("GET", "/metrics"),
    ];
    for auth in ["", "Bearer ", "Bearer pl_nope", "Basic abc", "bearer x"] {
        for (m, uri) in uris {
            let body = json!({"event": {"type": "gdp", "mu": 0.1}, "events": []});
            let (s, b) = app
                .call(m, uri, Some(&body), &[("authorization", auth)])
                .await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{m} {uri} with {auth:?}: {b}");
            assert_eq!(b["error"], "unauthenticated");
            assert!(b["message"].as_str().unwrap().contains("token create"));
        }
    }
    // Nothing was charged by the refused requests.
    assert_eq!(app.get("/v1/datasets/d").await.1["units"], 0);
    // Health, readiness and the spec stay open.
    for uri in ["/healthz", "/readyz", "/openapi.json"] {
        let (s, _) = app.call("GET", uri, None, &[("authorization", "")]).await;
        assert_eq!(s, StatusCode::OK, "{uri}");
    }
    // The spec declares the scheme, so generated clients send the token.
    let (_, spec) = app.get("/openapi.json").await;
    assert_eq!(
        spec["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(spec["security"][0]["bearer"], json!([]));
}

#[tokio::test]
async fn the_401_carries_www_authenticate() {
    use tower::ServiceExt;
    let app = spawn_app().await;
    let req = axum::http::Request::get("/v1/datasets")
        .body(axum::body::Body::empty())
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
}

/// Tokens are stored as hashes only; a revoked or expired token is refused at once, also by
/// another process on the same database (no cache).
#[tokio::test]
async fn revoked_and_expired_tokens_are_refused_at_once_on_every_replica() {
    let dir = temp_dir("auth");
    let url = format!("sqlite://{}", dir.join("l.db").display());
    let a = TestApp::over_store(
        open_store(&url).await.unwrap(),
        Limits::default(),
        dir.clone(),
    )
    .await;
    let b = TestApp::over_store(
        open_store(&url).await.unwrap(),
        Limits::default(),
        temp_dir("auth-b"),
    )
    .await;
    let ledgers = privacy_ledger::ledger::Ledgers::new(open_store(&url).await.unwrap());
    let t = ledgers
        .create_token(
            &privacy_ledger::ledger::principal::Actor::operator(),
            "analyst 7",
            "analyst",
            None,
        )
        .await
        .unwrap();
    assert!(t.secret.starts_with("pl_") && t.secret.len() == 67);
    let bearer = format!("Bearer {}", t.secret);
    for app in [&a, &b] {
        let (s, _) = app
            .call("GET", "/v1/datasets", None, &[("authorization", &bearer)])
            .await;
        assert_eq!(s, StatusCode::OK);
    }
    // The scheme is case-insensitive (RFC 9110).
    let lower = format!("bearer {}", t.secret);
    let (s, _) = a
        .call("GET", "/v1/datasets", None, &[("authorization", &lower)])
        .await;
    assert_eq!(s, StatusCode::OK);
    // The secret is nowhere in the database file.
    let raw = std::fs::read(dir.join("l.db")).unwrap();
    assert!(!raw
        .windows(t.secret.len())
        .any(|w| w == t.secret.as_bytes()));
    // Listing shows the token without its secret.
    let listed = ledgers
        .list_tokens(&privacy_ledger::ledger::principal::Actor::operator())
        .await
        .unwrap();
    assert!(listed
        .iter()
        .any(|x| x.id == t.token.id && x.role == "analyst"));
    assert!(!serde_json::to_string(&listed).unwrap().contains(&t.secret));
    // Revoked through one process, refused by both at once.
    assert!(ledgers
        .revoke_token(
            &privacy_ledger::ledger::principal::Actor::operator(),
            &t.token.id
        )
        .await
        .unwrap());
    assert!(!ledgers
        .revoke_token(
            &privacy_ledger::ledger::principal::Actor::operator(),
            &t.token.id
        )
        .await
        .unwrap());
    for app in [&a, &b] {
        let (s, _) = app
            .call("GET", "/v1/datasets", None, &[("authorization", &bearer)])
            .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    // Expired.
    let old = ledgers
        .create_token(
            &privacy_ledger::ledger::principal::Actor::operator(),
            "short",
            "auditor",
            Some(chrono::Duration::seconds(-1)),
        )
        .await
        .unwrap();
    let (s, _) = a
        .call(
            "GET",
            "/v1/datasets",
            None,
            &[("authorization", &format!("Bearer {}", old.secret))],
        )
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

/// The real binary on a fresh machine: the first start prints an admin token once, which works;
/// a restart prints none; the operators' command makes, lists and revokes tokens.
#[test]
fn the_first_start_prints_an_admin_token_once_and_the_cli_manages_tokens() {
    let dir = temp_dir("first");
    let db = format!("sqlite://{}", dir.join("l.db").display());
    let server = Server::start(&db);
    let first = server
        .first_token
        .clone()
        .expect("the first start prints a token");
    assert!(first.starts_with("pl_"));
    let (s, _) = http(server.addr, "GET", "/v1/datasets", None, None).unwrap();
    assert_eq!(s, 200);
    server.kill();
    let again = Server::start(&db);
    assert!(
        again.first_token.is_none(),
        "a second start prints no token"
    );
    let made = cli_token(&db);
    assert!(made.starts_with("pl_") && made != first);
    let bin = env!("CARGO_BIN_EXE_privacy-ledger");
    let list = std::process::Command::new(bin)
        .args(["token", "list", "--database-url", &db])
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 3, "{list}");
    assert!(!list.to_string().contains("pl_"), "no secret is listed");
    let id = list[0]["id"].as_str().unwrap();
    let out = std::process::Command::new(bin)
        .args(["token", "revoke", id, "--database-url", &db])
        .output()
        .unwrap();
    assert!(out.status.success());
    let bad = std::process::Command::new(bin)
        .args([
            "token",
            "create",
            "--name",
            "x",
            "--role",
            "root",
            "--database-url",
            &db,
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    again.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The role × endpoint matrix through the real router: admin does everything, analyst spends and
/// reads, auditor only reads; a refused request changes nothing (403 `forbidden`).
#[tokio::test]
async fn roles_admit_exactly_their_actions() {
    let dir = temp_dir("roles");
    let url = format!("sqlite://{}", dir.join("l.db").display());
    let app = TestApp::over_store(open_store(&url).await.unwrap(), Limits::default(), dir).await;
    let ledgers = privacy_ledger::ledger::Ledgers::new(open_store(&url).await.unwrap());
    app.dataset("d", 10.0).await;
    let gdp = json!({"event": {"type": "gdp", "mu": 0.1}});
    // (method, uri, body, action): R read, S spend, A administer, U audit (admin and auditor).
    let calls: Vec<(&str, String, Option<serde_json::Value>, char)> = vec![
        ("GET", "/v1/datasets".into(), None, 'R'),
        ("GET", "/v1/datasets/d".into(), None, 'R'),
        ("GET", "/v1/datasets/d/charges".into(), None, 'R'),
        ("GET", "/v1/datasets/d/report".into(), None, 'R'),
        ("GET", "/v1/datasets/d/tradeoff?points=5".into(), None, 'R'),
        (
            "POST",
            "/v1/accountant/compose".into(),
            Some(json!({"events": [{"type": "gdp", "mu": 1}]})),
            'R',
        ),
        ("GET", "/metrics".into(), None, 'R'),
        (
            "POST",
            "/v1/datasets/d/charges/preview".into(),
            Some(gdp.clone()),
            'S',
        ),
        (
            "POST",
            "/v1/datasets/d/charges".into(),
            Some(gdp.clone()),
            'S',
        ),
        (
            "POST",
            "/v1/datasets/d/runs".into(),
            Some(json!({"event": {"type": "gdp", "mu": 0.1}, "steps": 2})),
            'S',
        ),
        (
            "POST",
            "/v1/datasets/d/calibrate".into(),
            Some(
                json!({"event": {"type": "gaussian", "noise_multiplier": 1.0}, "free_parameter": "noise_multiplier"}),
            ),
            'S',
        ),
        (
            "PATCH",
            "/v1/datasets/d".into(),
            Some(json!({"budget": {"mu": 10.0}})),
            'A',
        ),
        (
            "POST",
            "/v1/datasets".into(),
            Some(json!({"id": "new", "budget": {"mu": 1.0}})),
            'A',
        ),
        ("GET", "/v1/datasets/d/quotas".into(), None, 'R'),
        ("GET", "/v1/datasets/d/grants".into(), None, 'U'),
        ("GET", "/v1/audit".into(), None, 'U'),
        ("GET", "/v1/tokens".into(), None, 'A'),
        (
            "PUT",
            "/v1/datasets/d/quotas/x".into(),
            Some(json!({"mu": 0.1, "delta": 0.0})),
            'A',
        ),
        (
            "PUT",
            "/v1/datasets/d/grants/x".into(),
            Some(json!({"role": "analyst"})),
            'A',
        ),
    ];
    for role in ["admin", "analyst", "auditor"] {
        let t = ledgers
            .create_token(
                &privacy_ledger::ledger::principal::Actor::operator(),
                role,
                role,
                None,
            )
            .await
            .unwrap();
        let bearer = format!("Bearer {}", t.secret);
        for (m, uri, body, action) in &calls {
            let allowed = match role {
                "admin" => true,
                "analyst" => matches!(action, 'R' | 'S'),
                _ => matches!(action, 'R' | 'U'),
            };
            let before = app.get("/v1/datasets/d").await.1["version"].clone();
            let (s, b) = app
                .call(m, uri, body.as_ref(), &[("authorization", &bearer)])
                .await;
            if allowed {
                assert!(s.is_success(), "{role} {m} {uri}: {s} {b}");
            } else {
                assert_eq!(s, StatusCode::FORBIDDEN, "{role} {m} {uri}: {b}");
                assert_eq!(b["error"], "forbidden");
                assert_eq!(
                    app.get("/v1/datasets/d").await.1["version"],
                    before,
                    "nothing written"
                );
            }
        }
        if role == "admin" {
            // The admin made "new": the others' attempt must be refused before it conflicts.
            assert_eq!(app.get("/v1/datasets/new").await.0, StatusCode::OK);
        }
    }
}

/// Hygiene: a client's odd X-Request-Id is replaced, a sane one kept; security headers on every
/// response; no CORS headers (other origins cannot call the service from a browser).
#[tokio::test]
async fn request_ids_are_checked_and_security_headers_sent() {
    use tower::ServiceExt;
    let app = spawn_app().await;
    let send = |id: Option<String>, origin: bool| {
        let mut req = axum::http::Request::get("/v1/datasets")
            .header("authorization", format!("Bearer {}", app.token));
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        if origin {
            req = req.header("origin", "https://evil.example");
        }
        app.router
            .clone()
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
    };
    let res = send(Some("job-42.step_7:a".into()), false).await.unwrap();
    assert_eq!(res.headers()["x-request-id"], "job-42.step_7:a");
    for bad in [
        "a b".to_string(),
        "x".repeat(129),
        "<script>".into(),
        "é".into(),
    ] {
        let res = send(Some(bad.clone()), false).await.unwrap();
        let got = res.headers()["x-request-id"]
            .to_str()
            .unwrap_or("")
            .to_owned();
        assert!(
            got != bad && uuid::Uuid::parse_str(&got).is_ok(),
            "{bad:?} -> {got:?}"
        );
    }
    let res = send(None, true).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let h = res.headers();
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["cache-control"], "no-store");
    assert!(h.contains_key("content-security-policy"));
    assert!(!h.contains_key("access-control-allow-origin"));
}

/// A principal past its rate gets 429 with Retry-After, whichever of its tokens it uses; another
/// principal is not slowed down.
#[tokio::test]
async fn a_principal_past_its_rate_gets_429_and_others_do_not() {
    let app = crate::api::spawn_app_with(Limits {
        rate_per_second: 1.0,
        rate_burst: 5.0,
        ..Limits::default()
    })
    .await;
    // Made before the burst is spent: a second token of the same principal, and another one.
    let same = app.bearer("tests", "admin").await;
    let other = app.bearer("someone else", "auditor").await;
    let mut statuses = Vec::new();
    for _ in 0..7 {
        statuses.push(app.get("/v1/datasets").await.0);
    }
    assert!(
        statuses[..3].iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    let (s, b) = app.get("/v1/datasets").await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{b}");
    assert_eq!(b["error"], "rate_limited");
    assert!(b["details"]["retry_after_seconds"].as_u64().unwrap() >= 1);
    let (s, _) = app
        .call("GET", "/v1/datasets", None, &[("authorization", &same)])
        .await;
    assert_eq!(
        s,
        StatusCode::TOO_MANY_REQUESTS,
        "a new token does not reset the limit"
    );
    let (s, _) = app
        .call("GET", "/v1/datasets", None, &[("authorization", &other)])
        .await;
    assert_eq!(s, StatusCode::OK);
    // Unauthenticated requests are refused before they use anyone's bucket.
    let (s, _) = app
        .call(
            "GET",
            "/v1/datasets",
            None,
            &[("authorization", "Bearer x")],
        )
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

/// CORS is off unless configured; with an origin configured, that origin (only) gets the
/// headers, on preflight and on the request itself.
#[tokio::test]
async fn cors_answers_only_configured_origins() {
    use tower::ServiceExt;
    let app = spawn_app().await;
    let cors = privacy_ledger::http::with_cors(
        app.router.clone(),
        &["https://dash.example.org".to_string()],
    );
    let preflight = |origin: &str| {
        axum::http::Request::builder()
            .method("OPTIONS")
            .uri("/v1/datasets")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let res = cors
        .clone()
        .oneshot(preflight("https://dash.example.org"))
        .await
        .unwrap();
    let h = res.headers();
    assert_eq!(h["access-control-allow-origin"], "https://dash.example.org");
    assert!(h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("authorization"));
    let res = cors
        .clone()
        .oneshot(preflight("https://evil.example"))
        .await
        .unwrap();
    assert!(!res.headers().contains_key("access-control-allow-origin"));
    let get = axum::http::Request::get("/v1/datasets")
        .header("origin", "https://dash.example.org")
        .header("authorization", format!("Bearer {}", app.token))
        .body(axum::body::Body::empty())
        .unwrap();
    let res = cors.oneshot(get).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        res.headers()["access-control-allow-origin"],
        "https://dash.example.org"
    );
    // Unconfigured: no headers (the default router, as `serve` builds it without --cors-origin).
    let res = app
        .router
        .clone()
        .oneshot(preflight("https://dash.example.org"))
        .await
        .unwrap();
    assert!(!res.headers().contains_key("access-control-allow-origin"));
}

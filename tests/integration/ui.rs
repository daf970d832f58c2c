//! The dashboard (`/ui`) through the real router: sign-in, what a token may see, escaping,
//! cross-site forms, figures against the API's, and render time on a ledger of 10⁴ units.

use crate::api::{spawn_app, spawn_app_with, TestApp};
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use privacy_ledger::http::ui::fmt::parse_shown;
use privacy_ledger::http::Limits;
use serde_json::json;
use tower::ServiceExt;

/// A raw answer: status, headers, body text.
async fn raw(
    app: &TestApp,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    form: Option<&str>,
) -> (StatusCode, HeaderMap, String) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = match form {
        Some(f) => req
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(f.to_owned())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, headers, String::from_utf8(bytes.to_vec()).unwrap())
}

/// The session cookie of `secret`, as the sign-in form sets it.
async fn session(app: &TestApp, secret: &str) -> String {
    let (s, h, _) = raw(
        app,
        "POST",
        "/ui/signin",
        &[("sec-fetch-site", "same-origin")],
        Some(&format!("token={secret}")),
    )
    .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let c = h["set-cookie"].to_str().unwrap();
    assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Path=/ui"));
    c.split(';').next().unwrap().to_owned()
}

/// Signs the session `cookie` out from the page (same-origin form): 303; its answer's headers.
async fn sign_out(app: &TestApp, cookie: &str) -> HeaderMap {
    let (s, h, _) = raw(
        app,
        "POST",
        "/ui/signout",
        &[("cookie", cookie), ("sec-fetch-site", "same-origin")],
        Some(""),
    )
    .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    h
}

async fn page(app: &TestApp, cookie: &str, uri: &str) -> (StatusCode, String) {
    let (s, _, b) = raw(app, "GET", uri, &[("cookie", cookie)], None).await;
    (s, b)
}

/// A dataset `ev` partitioned by day, μ = 1 per block.
async fn daily_ev(app: &TestApp) {
    let (s, b) = app
        .post(
            "/v1/datasets",
            json!({"id": "ev", "budget": {"mu": 1.0},
                "partitioning": {"type": "time", "width": "day"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
}

/// The text of the element with `id` (its first text run).
fn text_of(html: &str, id: &str) -> String {
    let at = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}"));
    let start = at + html[at..].find('>').unwrap() + 1;
    html[start..start + html[start..].find('<').unwrap()].to_owned()
}

/// Largest relative gap between a shown figure and the API's: four significant digits.
const SHOWN_REL: f64 = 1e-3;

#[tokio::test]
async fn the_dashboard_signs_in_with_an_api_token_and_out_again() {
    let app = spawn_app().await;
    app.dataset("alpha", 1.0).await;
    let (s, h, _) = raw(&app, "GET", "/ui", &[], None).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(h["location"], "/ui/signin");
    let (s, _, b) = raw(&app, "GET", "/ui/signin", &[], None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.contains("name=\"token\""));
    // A wrong token: the form again, with the reason, and no cookie.
    let (s, h, b) = raw(
        &app,
        "POST",
        "/ui/signin",
        &[("origin", "http://localhost"), ("host", "localhost")],
        Some("token=pl_0000"),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(h.get("set-cookie").is_none());
    assert!(b.contains("unknown, revoked or expired"), "{b}");
    let cookie = session(&app, &app.token).await;
    let (s, b) = page(&app, &cookie, "/ui").await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.contains("href=\"/ui/datasets/alpha\""));
    // The API never reads the cookie.
    let (s, _, _) = raw(&app, "GET", "/v1/datasets", &[("cookie", &cookie)], None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Signing out clears it.
    let h = sign_out(&app, &cookie).await;
    assert!(h["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    // ... and on the server: the same cookie, kept by an attacker, opens nothing any more.
    let (s, h, _) = raw(&app, "GET", "/ui", &[("cookie", &cookie)], None).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(h["location"], "/ui/signin");
    // Every page: its own strict CSP, never cached.
    let (_, h, _) = raw(&app, "GET", "/ui/signin", &[], None).await;
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && !csp.contains("script-src"));
    assert_eq!(h["cache-control"], "no-store");
}

#[tokio::test]
async fn a_revoked_token_signs_the_dashboard_out() {
    let app = spawn_app().await;
    let (s, t) = app
        .post("/v1/tokens", json!({"name": "dora", "role": "auditor"}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let cookie = session(&app, t["bearer_token"].as_str().unwrap()).await;
    assert_eq!(page(&app, &cookie, "/ui").await.0, StatusCode::OK);
    let id = t["id"].as_str().unwrap();
    let (s, _) = app
        .call("DELETE", &format!("/v1/tokens/{id}"), None, &[])
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, h, _) = raw(&app, "GET", "/ui", &[("cookie", &cookie)], None).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(h["location"], "/ui/signin");
}

/// Session lifetime in seconds (12 h), as the cookie's `Max-Age` says it.
const SESSION_SECONDS: i64 = 12 * 3600;

fn max_age(set_cookie: &str) -> i64 {
    let v = set_cookie.split("Max-Age=").nth(1).unwrap();
    v.split(';').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_cookie_is_a_server_side_session_not_the_token() {
    let app = spawn_app().await;
    let (s, h, _) = raw(
        &app,
        "POST",
        "/ui/signin",
        &[("sec-fetch-site", "same-origin")],
        Some(&format!("token={}", app.token)),
    )
    .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let set = h["set-cookie"].to_str().unwrap().to_owned();
    assert_eq!(max_age(&set), SESSION_SECONDS);
    let cookie = set.split(';').next().unwrap().to_owned();
    let id = cookie.trim_start_matches("pl_session=");
    // A random session id, not the token: it is no API credential.
    assert!(id.starts_with("ps_") && id.len() == 67, "{id}");
    assert!(!cookie.contains(&app.token));
    let (s, _) = app
        .call(
            "GET",
            "/v1/datasets",
            None,
            &[("authorization", &format!("Bearer {id}"))],
        )
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // A made-up id of the right shape opens nothing.
    let forged = format!("pl_session=ps_{}", "a".repeat(64));
    let (s, h, _) = raw(&app, "GET", "/ui", &[("cookie", &forged)], None).await;
    assert_eq!(
        (s, h["location"].to_str().unwrap()),
        (StatusCode::SEE_OTHER, "/ui/signin")
    );
    // Sign-in and sign-out are audited, naming the session by its hash, never by its id.
    sign_out(&app, &cookie).await;
    let (s, page) = app.get("/v1/audit?action=session.").await;
    assert_eq!(s, StatusCode::OK);
    let actions: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["session.opened", "session.closed"]);
    assert!(
        !page.to_string().contains(&id[3..]),
        "the audit log holds the session id"
    );
}

#[tokio::test]
async fn a_token_keeps_a_bounded_number_of_sessions() {
    let app = spawn_app().await;
    let (s, t) = app
        .post("/v1/tokens", json!({"name": "erin", "role": "auditor"}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{t}");
    let secret = t["bearer_token"].as_str().unwrap().to_owned();
    // At most 32 sessions per token: the oldest goes when a 33rd is opened.
    let first = session(&app, &secret).await;
    for _ in 0..31 {
        session(&app, &secret).await;
    }
    assert_eq!(page(&app, &first, "/ui").await.0, StatusCode::OK);
    let last = session(&app, &secret).await;
    assert_eq!(page(&app, &first, "/ui").await.0, StatusCode::SEE_OTHER);
    assert_eq!(page(&app, &last, "/ui").await.0, StatusCode::OK);
}

#[tokio::test]
async fn cross_site_forms_are_refused() {
    let app = spawn_app().await;
    app.dataset("alpha", 1.0).await;
    let cookie = session(&app, &app.token).await;
    let form = format!("token={}", app.token);
    for h in [
        vec![("sec-fetch-site", "cross-site")],
        vec![
            ("origin", "https://evil.example"),
            ("host", "ledger.example"),
        ],
    ] {
        let (s, hd, _) = raw(&app, "POST", "/ui/signin", &h, Some(&form)).await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        assert!(hd.get("set-cookie").is_none());
        let mut with_cookie = h.clone();
        with_cookie.push(("cookie", &cookie));
        let (s, _, _) = raw(
            &app,
            "POST",
            "/ui/datasets/alpha/preview",
            &with_cookie,
            Some("event=%7B%22type%22%3A%22gdp%22%2C%22mu%22%3A0.1%7D"),
        )
        .await;
        assert_eq!(s, StatusCode::FORBIDDEN);
    }
}

#[tokio::test]
async fn a_token_sees_only_what_it_may_read_and_text_is_escaped() {
    let app = spawn_app().await;
    app.dataset("alpha", 1.0).await;
    app.dataset("beta", 1.0).await;
    let label = "<script>alert(1)</script>";
    let (s, _) = app
        .post(
            "/v1/datasets/alpha/charges",
            json!({"event": {"type": "gdp", "mu": 0.3}, "label": label}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let carol = app.bearer("carol", "none").await;
    let (s, _) = app
        .call(
            "PUT",
            "/v1/datasets/alpha/grants/carol",
            Some(&json!({"role": "analyst"})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let cookie = session(&app, carol.trim_start_matches("Bearer ")).await;
    let (s, b) = page(&app, &cookie, "/ui").await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.contains("/ui/datasets/alpha") && !b.contains("/ui/datasets/beta"));
    // As in the API, a dataset one may not read does not exist for one.
    let (s, b) = page(&app, &cookie, "/ui/datasets/beta").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{b}");
    assert!(b.contains("not_found"));
    let (s, b) = page(&app, &cookie, "/ui/datasets/alpha").await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!b.contains("<script"));
    // The whole audit log takes a global role: the page says to name a dataset (no records); a
    // dataset carol does not audit is refused.
    let (s, b) = page(&app, &cookie, "/ui/audit").await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.contains("id=\"audit-needs-dataset\"") && !b.contains("audit-table"));
    let (s, _) = page(&app, &cookie, "/ui/audit?dataset_id=alpha").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // Unknown datasets and pages, bad ids and control characters: pages, not 500s.
    let admin = session(&app, &app.token).await;
    for (uri, status) in [
        ("/ui/datasets/nope", StatusCode::NOT_FOUND),
        ("/ui/datasets/a%00b", StatusCode::UNPROCESSABLE_ENTITY),
        ("/ui/nothing/here", StatusCode::NOT_FOUND),
        (
            "/ui/audit?principal=a%00b",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("/ui/datasets/alpha?page=zz&q=%00", StatusCode::OK),
    ] {
        let (s, b) = page(&app, &admin, uri).await;
        assert_eq!(s, status, "{uri}: {b}");
        assert!(b.starts_with("<!DOCTYPE html>"), "{uri}");
    }
    let (s, b) = page(&app, &admin, "/ui/audit?dataset_id=alpha").await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.contains("unit.admitted"), "{b}");
    // Days, both included (UTC): today's records, none in 2000, and a day that is not one.
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let (_, b) = page(&app, &admin, &format!("/ui/audit?from={today}&to={today}")).await;
    assert!(b.contains("unit.admitted"));
    let (_, b) = page(&app, &admin, "/ui/audit?from=2000-01-01&to=2000-01-02").await;
    assert!(b.contains("No records match."));
    let (s, _) = page(&app, &admin, "/ui/audit?from=2000-13-01").await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
}

/// The audit page filters on the server (issue 34, row 8): a match behind more than a page of
/// other records is on the first page; a record in the first second of a day is that day's.
#[tokio::test]
async fn audit_filters_are_server_side_and_days_start_at_midnight() {
    let dir = crate::api::temp_dir("ui-audit");
    let url = format!("sqlite://{}", dir.join("l.db").display());
    let app = TestApp::over_store(
        privacy_ledger::app::open_store(&url).await.unwrap(),
        Limits::default(),
        dir,
    )
    .await;
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    let insert = |seq: i64, at: &'static str, action: &'static str| {
        let raw = raw.clone();
        async move {
            sqlx::query(
                "INSERT INTO audit (chain, seq, at, principal, action, prev_hash, hash) \
                 VALUES ('noise', ?, ?, 'p', ?, '', '')",
            )
            .bind(seq)
            .bind(at)
            .bind(action)
            .execute(&raw)
            .await
            .unwrap();
        }
    };
    for i in 1..=250 {
        insert(i, "2026-11-27T12:00:00.000Z", "unit.admitted").await;
    }
    insert(251, "2026-11-28T00:00:00.500Z", "test.midnight").await;
    let admin = session(&app, &app.token).await;
    let (s, b) = page(&app, &admin, "/ui/audit?action=test.").await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        b.contains("test.midnight") && !b.contains("No records match."),
        "{b}"
    );
    let (_, b) = page(&app, &admin, "/ui/audit?from=2026-11-28&to=2026-11-28").await;
    assert!(b.contains("test.midnight") && !b.contains("unit.admitted"));
    let (_, b) = page(&app, &admin, "/ui/audit?from=2026-11-27&to=2026-11-27").await;
    assert!(!b.contains("test.midnight") && b.contains("unit.admitted"));
}

#[tokio::test]
async fn shown_figures_agree_with_the_api_to_the_digits_shown() {
    let app = spawn_app().await;
    app.dataset("alpha", 2.0).await;
    for (i, sigma) in [3.0, 4.5, 7.0].iter().enumerate() {
        let (s, b) = app
            .post(
                "/v1/datasets/alpha/charges",
                json!({"event": {"type": "gaussian", "noise_multiplier": sigma}, "label": format!("q{i}")}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
    }
    let (_, d) = app.get("/v1/datasets/alpha").await;
    let (_, r) = app.get("/v1/datasets/alpha/report").await;
    let cookie = session(&app, &app.token).await;
    let (s, html) = page(&app, &cookie, "/ui/datasets/alpha").await;
    assert_eq!(s, StatusCode::OK);
    // Loss figures are shown rounded up, what remains rounded down.
    for (id, api, up) in [
        ("mu-spent", d["mu_spent"].as_f64().unwrap(), true),
        ("mu-remaining", d["remaining_mu"].as_f64().unwrap(), false),
        ("advantage", r["advantage"].as_f64().unwrap(), true),
        ("report-mu", r["mu"]["upper"].as_f64().unwrap(), true),
    ] {
        let shown = parse_shown(&text_of(&html, id)).unwrap();
        assert!(
            (shown - api).abs() <= api * SHOWN_REL,
            "{id}: {shown} vs {api}"
        );
        assert!(
            if up { shown >= api } else { shown <= api },
            "{id}: {shown} vs {api}"
        );
    }
    assert_eq!(text_of(&html, "units"), "3");
    // "About N more like the last one": the last unit is σ = 7, μ = 1/7; the filter holds
    // μ_B² − Σμᵢ² = 4 − (1/9 + 1/4.5² + 1/49) of room, so N = ⌊(4 − Σ)·49⌋.
    let sum = 1.0 / 9.0 + 1.0 / 20.25 + 1.0 / 49.0;
    let n = ((4.0 - sum) * 49.0f64).floor() as u64;
    assert!(
        html.contains(&format!("about <strong>{n}</strong> more units")),
        "{n}"
    );
    // The preview answers as the API's preview does.
    let (s, _, b) = raw(
        &app,
        "POST",
        "/ui/datasets/alpha/preview",
        &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
        Some("form=json&event=%7B%22type%22%3A%22gaussian%22%2C%22noise_multiplier%22%3A2%7D"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.contains("Yes: the gate would admit it now."));
    let (_, p) = app
        .post(
            "/v1/datasets/alpha/charges/preview",
            json!({"event": {"type": "gaussian", "noise_multiplier": 2}}),
        )
        .await;
    let shown = parse_shown(&text_of(&b, "mu-after")).unwrap();
    let api = p["mu_after"].as_f64().unwrap();
    assert!(shown >= api && shown - api <= api * SHOWN_REL);
    // Too much, and not an event: the reason, on the form's page.
    let (s, _, b) = raw(
        &app,
        "POST",
        "/ui/datasets/alpha/preview",
        &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
        Some("form=json&event=%7B%22type%22%3A%22gaussian%22%2C%22noise_multiplier%22%3A0.3%7D"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.contains("No: the gate would refuse it."), "{b}");
    let (s, _, b) = raw(
        &app,
        "POST",
        "/ui/datasets/alpha/preview",
        &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
        Some("form=json&event=%7B%22type%22%3A%22gaussian%22%7D"),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(b.contains("noise_multiplier"), "{b}");
    // The form by its fields: a DP-SGD run, and what calibration says would fit beside it.
    let post = |body: &'static str| {
        let cookie = cookie.clone();
        let app = &app;
        async move {
            raw(
                app,
                "POST",
                "/ui/datasets/alpha/preview",
                &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
                Some(body),
            )
            .await
        }
    };
    let (s, _, b) = post(
        "form=fields&mechanism=gaussian&noise_multiplier=0.8&sampling=poisson&sampling_rate=0.01\
         &population_size=&sample_size=&steps=1000",
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let run = json!({"type": "self_composed", "count": 1000, "event": {"type": "poisson_sampled",
        "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 0.8}}});
    assert!(
        b.contains(&maud::html! { (run.to_string()) }.into_string()),
        "{b}"
    );
    let (_, p) = app
        .post(
            "/v1/datasets/alpha/charges/preview",
            json!({ "event": run }),
        )
        .await;
    let verdict = if p["admitted"] == true { "Yes" } else { "No" };
    assert!(text_of(&b, "verdict").starts_with(verdict), "{b}");
    for (free, id) in [("noise_multiplier", "fits-sigma"), ("count", "fits-steps")] {
        let (s, c) = app
            .post(
                "/v1/datasets/alpha/calibrate",
                json!({"event": run, "free_parameter": free}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{c}");
        let shown = text_of(&b, id);
        let value = c["value"].as_f64().unwrap();
        if free == "count" {
            assert_eq!(shown, format!("{}", value as u64), "{b}");
        } else {
            // Shown rounded up (a smaller σ would not fit).
            let shown = parse_shown(&shown).unwrap();
            assert!(
                shown >= value && shown - value <= value * SHOWN_REL,
                "{shown} vs {c}"
            );
        }
    }
    // A field that is not a number is named.
    let (s, _, b) =
        post("form=fields&mechanism=gaussian&noise_multiplier=abc&sampling=none&steps=1").await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(b.contains("noise_multiplier: must be a number"), "{b}");
    // Nothing was charged by the previews.
    let (_, after) = app.get("/v1/datasets/alpha").await;
    assert_eq!(after["units"], 3);
}

/// The bound on server-side render time for a ledger of 10⁴ units.
const RENDER_LIMIT_MS: u128 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_a_ledger_of_ten_thousand_units_render_in_under_200_ms() {
    let unlimited = Limits {
        rate_per_second: 1e9,
        rate_burst: 1e9,
        ..Limits::default()
    };
    let app = std::sync::Arc::new(spawn_app_with(unlimited).await);
    app.dataset("big", 100.0).await;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..16 {
        let app = app.clone();
        tasks.spawn(async move {
            for i in 0..625 {
                let (s, b) = app
                    .post(
                        "/v1/datasets/big/charges",
                        json!({"event": {"type": "gaussian", "noise_multiplier": 50.0},
                               "label": format!("w{w} q{i}"), "reserve": i % 100 == 0}),
                    )
                    .await;
                assert_eq!(s, StatusCode::CREATED, "{b}");
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let cookie = session(&app, &app.token).await;
    for uri in [
        "/ui",
        "/ui/datasets/big",
        "/ui/datasets/big?alpha=log&q=w3&page=2",
        "/ui/audit?dataset_id=big",
    ] {
        let mut times = vec![];
        for _ in 0..5 {
            let t = std::time::Instant::now();
            let (s, b) = page(&app, &cookie, uri).await;
            times.push(t.elapsed().as_millis());
            assert_eq!(s, StatusCode::OK, "{uri}");
            assert!(b.len() < 2_000_000, "{uri}: {} bytes", b.len());
        }
        times.sort();
        eprintln!("{uri}: median {} ms over 5", times[2]);
        assert!(times[2] < RENDER_LIMIT_MS, "{uri}: {times:?} ms");
    }
    let (_, b) = page(&app, &cookie, "/ui/datasets/big").await;
    assert!(b.contains(">10000<"), "the units figure");
    assert!(b.contains("upper envelope of 10000 units"));
}

/// A partitioned dataset's page lists its charged blocks with what each has left, linking to
/// each block's own page.
#[tokio::test]
async fn a_partitioned_dataset_page_lists_its_blocks() {
    let app = spawn_app().await;
    daily_ev(&app).await;
    let (s, b) = app
        .post(
            "/v1/charges",
            json!({"datasets": [{"id": "ev", "blocks": ["2026-11-02", "2026-11-03"]}],
                "event": {"type": "gdp", "mu": 0.6}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let cookie = session(&app, &app.token).await;
    let (s, html) = page(&app, &cookie, "/ui/datasets/ev").await;
    assert_eq!(s, StatusCode::OK);
    assert!(html.contains("id=\"blocks\""), "{html}");
    assert!(html.contains("href=\"/ui/datasets/ev@2026-11-03\""));
    // √(1 − 0.36) = 0.8 remaining in each block, shown rounded down (the sums are rounded up:
    // μ spent 0.6 + 1 ulp shows as 0.6001).
    assert!(html.contains("<td>0.7999</td>"), "{html}");
    let (s, html) = page(&app, &cookie, "/ui/datasets/ev@2026-11-03").await;
    assert_eq!(s, StatusCode::OK);
    assert!(html.contains("ev@2026-11-03"));
}

/// Issue 31, row 7: the dataset page states the guarantee at the budget's high-water mark and the
/// condition under which it holds, not "valid however the charges were chosen" next to a lowered
/// budget.
#[tokio::test]
async fn the_dataset_page_states_the_high_water_mark_and_when_it_holds() {
    let app = spawn_app().await;
    app.dataset("alpha", 2.0).await;
    let (s, _) = app
        .post(
            "/v1/datasets/alpha/charges",
            json!({"event": {"type": "gdp", "mu": 0.5}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    // Times are kept to the millisecond: the change comes strictly after the first unit.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (s, _) = app
        .call(
            "PATCH",
            "/v1/datasets/alpha",
            Some(&json!({"budget": {"mu": 1.2}})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    // A unit after the change, so the change is inside the chart's span of units.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (s, _) = app
        .post(
            "/v1/datasets/alpha/charges",
            json!({"event": {"type": "gdp", "mu": 0.1}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let cookie = session(&app, &app.token).await;
    let (s, b) = page(&app, &cookie, "/ui/datasets/alpha").await;
    assert_eq!(s, StatusCode::OK);
    let stated = text_of(&b, "statement");
    assert!(
        stated.contains("μ = 2") && stated.contains("unless the budget is raised above mu = 2"),
        "{stated}"
    );
    // The legend in words, with the figures; no pseudo-LaTeX.
    assert!(
        b.contains("The guarantee of the highest budget so far (μ = 2.0")
            && b.contains("): holds unless the budget is raised above it"),
        "{b}"
    );
    assert!(b.contains("Spent so far (μ = 0.51"), "{b}");
    assert!(!b.contains("valid however the charges were chosen") && !b.contains("G_μmax"));
    // The spending chart runs over time and draws the budget as 2, then a step down to 1.2.
    assert!(b.contains("after 1 budget changes"), "{b}");
    assert!(b.contains("time (UTC), "), "{b}");
    let budget_path = b
        .split("class=\"budget-line\" d=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .unwrap_or_default();
    assert_eq!(budget_path.matches(" V").count(), 1, "{budget_path}");
    // μ = 2: the trade-off chart opens on the log α axis; linear is one link away.
    assert!(
        b.contains("<strong>log</strong>") && b.contains("alpha=linear"),
        "{b}"
    );
    let (_, lin) = page(&app, &cookie, "/ui/datasets/alpha?alpha=linear").await;
    assert!(lin.contains("<strong>linear</strong>") && lin.contains("on a linear α axis"));
}

/// Issue 37: a budget spent exactly reads 100 % and exhausted, never 100.1 % or a μ spent above
/// the budget; the page says what is left in μ and ε, the forecast and the runs in progress; a
/// partitioned dataset shows its calendar (an exhausted block marked); `/` leads to the dashboard.
#[tokio::test]
async fn an_exactly_spent_budget_reads_100_percent_and_the_page_says_what_is_left() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    for mu in [0.6, 0.8] {
        let (s, b) = app
            .post(
                "/v1/datasets/d/charges",
                json!({"event": {"type": "gdp", "mu": mu}}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
    }
    let cookie = session(&app, &app.token).await;
    let (_, cards) = page(&app, &cookie, "/ui").await;
    assert!(cards.contains(">100%<"), "{cards}");
    assert!(!cards.contains("100.1"), "{cards}");
    assert!(cards.contains("Exhausted"), "{cards}");
    let (_, html) = page(&app, &cookie, "/ui/datasets/d").await;
    assert_eq!(text_of(&html, "mu-spent"), "1");
    assert_eq!(text_of(&html, "used-percent"), "100%");
    assert_eq!(text_of(&html, "exhausted"), "exhausted");
    assert!(
        text_of(&html, "forecast").contains("already used up"),
        "{html}"
    );
    assert!(!html.contains("100.1"), "{html}");

    // What is left in μ and in ε at the default δ = 1e-5.
    app.dataset("e", 2.0).await;
    let (s, _) = app
        .post(
            "/v1/datasets/e/charges",
            json!({"event": {"type": "gdp", "mu": 1.0}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (_, h) = app.get("/v1/datasets/e/headline").await;
    let (_, html) = page(&app, &cookie, "/ui/datasets/e").await;
    assert_eq!(text_of(&html, "used-percent"), "25%");
    let left = text_of(&html, "left");
    assert!(left.starts_with("μ 1.732"), "{left}");
    let eps_left = h["epsilon"]["remaining"].as_f64().unwrap();
    assert!(
        left.contains(&format!(
            "ε ≤ {}",
            privacy_ledger::http::ui::fmt::num_up(eps_left)
        )),
        "{left} vs {h}"
    );
    assert!(text_of(&html, "budget-epsilon").starts_with("μ 2 — the whole interaction is (ε ≤ "));
    assert!(html.contains("runs out around"), "{html}");

    // A partitioned dataset: the calendar, an exhausted block marked.
    daily_ev(&app).await;
    for (day, mu) in [("2026-11-20", 1.0), ("2026-11-21", 0.5)] {
        let (s, b) = app
            .post(
                "/v1/charges",
                json!({"datasets": [{"id": "ev", "blocks": [day]}], "event": {"type": "gdp", "mu": mu}}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
    }
    let (_, html) = page(&app, &cookie, "/ui/datasets/ev").await;
    assert!(html.contains("id=\"calendar\""), "{html}");
    assert!(
        html.contains("title=\"2026-11-20: 100% used, exhausted\""),
        "{html}"
    );
    assert!(html.contains("title=\"2026-11-21: 25% used\""), "{html}");
    assert!(html.contains("class=\"cell exhausted u9\""), "{html}");
    assert!(html.contains("tightest block 2026-11-20"), "{html}");
    // Its card is not "0 %, untouched": the fullest block and the exhausted count.
    let (_, cards) = page(&app, &cookie, "/ui").await;
    assert!(
        cards.contains("the fullest, 2026-11-20, <strong>100%</strong> used"),
        "{cards}"
    );
    assert!(cards.contains("1 exhausted"), "{cards}");

    let (s, h, _) = raw(&app, "GET", "/", &[], None).await;
    assert_eq!(
        (s, h["location"].to_str().unwrap()),
        (StatusCode::SEE_OTHER, "/ui")
    );
}

/// Issue 37: the audit page is newest first, with what each change was before and after (a
/// budget raise is visible) and a refusal's reason; older records are a link away.
#[tokio::test]
async fn the_audit_page_is_newest_first_with_before_and_after() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let (s, _) = app
        .call(
            "PATCH",
            "/v1/datasets/d",
            Some(&json!({"budget": {"mu": 2.0}})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": {"type": "gdp", "mu": 3.0}}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let cookie = session(&app, &app.token).await;
    let (s, html) = page(&app, &cookie, "/ui/audit?dataset_id=d").await;
    assert_eq!(s, StatusCode::OK);
    let rejected = html.find("unit.rejected").expect("the refusal");
    let raised = html.find("budget.changed").expect("the raise");
    let created = html.find("dataset.created").expect("the creation");
    assert!(rejected < raised && raised < created, "newest first");
    // The raise: the budget before, and after it (with the ledger's state the record states).
    assert!(
        html.contains("delta 1e-10; mu 1 → delta 1e-10; budget μ 2; μ spent 0; mu 2"),
        "{html}"
    );
    assert!(
        html.contains("does not fit"),
        "the refusal's reason: {html}"
    );
}

/// Issue 37: an analyst following the navigation's "Audit log" link gets the page, saying to name
/// a dataset they audit — not a 403 page.
#[tokio::test]
async fn an_analyst_following_the_audit_link_is_told_to_name_a_dataset() {
    let app = spawn_app().await;
    let bearer = app.bearer("ana", "analyst").await;
    let secret = bearer.trim_start_matches("Bearer ").to_owned();
    let cookie = session(&app, &secret).await;
    let (s, html) = page(&app, &cookie, "/ui/audit").await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(html.contains("id=\"audit-needs-dataset\""), "{html}");
    assert!(html.contains("name a dataset you audit"), "{html}");
}

/// Issue 37: one charge over several blocks writes a record per block; the audit page shows it as
/// one change (the ledgers inside), not one row per block.
#[tokio::test]
async fn a_charge_over_many_blocks_is_one_row_of_the_audit_page() {
    let app = spawn_app().await;
    daily_ev(&app).await;
    let (s, b) = app
        .post(
            "/v1/charges",
            json!({"datasets": [{"id": "ev", "time_range": {"from": "2026-11-01T00:00:00Z", "to": "2026-11-07T00:00:00Z"}}],
                "event": {"type": "gdp", "mu": 0.3}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = app
        .post(
            "/v1/charges",
            json!({"datasets": [{"id": "ev", "blocks": ["2026-11-03"]}],
                "event": {"type": "gdp", "mu": 0.2}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let cookie = session(&app, &app.token).await;
    let (s, html) = page(&app, &cookie, "/ui/audit?action=unit.admitted").await;
    assert_eq!(s, StatusCode::OK);
    let rows = html.matches("<tr").count() - 1; // less the header
    assert_eq!(rows, 2, "{html}");
    assert_eq!(html.matches("<tr class=\"group\"").count(), 1, "{html}");
    assert!(html.contains("6 ledgers"), "{html}");
    assert!(
        html.contains("One change on 6 ledgers: ev@2026-11-01, ev@2026-11-02 … ev@2026-11-06"),
        "{html}"
    );
    // Each block's record is inside, with its own before → after.
    assert_eq!(html.matches("<li><strong>ev@2026-11-").count(), 6, "{html}");
}

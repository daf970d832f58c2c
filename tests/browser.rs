//! The dashboard in a real browser: Debian's headless Chromium, driven through chromedriver, signs
//! in, reads the dataset list, a dataset's page with its curves, the audit log and the preview
//! form, at desktop and phone widths, by keyboard, and in the dark scheme; it asserts on what is
//! rendered and takes a screenshot of each page.
//!
//! Ignored by `cargo test`: `tests/browser.sh` (run by `.ci/run`) installs Chromium and
//! chromedriver where it can and runs it, or says SKIPPED. Screenshots go to a temporary
//! directory, or to `docs/screenshots/` with `UPDATE_SCREENSHOTS=1`.

use fantoccini::{Client, ClientBuilder, Locator};
use privacy_ledger::app::{open_store, state_over};
use privacy_ledger::http::{router, Limits};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The service on a free port with a fresh SQLite ledger; its URL and an admin token.
async fn serve() -> (String, String, PathBuf) {
    let dir = std::env::temp_dir().join(format!("privacy-ledger-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = open_store(&format!("sqlite://{}", dir.join("ledger.db").display()))
        .await
        .unwrap();
    let st = state_over(
        privacy_ledger::ledger::Ledgers::new(store),
        privacy_ledger::accountant::params::GridStep::new(1e-4).unwrap(),
    );
    let token = st
        .ledgers
        .create_token(
            &privacy_ledger::ledger::principal::Actor::operator(),
            "privacy officer",
            "admin",
            None,
        )
        .await
        .unwrap()
        .secret;
    let app = router(st, Limits::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    (url, token, dir)
}

/// A few datasets with charges of several kinds, a reservation, a quota and a second principal.
async fn seed(url: &str, token: &str) {
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: String, body: Value| {
        let http = http.clone();
        let req = http
            .request(method, format!("{url}{path}"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_string());
        async move {
            let res = req.send().await.unwrap();
            let status = res.status();
            let body: Value =
                serde_json::from_str(&res.text().await.unwrap()).unwrap_or(Value::Null);
            assert!(status.is_success(), "{path}: {status} {body}");
            body
        }
    };
    let post = reqwest::Method::POST;
    for (id, mu, delta, desc) in [
        ("cifar10", 2.0, 1e-6, "CIFAR-10 training set"),
        ("census-2030", 3.0, 1e-10, "Census microdata, person table"),
        ("clicks-2026-11", 1.0, 1e-10, ""),
    ] {
        call(
            post.clone(),
            "/v1/datasets".into(),
            json!({"id": id, "budget": {"mu": mu, "delta": delta}, "description": desc}),
        )
        .await;
    }
    call(
        reqwest::Method::PUT,
        "/v1/datasets/cifar10/quotas/ml-team".into(),
        json!({"mu": 1.0, "delta": 5e-7}),
    )
    .await;
    let charges = [
        json!({"event": {"type": "gaussian", "noise_multiplier": 4.0}, "label": "feature means"}),
        json!({"event": {"type": "self_composed", "count": 200,
                "event": {"type": "poisson_sampled", "sampling_rate": 0.01,
                          "event": {"type": "gaussian", "noise_multiplier": 2.0}}},
               "label": "DP-SGD warm-up, 200 steps"}),
        json!({"event": {"type": "laplace", "noise_multiplier": 8.0}, "label": "histogram"}),
        json!({"event": {"type": "gaussian", "noise_multiplier": 6.0}, "label": "eval metrics",
               "reserve": true}),
        json!({"event": {"type": "gaussian", "noise_multiplier": 5.0}, "label": "quantiles"}),
    ];
    for c in charges {
        call(post.clone(), "/v1/datasets/cifar10/charges".into(), c).await;
    }
    for (i, sigma) in [2.0, 2.5, 3.0].iter().enumerate() {
        call(
            post.clone(),
            "/v1/datasets/census-2030/charges".into(),
            json!({"event": {"type": "gaussian", "noise_multiplier": sigma},
                   "label": format!("level {}", i + 1)}),
        )
        .await;
    }
    // A budget given as (ε, δ) = (1, 1e-5), spent exactly by one unit of its whole μ_B: 100 %.
    let survey = call(
        post.clone(),
        "/v1/datasets".into(),
        json!({"id": "survey", "budget": {"epsilon": 1.0, "delta": 1e-5},
               "description": "Household survey (budget given as epsilon 1, delta 1e-5)"}),
    )
    .await;
    let mu_b = survey["budget"]["mu"].as_f64().unwrap();
    call(
        post.clone(),
        "/v1/datasets/survey/charges".into(),
        json!({"event": {"type": "gdp", "mu": mu_b}, "label": "all of it"}),
    )
    .await;
    // Daily blocks: the 20th spent exactly (0.6² + 0.8² = 1), the 21st and 22nd partly.
    call(
        post.clone(),
        "/v1/datasets".into(),
        json!({"id": "events", "budget": {"mu": 1.0},
               "partitioning": {"type": "time", "width": "day", "time_zone": "UTC"}}),
    )
    .await;
    for (blocks, mu) in [
        (vec!["2026-11-20", "2026-11-21"], 0.6),
        (vec!["2026-11-20"], 0.8),
        (vec!["2026-11-22"], 0.3),
    ] {
        call(
            post.clone(),
            "/v1/charges".into(),
            json!({"datasets": [{"id": "events", "blocks": blocks}],
                   "event": {"type": "gdp", "mu": mu}}),
        )
        .await;
    }
}

/// chromedriver on a free port.
fn chromedriver() -> (Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (tests/browser.sh installs it)");
    (child, format!("http://127.0.0.1:{port}"))
}

async fn browser(driver: &str, dark: bool) -> Client {
    let mut args = vec![
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--hide-scrollbars",
    ];
    if dark {
        args.push("--force-dark-mode");
    }
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": args, "binary": "/usr/bin/chromium"}),
    );
    for _ in 0..50 {
        let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps.clone())
            .connect(driver)
            .await;
        if let Ok(c) = c {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("cannot start a Chromium session through {driver}");
}

fn shots_dir() -> PathBuf {
    if std::env::var_os("UPDATE_SCREENSHOTS").is_some() {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots")
    } else {
        std::env::temp_dir().join("privacy-ledger-screenshots")
    }
}

async fn shot(c: &Client, name: &str) {
    let dir = shots_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let png = c.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Resizes the window to the page's height (at least `min`), so a screenshot shows all of it.
async fn fit(c: &Client, width: u32, min: u32) {
    c.set_window_size(width, min).await.unwrap();
    let h = c
        .execute("return document.documentElement.scrollHeight", vec![])
        .await
        .unwrap()
        .as_u64()
        .unwrap_or(min as u64) as u32;
    c.set_window_size(width, h.clamp(min, 4000) + 140)
        .await
        .unwrap();
}

/// Waits (up to 10 s) until the page's query contains `part`: after a filter form's submit, the
/// page before it still matches the selectors the test then waits for (a CI run on 2026-11-27
/// counted the unfiltered table's 5 rows).
async fn until_query(c: &Client, part: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !c
        .current_url()
        .await
        .unwrap()
        .query()
        .is_some_and(|q| q.contains(part))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no page with {part} in its query"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text of the first element matching `css`. The dashboard loads and re-renders parts of the
/// page as data arrives, so the element may not be there yet (a form submission's next page, seen
/// in CI as "no such element") or may be replaced between finding it and reading it ("stale element
/// reference", also seen in CI): both are retried for up to 5 s.
async fn text(c: &Client, css: &str) -> String {
    let mut last = String::new();
    for _ in 0..50 {
        match c.find(Locator::Css(css)).await {
            Ok(el) => match el.text().await {
                Ok(t) => return t,
                Err(e) => last = format!("{e:?}"),
            },
            Err(e) => last = format!("{e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("reading {css}: {last}")
}

/// Fills the preview form's fields for one Gaussian release of noise multiplier `sigma` (no
/// sampling, one step), sends it and returns the verdict's text.
async fn preview(c: &Client, sigma: &str) -> String {
    let form = c.form(Locator::Id("preview-fields")).await.unwrap();
    form.set_by_name("mechanism", "gaussian").await.unwrap();
    form.set_by_name("noise_multiplier", sigma).await.unwrap();
    form.set_by_name("sampling", "none").await.unwrap();
    form.set_by_name("steps", "1").await.unwrap();
    // The page before the submission may already show a verdict: wait until that page is gone
    // (its elements go stale) before reading the new one, or the read races the navigation.
    let before = c.find(Locator::Id("preview-fields")).await.unwrap();
    form.submit().await.unwrap();
    for _ in 0..600 {
        if before.tag_name().await.is_err() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for _ in 0..600 {
        let verdict = c.wait().for_element(Locator::Id("verdict")).await.unwrap();
        if let Ok(t) = verdict.text().await {
            return t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no verdict after 30 s");
}

async fn no_horizontal_scroll(c: &Client) -> bool {
    c.execute(
        "return document.documentElement.scrollWidth <= window.innerWidth + 1",
        vec![],
    )
    .await
    .unwrap()
    .as_bool()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "drives Chromium through chromedriver: run by tests/browser.sh (in .ci/run), which installs them or says SKIPPED"]
async fn the_dashboard_in_a_real_browser() {
    let (url, token, dir) = serve().await;
    seed(&url, &token).await;
    let (mut driver, driver_url) = chromedriver();
    let c = browser(&driver_url, false).await;

    // Sign-in: any page leads to the form; the token signs in.
    c.goto(&format!("{url}/ui")).await.unwrap();
    assert!(c
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/ui/signin"));
    fit(&c, 1280, 700).await;
    shot(&c, "signin").await;
    let form = c
        .form(Locator::Css("form[action='/ui/signin']"))
        .await
        .unwrap();
    form.set_by_name("token", "pl_wrong").await.unwrap();
    form.submit().await.unwrap();
    assert!(text(&c, ".error")
        .await
        .contains("unknown, revoked or expired"));
    let form = c
        .form(Locator::Css("form[action='/ui/signin']"))
        .await
        .unwrap();
    form.set_by_name("token", &token).await.unwrap();
    form.submit().await.unwrap();

    // The datasets: a card each, with its gauge and "about N more units like the last one".
    c.wait()
        .for_element(Locator::Css("ul.cards"))
        .await
        .unwrap();
    let cards = c.find_all(Locator::Css("li.card")).await.unwrap();
    assert_eq!(cards.len(), 5);
    let first = text(&c, "li.card").await;
    assert!(
        first.contains("census-2030") && first.contains("μ spent"),
        "{first}"
    );
    let body = text(&c, "main").await;
    assert!(
        body.contains("more units like the last committed one"),
        "{body}"
    );
    assert!(
        body.contains("no committed unit yet"),
        "the empty dataset says so"
    );
    // The budget spent exactly: 100 %, exhausted, never 100.1 %.
    assert!(body.contains("Exhausted"), "{body}");
    // The partitioned dataset's card shows its blocks, not an untouched 0 %.
    assert!(
        body.contains("the fullest, 2026-11-20, 100% used; 1 exhausted"),
        "{body}"
    );
    assert!(!body.contains("100.1"), "{body}");
    assert_eq!(c.find_all(Locator::Css("svg.ring")).await.unwrap().len(), 5);
    fit(&c, 1280, 700).await;
    shot(&c, "datasets").await;

    // Keyboard: the first Tab reaches the skip link, Enter on a focused dataset link opens it.
    c.set_window_size(1280, 900).await.unwrap();
    c.goto(&format!("{url}/ui")).await.unwrap();
    let body = c.find(Locator::Css("body")).await.unwrap();
    body.send_keys("\u{E004}").await.unwrap();
    let focused = c.active_element().await.unwrap();
    assert_eq!(focused.text().await.unwrap(), "Skip to content");
    let link = c
        .find(Locator::Css("a[href='/ui/datasets/cifar10']"))
        .await
        .unwrap();
    c.execute(
        "arguments[0].focus()",
        vec![serde_json::to_value(&link).unwrap()],
    )
    .await
    .unwrap();
    c.active_element()
        .await
        .unwrap()
        .send_keys("\u{E007}")
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("#h-curve"))
        .await
        .unwrap();
    assert!(c
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/ui/datasets/cifar10"));

    // The dataset page: figures, the spending chart, the curves, the tables.
    let mu_spent = text(&c, "#mu-spent").await;
    let api: Value = serde_json::from_str(
        &reqwest::Client::new()
            .get(format!("{url}/v1/datasets/cifar10"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    let shown: f64 = mu_spent.parse().unwrap();
    let exact = api["mu_spent"].as_f64().unwrap();
    assert!(
        shown >= exact && shown - exact <= 1e-3 * exact,
        "{shown} vs {exact}"
    );
    assert!(c.find(Locator::Css("svg.chart path.spent")).await.is_ok());
    assert_eq!(
        c.find_all(Locator::Css("circle.reserved"))
            .await
            .unwrap()
            .len(),
        1
    );
    for curve in ["guarantee", "spent", "exact"] {
        let d = c
            .find(Locator::Css(&format!("path.curve.{curve}")))
            .await
            .unwrap()
            .attr("d")
            .await
            .unwrap()
            .unwrap();
        assert!(
            d.starts_with('M') && d.matches('L').count() > 20,
            "{curve}: {d}"
        );
    }
    let tier2 = c.find_all(Locator::Css("#tier2 tbody tr")).await.unwrap();
    assert!(tier2.len() >= 5);
    let units = c
        .find_all(Locator::Css("#units-table tbody tr"))
        .await
        .unwrap();
    assert_eq!(units.len(), 5);
    assert!(text(&c, "#units-table").await.contains("reserved"));
    assert!(text(&c, "#quotas").await.contains("ml-team"));
    // At a glance: the used share stated plainly, what is left in μ and in ε, the forecast.
    assert!(text(&c, "#used-percent").await.ends_with('%'));
    assert!(text(&c, "#left").await.contains("ε ≤"));
    assert!(text(&c, "#budget-epsilon")
        .await
        .contains("the whole interaction is (ε ≤"));
    assert!(text(&c, "#forecast").await.contains("runs out around"));
    fit(&c, 1280, 900).await;
    shot(&c, "dataset").await;

    // The (ε, δ) budget spent exactly, and the calendar of a partitioned dataset.
    c.goto(&format!("{url}/ui/datasets/survey")).await.unwrap();
    assert_eq!(text(&c, "#used-percent").await, "100%");
    assert_eq!(text(&c, "#exhausted").await, "exhausted");
    assert!(text(&c, "#budget-epsilon")
        .await
        .contains("given as ε = 1, δ = 1e-5"));
    assert!(!text(&c, "main").await.contains("100.1"));
    c.goto(&format!("{url}/ui/datasets/events")).await.unwrap();
    let cells = c.find_all(Locator::Css("#calendar li.cell")).await.unwrap();
    assert_eq!(cells.len(), 3);
    assert_eq!(
        c.find_all(Locator::Css("#calendar li.cell.exhausted"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(text(&c, "#h-glance")
        .await
        .contains("tightest block 2026-11-20"));
    fit(&c, 1280, 700).await;
    shot(&c, "blocks").await;
    c.goto(&format!("{url}/ui/datasets/cifar10")).await.unwrap();
    c.wait()
        .for_element(Locator::Css("#h-curve"))
        .await
        .unwrap();

    // A budget of μ = 2 opens the trade-off chart on the log α axis (the linear one is nearly
    // blank there); linear is a link away, and back. Then a filter on the units table.
    c.find(Locator::Css("svg[aria-label*='logarithmic']"))
        .await
        .unwrap();
    for (link, axis) in [("linear", "linear"), ("log", "logarithmic")] {
        c.find(Locator::LinkText(link))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        c.wait()
            .for_element(Locator::Css(&format!(
                "svg[aria-label*='on a {axis} α axis']"
            )))
            .await
            .unwrap();
    }
    let form = c.form(Locator::Css("form.filters")).await.unwrap();
    form.set_by_name("q", "DP-SGD").await.unwrap();
    form.submit().await.unwrap();
    until_query(&c, "q=DP-SGD").await;
    c.wait()
        .for_element(Locator::Css("#units-table"))
        .await
        .unwrap();
    let rows = c
        .find_all(Locator::Css("#units-table tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert!(c
        .current_url()
        .await
        .unwrap()
        .query()
        .unwrap()
        .contains("alpha=log"));

    // The preview form: would this run fit?
    c.goto(&format!("{url}/ui/datasets/cifar10")).await.unwrap();
    let verdict = preview(&c, "3").await;
    assert!(verdict.starts_with("Yes"), "{verdict}");
    assert!(text(&c, "#unit").await.contains("μ = 0.3334"));
    // Calibration's suggestions beside the verdict.
    assert!(!text(&c, "#fits-sigma").await.is_empty());
    assert!(!text(&c, "#fits-steps").await.is_empty());
    fit(&c, 1280, 700).await;
    shot(&c, "preview").await;
    let verdict = preview(&c, "0.2").await;
    assert!(verdict.starts_with("No"), "{verdict}");

    // The audit log, filtered by dataset.
    c.goto(&format!("{url}/ui/audit")).await.unwrap();
    let form = c.form(Locator::Css("form.filters")).await.unwrap();
    form.set_by_name("dataset_id", "census-2030").await.unwrap();
    form.submit().await.unwrap();
    until_query(&c, "dataset_id=census-2030").await;
    c.wait()
        .for_element(Locator::Css("#audit-table"))
        .await
        .unwrap();
    let audit = text(&c, "#audit-table").await;
    assert!(
        audit.contains("census-2030") && !audit.contains("cifar10"),
        "{audit}"
    );
    assert!(audit.contains("unit.admitted"), "{audit}");
    c.goto(&format!("{url}/ui/audit")).await.unwrap();
    fit(&c, 1280, 700).await;
    shot(&c, "audit").await;

    // A phone's width: nothing scrolls sideways but the wide tables, inside their own box.
    for path in ["/ui", "/ui/datasets/cifar10", "/ui/audit"] {
        c.set_window_size(390, 844).await.unwrap();
        c.goto(&format!("{url}{path}")).await.unwrap();
        assert!(no_horizontal_scroll(&c).await, "{path} at 390 px");
    }
    c.goto(&format!("{url}/ui/datasets/cifar10")).await.unwrap();
    fit(&c, 390, 844).await;
    // Chart text stays readable at phone width (the issue saw about 8 px).
    let px = c
        .execute(
            "return Math.min(...[...document.querySelectorAll('svg.chart .axis-label')]\
             .map(t => t.getBoundingClientRect().height))",
            vec![],
        )
        .await
        .unwrap()
        .as_f64()
        .unwrap();
    assert!(px >= 10.0, "chart text {px} px high at 390 px");
    shot(&c, "dataset-phone").await;

    // The API reference: rendered on the server, readable without script, and at phone width.
    c.goto(&format!("{url}/docs")).await.unwrap();
    assert!(no_horizontal_scroll(&c).await, "/docs at 390 px");
    c.set_window_size(1280, 900).await.unwrap();
    c.goto(&format!("{url}/docs#create_charge")).await.unwrap();
    assert!(text(&c, "#create_charge").await.contains("Responses"));
    shot(&c, "docs").await;

    // Signing out leads back to the form.
    c.set_window_size(1280, 900).await.unwrap();
    c.goto(&format!("{url}/ui")).await.unwrap();
    c.find(Locator::Css("form.signout button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("form[action='/ui/signin']"))
        .await
        .unwrap();
    c.close().await.unwrap();

    // The dark scheme: the system's preference switches the palette.
    let dark = browser(&driver_url, true).await;
    dark.goto(&format!("{url}/ui/signin")).await.unwrap();
    let form = dark
        .form(Locator::Css("form[action='/ui/signin']"))
        .await
        .unwrap();
    form.set_by_name("token", &token).await.unwrap();
    form.submit().await.unwrap();
    dark.goto(&format!("{url}/ui/datasets/census-2030"))
        .await
        .unwrap();
    let bg = dark
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .css_value("background-color")
        .await
        .unwrap();
    assert!(
        bg.contains("21, 24, 27"),
        "the dark palette's background: {bg}"
    );
    fit(&dark, 1280, 900).await;
    shot(&dark, "dataset-dark").await;
    dark.close().await.unwrap();

    let _ = driver.kill();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("screenshots in {}", shots_dir().display());
}

//! Runs (units admitted chunk by chunk), reservations (commit, release with refund) and idempotency
//! of every state change, through the API.

use crate::api::{spawn_app, TestApp};
use axum::http::StatusCode;
use serde_json::{json, Value};

/// Closed-form sums here are of a few doubles; the stored sums are rounded up at each step, so
/// they sit a few ulps above the exact value.
const SUM_TOLERANCE: f64 = 1e-12;

fn gdp(mu: f64) -> Value {
    json!({"type": "gdp", "mu": mu})
}

/// One DP-SGD step: Poisson sampling at q around a Gaussian with noise multiplier σ.
fn sgd_step(q: f64, sigma: f64) -> Value {
    json!({"type": "poisson_sampled", "sampling_rate": q,
           "event": {"type": "gaussian", "noise_multiplier": sigma}})
}

async fn keyed(
    app: &TestApp,
    method: &str,
    uri: &str,
    body: Value,
    key: &str,
) -> (StatusCode, Value) {
    app.call(method, uri, Some(&body), &[("idempotency-key", key)])
        .await
}

async fn dataset(app: &TestApp) -> Value {
    app.get("/v1/datasets/d").await.1
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[tokio::test]
async fn a_run_is_charged_chunk_by_chunk_and_stopping_early_charges_nothing_more() {
    let app = spawn_app().await;
    app.dataset("d", 3.0).await;
    let (s, run) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": sgd_step(0.01, 1.0), "steps": 1000, "chunk_steps": 300,
                   "label": "fine-tune"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    assert_eq!(
        (run["chunks"].as_u64(), run["next_chunk"].as_u64()),
        (Some(4), Some(0))
    );
    let chunk_mu = f(&run["chunk_unit"]["mu"]);
    let last_mu = f(&run["last_chunk_unit"]["mu"]);
    // 3 chunks of 300 steps and one of 100: the last one is cheaper. (Not by √3: at δᵢ = δ_B/1000
    // a chunk's μ is set by the tails of its privacy loss, not by the CLT: 0.420 vs 0.465.)
    assert!(last_mu < chunk_mu, "{run}");
    let run_mu = f(&run["run_mu"]);
    let expected = (3.0 * chunk_mu * chunk_mu + last_mu * last_mu).sqrt();
    assert!(
        run_mu >= expected && run_mu < expected * (1.0 + SUM_TOLERANCE),
        "{run}"
    );
    // As one unit the run costs less (0.516 at the budget's δ against 0.908 in 4 chunks): the
    // price of being able to stop early without a reservation is shown before anything is spent.
    assert!(f(&run["run_mu_as_one_unit"]) < run_mu, "{run}");
    // Declaring charges nothing.
    let d = dataset(&app).await;
    assert_eq!((d["units"].as_i64(), f(&d["mu_spent"])), (Some(0), 0.0));
    let id = run["id"].as_str().unwrap().to_owned();
    let uri = format!("/v1/datasets/d/runs/{id}/chunks");

    // The first chunk: a unit like a charge, with the run and the index recorded.
    let (s, b) = app.call("POST", &uri, None, &[]).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["charge"]["run_id"], id.as_str());
    assert_eq!(
        (
            b["charge"]["chunk"].as_i64(),
            b["charge"]["status"].as_str()
        ),
        (Some(0), Some("committed"))
    );
    assert_eq!(f(&b["charge"]["unit"]["mu"]), chunk_mu);
    let d = dataset(&app).await;
    assert_eq!(d["units"], 1);
    assert!((f(&d["mu_spent"]) - chunk_mu).abs() <= chunk_mu * SUM_TOLERANCE);
    // The run stops here: nothing else is charged, whatever the declaration said.
    let (_, r) = app.get(&format!("/v1/datasets/d/runs/{id}")).await;
    assert_eq!(
        (r["chunks_committed"].as_u64(), r["next_chunk"].as_u64()),
        (Some(1), Some(1))
    );

    // Going on: the remaining chunks, the last one shorter; then the run is complete.
    for i in 1..4 {
        let (s, b) = app.post(&uri, json!({})).await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        assert_eq!(b["charge"]["chunk"], i);
        let want = if i == 3 { last_mu } else { chunk_mu };
        assert_eq!(f(&b["charge"]["unit"]["mu"]), want);
        // The chunk's event is the chunk itself: 300 (or 100) steps.
        let count = b["charge"]["event"]["count"].as_u64();
        assert_eq!(count, Some(if i == 3 { 100 } else { 300 }));
    }
    let (s, b) = app.post(&uri, json!({})).await;
    assert_eq!(
        (s, b["error"].as_str()),
        (StatusCode::CONFLICT, Some("run_complete")),
        "{b}"
    );
    let d = dataset(&app).await;
    assert_eq!(d["units"], 4);
    assert!(f(&d["mu_spent"]) >= expected * (1.0 - SUM_TOLERANCE) && f(&d["mu_spent"]) <= run_mu);

    // Unknown runs and bad declarations are clear 4xx.
    let (s, b) = app.post("/v1/datasets/d/runs/nope/chunks", json!({})).await;
    assert_eq!(
        (s, b["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("run_not_found"))
    );
    for (body, path) in [
        (json!({"event": sgd_step(0.01, 1.0), "steps": 0}), "$.steps"),
        (
            json!({"event": sgd_step(0.01, 1.0), "steps": 10, "chunk_steps": 11}),
            "$.chunk_steps",
        ),
        (
            json!({"event": sgd_step(0.01, 1.0), "steps": 100000, "chunk_steps": 1}),
            "$.chunk_steps",
        ),
        (
            json!({"event": sgd_step(0.01, 1.0), "steps": 1e9}),
            "$.steps",
        ),
        (
            json!({"event": sgd_step(0.01, 1.0), "steps": 10, "extra": 1}),
            "$.extra",
        ),
    ] {
        let (s, b) = app.post("/v1/datasets/d/runs", body.clone()).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {b}");
        assert_eq!(b["details"]["path"], path, "{body}: {b}");
    }
}

/// A run whose chunks cannot all fit is refused at declaration (409 `run_does_not_fit`, saying
/// how much fits), nothing recorded; declared with `allow_partial` it is stopped at the first
/// chunk that does not fit, when that chunk is asked for.
#[tokio::test]
async fn a_run_that_does_not_fit_is_refused_or_stopped_at_the_chunk_that_does_not() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let decl = json!({"event": gdp(0.4), "steps": 10, "chunk_steps": 2});
    // Each chunk is GDP with μ = 0.4·√2; (0.4√2)²·k ≤ 1 ⟺ k ≤ 3.125: three chunks fit.
    let version = dataset(&app).await["version"].clone();
    let (s, b) = app.post("/v1/datasets/d/runs", decl.clone()).await;
    assert_eq!(
        (s, b["error"].as_str()),
        (StatusCode::CONFLICT, Some("run_does_not_fit")),
        "{b}"
    );
    let d = &b["details"];
    assert_eq!(
        (
            d["chunks"].as_u64(),
            d["chunks_that_fit"].as_u64(),
            d["steps"].as_u64(),
            d["steps_that_fit"].as_u64()
        ),
        (Some(5), Some(3), Some(10), Some(6)),
        "{b}"
    );
    assert_eq!(d["refused_by"], "mu of the dataset's budget", "{b}");
    assert_eq!(f(&d["remaining_mu"]), 1.0, "{b}");
    assert!(
        b["message"].as_str().unwrap().contains("allow_partial"),
        "{b}"
    );
    // Nothing was recorded.
    assert_eq!(dataset(&app).await["version"], version);
    // Six steps fit: declared as such, it is accepted.
    let (s, b) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.4), "steps": 6, "chunk_steps": 2}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let mut partial = decl.clone();
    partial["allow_partial"] = json!(true);
    let (s, run) = app.post("/v1/datasets/d/runs", partial).await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let chunk_mu = f(&run["chunk_unit"]["mu"]);
    assert!((chunk_mu - 0.4 * 2f64.sqrt()).abs() < 1e-12, "{run}");
    let uri = format!("/v1/datasets/d/runs/{}/chunks", run["id"].as_str().unwrap());
    for _ in 0..3 {
        assert_eq!(app.post(&uri, json!({})).await.0, StatusCode::CREATED);
    }
    let (s, b) = app.post(&uri, json!({})).await;
    assert_eq!(
        (s, b["error"].as_str()),
        (StatusCode::CONFLICT, Some("budget_exceeded")),
        "{b}"
    );
    assert!(
        (f(&b["remaining_mu"]) - (1.0f64 - 3.0 * 0.32).sqrt()).abs() < 1e-9,
        "{b}"
    );
}

/// A principal with a quota is refused a run that does not fit its share, even when the dataset's
/// budget has room, and the refusal says so (issue 36).
#[tokio::test]
async fn a_run_that_does_not_fit_the_callers_quota_is_refused_naming_the_quota() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let alice = app.bearer("alice", "analyst").await;
    let (s, q) = app
        .call(
            "PUT",
            "/v1/datasets/d/quotas/alice",
            Some(&json!({"mu": 0.6, "delta": 0.0})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{q}");
    // Chunks of μ = 0.4·√2: 0.32 ≤ 0.36 = 0.6² fits once, 0.64 does not.
    let (s, b) = app
        .call(
            "POST",
            "/v1/datasets/d/runs",
            Some(&json!({"event": gdp(0.4), "steps": 4, "chunk_steps": 2})),
            &[("authorization", &alice)],
        )
        .await;
    assert_eq!(
        (s, b["error"].as_str()),
        (StatusCode::CONFLICT, Some("run_does_not_fit")),
        "{b}"
    );
    let d = &b["details"];
    assert_eq!(
        (d["chunks_that_fit"].as_u64(), d["steps_that_fit"].as_u64()),
        (Some(1), Some(2)),
        "{b}"
    );
    assert_eq!(d["refused_by"], "mu of alice's quota", "{b}");
    assert_eq!(f(&d["remaining_mu"]), 0.6, "{b}");
    // The admin, outside any quota, spends from the unallocated √(1 − 0.36) = 0.8: the same run
    // (two chunks, √0.64 = 0.8) fits exactly.
    let (s, b) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.4), "steps": 4, "chunk_steps": 2}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
}

/// A run reserved at declaration holds all of its chunks at once (GDP closed forms: chunks of
/// μ 0.1·√2): a charge that would have fit without it is refused; each chunk is started before
/// its steps and committed after; the chunks never started are released newest first, with a
/// refund. A reservation that does not fit is refused with nothing held; bad combinations are
/// 422 with the field named.
#[tokio::test]
async fn a_run_reserved_at_declaration_holds_its_chunks_until_started_or_released() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let (s, run) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.1), "steps": 8, "chunk_steps": 2, "reserve": true}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    assert_eq!(
        (
            run["reserved"].as_bool(),
            run["chunks_reserved"].as_u64(),
            run["next_chunk"].as_u64()
        ),
        (Some(true), Some(4), None),
        "{run}"
    );
    let held = run["reserved_chunks"].as_array().unwrap().clone();
    assert_eq!(
        held.iter()
            .map(|h| h["chunk"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "{run}"
    );
    assert!(held.iter().all(|h| h["status"] == "reserved"), "{run}");
    // Held now: 4 · 0.02 = 0.08 of μ², so μ 0.96 (0.9216 + 0.08 > 1) no longer fits.
    let d = dataset(&app).await;
    assert_eq!(d["reserved_units"].as_i64(), Some(4), "{d}");
    assert!((f(&d["mu_spent"]) - 0.08f64.sqrt()).abs() < 1e-12, "{d}");
    let (s, b) = app
        .post("/v1/datasets/d/charges", json!({"event": gdp(0.96)}))
        .await;
    assert_eq!(
        (s, b["error"].as_str()),
        (StatusCode::CONFLICT, Some("budget_exceeded")),
        "{b}"
    );
    // Chunk 0 is started and committed; training stops there: 3, 2, 1 are released, newest first.
    let charge = |i: usize| held[i]["charge_id"].as_str().unwrap().to_owned();
    for how in ["start", "commit"] {
        let (s, b) = app
            .post(
                &format!("/v1/datasets/d/charges/{}/{how}", charge(0)),
                json!({}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{how}: {b}");
    }
    for i in [3, 2, 1] {
        let (s, b) = app
            .post(
                &format!("/v1/datasets/d/charges/{}/release", charge(i)),
                json!({"outputs_released": false}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{i}: {b}");
    }
    let d = dataset(&app).await;
    assert!((f(&d["mu_spent"]) - 0.02f64.sqrt()).abs() < 1e-12, "{d}");
    let (_, run) = app
        .get(&format!(
            "/v1/datasets/d/runs/{}",
            run["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        (
            run["chunks_committed"].as_u64(),
            run["chunks_released"].as_u64(),
            run["steps_taken"].as_u64()
        ),
        (Some(1), Some(3), Some(2)),
        "{run}"
    );
    assert_eq!(run["reserved_chunks"].as_array().unwrap().len(), 1, "{run}");
    // 0.02 + 0.9216 fits now.
    assert_eq!(
        app.post("/v1/datasets/d/charges", json!({"event": gdp(0.96)}))
            .await
            .0,
        StatusCode::CREATED
    );
    // 0.9416 of μ² spent: a reserved run of 0.08 does not fit, refused before anything is held.
    let version = dataset(&app).await["version"].clone();
    let (s, b) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.1), "steps": 8, "chunk_steps": 2, "reserve": true}),
        )
        .await;
    assert_eq!(
        (s, b["error"].as_str()),
        (StatusCode::CONFLICT, Some("run_does_not_fit")),
        "{b}"
    );
    assert_eq!(dataset(&app).await["version"], version);
    for (body, why) in [
        (
            json!({"event": gdp(0.01), "steps": 4, "reserve": true, "allow_partial": true}),
            "allow_partial",
        ),
        (
            json!({"event": gdp(0.01), "steps": 101, "chunk_steps": 1, "reserve": true}),
            "at most 100",
        ),
    ] {
        let (s, b) = app.post("/v1/datasets/d/runs", body).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
        assert_eq!(b["details"]["path"], "$.reserve", "{b}");
        assert!(b["message"].as_str().unwrap().contains(why), "{b}");
    }
}

/// A reserved run races a charge that cannot fit beside it: whichever lands first, the run ends
/// holding all of its chunks or none (a chunk refused half-way releases the ones reserved), and
/// never both land.
#[tokio::test]
async fn a_reserved_run_racing_a_charge_holds_all_its_chunks_or_none() {
    let app = spawn_app().await;
    for trial in 0..12 {
        let d = format!("race{trial}");
        app.dataset(&d, 1.0).await;
        // Run: 4 chunks of μ² 0.02 (0.08); charge: μ² 0.95. Together 1.03 > 1.
        let run_uri = format!("/v1/datasets/{d}/runs");
        let charge_uri = format!("/v1/datasets/{d}/charges");
        let (run, charge) = tokio::join!(
            app.post(
                &run_uri,
                json!({"event": gdp(0.1), "steps": 8, "chunk_steps": 2, "reserve": true}),
            ),
            app.post(&charge_uri, json!({"event": gdp(0.95f64.sqrt())})),
        );
        let (run_ok, charge_ok) = (
            run.0 == StatusCode::CREATED,
            charge.0 == StatusCode::CREATED,
        );
        assert!(
            !(run_ok && charge_ok),
            "{trial}: both landed: {} {}",
            run.1,
            charge.1
        );
        let (_, page) = app.get(&format!("/v1/datasets/{d}/runs")).await;
        let held: u64 = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["chunks_reserved"].as_u64().unwrap())
            .sum();
        assert!(
            held == 0 || (held == 4 && run_ok),
            "{trial}: {held} held: {page}"
        );
        let spent = f(&dataset_of(&app, &d).await["mu_spent"]);
        assert!(spent <= 1.0, "{trial}: {spent}");
    }
}

async fn dataset_of(app: &TestApp, id: &str) -> Value {
    app.get(&format!("/v1/datasets/{id}")).await.1
}

/// Runs are listed with their progress: chunks taken, steps taken, μ used (√Σμᵢ² of the chunks
/// held) and μ the rest needs at the plan's certificates (closed forms: GDP chunks are certified
/// exactly, μ = 0.1·√chunk_steps); a released chunk leaves both figures as they were before it.
#[tokio::test]
async fn runs_are_listed_with_their_progress() {
    let app = spawn_app().await;
    app.dataset("d", 3.0).await;
    let (s, empty) = app.get("/v1/datasets/d/runs").await;
    assert_eq!(s, StatusCode::OK, "{empty}");
    assert_eq!(empty, json!({"items": [], "next_cursor": null}));
    // 10 steps in chunks of 4: two chunks of μ 0.2 and a last one of μ 0.1·√2.
    let (s, run) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.1), "steps": 10, "chunk_steps": 4, "label": "first"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let close = |a: f64, b: f64| a >= b && a <= b * (1.0 + SUM_TOLERANCE) + 1e-300;
    assert!(
        close(f(&run["mu_to_finish"]), 0.1f64 * 10f64.sqrt()),
        "{run}"
    );
    assert_eq!(
        (f(&run["mu_used"]), run["steps_taken"].as_u64()),
        (0.0, Some(0))
    );
    let (s, other) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.1), "steps": 3, "label": "second"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{other}");
    let uri = format!("/v1/datasets/d/runs/{}/chunks", run["id"].as_str().unwrap());
    assert_eq!(app.post(&uri, json!({})).await.0, StatusCode::CREATED);
    let (s, reserved) = app.post(&uri, json!({"reserve": true})).await;
    assert_eq!(s, StatusCode::CREATED, "{reserved}");
    let (s, page) = app.get("/v1/datasets/d/runs").await;
    assert_eq!(s, StatusCode::OK, "{page}");
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{page}");
    let first = &items[0];
    assert_eq!(first["label"], "first", "{page}");
    assert_eq!(
        (
            first["chunks_committed"].as_u64(),
            first["chunks_reserved"].as_u64(),
            first["steps_taken"].as_u64(),
            first["next_chunk"].as_u64()
        ),
        (Some(1), Some(1), Some(8), Some(2)),
        "{first}"
    );
    // Used: two chunks of μ 0.2 → √0.08; the rest: the last chunk, μ 0.1·√2.
    assert!(close(f(&first["mu_used"]), 0.08f64.sqrt()), "{first}");
    assert!(close(f(&first["mu_to_finish"]), 0.02f64.sqrt()), "{first}");
    assert_eq!(items[1]["label"], "second", "{page}");
    assert!(
        close(f(&items[1]["mu_to_finish"]), 0.1f64 * 3f64.sqrt()),
        "{page}"
    );
    // The listing agrees with the run's own view.
    let (_, one) = app
        .get(&format!(
            "/v1/datasets/d/runs/{}",
            run["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(&one, first);
    // Releasing the reserved chunk gives its μ back to the rest of the run.
    let rel = format!(
        "/v1/datasets/d/charges/{}/release",
        reserved["charge"]["id"].as_str().unwrap()
    );
    let (s, b) = app.post(&rel, json!({"outputs_released": false})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, page) = app.get("/v1/datasets/d/runs?limit=1").await;
    let first = &page["items"][0];
    assert_eq!(
        (
            first["steps_taken"].as_u64(),
            first["chunks_released"].as_u64()
        ),
        (Some(4), Some(1)),
        "{first}"
    );
    assert!(close(f(&first["mu_used"]), 0.2), "{first}");
    assert!(close(f(&first["mu_to_finish"]), 0.06f64.sqrt()), "{first}");
    // Paginated: one run per page, then the second, then no cursor.
    let cursor = page["next_cursor"].as_i64().expect("a next page");
    let (_, page) = app
        .get(&format!("/v1/datasets/d/runs?limit=1&after={cursor}"))
        .await;
    assert_eq!(page["items"][0]["label"], "second", "{page}");
    let (_, page) = app
        .get(&format!(
            "/v1/datasets/d/runs?limit=1&after={}",
            page["next_cursor"].as_i64().unwrap_or(i64::MAX)
        ))
        .await;
    assert_eq!(page["items"], json!([]), "{page}");
    assert_eq!(
        app.get("/v1/datasets/d/runs?limit=101").await.1["details"]["path"],
        "query.limit"
    );
}

/// A run whose chunking costs more than the tolerance over one unit is declared with a warning
/// that names a chunk size whose cost is within it; declared at that size, it carries none.
#[tokio::test]
async fn a_costly_chunking_is_warned_about_with_a_chunk_size_that_is_not() {
    let app = spawn_app().await;
    app.dataset("d", 3.0).await;
    // 20 chunks of 500 steps of q = 0.01, σ = 1: each chunk certified at its δᵢ is loose, and 20
    // of them cost μ 2.13 against 1.38 for the 10,000 steps as one unit (+55 %). Halving the
    // number of chunks: 10, 5 and 3 still cost more than 5 %, 2 chunks of 5,000 steps do not.
    let decl = json!({"event": sgd_step(0.01, 1.0), "steps": 10_000, "chunk_steps": 500});
    let (s, run) = app.post("/v1/datasets/d/runs", decl.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let w = &run["warnings"][0];
    assert_eq!(w["code"], "chunking_cost", "{run}");
    assert_eq!(w["suggested_chunk_steps"].as_u64(), Some(5000), "{run}");
    let message = w["message"].as_str().unwrap();
    assert!(
        message.contains("20 chunks of 500 steps") && message.contains("chunks of 5000 steps"),
        "{run}"
    );
    let mut better = decl.clone();
    better["chunk_steps"] = json!(5000);
    let (s, better) = app.post("/v1/datasets/d/runs", better).await;
    assert_eq!(s, StatusCode::CREATED, "{better}");
    assert_eq!(better["warnings"], json!([]), "{better}");
    assert!(f(&better["run_mu"]) < f(&run["run_mu"]), "{better}");
    // Where no chunking is within the tolerance, one unit is what is suggested.
    let (s, run) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": sgd_step(0.01, 1.0), "steps": 1000, "chunk_steps": 100}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    assert_eq!(
        run["warnings"][0]["suggested_chunk_steps"].as_u64(),
        Some(1000),
        "{run}"
    );
    assert!(
        run["warnings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("only one unit of 1000 steps"),
        "{run}"
    );
    // A stated tolerance: the first run's price is accepted without a word; out of range is 422.
    let mut lenient = decl.clone();
    lenient["chunking_tolerance"] = json!(10.0);
    let (s, run) = app.post("/v1/datasets/d/runs", lenient).await;
    assert_eq!(
        (s, &run["warnings"]),
        (StatusCode::CREATED, &json!([])),
        "{run}"
    );
    let mut bad = decl.clone();
    bad["chunking_tolerance"] = json!(-0.1);
    let (s, b) = app.post("/v1/datasets/d/runs", bad).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["details"]["path"], "$.chunking_tolerance", "{b}");
    // GDP steps compose exactly in any chunking: no warning.
    let (s, run) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.01), "steps": 1000, "chunk_steps": 1}),
        )
        .await;
    assert_eq!(
        (s, &run["warnings"]),
        (StatusCode::CREATED, &json!([])),
        "{run}"
    );
}

#[tokio::test]
async fn reserved_units_count_until_released_and_a_release_refunds_them() {
    let app = spawn_app().await;
    app.dataset("d", 2.0).await;
    let charge = |mu: f64, reserve: bool| json!({"event": gdp(mu), "reserve": reserve});
    let (s, a) = app.post("/v1/datasets/d/charges", charge(1.2, true)).await;
    assert_eq!(s, StatusCode::CREATED, "{a}");
    assert_eq!(a["charge"]["status"], "reserved");
    let a_id = a["charge"]["id"].as_str().unwrap().to_owned();
    let (s, b) = app.post("/v1/datasets/d/charges", charge(1.6, true)).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let b_id = b["charge"]["id"].as_str().unwrap().to_owned();
    // Reserved units count: 1.2² + 1.6² = 4 fills the budget.
    let d = dataset(&app).await;
    assert_eq!(
        (d["units"].as_i64(), d["reserved_units"].as_i64()),
        (Some(2), Some(2))
    );
    assert!((f(&d["mu_spent"]) - 2.0).abs() < 2.0 * SUM_TOLERANCE);
    // ... and are not yet in the exact composition (display only).
    assert_eq!(f(&d["exact_composition_mu"]), 0.0);
    let (s, _) = app.post("/v1/datasets/d/charges", charge(0.1, false)).await;
    assert_eq!(s, StatusCode::CONFLICT);

    // A release must state that no output was released; `true` is refused and changes nothing.
    let release = |id: &str| format!("/v1/datasets/d/charges/{id}/release");
    let (s, e) = app
        .post(&release(&b_id), json!({"outputs_released": true}))
        .await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("outputs_released")),
        "{e}"
    );
    let (s, e) = app.post(&release(&b_id), json!({})).await;
    assert_eq!(
        (s, e["details"]["path"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("$.outputs_released"))
    );
    let (s, r) = app
        .post(
            &release(&b_id),
            json!({"outputs_released": false, "reason": "job cancelled"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (r["charge"]["status"].as_str(), f(&r["refund"]["mu"])),
        (Some("released"), 1.6)
    );
    let d = dataset(&app).await;
    assert_eq!(
        (d["units"].as_i64(), d["reserved_units"].as_i64()),
        (Some(1), Some(1))
    );
    // Back to 1.2 (never below: the subtraction is rounded up).
    let spent = f(&d["mu_spent"]);
    assert!(
        spent >= 1.2 && spent < 1.2 * (1.0 + SUM_TOLERANCE),
        "{spent}"
    );
    // The refund is real: 1.5 fits now (1.44 + 2.25 < 4).
    let (s, _) = app.post("/v1/datasets/d/charges", charge(1.5, false)).await;
    assert_eq!(s, StatusCode::CREATED);

    // Commit: stays counted, joins the exact composition (GDP: √(1.2² + 1.5²) = 1.9209).
    let commit = |id: &str| format!("/v1/datasets/d/charges/{id}/commit");
    let (s, c) = app.call("POST", &commit(&a_id), None, &[]).await;
    assert_eq!(
        (s, c["charge"]["status"].as_str()),
        (StatusCode::OK, Some("committed")),
        "{c}"
    );
    let d = dataset(&app).await;
    assert_eq!(d["reserved_units"], 0);
    let exact = f(&d["exact_composition_mu"]);
    let closed = (1.2f64 * 1.2 + 1.5 * 1.5).sqrt();
    assert!(
        exact >= closed && exact < closed * 1.001,
        "{exact} vs {closed}"
    );
    // Settled units cannot be settled again; unknown charges are 404.
    for (uri, body) in [
        (commit(&a_id), json!({})),
        (release(&a_id), json!({"outputs_released": false})),
        (commit(&b_id), json!({})),
    ] {
        let (s, e) = app.post(&uri, body).await;
        assert_eq!(
            (s, e["error"].as_str()),
            (StatusCode::CONFLICT, Some("not_reserved")),
            "{uri}: {e}"
        );
    }
    let (s, e) = app.post(&commit("nope"), json!({})).await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("charge_not_found"))
    );

    // The ledger records every step, the caller's statement included.
    let (_, entries) = app.get("/v1/datasets/d/charges").await;
    let kinds: Vec<&str> = entries["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["charge", "charge", "release", "charge", "commit"]);
    let rel = &entries["items"][2];
    assert_eq!(rel["settles"], b_id.as_str());
    assert_eq!(
        rel["statement"],
        json!({"outputs_released": false, "reason": "job cancelled"})
    );
    assert_eq!(entries["items"][1]["charge"]["status"], "released");
    assert_eq!(entries["items"][0]["charge"]["status"], "committed");
}

#[tokio::test]
async fn a_reserved_chunk_released_is_offered_again() {
    let app = spawn_app().await;
    app.dataset("d", 2.0).await;
    let (_, run) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.5), "steps": 4, "chunk_steps": 2}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let uri = format!("/v1/datasets/d/runs/{id}/chunks");
    let (s, c) = app.post(&uri, json!({"reserve": true})).await;
    assert_eq!(s, StatusCode::CREATED, "{c}");
    assert_eq!(
        (
            c["charge"]["chunk"].as_i64(),
            c["charge"]["status"].as_str()
        ),
        (Some(0), Some("reserved"))
    );
    let cid = c["charge"]["id"].as_str().unwrap();
    let (s, _) = app
        .post(
            &format!("/v1/datasets/d/charges/{cid}/release"),
            json!({"outputs_released": false}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, r) = app.get(&format!("/v1/datasets/d/runs/{id}")).await;
    assert_eq!(
        (r["chunks_released"].as_u64(), r["next_chunk"].as_u64()),
        (Some(1), Some(0)),
        "{r}"
    );
    let (_, c) = app.post(&uri, json!({})).await;
    assert_eq!(c["charge"]["chunk"], 0);
    assert_eq!(dataset(&app).await["units"], 1);
}

#[tokio::test]
async fn every_state_change_is_idempotent_under_its_key() {
    let app = spawn_app().await;
    // Creation: the same body again is the same dataset (200), another body a conflict.
    let body = json!({"id": "d", "budget": {"mu": 2.0}});
    assert_eq!(
        app.post("/v1/datasets", body.clone()).await.0,
        StatusCode::CREATED
    );
    let (s, d) = app.post("/v1/datasets", body).await;
    assert_eq!((s, d["id"].as_str()), (StatusCode::OK, Some("d")));
    let (s, _) = app
        .post("/v1/datasets", json!({"id": "d", "budget": {"mu": 3.0}}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT);

    // Budget change.
    let patch = json!({"budget": {"mu": 2.5}});
    let (s1, b1) = keyed(&app, "PATCH", "/v1/datasets/d", patch.clone(), "k-budget").await;
    let (s2, b2) = keyed(&app, "PATCH", "/v1/datasets/d", patch, "k-budget").await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
    assert_eq!(b1, b2);
    assert_eq!(dataset(&app).await["version"], 1);

    // Run declaration and chunk.
    let decl = json!({"event": gdp(0.5), "steps": 4, "chunk_steps": 2});
    let (s1, r1) = keyed(&app, "POST", "/v1/datasets/d/runs", decl.clone(), "k-run").await;
    let (s2, r2) = keyed(&app, "POST", "/v1/datasets/d/runs", decl, "k-run").await;
    assert_eq!((s1, s2), (StatusCode::CREATED, StatusCode::OK));
    assert_eq!(r1, r2);
    let uri = format!("/v1/datasets/d/runs/{}/chunks", r1["id"].as_str().unwrap());
    let (s1, c1) = keyed(&app, "POST", &uri, json!({"reserve": true}), "k-chunk").await;
    let (s2, c2) = keyed(&app, "POST", &uri, json!({"reserve": true}), "k-chunk").await;
    assert_eq!((s1, s2), (StatusCode::CREATED, StatusCode::OK));
    assert_eq!(c1, c2);
    assert_eq!(dataset(&app).await["units"], 1);

    // Release.
    let cid = c1["charge"]["id"].as_str().unwrap();
    let rel = format!("/v1/datasets/d/charges/{cid}/release");
    let body = json!({"outputs_released": false});
    let (s1, x1) = keyed(&app, "POST", &rel, body.clone(), "k-release").await;
    let (s2, x2) = keyed(&app, "POST", &rel, body, "k-release").await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK), "{x2}");
    assert_eq!(x1, x2);

    // Commit.
    let (_, c) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": gdp(0.3), "reserve": true}),
        )
        .await;
    let com = format!(
        "/v1/datasets/d/charges/{}/commit",
        c["charge"]["id"].as_str().unwrap()
    );
    let (s1, y1) = app
        .call("POST", &com, None, &[("idempotency-key", "k-commit")])
        .await;
    let (s2, y2) = app
        .call("POST", &com, None, &[("idempotency-key", "k-commit")])
        .await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK), "{y2}");
    assert_eq!(y1, y2);

    // One entry per operation, whatever the retries. A key is scoped to its principal, operation
    // and target: reused for another operation it names another request; reused for the same
    // operation and target with another body it is a 422.
    let (_, entries) = app.get("/v1/datasets/d/charges").await;
    let kinds: Vec<&str> = entries["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["budget", "run", "charge", "release", "charge", "commit"]
    );
    let (s, e) = keyed(
        &app,
        "PATCH",
        "/v1/datasets/d",
        json!({"budget": {"mu": 2.5}}),
        "k-run",
    )
    .await;
    assert_eq!((s, e["budget"]["mu"].as_f64()), (StatusCode::OK, Some(2.5)));
    let (s, e) = keyed(
        &app,
        "PATCH",
        "/v1/datasets/d",
        json!({"budget": {"mu": 2.6}}),
        "k-run",
    )
    .await;
    assert_eq!(
        (s, e["error"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("idempotency_key_reused")
        )
    );
}

#[tokio::test]
async fn a_chunk_request_names_its_chunk_and_a_used_chunk_is_not_refunded() {
    let app = spawn_app().await;
    app.dataset("d", 2.0).await;
    let (_, run) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.3), "steps": 6, "chunk_steps": 2}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let uri = format!("/v1/datasets/d/runs/{id}/chunks");
    let (s, c0) = app.post(&uri, json!({"chunk": 0, "reserve": true})).await;
    assert_eq!(s, StatusCode::CREATED, "{c0}");
    // A retry of that request without a key cannot admit chunk 1 in its place.
    let (s, e) = app.post(&uri, json!({"chunk": 0, "reserve": true})).await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("chunk_mismatch")),
        "{e}"
    );
    assert_eq!(e["details"]["next_chunk"], 1);
    assert_eq!(dataset(&app).await["units"], 1);
    // Chunk 1 starts from chunk 0's iterates: while it is held, chunk 0 cannot be refunded.
    let (s, c1) = app.post(&uri, json!({"chunk": 1, "reserve": true})).await;
    assert_eq!(s, StatusCode::CREATED, "{c1}");
    let release = |c: &Value| {
        format!(
            "/v1/datasets/d/charges/{}/release",
            c["charge"]["id"].as_str().unwrap()
        )
    };
    let (s, e) = app
        .post(&release(&c0), json!({"outputs_released": false}))
        .await;
    assert_eq!(
        (s, e["error"].as_str()),
        (StatusCode::CONFLICT, Some("release_refused")),
        "{e}"
    );
    // Released in reverse order, both are refunded.
    assert_eq!(
        app.post(&release(&c1), json!({"outputs_released": false}))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        app.post(&release(&c0), json!({"outputs_released": false}))
            .await
            .0,
        StatusCode::OK
    );
    let d = dataset(&app).await;
    assert_eq!((d["units"].as_i64(), f(&d["mu_spent"])), (Some(0), 0.0));
}

/// Issue 38: a run may declare its batch sampler; the rate is derived (B/N) and checked against
/// the step, not trusted. The case, q = 0.01 declared for batches of 256 from 60,000
/// records, is refused; the rate as Python computes it (256/60000) is accepted and accounted at
/// B/N rounded up; shuffled batches are refused with the reason; the run shows its sampler.
#[tokio::test]
async fn a_run_declaring_its_sampler_has_its_rate_checked_not_trusted() {
    let app = spawn_app().await;
    app.dataset("d", 3.0).await;
    let sampler = json!({"type": "poisson", "expected_batch_size": 256, "dataset_size": 60000});
    for q in [0.01, 0.001] {
        let (s, b) = app
            .post(
                "/v1/datasets/d/runs",
                json!({"event": sgd_step(q, 1.0), "steps": 100, "sampler": sampler}),
            )
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
        assert_eq!(b["details"]["path"], "$.event.sampling_rate", "{b}");
        assert!(
            b["message"].as_str().unwrap().contains("different runs"),
            "{b}"
        );
    }
    let (s, b) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": sgd_step(0.01, 1.0), "steps": 100, "sampler": {"type": "shuffle"}}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["details"]["path"], "$.sampler.type", "{b}");
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("cannot be certified"),
        "{b}"
    );
    // Nothing was declared by the refusals.
    assert_eq!(dataset(&app).await["units"], 0);

    let q = 256.0 / 60000.0;
    let (s, run) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": sgd_step(q, 1.0), "steps": 100, "sampler": sampler}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let rate = f(&run["sampler"]["rate"]);
    assert!(
        rate >= q && rate * 60000.0 >= 256.0 && rate <= q * (1.0 + 1e-15),
        "{run}"
    );
    assert_eq!(run["sampler"]["type"], "poisson");
    assert_eq!(run["sampler"]["checked"], 1);
    let (_, again) = app
        .get(&format!(
            "/v1/datasets/d/runs/{}",
            run["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(again["sampler"], run["sampler"], "{again}");
}

/// Issue 38: a dataset states its privacy unit and size at creation; reports name the unit, and a
/// run's sampler may not draw from more units than the dataset has.
#[tokio::test]
async fn a_dataset_states_its_privacy_unit_and_size_and_a_sampler_may_not_exceed_it() {
    let app = spawn_app().await;
    let (s, d) = app
        .post(
            "/v1/datasets",
            json!({"id": "users", "budget": {"mu": 2.0}, "privacy_unit": "user", "size": 60000}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{d}");
    assert_eq!(
        (d["privacy_unit"].as_str(), d["size"].as_u64()),
        (Some("user"), Some(60000))
    );
    let (_, r) = app.get("/v1/datasets/users/report").await;
    assert_eq!(r["privacy_unit"], "user", "{r}");
    // Without them: a record, size not stated.
    app.dataset("d", 1.0).await;
    let d = dataset(&app).await;
    assert_eq!(
        (d["privacy_unit"].as_str(), d["size"].as_u64()),
        (Some("record"), None)
    );

    let q = 256.0 / 70000.0;
    let (s, b) = app
        .post(
            "/v1/datasets/users/runs",
            json!({"event": sgd_step(q, 1.0), "steps": 10, "sampler":
                {"type": "poisson", "expected_batch_size": 256, "dataset_size": 70000}}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["details"]["path"], "$.sampler.dataset_size", "{b}");
    assert!(
        b["message"].as_str().unwrap().contains("has 60000 users"),
        "{b}"
    );
    let (s, b) = app
        .post(
            "/v1/datasets",
            json!({"id": "bad", "budget": {"mu": 1.0}, "privacy_unit": "User Day"}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["details"]["path"], "$.privacy_unit", "{b}");

    // A partitioned dataset's blocks protect the same unit.
    let (s, _) = app
        .post(
            "/v1/datasets",
            json!({"id": "ev", "budget": {"mu": 1.0}, "privacy_unit": "user-day",
                "partitioning": {"type": "time", "width": "day"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, b) = app
        .post(
            "/v1/charges",
            json!({"datasets": [{"id": "ev", "blocks": ["2026-11-02"]}], "event": gdp(0.1)}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (_, block) = app.get("/v1/datasets/ev@2026-11-02").await;
    assert_eq!(block["privacy_unit"], "user-day", "{block}");
}

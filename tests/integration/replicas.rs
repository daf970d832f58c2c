//! Several server processes on one PostgreSQL database (runs when `TEST_DATABASE_URL` is set).

use super::crash::{http, http_with_head, Server};
use super::outage::{assert_kept_once, Writers};
use super::store::postgres_url;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn three_replicas_never_admit_more_than_fits() {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the multi-replica test");
        return;
    };
    let replicas: Vec<Server> = (0..3).map(|_| Server::start(&url)).collect();
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let id = format!("replicas-{}", uuid::Uuid::new_v4().simple());
    // μ budget 1 and 0.25-GDP charges: exactly 16 fit.
    let (s, _) = http(
        addrs[0],
        "POST",
        "/v1/datasets",
        Some(&json!({"id": id, "budget": {"mu": 1.0}})),
        None,
    )
    .unwrap();
    assert_eq!(s, 201);
    let admitted = Arc::new(AtomicUsize::new(0));
    let rejected = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..48)
        .map(|i| {
            let (addr, id) = (addrs[i % 3], id.clone());
            let (admitted, rejected) = (admitted.clone(), rejected.clone());
            std::thread::spawn(move || {
                let body = json!({"event": {"type": "gdp", "mu": 0.25}});
                let key = format!("c{i}");
                match http(
                    addr,
                    "POST",
                    &format!("/v1/datasets/{id}/charges"),
                    Some(&body),
                    Some(&key),
                )
                .unwrap()
                {
                    (201, _) => admitted.fetch_add(1, Ordering::SeqCst),
                    (409, _) => rejected.fetch_add(1, Ordering::SeqCst),
                    (s, b) => panic!("unexpected {s}: {b}"),
                };
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 16);
    assert_eq!(rejected.load(Ordering::SeqCst), 32);
    // Every replica sees the same ledger (none gates on a stale state).
    for a in &addrs {
        let (_, d) = http(*a, "GET", &format!("/v1/datasets/{id}"), None, None).unwrap();
        assert_eq!(d["charges"], 16);
        assert!(d["mu_spent"].as_f64().unwrap() <= 1.0 + 1e-9);
    }
    // Idempotency keys hold across replicas: a retry on another replica replays.
    let body = json!({"event": {"type": "gdp", "mu": 0.01}});
    let (s1, b1) = http(
        addrs[0],
        "POST",
        &format!("/v1/datasets/{id}/charges"),
        Some(&body),
        Some("late"),
    )
    .unwrap();
    let (s2, b2) = http(
        addrs[1],
        "POST",
        &format!("/v1/datasets/{id}/charges"),
        Some(&body),
        Some("late"),
    )
    .unwrap();
    assert_eq!((s1, s2), (409, 409), "{b1} {b2}");
    let body = json!({"event": {"type": "gdp", "mu": 0.25}});
    let (s1, _) = http(
        addrs[0],
        "POST",
        &format!("/v1/datasets/{id}/charges"),
        Some(&body),
        Some("c0"),
    )
    .unwrap();
    let (s2, _) = http(
        addrs[2],
        "POST",
        &format!("/v1/datasets/{id}/charges"),
        Some(&body),
        Some("c0"),
    )
    .unwrap();
    assert!(matches!((s1, s2), (200, 200) | (409, 409)), "{s1} {s2}");
    for r in replicas {
        r.kill();
    }
}

/// Runs `pg_ctlcluster VERSION main ACTION` (root; the cluster of this machine and CI).
fn pg_ctl(action: &str) {
    let version = std::fs::read_dir("/etc/postgresql")
        .expect("a local PostgreSQL cluster")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
        .expect("a PostgreSQL version directory");
    let mut cmd = std::process::Command::new("pg_ctlcluster");
    if action == "start" {
        cmd.arg("--skip-systemctl-redirect");
    }
    cmd.args([version.as_str(), "main", action]);
    if action == "stop" {
        cmd.args(["-m", "fast"]);
    }
    let out = cmd.output().expect("pg_ctlcluster runs");
    assert!(
        out.status.success(),
        "pg_ctlcluster {action}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stops and restarts the shared PostgreSQL during a stream of charges. It takes the database away
/// from every other test, so it is `#[ignore]`d and run on its own by `.ci/run`:
/// `cargo test --test integration database_restart -- --ignored`.
#[test]
#[ignore = "stops the shared PostgreSQL; run alone (see .ci/run)"]
fn a_database_restart_gives_503s_then_recovers_without_loss_or_overspend() {
    let url = postgres_url().expect("TEST_DATABASE_URL must be set for this test");
    let server = Server::start(&url);
    let addr = server.addr;
    let id = format!("restart-{}", uuid::Uuid::new_v4().simple());
    let (s, _) = http(
        addr,
        "POST",
        "/v1/datasets",
        Some(&json!({"id": id, "budget": {"mu": 1.0}})),
        None,
    )
    .unwrap();
    assert_eq!(s, 201);
    // Six writers on the one dataset, so requests do queue for its lock during the outage; the
    // slowest 503 shows they fail within one store timeout (3 s), not behind each holder's own.
    let writers = Writers::spawn(addr, &id, 6, 0.02, "while the database is down");
    std::thread::sleep(std::time::Duration::from_millis(300));
    pg_ctl("stop");
    std::thread::sleep(std::time::Duration::from_millis(6000));
    let (ready, _) = http(addr, "GET", "/readyz", None, None).unwrap();
    pg_ctl("start");
    let t = std::time::Instant::now();
    loop {
        if let Ok((200, _)) = http(addr, "GET", "/readyz", None, None) {
            break;
        }
        assert!(t.elapsed().as_secs() < 60, "the service did not recover");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let before = writers.acked();
    while writers.acked() < before + 5 && t.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (acked, unavailable, slowest) = writers.finish();
    assert!(
        slowest < 4500,
        "a 503 took {slowest} ms: requests queued behind the lock during the outage"
    );
    assert_eq!(ready, 503, "/readyz must report the database outage");
    assert!(unavailable > 0, "requests during the outage must get 503");
    assert_kept_once(addr, &id, &acked);
    let (_, d) = http(addr, "GET", &format!("/v1/datasets/{id}"), None, None).unwrap();
    assert!(d["mu_spent"].as_f64().unwrap() <= 1.0 + 1e-9);
    server.kill();
}

/// Range charges on a daily-partitioned dataset, overlapping in every way and joined with two
/// plain datasets listed in different orders, sent to three replicas at once (issue 15): no
/// request hangs or fails with a 5xx (no deadlock), no block or dataset admits more than fits,
/// and every admitted charge is on every ledger it named (all or nothing).
#[test]
fn three_replicas_overlapping_range_charges_neither_deadlock_nor_overspend() {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the multi-replica range-charge test");
        return;
    };
    let replicas: Vec<Server> = (0..3).map(|_| Server::start(&url)).collect();
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (ev, ja, jb) = (
        format!("ev-{tag}"),
        format!("ja-{tag}"),
        format!("jb-{tag}"),
    );
    let create = |body: serde_json::Value| {
        let (s, b) = http(addrs[0], "POST", "/v1/datasets", Some(&body), None).unwrap();
        assert_eq!(s, 201, "{b}");
    };
    create(json!({"id": ev, "budget": {"mu": 1.0},
        "partitioning": {"type": "time", "width": "day"}}));
    create(json!({"id": ja, "budget": {"mu": 1.0}}));
    create(json!({"id": jb, "budget": {"mu": 1.0}}));
    // Request i: days [s, s + n) of 2026-11-01 … 05, and maybe the join datasets, in an order
    // that depends on i. Every ledger fits 16 charges of 0.25-GDP; 72 requests overfill them.
    let request = |i: usize| -> (serde_json::Value, Vec<String>) {
        let s = 1 + i % 5;
        let n = (1 + (i * 7) % 3).min(6 - s);
        let range = json!({"id": ev, "time_range": {
            "from": format!("2026-11-{s:02}T00:00:00Z"),
            "to": format!("2026-11-{:02}T00:00:00Z", s + n)}});
        let mut ledgers: Vec<String> = (s..s + n).map(|d| format!("{ev}@2026-11-{d:02}")).collect();
        let targets = match i % 4 {
            0 => vec![range],
            1 => {
                ledgers.push(ja.clone());
                vec![json!({"id": ja}), range]
            }
            2 => {
                ledgers.extend([ja.clone(), jb.clone()]);
                vec![json!({"id": jb}), range, json!({"id": ja})]
            }
            _ => {
                ledgers.extend([ja.clone(), jb.clone()]);
                vec![json!({"id": ja}), json!({"id": jb}), range]
            }
        };
        (
            json!({"datasets": targets, "event": {"type": "gdp", "mu": 0.25}}),
            ledgers,
        )
    };
    let admitted: Arc<std::sync::Mutex<Vec<Vec<String>>>> = Arc::default();
    let threads: Vec<_> = (0..72)
        .map(|i| {
            let addr = addrs[i % 3];
            let (body, ledgers) = request(i);
            let admitted = admitted.clone();
            std::thread::spawn(move || {
                let key = format!("r{i}");
                let started = std::time::Instant::now();
                let (s, b) = http(addr, "POST", "/v1/charges", Some(&body), Some(&key)).unwrap();
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(20),
                    "request {i} took {:?}",
                    started.elapsed()
                );
                match s {
                    201 => admitted.lock().unwrap().push(ledgers),
                    409 => assert_eq!(b["error"], "budget_exceeded", "{b}"),
                    _ => panic!("request {i}: unexpected {s}: {b}"),
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let admitted = admitted.lock().unwrap().clone();
    assert!(!admitted.is_empty());
    let mut all: Vec<String> = (1..=5).map(|d| format!("{ev}@2026-11-{d:02}")).collect();
    all.extend([ja.clone(), jb.clone()]);
    for id in &all {
        let want = admitted.iter().filter(|l| l.contains(id)).count();
        assert!(want <= 16, "{id}: {want} admitted charges");
        for a in &addrs {
            let (s, d) = http(*a, "GET", &format!("/v1/datasets/{id}"), None, None).unwrap();
            assert_eq!(s, 200, "{id}: {d}");
            assert_eq!(d["charges"].as_u64(), Some(want as u64), "{id}: {d}");
            assert!(d["mu_spent"].as_f64().unwrap() <= 1.0 + 1e-9, "{id}: {d}");
        }
    }
    for r in replicas {
        r.kill();
    }
}

/// Longest a write waits for its turn (`MAX_WRITE_WAIT`, 10 s), and the slack allowed on top for
/// the request's other work on a loaded 2-core machine running three replicas and PostgreSQL.
const WRITE_WAIT_MS: u128 = 10_000;
const TURN_SLACK_MS: u128 = 3000;

/// Charges on one dataset from `clients` clients spread over three replicas, each sending
/// `each` in turn: every answer comes within the bounded wait, a refusal is 503 `busy` with
/// `Retry-After` (retried with the same key, as a client does), every charge lands exactly once,
/// and no replica's clients are starved: the last client of any replica finishes within
/// [`FAIR_SPREAD`] of the first replica's last. Returns the answers' times (ms, sorted).
fn contend(clients: usize, each: usize) -> Option<Vec<u128>> {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the cross-replica contention test");
        return None;
    };
    let replicas: Vec<Server> = (0..3).map(|_| Server::start(&url)).collect();
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let id = format!("contended-{}", uuid::Uuid::new_v4().simple());
    let created = json!({"id": id, "budget": {"mu": 1.0}});
    let (s, _) = http(addrs[0], "POST", "/v1/datasets", Some(&created), None).unwrap();
    assert_eq!(s, 201);
    let busy = Arc::new(AtomicUsize::new(0));
    let times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let began = std::time::Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (addr, id) = (addrs[c % 3], id.clone());
            let (busy, times) = (busy.clone(), times.clone());
            std::thread::spawn(move || {
                for i in 0..each {
                    let key = format!("c{c}-{i}");
                    // μ = 0.001: even 1,000 of them spend Σμ² = 1e-3 of the budget's 1, all fit.
                    let body = json!({"event": {"type": "gdp", "mu": 0.001}, "label": key});
                    loop {
                        let t = std::time::Instant::now();
                        let path = format!("/v1/datasets/{id}/charges");
                        let (s, h, b) =
                            http_with_head(addr, "POST", &path, Some(&body), Some(&key)).unwrap();
                        times.lock().unwrap().push(t.elapsed().as_millis());
                        match s {
                            200 | 201 => break,
                            503 => {
                                assert_eq!(b["error"], "busy", "{b}");
                                assert!(h.contains("retry-after: 1"), "{h}");
                                busy.fetch_add(1, Ordering::SeqCst);
                                std::thread::sleep(std::time::Duration::from_millis(100));
                            }
                            s => panic!("unexpected {s}: {b}"),
                        }
                    }
                }
                (c % 3, began.elapsed().as_millis())
            })
        })
        .collect();
    let mut finished = [0u128; 3];
    for t in threads {
        let (r, at) = t.join().unwrap();
        finished[r] = finished[r].max(at);
    }
    let mut times = times.lock().unwrap().clone();
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    let slowest = *times.last().unwrap();
    eprintln!(
        "{} charges from {clients} clients over 3 replicas: answers p50 {} ms, p99 {} ms, \
         slowest {slowest} ms; {} answered busy; replicas' clients done at {finished:?} ms",
        clients * each,
        at(0.5),
        at(0.99),
        busy.load(Ordering::SeqCst)
    );
    assert!(
        slowest < WRITE_WAIT_MS + TURN_SLACK_MS,
        "an answer took {slowest} ms: the wait for a turn is not bounded"
    );
    let (first, last) = (
        finished.iter().min().unwrap(),
        finished.iter().max().unwrap(),
    );
    assert!(
        *last as f64 <= *first as f64 * FAIR_SPREAD + 1000.0,
        "one replica's clients were starved: done at {finished:?} ms"
    );
    let (_, d) = http(addrs[1], "GET", &format!("/v1/datasets/{id}"), None, None).unwrap();
    assert_eq!(d["charges"], (clients * each) as u64, "{d}");
    Some(times)
}

/// How much later one replica's clients may finish than another's (ratio, plus 1 s for the
/// test's own scheduling), when they send the same number of charges at once: each replica takes
/// turns through compare-and-swap, so a replica whose writers lost every race would finish last
/// by far (a winner retries at once while a loser backs off).
const FAIR_SPREAD: f64 = 1.5;

/// Other numbers than the report's (1,000 charges with 39 s tails, 390 busy).
#[test]
fn contention_on_one_dataset_across_replicas_is_bounded() {
    contend(30, 20);
}

/// The report's numbers: 1,000 charges on one dataset across three replicas, from 50 clients.
#[test]
fn the_reported_contention_is_bounded_and_fair() {
    contend(50, 20);
}

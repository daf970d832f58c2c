//! A PostgreSQL that stops answering (issue 34, row 2), without touching the shared server: the
//! service reaches it through a TCP relay the test can freeze (connections stay open, nothing is
//! forwarded: a hung server, a stalled network) and thaw. Runs when `TEST_DATABASE_URL` is set.

use super::crash::{http, Server};
use super::store::postgres_url;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The store timeout the service promises (`STORE_TIMEOUT`, 3 s), and the slack allowed on top
/// of it for scheduling on a loaded 2-core machine: a 503 must come within their sum.
const STORE_TIMEOUT_MS: usize = 3000;
const SLACK_MS: usize = 1500;

/// A relay from a local port to `upstream` that forwards nothing while `frozen` is set.
fn relay(upstream: std::net::SocketAddr, frozen: Arc<AtomicBool>) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let frozen = frozen.clone();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(pipe(cr, sw, frozen.clone()));
                    tokio::spawn(pipe(sr, cw, frozen));
                });
            }
        });
    });
    addr
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// 48 writers on one dataset while the database hangs for 8 s: every request answers 503 within
/// the store timeout (none waits its turn behind the others' timeouts, none is held to the
/// request timeout), health answers throughout, and after the thaw charges land again with
/// nothing lost and no retried key charged twice.
#[test]
fn a_hung_database_fails_queued_requests_within_the_store_timeout() {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the hung-database test");
        return;
    };
    // postgres://user@host:port/db: the relay takes host:port's place.
    let start = url
        .find('@')
        .map_or(url.find("://").unwrap() + 3, |i| i + 1);
    let end = start + url[start..].find('/').unwrap_or(url.len() - start);
    let hostport = &url[start..end];
    let hostport = if hostport.contains(':') {
        hostport.to_owned()
    } else {
        format!("{hostport}:5432")
    };
    let upstream = std::net::ToSocketAddrs::to_socket_addrs(&hostport)
        .unwrap()
        .next()
        .unwrap();
    let frozen = Arc::new(AtomicBool::new(false));
    let via = relay(upstream, frozen.clone());
    let relayed = format!("{}{via}{}", &url[..start], &url[end..]);
    let server = Server::start(&relayed);
    let addr = server.addr;
    let id = format!("hung-{}", uuid::Uuid::new_v4().simple());
    let created = json!({"id": id, "budget": {"mu": 1.0}});
    let (s, _) = http(addr, "POST", "/v1/datasets", Some(&created), None).unwrap();
    assert_eq!(s, 201);

    let writers = Writers::spawn(addr, &id, 48, 0.01, "while the database hangs");
    std::thread::sleep(Duration::from_millis(800));
    frozen.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1000));
    let t = Instant::now();
    let (health, _) = http(addr, "GET", "/healthz", None, None).unwrap();
    assert_eq!(health, 200);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "/healthz waited on the database"
    );
    std::thread::sleep(Duration::from_millis(7000));
    frozen.store(false, Ordering::SeqCst);
    let thawed = Instant::now();
    let before = writers.acked();
    while writers.acked() < before + 10 {
        assert!(
            thawed.elapsed() < Duration::from_secs(60),
            "charges did not land again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (acked, unavailable, slowest) = writers.finish();
    eprintln!("hung database: {unavailable} answers 503, slowest {slowest} ms");
    assert!(unavailable >= 48, "requests during the hang must get 503");
    assert!(
        slowest < STORE_TIMEOUT_MS + SLACK_MS,
        "a 503 took {slowest} ms: more than the store timeout"
    );
    // Nothing acknowledged is lost, no retried key is charged twice.
    assert_kept_once(addr, &id, &acked);
    server.kill();
}

/// Writers charging one dataset in a loop until told to stop, each retrying a refused charge with
/// its key (it must not be charged twice): the keys acknowledged, the 503s answered and the
/// slowest of them (ms).
pub(super) struct Writers {
    acked: Arc<Mutex<Vec<String>>>,
    unavailable: Arc<AtomicUsize>,
    slowest_503: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    /// `n` writers of μ-GDP charges on dataset `id`; `during` names the outage in the panic when
    /// the service does not answer at all.
    pub(super) fn spawn(
        addr: SocketAddr,
        id: &str,
        n: usize,
        mu: f64,
        during: &'static str,
    ) -> Self {
        let w = Writers {
            acked: Arc::default(),
            unavailable: Arc::default(),
            slowest_503: Arc::default(),
            stop: Arc::default(),
            threads: Vec::new(),
        };
        let threads = (0..n)
            .map(|k| {
                let (acked, unavailable, slowest_503, stop) = (
                    w.acked.clone(),
                    w.unavailable.clone(),
                    w.slowest_503.clone(),
                    w.stop.clone(),
                );
                let path = format!("/v1/datasets/{id}/charges");
                std::thread::spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("w{k}-r{i}");
                        let body = json!({"event": {"type": "gdp", "mu": mu}, "label": key});
                        let t = Instant::now();
                        match http(addr, "POST", &path, Some(&body), Some(&key)) {
                            Ok((200 | 201, _)) => {
                                acked.lock().unwrap().push(key);
                                i += 1;
                            }
                            Ok((409, _)) => i += 1,
                            Ok((503, _)) => {
                                unavailable.fetch_add(1, Ordering::SeqCst);
                                let ms = t.elapsed().as_millis() as usize;
                                slowest_503.fetch_max(ms, Ordering::SeqCst);
                                // Retry the same key: it must not be charged twice.
                                std::thread::sleep(Duration::from_millis(50));
                            }
                            Ok((s, b)) => panic!("unexpected {s}: {b}"),
                            Err(e) => panic!("the service must answer {during}: {e}"),
                        }
                    }
                })
            })
            .collect();
        Writers { threads, ..w }
    }

    /// How many charges were acknowledged so far.
    pub(super) fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Stops the writers: (keys acknowledged, 503s answered, the slowest 503 in ms).
    pub(super) fn finish(self) -> (Vec<String>, usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        let acked = self.acked.lock().unwrap().clone();
        (
            acked,
            self.unavailable.load(Ordering::SeqCst),
            self.slowest_503.load(Ordering::SeqCst),
        )
    }
}

/// Every acknowledged key is among dataset `id`'s charges (nothing acknowledged was lost) and no
/// label is there twice (no retried key was charged twice).
pub(super) fn assert_kept_once(addr: SocketAddr, id: &str, acked: &[String]) {
    let mut labels = Vec::new();
    let mut after = 0;
    loop {
        let uri = format!("/v1/datasets/{id}/charges?limit=1000&after={after}");
        let (_, page) = http(addr, "GET", &uri, None, None).unwrap();
        for e in page["items"].as_array().unwrap() {
            labels.push(e["charge"]["label"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_i64() {
            Some(c) => after = c,
            None => break,
        }
    }
    for k in acked {
        assert!(labels.contains(k), "acknowledged charge {k} was lost");
    }
    let n = labels.len();
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), n, "a retried key was charged twice");
}

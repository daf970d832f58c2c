//! Durability: the real binary killed with SIGKILL during a stream of charges loses no acknowledged
//! charge and never overspends.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A minimal HTTP/1.1 client (one request per connection).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
    key: Option<&str>,
) -> std::io::Result<(u16, Value)> {
    http_with_head(addr, method, path, body, key).map(|(s, _, b)| (s, b))
}

/// [`http`], with the response's head (status line and headers) in lower case.
pub fn http_with_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
    key: Option<&str>,
) -> std::io::Result<(u16, String, Value)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let payload = body.map(Value::to_string).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        payload.len()
    );
    if let Some(k) = key {
        req.push_str(&format!("Idempotency-Key: {k}\r\n"));
    }
    if let Some(t) = token_for(addr.port()) {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&payload);
    s.write_all(req.as_bytes())?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status: u16 = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status line"))?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let body = serde_json::from_str(body).unwrap_or(Value::Null);
    Ok((status, head.to_lowercase(), body))
}

/// The token `http` sends to the server on each port.
static TOKENS: std::sync::OnceLock<Mutex<std::collections::HashMap<u16, String>>> =
    std::sync::OnceLock::new();

fn token_for(port: u16) -> Option<String> {
    TOKENS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .get(&port)
        .cloned()
}

/// A fresh admin token on the database at `db`, made with the operators' command.
pub fn cli_token(db: &str) -> String {
    cli_token_named(db, "tests")
}

/// A fresh admin token for principal `name` on the database at `db`.
pub fn cli_token_named(db: &str, name: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_privacy-ledger"))
        .args([
            "token",
            "create",
            "--name",
            name,
            "--role",
            "admin",
            "--database-url",
            db,
        ])
        .output()
        .expect("binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8(out.stdout).unwrap();
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("bearer token (shown once, keep it): pl_"),
        "{out}"
    );
    first.rsplit(' ').next().unwrap().to_owned()
}

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// The admin token printed by the first start of an empty store, if this start printed one.
    pub first_token: Option<String>,
}

impl Server {
    /// Starts the binary on `db`; `http` then authenticates with the first start's token, or
    /// with one made by `privacy-ledger token create` when the store had tokens already.
    pub fn start(db: &str) -> Server {
        Self::start_with(db, &[])
    }

    /// [`Server::start`] with more `serve` flags.
    pub fn start_with(db: &str, flags: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_privacy-ledger"))
            .args(["serve", "--listen", "127.0.0.1:0", "--database-url", db])
            .args(flags)
            .env("RUST_LOG", "warn")
            // These tests hammer one token on purpose (durability, outages): no rate limit.
            .env("PRIVACY_LEDGER_RATE_LIMIT_PER_SECOND", "1000000")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("binary starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut first_token = None;
        let mut skipped = 0;
        let addr: SocketAddr = loop {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            if let Some(t) = line
                .trim()
                .strip_prefix("admin token (first start; shown once, keep it): ")
            {
                first_token = Some(t.to_owned());
                continue;
            }
            match line.trim().strip_prefix("listening on ") {
                Some(a) => break a.parse().unwrap(),
                // A warning logged while starting (a slow migration statement on a busy
                // database) is not the address line: read on, a bounded number of lines.
                None if !line.is_empty() && skipped < 100 => skipped += 1,
                None => panic!("unexpected line {line:?}"),
            }
        };
        let token = first_token.clone().unwrap_or_else(|| cli_token(db));
        TOKENS
            .get_or_init(Default::default)
            .lock()
            .unwrap()
            .insert(addr.port(), token);
        Server {
            child,
            addr,
            first_token,
        }
    }

    pub fn kill(mut self) {
        // SIGKILL on Unix: no graceful shutdown, no flush.
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// A server left by a test (one that failed, or forgot to kill it) is killed with it: a leaked
/// server keeps its database connections, and enough of them starve every other test of
/// PostgreSQL's 100.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn acknowledged_charges_survive_sigkill_and_the_budget_is_never_exceeded() {
    let dir = super::api::temp_dir("crash");
    let db = format!("sqlite://{}", dir.join("ledger.db").display());
    let server = Server::start(&db);
    let addr = server.addr;
    // μ budget 1, charges of 0.05-GDP: at most 400 fit.
    let (s, _) = http(
        addr,
        "POST",
        "/v1/datasets",
        Some(&json!({"id": "d", "budget": {"mu": 1.0}})),
        None,
    )
    .unwrap();
    assert_eq!(s, 201);
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (acked, stop) = (acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("w{w}-{i}");
                    let body = json!({"event": {"type": "gdp", "mu": 0.05}, "label": key});
                    match http(
                        addr,
                        "POST",
                        "/v1/datasets/d/charges",
                        Some(&body),
                        Some(&key),
                    ) {
                        Ok((201, _)) => acked.lock().unwrap().push(key),
                        Ok((409, _)) => {}
                        Ok((s, b)) => panic!("unexpected {s}: {b}"),
                        Err(_) => break, // the server is gone
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let t = Instant::now();
    while acked.lock().unwrap().len() < 60 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 60,
        "only {} charges acknowledged",
        acked.len()
    );

    let server = Server::start(&db);
    let addr = server.addr;
    let mut labels = Vec::new();
    let mut after = 0;
    loop {
        let (s, page) = http(
            addr,
            "GET",
            &format!("/v1/datasets/d/charges?after={after}&limit=1000"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(s, 200);
        for e in page["items"].as_array().unwrap() {
            labels.push(e["charge"]["label"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_i64() {
            Some(c) => after = c,
            None => break,
        }
    }
    for k in &acked {
        assert!(labels.contains(k), "acknowledged charge {k} was lost");
    }
    let (_, d) = http(addr, "GET", "/v1/datasets/d", None, None).unwrap();
    assert_eq!(d["charges"].as_i64().unwrap() as usize, labels.len());
    assert!(d["mu_spent"].as_f64().unwrap() <= 1.0 + 1e-9);
    // A retry of an acknowledged charge after the restart, by the same principal (a new token of
    // the first start's "bootstrap admin"), replays; it does not charge again. (Keys are scoped to
    // their principal: another principal's request with that key is its own.)
    TOKENS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .insert(addr.port(), cli_token_named(&db, "bootstrap admin"));
    let first = &acked[0];
    let body = json!({"event": {"type": "gdp", "mu": 0.05}, "label": first});
    let (s, _) = http(
        addr,
        "POST",
        "/v1/datasets/d/charges",
        Some(&body),
        Some(first),
    )
    .unwrap();
    assert_eq!(s, 200);
    let (_, d2) = http(addr, "GET", "/v1/datasets/d", None, None).unwrap();
    assert_eq!(d2["charges"], d["charges"]);
    server.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM while a long accounting runs: the computation stops at its next check and the process
/// exits within a few seconds (it used to keep computing and ignore the signal).
#[test]
fn sigterm_during_a_long_computation_exits_within_seconds() {
    let dir = super::api::temp_dir("sigterm");
    let db = format!("sqlite://{}", dir.join("l.db").display());
    let mut server = Server::start(&db);
    let addr = server.addr;
    let events: Vec<Value> = (0..20000)
        .map(|i| json!({"type": "laplace", "noise_multiplier": 5.0 + i as f64 * 1e-4}))
        .collect();
    let body = json!({"events": events, "grid_step": 1e-5});
    let client =
        std::thread::spawn(move || http(addr, "POST", "/v1/accountant/compose", Some(&body), None));
    // Let the computation start, then ask the process to stop.
    std::thread::sleep(Duration::from_millis(700));
    let pid = server.child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success());
    let t = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(8),
            "still running 8 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("exited {:?} after SIGTERM", t.elapsed());
    // The in-flight request was answered: its computation stopped for the shutdown.
    let (status, b) = client.join().unwrap().unwrap();
    assert_eq!(
        (status, b["error"].as_str()),
        (503, Some("computation_stopped")),
        "{b}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

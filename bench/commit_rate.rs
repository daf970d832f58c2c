//! Durable charges per second through the service against raw durable commits of the same
//! database engine, on the same machine and file system, in one run.
//!
//! ```sh
//! cargo build --release && cargo run --release --example commit_rate -- \
//!     [--seconds 10] [--clients 32] [--datasets 16] [--postgres postgres://postgres@127.0.0.1:5432/test]
//! ```
//!
//! 1. **Raw SQLite**: one connection to a fresh file in a temporary directory, WAL,
//!    `synchronous = FULL` (what the service uses), committing one-row transactions back to back.
//! 2. **Service on SQLite**: the release binary (`target/release/privacy-ledger`) on a fresh file in
//!    the same directory; `--clients` concurrent keep-alive clients charge GDP units (μ = 10⁻³,
//!    each with its own Idempotency-Key) round-robin over `--datasets` datasets. Every 201 is
//!    durable (the service acknowledges only after its commit).
//! 3. With `--postgres`: the same two on PostgreSQL (raw: one connection, one-row transactions).
//!
//! Prints rates, p50/p99 latencies and the ratio service/raw.

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    seconds: f64,
    clients: usize,
    datasets: usize,
    postgres: Option<String>,
    binary: String,
}

fn args() -> Args {
    let mut a = Args {
        seconds: 10.0,
        clients: 32,
        datasets: 16,
        postgres: None,
        binary: "target/release/privacy-ledger".into(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let next = v.get(i + 1).cloned().unwrap_or_default();
        match v[i].as_str() {
            "--seconds" => a.seconds = next.parse().expect("--seconds"),
            "--clients" => a.clients = next.parse().expect("--clients"),
            "--datasets" => a.datasets = next.parse().expect("--datasets"),
            "--postgres" => a.postgres = Some(next),
            "--binary" => a.binary = next,
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

/// Rate per second and p50/p99 in milliseconds.
struct Measured {
    rate: f64,
    p50: f64,
    p99: f64,
}

fn measured(mut lat: Vec<f64>, elapsed: f64) -> Measured {
    lat.sort_by(f64::total_cmp);
    let at = |p: f64| lat[((p * lat.len() as f64) as usize).min(lat.len() - 1)];
    Measured {
        rate: lat.len() as f64 / elapsed,
        p50: at(0.5) * 1e3,
        p99: at(0.99) * 1e3,
    }
}

async fn raw_sqlite(dir: &std::path::Path, seconds: f64) -> Measured {
    let mut conn =
        SqliteConnectOptions::from_str(&format!("sqlite://{}", dir.join("raw.db").display()))
            .unwrap()
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .connect()
            .await
            .unwrap();
    sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        .execute(&mut conn)
        .await
        .unwrap();
    let (start, mut lat) = (Instant::now(), Vec::new());
    while start.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        let mut tx = conn.begin().await.unwrap();
        sqlx::query("INSERT INTO t (v) VALUES (?)")
            .bind("a charge-sized row of text")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        lat.push(t.elapsed().as_secs_f64());
    }
    measured(lat, start.elapsed().as_secs_f64())
}

async fn raw_postgres(url: &str, seconds: f64) -> Measured {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let table = format!("raw_commit_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!(
        "CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let insert = format!("INSERT INTO {table} (v) VALUES ($1)");
    let (start, mut lat) = (Instant::now(), Vec::new());
    while start.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        let mut tx = conn.begin().await.unwrap();
        sqlx::query(&insert)
            .bind("a charge-sized row of text")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        lat.push(t.elapsed().as_secs_f64());
    }
    let m = measured(lat, start.elapsed().as_secs_f64());
    sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&mut conn)
        .await
        .unwrap();
    m
}

/// The service, started on `database_url`; its address and first admin token.
struct Service {
    child: Child,
    base: String,
    token: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(binary: &str, database_url: &str, token: Option<&str>) -> Service {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(binary)
        .args([
            "serve",
            "--database-url",
            database_url,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--rate-limit-per-second",
            "1000000",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {binary} (build it with cargo build --release): {e}")
        });
    let mut found = token.map(str::to_owned);
    let out = BufReader::new(child.stdout.take().unwrap());
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(i) = line.find("pl_") {
            found = Some(line[i..].split_whitespace().next().unwrap().to_owned());
        }
        if line.contains("listening") {
            break;
        }
    }
    Service {
        child,
        base: format!("http://127.0.0.1:{port}"),
        token: found.expect("a token: a fresh database prints one"),
    }
}

async fn charges(s: &Service, clients: usize, datasets: usize, seconds: f64) -> Measured {
    let http = reqwest::Client::new();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let ids: Vec<String> = (0..datasets).map(|d| format!("bench-{run}-{d}")).collect();
    for id in &ids {
        let r = http
            .post(format!("{}/v1/datasets", s.base))
            .bearer_auth(&s.token)
            .header("content-type", "application/json")
            .body(format!(r#"{{"id": "{id}", "budget": {{"mu": 1000}}}}"#))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 201, "{}", r.text().await.unwrap());
    }
    let ids = Arc::new(ids);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, ids, base, token) = (http.clone(), ids.clone(), s.base.clone(), s.token.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut n = 0usize;
            while Instant::now() < deadline {
                let id = &ids[(c + n * clients) % ids.len()];
                let t = Instant::now();
                let r = http
                    .post(format!("{base}/v1/datasets/{id}/charges"))
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .header("idempotency-key", format!("c{c}-{n}"))
                    .body(r#"{"event": {"type": "gdp", "mu": 0.001}}"#)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let _ = r.bytes().await;
                assert_eq!(status, 201, "charge answered {status}");
                lat.push(t.elapsed().as_secs_f64());
                n += 1;
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    measured(lat, start.elapsed().as_secs_f64())
}

/// The mean size of the service's commit groups so far (from its `/metrics`).
async fn mean_group(s: &Service) -> f64 {
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", s.base))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    if std::env::var("SHOW_METRICS").is_ok() {
        for l in text
            .lines()
            .filter(|l| l.contains("_sum") || l.contains("_count"))
        {
            println!("{l}");
        }
    }
    value("privacy_ledger_group_commit_size_sum") / value("privacy_ledger_group_commit_size_count")
}

fn row(name: &str, m: &Measured) {
    println!("| {name} | {:.0} | {:.2} | {:.2} |", m.rate, m.p50, m.p99);
}

#[tokio::main]
async fn main() {
    let a = args();
    let dir = std::env::temp_dir().join(format!("commit-rate-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "{} s each, {} clients over {} datasets; temporary directory {}\n",
        a.seconds,
        a.clients,
        a.datasets,
        dir.display()
    );
    println!("| what | per second | p50 ms | p99 ms |\n|---|---|---|---|");
    let raw = raw_sqlite(&dir, a.seconds).await;
    row("raw SQLite one-row durable commits (1 connection)", &raw);
    let svc = start(
        &a.binary,
        &format!("sqlite://{}", dir.join("ledger.db").display()),
        None,
    );
    let ours = charges(&svc, a.clients, a.datasets, a.seconds).await;
    let group = mean_group(&svc).await;
    drop(svc);
    row("service, durable GDP charges (SQLite)", &ours);
    println!("(SQLite: {group:.1} writes per commit on average)");
    let mut ratios = vec![("SQLite", ours.rate / raw.rate)];
    if let Some(url) = &a.postgres {
        let raw = raw_postgres(url, a.seconds).await;
        row("raw PostgreSQL one-row commits (1 connection)", &raw);
        // A token for the service on PostgreSQL: the first start prints one only on an empty store.
        let token = {
            let out = Command::new(&a.binary)
                .args([
                    "token",
                    "create",
                    "--name",
                    "bench",
                    "--role",
                    "admin",
                    "--database-url",
                    url,
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.split_whitespace()
                .find(|w| w.starts_with("pl_"))
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("no token from `token create`: {text}"))
        };
        let svc = start(&a.binary, url, Some(&token));
        let ours = charges(&svc, a.clients, a.datasets, a.seconds).await;
        drop(svc);
        row("service, durable GDP charges (PostgreSQL)", &ours);
        ratios.push(("PostgreSQL", ours.rate / raw.rate));
    }
    println!();
    for (engine, r) in ratios {
        println!("{engine}: service / raw = {r:.2}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

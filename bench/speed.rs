//! The accountant in-process, timed as the service runs it: the "lib" mode of `bench/compare.py`.
//!
//! ```sh
//! cargo build --release --example speed
//! target/release/examples/speed [--repeats 3] [--identical] requests.json
//! ```
//!
//! `requests.json` is an object `{"<case>": <request>, ...}`; each request has the shape
//! `privacy-ledger account` reads (`{"events", "deltas", "grid_step", ...}`). For each case, in
//! order: one untimed run (it warms what the service keeps warm for the whole process: the FFT
//! plans), then `--repeats` timed runs of what a `POST /v1/accountant/compose` does with a body:
//! strict JSON parse, [`AccountRequest::from_json`], [`account`], and the report serialised with
//! serde_json. Prints one JSON line per case: `{case, median_s, runs, eps, eps_lower, mu_upper,
//! rss_kb}` (ε and μ of the untimed run, at the request's own grid step; `rss_kb` is the process's
//! peak resident set after the case, `VmHWM` of /proc/self/status: the same number as getrusage's
//! `ru_maxrss`, read without `unsafe`, which this crate forbids). Run one process per case when
//! the peak RSS should be the case's own.
//!
//! Leaf PLDs are memoised for the process (keyed by the event, the relation and the grid step), so
//! a repeat of the same request would skip discretising its mechanisms, which neither Python
//! library can do. Timed run k therefore uses the grid step h·(1 + k·10⁻¹²): a different cache
//! key, the same work (the grid differs in the twelfth significant digit). `--identical` times the
//! identical request instead (memo hits).

use privacy_ledger::accountant::account::{account, AccountRequest};
use privacy_ledger::accountant::json::{parse_strict, ParseError};
use serde_json::Value;
use std::time::Instant;

/// The service's allocator (src/main.rs): mimalloc keeps freed memory for reuse, which changes
/// both the time and the peak memory of a run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The grid step of the numerical engine when a request names none (the service's default).
const DEFAULT_H: f64 = 1e-4;

fn main() {
    let mut repeats = 3usize;
    let mut identical = false;
    let mut file = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeats" => {
                repeats = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n >= 1)
                    .expect("--repeats takes a whole number >= 1");
            }
            "--identical" => identical = true,
            _ if file.is_none() => file = Some(a),
            other => panic!("unknown argument {other}"),
        }
    }
    let file = file.expect("usage: speed [--repeats N] [--identical] requests.json");
    let text = std::fs::read_to_string(&file).expect("read the requests file");
    let cases: serde_json::Map<String, Value> =
        serde_json::from_str(&text).expect("the requests file is a JSON object of requests");
    for (case, request) in cases {
        let line = match run_case(&request, repeats, identical) {
            Ok(mut out) => {
                out.insert("case".into(), Value::String(case));
                out.insert(
                    "rss_kb".into(),
                    peak_rss_kb().map_or(Value::Null, Value::from),
                );
                Value::Object(out)
            }
            Err(error) => serde_json::json!({"case": case, "error": error}),
        };
        println!("{line}");
    }
}

/// One request through the service's path: body bytes to report JSON.
fn once(body: &[u8]) -> Result<String, String> {
    let v = parse_strict(body).map_err(|e| match e {
        ParseError::Syntax(m) => m,
        ParseError::Invalid(e) => format!("{}: {}", e.path, e.reason),
    })?;
    let req = AccountRequest::from_json(&v).map_err(|e| format!("{}: {}", e.path, e.reason))?;
    let report = account(&req).map_err(|e| e.to_string())?;
    Ok(serde_json::to_string(&report).expect("reports serialise"))
}

fn run_case(
    request: &Value,
    repeats: usize,
    identical: bool,
) -> Result<serde_json::Map<String, Value>, String> {
    let h = request
        .get("grid_step")
        .and_then(Value::as_f64)
        .unwrap_or(DEFAULT_H);
    // The bodies, written before the clock starts (a client sends bytes; making them is not the
    // accountant's work).
    let bodies: Vec<Vec<u8>> = (0..=repeats)
        .map(|k| {
            let mut r = request.clone();
            if k > 0 && !identical {
                let step = h * (1.0 + 1e-12 * f64::from(u32::try_from(k).unwrap_or(u32::MAX)));
                r["grid_step"] = Value::from(step);
            }
            serde_json::to_vec(&r).expect("requests serialise")
        })
        .collect();
    let warm: Value = serde_json::from_str(&once(&bodies[0])?).expect("the report is JSON");
    let mut times = Vec::with_capacity(repeats);
    for body in &bodies[1..] {
        let t = Instant::now();
        let out = once(body)?;
        times.push(t.elapsed().as_secs_f64());
        std::hint::black_box(out);
    }
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median = if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2.0
    };
    let point = &warm["epsilon"][0];
    let mut out = serde_json::Map::new();
    out.insert("median_s".into(), Value::from(median));
    out.insert("runs".into(), Value::from(times));
    out.insert("eps".into(), point["epsilon"].clone());
    out.insert("eps_lower".into(), point["epsilon_lower"].clone());
    out.insert("mu_upper".into(), warm["mu"]["upper"].clone());
    Ok(out)
}

/// Peak resident set of this process so far, in KiB (`VmHWM`).
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

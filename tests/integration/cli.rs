//! The `privacy-ledger account` command, run as a process.

use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn account(input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_privacy-ledger"))
        .arg("account")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn account_composes_gdp_and_gaussian_events_exactly() {
    // μ = √(0.6² + 4·(1/2.5)²) = √(0.36 + 0.64) = 1.
    let out = account(
        &json!({
            "events": [
                {"type": "gdp", "mu": 0.6},
                {"type": "self_composed", "count": 4,
                 "event": {"type": "gaussian", "noise_multiplier": 2.5}}
            ],
            "deltas": [1e-5], "epsilons": [1.0], "alphas": [0.05]
        })
        .to_string(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["method"], "analytic");
    let mu = r["mu"]["upper"].as_f64().unwrap();
    assert!((mu - 1.0).abs() <= 1e-12, "{mu}");
    // DRS22 Cor. 1 at μ = 1 (seed 001 D2/D3, 12+ digits).
    let d = r["delta"][0]["delta"].as_f64().unwrap();
    assert!((d / 0.126_936_737_506_644 - 1.0).abs() < 1e-9, "{d}");
    let e = r["epsilon"][0]["epsilon"].as_f64().unwrap();
    assert!((e / 4.377_178_095_68 - 1.0).abs() < 1e-9, "{e}");
    let b = r["tradeoff"][0]["beta"].as_f64().unwrap();
    assert!((b / 0.740_488_977_158_556 - 1.0).abs() < 1e-9, "{b}");
    assert_eq!(r["clt"]["approximate"], true);
    assert_eq!(r["invocations"], 5);
    assert_eq!(r["tier2"]["rows"].as_array().unwrap().len(), 8);
}

#[test]
fn account_reads_a_file_argument() {
    let dir = std::env::temp_dir().join(format!("pl-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("in.json");
    std::fs::write(&path, r#"{"events": [{"type": "gdp", "mu": 0.5}]}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_privacy-ledger"))
        .arg("account")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!((r["mu"]["upper"].as_f64().unwrap() - 0.5).abs() < 1e-15);
    // Defaults: 4 deltas, 6 epsilons, 13 alphas.
    assert_eq!(r["epsilon"].as_array().unwrap().len(), 4);
    assert_eq!(r["delta"].as_array().unwrap().len(), 6);
    assert_eq!(r["tradeoff"].as_array().unwrap().len(), 13);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn malformed_events_get_an_error_naming_the_field() {
    let out = account(
        r#"{"events": [{"type": "gdp", "mu": 1}, {"type": "gaussian", "noise_multiplier": -2}]}"#,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("$.events[1].noise_multiplier"), "{err}");
    assert!(err.contains("> 0"), "{err}");
}

#[test]
fn invalid_json_is_a_clear_error() {
    let out = account(r#"{"events": [ NaN ]}"#);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not valid JSON"), "{err}");
}

#[test]
fn subsampled_events_are_answered_by_the_numerical_engine() {
    let out = account(
        r#"{"events": [{"type": "self_composed", "count": 100, "event":
                          {"type": "poisson_sampled", "sampling_rate": 0.01,
                           "event": {"type": "gaussian", "noise_multiplier": 1.1}}}]}"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["method"], "pld");
    assert!(r["mu"]["upper"].as_f64().unwrap() > 0.0);
}

#[test]
fn events_without_meaning_under_the_relation_get_exit_code_3_and_a_reason() {
    let out = account(
        r#"{"events": [{"type": "sampled_without_replacement", "sample_size": 10,
                          "population_size": 100, "event": {"type": "gaussian", "noise_multiplier": 1.1}}]}"#,
    );
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("$.events[0]"), "{err}");
    assert!(err.contains("replace_one"), "{err}");
}

#[test]
fn adversarial_sizes_fail_fast_with_a_clear_error() {
    // σ = 1e-6 under subsampling: a privacy-loss range of ~1e11 would need ~1e15 grid points.
    let t = std::time::Instant::now();
    let out = account(
        r#"{"events": [{"type": "self_composed", "count": 1000000000000, "event":
                          {"type": "poisson_sampled", "sampling_rate": 0.5,
                           "event": {"type": "gaussian", "noise_multiplier": 1e-6}}}],
            "grid_step": 1e-6}"#,
    );
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("grid points"), "{err}");
    assert!(t.elapsed().as_secs() < 10, "must fail fast");
}

/// An expiry beyond what the API allows is a clear error, not a panic (issue 34, row 9).
#[test]
fn token_expiry_is_bounded_like_the_api() {
    let dir = super::api::temp_dir("cli-expiry");
    let db = format!("sqlite://{}", dir.join("ledger.db").display());
    for days in ["4294967295", "3651", "0"] {
        let out = Command::new(env!("CARGO_BIN_EXE_privacy-ledger"))
            .args(["token", "create", "--name", "ci", "--expires-in-days", days])
            .args(["--database-url", &db])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{days}: {err}");
        assert!(
            err.contains("--expires-in-days") && !err.contains("panicked"),
            "{err}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_privacy-ledger"))
        .args([
            "token",
            "create",
            "--name",
            "ci",
            "--expires-in-days",
            "3650",
        ])
        .args(["--database-url", &db])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

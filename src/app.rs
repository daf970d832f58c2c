//! Wiring: build the application from its configuration, serve it, shut down gracefully.

use crate::accountant::params::GridStep;
use crate::config::{LogFormat, ServeConfig};
use crate::http::{self, AppState, Limits};
use crate::ledger::Ledgers;
use crate::store::{postgres::PostgresStore, sqlite::SqliteStore, Store, StoreError};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;

/// Histogram buckets for durations, in seconds (0.5 ms to 60 s).
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Histogram buckets for the number of appends sharing a commit.
const GROUP_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// The process-wide Prometheus recorder (installed once, shared by every router built here):
/// histograms (not summaries) with fixed buckets, and HELP text for every metric.
pub fn metrics_handle() -> PrometheusHandle {
    use metrics_exporter_prometheus::Matcher;
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(SECONDS_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("privacy_ledger_group_commit_size".into()),
                        GROUP_BUCKETS,
                    )
                })
                .expect("fixed, non-empty buckets")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (tests); then ours just stays empty.
            let _ = metrics::set_global_recorder(recorder);
            describe_metrics();
            handle
        })
        .clone()
}

/// HELP text of every metric the service records (one place).
fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        "privacy_ledger_charges_total",
        "Units gated, by dataset and outcome (admitted, replayed, rejected, error)"
    );
    describe_histogram!(
        "privacy_ledger_gate_seconds",
        Unit::Seconds,
        "Time to gate a unit: lock, accounting and durable append"
    );
    describe_counter!(
        "privacy_ledger_multi_charges_total",
        "Charges on several ledgers (POST /v1/charges), by outcome (admitted, replayed, rejected, error)"
    );
    describe_histogram!(
        "privacy_ledger_multi_charge_seconds",
        Unit::Seconds,
        "Time of a charge on several ledgers: locks, every ledger's gate and the one durable append"
    );
    describe_histogram!(
        "privacy_ledger_accountant_seconds",
        Unit::Seconds,
        "Time of the accountant's part of a gate decision"
    );
    describe_counter!(
        "privacy_ledger_computations_stopped_total",
        "Computations stopped before the end, by reason (abandoned, deadline, shutdown)"
    );
    describe_counter!(
        "privacy_ledger_computations_shed_total",
        "Numerical computations refused with 503 overloaded, by reason (queue_full, waited_too_long)"
    );
    describe_histogram!(
        "privacy_ledger_group_commit_size",
        "Writes (appends, datasets, tokens, grants, audit records) committed together in one SQLite transaction"
    );
    describe_histogram!(
        "privacy_ledger_group_commit_seconds",
        Unit::Seconds,
        "Time of one SQLite commit group: its writes and the durable COMMIT"
    );
    describe_histogram!(
        "privacy_ledger_commit_seconds",
        Unit::Seconds,
        "Time of a SQLite group's COMMIT alone (WAL writes and fsync)"
    );
    describe_gauge!(
        "privacy_ledger_budget_used_ratio",
        "Share of the dataset's budget used in the filter's own terms: max((mu spent/mu budget)^2, delta spent/delta budget); 1 when exhausted (above 1 only after the budget was lowered below the spending)"
    );
    describe_gauge!("privacy_ledger_budget_mu", "The dataset's budget mu_B");
    describe_gauge!(
        "privacy_ledger_budget_remaining_mu",
        "The largest mu a further unit on the dataset can have: sqrt(mu_B^2 - sum mu_i^2), rounded down"
    );
    describe_gauge!(
        "privacy_ledger_budget_remaining_delta",
        "delta_B - sum delta_i on the dataset, rounded down"
    );
    describe_gauge!(
        "privacy_ledger_budget_units",
        "Units counted by the dataset's filter (reserved ones included, released ones not)"
    );
    describe_gauge!(
        "privacy_ledger_budget_reserved_units",
        "Units reserved on the dataset and not yet committed or released"
    );
    describe_gauge!(
        "privacy_ledger_budget_exhausted",
        "1 when nothing more that spends mu can be charged on the dataset"
    );
    describe_gauge!(
        "privacy_ledger_budget_days_left",
        "Days until the dataset's budget is used at the rate of the last 7 days' units (+Inf: nothing spent in that time); a forecast, every charge is still gated"
    );
    describe_gauge!(
        "privacy_ledger_budget_gauges_truncated",
        "1 when there are more datasets than the budget gauges cover (the first 500 by id)"
    );
    describe_gauge!(
        "privacy_ledger_quota_used_ratio",
        "Share of a quota (holder *: the unallocated share) used, in the filter's terms"
    );
    describe_gauge!(
        "privacy_ledger_quota_remaining_mu",
        "The largest mu a further unit charged to the quota can have"
    );
    describe_gauge!(
        "privacy_ledger_blocks_used_ratio_max",
        "A partitioned dataset: the largest used share over its blocks (the first 400 by name)"
    );
    describe_gauge!(
        "privacy_ledger_blocks_exhausted",
        "A partitioned dataset: blocks exhausted (of the first 400 by name)"
    );
    describe_gauge!(
        "privacy_ledger_blocks",
        "A partitioned dataset: blocks with a ledger (counted up to 400)"
    );
    describe_gauge!(
        "privacy_ledger_sqlite_wal_frames",
        "Frames in the SQLite write-ahead log at the last checkpoint"
    );
    describe_gauge!(
        "privacy_ledger_sqlite_wal_frames_uncopied",
        "Frames the last SQLite checkpoint could not copy into the database file (readers still use them)"
    );
    describe_counter!(
        "privacy_ledger_http_requests_total",
        "HTTP requests answered, by method, route template and status"
    );
    describe_histogram!(
        "privacy_ledger_http_request_duration_seconds",
        Unit::Seconds,
        "HTTP request latency, by method and route template"
    );
    http::process_metrics().describe();
}

/// Opens the store named by a database URL.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresStore::connect(url).await?))
    } else {
        Err(StoreError::Unavailable(format!(
            "unsupported database URL {url:?}: use sqlite://FILE or postgres://…"
        )))
    }
}

/// The application state over a store.
pub fn state(store: Arc<dyn Store>, default_grid_step: GridStep) -> AppState {
    state_over(Ledgers::new(store), default_grid_step)
}

/// The application state over ledgers (e.g. with OIDC).
pub fn state_over(ledgers: Ledgers, default_grid_step: GridStep) -> AppState {
    AppState {
        ledgers: Arc::new(ledgers),
        metrics: metrics_handle(),
        default_grid_step,
        limiter: Arc::new(http::rate::RateLimiter::new(
            Limits::default().rate_per_second,
            Limits::default().rate_burst,
        )),
        auth_failures: Arc::new(http::rate::RateLimiter::new(
            http::rate::FAILED_AUTH_PER_SECOND,
            http::rate::FAILED_AUTH_BURST,
        )),
    }
}

/// Initialises logging.
pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// A built application: bound, not yet serving.
pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    connections: http::conn::ConnLimits,
    first_token: Option<String>,
}

/// A database URL with its password (if any) hidden, for messages and logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].find(':') {
            Some(c) => format!("{}:***{}", &url[..s + 3 + c], &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
    }
}

impl Application {
    /// Opens the store (creating an SQLite file with its schema if needed) and binds the listener.
    pub async fn build(cfg: &ServeConfig) -> Result<Self, String> {
        cfg.validate()?;
        let store = open_store(&cfg.database_url).await.map_err(|e| {
            format!(
                "cannot open {}: {}",
                redact(&cfg.database_url),
                redact(&e.to_string())
            )
        })?;
        let limits = Limits {
            max_body_bytes: cfg.max_body_bytes,
            request_timeout: Duration::from_secs(cfg.request_timeout_secs),
            rate_per_second: cfg.rate_limit_per_second,
            rate_burst: 2.0 * cfg.rate_limit_per_second,
        };
        let mut ledgers = Ledgers::new(store).with_admission(cfg.admission());
        if let Some(alerts) = cfg.alerts()? {
            ledgers = ledgers.with_alerts(alerts);
        }
        if let Some(oidc) = cfg.oidc()? {
            let oidc = crate::ledger::oidc::Oidc::new(oidc).await?;
            ledgers = ledgers.with_oidc(Arc::new(oidc));
        }
        let st = state_over(ledgers, cfg.grid_step()?);
        // Secure by default: an empty store gets its first admin token now, shown once.
        let first_token = st
            .ledgers
            .bootstrap_admin()
            .await
            .map_err(|e| format!("cannot create the first admin token: {e}"))?
            .map(|t| t.secret);
        let router = http::with_cors(http::router(st, limits), &cfg.cors_origins);
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
        Ok(Application {
            listener,
            router,
            connections: cfg.connections(),
            first_token,
        })
    }

    /// The admin token made on this first start of an empty store (shown once), if any.
    pub fn first_token(&self) -> Option<&str> {
        self.first_token.as_deref()
    }

    /// The bound address (port 0 resolves here).
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.listener.local_addr().expect("bound")
    }

    /// Serves until SIGINT/SIGTERM, then finishes in-flight requests (each connection under
    /// [`http::conn::ConnLimits`]).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        http::conn::serve(
            self.listener,
            self.router,
            self.connections,
            shutdown_signal(),
        )
        .await
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
    // Running computations stop at their next check, so in-flight requests end within seconds.
    crate::accountant::work::stop_all();
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn database_passwords_never_reach_messages() {
        assert_eq!(
            redact("postgres://ledger:s3cret@db:5432/ledger"),
            "postgres://ledger:***@db:5432/ledger"
        );
        assert_eq!(
            redact("error connecting to postgres://u:p@h/x"),
            "error connecting to postgres://u:***@h/x"
        );
        assert_eq!(redact("postgres://u@h/x"), "postgres://u@h/x");
        assert_eq!(
            redact("sqlite://privacy-ledger.db"),
            "sqlite://privacy-ledger.db"
        );
    }
}

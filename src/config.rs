//! Configuration of `privacy-ledger serve`: flags with environment fallbacks, validated once.

use clap::{Args, ValueEnum};
use std::net::SocketAddr;

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `serve` options.
#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// Address to listen on.
    #[arg(long, env = "PRIVACY_LEDGER_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Database URL: `sqlite://FILE` (created with its schema on first start) or `postgres://...`.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://privacy-ledger.db"
    )]
    pub database_url: String,
    /// Grid step of the numerical accountant for datasets created without one.
    #[arg(long, env = "PRIVACY_LEDGER_DEFAULT_GRID_STEP", default_value_t = crate::accountant::pld::DEFAULT_GRID_STEP)]
    pub default_grid_step: f64,
    /// Largest request body accepted, in bytes (413 beyond).
    #[arg(long, env = "PRIVACY_LEDGER_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Longest a request may take, in seconds (408 beyond).
    #[arg(
        long,
        env = "PRIVACY_LEDGER_REQUEST_TIMEOUT_SECS",
        default_value_t = 60
    )]
    pub request_timeout_secs: u64,
    /// Requests per second per token, on average (twice as many at once); 429 beyond.
    #[arg(
        long,
        env = "PRIVACY_LEDGER_RATE_LIMIT_PER_SECOND",
        default_value_t = 100.0
    )]
    pub rate_limit_per_second: f64,
    /// Origins whose browser pages may call the API (CORS), e.g. `https://dash.example.org`;
    /// repeat or separate with commas. None by default: no CORS headers at all.
    #[arg(
        long = "cors-origin",
        env = "PRIVACY_LEDGER_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Log format.
    #[arg(
        long,
        env = "PRIVACY_LEDGER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

impl ServeConfig {
    /// The validated default grid step.
    pub fn grid_step(&self) -> Result<crate::accountant::params::GridStep, String> {
        crate::accountant::params::GridStep::new(self.default_grid_step)
            .map_err(|r| format!("--default-grid-step {r}"))
    }

    /// Checks values clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        self.grid_step()?;
        if self.max_body_bytes < 1024 {
            return Err("--max-body-bytes must be at least 1024".into());
        }
        if !(self.rate_limit_per_second >= 0.1 && self.rate_limit_per_second <= 1e6) {
            return Err("--rate-limit-per-second must be a number in [0.1, 1e6]".into());
        }
        for o in &self.cors_origins {
            let ok = (o.starts_with("https://") || o.starts_with("http://"))
                && !o.ends_with('/')
                && axum::http::HeaderValue::from_str(o).is_ok();
            if !ok {
                return Err(format!(
                    "--cors-origin {o:?} must be an origin: scheme and host, e.g. https://dash.example.org"
                ));
            }
        }
        if self.request_timeout_secs == 0 {
            return Err("--request-timeout-secs must be at least 1".into());
        }
        Ok(())
    }
}

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
    /// Numerical computations (privacy-loss distributions) running at once; each can take a few
    /// hundred MB at the finest grids, so this bounds memory. Default: cores − 1 (at least 1).
    #[arg(long, env = "PRIVACY_LEDGER_MAX_CONCURRENT_COMPUTATIONS")]
    pub max_concurrent_computations: Option<usize>,
    /// Numerical computations waiting at once (at most 10 s each); beyond, 503 `overloaded` with
    /// Retry-After. Default: 4 × --max-concurrent-computations.
    #[arg(long, env = "PRIVACY_LEDGER_COMPUTATION_QUEUE")]
    pub computation_queue: Option<usize>,
    /// POST budget alerts here (a dataset's used share crossing 50, 75, 90 %, or its own
    /// thresholds, and exhaustion), signed with PRIVACY_LEDGER_ALERT_WEBHOOK_SECRET.
    #[arg(long, env = "PRIVACY_LEDGER_ALERT_WEBHOOK_URL")]
    pub alert_webhook_url: Option<String>,
    /// The alert webhook's signing secret (at least 16 bytes; from the environment only).
    #[arg(skip = std::env::var("PRIVACY_LEDGER_ALERT_WEBHOOK_SECRET").ok())]
    pub alert_webhook_secret: Option<String>,
    /// Accept JWTs from this OpenID Connect issuer (its `iss`) as bearer tokens, besides the
    /// service's own tokens; needs --oidc-audience and a key set (--oidc-jwks-file or -url).
    #[arg(long, env = "PRIVACY_LEDGER_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// The audience (`aud`) accepted JWTs must name.
    #[arg(long, env = "PRIVACY_LEDGER_OIDC_AUDIENCE")]
    pub oidc_audience: Option<String>,
    /// The issuer's public keys, a JWK set in a file (re-read when a token names an unknown key).
    #[arg(
        long,
        env = "PRIVACY_LEDGER_OIDC_JWKS_FILE",
        conflicts_with = "oidc_jwks_url"
    )]
    pub oidc_jwks_file: Option<std::path::PathBuf>,
    /// The issuer's public keys, a JWK set at an https:// URL (refreshed every 10 minutes and
    /// when a token names an unknown key).
    #[arg(long, env = "PRIVACY_LEDGER_OIDC_JWKS_URL")]
    pub oidc_jwks_url: Option<String>,
    /// The JWT claim naming the principal.
    #[arg(
        long,
        env = "PRIVACY_LEDGER_OIDC_PRINCIPAL_CLAIM",
        default_value = "sub"
    )]
    pub oidc_principal_claim: String,
    /// Put before that claim's value to make the principal's name: the provider's principals in
    /// their own namespace. Empty: the provider's names are local principals' names (a JWT with
    /// `sub` = a token's name gets that token's grants; only where users cannot choose the claim).
    #[arg(
        long,
        env = "PRIVACY_LEDGER_OIDC_PRINCIPAL_PREFIX",
        default_value = crate::ledger::oidc::OIDC_NAMESPACE
    )]
    pub oidc_principal_prefix: String,
    /// The JWT claim holding the global role (admin, analyst, auditor; absent: grants only).
    #[arg(
        long,
        env = "PRIVACY_LEDGER_OIDC_ROLE_CLAIM",
        default_value = "privacy_ledger_role"
    )]
    pub oidc_role_claim: String,
    /// Longest a JWT may still be valid when presented, in seconds (JWTs cannot be revoked
    /// here: this bounds how long one outlives its revocation at the provider).
    #[arg(
        long,
        env = "PRIVACY_LEDGER_OIDC_MAX_TOKEN_LIFETIME_SECS",
        default_value_t = 3600
    )]
    pub oidc_max_token_lifetime_secs: u64,
    /// Longest a connection may take to send a request's head, or stay idle between requests,
    /// in seconds; then it is closed.
    #[arg(long, env = "PRIVACY_LEDGER_HEADER_TIMEOUT_SECS", default_value_t = 15)]
    pub header_timeout_secs: u64,
    /// Connections served at once (at most the open-file limit less 256); beyond, only health
    /// checks are answered (others 503 `too_many_connections`).
    #[arg(long, env = "PRIVACY_LEDGER_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Connections served at once from one client address (behind a reverse proxy every
    /// connection comes from the proxy: raise it to --max-connections there).
    #[arg(
        long,
        env = "PRIVACY_LEDGER_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 512
    )]
    pub max_connections_per_address: usize,
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
        if !(1..=3600).contains(&self.header_timeout_secs) {
            return Err("--header-timeout-secs must be in [1, 3600]".into());
        }
        if self.max_connections == 0 || self.max_connections_per_address == 0 {
            return Err(
                "--max-connections and --max-connections-per-address must be at least 1".into(),
            );
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
        self.oidc()?;
        self.alerts()?;
        let a = self.admission();
        if !(1..=1024).contains(&a.concurrent) || a.queue > 100_000 {
            return Err(
                "--max-concurrent-computations must be in [1, 1024] and --computation-queue at most 100000"
                    .into(),
            );
        }
        if self.request_timeout_secs == 0 {
            return Err("--request-timeout-secs must be at least 1".into());
        }
        Ok(())
    }

    /// The limits every connection is served under; the cap in all is held below the process's
    /// open-file limit (less [`RESERVED_FILES`] for the store, logs and the listener).
    pub fn connections(&self) -> crate::http::conn::ConnLimits {
        let files = open_file_limit().map_or(usize::MAX, |n| n.saturating_sub(RESERVED_FILES));
        let max_connections = self.max_connections.min(files).max(1);
        if max_connections < self.max_connections {
            tracing::warn!(
                asked = self.max_connections,
                serving = max_connections,
                "--max-connections is above the open-file limit less {RESERVED_FILES}; \
                 raise the limit (ulimit -n) to serve more"
            );
        }
        crate::http::conn::ConnLimits {
            header_timeout: std::time::Duration::from_secs(self.header_timeout_secs),
            max_connections,
            max_per_address: self.max_connections_per_address,
        }
    }

    /// The limits on numerical work.
    pub fn admission(&self) -> crate::ledger::admission::AdmissionConfig {
        let d = crate::ledger::admission::AdmissionConfig::default();
        let concurrent = self.max_concurrent_computations.unwrap_or(d.concurrent);
        crate::ledger::admission::AdmissionConfig {
            concurrent,
            queue: self.computation_queue.unwrap_or(4 * concurrent),
            max_wait: d.max_wait,
        }
    }

    /// The OIDC settings, checked: `None` when no issuer is configured.
    /// The alert webhook, when configured (a URL needs the secret).
    pub fn alerts(&self) -> Result<Option<crate::ledger::alerts::AlertConfig>, String> {
        match (&self.alert_webhook_url, &self.alert_webhook_secret) {
            (None, _) => Ok(None),
            (Some(_), None) => Err(
                "--alert-webhook-url needs PRIVACY_LEDGER_ALERT_WEBHOOK_SECRET (at least 16 bytes) in the environment"
                    .into(),
            ),
            (Some(u), Some(s)) => crate::ledger::alerts::AlertConfig::new(u, s.as_bytes()).map(Some),
        }
    }

    pub fn oidc(&self) -> Result<Option<crate::ledger::oidc::OidcConfig>, String> {
        use crate::ledger::oidc::{JwksSource, OidcConfig};
        let any = self.oidc_issuer.is_some()
            || self.oidc_audience.is_some()
            || self.oidc_jwks_file.is_some()
            || self.oidc_jwks_url.is_some();
        if !any {
            return Ok(None);
        }
        let (Some(issuer), Some(audience)) = (&self.oidc_issuer, &self.oidc_audience) else {
            return Err("OIDC needs both --oidc-issuer and --oidc-audience".into());
        };
        let jwks = match (&self.oidc_jwks_file, &self.oidc_jwks_url) {
            (Some(f), None) => JwksSource::File(f.clone()),
            (None, Some(u)) => JwksSource::Url(u.clone()),
            _ => {
                return Err("OIDC needs exactly one of --oidc-jwks-file and --oidc-jwks-url".into())
            }
        };
        let c = OidcConfig {
            issuer: issuer.clone(),
            audience: audience.clone(),
            jwks,
            principal_claim: self.oidc_principal_claim.clone(),
            principal_prefix: self.oidc_principal_prefix.clone(),
            role_claim: self.oidc_role_claim.clone(),
            max_lifetime: std::time::Duration::from_secs(self.oidc_max_token_lifetime_secs),
            min_refetch: crate::ledger::oidc::MIN_REFETCH,
        };
        c.validate()?;
        Ok(Some(c))
    }
}

/// Files kept free of connections (the store's pool, the SQLite file and its WAL, logs, the
/// listener).
pub const RESERVED_FILES: usize = 256;

/// The process's soft limit on open files (Linux: `/proc/self/limits`), if known.
fn open_file_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeConfig,
    }

    fn parse(args: &[&str]) -> ServeConfig {
        Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .unwrap()
            .serve
    }

    #[test]
    fn oidc_needs_an_issuer_an_audience_and_exactly_one_key_set() {
        assert!(parse(&[]).oidc().unwrap().is_none());
        let iss = ["--oidc-issuer", "https://id.example"];
        let aud = ["--oidc-audience", "privacy-ledger"];
        let file = ["--oidc-jwks-file", "/etc/jwks.json"];
        let url = ["--oidc-jwks-url", "https://id.example/jwks"];
        let full: Vec<&str> = [&iss[..], &aud, &file].concat();
        let c = parse(&full).oidc().unwrap().unwrap();
        assert_eq!(c.principal_claim, "sub");
        assert_eq!(c.max_lifetime.as_secs(), 3600);
        assert!(parse(&[&iss[..], &file].concat()).validate().is_err());
        assert!(parse(&[&aud[..], &url].concat()).validate().is_err());
        assert!(parse(&[&iss[..], &aud].concat()).validate().is_err());
        assert!(Cli::try_parse_from(
            std::iter::once("serve").chain([&iss[..], &aud, &file, &url].concat())
        )
        .is_err());
        let plain = ["--oidc-jwks-url", "http://id.example/jwks"];
        assert!(parse(&[&iss[..], &aud, &plain].concat())
            .validate()
            .is_err());
    }
}

//! Budget alerts: when a ledger's used share ([`super::filter::Limit::used`]) reaches one of its
//! dataset's thresholds (default 50, 75 and 90 %, and 100 % when exhausted), a signed JSON body is
//! POSTed to the operator's webhook, once per crossing.
//!
//! - **When.** Every write that lands on a ledger nudges it ([`Alerts::nudge`], from the one write
//!   loop, off the request's path): the ledger is read and compared with its thresholds at once,
//!   so an alert leaves within a second of the charge that crossed. A sweep every
//!   [`SWEEP_EVERY`] catches writes made by other replicas.
//! - **Once.** A crossing is claimed in the store (`alert_crossings`, primary key (ledger,
//!   threshold)) before it is sent: of all replicas and retries exactly one claims it. When the
//!   use falls back below a threshold (a release, a budget raise) its claim is removed, so the next
//!   crossing alerts again. A process that dies between the claim and the delivery loses that
//!   alert (at most once, never twice).
//! - **Delivery.** Up to [`MAX_ATTEMPTS`] attempts with exponential backoff from
//!   [`FIRST_BACKOFF`]; each attempt times out after [`ATTEMPT_TIMEOUT`]. The outcome (delivered,
//!   or failed with the last status) is an audit record on the ledger's chain (`alert.delivered`,
//!   `alert.failed`).
//! - **Signature.** Headers `X-Privacy-Ledger-Timestamp: t` (Unix seconds) and
//!   `X-Privacy-Ledger-Signature: sha256=HEX(HMAC-SHA256(secret, t + "." + body))`; a receiver
//!   recomputes it and rejects old timestamps (a replay).
//!
//! Only the operator chooses where alerts go (`--alert-webhook-url`, its secret from the
//! environment): a dataset's admins choose its thresholds, never a URL, so no principal can make the
//! service call an address of their choosing.

use super::error::LedgerError;
use super::filter::Limit;
use super::principal::{Actor, Principal};
use super::rows::{budget_of, filter_of, now};
use crate::store::Store;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use utoipa::ToSchema;

/// Thresholds of a dataset with no rule of its own.
pub const DEFAULT_THRESHOLDS: [f64; 3] = [0.5, 0.75, 0.9];

/// Most thresholds a rule may have.
pub const MAX_THRESHOLDS: usize = 10;

/// Delivery attempts per alert.
pub const MAX_ATTEMPTS: u32 = 6;

/// Wait before the second attempt; doubled before each next (0.25, 0.5, 1, 2, 4 s).
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// Time one attempt may take.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often every dataset with alerts is looked at (writes by other replicas).
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// Where alerts go: the operator's webhook and the secret its bodies are signed with.
#[derive(Clone)]
pub struct AlertConfig {
    pub url: String,
    pub secret: Vec<u8>,
}

impl AlertConfig {
    /// Checks the URL (http or https) and the secret (at least 16 bytes).
    pub fn new(url: &str, secret: &[u8]) -> Result<Self, String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("alert webhook URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "alert webhook URL must be http or https, got {url:?}"
            ));
        }
        if secret.len() < 16 {
            return Err("the alert webhook secret must be at least 16 bytes".into());
        }
        Ok(AlertConfig {
            url: url.to_owned(),
            secret: secret.to_vec(),
        })
    }
}

/// A dataset's alert rule.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct AlertRule {
    pub dataset: String,
    /// Used shares (in (0, 1], ascending) whose crossing alerts.
    pub thresholds: Vec<f64>,
    /// Whether the thresholds are the default ones.
    pub default: bool,
    /// Whether the operator configured a webhook (without one, nothing is sent).
    pub webhook_configured: bool,
    /// Thresholds crossed and not fallen back below (the dataset's own ledger; a partitioned
    /// dataset's blocks have theirs).
    pub crossed: Vec<f64>,
}

/// The body POSTed to the webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AlertBody {
    /// Unique per alert: a receiver may drop a second delivery of the same id.
    pub id: String,
    pub dataset: String,
    /// A partitioned dataset's block, when the ledger is one.
    pub block: Option<String>,
    /// The threshold crossed (a used share).
    pub threshold: f64,
    /// The ledger's used share, remaining μ and budget when the crossing was seen.
    pub used_fraction: f64,
    pub remaining_mu: f64,
    pub budget_mu: f64,
    pub budget_delta: f64,
    pub exhausted: bool,
    /// When the crossing was seen (RFC 3339).
    pub crossed_at: String,
    /// In words.
    pub message: String,
}

/// Parses `{thresholds: [...]}`: each in (0, 1], at most [`MAX_THRESHOLDS`], distinct; sorted.
pub fn thresholds_from_json(
    v: &serde_json::Value,
) -> Result<Vec<f64>, crate::accountant::json::InputError> {
    use crate::accountant::json::{self, Fields, InputError, JsonPath};
    let root = JsonPath::root();
    let mut f = Fields::new(v, &root)?;
    let (t, p) = f.required("thresholds")?;
    let list = json::number_list(t, &p, MAX_THRESHOLDS, |x| {
        if x > 0.0 && x <= 1.0 {
            Ok(x)
        } else {
            Err(format!("must be a used share in (0, 1], got {x}"))
        }
    })?;
    f.finish()?;
    let mut sorted = list.clone();
    sorted.sort_by(f64::total_cmp);
    sorted.dedup();
    if sorted.len() != list.len() {
        return Err(InputError::new(&p, "thresholds must be distinct"));
    }
    Ok(sorted)
}

/// The alerts of one process.
pub struct Alerts {
    store: Arc<dyn Store>,
    config: Option<AlertConfig>,
    client: reqwest::Client,
    /// Ledgers nudged and not yet looked at (a burst of writes is looked at once).
    pending: Mutex<HashSet<String>>,
}

fn service_actor() -> Actor {
    Actor {
        principal: Principal {
            token_id: "alerts".into(),
            name: "privacy-ledger (alerts)".into(),
            role: "admin".into(),
        },
        request_id: None,
        client: None,
    }
}

/// HMAC-SHA256 of `t + "." + body` under `secret`, in hex.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Alerts {
    pub fn new(store: Arc<dyn Store>, config: Option<AlertConfig>) -> Arc<Self> {
        let client = reqwest::Client::builder()
            .timeout(ATTEMPT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with a timeout builds");
        Arc::new(Alerts {
            store,
            config,
            client,
            pending: Mutex::new(HashSet::new()),
        })
    }

    pub fn configured(&self) -> bool {
        self.config.is_some()
    }

    /// The thresholds of dataset `id` (its rule, else the default).
    pub async fn thresholds(&self, id: &str) -> Result<(Vec<f64>, bool), LedgerError> {
        Ok(match self.store.alert_rule(id).await? {
            Some(t) => (
                serde_json::from_str(&t).map_err(|e| {
                    LedgerError::Corrupt(id.to_owned(), format!("alert thresholds: {e}"))
                })?,
                false,
            ),
            None => (DEFAULT_THRESHOLDS.to_vec(), true),
        })
    }

    /// Looks at ledger `ledger_id` soon (once for a burst of writes), when a webhook is
    /// configured. Needs a tokio runtime.
    pub fn nudge(self: &Arc<Self>, ledger_id: &str) {
        if self.config.is_none() {
            return;
        }
        if !self
            .pending
            .lock()
            .expect("pending alerts")
            .insert(ledger_id.to_owned())
        {
            return;
        }
        let (this, id) = (self.clone(), ledger_id.to_owned());
        tokio::spawn(async move {
            // Let the writes of a burst land first (well within the second the issue allows).
            tokio::time::sleep(Duration::from_millis(20)).await;
            this.pending.lock().expect("pending alerts").remove(&id);
            if let Err(e) = this.look_at(&id).await {
                tracing::warn!(ledger_id = %id, error = %e, "budget alerts not evaluated");
            }
        });
    }

    /// Every [`SWEEP_EVERY`], looks at every dataset (and block) with a ledger: crossings made
    /// through other replicas alert too. Runs until the process ends.
    pub fn sweep_forever(self: &Arc<Self>) {
        if self.config.is_none() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SWEEP_EVERY).await;
                let mut after: Option<String> = None;
                loop {
                    let rows = match this.store.list_datasets(after.as_deref(), 200, None).await {
                        Ok(r) => r,
                        Err(e) => {
                            tracing::warn!(error = %e, "alert sweep: datasets not listed");
                            break;
                        }
                    };
                    for r in &rows {
                        this.nudge(&r.id);
                        if let Ok(blocks) = this.store.list_blocks(&r.id, None, 1000).await {
                            for b in blocks {
                                this.nudge(&b.id);
                            }
                        }
                    }
                    match rows.last() {
                        Some(r) if rows.len() == 200 => after = Some(r.id.clone()),
                        _ => break,
                    }
                }
            }
        });
    }

    /// Compares ledger `id` with its dataset's thresholds: re-arms those it fell back below,
    /// claims and delivers those it reached.
    async fn look_at(self: &Arc<Self>, id: &str) -> Result<(), LedgerError> {
        let Some(config) = self.config.clone() else {
            return Ok(());
        };
        let Some(row) = self.store.get_dataset(id).await? else {
            return Ok(());
        };
        if row.mu_sq_spent.is_none() {
            return Ok(());
        }
        let (dataset, block) = match super::partition::split_block_id(id) {
            Some((d, b)) => (d.to_owned(), Some(b.to_owned())),
            None => (id.to_owned(), None),
        };
        let (mut thresholds, _) = self.thresholds(&dataset).await?;
        let (budget, state) = (budget_of(&row)?, filter_of(&row)?);
        let used = budget.used(&state);
        let exhausted = budget.exhausted(&state);
        // Exhaustion always alerts (as the threshold 1).
        if !thresholds.contains(&1.0) {
            thresholds.push(1.0);
        }
        let effective = if exhausted { used.max(1.0) } else { used };
        self.store.rearm_crossings(id, effective).await?;
        for t in thresholds.into_iter().filter(|t| effective >= *t) {
            let at = now();
            if !self.store.claim_crossing(id, t, &at).await? {
                continue;
            }
            let body = AlertBody {
                id: uuid::Uuid::now_v7().to_string(),
                dataset: dataset.clone(),
                block: block.clone(),
                threshold: t,
                used_fraction: used,
                remaining_mu: budget.remaining_mu(&state),
                budget_mu: budget.mu(),
                budget_delta: budget.delta(),
                exhausted,
                crossed_at: at,
                message: format!(
                    "{}{} has used {:.1} % of its budget (threshold {:.0} %){}",
                    dataset,
                    block
                        .as_deref()
                        .map(|b| format!(" block {b}"))
                        .unwrap_or_default(),
                    used * 100.0,
                    t * 100.0,
                    if exhausted { ": exhausted" } else { "" }
                ),
            };
            let (this, config, ledger) = (self.clone(), config.clone(), id.to_owned());
            tokio::spawn(async move { this.deliver(&config, &ledger, body).await });
        }
        Ok(())
    }

    /// Sends one alert with retries, and records the outcome in the ledger's audit chain.
    async fn deliver(&self, config: &AlertConfig, ledger: &str, body: AlertBody) {
        let bytes = serde_json::to_vec(&body).expect("an alert body serialises");
        let mut wait = FIRST_BACKOFF;
        let mut last = String::new();
        let mut attempts = 0;
        let mut delivered = false;
        while attempts < MAX_ATTEMPTS {
            attempts += 1;
            let t = chrono::Utc::now().timestamp();
            let sent = self
                .client
                .post(&config.url)
                .header("content-type", "application/json")
                .header("x-privacy-ledger-timestamp", t.to_string())
                .header(
                    "x-privacy-ledger-signature",
                    format!("sha256={}", signature(&config.secret, t, &bytes)),
                )
                .body(bytes.clone())
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    delivered = true;
                    last = r.status().to_string();
                    break;
                }
                Ok(r) => last = r.status().to_string(),
                Err(e) => last = e.to_string(),
            }
            if attempts < MAX_ATTEMPTS {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
        let action = if delivered {
            "alert.delivered"
        } else {
            "alert.failed"
        };
        let target = format!("threshold {}", body.threshold);
        let record = super::audit::draft(&service_actor(), action, Some(ledger), Some(&target))
            .after(&serde_json::json!({
                "alert": body, "attempts": attempts, "last_status": last
            }))
            .done();
        if let Err(e) = self.store.audit(&record).await {
            tracing::warn!(ledger_id = %ledger, error = %e, "alert outcome not audited");
        }
        if !delivered {
            tracing::warn!(ledger_id = %ledger, threshold = body.threshold, status = %last, "budget alert not delivered");
        }
    }
}

impl super::Ledgers {
    /// Dataset `id`'s alert rule (readers of the dataset).
    pub async fn alert_rule(&self, actor: &Actor, id: &str) -> Result<AlertRule, LedgerError> {
        self.authorize(actor, id, super::principal::Action::Read)
            .await?;
        self.row(id).await?;
        let (thresholds, default) = self.alerts.thresholds(id).await?;
        Ok(AlertRule {
            dataset: id.to_owned(),
            thresholds,
            default,
            webhook_configured: self.alerts.configured(),
            crossed: self.store.crossings(id).await?,
        })
    }

    /// Sets dataset `id`'s alert thresholds (its admins), audited; the dataset is looked at
    /// again at once.
    pub async fn set_alert_rule(
        &self,
        actor: &Actor,
        id: &str,
        thresholds: Vec<f64>,
    ) -> Result<AlertRule, LedgerError> {
        self.authorize(actor, id, super::principal::Action::Administer)
            .await?;
        self.row(id).await?;
        if super::partition::split_block_id(id).is_some() {
            return Err(LedgerError::Invalid(
                "path.id".into(),
                "a block's alerts are its dataset's: set them on the dataset".into(),
            ));
        }
        let (before, _) = self.alerts.thresholds(id).await?;
        let stored = serde_json::to_string(&thresholds).map_err(super::error::internal)?;
        let record = super::audit::draft(actor, "alerts.changed", Some(id), Some(id))
            .before(&serde_json::json!({"thresholds": before}))
            .after(&serde_json::json!({"thresholds": thresholds}))
            .done();
        self.store
            .set_alert_rule(id, &stored, &now(), &record)
            .await?;
        self.alerts.nudge(id);
        self.alert_rule(actor, id).await
    }
}

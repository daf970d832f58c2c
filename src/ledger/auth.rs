//! Who is calling: bearer tokens.
//!
//! A token's secret is `pl_` followed by 64 hex digits (244 random bits from two version-4 UUIDs,
//! i.e. the operating system's generator); it is shown once, when it is made, and stored only as
//! its SHA-256 (a high-entropy secret needs no slow hash: there is nothing to guess). Every request
//! looks its token up in the store, so a revocation takes effect at once on every replica. The
//! first start on an empty store makes an `admin` token and prints it once.
//!
//! Roles, globally for now (per-dataset grants are not built yet), in [`Principal::may`], the one
//! place the rule is written: `admin` may do everything; `analyst` may spend (charge, preview,
//! runs, chunks, commit, release, calibrate against a dataset) and read; `auditor` may only read.
//! Creating datasets and changing budgets is admin-only.

use super::{now, LedgerError, Ledgers};
use crate::store::TokenRow;
use serde::Serialize;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// The roles a token can hold.
pub const ROLES: &[&str] = &["admin", "analyst", "auditor"];

/// The caller a request was authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub token_id: String,
    pub name: String,
    pub role: String,
}

/// What a request does, for [`Principal::may`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read datasets, ledgers, reports; stateless accounting.
    Read,
    /// Spend a dataset's budget (or ask what spending would do).
    Spend,
    /// Create datasets, change budgets.
    Administer,
}

impl Action {
    fn describe(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Spend => "spend a budget",
            Action::Administer => "create datasets or change budgets",
        }
    }
}

impl Principal {
    /// Whether this principal's role allows `action` ([`LedgerError::Forbidden`] if not).
    pub fn may(&self, action: Action) -> Result<(), LedgerError> {
        let allowed = match self.role.as_str() {
            "admin" => true,
            "analyst" => action != Action::Administer,
            "auditor" => action == Action::Read,
            _ => false,
        };
        if allowed {
            Ok(())
        } else {
            Err(LedgerError::Forbidden(format!(
                "the {} role may not {}",
                self.role,
                action.describe()
            )))
        }
    }
}

/// A token as shown (never its secret, except once in [`NewToken`]).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Token)]
pub struct TokenView {
    pub id: String,
    pub name: String,
    pub role: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// A token just made: its view and its secret, shown this once.
#[derive(Debug, Clone, PartialEq)]
pub struct NewToken {
    pub token: TokenView,
    pub secret: String,
}

fn hash(secret: &str) -> String {
    format!("{:x}", Sha256::digest(secret.as_bytes()))
}

fn view(t: &TokenRow) -> TokenView {
    TokenView {
        id: t.id.clone(),
        name: t.name.clone(),
        role: t.role.clone(),
        created_at: t.created_at.clone(),
        expires_at: t.expires_at.clone(),
        revoked_at: t.revoked_at.clone(),
    }
}

/// A fresh secret and its row.
fn fresh(name: &str, role: &str, expires_at: Option<String>) -> Result<NewToken, LedgerError> {
    if !ROLES.contains(&role) {
        return Err(LedgerError::Internal(format!("unknown role {role:?}")));
    }
    let secret = format!(
        "pl_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    Ok(NewToken {
        token: TokenView {
            id: uuid::Uuid::new_v4().to_string(),
            name: name.to_owned(),
            role: role.to_owned(),
            created_at: now(),
            expires_at,
            revoked_at: None,
        },
        secret,
    })
}

fn row(t: &NewToken) -> TokenRow {
    TokenRow {
        id: t.token.id.clone(),
        name: t.token.name.clone(),
        hash: hash(&t.secret),
        role: t.token.role.clone(),
        created_at: t.token.created_at.clone(),
        expires_at: t.token.expires_at.clone(),
        revoked_at: None,
    }
}

impl Ledgers {
    /// The principal of a bearer secret; [`LedgerError::Unauthenticated`] when it is unknown,
    /// revoked or expired (one answer for all three: the caller learns nothing about the token).
    pub async fn authenticate(&self, secret: &str) -> Result<Principal, LedgerError> {
        let Some(t) = self.store.token_by_hash(&hash(secret)).await? else {
            return Err(LedgerError::Unauthenticated);
        };
        let expired = t.expires_at.as_deref().is_some_and(|e| {
            chrono::DateTime::parse_from_rfc3339(e).map_or(true, |e| e <= chrono::Utc::now())
        });
        if t.revoked_at.is_some() || expired {
            return Err(LedgerError::Unauthenticated);
        }
        Ok(Principal {
            token_id: t.id,
            name: t.name,
            role: t.role,
        })
    }

    /// Makes a token (`expires_in`: from now).
    pub async fn create_token(
        &self,
        name: &str,
        role: &str,
        expires_in: Option<chrono::Duration>,
    ) -> Result<NewToken, LedgerError> {
        let expires_at = expires_in
            .map(|d| (chrono::Utc::now() + d).to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        let t = fresh(name, role, expires_at)?;
        self.store.create_token(&row(&t), false).await?;
        Ok(t)
    }

    /// On an empty store, makes the first `admin` token (once, even when replicas start
    /// together); `None` when a token exists already.
    pub async fn bootstrap_admin(&self) -> Result<Option<NewToken>, LedgerError> {
        let t = fresh("bootstrap admin", "admin", None)?;
        Ok(self.store.create_token(&row(&t), true).await?.then_some(t))
    }

    /// Every token (without secrets).
    pub async fn list_tokens(&self) -> Result<Vec<TokenView>, LedgerError> {
        Ok(self.store.list_tokens().await?.iter().map(view).collect())
    }

    /// Revokes a token; whether a live token was revoked.
    pub async fn revoke_token(&self, id: &str) -> Result<bool, LedgerError> {
        Ok(self.store.revoke_token(id, &now()).await?)
    }
}

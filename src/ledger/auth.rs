//! Who is calling: bearer tokens.
//!
//! A token's secret is `pl_` followed by 64 hex digits (244 random bits from two version-4 UUIDs,
//! i.e. the operating system's generator); it is shown once, when it is made, and stored only as
//! its SHA-256 (a high-entropy secret needs no slow hash: there is nothing to guess). Every request
//! looks its token up in the store, so a revocation takes effect at once on every replica. The
//! first start on an empty store makes an `admin` token and prints it once.
//!
//! # Principals, roles and grants
//! A principal is a name (a token's `name`; several tokens may carry one, e.g. while rotating).
//! Roles, in [`role_allows`], the one place the rule is written: `admin` may do everything;
//! `analyst` may spend (charge, preview, runs, chunks, commit, release, calibrate against a
//! dataset) and read; `auditor` may read, including the audit log, and change nothing. A token's
//! role holds on every dataset (a global role; `none` for none), and a grant gives a principal a
//! role on one dataset ([`Ledgers::authorize`]). Creating datasets and managing tokens take the
//! global `admin` role; budgets, quotas and grants of a dataset take `admin` on it.
//!
//! # What a principal is told about datasets it may not use
//! A principal with no global role and no grant on a dataset gets 404 for it, exactly as for a
//! dataset that does not exist, and does not see it listed: it learns nothing of its existence.
//! A principal that may see the dataset (a global role, or a grant) but not do what it asked
//! gets 403.

use super::error::LedgerError;
use super::names::principal_name;
use super::principal::{role_allows, Action, Actor, Principal, GLOBAL_ROLES, ROLES};
use super::rows::now;
use super::{audit, Ledgers};
use crate::store::TokenRow;
use serde::Serialize;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// A grant as shown.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Grant)]
pub struct GrantView {
    pub principal: String,
    #[schema(value_type = super::schema::DatasetRole)]
    pub role: String,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// A token as shown (never its secret, except once in [`NewToken`]).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Token)]
pub struct TokenView {
    pub id: String,
    pub name: String,
    #[schema(value_type = super::schema::GlobalRole)]
    pub role: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    #[schema(format = DateTime)]
    pub revoked_at: Option<String>,
}

/// A token just made: its view and its secret, shown this once.
#[derive(Debug, Clone, PartialEq)]
pub struct NewToken {
    pub token: TokenView,
    pub secret: String,
}

/// The SHA-256 (hex) a secret is stored as (tokens' secrets, sessions' ids).
pub(super) fn hash(secret: &str) -> String {
    format!("{:x}", Sha256::digest(secret.as_bytes()))
}

/// A fresh secret: `prefix` and 64 hex digits (244 random bits from two version-4 UUIDs).
pub(super) fn random_secret(prefix: &str) -> String {
    format!(
        "{prefix}{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The principal of a token row and its expiry, if the token is live (neither revoked nor
/// expired; an unreadable expiry has passed); [`LedgerError::Unauthenticated`] otherwise. Every
/// use of a local token is checked here: a bearer secret, and a dashboard session opened with it.
pub(super) fn live(
    t: TokenRow,
) -> Result<(Principal, Option<chrono::DateTime<chrono::Utc>>), LedgerError> {
    let expiry = match t.expires_at.as_deref() {
        None => None,
        Some(e) => Some(
            chrono::DateTime::parse_from_rfc3339(e)
                .map_err(|_| LedgerError::Unauthenticated)?
                .with_timezone(&chrono::Utc),
        ),
    };
    if t.revoked_at.is_some() || expiry.is_some_and(|e| e <= chrono::Utc::now()) {
        return Err(LedgerError::Unauthenticated);
    }
    let p = Principal {
        token_id: t.id,
        name: t.name,
        role: t.role,
    };
    Ok((p, expiry))
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
    if !GLOBAL_ROLES.contains(&role) {
        return Err(LedgerError::Invalid(
            "role".into(),
            format!("must be one of {}", GLOBAL_ROLES.join(", ")),
        ));
    }
    principal_name(name).map_err(|r| LedgerError::Invalid("name".into(), r))?;
    if name.starts_with(super::oidc::OIDC_NAMESPACE) {
        return Err(LedgerError::Invalid(
            "$.name".into(),
            format!(
                "must not start with {:?}: that namespace is the identity provider's principals'",
                super::oidc::OIDC_NAMESPACE
            ),
        ));
    }
    let secret = random_secret("pl_");
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
    /// A bearer that is not one of our tokens is tried as a JWT when OIDC is configured
    /// ([`super::oidc`]); why one is refused is logged, never told.
    pub async fn authenticate(&self, secret: &str) -> Result<Principal, LedgerError> {
        if !secret.starts_with("pl_") {
            let Some(oidc) = &self.oidc else {
                return Err(LedgerError::Unauthenticated);
            };
            return oidc.verify(secret).await.map_err(|reason| {
                tracing::info!(%reason, "bearer JWT refused");
                LedgerError::Unauthenticated
            });
        }
        self.local_token(secret).await.map(|(p, _)| p)
    }

    /// The principal of a local token's secret and the token's expiry (RFC 3339), as
    /// [`Self::authenticate`] accepts it.
    pub(super) async fn local_token(
        &self,
        secret: &str,
    ) -> Result<(Principal, Option<chrono::DateTime<chrono::Utc>>), LedgerError> {
        let Some(t) = self.store.token_by_hash(&hash(secret)).await? else {
            return Err(LedgerError::Unauthenticated);
        };
        live(t)
    }

    /// Makes a token (`expires_in`: from now); global admins only.
    pub async fn create_token(
        &self,
        actor: &Actor,
        name: &str,
        role: &str,
        expires_in: Option<chrono::Duration>,
    ) -> Result<NewToken, LedgerError> {
        actor.principal.may(Action::Administer)?;
        let expires_at = expires_in
            .map(|d| (chrono::Utc::now() + d).to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        let t = fresh(name, role, expires_at)?;
        let audit = audit::draft(actor, "token.created", None, Some(&t.token.id))
            .after(&t.token)
            .done();
        self.store.create_token(&row(&t), false, &audit).await?;
        Ok(t)
    }

    /// On an empty store, makes the first `admin` token (once, even when replicas start
    /// together); `None` when a token exists already.
    pub async fn bootstrap_admin(&self) -> Result<Option<NewToken>, LedgerError> {
        let t = fresh("bootstrap admin", "admin", None)?;
        let mut system = Actor::operator();
        system.principal.name = "system (first start)".into();
        system.client = None;
        let audit = audit::draft(&system, "token.created", None, Some(&t.token.id))
            .after(&t.token)
            .done();
        Ok(self
            .store
            .create_token(&row(&t), true, &audit)
            .await?
            .then_some(t))
    }

    /// Every token (without secrets); global admins only.
    pub async fn list_tokens(&self, actor: &Actor) -> Result<Vec<TokenView>, LedgerError> {
        actor.principal.may(Action::Administer)?;
        Ok(self.store.list_tokens().await?.iter().map(view).collect())
    }

    /// Revokes a token; whether a live token was revoked. Global admins only.
    pub async fn revoke_token(&self, actor: &Actor, id: &str) -> Result<bool, LedgerError> {
        actor.principal.may(Action::Administer)?;
        let before = self
            .store
            .list_tokens()
            .await?
            .into_iter()
            .find(|t| t.id == id)
            .map(|t| view(&t));
        let at = now();
        let after = before.clone().map(|mut t| {
            t.revoked_at = Some(at.clone());
            t
        });
        let audit = audit::draft(actor, "token.revoked", None, Some(id))
            .before(&before)
            .after(&after)
            .done();
        Ok(self.store.revoke_token(id, &at, &audit).await?)
    }

    /// Whether `actor` may do `action` on dataset `id`: its global role, else its grant on the
    /// dataset. Without either it may not know the dataset exists: [`LedgerError::NotFound`], as
    /// for a dataset that does not exist. With either, but not allowing `action`: Forbidden.
    /// Whether `actor` may use the stateless accountant (compose, certificate, calibrate): its
    /// computations cost CPU, so a principal needs a global role that may read, or a grant on
    /// some dataset; role `none` without grants gets [`LedgerError::Forbidden`].
    pub async fn may_account(&self, actor: &Actor) -> Result<(), LedgerError> {
        let p = &actor.principal;
        if role_allows(&p.role, Action::Read) || self.store.has_grants(&p.name).await? {
            return Ok(());
        }
        Err(LedgerError::Forbidden(format!(
            "the global {} role without a grant on any dataset may not use the stateless \
             accountant",
            p.role
        )))
    }

    pub async fn authorize(
        &self,
        actor: &Actor,
        id: &str,
        action: Action,
    ) -> Result<(), LedgerError> {
        let p = &actor.principal;
        if role_allows(&p.role, action) {
            return Ok(());
        }
        // A block's grants are its dataset's.
        let id = super::partition::split_block_id(id).map_or(id, |(parent, _)| parent);
        match self.store.grant(id, &p.name).await? {
            Some(role) if role_allows(&role, action) => Ok(()),
            Some(role) => Err(LedgerError::Forbidden(format!(
                "the {role} role on dataset {id:?} may not {}",
                action.describe()
            ))),
            None if p.sees_all() => Err(LedgerError::Forbidden(format!(
                "the global {} role may not {}, and there is no grant on dataset {id:?}",
                p.role,
                action.describe()
            ))),
            None => Err(LedgerError::NotFound(id.to_owned())),
        }
    }

    /// Whether `actor` sees other principals' private parts on dataset `id` (idempotency keys,
    /// metadata, quota shares): admins and auditors of it (an admin may audit).
    pub async fn sees_others(&self, actor: &Actor, id: &str) -> bool {
        self.authorize(actor, id, Action::Audit).await.is_ok()
    }

    /// Gives `principal` `role` on dataset `id`, or withdraws its grant (`role = None`); admins of
    /// the dataset only. Whether anything changed.
    pub async fn set_grant(
        &self,
        actor: &Actor,
        id: &str,
        principal: &str,
        role: Option<&str>,
    ) -> Result<bool, LedgerError> {
        self.authorize(actor, id, Action::Administer).await?;
        if let Some((parent, _)) = super::partition::split_block_id(id) {
            // A block's grants are its dataset's (see `authorize`): one stored here would be
            // shown and never consulted.
            return Err(LedgerError::Invalid(
                "path.id".into(),
                format!("grants are held on the partitioned dataset {parent:?}, not on its blocks"),
            ));
        }
        self.row(id).await?;
        principal_name(principal).map_err(|r| LedgerError::Invalid("path.principal".into(), r))?;
        if let Some(r) = role {
            if !ROLES.contains(&r) {
                return Err(LedgerError::Invalid(
                    "role".into(),
                    format!("must be one of {}", ROLES.join(", ")),
                ));
            }
        }
        let before = self.store.grant(id, principal).await?;
        let action = if role.is_some() {
            "grant.set"
        } else {
            "grant.removed"
        };
        let audit = audit::draft(actor, action, Some(id), Some(principal))
            .before(&before.as_ref().map(|r| serde_json::json!({"role": r})))
            .after(&role.map(|r| serde_json::json!({"role": r})))
            .done();
        Ok(self
            .store
            .set_grant(id, principal, role, &now(), &audit)
            .await?)
    }

    /// A dataset's grants; its admins and auditors.
    pub async fn list_grants(
        &self,
        actor: &Actor,
        id: &str,
    ) -> Result<Vec<GrantView>, LedgerError> {
        self.authorize(actor, id, Action::Audit).await?;
        self.row(id).await?;
        Ok(self
            .store
            .list_grants(id)
            .await?
            .into_iter()
            .map(|g| GrantView {
                principal: g.principal,
                role: g.role,
                created_at: g.created_at,
            })
            .collect())
    }
}

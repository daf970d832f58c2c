//! Dashboard sessions: what the dashboard's cookie holds instead of a credential.
//!
//! Signing in with a token (or a JWT) opens a session: a fresh random id (`ps_` and 64 hex
//! digits, 244 bits from the operating system's generator, as a token's secret) goes to the
//! browser; the store keeps only its SHA-256, the credential it was opened with and its end. The
//! cookie is therefore no API credential (the API takes tokens and JWTs only), a copied cookie
//! dies with the session, and a database dump holds no usable session.
//!
//! A session ends at the first of: [`SESSION_SECONDS`] after sign-in; the credential's own
//! expiry (a token's `expires_at`, a JWT's `exp`); sign-out ([`Ledgers::close_session`], which
//! deletes it on the server, so the same cookie no longer opens a page); the revocation of the
//! token it was opened with (the store deletes the token's sessions in the revocation's
//! transaction, and every page reads the token again, so a revocation ends them at once on every
//! replica). A credential keeps at most [`SESSIONS_PER_CREDENTIAL`] sessions (the oldest go), and
//! expired ones are deleted at each sign-in, so a caller cannot grow the table without bound.
//!
//! A session opened with a JWT keeps the principal and role the JWT gave; the JWT itself is not
//! kept, so it lasts until the JWT's `exp` (bounded by the verifier's maximum lifetime) even if
//! the identity provider's key is removed in between; sign-out ends it. Sign-in and sign-out are
//! audited (`session.opened`, `session.closed`), naming the session by its hash's first 16 digits.

use super::auth::{hash, live, random_secret};
use super::error::LedgerError;
use super::principal::{Actor, Principal};
use super::{audit, Ledgers};
use crate::store::SessionRow;

/// The longest a dashboard session lasts.
pub const SESSION_SECONDS: i64 = 12 * 3600;

/// Sessions a credential keeps (its newest).
pub const SESSIONS_PER_CREDENTIAL: i64 = 32;

/// A session just opened: the id for the cookie (shown this once) and how long it lasts.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSession {
    pub id: String,
    pub principal: Principal,
    /// Seconds until it ends (the cookie's `Max-Age`).
    pub seconds: i64,
}

/// How the audit log names a session: its hash's first 16 hex digits (not the id).
fn shown(hash: &str) -> String {
    format!("session:{}", &hash[..16])
}

/// A session's times, to the microsecond: sessions are trimmed oldest first, and sign-ins within
/// one millisecond must not tie.
fn micros(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Whether RFC 3339 time `t` has passed (an unreadable one has).
fn passed(t: &str) -> bool {
    chrono::DateTime::parse_from_rfc3339(t).map_or(true, |t| t <= chrono::Utc::now())
}

/// Whether `id` has a session id's shape (`ps_` and 64 hex digits).
pub fn is_session_id(id: &str) -> bool {
    id.len() == 67 && id.starts_with("ps_") && id[3..].bytes().all(|b| b.is_ascii_hexdigit())
}

impl Ledgers {
    /// Opens a session for the holder of `secret` (a token or a JWT, checked as the API checks
    /// it); [`LedgerError::Unauthenticated`] when it would not be accepted. `client`: where the
    /// request came from, for the audit log.
    pub async fn open_session(
        &self,
        secret: &str,
        request_id: Option<String>,
        client: Option<String>,
    ) -> Result<NewSession, LedgerError> {
        let now = chrono::Utc::now();
        let mut end = now + chrono::Duration::seconds(SESSION_SECONDS);
        let principal = match (secret.starts_with("pl_"), &self.oidc) {
            (false, Some(oidc)) => {
                let (p, exp) = oidc.verify_until(secret).await.map_err(|reason| {
                    tracing::info!(%reason, "bearer JWT refused at sign-in");
                    LedgerError::Unauthenticated
                })?;
                if let Some(exp) = chrono::DateTime::from_timestamp(exp, 0) {
                    end = end.min(exp);
                }
                p
            }
            (true, _) => {
                let (p, expiry) = self.local_token(secret).await?;
                if let Some(e) = expiry {
                    end = end.min(e);
                }
                p
            }
            (false, None) => return Err(LedgerError::Unauthenticated),
        };
        let seconds = (end - now).num_seconds();
        if seconds <= 0 {
            return Err(LedgerError::Unauthenticated);
        }
        let id = random_secret("ps_");
        let row = SessionRow {
            hash: hash(&id),
            token_id: principal.token_id.clone(),
            principal: principal.name.clone(),
            role: principal.role.clone(),
            created_at: micros(now),
            expires_at: micros(end),
        };
        let actor = Actor {
            principal: principal.clone(),
            request_id,
            client,
        };
        let record = audit::draft(&actor, "session.opened", None, Some(&shown(&row.hash)))
            .after(&serde_json::json!({"expires_at": row.expires_at}))
            .done();
        self.store
            .open_session(&row, SESSIONS_PER_CREDENTIAL, &record)
            .await?;
        Ok(NewSession {
            id,
            principal,
            seconds,
        })
    }

    /// The principal of a live session; [`LedgerError::Unauthenticated`] when the id is unknown,
    /// the session ended, or the token it was opened with is revoked, expired or gone.
    pub async fn session(&self, id: &str) -> Result<Principal, LedgerError> {
        if !is_session_id(id) {
            return Err(LedgerError::Unauthenticated);
        }
        let Some((s, token)) = self.store.session(&hash(id)).await? else {
            return Err(LedgerError::Unauthenticated);
        };
        if passed(&s.expires_at) {
            return Err(LedgerError::Unauthenticated);
        }
        if s.token_id.starts_with("jwt:") {
            return Ok(Principal {
                token_id: s.token_id,
                name: s.principal,
                role: s.role,
            });
        }
        // A local token is read again: its revocation or expiry ends the session now.
        let token = token.ok_or(LedgerError::Unauthenticated)?;
        live(token).map(|(p, _)| p)
    }

    /// Ends the session `id` on the server (sign-out); nothing when there is none.
    pub async fn close_session(&self, actor: &Actor, id: &str) -> Result<(), LedgerError> {
        if !is_session_id(id) {
            return Ok(());
        }
        let h = hash(id);
        let record = audit::draft(actor, "session.closed", None, Some(&shown(&h))).done();
        self.store.close_session(&h, &record).await?;
        Ok(())
    }
}

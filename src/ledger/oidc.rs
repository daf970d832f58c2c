//! Who is calling, as an identity provider says: OpenID Connect / JWT bearer tokens.
//!
//! Optional (`--oidc-issuer`, `--oidc-audience` and a key set from `--oidc-jwks-file` or
//! `--oidc-jwks-url`). A bearer that is not one of our own tokens (`pl_…`) is read as a signed
//! JWT (RFC 7519) and accepted only when all of these hold:
//! - its header names an asymmetric algorithm (RS256/384/512, PS256/384/512, ES256/384, EdDSA);
//!   `none` and HMAC are refused outright, so a public key can never be used as an HMAC secret
//!   (the "algorithm confusion" attack);
//! - its `kid` names a signing key of the key set (or, when the header has no `kid`, the set has
//!   exactly one key), whose type fits the algorithm and whose `alg`, when given, is that one;
//!   symmetric (`oct`) and encryption (`use: enc`) keys are never loaded;
//! - the signature verifies; `iss` is the configured issuer and `aud` contains the audience;
//!   `exp` is in the future and `nbf`, when present, in the past (both with [`LEEWAY_SECS`]);
//! - it expires within the configured maximum lifetime from now (default one hour). A JWT
//!   cannot be revoked here, so this bounds how long one outlives its revocation at the provider.
//!
//! The principal is the value of a claim (default `sub`) after a prefix (default `oidc:`),
//! checked like a token's name: grants, quotas and the audit log refer to it. Local token names
//! may not start with `oidc:`, so a provider's user never becomes a local principal by choosing
//! its `sub`; an operator who wants the provider's names to be local ones sets the prefix empty. The global role is the one value of a claim (default `privacy_ledger_role`; a string,
//! or an array from which the values that are roles are taken) that is a role; none → `none`
//! (grants only); two or more → refused, rather than guessing which one the provider meant.
//!
//! Any failure is the same 401 for the caller; the reason is logged (never the token).
//!
//! A header listing critical extensions (`crit`) is refused: none is understood here.
//!
//! Keys: a file is read at start, again every [`FILE_RELOAD_AFTER`] and when a token names an
//! unknown `kid` (so keys are rotated, and removed, by rewriting the file); a URL is fetched at start, when the keys are older than
//! [`REFRESH_AFTER`], and when a token names an unknown `kid` — at most once per
//! [`MIN_REFETCH`], so tokens with made-up `kid`s cannot make the service hammer the provider.
//! A failed refresh keeps the keys it had. URLs must be `https://` (plain `http://` only to a
//! loopback host, for tests and sidecars); responses are capped at [`MAX_JWKS_BYTES`] and
//! [`FETCH_TIMEOUT`].

use super::names::principal_name;
use super::principal::{Principal, GLOBAL_ROLES};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// The default namespace of the provider's principals (`oidc:` + the claim); local token names
/// may not start with it.
pub const OIDC_NAMESPACE: &str = "oidc:";
/// Clock skew tolerated on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: u64 = 30;
/// Keys fetched from a URL are refreshed when older than this.
pub const REFRESH_AFTER: Duration = Duration::from_secs(600);
/// Fewest seconds between two fetches of the key set.
pub const MIN_REFETCH: Duration = Duration::from_secs(30);
/// A key file is read again when its keys are older than this (or the configured minimum
/// interval, if shorter), so a key removed from it is refused within seconds.
pub const FILE_RELOAD_AFTER: Duration = Duration::from_secs(5);
/// Largest key set read.
pub const MAX_JWKS_BYTES: usize = 1 << 20;
/// Longest a fetch of the key set may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Most keys kept from a key set.
const MAX_KEYS: usize = 64;
/// Longest bearer read as a JWT.
const MAX_JWT_BYTES: usize = 16 * 1024;

/// Where the provider's public keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    File(PathBuf),
    Url(String),
}

/// What JWTs are accepted, and how they map to principals.
#[derive(Debug, Clone)]
pub struct OidcConfig {
    pub issuer: String,
    pub audience: String,
    pub jwks: JwksSource,
    /// The claim naming the principal (default `sub`).
    pub principal_claim: String,
    /// Put before the claim's value to make the principal's name ([`OIDC_NAMESPACE`] by
    /// default): the provider's principals live in their own namespace, so a JWT whose `sub` is a
    /// local token's name does not get that token's grants. An operator who maps the provider's
    /// names onto local ones on purpose sets it empty.
    pub principal_prefix: String,
    /// The claim holding the global role (default `privacy_ledger_role`).
    pub role_claim: String,
    /// Longest a token may still be valid when presented.
    pub max_lifetime: Duration,
    /// Fewest seconds between two loads of the key set ([`MIN_REFETCH`]; shorter in tests).
    pub min_refetch: Duration,
}

impl OidcConfig {
    /// Checks what can be checked before any key is read.
    pub fn validate(&self) -> Result<(), String> {
        if self.issuer.is_empty() {
            return Err("--oidc-issuer must not be empty".into());
        }
        if self.audience.is_empty() {
            return Err("--oidc-audience must not be empty".into());
        }
        if self.principal_claim.is_empty() || self.role_claim.is_empty() {
            return Err("--oidc-principal-claim and --oidc-role-claim must not be empty".into());
        }
        if !self.principal_prefix.is_empty()
            && (self.principal_prefix.len() > 32
                || principal_name(&format!("{}x", self.principal_prefix)).is_err())
        {
            return Err(
                "--oidc-principal-prefix must be at most 32 characters of a principal's name \
                 (letters, digits, space and ._@:+-)"
                    .into(),
            );
        }
        if self.max_lifetime.is_zero() {
            return Err("--oidc-max-token-lifetime-secs must be at least 1".into());
        }
        if let JwksSource::Url(u) = &self.jwks {
            let url = reqwest::Url::parse(u).map_err(|e| format!("--oidc-jwks-url {u:?}: {e}"))?;
            let host = url.host_str().unwrap_or("");
            let loopback = host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|a| a.is_loopback());
            match url.scheme() {
                "https" => {}
                "http" if loopback => {}
                _ => {
                    return Err(format!(
                        "--oidc-jwks-url {u:?} must be https:// (http:// only to a loopback host)"
                    ))
                }
            }
        }
        Ok(())
    }
}

/// A usable key: how to verify, and with which algorithms.
struct Key {
    key: DecodingKey,
    algorithms: Vec<Algorithm>,
}

struct Keys {
    by_kid: HashMap<String, Key>,
    /// Keys without a `kid` (usable only when the set has one key).
    anonymous: Vec<Key>,
    loaded: Instant,
}

impl Keys {
    fn empty() -> Self {
        Keys {
            by_kid: HashMap::new(),
            anonymous: Vec::new(),
            loaded: Instant::now(),
        }
    }

    fn len(&self) -> usize {
        self.by_kid.len() + self.anonymous.len()
    }

    fn find(&self, kid: Option<&str>) -> Option<&Key> {
        match kid {
            Some(k) => self.by_kid.get(k),
            None if self.len() == 1 => self.by_kid.values().chain(&self.anonymous).next(),
            None => None,
        }
    }
}

/// The asymmetric algorithms a key of this type verifies, narrowed to its `alg` when given;
/// `None` for keys never used (symmetric, encryption, unknown).
fn algorithms_of(jwk: &Jwk) -> Option<Vec<Algorithm>> {
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption) | Some(PublicKeyUse::Other(_))
    ) {
        return None;
    }
    let family: &[Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => &[
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            jsonwebtoken::jwk::EllipticCurve::P256 => &[Algorithm::ES256],
            jsonwebtoken::jwk::EllipticCurve::P384 => &[Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) => match p.curve {
            jsonwebtoken::jwk::EllipticCurve::Ed25519 => &[Algorithm::EdDSA],
            _ => return None,
        },
        // Symmetric keys are secrets: a key set is public, so never trust one.
        _ => return None,
    };
    let named = match jwk.common.key_algorithm {
        None => return Some(family.to_vec()),
        Some(KeyAlgorithm::RS256) => Algorithm::RS256,
        Some(KeyAlgorithm::RS384) => Algorithm::RS384,
        Some(KeyAlgorithm::RS512) => Algorithm::RS512,
        Some(KeyAlgorithm::PS256) => Algorithm::PS256,
        Some(KeyAlgorithm::PS384) => Algorithm::PS384,
        Some(KeyAlgorithm::PS512) => Algorithm::PS512,
        Some(KeyAlgorithm::ES256) => Algorithm::ES256,
        Some(KeyAlgorithm::ES384) => Algorithm::ES384,
        Some(KeyAlgorithm::EdDSA) => Algorithm::EdDSA,
        Some(_) => return None,
    };
    family.contains(&named).then(|| vec![named])
}

/// The signing keys of a key set document.
fn parse_keys(bytes: &[u8]) -> Result<Keys, String> {
    let set: JwkSet = serde_json::from_slice(bytes).map_err(|e| format!("not a JWK set: {e}"))?;
    let mut keys = Keys::empty();
    for jwk in &set.keys {
        let Some(algorithms) = algorithms_of(jwk) else {
            continue;
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| {
            format!(
                "key {:?}: {e}",
                jwk.common.key_id.as_deref().unwrap_or("(no kid)")
            )
        })?;
        let k = Key { key, algorithms };
        match &jwk.common.key_id {
            Some(kid) => {
                keys.by_kid.insert(kid.clone(), k);
            }
            None => keys.anonymous.push(k),
        }
        if keys.len() > MAX_KEYS {
            return Err(format!("more than {MAX_KEYS} signing keys"));
        }
    }
    if keys.len() == 0 {
        return Err("no signing key (RSA, P-256, P-384 or Ed25519) in the set".into());
    }
    Ok(keys)
}

/// Verifies JWTs against one provider.
pub struct Oidc {
    config: OidcConfig,
    keys: RwLock<Keys>,
    /// When the key set was last fetched or read (successfully or not); single flight.
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
    client: reqwest::Client,
}

impl Oidc {
    /// Checks the configuration and loads the keys. A key file must load; a URL that cannot be
    /// fetched now is logged and retried when a token arrives (until then JWTs are refused).
    pub async fn new(config: OidcConfig) -> Result<Self, String> {
        config.validate()?;
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make an HTTP client for the key set: {e}"))?;
        let oidc = Oidc {
            config,
            keys: RwLock::new(Keys::empty()),
            last_fetch: tokio::sync::Mutex::new(None),
            client,
        };
        match oidc.load().await {
            Ok(keys) => *oidc.keys.write().expect("keys lock") = keys,
            Err(e) => match &oidc.config.jwks {
                JwksSource::File(p) => {
                    return Err(format!("--oidc-jwks-file {}: {e}", p.display()))
                }
                JwksSource::Url(u) => {
                    tracing::warn!(url = %u, error = %e, "cannot fetch the OIDC key set yet; JWTs are refused until it can be")
                }
            },
        }
        *oidc.last_fetch.lock().await = Some(Instant::now());
        Ok(oidc)
    }

    async fn load(&self) -> Result<Keys, String> {
        let bytes = match &self.config.jwks {
            JwksSource::File(p) => {
                let meta = tokio::fs::metadata(p).await.map_err(|e| e.to_string())?;
                if meta.len() > MAX_JWKS_BYTES as u64 {
                    return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
                }
                tokio::fs::read(p).await.map_err(|e| e.to_string())?
            }
            JwksSource::Url(u) => self.fetch(u).await?,
        };
        parse_keys(&bytes)
    }

    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut res = self
            .client
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| format!("fetch failed: {e}"))?;
        if !res.status().is_success() {
            return Err(format!("fetch answered {}", res.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = res
            .chunk()
            .await
            .map_err(|e| format!("fetch failed: {e}"))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Reloads the keys if allowed now (`force`: a token named an unknown key; else only when
    /// stale). Callers that need the new keys wait for one reload; a routine refresh of stale keys
    /// never makes a request wait (it is skipped while another caller refreshes).
    async fn refresh(&self, force: bool) {
        let mut last = if force {
            self.last_fetch.lock().await
        } else {
            match self.last_fetch.try_lock() {
                Ok(l) => l,
                Err(_) => return,
            }
        };
        let since = last.map_or(Duration::MAX, |t| t.elapsed());
        // A file is local and small: read again every few seconds, so a key removed from it is
        // refused soon even while tokens keep naming it; a URL is the provider's, fetched rarely.
        let (stale_after, min_wait) = match self.config.jwks {
            JwksSource::File(_) => {
                let every = FILE_RELOAD_AFTER.min(self.config.min_refetch);
                (every, every)
            }
            JwksSource::Url(_) => (REFRESH_AFTER, self.config.min_refetch),
        };
        let stale = self.keys.read().expect("keys lock").loaded.elapsed() >= stale_after;
        if since < min_wait || !(force || stale) {
            return;
        }
        *last = Some(Instant::now());
        match self.load().await {
            Ok(keys) => *self.keys.write().expect("keys lock") = keys,
            Err(e) => {
                tracing::warn!(error = %e, "cannot reload the OIDC key set; keeping the keys loaded before")
            }
        }
    }

    /// The principal of a JWT, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Principal, String> {
        self.verify_until(token).await.map(|(p, _)| p)
    }

    /// [`Self::verify`], and the JWT's expiry (`exp`, Unix seconds): a dashboard session opened
    /// with it ends then.
    pub async fn verify_until(&self, token: &str) -> Result<(Principal, i64), String> {
        if token.len() > MAX_JWT_BYTES {
            return Err(format!("longer than {MAX_JWT_BYTES} bytes"));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("header: {e}"))?;
        // Extensions that must be understood (RFC 7515 §4.1.11): none is here, and a recipient
        // that does not understand one must reject the token.
        if let Some(c) = &header.crit {
            return Err(format!(
                "its header lists critical extensions {c:?} that this service does not understand"
            ));
        }
        let kid = header.kid.as_deref();
        self.refresh(false).await;
        let mut known = self.keys.read().expect("keys lock").find(kid).is_some();
        if !known {
            self.refresh(true).await;
            known = self.keys.read().expect("keys lock").find(kid).is_some();
        }
        if !known {
            return Err(format!("no signing key {kid:?} in the key set"));
        }
        let claims: serde_json::Map<String, serde_json::Value> = {
            let keys = self.keys.read().expect("keys lock");
            let key = keys.find(kid).expect("checked above");
            // Only the algorithms this key is for (never `none`, never HMAC).
            if !key.algorithms.contains(&header.alg) {
                return Err(format!(
                    "algorithm {:?} does not fit key {kid:?}",
                    header.alg
                ));
            }
            let mut v = Validation::new(header.alg);
            v.algorithms = key.algorithms.clone();
            v.set_issuer(&[&self.config.issuer]);
            v.set_audience(&[&self.config.audience]);
            v.set_required_spec_claims(&["exp", "iss", "aud"]);
            v.validate_nbf = true;
            v.leeway = LEEWAY_SECS;
            jsonwebtoken::decode(token, &key.key, &v)
                .map_err(|e| format!("invalid: {e}"))?
                .claims
        };
        let exp = claims
            .get("exp")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0);
        let now = chrono::Utc::now().timestamp() as f64;
        if exp - now > self.config.max_lifetime.as_secs_f64() + LEEWAY_SECS as f64 {
            return Err(format!(
                "valid for {:.0} s more, beyond the {} s allowed",
                exp - now,
                self.config.max_lifetime.as_secs()
            ));
        }
        let name = claims
            .get(&self.config.principal_claim)
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| format!("no string claim {:?}", self.config.principal_claim))?;
        let name = principal_name(&format!("{}{name}", self.config.principal_prefix))
            .map_err(|r| format!("claim {:?} {r}", self.config.principal_claim))?;
        let role = role_of(claims.get(&self.config.role_claim))
            .map_err(|r| format!("claim {:?}: {r}", self.config.role_claim))?;
        // A credential id for the audit log and rate limits: the token's `jti`, else its digest.
        let id = match claims.get("jti").and_then(serde_json::Value::as_str) {
            Some(j) if principal_name(j).is_ok() && j.len() <= 64 => j.to_owned(),
            _ => {
                let d = Sha256::digest(token.as_bytes());
                d[..8].iter().map(|b| format!("{b:02x}")).collect()
            }
        };
        let principal = Principal {
            token_id: format!("jwt:{id}"),
            name,
            role,
        };
        Ok((principal, exp.floor() as i64))
    }
}

/// The global role in a role claim: its one value that is a role, else `none`.
fn role_of(claim: Option<&serde_json::Value>) -> Result<String, String> {
    let values: Vec<&str> = match claim {
        None | Some(serde_json::Value::Null) => vec![],
        Some(serde_json::Value::String(s)) => vec![s.as_str()],
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
        Some(_) => return Err("must be a string or an array of strings".into()),
    };
    let mut roles: Vec<&str> = values
        .into_iter()
        .filter(|v| GLOBAL_ROLES.contains(v))
        .collect();
    roles.sort_unstable();
    roles.dedup();
    match roles.as_slice() {
        [] => Ok("none".into()),
        [r] => Ok((*r).to_owned()),
        _ => Err(format!("names several roles ({})", roles.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_role_claim_gives_one_role_or_none() {
        assert_eq!(role_of(None).unwrap(), "none");
        assert_eq!(role_of(Some(&json!("analyst"))).unwrap(), "analyst");
        assert_eq!(role_of(Some(&json!("superuser"))).unwrap(), "none");
        assert_eq!(
            role_of(Some(&json!(["offline_access", "auditor", "auditor"]))).unwrap(),
            "auditor"
        );
        assert!(role_of(Some(&json!(["admin", "analyst"]))).is_err());
        assert!(role_of(Some(&json!(7))).is_err());
    }

    #[test]
    fn symmetric_and_encryption_keys_are_never_loaded() {
        let oct = json!({"keys": [{"kty": "oct", "kid": "s", "k": "c2VjcmV0"}]});
        assert!(parse_keys(oct.to_string().as_bytes()).is_err());
        let enc =
            json!({"keys": [{"kty": "RSA", "use": "enc", "kid": "e", "n": "AQAB", "e": "AQAB"}]});
        assert!(parse_keys(enc.to_string().as_bytes()).is_err());
        let hs =
            json!({"keys": [{"kty": "RSA", "alg": "HS256", "kid": "h", "n": "AQAB", "e": "AQAB"}]});
        assert!(parse_keys(hs.to_string().as_bytes()).is_err());
    }

    #[test]
    fn key_set_urls_must_be_https_except_to_loopback() {
        let cfg = |u: &str| OidcConfig {
            issuer: "https://id.example".into(),
            audience: "privacy-ledger".into(),
            jwks: JwksSource::Url(u.into()),
            principal_claim: "sub".into(),
            principal_prefix: OIDC_NAMESPACE.into(),
            role_claim: "privacy_ledger_role".into(),
            max_lifetime: Duration::from_secs(3600),
            min_refetch: MIN_REFETCH,
        };
        assert!(cfg("https://id.example/jwks").validate().is_ok());
        assert!(cfg("http://127.0.0.1:9/jwks").validate().is_ok());
        assert!(cfg("http://localhost:9/jwks").validate().is_ok());
        assert!(cfg("http://id.example/jwks").validate().is_err());
        assert!(cfg("file:///etc/passwd").validate().is_err());
    }
}

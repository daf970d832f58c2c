//! OIDC/JWT bearer tokens, with keys these tests generate (RSA-2048 and P-256): what is accepted,
//! everything that must be refused (with the same 401), how principals and roles map onto grants
//! and the audit log, and key rotation from a file and from a URL.

use crate::api::{temp_dir, TestApp};
use axum::http::StatusCode;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use privacy_ledger::app::open_store;
use privacy_ledger::http::Limits;
use privacy_ledger::ledger::oidc::{JwksSource, Oidc, OidcConfig};
use privacy_ledger::ledger::Ledgers;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const ISSUER: &str = "https://id.example.org/realms/data";
const AUDIENCE: &str = "privacy-ledger";

/// A signing key and its public JWK.
struct SigningKey {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

fn rsa_key(kid: &str) -> SigningKey {
    use rsa::pkcs1::EncodeRsaPrivateKey;
    use rsa::traits::PublicKeyParts;
    let private = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 2048).unwrap();
    let der = private.to_pkcs1_der().unwrap();
    SigningKey {
        kid: kid.into(),
        alg: Algorithm::RS256,
        encoding: EncodingKey::from_rsa_der(der.as_bytes()),
        jwk: json!({
            "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
            "n": B64.encode(private.n().to_bytes_be()),
            "e": B64.encode(private.e().to_bytes_be()),
        }),
    }
}

fn ec_key(kid: &str) -> SigningKey {
    use p256::pkcs8::EncodePrivateKey;
    let private = p256::ecdsa::SigningKey::random(&mut rand::thread_rng());
    let der = private.to_pkcs8_der().unwrap();
    let point = private.verifying_key().to_encoded_point(false);
    SigningKey {
        kid: kid.into(),
        alg: Algorithm::ES256,
        encoding: EncodingKey::from_ec_der(der.as_bytes()),
        jwk: json!({
            "kty": "EC", "crv": "P-256", "kid": kid,
            "x": B64.encode(point.x().unwrap()),
            "y": B64.encode(point.y().unwrap()),
        }),
    }
}

fn jwks(keys: &[&SigningKey]) -> Value {
    json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Claims valid for five minutes, for principal `sub`.
fn claims(sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now(), "exp": now() + 300})
}

fn sign(key: &SigningKey, claims: &Value) -> String {
    let mut h = Header::new(key.alg);
    h.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&h, claims, &key.encoding).unwrap()
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn config(jwks: JwksSource) -> OidcConfig {
    OidcConfig {
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        jwks,
        principal_claim: "sub".into(),
        principal_prefix: privacy_ledger::ledger::oidc::OIDC_NAMESPACE.into(),
        role_claim: "privacy_ledger_role".into(),
        max_lifetime: Duration::from_secs(3600),
        min_refetch: Duration::from_millis(300),
    }
}

async fn app_with(cfg: OidcConfig) -> TestApp {
    let dir = temp_dir("oidc");
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let oidc = Oidc::new(cfg).await.unwrap();
    let ledgers = Ledgers::new(open_store(&url).await.unwrap()).with_oidc(Arc::new(oidc));
    TestApp::over_ledgers(ledgers, Limits::default(), dir).await
}

async fn status(
    app: &TestApp,
    method: &str,
    uri: &str,
    body: Option<&Value>,
    t: &str,
) -> StatusCode {
    app.call(method, uri, body, &[("authorization", &bearer(t))])
        .await
        .0
}

/// A JWT with a role acts with that role; without one it has its grants only; the audit log
/// names its principal and credential; our own tokens keep working beside it.
#[tokio::test]
async fn jwts_from_the_provider_act_as_their_principal_with_their_role() {
    let rsa = rsa_key("rsa-1");
    let ec = ec_key("ec-1");
    let dir = temp_dir("jwks");
    let file = dir.join("jwks.json");
    std::fs::write(&file, jwks(&[&rsa, &ec]).to_string()).unwrap();
    let app = app_with(config(JwksSource::File(file))).await;

    let mut c = claims("dana@example.org");
    c["privacy_ledger_role"] = json!(["offline_access", "admin"]);
    c["jti"] = json!("jwt-0001");
    let admin = sign(&rsa, &c);
    let ds = json!({"id": "clinic", "budget": {"mu": 1.0}});
    assert_eq!(
        status(&app, "POST", "/v1/datasets", Some(&ds), &admin).await,
        StatusCode::CREATED
    );

    // No role claim: grants only. The dataset is invisible until granted.
    let analyst = sign(&ec, &claims("erin"));
    let charge = json!({"event": {"type": "gdp", "mu": 0.5}});
    assert_eq!(
        status(
            &app,
            "POST",
            "/v1/datasets/clinic/charges",
            Some(&charge),
            &analyst
        )
        .await,
        StatusCode::NOT_FOUND
    );
    let grant = json!({"role": "analyst"});
    assert_eq!(
        status(
            &app,
            "PUT",
            "/v1/datasets/clinic/grants/oidc:erin",
            Some(&grant),
            &admin
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(
        status(
            &app,
            "POST",
            "/v1/datasets/clinic/charges",
            Some(&charge),
            &analyst
        )
        .await,
        StatusCode::CREATED
    );
    assert_eq!(
        status(
            &app,
            "PATCH",
            "/v1/datasets/clinic",
            Some(&json!({"budget": {"mu": 9.0}})),
            &analyst
        )
        .await,
        StatusCode::FORBIDDEN
    );
    // Our own token still works.
    assert_eq!(app.get("/v1/datasets/clinic").await.0, StatusCode::OK);

    let (_, page) = app.get("/v1/audit?dataset_id=clinic").await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items[0]["action"], "dataset.created");
    assert_eq!(items[0]["principal"], "oidc:dana@example.org");
    assert_eq!(items[0]["credential"], "jwt:jwt-0001");
    let charged = items
        .iter()
        .find(|r| r["action"] == "unit.admitted")
        .unwrap();
    assert_eq!(charged["principal"], "oidc:erin");
    assert!(charged["credential"].as_str().unwrap().starts_with("jwt:"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// The provider's principals live in their own namespace (issue 34, row 7): a JWT whose `sub` is
/// a local token's name does not get that token's grants, and no local token may be named into
/// the provider's namespace.
#[tokio::test]
async fn a_jwt_cannot_take_a_local_principals_grants() {
    let rsa = rsa_key("rsa-1");
    let dir = temp_dir("jwks");
    let file = dir.join("jwks.json");
    std::fs::write(&file, jwks(&[&rsa]).to_string()).unwrap();
    let app = app_with(config(JwksSource::File(file))).await;
    app.dataset("clinic", 1.0).await;
    let local = app.bearer("analytics", "none").await;
    let (s, _) = app
        .call(
            "PUT",
            "/v1/datasets/clinic/grants/analytics",
            Some(&json!({"role": "analyst"})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let charge = json!({"event": {"type": "gdp", "mu": 0.1}});
    let uri = "/v1/datasets/clinic/charges";
    let (s, _) = app
        .call("POST", uri, Some(&charge), &[("authorization", &local)])
        .await;
    assert_eq!(s, StatusCode::CREATED);
    // The same name as `sub`: another principal (`oidc:analytics`), with no grant.
    let jwt = sign(&rsa, &claims("analytics"));
    assert_eq!(
        status(&app, "POST", uri, Some(&charge), &jwt).await,
        StatusCode::NOT_FOUND
    );
    let (s, b) = app
        .post(
            "/v1/tokens",
            json!({"name": "oidc:analytics", "role": "analyst"}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["details"]["path"], "$.name");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Every way a JWT can be wrong gets the same 401 and changes nothing.
#[tokio::test]
async fn forged_misdirected_stale_and_malformed_jwts_are_refused() {
    let rsa = rsa_key("rsa-1");
    let stranger = rsa_key("rsa-1"); // same kid, a key the provider never published
    let dir = temp_dir("jwks");
    let file = dir.join("jwks.json");
    std::fs::write(&file, jwks(&[&rsa]).to_string()).unwrap();
    let app = app_with(config(JwksSource::File(file))).await;
    let good = {
        let mut c = claims("mallory");
        c["privacy_ledger_role"] = json!("admin");
        c
    };
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&rsa, &good)).await,
        StatusCode::OK
    );

    let with = |k: &str, v: Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };
    let without = |k: &str| {
        let mut c = good.clone();
        c.as_object_mut().unwrap().remove(k);
        c
    };
    let n = now();
    let mut cases: Vec<(&str, String)> = vec![
        (
            "signed by another key under the published kid",
            sign(&stranger, &good),
        ),
        (
            "another issuer",
            sign(&rsa, &with("iss", json!("https://evil.example"))),
        ),
        (
            "another audience",
            sign(&rsa, &with("aud", json!("some-other-api"))),
        ),
        ("no audience", sign(&rsa, &without("aud"))),
        ("no issuer", sign(&rsa, &without("iss"))),
        ("no expiry", sign(&rsa, &without("exp"))),
        (
            "expired beyond the leeway",
            sign(&rsa, &with("exp", json!(n - 120))),
        ),
        ("not yet valid", sign(&rsa, &with("nbf", json!(n + 600)))),
        (
            "valid for longer than allowed",
            sign(&rsa, &with("exp", json!(n + 2 * 86400))),
        ),
        (
            "two roles",
            sign(
                &rsa,
                &with("privacy_ledger_role", json!(["admin", "auditor"])),
            ),
        ),
        (
            "a role claim of the wrong type",
            sign(&rsa, &with("privacy_ledger_role", json!({"a": 1}))),
        ),
        (
            "a principal with forbidden characters",
            sign(&rsa, &with("sub", json!("a/b\u{0}"))),
        ),
        ("no principal", sign(&rsa, &without("sub"))),
        ("not a JWT", "eyJhbGciOi.x".into()),
        ("garbage", "pl_not-a-token".into()),
    ];
    // Unsigned: alg none.
    let body = B64.encode(good.to_string());
    let none = B64.encode(json!({"alg": "none", "kid": "rsa-1"}).to_string());
    cases.push(("alg none", format!("{none}.{body}.")));
    // Algorithm confusion: HS256 with the published RSA key's bytes as the HMAC secret.
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some("rsa-1".into());
    let secret = rsa.jwk["n"].as_str().unwrap().as_bytes().to_vec();
    cases.push((
        "HS256 keyed with the public key",
        jsonwebtoken::encode(&h, &good, &EncodingKey::from_secret(&secret)).unwrap(),
    ));
    // A kid the key set does not have.
    let mut h = Header::new(Algorithm::RS256);
    h.kid = Some("unknown".into());
    cases.push((
        "an unknown kid",
        jsonwebtoken::encode(&h, &good, &rsa.encoding).unwrap(),
    ));
    // The signature of one token on the claims of another.
    let a = sign(&rsa, &good);
    let b = sign(&rsa, &with("sub", json!("root")));
    let (a_head, a_rest) = a.split_once('.').unwrap();
    let sig = a_rest.rsplit_once('.').unwrap().1;
    let b_claims = b.split('.').nth(1).unwrap();
    cases.push(("a swapped payload", format!("{a_head}.{b_claims}.{sig}")));
    // Signed by the provider's key, but its header lists a critical extension (RFC 7515
    // §4.1.11) that the service does not understand: it must be refused.
    let crit_head = B64.encode(
        json!({"alg": "RS256", "typ": "JWT", "kid": rsa.kid, "crit": ["x-bound"], "x-bound": true})
            .to_string(),
    );
    let crit_body = B64.encode(good.to_string());
    let crit_sig = jsonwebtoken::crypto::sign(
        format!("{crit_head}.{crit_body}").as_bytes(),
        &rsa.encoding,
        Algorithm::RS256,
    )
    .unwrap();
    cases.push((
        "an unknown critical header extension",
        format!("{crit_head}.{crit_body}.{crit_sig}"),
    ));

    for (what, t) in &cases {
        let (s, body) = app
            .call(
                "GET",
                "/v1/datasets",
                None,
                &[("authorization", &bearer(t))],
            )
            .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{what}: {body}");
        assert_eq!(body["error"], "unauthenticated", "{what}");
        let ds = json!({"id": "x", "budget": {"mu": 1.0}});
        assert_eq!(
            status(&app, "POST", "/v1/datasets", Some(&ds), t).await,
            StatusCode::UNAUTHORIZED,
            "{what}"
        );
    }
    assert_eq!(app.get("/v1/datasets/x").await.0, StatusCode::NOT_FOUND);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A key set that names a symmetric key, or none usable, does not start the verifier.
#[tokio::test]
async fn a_key_file_without_a_signing_key_is_a_start_error() {
    let dir = temp_dir("jwks");
    let file = dir.join("jwks.json");
    std::fs::write(
        &file,
        json!({"keys": [{"kty": "oct", "kid": "s", "k": "c2VjcmV0"}]}).to_string(),
    )
    .unwrap();
    let e = Oidc::new(config(JwksSource::File(file.clone())))
        .await
        .err()
        .unwrap();
    assert!(e.contains("no signing key"), "{e}");
    std::fs::write(&file, "not json").unwrap();
    assert!(Oidc::new(config(JwksSource::File(file))).await.is_err());
    std::fs::remove_dir_all(dir).unwrap();
}

/// Keys are rotated by rewriting the file: a token under a new kid is accepted once the file has
/// it, and a removed key stops working.
#[tokio::test]
async fn rewriting_the_key_file_rotates_keys() {
    let old = rsa_key("2026-10");
    let new = ec_key("2026-11");
    let dir = temp_dir("jwks");
    let file = dir.join("jwks.json");
    std::fs::write(&file, jwks(&[&old]).to_string()).unwrap();
    let app = app_with(config(JwksSource::File(file.clone()))).await;
    let mut c = claims("ops");
    c["privacy_ledger_role"] = json!("auditor");
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&old, &c)).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&new, &c)).await,
        StatusCode::UNAUTHORIZED
    );
    std::fs::write(&file, jwks(&[&new]).to_string()).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&new, &c)).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&old, &c)).await,
        StatusCode::UNAUTHORIZED
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A key removed from the file is refused soon although tokens keep naming it (issue 34, row 3):
/// the file is read again on a timer, not only for an unknown `kid`.
#[tokio::test]
async fn a_key_removed_from_the_file_is_refused_within_seconds() {
    let kept = rsa_key("kept");
    let removed = ec_key("removed");
    let dir = temp_dir("jwks");
    let file = dir.join("jwks.json");
    std::fs::write(&file, jwks(&[&kept, &removed]).to_string()).unwrap();
    let app = app_with(config(JwksSource::File(file.clone()))).await;
    let mut c = claims("ops");
    c["privacy_ledger_role"] = json!("auditor");
    for key in [&kept, &removed] {
        assert_eq!(
            status(&app, "GET", "/v1/datasets", None, &sign(key, &c)).await,
            StatusCode::OK
        );
    }
    std::fs::write(&file, jwks(&[&kept]).to_string()).unwrap();
    // The configured minimum interval here is 300 ms (5 s in production).
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The first request after the interval reloads the file (only known kids are named).
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&kept, &c)).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&removed, &c)).await,
        StatusCode::UNAUTHORIZED
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A key set served at a URL (a local server standing in for the provider): fetched at start,
/// again for an unknown kid (rotation), but at most once per minimum interval however many
/// tokens with made-up kids arrive.
#[tokio::test]
async fn a_key_set_url_is_fetched_on_rotation_and_never_hammered() {
    let first = rsa_key("k1");
    let second = ec_key("k2");
    let served = Arc::new(Mutex::new(jwks(&[&first])));
    let fetches = Arc::new(AtomicUsize::new(0));
    let provider = {
        let (served, fetches) = (served.clone(), fetches.clone());
        axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (served, fetches) = (served.clone(), fetches.clone());
                async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    axum::Json(served.lock().unwrap().clone())
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, provider).await });
    let app = app_with(config(JwksSource::Url(format!("http://{addr}/jwks")))).await;
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "fetched at start");

    let mut c = claims("svc-trainer");
    c["privacy_ledger_role"] = json!("analyst");
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&first, &c)).await,
        StatusCode::OK
    );
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "a known kid needs no fetch"
    );

    // 40 tokens under made-up kids at once: at most one fetch in the interval.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let before = fetches.load(Ordering::SeqCst);
    let mut h = Header::new(Algorithm::RS256);
    let mut tasks = Vec::new();
    let app = Arc::new(app);
    for i in 0..40 {
        h.kid = Some(format!("made-up-{i}"));
        let t = jsonwebtoken::encode(&h, &c, &first.encoding).unwrap();
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            status(&app, "GET", "/v1/datasets", None, &t).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::UNAUTHORIZED);
    }
    let storm = fetches.load(Ordering::SeqCst) - before;
    assert!(storm <= 1, "{storm} fetches for 40 unknown kids");

    // The provider rotates; after the interval the new kid is fetched and accepted.
    *served.lock().unwrap() = jwks(&[&first, &second]);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&second, &c)).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "GET", "/v1/datasets", None, &sign(&first, &c)).await,
        StatusCode::OK
    );
}

/// A dashboard session opened with a JWT lasts no longer than the JWT (its `exp`), never the
/// 12 h of a token's; the cookie is a session id, not the JWT.
#[tokio::test]
async fn a_dashboard_session_from_a_jwt_ends_when_the_jwt_does() {
    use tower::ServiceExt;
    let rsa = rsa_key("rsa-1");
    let dir = temp_dir("jwks");
    let file = dir.join("jwks.json");
    std::fs::write(&file, jwks(&[&rsa]).to_string()).unwrap();
    let app = app_with(config(JwksSource::File(file))).await;
    let mut c = claims("fay@example.org");
    c["privacy_ledger_role"] = json!("auditor");
    let jwt = sign(&rsa, &c);
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/ui/signin")
        .header("sec-fetch-site", "same-origin")
        .header("content-type", "application/x-www-form-urlencoded")
        .extension(axum::extract::ConnectInfo(std::net::SocketAddr::from((
            [192, 0, 2, 8],
            1,
        ))))
        .body(axum::body::Body::from(format!("token={jwt}")))
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let set = res.headers()["set-cookie"].to_str().unwrap();
    assert!(set.starts_with("pl_session=ps_") && !set.contains(&jwt));
    let age: i64 = set
        .split("Max-Age=")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // The JWT's 300 s, less the second or two the test took (the claim is whole seconds).
    assert!((295..=300).contains(&age), "Max-Age={age}");
}

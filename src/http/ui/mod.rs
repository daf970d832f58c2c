//! The dashboard at `/ui`: server-rendered HTML and SVG from assets compiled into the binary
//! (no script, nothing loaded from a network), over the same ledger front door as the API.
//!
//! **Sign-in.** The same tokens (or JWTs) as the API: `POST /ui/signin` checks the credential
//! and opens a server-side session ([`crate::ledger::sessions`]); the browser gets only the
//! session's random id, in an `HttpOnly`, `SameSite=Strict` cookie scoped to `/ui` (`Secure` when
//! the request came over HTTPS through a proxy that says so). The id is no API credential, the
//! store keeps only its hash, and every page reads the session (and the token behind it) again,
//! so sign-out, expiry and a revoked token end it at its next request on every replica. A page
//! shows only what the principal may see (the ledger authorises every read). The API itself
//! never reads the cookie, so it cannot be driven by a cross-site form.
//!
//! **Forms** (`signin`, `signout`, `preview`) are refused unless the browser says they came from
//! this origin (`Sec-Fetch-Site`, else `Origin` against `Host`); the cookie's `SameSite=Strict`
//! is the second line. The preview only asks the gate; nothing on the dashboard spends.

mod charts;
pub mod fmt;
mod pages;

use super::error::ApiError;
use super::AppState;
use crate::ledger::principal::Actor;
use crate::ledger::sessions::is_session_id;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Form, FromRequestParts, Path, Query, State};
use axum::http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use maud::Markup;
use std::net::SocketAddr;
use std::time::Duration;

/// The session cookie.
const COOKIE: &str = "pl_session";

/// Largest form accepted (the preview's event is the largest field).
const MAX_FORM_BYTES: usize = 64 * 1024;

/// Longest filter text kept.
const MAX_FILTER_CHARS: usize = 256;

/// The dashboard's Content-Security-Policy: nothing but this origin's stylesheet and forms.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

const STYLE: &str = include_str!("style.css");

/// The dashboard's routes (state applied by the caller), with their own limits.
pub fn routes(state: AppState, timeout: Duration) -> Router {
    Router::new()
        .route("/ui", get(datasets))
        .route("/ui/", get(|| async { Redirect::to("/ui") }))
        // A browser at the service's root wants the dashboard, not a JSON 404.
        .route("/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/signin", get(signin_page).post(signin))
        .route("/ui/signout", post(signout))
        .route("/ui/datasets/{id}", get(dataset))
        .route("/ui/datasets/{id}/preview", post(preview))
        .route("/ui/audit", get(audit))
        .route("/ui/assets/style.css", get(style))
        .route("/ui/{*rest}", get(not_found))
        .with_state(state)
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
        .layer(axum::middleware::map_response(headers))
}

/// Every dashboard answer: its own CSP, never cached (pages show a live ledger).
async fn headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// An HTML page with a status.
fn page(status: StatusCode, m: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        m.into_string(),
    )
        .into_response()
}

/// A ledger error as a page, with the status and code the API gives it.
fn error_page(principal: Option<&str>, e: impl Into<ApiError>) -> Response {
    let e: ApiError = e.into();
    let (code, message) = e.code_and_message();
    page(
        e.status(),
        pages::error(principal, e.status().as_u16(), code, message),
    )
}

/// The signed-in caller of a page; without a valid session, the page answers with a redirect to
/// the sign-in form.
struct Session(Actor);

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, Response> {
        let Some(id) = cookie(&parts.headers) else {
            return Err(Redirect::to("/ui/signin").into_response());
        };
        match super::actor(parts, s, super::Credential::Session(&id)).await {
            Ok(a) => Ok(Session(a)),
            Err(e) if e.status() == StatusCode::UNAUTHORIZED => {
                Err(signed_out(Redirect::to("/ui/signin").into_response()))
            }
            Err(e) => Err(error_page(None, e)),
        }
    }
}

/// The session id in the request's cookies.
fn cookie(h: &HeaderMap) -> Option<String> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
        .filter(|v| is_session_id(v))
}

/// Tokens are `pl_` and hex, or a JWT (base64url and dots): nothing a cookie must quote.
fn token_chars(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 8192
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Clears the session cookie on `res`.
fn signed_out(mut res: Response) -> Response {
    res.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_str(&format!(
            "{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"
        ))
        .expect("a fixed cookie is a header value"),
    );
    res
}

/// Whether a form post came from this origin (see the module docs).
fn same_origin(h: &HeaderMap) -> bool {
    if let Some(site) = h.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return matches!(site, "same-origin" | "none");
    }
    match (
        h.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        h.get(header::HOST).and_then(|v| v.to_str().ok()),
    ) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, rest)| rest == host),
        // Neither header: not a browser's cross-site form (browsers send Origin on POST).
        (None, _) => true,
        (Some(_), None) => false,
    }
}

fn cross_site() -> Response {
    page(
        StatusCode::FORBIDDEN,
        pages::error(
            None,
            403,
            "cross_site",
            "this form must be sent from the dashboard's own pages",
        ),
    )
}

async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        STYLE,
    )
        .into_response()
}

async fn not_found() -> Response {
    page(
        StatusCode::NOT_FOUND,
        pages::error(None, 404, "not_found", "no such page"),
    )
}

async fn signin_page() -> Response {
    page(StatusCode::OK, pages::signin(None))
}

#[derive(serde::Deserialize)]
struct SignIn {
    token: String,
}

async fn signin(
    State(s): State<AppState>,
    headers: HeaderMap,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    form: Form<SignIn>,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    let token = form.0.token.trim().to_owned();
    if !token_chars(&token) {
        return page(
            StatusCode::UNAUTHORIZED,
            pages::signin(Some(
                "That is not a token: tokens look like pl_ followed by hex digits.",
            )),
        );
    }
    let peer = peer.map(|p| p.0 .0);
    let opened = s.ledgers.open_session(
        &token,
        super::request_id(&headers),
        peer.map(|p| p.to_string()),
    );
    match super::throttled_auth(&s, peer, opened).await {
        Ok(session) => {
            let https = headers
                .get("x-forwarded-proto")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
            let cookie = format!(
                "{COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{}",
                session.id,
                session.seconds,
                if https { "; Secure" } else { "" }
            );
            let mut res = Redirect::to("/ui").into_response();
            let v = HeaderValue::from_str(&cookie).expect("a session id and digits are a header");
            res.headers_mut().insert(header::SET_COOKIE, v);
            res
        }
        Err(e) if e.status() == StatusCode::UNAUTHORIZED => page(
            StatusCode::UNAUTHORIZED,
            pages::signin(Some("This token is unknown, revoked or expired.")),
        ),
        Err(e) => error_page(None, e),
    }
}

/// Ends the session on the server (its cookie no longer opens a page), then in the browser.
async fn signout(
    State(s): State<AppState>,
    headers: HeaderMap,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    if let Some(id) = cookie(&headers) {
        // A session that already ended has nothing to close.
        if let Ok(principal) = s.ledgers.session(&id).await {
            let actor = Actor {
                principal,
                request_id: super::request_id(&headers),
                client: peer.map(|p| p.0 .0.to_string()),
            };
            if let Err(e) = s.ledgers.close_session(&actor, &id).await {
                // Not signed out on the server: say so rather than clear the cookie.
                return error_page(Some(&actor.principal.name), e);
            }
        }
    }
    signed_out(Redirect::to("/ui/signin").into_response())
}

#[derive(Default, serde::Deserialize)]
struct After {
    after: Option<String>,
}

/// Dataset cards per page.
const CARDS_PAGE: i64 = 60;

async fn datasets(Session(actor): Session, State(s): State<AppState>, uri: Uri) -> Response {
    let who = actor.principal.name.clone();
    let after = query::<After>(&uri).after.filter(|a| text_ok(a));
    match s
        .ledgers
        .dashboard_cards(&actor, after.as_deref(), CARDS_PAGE)
        .await
    {
        Ok((cards, next)) => page(
            StatusCode::OK,
            pages::datasets(&who, &cards, next.as_deref()),
        ),
        Err(e) => error_page(Some(&who), e),
    }
}

/// A page's query parameters; a malformed query string (a page number that is not one, say)
/// shows the page unfiltered rather than an error.
fn query<T: serde::de::DeserializeOwned + Default>(uri: &Uri) -> T {
    Query::<T>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

/// Filter text the store may see: bounded, no control characters (PostgreSQL refuses NUL).
fn text_ok(s: &str) -> bool {
    s.chars().count() <= MAX_FILTER_CHARS && !s.chars().any(char::is_control)
}

/// A dataset id from the path, checked as the API checks it.
fn dataset_id(id: &str) -> Result<(), ApiError> {
    crate::ledger::input::ledger_id(id, &crate::accountant::json::JsonPath::root())
        .map(|_| ())
        .map_err(|e| ApiError::invalid_param("path.id", e.reason))
}

async fn dataset(
    Session(actor): Session,
    State(s): State<AppState>,
    Path(id): Path<String>,
    uri: Uri,
) -> Response {
    let who = actor.principal.name.clone();
    if let Err(e) = dataset_id(&id) {
        return error_page(Some(&who), e);
    }
    let mut filter: pages::TableFilter = query(&uri);
    for t in [&mut filter.q, &mut filter.principal, &mut filter.status] {
        if !text_ok(t) {
            t.clear();
        }
    }
    match s.ledgers.dashboard_dataset(&actor, &id).await {
        Ok(p) => page(StatusCode::OK, pages::dataset(&who, &p, &filter)),
        Err(e) => error_page(Some(&who), e),
    }
}

async fn preview(
    Session(actor): Session,
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Form<pages::PreviewFields>,
) -> Response {
    let who = actor.principal.name.clone();
    if !same_origin(&headers) {
        return cross_site();
    }
    if let Err(e) = dataset_id(&id) {
        return error_page(Some(&who), e);
    }
    let form = form.0;
    // The event: the JSON as given, or built from the fields (a field that is not a number is
    // named here; ranges are the API's parser's to check).
    let event = if form.is_json() {
        super::json_body(form.event.as_bytes())
    } else {
        form.event()
            .map_err(|(field, why)| ApiError::invalid_param(field, &why))
    };
    // The API's own parsing: the event as `POST …/charges/preview` takes it.
    let (event, parsed) = match event {
        Ok(v) => {
            let req = crate::ledger::input::ChargeRequest::from_json(
                &serde_json::json!({ "event": &v }),
                None,
            );
            (Some(v), req.map_err(ApiError::from))
        }
        Err(e) => (None, Err(e)),
    };
    let result = match parsed {
        Ok(req) => s
            .ledgers
            .preview(&actor, &id, req)
            .await
            .map_err(ApiError::from),
        Err(e) => Err(e),
    };
    match result {
        Ok(p) => {
            let suggestions = match &event {
                Some(e) => suggest(&s, &actor, &id, e).await,
                None => pages::Suggestions::default(),
            };
            page(
                StatusCode::OK,
                pages::preview(&who, &id, &form, event.as_ref(), Ok((&p, &suggestions))),
            )
        }
        Err(e)
            if e.status() == StatusCode::UNPROCESSABLE_ENTITY
                || e.status() == StatusCode::BAD_REQUEST =>
        {
            page(
                e.status(),
                pages::preview(&who, &id, &form, event.as_ref(), Err(e.code_and_message())),
            )
        }
        Err(e) => error_page(Some(&who), e),
    }
}

/// Calibration's answers for the previewed event, both at once: the smallest noise multiplier
/// and the most steps that fit now (each absent when the event has no such parameter, nothing
/// fits, or calibration is refused — a suggestion is never required).
async fn suggest(
    s: &AppState,
    actor: &Actor,
    id: &str,
    event: &serde_json::Value,
) -> pages::Suggestions {
    let calibrate = |free: &'static str| async move {
        let req = crate::ledger::input::CalibrateRequest::from_json(
            &serde_json::json!({"event": event, "free_parameter": free}),
            false,
        )
        .ok()?;
        s.ledgers.calibrate(actor, id, req).await.ok()
    };
    let (sigma, steps) = tokio::join!(calibrate("noise_multiplier"), calibrate("count"));
    pages::Suggestions {
        noise_multiplier: sigma.map(|c| c.value).filter(|v| v.is_finite() && *v > 0.0),
        steps: steps
            .map(|c| c.value)
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v as u64),
    }
}

/// Audit records per page.
const AUDIT_PAGE: i64 = 200;

async fn audit(Session(actor): Session, State(s): State<AppState>, uri: Uri) -> Response {
    let who = actor.principal.name.clone();
    let f: pages::AuditFilter = query(&uri);
    if ![&f.dataset_id, &f.principal, &f.action]
        .iter()
        .all(|t| text_ok(t))
    {
        return error_page(
            Some(&who),
            ApiError::invalid_param(
                "query",
                "filters are at most 256 characters, without control characters",
            ),
        );
    }
    // Days as the audit log's times are written (RFC 3339, UTC): from the first day's start to
    // the start of the day after the last.
    let day = |s: &str, next: bool| -> Result<Option<String>, ApiError> {
        if s.is_empty() {
            return Ok(None);
        }
        let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| {
            ApiError::invalid_param("query", format!("{s:?} is not a day (YYYY-MM-DD)"))
        })?;
        let d = if next { d.succ_opt().unwrap_or(d) } else { d };
        // Written like the stored times (milliseconds, `Z`), so the strings compare as the
        // instants do: `…T00:00:00Z` sorts after `…T00:00:00.500Z` and would put a record of
        // the day's first second under the day before.
        Ok(Some(format!("{}T00:00:00.000Z", d.format("%Y-%m-%d"))))
    };
    let (since, until) = match (day(&f.from, false), day(&f.to, true)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return error_page(Some(&who), e),
    };
    let nonempty = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_owned());
    let query = crate::store::AuditQuery {
        dataset_id: nonempty(&f.dataset_id),
        principal: nonempty(&f.principal),
        since,
        until,
        action_prefix: nonempty(&f.action),
        after: 0,
        limit: AUDIT_PAGE,
    };
    // Newest first: what an officer looks for is what just happened.
    let before = (f.before > 0).then_some(f.before);
    let whole = f.dataset_id.trim().is_empty();
    match s.ledgers.list_audit_newest(&actor, query, before).await {
        Ok((records, next)) => page(StatusCode::OK, pages::audit(&who, &f, &records, next)),
        // The navigation's link, followed by someone who audits single datasets only: the page
        // with its filters and what to do, not a 403.
        Err(crate::ledger::LedgerError::Forbidden(why)) if whole => {
            page(StatusCode::OK, pages::audit_needs_dataset(&who, &f, &why))
        }
        Err(e) => error_page(Some(&who), e),
    }
}

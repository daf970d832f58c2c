//! The HTTP edge: router, extractors, OpenAPI, docs page, middleware.

pub mod conn;
mod docs;
pub mod error;
mod events_schema;
pub mod handlers;
pub mod rate;
pub mod ui;
pub mod wire;

use crate::ledger::Ledgers;
use axum::extract::{DefaultBodyLimit, FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use error::ApiError;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    pub ledgers: Arc<Ledgers>,
    pub metrics: PrometheusHandle,
    /// Grid step for datasets created without one.
    pub default_grid_step: crate::accountant::params::GridStep,
    /// Requests per principal (set by [`router`] from its [`Limits`]).
    pub limiter: Arc<rate::RateLimiter>,
    /// Failed authentications per client address ([`rate::FAILED_AUTH_PER_SECOND`]).
    pub auth_failures: Arc<rate::RateLimiter>,
}

/// Limits applied to every request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Longest a request may take (408 beyond).
    pub request_timeout: Duration,
    /// Requests per second per principal on average (429 beyond), and at once.
    pub rate_per_second: f64,
    pub rate_burst: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            rate_per_second: 100.0,
            rate_burst: 200.0,
        }
    }
}

/// The authenticated caller of a request, with its request id and address (for the audit log):
/// every handler except health, readiness and the spec takes one, so a request without a valid
/// `Authorization: Bearer` token is refused (401) before the handler runs. What the caller may do
/// is decided by the ledger ([`crate::ledger::Ledgers::authorize`]).
pub struct Caller(pub crate::ledger::principal::Actor);

impl axum::extract::FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        s: &AppState,
    ) -> Result<Self, ApiError> {
        // One credential per request: with two, which one acts would depend on who reads them.
        if parts.headers.get_all(header::AUTHORIZATION).iter().count() > 1 {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "duplicate_header",
                "header authorization: given more than once; send one credential",
            ));
        }
        let secret = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            // The scheme is case-insensitive (RFC 9110 §11.1).
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .filter(|t| !t.is_empty())
            .ok_or(crate::ledger::LedgerError::Unauthenticated)?;
        Ok(Caller(actor(parts, s, Credential::Bearer(secret)).await?))
    }
}

/// What a request authenticates with: an API credential (a token or a JWT, from
/// `Authorization`), or a dashboard session's id (from its cookie).
#[derive(Clone, Copy)]
pub(crate) enum Credential<'a> {
    Bearer(&'a str),
    Session(&'a str),
}

/// The client address of a request, as the listener saw it.
pub(crate) fn peer(parts: &axum::http::request::Parts) -> Option<std::net::SocketAddr> {
    parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0)
}

/// `check` (a credential's lookup) behind the per-address throttle of failed authentications:
/// an address that keeps failing waits (429) instead of making the store work per guess.
pub(crate) async fn throttled_auth<T>(
    s: &AppState,
    peer: Option<std::net::SocketAddr>,
    check: impl std::future::Future<Output = Result<T, crate::ledger::LedgerError>>,
) -> Result<T, ApiError> {
    let address = peer.map(|p| p.ip().to_string());
    if let Some(a) = &address {
        s.auth_failures.peek(a).map_err(|wait| {
            throttled(
                "too_many_failed_authentications",
                "failed authentications from this address",
                wait,
            )
        })?;
    }
    check.await.map_err(|e| {
        if let (Some(a), crate::ledger::LedgerError::Unauthenticated) = (&address, &e) {
            let _ = s.auth_failures.check(a);
        }
        e.into()
    })
}

/// The principal of `credential`, throttled per address while failing and rate-limited per
/// principal, with the request's id and client address: the caller of an API request or of a
/// dashboard page.
pub(crate) async fn actor(
    parts: &axum::http::request::Parts,
    s: &AppState,
    credential: Credential<'_>,
) -> Result<crate::ledger::principal::Actor, ApiError> {
    let peer = peer(parts);
    let p = throttled_auth(s, peer, async {
        match credential {
            Credential::Bearer(secret) => s.ledgers.authenticate(secret).await,
            Credential::Session(id) => s.ledgers.session(id).await,
        }
    })
    .await?;
    // Per principal: a caller cannot escape its limit by making more tokens (or JWTs).
    s.limiter
        .check(&p.name)
        .map_err(|wait| throttled("rate_limited", "requests from this principal", wait))?;
    Ok(crate::ledger::principal::Actor {
        principal: p,
        request_id: request_id(&parts.headers),
        client: peer.map(|p| p.to_string()),
    })
}

/// The caller's `X-Request-Id`, for the audit log.
pub(crate) fn request_id(h: &axum::http::HeaderMap) -> Option<String> {
    h.get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// 429 `code`: too many `what`; retry in `wait` seconds (also in `Retry-After`).
fn throttled(code: &'static str, what: &str, wait: u64) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        code,
        format!("too many {what}; retry in {wait} s"),
    )
    .with_details(serde_json::json!({"retry_after_seconds": wait}))
    .with_retry_after(wait)
}

/// Adds the bearer scheme to the spec, so generated clients send the token.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token from the first start's output, `privacy-ledger token create` or \
                         `POST /v1/tokens` (`pl_…`); or, where the service is configured for an \
                         OpenID Connect issuer, a JWT from that issuer",
                    ))
                    .build(),
            ),
        );
    }
}

/// `axum::Json` whose rejections use the API's error shape.
/// A JSON request body, parsed strictly ([`crate::accountant::json::parse_strict`]): 415 unless
/// the content type is JSON, 413 beyond the body limit, 400 when it is not JSON, 422 naming the
/// path for a key given twice or a NUL character.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync> FromRequest<S> for ApiJson<serde_json::Value> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            })
            .is_some_and(|m| {
                m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
            });
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON, sent with Content-Type: application/json",
            ));
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|r| match r.status() {
                StatusCode::PAYLOAD_TOO_LARGE => error::for_status(StatusCode::PAYLOAD_TOO_LARGE),
                s => ApiError::new(s, "unreadable_body", r.body_text()),
            })?;
        json_body(&bytes).map(ApiJson)
    }
}

/// A request body parsed strictly ([`crate::accountant::json::parse_strict`]): 400 when it is
/// not JSON, 422 naming the path for a key given twice or a NUL character.
pub(crate) fn json_body(bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    use crate::accountant::json::{parse_strict, ParseError};
    parse_strict(bytes).map_err(|e| match e {
        ParseError::Syntax(m) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_json",
            format!("the body is not valid JSON: {m}"),
        ),
        ParseError::Invalid(e) => e.into(),
    })
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "privacy-ledger",
        description = "Differential-privacy budgets kept exactly: each dataset has a μ-GDP budget; \
            charges (mechanism invocations) are composed with everything spent before and admitted \
            or rejected atomically. Reports give μ, ε(δ), δ(ε), the trade-off curve and attack risk, \
            each as a sound bracket.",
        license(name = "Apache-2.0")
    ),
    modifiers(&BearerAuth),
    // Types only a parameter refers to (bodies register theirs).
    components(schemas(wire::AuditFormat)),
    security(("bearer" = [])),
    tags(
        (name = "datasets", description = "Datasets and their budgets"),
        (name = "charges", description = "The budget gate: charge, preview, ledger"),
        (name = "reports", description = "The budget's guarantee and what was spent, each named, in the research's terms"),
        (name = "accountant", description = "Stateless accounting"),
        (name = "access", description = "Tokens, grants, quotas and the audit log"),
        (name = "operations", description = "Health and readiness")
    )
)]
struct ApiDoc;

/// The routes with their OpenAPI description (one source for both, so they cannot diverge).
fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(handlers::create_dataset, handlers::list_datasets))
        .routes(routes!(handlers::get_dataset, handlers::update_dataset))
        .routes(routes!(handlers::create_charge, handlers::list_charges))
        .routes(routes!(handlers::create_multi_charge))
        .routes(routes!(handlers::list_blocks))
        .routes(routes!(handlers::get_headline))
        .routes(routes!(handlers::get_alerts, handlers::put_alerts))
        .routes(routes!(handlers::declare_block))
        .routes(routes!(handlers::preview_charge))
        .routes(routes!(handlers::start_charge))
        .routes(routes!(handlers::commit_charge))
        .routes(routes!(handlers::release_charge))
        .routes(routes!(handlers::declare_run, handlers::list_runs))
        .routes(routes!(handlers::get_run))
        .routes(routes!(handlers::run_chunk))
        .routes(routes!(handlers::get_report))
        .routes(routes!(handlers::get_tradeoff))
        .routes(routes!(handlers::compose))
        .routes(routes!(handlers::calibrate))
        .routes(routes!(handlers::certificate))
        .routes(routes!(handlers::calibrate_dataset))
        .routes(routes!(handlers::list_grants))
        .routes(routes!(handlers::put_grant, handlers::delete_grant))
        .routes(routes!(handlers::list_quotas))
        .routes(routes!(handlers::put_quota))
        .routes(routes!(handlers::list_audit))
        .routes(routes!(handlers::list_tokens, handlers::create_token))
        .routes(routes!(handlers::revoke_token))
        .routes(routes!(handlers::healthz))
        .routes(routes!(handlers::readyz))
}

/// The OpenAPI document, as committed at `openapi/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = api().split_for_parts().1;
    every_operation_states_its_errors(&mut doc);
    every_query_parameter_states_its_limits(&mut doc);
    doc
}

/// What [`check_params`] and the list parsers accept, stated on every query parameter: text
/// parameters at most [`MAX_PARAM_CHARS`] characters without control characters (the pattern
/// excludes exactly Unicode's Cc, which `char::is_control` refuses); the number lists' grammar
/// from the parser's own constants ([`crate::ledger::input::UNIT_NUMBER`],
/// [`crate::ledger::input::EPSILON_NUMBER`]).
fn every_query_parameter_states_its_limits(doc: &mut utoipa::openapi::OpenApi) {
    use crate::ledger::input::{list_pattern, EPSILON_NUMBER, UNIT_NUMBER};
    use utoipa::openapi::path::ParameterIn;
    use utoipa::openapi::schema::{Schema, SchemaType, Type};
    use utoipa::openapi::RefOr;
    for op in operations(doc) {
        for p in op.parameters.iter_mut().flatten() {
            if !matches!(p.parameter_in, ParameterIn::Query) {
                continue;
            }
            let Some(RefOr::T(Schema::Object(o))) = p.schema.as_mut() else {
                continue;
            };
            if o.schema_type != SchemaType::Type(Type::String) {
                continue;
            }
            o.max_length = Some(
                o.max_length
                    .map_or(MAX_PARAM_CHARS, |m| m.min(MAX_PARAM_CHARS)),
            );
            match p.name.as_str() {
                "deltas" | "alphas" | "alpha" => o.pattern = Some(list_pattern(UNIT_NUMBER)),
                "epsilons" => o.pattern = Some(list_pattern(EPSILON_NUMBER)),
                _ if o.pattern.is_none() && o.format.is_none() => {
                    o.pattern = Some(NO_CONTROL_CHARACTERS.into())
                }
                _ => {}
            }
        }
    }
}

/// Text without control characters (Unicode's Cc: U+0000–U+001F, U+007F–U+009F).
const NO_CONTROL_CHARACTERS: &str = r"^[^\u0000-\u001F\u007F-\u009F]*$";

/// Every operation of the document.
fn operations(
    doc: &mut utoipa::openapi::OpenApi,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    doc.paths.paths.values_mut().flat_map(|item| {
        [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
    })
}

/// Every operation can answer 4xx with the error body (401 without a valid token, 403, 404, 422
/// for a malformed path or query parameter, 429 past the rate limit, 413/414/415…) and 503 (store
/// unavailable, overloaded, busy: with Retry-After): added where an operation does not list them
/// already, so a client knows the shape of every answer.
fn every_operation_states_its_errors(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::schema::Ref;
    use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
    let error = |description: &str| {
        RefOr::T(
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build(),
        )
    };
    for op in operations(doc) {
        let r = &mut op.responses.responses;
        r.entry("4XX".into()).or_insert_with(|| {
                error("Refused: unauthenticated (401), forbidden (403), not found (404), invalid (422), rate limited (429), …")
            });
        r.entry("503".into()).or_insert_with(|| {
            error("Unavailable (the store, or the service at capacity): retry after Retry-After")
        });
    }
}

/// The OpenAPI document as pretty JSON (what `privacy-ledger openapi` prints and `/openapi.json`
/// serves), with the event model's schemas ([`events_schema`]).
pub fn openapi_json() -> String {
    let mut v = serde_json::to_value(openapi()).expect("the spec serialises");
    events_schema::add(&mut v);
    serde_json::to_string_pretty(&v).expect("the spec serialises")
}

/// Longest client-supplied `X-Request-Id` kept (longer or odd ones are replaced by a fresh id).
const MAX_REQUEST_ID: usize = 128;

/// Drops a client's `X-Request-Id` unless it is 1–128 characters from [A-Za-z0-9._:-] (so a log
/// line or a response header never carries what a client smuggled in); the id layer then sets a
/// fresh one.
async fn check_request_id(mut req: Request, next: Next) -> Response {
    let ok = req.headers().get("x-request-id").map(|v| {
        let b = v.as_bytes();
        !b.is_empty()
            && b.len() <= MAX_REQUEST_ID
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
    });
    if ok == Some(false) {
        req.headers_mut().remove("x-request-id");
    }
    next.run(req).await
}

/// Standard security headers on every response (the service sends no CORS headers: browsers on
/// other origins cannot call it).
fn security_headers(router: Router) -> Router {
    use tower_http::set_header::SetResponseHeaderLayer;
    let h = |name: &'static str, value: &'static str| {
        SetResponseHeaderLayer::if_not_present(
            header::HeaderName::from_static(name),
            HeaderValue::from_static(value),
        )
    };
    router
        .layer(h("x-content-type-options", "nosniff"))
        .layer(h("x-frame-options", "DENY"))
        .layer(h("referrer-policy", "no-referrer"))
        .layer(h("cache-control", "no-store"))
        .layer(h(
            "content-security-policy",
            "default-src 'none'; frame-ancestors 'none'",
        ))
}

/// The collector of process metrics (CPU seconds, resident memory, open files, threads), read
/// at each scrape.
pub fn process_metrics() -> &'static metrics_process::Collector {
    static COLLECTOR: std::sync::OnceLock<metrics_process::Collector> = std::sync::OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// Counts and times every request by method, route template (`/v1/datasets/{id}`, so the series
/// are bounded by the routes, not by ids) and status; requests that match no route count as
/// `unmatched`.
async fn http_metrics(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_owned();
    let method = req.method().as_str().to_owned();
    let started = std::time::Instant::now();
    let res = next.run(req).await;
    let status = res.status().as_u16().to_string();
    metrics::histogram!("privacy_ledger_http_request_duration_seconds",
        "method" => method.clone(), "route" => route.clone())
    .record(started.elapsed().as_secs_f64());
    metrics::counter!("privacy_ledger_http_requests_total",
        "method" => method, "route" => route, "status" => status)
    .increment(1);
    res
}

/// Longest path parameter or query value accepted.
const MAX_PARAM_CHARS: usize = 256;

/// Checks every path parameter and query value of a matched route before its handler runs: text
/// without control characters (NUL included: no database column can hold it), at most
/// [`MAX_PARAM_CHARS`], and a dataset id (`{id}`) by the ids' rule. Otherwise 422 naming
/// `path.<name>` or `query.<name>`. One place for every route and both stores.
async fn check_params(
    params: Result<axum::extract::RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    req: Request,
    next: Next,
) -> Response {
    fn text(location: &str, v: &str) -> Result<(), ApiError> {
        if v.chars().count() > MAX_PARAM_CHARS {
            return Err(ApiError::invalid_param(
                location,
                format!("must be at most {MAX_PARAM_CHARS} characters"),
            ));
        }
        if v.chars().any(char::is_control) {
            return Err(ApiError::invalid_param(
                location,
                "must not contain control characters (NUL, newline, …)",
            ));
        }
        Ok(())
    }
    let checked = (|| {
        let params = params.map_err(|r| ApiError::invalid_param("path", r.body_text()))?;
        for (name, value) in &params {
            let location = format!("path.{name}");
            text(&location, value)?;
            if name == "id" {
                crate::ledger::input::ledger_id(value, &crate::accountant::json::JsonPath::root())
                    .map_err(|e| ApiError::invalid_param(&location, e.reason))?;
            }
        }
        if let Some(q) = req.uri().query() {
            let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(req.uri())
                .map_err(|_| {
                    ApiError::invalid_param("query", format!("cannot be decoded: {q:?}"))
                })?;
            for (k, v) in &pairs.0 {
                text("query", k)?;
                text(&format!("query.{k}"), v)?;
            }
        }
        Ok::<(), ApiError>(())
    })();
    match checked {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Longest request target (path and query) accepted: 414 beyond. (hyper itself answers a bare 414
/// beyond 64 KiB, before any of this code runs.)
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// Largest error body rewritten (error bodies are small; a larger one passes unchanged).
const MAX_ERROR_BODY: usize = 1 << 20;

/// Every 4xx/5xx leaves with the API's error shape and the request id: bare statuses from layers
/// (timeouts, unknown routes, panics) get a body, every error body gets `request_id`, and a
/// too-long request target is refused here with 414.
async fn error_envelope(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    let res = if target > MAX_URI_BYTES {
        ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the request target is {target} bytes; at most {MAX_URI_BYTES} are accepted"),
        )
        .into_response()
    } else {
        next.run(req).await
    };
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let is_json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let bytes = axum::body::to_bytes(body, MAX_ERROR_BODY).await.ok();
    let mut obj = match (is_json, bytes) {
        (true, Some(b)) => match serde_json::from_slice::<serde_json::Value>(&b) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => return Response::from_parts(parts, axum::body::Body::from(b)),
        },
        _ => match serde_json::to_value(error::for_status(status).body()) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        },
    };
    obj.insert("request_id".into(), serde_json::json!(id));
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = serde_json::to_vec(&obj).expect("a JSON map serialises");
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// The router with CORS for `origins` (checked origins, see the `--cors-origin` flag); unchanged
/// when there are none, so by default browsers on other origins cannot call the service.
pub fn with_cors(router: Router, origins: &[String]) -> Router {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return router;
    }
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    let h = header::HeaderName::from_static;
    router.layer(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([
                axum::http::Method::GET,
                axum::http::Method::POST,
                axum::http::Method::PUT,
                axum::http::Method::PATCH,
                axum::http::Method::DELETE,
            ])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                h("idempotency-key"),
                h("x-request-id"),
            ])
            .expose_headers([h("x-request-id"), h("x-next-cursor"), header::RETRY_AFTER])
            .max_age(Duration::from_secs(600)),
    )
}

/// The application router (what tests drive with `oneshot` and `serve` binds).
pub fn router(mut state: AppState, limits: Limits) -> Router {
    state.limiter = Arc::new(rate::RateLimiter::new(
        limits.rate_per_second,
        limits.rate_burst,
    ));
    let (api, _) = api().split_for_parts();
    let api = api.route_layer(middleware::from_fn(check_params));
    let spec = Arc::new(openapi_json());
    let state_for_ui = state.clone();
    let inner = api
        .route(
            "/openapi.json",
            get(move || {
                let spec = spec.clone();
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        )],
                        (*spec).clone(),
                    )
                }
            }),
        )
        .route(
            "/docs",
            get(|| async {
                (
                    [
                        (
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("text/html; charset=utf-8"),
                        ),
                        (
                            header::CONTENT_SECURITY_POLICY,
                            HeaderValue::from_static(docs::CSP),
                        ),
                    ],
                    docs::cached(),
                )
            }),
        )
        .route("/metrics", get(handlers::metrics))
        .fallback(|| async { error::for_status(StatusCode::NOT_FOUND) })
        .with_state(state.clone())
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
        .layer(CatchPanicLayer::new())
        .layer(middleware::from_fn(error_envelope));
    let app = inner
        .merge(ui::routes(state_for_ui, limits.request_timeout))
        .layer(middleware::from_fn(http_metrics));
    security_headers(app)
    .layer(PropagateRequestIdLayer::x_request_id())
    .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
        let id = req
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        tracing::info_span!("request", method = %req.method(), uri = %req.uri(), request_id = %id)
    }).on_failure(log_failure))
    .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
    .layer(middleware::from_fn(check_request_id))
}

/// Logs a failed request: 503s (refused under load, the store away, the caps reached) at most one
/// line per [`REFUSALS_LOG_EVERY`] with how many there were, since a storm makes thousands a second;
/// any other failure (a 500, a panic) at ERROR, every time.
fn log_failure(
    class: tower_http::classify::ServerErrorsFailureClass,
    latency: Duration,
    _span: &tracing::Span,
) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tower_http::classify::ServerErrorsFailureClass as C;
    static REFUSED: AtomicU64 = AtomicU64::new(0);
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    match class {
        C::StatusCode(StatusCode::SERVICE_UNAVAILABLE) => {
            let n = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
            let mut last = LAST.lock().expect("refusal log");
            if last.is_none_or(|t| t.elapsed() >= REFUSALS_LOG_EVERY) {
                *last = Some(std::time::Instant::now());
                REFUSED.fetch_sub(n, Ordering::Relaxed);
                tracing::warn!(
                    refused = n,
                    "requests answered 503 (overloaded, busy, store unavailable or too many \
                     connections) since the last such line"
                );
            }
        }
        other => {
            tracing::error!(class = %other, latency_ms = latency.as_millis() as u64, "request failed")
        }
    }
}

/// How often refused (503) requests are logged, with their count.
pub const REFUSALS_LOG_EVERY: Duration = Duration::from_secs(10);

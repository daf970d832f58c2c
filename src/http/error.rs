//! The one place errors become HTTP responses: `{error, message, details}` for every 4xx/5xx.

use crate::accountant::{AccountantError, InputError};
use crate::ledger::LedgerError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

/// The error body of every 4xx/5xx response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Machine-readable code, e.g. `invalid_field`, `not_found`, `budget_exceeded`.
    #[schema(example = "invalid_field")]
    pub error: String,
    /// Human-readable explanation.
    #[schema(example = "$.event.noise_multiplier: must be a finite number > 0, got -1")]
    pub message: String,
    /// Structured details (for input errors: `path` and `reason`).
    #[schema(value_type = Object)]
    pub details: Value,
    /// The request's id (also in the `x-request-id` header), to quote when reporting it.
    pub request_id: Option<String>,
}

/// The 409 body of a run's chunk: `budget_exceeded` with the figures ([`BudgetExceededBody`]),
/// or `run_complete` / `chunk_mismatch` ([`ErrorBody`]). (`anyOf`: a budget body is also an
/// error body.)
pub struct ChunkConflict;

impl utoipa::PartialSchema for ChunkConflict {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{AnyOfBuilder, Ref};
        AnyOfBuilder::new()
            .item(Ref::from_schema_name("BudgetExceededBody"))
            .item(Ref::from_schema_name("ErrorBody"))
            .description(Some(
                "`budget_exceeded` (BudgetExceededBody, with the figures), or `run_complete` / \
                 `chunk_mismatch` (ErrorBody)",
            ))
            .into()
    }
}

impl ToSchema for ChunkConflict {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::PartialSchema;
        schemas.push((
            BudgetExceededBody::name().into(),
            BudgetExceededBody::schema(),
        ));
        BudgetExceededBody::schemas(schemas);
        schemas.push((ErrorBody::name().into(), ErrorBody::schema()));
        ErrorBody::schemas(schemas);
    }
}

/// The 409 body of a run declared without `allow_partial` whose chunks do not all fit what is
/// left (`run_does_not_fit`): the error fields, with how much of it fits as `details`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunDoesNotFitBody {
    #[schema(example = "run_does_not_fit")]
    pub error: String,
    pub message: String,
    pub details: crate::ledger::RunFit,
    /// The request's id (also in the `x-request-id` header), to quote when reporting it.
    pub request_id: Option<String>,
}

/// The 409 body when a charge does not fit the budget (the error fields plus the figures).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetExceededBody {
    #[schema(example = "budget_exceeded")]
    pub error: String,
    pub message: String,
    /// The figures: what the unit would have made of the filter's sums, the budget, and why.
    #[serde(flatten)]
    pub rejection: crate::ledger::Rejection,
    #[schema(value_type = Object)]
    pub details: Value,
    /// The request's id.
    pub request_id: Option<String>,
}

/// An error on its way to the client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    details: Value,
    extra: Map<String, Value>,
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a status, a code and a message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: json!({}),
            extra: Map::new(),
            retry_after: None,
        }
    }

    /// The status it maps to.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Its code (`not_found`, `budget_exceeded`, …) and message.
    pub fn code_and_message(&self) -> (&'static str, &str) {
        (self.code, &self.message)
    }

    /// Adds a Retry-After header (seconds).
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Adds structured details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// A 422 naming a query parameter or header.
    pub fn invalid_param(location: &str, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            format!("{location}: {reason}"),
        )
        .with_details(json!({"path": location, "reason": reason}))
    }
}

impl From<InputError> for ApiError {
    fn from(e: InputError) -> Self {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            e.to_string(),
        )
        .with_details(json!({"path": e.path, "reason": e.reason}))
    }
}

impl From<AccountantError> for ApiError {
    fn from(e: AccountantError) -> Self {
        match e {
            AccountantError::Input(i) => i.into(),
            AccountantError::TooLarge {
                ref path,
                ref reason,
            } => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "too_large", e.to_string())
                .with_details(json!({"path": path, "reason": reason})),
            AccountantError::Unsupported {
                ref path,
                ref reason,
            } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unsupported_event",
                e.to_string(),
            )
            .with_details(json!({"path": path, "reason": reason})),
            AccountantError::Stopped(s) => match s {
                crate::accountant::work::Stopped::Deadline(secs) => {
                    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "too_slow", s.to_string())
                        .with_details(json!({"limit_seconds": secs}))
                }
                _ => ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "computation_stopped",
                    s.to_string(),
                ),
            },
            AccountantError::NeedsNumericalEngine { ref path, .. } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unsupported_event",
                e.to_string(),
            )
            .with_details(json!({"path": path})),
        }
    }
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::NotFound(id) => ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("dataset {id:?} does not exist"),
            )
            .with_details(json!({"id": id})),
            LedgerError::AlreadyExists(id) => ApiError::new(
                StatusCode::CONFLICT,
                "already_exists",
                format!("dataset {id:?} already exists"),
            )
            .with_details(json!({"id": id})),
            LedgerError::BudgetExceeded(r) => {
                let details = serde_json::to_value(&*r).unwrap_or_default();
                let mut err =
                    ApiError::new(StatusCode::CONFLICT, "budget_exceeded", r.reason.clone())
                        .with_details(details.clone());
                // Every field of the rejection ([`BudgetExceededBody`]), beside the error's.
                if let Value::Object(m) = details {
                    err.extra.extend(m);
                }
                err
            }
            LedgerError::IdempotencyKeyReused(key) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                format!(
                    "Idempotency-Key {key:?} was already used with a different request body; \
                     use a new key for a new request"
                ),
            )
            .with_details(json!({"idempotency_key": key})),
            LedgerError::Accountant(a) => a.into(),
            LedgerError::Unavailable(source) => {
                tracing::warn!(error = %source, "store unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the ledger store is unavailable; a change may have committed before it stopped \
                     answering: retry later with the same Idempotency-Key",
                )
                .with_retry_after(1)
            }
            LedgerError::Overloaded(retry) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                format!(
                    "the accountant is at capacity (numerical computations running and queued); \
                     retry in {retry} s"
                ),
            )
            .with_details(json!({"retry_after_seconds": retry}))
            .with_retry_after(retry),
            LedgerError::Busy => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "too many concurrent writers on this dataset; retry with the same Idempotency-Key",
            )
            .with_retry_after(1),
            LedgerError::Corrupt(id, m) => {
                tracing::error!(dataset_id = %id, error = %m, "corrupt dataset state");
                ApiError::new(
                    StatusCode::CONFLICT,
                    "dataset_state_corrupt",
                    format!(
                        "dataset {id:?} cannot be used: its stored state is corrupt ({m}); no \
                         charge is admitted on it until an operator repairs it"
                    ),
                )
                .with_details(json!({"id": id, "reason": m}))
            }
            LedgerError::Invalid(field, reason) => ApiError::invalid_param(&field, reason),
            LedgerError::QuotaConflict(m) => {
                ApiError::new(StatusCode::CONFLICT, "quota_conflict", m.clone())
                    .with_details(json!({"reason": m}))
            }
            LedgerError::ReadOnly(m) => ApiError::new(StatusCode::CONFLICT, "read_only", m.clone())
                .with_details(json!({"reason": m})),
            LedgerError::ChargeNotFound(c) => ApiError::new(
                StatusCode::NOT_FOUND,
                "charge_not_found",
                format!("charge {c:?} does not exist on this dataset"),
            )
            .with_details(json!({"charge_id": c})),
            LedgerError::RunNotFound(r) => ApiError::new(
                StatusCode::NOT_FOUND,
                "run_not_found",
                format!("run {r:?} does not exist on this dataset"),
            )
            .with_details(json!({"run_id": r})),
            LedgerError::NotReserved { charge, status } => ApiError::new(
                StatusCode::CONFLICT,
                "not_reserved",
                format!(
                    "charge {charge:?} is {status}: only a reserved unit can be started or \
                     released, and only a reserved or started one committed"
                ),
            )
            .with_details(json!({"charge_id": charge, "status": status})),
            LedgerError::StateCorrupt(id, why) => ApiError::new(
                StatusCode::CONFLICT,
                "dataset_state_corrupt",
                format!("dataset {id:?}: {why}"),
            )
            .with_details(json!({"dataset_id": id})),
            LedgerError::TooManyNewLedgers(retry, why) => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_new_ledgers", why.clone())
                    .with_details(json!({"reason": why, "retry_after_seconds": retry}))
                    .with_retry_after(retry)
            }
            LedgerError::CapExceeded(why) => {
                ApiError::new(StatusCode::CONFLICT, "cap_exceeded", why.clone())
                    .with_details(json!({"reason": why}))
            }
            LedgerError::UnitStarted(c) => ApiError::new(
                StatusCode::CONFLICT,
                "unit_started",
                format!(
                    "charge {c:?} was started: its job has read the data, so its outcome (even a \
                     failure, or its timing) may depend on it and a refund would break the \
                     filter's guarantee; commit it"
                ),
            )
            .with_details(json!({"charge_id": c})),
            LedgerError::UnitReleased { charge, view } => ApiError::new(
                StatusCode::CONFLICT,
                "unit_released",
                format!(
                    "charge {charge:?}, which this request's Idempotency-Key reserved, was \
                     released since and its budget refunded: run nothing on it; reserve a new \
                     unit with a new key"
                ),
            )
            .with_details(json!({"charge_id": charge, "charge": view})),
            LedgerError::NotOwner(why) => ApiError::new(
                StatusCode::FORBIDDEN,
                "not_owner",
                why.clone(),
            )
            .with_details(json!({"reason": why})),
            LedgerError::OutputsReleased(c) => ApiError::new(
                StatusCode::CONFLICT,
                "outputs_released",
                format!(
                    "charge {c:?}: a unit whose outputs were released cannot be refunded (the \
                     filter's guarantee counts every unit whose outputs anyone saw); commit it"
                ),
            )
            .with_details(json!({"charge_id": c})),
            LedgerError::ChunkMismatch { run, asked, next } => ApiError::new(
                StatusCode::CONFLICT,
                "chunk_mismatch",
                format!(
                    "run {run:?}: the request asks for chunk {asked} but the next chunk is {} \
                     (a retry of a request that was admitted?); nothing was charged",
                    next.map_or("none (the run is complete)".into(), |n| n.to_string())
                ),
            )
            .with_details(json!({"run_id": run, "chunk": asked, "next_chunk": next})),
            LedgerError::ReleaseRefused { charge, reason } => ApiError::new(
                StatusCode::CONFLICT,
                "release_refused",
                format!("charge {charge:?} cannot be released: {reason}"),
            )
            .with_details(json!({"charge_id": charge, "reason": reason})),
            LedgerError::Unauthenticated => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "send a valid token: Authorization: Bearer <token> (the first start of the service \
                 prints an admin token; `privacy-ledger token create` makes more)",
            ),
            LedgerError::Forbidden(why) => ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("{why}; ask an admin for a token with the right role"),
            )
            .with_details(json!({"reason": why})),
            LedgerError::RunDoesNotFit(fit) => ApiError::new(
                StatusCode::CONFLICT,
                "run_does_not_fit",
                format!(
                    "only {} of the run's {} chunks ({} of {} steps) fit what is left of the budget \
                     now ({}); declare fewer steps, or pass \"allow_partial\": true to declare it \
                     anyway (each chunk is still gated when taken)",
                    fit.chunks_that_fit, fit.chunks, fit.steps_that_fit, fit.steps, fit.refused_by
                ),
            )
            .with_details(json!(fit)),
            LedgerError::RunComplete(r) => ApiError::new(
                StatusCode::CONFLICT,
                "run_complete",
                format!("run {r:?} has no chunk left to admit: every chunk is reserved or charged"),
            )
            .with_details(json!({"run_id": r})),
            LedgerError::Internal(m) => {
                tracing::error!(error = %m, "internal error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "something went wrong on our side",
                )
            }
        }
    }
}

impl ApiError {
    /// The JSON body: `{error, message, details}` and any extra fields.
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("error".into(), json!(self.code));
        body.insert("message".into(), json!(self.message));
        body.insert("details".into(), self.details.clone());
        body.extend(self.extra.clone());
        Value::Object(body)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            res.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(s),
            );
        }
        if self.status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        res
    }
}

/// The JSON body for a bare status produced by a layer (timeout, unknown route, panic): keeps the
/// one error shape for every 4xx/5xx.
pub fn for_status(status: StatusCode) -> ApiError {
    let (code, message) = match status {
        StatusCode::NOT_FOUND => ("not_found", "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => {
            ("method_not_allowed", "method not allowed on this route")
        }
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "the request body is too large"),
        StatusCode::REQUEST_TIMEOUT => (
            "timeout",
            "the request took too long; a change may have committed: retry with the same \
             Idempotency-Key to get its outcome",
        ),
        StatusCode::URI_TOO_LONG => (
            "uri_too_long",
            "the request target is too long (at most 65,534 bytes)",
        ),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
            "header_fields_too_large",
            "the request's head is too large (at most 100 header fields, and a head the server \
             can buffer)",
        ),
        StatusCode::BAD_REQUEST => (
            "bad_request",
            "the request is not valid HTTP/1.1 (its method, target, version or a header)",
        ),
        StatusCode::SERVICE_UNAVAILABLE => ("unavailable", "the service is unavailable"),
        s if s.is_server_error() => ("internal", "something went wrong on our side"),
        _ => ("error", "the request failed"),
    };
    ApiError::new(status, code, message)
}

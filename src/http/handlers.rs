//! Handlers: extract, parse into domain types, call the ledger, convert to wire types.

use super::error::{ApiError, BudgetExceededBody, ChunkConflict, ErrorBody};
use super::wire::*;
use super::{ApiJson, AppState, Caller};
use crate::ledger::input::{self, ChargeRequest, NewDataset};
use crate::ledger::principal::Action;
use crate::ledger::schema::ReportWire;
use crate::ledger::{
    Calibrated, ChargeCreated, DatasetReport, DatasetView, Preview, Settled, TradeoffView,
    UnitCurve,
};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::Value;
use std::collections::HashMap;

type ApiResult<T> = Result<T, ApiError>;

/// Page size bounds.
const MAX_PAGE: i64 = 1000;
const DEFAULT_PAGE: i64 = 100;

fn page_limit(q: &HashMap<String, String>) -> ApiResult<i64> {
    page_limit_of(q, DEFAULT_PAGE, MAX_PAGE)
}

/// `limit` in [1, `max`], `default` when absent.
fn page_limit_of(q: &HashMap<String, String>, default: i64, max: i64) -> ApiResult<i64> {
    match q.get("limit") {
        None => Ok(default),
        Some(s) => s
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| {
                ApiError::invalid_param(
                    "query.limit",
                    format!("must be a whole number in [1, {max}]"),
                )
            }),
    }
}

/// The `after` cursor of a page: a whole number ≥ 0 (default 0).
fn page_after(q: &HashMap<String, String>) -> ApiResult<i64> {
    match q.get("after") {
        None => Ok(0),
        Some(a) => a
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| ApiError::invalid_param("query.after", "must be a whole number ≥ 0")),
    }
}

fn unknown_params(q: &HashMap<String, String>, allowed: &[&str]) -> ApiResult<()> {
    match q.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::invalid_param(
            &format!("query.{k}"),
            format!("unknown parameter; allowed: {}", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => {
            let s = v
                .to_str()
                .map_err(|_| ApiError::invalid_param("header.Idempotency-Key", "must be ASCII"))?;
            input::idempotency_key(s)
                .map(Some)
                .map_err(|r| ApiError::invalid_param("header.Idempotency-Key", r))
        }
    }
}

/// Create a dataset with a μ-GDP budget. Retrying the same body returns 200 with the dataset.
#[utoipa::path(post, path = "/v1/datasets", tag = "datasets",
    request_body = CreateDatasetRequest,
    responses(
        (status = 201, description = "Created", body = DatasetView),
        (status = 200, description = "A retry of the same creation: the dataset", body = DatasetView),
        (status = 409, description = "A dataset with this id exists (created with another body)", body = ErrorBody),
        (status = "4XX", description = "Invalid request", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn create_dataset(
    caller: Caller,
    State(s): State<AppState>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let d = NewDataset::from_json(&body, s.default_grid_step)?;
    let (v, created) = s.ledgers.create_dataset(&caller.0, d).await?;
    Ok((created_or_ok(created), Json(v)))
}

/// List datasets by id (paginated: `limit`, `cursor`).
#[utoipa::path(get, path = "/v1/datasets", tag = "datasets",
    params(("limit" = Option<i64>, Query, description = "Page size (1-1000, default 100)", minimum = 1, maximum = 1000),
           ("cursor" = Option<String>, Query, description = "The next_cursor of the previous page")),
    responses((status = 200, description = "A page of datasets", body = DatasetPage),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn list_datasets(
    caller: Caller,
    State(s): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<DatasetPage>> {
    unknown_params(&q, &["limit", "cursor"])?;
    let limit = page_limit(&q)?;
    let (items, next) = s
        .ledgers
        .list_datasets(&caller.0, q.get("cursor").map(String::as_str), limit)
        .await?;
    Ok(Json(DatasetPage {
        items,
        next_cursor: next,
    }))
}

/// A dataset: budget, μ spent with its bracket, remaining μ, number of charges.
#[utoipa::path(get, path = "/v1/datasets/{id}", tag = "datasets",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193)),
    responses((status = 200, description = "The dataset", body = DatasetView),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn get_dataset(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<DatasetView>> {
    Ok(Json(s.ledgers.get_dataset(&caller.0, &id).await?))
}

/// Change a dataset's budget (recorded in the ledger). With an `Idempotency-Key` a retry returns
/// the first outcome.
#[utoipa::path(patch, path = "/v1/datasets/{id}", tag = "datasets",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: 1-255 visible ASCII characters. A 503, a 408 or a dropped connection may hide a change that committed: retry with the same key (kept as long as the ledger) to get its outcome (200) instead of a second change", pattern = r"^[!-~]{1,255}$", min_length = 1, max_length = 255)),
    request_body = UpdateDatasetRequest,
    responses((status = 200, description = "The updated dataset", body = DatasetView),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn update_dataset(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Value>> {
    let patch = input::budget_patch(&body, idempotency_key(&headers)?)?;
    Ok(Json(s.ledgers.update_budget(&caller.0, &id, patch).await?))
}

fn created_or_ok(created: bool) -> StatusCode {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    }
}

/// A body that may be empty (`{}` then).
fn optional_body(body: &axum::body::Bytes) -> ApiResult<Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Default::default()));
    }
    // Strict as every other body; `null` means no options.
    match super::json_body(body)? {
        Value::Null => Ok(Value::Object(Default::default())),
        v => Ok(v),
    }
}

/// Declare a run (e.g. DP-SGD): its step, its number of steps and its chunk size. Nothing is
/// charged: each chunk is a unit admitted when asked for (`/runs/{run_id}/chunks`), so a run that
/// stops early is not charged for the chunks it did not run.
#[utoipa::path(post, path = "/v1/datasets/{id}/runs", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: 1-255 visible ASCII characters. A 503, a 408 or a dropped connection may hide a change that committed: retry with the same key (kept as long as the ledger) to get its outcome (200) instead of a second change", pattern = r"^[!-~]{1,255}$", min_length = 1, max_length = 255)),
    request_body = RunRequestWire,
    responses((status = 201, description = "Declared", body = crate::ledger::RunView),
              (status = 200, description = "Replay of an earlier request with the same Idempotency-Key", body = crate::ledger::RunView),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = 409, description = "`run_does_not_fit`: not every chunk fits what is left for the caller now (declare fewer steps, or pass `allow_partial`); with `reserve`, also `budget_exceeded` when another unit took the room before every chunk was reserved (those reserved are released)", body = crate::http::error::RunDoesNotFitBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn declare_run(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let req = input::RunRequest::from_json(&body, idempotency_key(&headers)?)?;
    let (run, created) = s.ledgers.declare_run(&caller.0, &id, req).await?;
    Ok((created_or_ok(created), Json(run)))
}

/// The dataset's runs, oldest first, each with its progress: chunks committed, reserved and
/// released, steps taken, μ used and μ the rest of the run will need (paginated: `limit`, `after`).
#[utoipa::path(get, path = "/v1/datasets/{id}/runs", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("limit" = Option<i64>, Query, description = "Page size (1-100, default 20)", minimum = 1, maximum = 100),
           ("after" = Option<i64>, Query, description = "Return runs declared after this cursor (`next_cursor` of the previous page)", minimum = 0)),
    responses((status = 200, description = "A page of runs", body = RunPage),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn list_runs(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<RunPage>> {
    unknown_params(&q, &["limit", "after"])?;
    let (limit, after) = (page_limit_of(&q, 20, 100)?, page_after(&q)?);
    let (items, next) = s.ledgers.list_runs(&caller.0, &id, after, limit).await?;
    Ok(Json(RunPage {
        items,
        next_cursor: next,
    }))
}

/// A run with its progress: chunks committed, reserved and released, and the next chunk.
#[utoipa::path(get, path = "/v1/datasets/{id}/runs/{run_id}", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("run_id" = String, Path, description = "Run id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")),
    responses((status = 200, description = "The run", body = crate::ledger::RunView),
              (status = 404, description = "No such dataset or run", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn get_run(
    caller: Caller,
    State(s): State<AppState>,
    Path((id, run_id)): Path<(String, String)>,
) -> ApiResult<Json<crate::ledger::RunView>> {
    Ok(Json(s.ledgers.get_run(&caller.0, &id, &run_id).await?))
}

/// Admit (or reserve) the run's next chunk: a unit gated like a charge. 409 `budget_exceeded`
/// when it does not fit, 409 `run_complete` when every chunk is admitted.
#[utoipa::path(post, path = "/v1/datasets/{id}/runs/{run_id}/chunks", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("run_id" = String, Path, description = "Run id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$"),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: 1-255 visible ASCII characters. A 503, a 408 or a dropped connection may hide a change that committed: retry with the same key (kept as long as the ledger) to get its outcome (200) instead of a second change", pattern = r"^[!-~]{1,255}$", min_length = 1, max_length = 255)),
    request_body(content = Option<ChunkRequestWire>, description = "Optional (no body, or null, is `{}`): `{\"reserve\": true}` to reserve the chunk"),
    responses((status = 201, description = "Admitted and recorded", body = ChargeCreated),
              (status = 200, description = "Replay of an earlier request with the same Idempotency-Key", body = ChargeCreated),
              (status = 409, description = "The chunk does not fit the budget (`budget_exceeded`, with the figures), the run is complete (`run_complete`) or the request names another chunk (`chunk_mismatch`)", body = ChunkConflict),
              (status = 404, description = "No such dataset or run", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn run_chunk(
    caller: Caller,
    State(s): State<AppState>,
    Path((id, run_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<impl IntoResponse> {
    let body = optional_body(&body)?;
    let req = input::ChunkRequest::from_json(&body, &run_id, idempotency_key(&headers)?)?;
    let out = s.ledgers.run_chunk(&caller.0, &id, &run_id, req).await?;
    Ok((created_or_ok(out.created), Json(out.body)))
}

/// Start a reserved unit: its job is about to read the data. From then on the unit can only be
/// committed (409 `unit_started` on a release): a job that has read the data reveals something
/// even by failing. Only the principal that reserved it, or an admin of the dataset giving a
/// `reason`, may (403 `not_owner`). Starting a started unit changes nothing.
#[utoipa::path(post, path = "/v1/datasets/{id}/charges/{charge_id}/start", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("charge_id" = String, Path, description = "Charge id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$"),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: 1-255 visible ASCII characters, scoped to the caller, this operation and this charge", pattern = r"^[!-~]{1,255}$", min_length = 1, max_length = 255)),
    request_body(content = Option<SettleRequestWire>, description = "Optional (no body, or null, is `{}`)"),
    responses((status = 200, description = "Started", body = Settled),
              (status = 409, description = "The charge is not reserved (`not_reserved`)", body = ErrorBody),
              (status = 403, description = "Not the unit's owner (`not_owner`), or no right to spend", body = ErrorBody),
              (status = 404, description = "No such dataset or charge", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn start_charge(
    caller: Caller,
    State(s): State<AppState>,
    Path((id, charge_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let req = settle_request(&body, &charge_id, input::SettleKind::Start, &headers)?;
    Ok(Json(
        s.ledgers.settle(&caller.0, &id, &charge_id, req).await?,
    ))
}

/// Commit a reserved (or started) unit: it stays counted and joins the exact composition. Only the
/// principal that reserved it, or an admin of the dataset giving a `reason`, may (403
/// `not_owner`).
#[utoipa::path(post, path = "/v1/datasets/{id}/charges/{charge_id}/commit", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("charge_id" = String, Path, description = "Charge id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$"),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: 1-255 visible ASCII characters, scoped to the caller, this operation and this charge", pattern = r"^[!-~]{1,255}$", min_length = 1, max_length = 255)),
    request_body(content = Option<SettleRequestWire>, description = "Optional (no body, or null, is `{}`)"),
    responses((status = 200, description = "Committed", body = Settled),
              (status = 409, description = "The charge is neither reserved nor started (`not_reserved`)", body = ErrorBody),
              (status = 403, description = "Not the unit's owner (`not_owner`), or no right to spend", body = ErrorBody),
              (status = 404, description = "No such dataset or charge", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn commit_charge(
    caller: Caller,
    State(s): State<AppState>,
    Path((id, charge_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let req = settle_request(&body, &charge_id, input::SettleKind::Commit, &headers)?;
    Ok(Json(
        s.ledgers.settle(&caller.0, &id, &charge_id, req).await?,
    ))
}

/// A start, commit or release request from its optional body and headers.
fn settle_request(
    body: &axum::body::Bytes,
    charge_id: &str,
    kind: input::SettleKind,
    headers: &HeaderMap,
) -> ApiResult<input::SettleRequest> {
    let body = optional_body(body)?;
    Ok(input::SettleRequest::from_json(
        &body,
        charge_id,
        kind,
        idempotency_key(headers)?,
    )?)
}

/// Release a reserved unit that was not started and none of whose outputs was released: the
/// filter refunds its (μᵢ, δᵢ). The caller's statement is recorded in the ledger;
/// `outputs_released: true` is refused (409 `outputs_released`), and so is a started unit (409
/// `unit_started`): commit the unit instead. Only the principal that reserved it, or an admin of
/// the dataset giving a `reason`, may (403 `not_owner`).
#[utoipa::path(post, path = "/v1/datasets/{id}/charges/{charge_id}/release", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("charge_id" = String, Path, description = "Charge id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$"),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: 1-255 visible ASCII characters, scoped to the caller, this operation and this charge", pattern = r"^[!-~]{1,255}$", min_length = 1, max_length = 255)),
    request_body = ReleaseRequestWire,
    responses((status = 200, description = "Released and refunded", body = Settled),
              (status = 409, description = "Not reserved (`not_reserved`), started (`unit_started`), or outputs were released (`outputs_released`)", body = ErrorBody),
              (status = 403, description = "Not the unit's owner (`not_owner`), or no right to spend", body = ErrorBody),
              (status = 404, description = "No such dataset or charge", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn release_charge(
    caller: Caller,
    State(s): State<AppState>,
    Path((id, charge_id)): Path<(String, String)>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Value>> {
    let kind = input::SettleKind::Release;
    let req = input::SettleRequest::from_json(&body, &charge_id, kind, idempotency_key(&headers)?)?;
    Ok(Json(
        s.ledgers.settle(&caller.0, &id, &charge_id, req).await?,
    ))
}

/// Charge a mechanism to a dataset: 201 when admitted, 409 `budget_exceeded` when not (nothing
/// written). With an `Idempotency-Key` header a retry returns the first outcome and charges nothing.
#[utoipa::path(post, path = "/v1/datasets/{id}/charges", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: 1-255 visible ASCII characters. A 503, a 408 or a dropped connection may hide a change that committed: retry with the same key (kept as long as the ledger) to get its outcome (200) instead of a second change", pattern = r"^[!-~]{1,255}$", min_length = 1, max_length = 255)),
    request_body = ChargeRequestWire,
    responses((status = 201, description = "Admitted and recorded", body = ChargeCreated),
              (status = 200, description = "Replay of an earlier request with the same Idempotency-Key", body = ChargeCreated),
              (status = 409, description = "The charge does not fit the budget", body = BudgetExceededBody),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = 422, description = "Invalid event, or Idempotency-Key reused with another body", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn create_charge(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let req = ChargeRequest::from_json(&body, idempotency_key(&headers)?)?;
    let out = s.ledgers.charge(&caller.0, &id, req).await?;
    Ok((created_or_ok(out.created), Json(out.body)))
}

/// Charge one mechanism on several ledgers at once — the blocks of a partitioned dataset a query
/// reads, several datasets a join reads, or both: 201 when every ledger admits it (recorded on all,
/// in one transaction), 409 `budget_exceeded` naming the ledger that refused it (nothing written
/// anywhere), 409 `read_only` for a block past its dataset's retention. With an `Idempotency-Key`
/// a retry returns the first outcome and charges nothing. Blocks nobody charged yet are created
/// with the dataset's per-block budget.
#[utoipa::path(post, path = "/v1/charges", tag = "charges",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: 1-255 visible ASCII characters. A 503, a 408 or a dropped connection may hide a change that committed: retry with the same key (kept as long as the ledger) to get its outcome (200) instead of a second change", pattern = r"^[!-~]{1,255}$", min_length = 1, max_length = 255)),
    request_body = MultiChargeRequestWire,
    responses((status = 201, description = "Admitted and recorded on every ledger", body = crate::ledger::multi::MultiChargeBody),
              (status = 200, description = "Replay of an earlier request with the same Idempotency-Key", body = crate::ledger::multi::MultiChargeBody),
              (status = 409, description = "A ledger refused the charge (`budget_exceeded`, with `dataset_id`), or a block is read-only (`read_only`); nothing was written", body = BudgetExceededBody),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = 422, description = "Invalid event, datasets or blocks, or Idempotency-Key reused with another body", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn create_multi_charge(
    caller: Caller,
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let req = input::MultiChargeRequest::from_json(&body, idempotency_key(&headers)?)?;
    let out = s.ledgers.charge_many(&caller.0, req).await?;
    Ok((created_or_ok(out.created), Json(out.body)))
}

/// A partitioned dataset's blocks and what each has left. Without a range: a page of the blocks
/// charged so far (`limit`, `after` = a block name). With `from` and `to` (RFC 3339, `[from, to)`)
/// or `blocks` (comma-separated names): every block of the range, uncharged ones with their whole
/// budget, and the least remaining μ and δ over them (`tightest` is the block that decides a
/// range charge).
#[utoipa::path(get, path = "/v1/datasets/{id}/blocks", tag = "datasets",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("from" = Option<String>, Query, description = "Range start (RFC 3339), with `to`", format = DateTime),
           ("to" = Option<String>, Query, description = "Range end, exclusive (RFC 3339), with `from`", format = DateTime),
           ("blocks" = Option<String>, Query, description = "Comma-separated block names (instead of a time range)"),
           ("limit" = Option<i64>, Query, description = "Page size without a range (1-1000, default 100)", minimum = 1, maximum = 1000),
           ("after" = Option<String>, Query, description = "Without a range: blocks after this name")),
    responses((status = 200, description = "The blocks", body = crate::ledger::multi::BlocksView),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request, or the dataset is not partitioned", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn list_blocks(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<crate::ledger::multi::BlocksView>> {
    unknown_params(&q, &["from", "to", "blocks", "limit", "after"])?;
    let limit = page_limit(&q)?;
    let sel = crate::ledger::partition::BlockSelector::from_query(
        q.get("from").map(String::as_str),
        q.get("to").map(String::as_str),
        q.get("blocks").map(String::as_str),
    )
    .map_err(|e| ApiError::invalid_param(&e.path.replacen('$', "query", 1), e.reason))?;
    let after = q.get("after").map(String::as_str);
    Ok(Json(
        s.ledgers
            .list_blocks(&caller.0, &id, sel, after, limit)
            .await?,
    ))
}

/// The dataset's headline: the share of the budget used in the filter's own terms (stated
/// plainly), what is left in μ and in ε at a δ, how many more units like the last committed one fit,
/// the runs in progress and what they need, the caller's own share, and when the budget runs out
/// at the last 7 days' rate. A partitioned dataset's: of the tightest block of a range (`from`
/// and `to`, or `blocks`; else of the latest charged blocks), with every block's used share.
#[utoipa::path(get, path = "/v1/datasets/{id}/headline", tag = "reports",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("delta" = Option<f64>, Query, description = "δ of the ε figures, in (0, 1) (default 1e-5)", minimum = 0, maximum = 1),
           ("from" = Option<String>, Query, description = "Partitioned: range start (RFC 3339), with `to`", format = DateTime),
           ("to" = Option<String>, Query, description = "Partitioned: range end, exclusive (RFC 3339), with `from`", format = DateTime),
           ("blocks" = Option<String>, Query, description = "Partitioned: comma-separated block names (instead of a time range)")),
    responses((status = 200, description = "The headline", body = crate::ledger::headline::Headline),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn get_headline(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<crate::ledger::headline::Headline>> {
    unknown_params(&q, &["delta", "from", "to", "blocks"])?;
    let delta = input::headline_delta(&q)?;
    let sel = crate::ledger::partition::BlockSelector::from_query(
        q.get("from").map(String::as_str),
        q.get("to").map(String::as_str),
        q.get("blocks").map(String::as_str),
    )
    .map_err(|e| ApiError::invalid_param(&e.path.replacen('$', "query", 1), e.reason))?;
    Ok(Json(s.ledgers.headline(&caller.0, &id, delta, sel).await?))
}

/// Declare a named partition of a dataset (admins of the dataset): a charge may name it only once
/// it is declared, so nobody mints a fresh budget for records by reading them under a new name.
/// 201 when declared, 200 when it was already.
#[utoipa::path(put, path = "/v1/datasets/{id}/blocks/{block}", tag = "datasets",
    params(("id" = String, Path, description = "Dataset id (partitioned into named partitions)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("block" = String, Path, description = "The partition's name", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$", min_length = 1, max_length = 64)),
    request_body(content = Option<DeclareBlockWire>, description = "Optional (no body, or null, is `{}`)"),
    responses((status = 201, description = "Declared", body = crate::ledger::multi::BlockView),
              (status = 200, description = "Already declared", body = crate::ledger::multi::BlockView),
              (status = 403, description = "Not an admin of the dataset", body = ErrorBody),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request, or the dataset has no named partitions", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn declare_block(
    caller: Caller,
    State(s): State<AppState>,
    Path((id, block)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult<impl IntoResponse> {
    let body = optional_body(&body)?;
    let description = input::block_declaration(&body)?;
    let (v, created) = s
        .ledgers
        .declare_block(&caller.0, &id, &block, description)
        .await?;
    Ok((created_or_ok(created), Json(v)))
}

/// The ledger's entries in order: charges and budget changes (paginated: `limit`, `after`).
#[utoipa::path(get, path = "/v1/datasets/{id}/charges", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("limit" = Option<i64>, Query, description = "Page size (1-1000, default 100)", minimum = 1, maximum = 1000),
           ("after" = Option<i64>, Query, description = "Return entries with seq > after", minimum = 0)),
    responses((status = 200, description = "A page of entries", body = EntryPage),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn list_charges(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<EntryPage>> {
    unknown_params(&q, &["limit", "after"])?;
    let (limit, after) = (page_limit(&q)?, page_after(&q)?);
    let (items, next) = s.ledgers.list_entries(&caller.0, &id, after, limit).await?;
    Ok(Json(EntryPage {
        items,
        next_cursor: next,
    }))
}

/// What a charge would do to the dataset's budget; nothing is written.
#[utoipa::path(post, path = "/v1/datasets/{id}/charges/preview", tag = "charges",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193)),
    request_body = ChargeRequestWire,
    responses((status = 200, description = "The outcome the charge would have", body = Preview),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn preview_charge(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Preview>> {
    let req = ChargeRequest::from_json(&body, None)?;
    Ok(Json(s.ledgers.preview(&caller.0, &id, req).await?))
}

/// The guarantee of a dataset's budget: every figure is the ledger's statement G_μ ⊗ f_{0,δ} at the
/// budget's high-water mark, which holds for the whole adaptive interaction (μ with bracket and
/// regret, ε(δ), δ(ε), advantage, the trade-off curve, the Tier-II table and the CLT estimate,
/// approximate). What was spent is beside it (`mu_spent`, `delta_spent`, `units`: budget use, not
/// a guarantee), with the exact composition labelled as valid only for a sequence fixed in advance.
#[utoipa::path(get, path = "/v1/datasets/{id}/report", tag = "reports",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("deltas" = Option<String>, Query, description = "Comma-separated δ values for ε(δ), each in [0, 1] (no spaces; written like 0.05, 1 or 1e-5)"),
           ("epsilons" = Option<String>, Query, description = "Comma-separated ε values for δ(ε), each in [0, 1e6] (no spaces; written like 2, 0.5 or 5e-3)"),
           ("alphas" = Option<String>, Query, description = "Comma-separated α values for the trade-off curve, each in [0, 1] (no spaces; written like 0.05, 1 or 1e-5)"),
           ("group_size" = Option<u64>, Query, description = "Also report what the guarantee gives a group of this many records (1-10000)", minimum = 1, maximum = 10000)),
    responses((status = 200, description = "The report", body = DatasetReport),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn get_report(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<DatasetReport>> {
    unknown_params(&q, &["deltas", "epsilons", "alphas", "group_size"])?;
    let opts = input::report_query(&q)?;
    Ok(Json(s.ledgers.report(&caller.0, &id, opts).await?))
}

/// The dataset's symmetrised trade-off curve f(α) and G_μ(α) at the same α: `points=N` spread over
/// [1e-10, 1], or `alpha=a1,a2,...`.
#[utoipa::path(get, path = "/v1/datasets/{id}/tradeoff", tag = "reports",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("points" = Option<usize>, Query, description = "Number of α values spread over [1e-10, 1] (2-10000; default 100 unless alpha is given)", minimum = 2, maximum = 10000),
           ("alpha" = Option<String>, Query, description = "Comma-separated α values, each in [0, 1] (no spaces; written like 0.05, 1 or 1e-5; with points, both sets)")),
    responses((status = 200, description = "The curve", body = TradeoffView),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn get_tradeoff(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<TradeoffView>> {
    unknown_params(&q, &["points", "alpha"])?;
    let alphas = input::tradeoff_query(&q)?;
    Ok(Json(s.ledgers.tradeoff(&caller.0, &id, alphas).await?))
}

/// The report for a list of events, stateless (nothing is stored).
#[utoipa::path(post, path = "/v1/accountant/compose", tag = "accountant",
    request_body = ComposeRequest,
    responses((status = 200, description = "The report", body = ReportWire),
              (status = "4XX", description = "Invalid request", body = ErrorBody)))]
pub async fn compose(
    caller: Caller,
    State(s): State<AppState>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let req = input::compose_request(&body)?;
    Ok(Json(s.ledgers.compose(&caller.0, req).await?))
}

/// A unit's certificate curve μᵢ(δᵢ), stateless: for each δᵢ the smallest μᵢ the gate would
/// certify the unit at (and a lower bound on what any accountant could), and with a budget the
/// point that uses the smallest share of it.
#[utoipa::path(post, path = "/v1/accountant/certificate", tag = "accountant",
    request_body = CertificateRequestWire,
    responses((status = 200, description = "The curve", body = UnitCurve),
              (status = "4XX", description = "Invalid request", body = ErrorBody)))]
pub async fn certificate(
    caller: Caller,
    State(s): State<AppState>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<UnitCurve>> {
    let req = input::CertificateRequest::from_json(&body)?;
    Ok(Json(s.ledgers.certificate_curve(&caller.0, req).await?))
}

/// Calibrate one free parameter of an event to what still fits the dataset's budget: the smallest
/// noise multiplier, or the largest count.
#[utoipa::path(post, path = "/v1/datasets/{id}/calibrate", tag = "accountant",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193)),
    request_body = DatasetCalibrateRequest,
    responses((status = 200, description = "The calibrated value", body = Calibrated),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request or unreachable target", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn calibrate_dataset(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Calibrated>> {
    let req = input::CalibrateRequest::from_json(&body, false)?;
    Ok(Json(s.ledgers.calibrate(&caller.0, &id, req).await?))
}

/// Calibrate one free parameter of an event against a μ target (stateless).
#[utoipa::path(post, path = "/v1/accountant/calibrate", tag = "accountant",
    request_body = CalibrateRequestWire,
    responses((status = 200, description = "The calibrated value", body = Calibrated),
              (status = "4XX", description = "Invalid request or unreachable target", body = ErrorBody)))]
pub async fn calibrate(
    caller: Caller,
    State(s): State<AppState>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Calibrated>> {
    let req = input::CalibrateRequest::from_json(&body, true)?;
    Ok(Json(s.ledgers.calibrate_stateless(&caller.0, req).await?))
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses((status = 200, description = "Alive", body = Object)))]
pub async fn healthz() -> Json<Value> {
    Json(serde_json::json!({"status": "ok"}))
}

/// Readiness: the store answers.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses((status = 200, description = "Ready", body = Object),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn readyz(State(s): State<AppState>) -> ApiResult<Json<Value>> {
    s.ledgers.ready().await?;
    Ok(Json(serde_json::json!({"status": "ready"})))
}

/// Prometheus metrics.
pub async fn metrics(caller: Caller, State(s): State<AppState>) -> ApiResult<impl IntoResponse> {
    // Metrics are labelled by dataset: global readers only.
    caller.0.principal.may(Action::Read)?;
    super::process_metrics().collect();
    s.ledgers.refresh_budget_gauges().await?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        s.metrics.render(),
    ))
}

/// A dataset's budget alert rule: the used shares whose crossing is POSTed to the operator's
/// webhook (default 0.5, 0.75, 0.9; exhaustion always alerts), and those crossed now.
#[utoipa::path(get, path = "/v1/datasets/{id}/alerts", tag = "datasets",
    params(("id" = String, Path, description = "Dataset id", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193)),
    responses((status = 200, description = "The rule", body = crate::ledger::alerts::AlertRule),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn get_alerts(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<crate::ledger::alerts::AlertRule>> {
    Ok(Json(s.ledgers.alert_rule(&caller.0, &id).await?))
}

/// Set a dataset's alert thresholds (its admins; audited). Where alerts go is the operator's
/// choice (`--alert-webhook-url`), never a principal's.
#[utoipa::path(put, path = "/v1/datasets/{id}/alerts", tag = "datasets",
    params(("id" = String, Path, description = "Dataset id", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193)),
    request_body = super::wire::AlertRuleWire,
    responses((status = 200, description = "The rule now", body = crate::ledger::alerts::AlertRule),
              (status = 403, description = "The caller is not an admin of the dataset", body = ErrorBody),
              (status = 404, description = "No such dataset", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn put_alerts(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<crate::ledger::alerts::AlertRule>> {
    let thresholds = crate::ledger::alerts::thresholds_from_json(&body)?;
    Ok(Json(
        s.ledgers.set_alert_rule(&caller.0, &id, thresholds).await?,
    ))
}

/// A dataset's grants (its admins and auditors).
#[utoipa::path(get, path = "/v1/datasets/{id}/grants", tag = "access",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193)),
    responses((status = 200, description = "The grants, by principal", body = Vec<crate::ledger::auth::GrantView>),
              (status = 403, description = "The caller may see the dataset but not its grants", body = ErrorBody),
              (status = 404, description = "No such dataset (or the caller may not know of it)", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn list_grants(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<crate::ledger::auth::GrantView>>> {
    Ok(Json(s.ledgers.list_grants(&caller.0, &id).await?))
}

/// Give a principal a role on the dataset (replacing its grant, if any); the dataset's admins.
#[utoipa::path(put, path = "/v1/datasets/{id}/grants/{principal}", tag = "access",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("principal" = String, Path, description = "The principal's name", pattern = r"^[A-Za-z0-9._@:+-]([A-Za-z0-9 ._@:+-]{0,126}[A-Za-z0-9._@:+-])?$", min_length = 1, max_length = 128)),
    request_body = GrantRequestWire,
    responses((status = 200, description = "The dataset's grants now", body = Vec<crate::ledger::auth::GrantView>),
              (status = 403, description = "The caller is not an admin of the dataset", body = ErrorBody),
              (status = 404, description = "No such dataset (or the caller may not know of it)", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn put_grant(
    caller: Caller,
    State(s): State<AppState>,
    Path((id, principal)): Path<(String, String)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Vec<crate::ledger::auth::GrantView>>> {
    let role = input::grant_request(&body)?;
    s.ledgers
        .set_grant(&caller.0, &id, &principal, Some(&role))
        .await?;
    Ok(Json(s.ledgers.list_grants(&caller.0, &id).await?))
}

/// Withdraw a principal's grant on the dataset; the dataset's admins.
#[utoipa::path(delete, path = "/v1/datasets/{id}/grants/{principal}", tag = "access",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("principal" = String, Path, description = "The principal's name", pattern = r"^[A-Za-z0-9._@:+-]([A-Za-z0-9 ._@:+-]{0,126}[A-Za-z0-9._@:+-])?$", min_length = 1, max_length = 128)),
    responses((status = 204, description = "Withdrawn"),
              (status = 403, description = "The caller is not an admin of the dataset", body = ErrorBody),
              (status = 404, description = "No such dataset or grant", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn delete_grant(
    caller: Caller,
    State(s): State<AppState>,
    Path((id, principal)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    if s.ledgers
        .set_grant(&caller.0, &id, &principal, None)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "grant_not_found",
            format!("{principal:?} holds no grant on dataset {id:?}"),
        ))
    }
}

/// The dataset's quotas and the unallocated share `*`: all of them for its admins and auditors,
/// one's own for an analyst.
#[utoipa::path(get, path = "/v1/datasets/{id}/quotas", tag = "access",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193)),
    responses((status = 200, description = "The quotas", body = Vec<crate::ledger::quotas::QuotaView>),
              (status = 404, description = "No such dataset (or the caller may not know of it)", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn list_quotas(
    caller: Caller,
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<crate::ledger::quotas::QuotaView>>> {
    Ok(Json(s.ledgers.list_quotas(&caller.0, &id).await?))
}

/// Set a principal's quota: its share (μ_q, δ_q) of the dataset's budget. The quotas' μ_q² and
/// δ_q, with what the unallocated share spent, must fit the budget (409 `quota_conflict`), and a
/// quota is never set below what its holder spent. Recorded in the ledger.
#[utoipa::path(put, path = "/v1/datasets/{id}/quotas/{principal}", tag = "access",
    params(("id" = String, Path, description = "Dataset id, or a block's (`dataset@block`)", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("principal" = String, Path, description = "The principal's name", pattern = r"^[A-Za-z0-9._@:+-]([A-Za-z0-9 ._@:+-]{0,126}[A-Za-z0-9._@:+-])?$", min_length = 1, max_length = 128),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: 1-255 visible ASCII characters. A 503, a 408 or a dropped connection may hide a change that committed: retry with the same key (kept as long as the ledger) to get its outcome (200) instead of a second change", pattern = r"^[!-~]{1,255}$", min_length = 1, max_length = 255)),
    request_body = QuotaRequestWire,
    responses((status = 200, description = "The quota", body = crate::ledger::quotas::QuotaView),
              (status = 409, description = "The quotas would not fit the budget (`quota_conflict`)", body = ErrorBody),
              (status = 403, description = "The caller is not an admin of the dataset", body = ErrorBody),
              (status = 404, description = "No such dataset (or the caller may not know of it)", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn put_quota(
    caller: Caller,
    State(s): State<AppState>,
    Path((id, principal)): Path<(String, String)>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<crate::ledger::quotas::QuotaView>> {
    let req = input::quota_request(&body, idempotency_key(&headers)?)?;
    Ok(Json(
        s.ledgers.set_quota(&caller.0, &id, &principal, req).await?,
    ))
}

/// Largest page of the audit log as JSON lines.
const MAX_AUDIT_EXPORT: i64 = 10_000;

/// An RFC 3339 time as stored (UTC, milliseconds), so times compare as strings.
fn audit_time(q: &HashMap<String, String>, name: &str) -> ApiResult<Option<String>> {
    q.get(name)
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| {
                    t.with_timezone(&chrono::Utc)
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                })
                .map_err(|_| {
                    ApiError::invalid_param(
                        &format!("query.{name}"),
                        "must be an RFC 3339 time, e.g. 2026-11-23T10:00:00Z",
                    )
                })
        })
        .transpose()
}

/// The audit log, oldest first, filtered by dataset, principal and time (paginated: `limit`,
/// `after`); `format=jsonl` answers in JSON lines (up to 10,000 records, the next cursor in the
/// `X-Next-Cursor` header). Global admins and auditors read all of it; a dataset's admins and
/// auditors read its records (`dataset_id` required).
#[utoipa::path(get, path = "/v1/audit", tag = "access",
    params(("dataset_id" = Option<String>, Query, description = "Only this dataset's (or block's, `dataset@block`) records", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$", min_length = 1, max_length = 193),
           ("principal" = Option<String>, Query, description = "Only this principal's records", max_length = 256),
           ("since" = Option<String>, Query, description = "Records at or after this RFC 3339 time", format = DateTime),
           ("action" = Option<String>, Query, description = "Only records whose action starts with this (e.g. `unit.`)", min_length = 1, max_length = 64),
           ("until" = Option<String>, Query, description = "Records before this RFC 3339 time", format = DateTime),
           ("after" = Option<i64>, Query, description = "Records with id > after (the previous page's next_cursor, or the last id read: ids are positions in the order records became visible, so a tailer never skips one)", minimum = 0),
           ("limit" = Option<i64>, Query, description = "Most records returned (1-10000; default 100, or 10000 with format=jsonl). A JSON page holds at most 1000: next_cursor continues", minimum = 1, maximum = 10000),
           ("format" = Option<AuditFormat>, Query, description = "`json` (default) or `jsonl`")),
    responses((status = 200, description = "A page of the audit log (with format=jsonl: one AuditRecord per line, the next cursor in X-Next-Cursor)",
                content((AuditPage = "application/json"), (String = "application/x-ndjson"))),
              (status = 403, description = "The caller may not read this part of the log", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn list_audit(
    caller: Caller,
    State(s): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<axum::response::Response> {
    unknown_params(
        &q,
        &[
            "dataset_id",
            "principal",
            "since",
            "until",
            "action",
            "after",
            "limit",
            "format",
        ],
    )?;
    let jsonl = match q.get("format").map(String::as_str) {
        None | Some("json") => false,
        Some("jsonl") => true,
        Some(_) => {
            return Err(ApiError::invalid_param(
                "query.format",
                "must be json or jsonl",
            ))
        }
    };
    // Any limit up to the export's; a JSON page holds at most MAX_PAGE (its cursor continues).
    let limit = match q.get("limit") {
        Some(l) => l
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX_AUDIT_EXPORT).contains(n))
            .ok_or_else(|| {
                ApiError::invalid_param(
                    "query.limit",
                    format!("must be a whole number in [1, {MAX_AUDIT_EXPORT}]"),
                )
            })?,
        None if jsonl => MAX_AUDIT_EXPORT,
        None => DEFAULT_PAGE,
    };
    let limit = if jsonl { limit } else { limit.min(MAX_PAGE) };
    if let Some(d) = q.get("dataset_id") {
        crate::ledger::input::ledger_id(d, &crate::accountant::json::JsonPath::root())
            .map_err(|e| ApiError::invalid_param("query.dataset_id", e.reason))?;
    }
    let after =
        match q.get("after") {
            None => 0,
            Some(a) => a.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                ApiError::invalid_param("query.after", "must be a whole number ≥ 0")
            })?,
        };
    let query = crate::store::AuditQuery {
        dataset_id: q.get("dataset_id").cloned(),
        principal: q.get("principal").cloned(),
        since: audit_time(&q, "since")?,
        until: audit_time(&q, "until")?,
        action_prefix: match q.get("action") {
            Some(a) if a.is_empty() || a.len() > 64 || a.chars().any(char::is_control) => {
                return Err(ApiError::invalid_param(
                    "query.action",
                    "must be 1-64 characters without control characters",
                ))
            }
            a => a.cloned(),
        },
        after,
        limit,
    };
    let (items, next) = s.ledgers.list_audit(&caller.0, query).await?;
    if jsonl {
        let mut body = String::new();
        for r in &items {
            body.push_str(&serde_json::to_string(r).map_err(|e| {
                ApiError::from(crate::ledger::LedgerError::Internal(e.to_string()))
            })?);
            body.push('\n');
        }
        let mut res = (
            [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
            body,
        )
            .into_response();
        if let Some(n) = next {
            res.headers_mut()
                .insert("x-next-cursor", axum::http::HeaderValue::from(n));
        }
        return Ok(res);
    }
    Ok(Json(AuditPage {
        items,
        next_cursor: next,
    })
    .into_response())
}

/// Every token (never its secret); global admins.
#[utoipa::path(get, path = "/v1/tokens", tag = "access",
    responses((status = 200, description = "The tokens", body = Vec<crate::ledger::auth::TokenView>),
              (status = 403, description = "Not a global admin", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn list_tokens(
    caller: Caller,
    State(s): State<AppState>,
) -> ApiResult<Json<Vec<crate::ledger::auth::TokenView>>> {
    Ok(Json(s.ledgers.list_tokens(&caller.0).await?))
}

/// Make a token: keep `bearer_token`, shown in this response only. Global admins.
#[utoipa::path(post, path = "/v1/tokens", tag = "access",
    request_body = TokenRequestWire,
    responses((status = 201, description = "Made", body = TokenCreated),
              (status = 403, description = "Not a global admin", body = ErrorBody),
              (status = "4XX", description = "Invalid request", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn create_token(
    caller: Caller,
    State(s): State<AppState>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<(StatusCode, Json<TokenCreated>)> {
    let (name, role, days) = input::token_request(&body)?;
    let t = s
        .ledgers
        .create_token(
            &caller.0,
            &name,
            &role,
            days.map(|d| chrono::Duration::days(d as i64)),
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(TokenCreated {
            bearer_token: t.secret,
            token: t.token,
        }),
    ))
}

/// Revoke a token, at once on every replica. Global admins.
#[utoipa::path(delete, path = "/v1/tokens/{token_id}", tag = "access",
    params(("token_id" = String, Path, description = "The token's id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")),
    responses((status = 204, description = "Revoked"),
              (status = 403, description = "Not a global admin", body = ErrorBody),
              (status = 404, description = "No live token with this id", body = ErrorBody),
              (status = 503, description = "Store unavailable", body = ErrorBody)))]
pub async fn revoke_token(
    caller: Caller,
    State(s): State<AppState>,
    Path(token_id): Path<String>,
) -> ApiResult<StatusCode> {
    if s.ledgers.revoke_token(&caller.0, &token_id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "token_not_found",
            format!("no live token with id {token_id:?}"),
        ))
    }
}

"""The client without a service: answers mapped to values or exceptions, retries with one
Idempotency-Key, events' JSON, configuration. (test_live.py runs against a real service.)"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
import time
from pathlib import Path
from typing import Callable

import httpx
import pytest

import privacy_ledger
from privacy_ledger import (
    AsyncLedger,
    BadRequest,
    BudgetExceeded,
    ConfigurationError,
    ConnectionFailed,
    Forbidden,
    Ledger,
    LedgerError,
    NotFound,
    Overloaded,
    RetryPolicy,
    RunDoesNotFit,
    ServerError,
    Unauthorized,
    events,
)

FAST = RetryPolicy(retries=3, base_seconds=0.001, max_wait_seconds=1.0)

CHARGE = {
    "charge": {"id": "c1", "status": "committed", "unit": {"mu": 0.25, "delta": 0.0}, "mu_after": 0.25},
    "report": {},
}


def ledger(handler: Callable[[httpx.Request], httpx.Response], retry: RetryPolicy = FAST) -> Ledger:
    return Ledger("http://ledger.test", "pl_x", retry=retry, transport=httpx.MockTransport(handler))


def test_the_version_is_the_services() -> None:
    cargo = Path(__file__).resolve().parents[3] / "Cargo.toml"
    m = re.search(r'^version = "([^"]+)"', cargo.read_text(), re.M)
    assert m is not None
    assert privacy_ledger.__version__ == m.group(1)
    # The installed distribution's, and pyproject.toml's.
    assert importlib.metadata.version("privacy-ledger") == m.group(1)
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M) is not None
    assert f'version = "{m.group(1)}"' in pyproject


def test_address_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRIVACY_LEDGER_URL", raising=False)
    monkeypatch.delenv("PRIVACY_LEDGER_TOKEN", raising=False)
    with pytest.raises(ConfigurationError, match="PRIVACY_LEDGER_URL"):
        Ledger()
    monkeypatch.setenv("PRIVACY_LEDGER_URL", "http://ledger.test/")
    with pytest.raises(ConfigurationError, match="PRIVACY_LEDGER_TOKEN"):
        Ledger()
    monkeypatch.setenv("PRIVACY_LEDGER_TOKEN", "pl_env")
    seen: list[httpx.Request] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r)
        return httpx.Response(201, json=CHARGE)

    with Ledger(transport=httpx.MockTransport(handler)) as l:
        l.charge("d", events.Gdp(0.25))
    assert str(seen[0].url) == "http://ledger.test/v1/datasets/d/charges"
    assert seen[0].headers["authorization"] == "Bearer pl_env"


def test_a_refusal_is_an_exception_with_the_figures_and_the_request_id() -> None:
    body = {
        "error": "budget_exceeded",
        "message": "mu would exceed the budget",
        "details": {},
        "request_id": "req-7",
        "unit": {"mu": 0.5, "delta": 1e-12},
        "remaining_mu": 0.1,
        "remaining_delta": 1e-10,
        "mu_spent": 0.99,
        "mu_budget": 1.0,
        "quota": None,
        "reason": "mu",
        "delta_after": 0.0,
        "delta_budget": 1e-10,
        "delta_spent": 0.0,
    }
    l = ledger(lambda r: httpx.Response(409, json=body))
    with pytest.raises(BudgetExceeded) as e:
        l.charge("d", events.Gdp(0.5))
    x = e.value
    assert (x.status, x.code, x.request_id) == (409, "budget_exceeded", "req-7")
    assert (x.unit_mu, x.unit_delta, x.remaining_mu, x.remaining_delta) == (0.5, 1e-12, 0.1, 1e-10)
    assert x.quota is None and "req-7" in str(x)
    # No dataset_id in the body (one dataset charged): the ledger is the dataset charged.
    assert x.ledger == "d" and x.dataset == "d"


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (400, "invalid_json", BadRequest),
        (422, "invalid_field", BadRequest),
        (401, "unauthorized", Unauthorized),
        (403, "not_owner", Forbidden),
        (404, "not_found", NotFound),
        (409, "run_does_not_fit", RunDoesNotFit),
        (500, "internal", ServerError),
    ],
)
def test_every_status_has_its_exception(status: int, code: str, cls: type[LedgerError]) -> None:
    body = {"error": code, "message": "m", "details": {"path": "$.x", "reason": "r"}, "request_id": None}
    l = ledger(lambda r: httpx.Response(status, json=body, headers={"x-request-id": "hdr-1"}))
    with pytest.raises(cls) as e:
        l.dataset("d")
    # The body had no request id: the header's is kept.
    assert (e.value.status, e.value.code, e.value.request_id) == (status, code, "hdr-1")
    if isinstance(e.value, BadRequest):
        assert (e.value.field, e.value.reason) == ("$.x", "r")


def test_an_answer_that_is_not_json_still_raises() -> None:
    l = ledger(lambda r: httpx.Response(502, text="bad gateway"))
    with pytest.raises(ServerError) as e:
        l.dataset("d")
    assert e.value.status == 502


def test_retries_send_the_same_idempotency_key_and_honour_retry_after() -> None:
    keys: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        keys.append(r.headers["idempotency-key"])
        if len(keys) == 1:
            return httpx.Response(503, json={"error": "store_unavailable", "message": "m", "details": {}},
                                  headers={"retry-after": "0.2"})
        if len(keys) == 2:
            raise httpx.ReadError("connection reset")
        return httpx.Response(200, json=CHARGE)

    t0 = time.monotonic()
    c = ledger(handler).charge("d", events.Gdp(0.25))
    assert c.id == "c1" and len(keys) == 3 and len(set(keys)) == 1
    assert time.monotonic() - t0 >= 0.2  # Retry-After was waited
    # A key given by the caller is the one sent.
    keys.clear()
    ledger(handler).charge("d", events.Gdp(0.25), idempotency_key="job-17")
    assert keys == ["job-17"] * 3
    # Two calls are two changes: two keys.
    keys.clear()
    def once(r: httpx.Request) -> httpx.Response:
        keys.append(r.headers["idempotency-key"])
        return httpx.Response(201, json=CHARGE)

    l = ledger(once)
    l.charge("d", events.Gdp(0.25))
    l.charge("d", events.Gdp(0.25))
    assert len(set(keys)) == 2


def test_retries_are_bounded_and_a_long_retry_after_is_raised_not_waited() -> None:
    n = [0]

    def busy(r: httpx.Request) -> httpx.Response:
        n[0] += 1
        return httpx.Response(503, json={"error": "overloaded", "message": "m", "details": {}})

    with pytest.raises(Overloaded):
        ledger(busy).dataset("d")
    assert n[0] == 1 + FAST.retries
    n[0] = 0

    def later(r: httpx.Request) -> httpx.Response:
        n[0] += 1
        return httpx.Response(429, json={"error": "rate_limited", "message": "m", "details": {}},
                              headers={"retry-after": "3600"})

    t0 = time.monotonic()
    with pytest.raises(Overloaded):
        ledger(later).dataset("d")
    assert n[0] == 1 and time.monotonic() - t0 < 1.0

    def down(r: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(ConnectionFailed, match="Idempotency-Key"):
        ledger(down).charge("d", events.Gdp(0.1))


def test_no_retry_of_a_refusal() -> None:
    n = [0]

    def handler(r: httpx.Request) -> httpx.Response:
        n[0] += 1
        return httpx.Response(409, json={"error": "budget_exceeded", "message": "m", "details": {}})

    with pytest.raises(BudgetExceeded):
        ledger(handler).charge("d", events.Gdp(0.1))
    assert n[0] == 1


def test_events_are_the_services_json() -> None:
    step = events.PoissonSampled(0.01, events.Gaussian(1.1))
    assert events.to_json(events.SelfComposed(10, step)) == {
        "type": "self_composed",
        "count": 10,
        "event": {
            "type": "poisson_sampled",
            "sampling_rate": 0.01,
            "event": {"type": "gaussian", "noise_multiplier": 1.1},
        },
    }
    assert events.to_json(events.Composed((events.Gdp(0.5), events.Zcdp(0.1)))) == {
        "type": "composed",
        "events": [{"type": "gdp", "mu": 0.5}, {"type": "zcdp", "rho": 0.1}],
    }
    assert events.to_json({"type": "gdp", "mu": 1.0}) == {"type": "gdp", "mu": 1.0}
    # A dict inside a typed event is taken as it is.
    assert events.to_json(events.SelfComposed(2, {"type": "gdp", "mu": 1.0})) == {
        "type": "self_composed",
        "count": 2,
        "event": {"type": "gdp", "mu": 1.0},
    }
    with pytest.raises(TypeError, match="not an event"):
        events.to_json(3.5)


def test_dp_accounting_events_are_accepted() -> None:
    dp = pytest.importorskip("dp_accounting", reason="dp_accounting is not installed")
    e = dp.SelfComposedDpEvent(dp.PoissonSampledDpEvent(0.01, dp.GaussianDpEvent(1.1)), 10)
    assert events.to_json(e) == events.to_json(
        events.SelfComposed(10, events.PoissonSampled(0.01, events.Gaussian(1.1)))
    )
    swr = dp.SampledWithoutReplacementDpEvent(1000, 10, dp.LaplaceDpEvent(2.0))
    assert events.to_json(swr) == {
        "type": "sampled_without_replacement",
        "sample_size": 10,
        "population_size": 1000,
        "event": {"type": "laplace", "noise_multiplier": 2.0},
    }
    with pytest.raises(TypeError, match="NonPrivate"):
        events.to_json(dp.NonPrivateDpEvent())


def test_a_run_asks_for_each_chunk_before_yielding_it_and_stops_on_a_refusal() -> None:
    log: list[str] = []
    run = {"id": "r1", "steps": 25, "chunk_steps": 10, "chunks": 3, "next_chunk": 0, "run_mu": 1.0,
           "warnings": []}

    def handler(r: httpx.Request) -> httpx.Response:
        if r.url.path.endswith("/runs"):
            return httpx.Response(201, json=run)
        body = json.loads(r.content)
        log.append(f"ask {body['chunk']}")
        if body["chunk"] == 2:
            return httpx.Response(409, json={"error": "budget_exceeded", "message": "m", "details": {},
                                             "remaining_mu": 0.01})
        return httpx.Response(201, json={"charge": {"id": f"c{body['chunk']}", "chunk": body["chunk"]}})

    r = ledger(handler).run("d", events.Gdp(0.1), steps=25, chunk_steps=10)
    with pytest.raises(BudgetExceeded):
        for chunk in r:
            log.append(f"train {chunk.first_step}+{chunk.steps}")
    assert log == ["ask 0", "train 0+10", "ask 1", "train 10+10", "ask 2"]


def test_a_reservation_commits_on_success_and_releases_only_when_told() -> None:
    log: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        path = r.url.path
        if path.endswith("/charges"):
            return httpx.Response(201, json={"charge": {"id": "u", "status": "reserved"}})
        log.append(path.rsplit("/", 1)[1] + (" " + r.content.decode() if path.endswith("release") else ""))
        return httpx.Response(200, json={})

    l = ledger(handler)
    with l.reserve("d", events.Gdp(0.1)):
        pass
    with pytest.raises(RuntimeError):
        with l.reserve("d", events.Gdp(0.1)):
            raise RuntimeError("job failed")
    with pytest.raises(RuntimeError):
        with l.reserve("d", events.Gdp(0.1), outputs_seen=False):
            raise RuntimeError("cancelled before it read anything")
    with pytest.raises(RuntimeError):
        with l.reserve("d", events.Gdp(0.1), outputs_seen=False) as unit:
            unit.start()
            raise RuntimeError("failed after reading the data")
    assert log == ["commit", "commit", 'release {"outputs_released":false}', "start", "commit"]
    with pytest.raises(ValueError):
        l.reserve("d", events.Gdp(0.1)).release(outputs_seen=True)


def test_the_async_client_fails_closed_too() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"error": "budget_exceeded", "message": "m", "details": {},
                                         "request_id": "a-1"})

    async def go() -> None:
        async with AsyncLedger("http://l.test", "pl_x", retry=FAST,
                               transport=httpx.MockTransport(handler)) as l:
            with pytest.raises(BudgetExceeded) as e:
                await l.charge("d", events.Gdp(1.0))
            assert e.value.request_id == "a-1"

    asyncio.run(go())


def test_path_segments_are_encoded() -> None:
    seen: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.url.raw_path.decode())
        return httpx.Response(200, json={"id": "a/b"})

    ledger(handler).dataset("events@2026-11-16")
    ledger(handler).dataset("a/b")
    assert seen == ["/v1/datasets/events%402026-11-16", "/v1/datasets/a%2Fb"]



def test_the_async_client_has_every_method_of_the_sync_one() -> None:
    public = {n for n in dir(Ledger) if not n.startswith("_")}
    assert public - {"close"} <= {n for n in dir(AsyncLedger) if not n.startswith("_")}


# --- Retries: bounds, statuses, the constructor's knobs ------------------------------------------


def err(code: str) -> dict[str, object]:
    return {"error": code, "message": "m", "details": {}, "request_id": None}


@pytest.mark.parametrize("status,code", [(408, "timeout"), (429, "rate_limited"), (503, "busy")])
def test_408_429_503_are_retried_gets_too(status: int, code: str) -> None:
    n = [0]

    def handler(r: httpx.Request) -> httpx.Response:
        n[0] += 1
        if n[0] == 1:
            return httpx.Response(status, json=err(code), headers={"retry-after": "0"})
        return httpx.Response(200, json={"id": "d", "budget": {"mu": 1.0, "delta": 1e-10}})

    assert ledger(handler).dataset("d").budget_mu == 1.0
    assert n[0] == 2


def test_the_first_503_then_201_sends_one_key_twice() -> None:
    keys: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        keys.append(r.headers["idempotency-key"])
        if len(keys) == 1:
            return httpx.Response(503, json=err("store_unavailable"), headers={"retry-after": "0"})
        return httpx.Response(201, json=CHARGE)

    # The default policy (4 retries), as a user builds the client.
    l = Ledger("http://ledger.test", "pl_x", transport=httpx.MockTransport(handler))
    assert l.charge("d", events.Gdp(0.25)).mu_after == 0.25
    assert len(keys) == 2 and keys[0] == keys[1]
    assert re.fullmatch(r"[0-9a-f-]{36}", keys[0])  # a uuid4 made for the call


def test_retries_zero_means_one_attempt_and_the_error_keeps_retry_after() -> None:
    n = [0]

    def handler(r: httpx.Request) -> httpx.Response:
        n[0] += 1
        return httpx.Response(503, json=err("overloaded"), headers={"retry-after": "2", "x-request-id": "q"})

    l = Ledger("http://ledger.test", "pl_x", retries=0, transport=httpx.MockTransport(handler))
    with pytest.raises(Overloaded) as e:
        l.dataset("d")
    assert n[0] == 1 and e.value.retry_after == 2.0 and e.value.request_id == "q"
    with pytest.raises(ValueError):
        Ledger("http://ledger.test", "pl_x", retries=-1)


def test_the_total_wait_is_capped() -> None:
    n = [0]

    def handler(r: httpx.Request) -> httpx.Response:
        n[0] += 1
        return httpx.Response(503, json=err("busy"), headers={"retry-after": "0.15"})

    policy = RetryPolicy(retries=10, max_total_seconds=0.4)
    t0 = time.monotonic()
    with pytest.raises(Overloaded):
        ledger(handler, policy).dataset("d")
    # 0.15 + 0.15 waited; a third wait would pass 0.4 s: raised instead.
    assert n[0] == 3 and 0.3 <= time.monotonic() - t0 < 1.0
    assert RetryPolicy().wait(1, 11.0) is None  # a Retry-After past 10 s is not waited
    assert all(0 <= (RetryPolicy().wait(a, None) or 0) <= 10 for a in range(1, 5))


def test_a_connection_error_is_retried_then_raised_as_connection_failed() -> None:
    keys: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        keys.append(r.headers["idempotency-key"])
        raise httpx.ConnectError("refused")

    with pytest.raises(ConnectionFailed) as e:
        ledger(handler).charge("d", events.Gdp(0.1))
    assert len(keys) == 1 + FAST.retries and len(set(keys)) == 1
    assert keys[0] in str(e.value)


# --- Every error class, from a sample body -----------------------------------------------------


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (400, "bad_request", privacy_ledger.BadRequest),
        (413, "payload_too_large", privacy_ledger.BadRequest),
        (415, "unsupported_media_type", privacy_ledger.BadRequest),
        (422, "idempotency_key_reused", privacy_ledger.IdempotencyKeyReused),
        (401, "unauthenticated", privacy_ledger.Unauthorized),
        (403, "forbidden", privacy_ledger.Forbidden),
        (404, "run_not_found", privacy_ledger.NotFound),
        (408, "timeout", privacy_ledger.RequestTimeout),
        (409, "budget_exceeded", privacy_ledger.BudgetExceeded),
        (409, "run_complete", privacy_ledger.RunComplete),
        (409, "chunk_mismatch", privacy_ledger.ChunkMismatch),
        (409, "unit_started", privacy_ledger.UnitStarted),
        (409, "unit_released", privacy_ledger.UnitReleased),
        (409, "not_reserved", privacy_ledger.NotReserved),
        (409, "already_exists", privacy_ledger.AlreadyExists),
        (409, "quota_conflict", privacy_ledger.Conflict),
        (429, "rate_limited", privacy_ledger.Overloaded),
        (503, "store_unavailable", privacy_ledger.Overloaded),
        (502, "bad_gateway", privacy_ledger.ServerError),
    ],
)
def test_each_code_maps_to_its_class_with_the_request_id(
    status: int, code: str, cls: type[LedgerError]
) -> None:
    body = {"error": code, "message": f"{code}!", "details": {"k": 1}, "request_id": "rid-9"}
    l = Ledger("http://ledger.test", "pl_x", retries=0,
               transport=httpx.MockTransport(lambda r: httpx.Response(status, json=body)))
    with pytest.raises(cls) as e:
        l.charge("d", events.Gdp(0.1))
    x = e.value
    assert type(x) is cls and isinstance(x, LedgerError)
    assert (x.status, x.code, x.message, x.request_id, x.details) == (status, code, f"{code}!", "rid-9", {"k": 1})
    if status == 409:
        assert isinstance(x, privacy_ledger.Conflict)


def test_budget_exceeded_has_every_figure_of_the_body() -> None:
    body = {
        "error": "budget_exceeded", "message": "m", "details": {}, "request_id": "r",
        "dataset_id": "census", "quota": "alice", "reason": "mu", "unit": {"mu": 0.5, "delta": 0.0},
        "mu_after": 1.1, "mu_spent": 0.9, "mu_budget": 1.0, "remaining_mu": 0.43,
        "delta_spent": 0.0, "delta_budget": 1e-10, "remaining_delta": 1e-10, "delta_after": 0.0,
        "something_new": [1],
    }
    l = ledger(lambda r: httpx.Response(409, json=body))
    with pytest.raises(BudgetExceeded) as e:
        l.charge("census", events.Gdp(0.5))
    x = e.value
    assert (x.ledger, x.quota, x.reason) == ("census", "alice", "mu")
    assert (x.unit_mu, x.unit_delta, x.mu_after, x.mu_spent, x.mu_budget) == (0.5, 0.0, 1.1, 0.9, 1.0)
    assert (x.remaining_mu, x.remaining_delta, x.delta_spent, x.delta_budget) == (0.43, 1e-10, 0.0, 1e-10)
    assert x.body["something_new"] == [1]


def test_run_does_not_fit_has_the_figures_of_its_details() -> None:
    body = {
        "error": "run_does_not_fit", "message": "m", "request_id": "r",
        "details": {"chunks": 5, "steps": 10, "chunks_that_fit": 3, "steps_that_fit": 6,
                    "refused_by": "mu of the dataset's budget", "remaining_mu": 0.2,
                    "remaining_delta": 1e-10},
    }
    l = ledger(lambda r: httpx.Response(409, json=body))
    with pytest.raises(RunDoesNotFit) as e:
        l.run("d", events.Gdp(0.4), steps=10, chunk_steps=2)
    x = e.value
    assert (x.chunks, x.steps, x.chunks_that_fit, x.steps_that_fit) == (5, 10, 3, 6)
    assert (x.refused_by, x.remaining_mu, x.remaining_delta) == ("mu of the dataset's budget", 0.2, 1e-10)


def test_a_configuration_error_is_a_ledger_error_without_status() -> None:
    e = ConfigurationError("no url")
    assert isinstance(e, LedgerError) and e.status is None


# --- Runs: one key per chunk, properties, listing ----------------------------------------------


RUN = {"id": "r1", "steps": 25, "chunk_steps": 10, "chunks": 3, "next_chunk": 0, "run_mu": 0.3,
       "run_delta": 0.0, "chunk_unit": {"mu": 0.17, "delta": 0.0}, "mu_used": 0.0,
       "mu_to_finish": 0.3, "warnings": [{"code": "chunking_cost", "message": "m",
                                          "suggested_chunk_steps": 25}], "new_field": True}


def test_each_chunk_has_a_key_of_its_own_and_its_retry_the_same() -> None:
    sent: list[tuple[int, str]] = []

    def handler(r: httpx.Request) -> httpx.Response:
        if r.url.path.endswith("/runs"):
            assert json.loads(r.content) == {"event": {"type": "gdp", "mu": 0.1}, "steps": 25,
                                             "chunk_steps": 10, "label": "x"}
            return httpx.Response(201, json=RUN)
        i = json.loads(r.content)["chunk"]
        sent.append((i, r.headers["idempotency-key"]))
        if len(sent) == 1:
            raise httpx.ReadError("the answer was lost")
        return httpx.Response(201, json={"charge": {"id": f"c{i}", "chunk": i, "mu_after": 0.1 * (i + 1)}})

    l = ledger(handler)
    run = l.run("d", events.Gdp(0.1), steps=25, chunk_steps=10, label="x")
    assert (run.id, run.steps, run.chunk_steps, run.chunks, run.run_mu, run.chunk_mu) == (
        "r1", 25, 10, 3, 0.3, 0.17)
    assert run.warnings[0].suggested_chunk_steps == 25 and run.info.raw["new_field"] is True
    got = [(c.index, c.first_step, c.steps, c.charge_id, c.mu_after) for c in run]
    assert got == [(0, 0, 10, "c0", 0.1), (1, 10, 10, "c1", 0.2), (2, 20, 5, "c2", pytest.approx(0.3))]
    # run-{run id}-chunk-{index}-{this Run object's scope}: the retry sent chunk 0's key again.
    assert [i for i, _ in sent] == [0, 0, 1, 2] and sent[0][1] == sent[1][1]
    assert all(re.fullmatch(rf"run-r1-chunk-{i}-[0-9a-f]{{12}}", k) for i, k in sent)
    assert len({k.rsplit("-", 1)[1] for _, k in sent}) == 1
    # Another Run object of the same run (another process resuming it) has keys of its own.
    sent.clear()
    again = privacy_ledger.Run(l, "d", run.info)
    next(iter(again))
    assert sent[0][1] != f"run-r1-chunk-0-{run._scope}"


def test_run_complete_ends_the_iteration_and_allow_partial_is_sent() -> None:
    bodies: list[dict[str, object]] = []

    def handler(r: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(r.content))
        if r.url.path.endswith("/runs"):
            return httpx.Response(201, json=RUN)
        return httpx.Response(409, json=err("run_complete"))

    run = ledger(handler).run("d", events.Gdp(0.1), 25, 10, allow_partial=True, delta=1e-12)
    assert list(run) == []
    assert bodies[0]["allow_partial"] is True and bodies[0]["delta"] == 1e-12


def test_runs_lists_every_page() -> None:
    seen: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(str(r.url.query.decode()))
        if "after" not in r.url.params:
            return httpx.Response(200, json={"items": [dict(RUN, id="a")], "next_cursor": 7})
        return httpx.Response(200, json={"items": [dict(RUN, id="b", steps_taken=25, mu_used=0.3,
                                                         delta_used=0.0, mu_to_finish=0.0,
                                                         delta_to_finish=0.0)],
                                          "next_cursor": None})

    got = list(ledger(handler).runs("d"))
    assert [r.id for r in got] == ["a", "b"] and got[1].steps_taken == 25 and got[1].mu_used == 0.3
    assert seen == ["limit=100", "limit=100&after=7"]


# --- Tokens: the flat answer, and the one before it ---------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        {"bearer_token": "pl_" + "a" * 64, "id": "t1", "name": "bob", "role": "analyst",
         "created_at": "2026-11-28T20:00:00Z", "expires_at": None, "revoked_at": None},
        {"token": {"id": "t1", "name": "bob", "role": "analyst", "created_at": "2026-11-28T20:00:00Z"},
         "secret": "pl_" + "a" * 64},
    ],
)
def test_create_token_returns_the_bearer_token(answer: dict[str, object]) -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        assert json.loads(r.content) == {"name": "bob", "role": "analyst", "expires_in_days": 30}
        assert r.headers["idempotency-key"]
        return httpx.Response(201, json=answer)

    t = ledger(handler).create_token("bob", "analyst", expires_in_days=30)
    assert (t.bearer_token, t.id, t.name, t.role) == ("pl_" + "a" * 64, "t1", "bob", "analyst")
    assert "pl_a" not in repr(t)  # the secret is not printed by accident


# --- Events ------------------------------------------------------------------------------------


def test_every_typed_event_has_the_services_tag_and_fields() -> None:
    g = events.Gaussian(1.0)
    cases: list[tuple[events.Event, dict[str, object]]] = [
        (g, {"type": "gaussian", "noise_multiplier": 1.0}),
        (events.Laplace(2.0), {"type": "laplace", "noise_multiplier": 2.0}),
        (events.DiscreteLaplace(0.5, 2), {"type": "discrete_laplace", "noise_parameter": 0.5, "sensitivity": 2}),
        (events.DiscreteGaussian(3.0), {"type": "discrete_gaussian", "sigma": 3.0, "sensitivity": 1}),
        (events.RandomizedResponse(0.5, 4), {"type": "randomized_response", "noise_parameter": 0.5, "num_buckets": 4}),
        (events.EpsilonDelta(1.0, 1e-6), {"type": "epsilon_delta", "epsilon": 1.0, "delta": 1e-6}),
        (events.Gdp(0.5), {"type": "gdp", "mu": 0.5}),
        (events.Zcdp(0.1), {"type": "zcdp", "rho": 0.1}),
        (events.Zcdp(0.1, xi=0.2), {"type": "zcdp", "rho": 0.1, "xi": 0.2}),
        (events.Rdp((2.0, 4.0), (0.1, 0.3)), {"type": "rdp", "orders": [2.0, 4.0], "rdp": [0.1, 0.3]}),
        (events.PoissonSampled(0.01, g), {"type": "poisson_sampled", "sampling_rate": 0.01,
                                          "event": {"type": "gaussian", "noise_multiplier": 1.0}}),
        (events.SampledWithoutReplacement(10, 100, g),
         {"type": "sampled_without_replacement", "sample_size": 10, "population_size": 100,
          "event": {"type": "gaussian", "noise_multiplier": 1.0}}),
        (events.SelfComposed(3, g), {"type": "self_composed", "count": 3,
                                     "event": {"type": "gaussian", "noise_multiplier": 1.0}}),
        (events.Composed((g,)), {"type": "composed", "events": [{"type": "gaussian", "noise_multiplier": 1.0}]}),
    ]
    for e, j in cases:
        assert e.to_json() == j and events.to_json(e) == j
        with pytest.raises(AttributeError):
            setattr(e, "count", 1)  # frozen


def test_more_dp_accounting_events_and_refusals() -> None:
    dp = pytest.importorskip("dp_accounting", reason="dp_accounting is not installed")
    assert events.to_json(dp.NoOpDpEvent()) == {"type": "composed", "events": []}
    assert events.to_json(dp.ZCDpEvent(0.5, 0.1)) == {"type": "zcdp", "rho": 0.5, "xi": 0.1}
    assert events.to_json(dp.ComposedDpEvent([dp.GaussianDpEvent(1.0)])) == {
        "type": "composed", "events": [{"type": "gaussian", "noise_multiplier": 1.0}]}
    assert events.to_json(dp.RandomizedResponseDpEvent(0.5, 4)) == events.to_json(
        events.RandomizedResponse(0.5, 4))
    for bad in (dp.UnsupportedDpEvent(), dp.SampledWithReplacementDpEvent(10, 2, dp.GaussianDpEvent(1.0)),
                dp.PoissonSampledDpEvent(0.1, dp.NonPrivateDpEvent())):
        with pytest.raises(TypeError, match="no counterpart"):
            events.to_json(bad)
    # Accepted wherever an event is: the body sent is the typed event's.
    sent: list[object] = []

    def handler(r: httpx.Request) -> httpx.Response:
        sent.append(json.loads(r.content)["event"])
        return httpx.Response(201, json=CHARGE)

    ledger(handler).charge("d", dp.PoissonSampledDpEvent(0.01, dp.GaussianDpEvent(1.1)))
    assert sent == [{"type": "poisson_sampled", "sampling_rate": 0.01,
                     "event": {"type": "gaussian", "noise_multiplier": 1.1}}]


# --- Reservations: explicit settlement, async with ----------------------------------------------


def settle_log(log: list[str]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(r: httpx.Request) -> httpx.Response:
        path = r.url.path
        if path.endswith("/charges"):
            assert json.loads(r.content)["reserve"] is True
            return httpx.Response(201, json={"charge": {"id": "u", "status": "reserved"}})
        log.append(path.rsplit("/", 1)[1] + " " + r.headers["idempotency-key"])
        return httpx.Response(200, json={})

    return handler


def test_an_explicit_settlement_is_the_last_word() -> None:
    log: list[str] = []
    l = ledger(settle_log(log))
    with l.reserve("d", events.Gdp(0.1)) as unit:
        unit.release(outputs_seen=False)
    with pytest.raises(RuntimeError):
        with l.reserve("d", events.Gdp(0.1), outputs_seen=False) as unit:
            unit.commit()
            raise RuntimeError
    assert [x.split(" ")[0] for x in log] == ["release", "commit"]
    assert all(re.fullmatch(r"(release|commit)-u-[0-9a-f]{12}", x.split(" ")[1]) for x in log)


def test_async_with_reserves_on_entering() -> None:
    log: list[str] = []

    async def go() -> None:
        async with AsyncLedger("http://l.test", "pl_x", retry=FAST,
                               transport=httpx.MockTransport(settle_log(log))) as l:
            async with l.reserve("d", events.Gdp(0.1)) as unit:
                assert unit.charge.id == "u"
                await unit.start()
            with pytest.raises(RuntimeError):
                async with l.reserve("d", events.Gdp(0.1), outputs_seen=False):
                    raise RuntimeError
            unit = await l.reserve("d", events.Gdp(0.1))
            await unit.commit()

    asyncio.run(go())
    assert [x.split(" ")[0] for x in log] == ["start", "commit", "release", "commit"]
    # One reservation, one scope: its start and commit keys share it.
    assert log[0].rsplit("-", 1)[1] == log[1].rsplit("-", 1)[1] != log[2].rsplit("-", 1)[1]


def test_the_async_client_retries_with_one_key() -> None:
    keys: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        keys.append(r.headers["idempotency-key"])
        if len(keys) == 1:
            return httpx.Response(503, json=err("busy"), headers={"retry-after": "0"})
        return httpx.Response(201, json=CHARGE)

    async def go() -> None:
        async with AsyncLedger("http://l.test", "pl_x", transport=httpx.MockTransport(handler)) as l:
            await l.charge("d", events.Gdp(0.25))

    asyncio.run(go())
    assert len(keys) == 2 and keys[0] == keys[1]

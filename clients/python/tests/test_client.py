"""The client without a service: answers mapped to values or exceptions, retries with one
Idempotency-Key, events' JSON, configuration. (test_live.py runs against a real service.)"""

from __future__ import annotations

import asyncio
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

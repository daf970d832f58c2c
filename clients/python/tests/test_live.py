"""Against a real service (run.sh starts one and sets PRIVACY_LEDGER_URL / PRIVACY_LEDGER_TOKEN;
without them these tests are skipped, and say so)."""

from __future__ import annotations

import asyncio
import math
import os
import uuid

import pytest

from privacy_ledger import (
    AsyncLedger,
    BadRequest,
    BudgetExceeded,
    Forbidden,
    Ledger,
    NotFound,
    RunDoesNotFit,
    Unauthorized,
    events,
)

pytestmark = pytest.mark.skipif(
    not (os.environ.get("PRIVACY_LEDGER_URL") and os.environ.get("PRIVACY_LEDGER_TOKEN")),
    reason="no service: set PRIVACY_LEDGER_URL and PRIVACY_LEDGER_TOKEN (clients/python/run.sh does)",
)

#: The service rounds its sums up by a few ulps; closed forms here are of a few doubles.
SUM_TOLERANCE = 1e-12


def fresh(ledger: Ledger, mu: float) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    ledger.create_dataset(name, mu=mu)
    return name


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def test_charges_until_the_gate_refuses_and_the_refusal_raises(ledger: Ledger) -> None:
    d = fresh(ledger, 1.0)
    # GDP units compose exactly: 0.6² + 0.6² + 0.6² > 1 ≥ 0.6² + 0.6².
    ledger.charge(d, events.Gdp(0.6))
    ledger.charge(d, events.Gdp(0.6))
    with pytest.raises(BudgetExceeded) as e:
        ledger.charge(d, events.Gdp(0.6))
    left = math.sqrt(1 - 0.72)
    assert e.value.remaining_mu is not None and abs(e.value.remaining_mu - left) < 1e-9
    assert e.value.request_id and e.value.unit_mu == 0.6
    assert ledger.dataset(d).units == 2


def test_errors_name_what_is_wrong(ledger: Ledger) -> None:
    with pytest.raises(NotFound):
        ledger.dataset(f"missing-{uuid.uuid4().hex[:6]}")
    d = fresh(ledger, 1.0)
    with pytest.raises(Exception) as e:
        ledger.charge(d, events.Gaussian(noise_multiplier=-1.0))
    assert getattr(e.value, "field", None) == "$.event.noise_multiplier"
    with pytest.raises(Unauthorized):
        Ledger(token="pl_" + "0" * 64).dataset(d)


def test_a_token_has_one_field_to_keep_and_a_reader_cannot_spend(ledger: Ledger) -> None:
    d = fresh(ledger, 1.0)
    t = ledger.create_token(f"reader-{uuid.uuid4().hex[:6]}", "auditor")
    assert t.bearer_token.startswith("pl_") and len(t.bearer_token) == 67
    reader = Ledger(token=t.bearer_token)
    assert reader.dataset(d).id == d
    with pytest.raises(Forbidden):
        reader.charge(d, events.Gdp(0.1))


def test_a_run_that_cannot_finish_is_refused_at_declaration(ledger: Ledger) -> None:
    d = fresh(ledger, 1.0)
    # Chunks of μ 0.4·√2: three fit (3 · 0.32 ≤ 1), five are declared.
    with pytest.raises(RunDoesNotFit) as e:
        ledger.run(d, events.Gdp(0.4), steps=10, chunk_steps=2)
    assert (e.value.chunks_that_fit, e.value.steps_that_fit) == (3, 6)
    assert e.value.refused_by == "mu of the dataset's budget"
    assert list(ledger.runs(d)) == []


def test_a_run_iterates_its_chunks_and_the_ledger_holds_its_plan(ledger: Ledger) -> None:
    d = fresh(ledger, 2.0)
    run = ledger.run(d, events.Gdp(0.1), steps=10, chunk_steps=4, label="sdk")
    chunks = [(c.index, c.first_step, c.steps) for c in run]
    assert chunks == [(0, 0, 4), (1, 4, 4), (2, 8, 2)]
    info = run.refresh()
    assert info.next_chunk is None and info.steps_taken == 10 and info.mu_to_finish == 0.0
    # Σμᵢ² = 0.04 + 0.04 + 0.02 = 0.1 = 10 · 0.1²: the run costs √10 · 0.1, as its plan said.
    spent = ledger.dataset(d).mu_spent
    assert math.sqrt(0.1) <= spent <= math.sqrt(0.1) * (1 + SUM_TOLERANCE)
    assert abs(info.run_mu - spent) <= spent * SUM_TOLERANCE
    assert abs(info.mu_used - spent) <= spent * SUM_TOLERANCE
    [listed] = list(ledger.runs(d))
    assert listed.id == run.id and listed.label == "sdk"


def test_a_partial_run_stops_with_budget_exceeded_before_the_chunk(ledger: Ledger) -> None:
    d = fresh(ledger, 1.0)
    run = ledger.run(d, events.Gdp(0.4), steps=10, chunk_steps=2, allow_partial=True)
    trained: list[int] = []
    with pytest.raises(BudgetExceeded):
        for chunk in run:
            trained.append(chunk.index)
    assert trained == [0, 1, 2]
    assert ledger.dataset(d).units == 3


def test_a_costly_chunking_is_warned_about(ledger: Ledger) -> None:
    d = fresh(ledger, 10.0)
    step = events.PoissonSampled(0.01, events.Gaussian(1.0))
    run = ledger.run(d, step, steps=10_000, chunk_steps=500)
    [w] = run.info.warnings
    assert (w.code, w.suggested_chunk_steps) == ("chunking_cost", 5000)


def test_reservations_commit_release_or_commit_on_failure(ledger: Ledger) -> None:
    d = fresh(ledger, 1.0)
    with ledger.reserve(d, events.Gdp(0.5)):
        pass
    assert 0.5 <= ledger.dataset(d).mu_spent <= 0.5 * (1 + SUM_TOLERANCE)
    # Cancelled before it read anything, and said so: refunded.
    with pytest.raises(KeyboardInterrupt):
        with ledger.reserve(d, events.Gdp(0.5), outputs_seen=False):
            raise KeyboardInterrupt
    assert 0.5 <= ledger.dataset(d).mu_spent <= 0.5 * (1 + SUM_TOLERANCE)
    # Failed without saying so: it stays charged.
    with pytest.raises(RuntimeError):
        with ledger.reserve(d, events.Gdp(0.5)):
            raise RuntimeError("job failed")
    spent = ledger.dataset(d)
    assert spent.units == 2 and abs(spent.mu_spent - math.sqrt(0.5)) < 1e-12
    # Started, then failed: committed even with outputs_seen=False.
    with pytest.raises(RuntimeError):
        with ledger.reserve(d, events.Gdp(0.1), outputs_seen=False) as unit:
            unit.start()
            raise RuntimeError("failed after reading")
    assert ledger.dataset(d).units == 3


def test_dp_accounting_events_are_charged_as_their_counterparts(ledger: Ledger) -> None:
    dp = pytest.importorskip("dp_accounting", reason="dp_accounting is not installed")
    d = fresh(ledger, 3.0)
    step = dp.PoissonSampledDpEvent(0.01, dp.GaussianDpEvent(1.0))
    a = ledger.run(d, step, steps=100, chunk_steps=50)
    b = ledger.run(d, events.PoissonSampled(0.01, events.Gaussian(1.0)), steps=100, chunk_steps=50)
    assert a.info.run_mu == b.info.run_mu and a.info.chunk_mu == b.info.chunk_mu


def test_the_async_client_charges_runs_and_refuses() -> None:
    async def go() -> None:
        async with AsyncLedger() as ledger:
            d = f"a-{uuid.uuid4().hex[:10]}"
            await ledger.create_dataset(d, mu=1.0)
            run = await ledger.run(d, events.Gdp(0.4), steps=10, chunk_steps=2, allow_partial=True)
            seen = []
            with pytest.raises(BudgetExceeded):
                async for chunk in run:
                    seen.append(chunk.index)
            assert seen == [0, 1, 2]
            async with await ledger.reserve(d, events.Gdp(0.01), outputs_seen=False) as unit:
                await unit.release(outputs_seen=False)
            assert (await ledger.dataset(d)).units == 3
            # Reserved on entering; cancelled before it read anything: refunded.
            before = (await ledger.dataset(d)).mu_spent
            with pytest.raises(KeyboardInterrupt):
                async with ledger.reserve(d, events.Gdp(0.01), outputs_seen=False):
                    raise KeyboardInterrupt
            after = await ledger.dataset(d)
            assert abs(after.mu_spent - before) < 1e-12 and after.units == 3
            async with ledger.reserve(d, events.Gdp(0.01)):
                pass
            assert (await ledger.dataset(d)).units == 4

    asyncio.run(go())


def test_a_reserved_run_holds_its_chunks_and_refunds_those_never_started(ledger: Ledger) -> None:
    d = fresh(ledger, 1.0)
    # 4 chunks of μ 0.1·√2 held at once: μ² 0.08; then a charge of μ 0.96 cannot fit.
    with ledger.run(d, events.Gdp(0.1), steps=8, chunk_steps=2, reserve=True) as run:
        assert run.info.raw["chunks_reserved"] == 4
        with pytest.raises(BudgetExceeded):
            ledger.charge(d, events.Gdp(0.96))
        for chunk in run:
            if chunk.index == 1:
                break  # training stops after two chunks
    info = run.refresh()
    assert (info.raw["chunks_committed"], info.raw["chunks_released"]) == (2, 2)
    assert abs(ledger.dataset(d).mu_spent - math.sqrt(0.04)) < 1e-12
    async def go() -> None:
        async with AsyncLedger() as a:
            async with await a.run(d, events.Gdp(0.1), steps=4, chunk_steps=2, reserve=True) as r:
                async for c in r:
                    assert c.steps == 2
            assert (await r.refresh()).raw["chunks_committed"] == 2

    asyncio.run(go())


def test_the_async_client_charges_until_refused() -> None:
    async def go() -> None:
        async with AsyncLedger() as ledger:
            d = f"a-{uuid.uuid4().hex[:10]}"
            await ledger.create_dataset(d, mu=1.0)
            c = await ledger.charge(d, events.Gdp(0.6), label="a")
            assert c.unit_mu == 0.6 and c.status == "committed"
            await ledger.charge(d, events.Gdp(0.6))
            with pytest.raises(BudgetExceeded) as e:
                await ledger.charge(d, events.Gdp(0.6))
            assert e.value.remaining_mu is not None and abs(e.value.remaining_mu - math.sqrt(0.28)) < 1e-9
            assert e.value.ledger == d and e.value.request_id

    asyncio.run(go())


def test_a_retry_with_the_same_key_never_charges_twice(ledger: Ledger) -> None:
    d = fresh(ledger, 1.0)
    a = ledger.charge(d, events.Gdp(0.3), idempotency_key="job-1")
    b = ledger.charge(d, events.Gdp(0.3), idempotency_key="job-1")
    assert a.id == b.id and ledger.dataset(d).units == 1


def test_a_resumed_run_goes_on_from_its_next_chunk(ledger: Ledger) -> None:
    d = fresh(ledger, 2.0)
    run = ledger.run(d, events.Gdp(0.1), steps=6, chunk_steps=2)
    first = next(iter(run))
    assert first.index == 0 and first.charge_id
    again = ledger.resume_run(d, run.id)
    assert [c.index for c in again] == [1, 2]
    info = again.refresh()
    assert info.next_chunk is None and info.steps_taken == 6 and ledger.dataset(d).units == 3


def test_two_workers_on_one_run_never_share_a_chunk(ledger: Ledger) -> None:
    d = fresh(ledger, 2.0)
    run = ledger.run(d, events.Gdp(0.1), steps=6, chunk_steps=2)
    a, b = ledger.resume_run(d, run.id), ledger.resume_run(d, run.id)
    assert next(iter(a)).index == 0
    # b still thinks chunk 0 is next: told chunk_mismatch, it goes on from chunk 1.
    assert next(iter(b)).index == 1
    assert ledger.dataset(d).units == 2


def test_a_charge_says_what_is_left_and_the_headline_agrees(ledger: Ledger) -> None:
    name = fresh(ledger, 1.0)
    c = ledger.charge(name, events.Gdp(0.6))
    # Closed form: 1 − 0.6² = 0.64 of μ_B² left, so μ 0.8 remains and 36 % is used.
    assert c.remaining is not None
    assert c.remaining.mu == pytest.approx(0.8, rel=1e-9)
    assert c.remaining.used_fraction == pytest.approx(0.36, rel=1e-9)
    assert not c.remaining.exhausted
    h = ledger.headline(name)
    assert h.used_fraction == pytest.approx(0.36, rel=1e-9)
    assert h.remaining_mu == pytest.approx(0.8, rel=1e-9)
    assert h.epsilon_delta == 1e-5 and h.epsilon_remaining is not None
    assert ledger.headline(name, delta=1e-6).epsilon_delta == 1e-6
    # Spent to the budget exactly: 1.0 used, exhausted, nothing left.
    last = ledger.charge(name, events.Gdp(0.8))
    assert last.remaining is not None and last.remaining.exhausted
    assert last.remaining.used_fraction == 1.0
    assert ledger.headline(name).exhausted


def test_alert_thresholds_are_read_and_set(ledger: Ledger) -> None:
    name = fresh(ledger, 1.0)
    assert ledger.alert_thresholds(name) == [0.5, 0.75, 0.9]
    assert ledger.set_alert_thresholds(name, [0.25, 0.8]) == [0.25, 0.8]
    assert ledger.alert_thresholds(name) == [0.25, 0.8]


def test_a_runs_sampling_rate_is_checked_against_its_sampler(ledger: Ledger) -> None:
    name = fresh(ledger, 3.0)
    sampler = events.poisson_sampler(256, 60_000)
    step = events.PoissonSampled(0.01, events.Gaussian(1.0))
    with pytest.raises(BadRequest) as e:
        ledger.run(name, step, 100, sampler=sampler)
    assert e.value.details["path"] == "$.event.sampling_rate"
    run = ledger.run(name, events.PoissonSampled(256 / 60_000, events.Gaussian(1.0)), 100, sampler=sampler)
    assert run.refresh().raw["sampler"]["rate"] * 60_000 >= 256


def test_a_dataset_states_its_privacy_unit_and_size(ledger: Ledger) -> None:
    name = f"t-{uuid.uuid4().hex[:10]}"
    d = ledger.create_dataset(name, mu=1.0, privacy_unit="user", size=60_000)
    assert (d.privacy_unit, d.size) == ("user", 60_000)
    assert ledger.report(name)["privacy_unit"] == "user"

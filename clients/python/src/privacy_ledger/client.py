"""The clients: :class:`Ledger` (sync) and :class:`AsyncLedger` (asyncio), over httpx."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import TracebackType
from typing import Any, AsyncIterator, Generator, Iterator, Mapping

import httpx

from . import events as ev
from ._transport import (
    RETRIED_STATUSES,
    Call,
    RetryPolicy,
    answer,
    policy,
    config,
    connection_failed,
    retry_after,
    seg,
)
from .errors import ChunkMismatch, RunComplete
from .models import Charge, Chunk, Dataset, Headline, RunInfo, RunWarning, Token


def _dataset_body(
    id: str, mu: float, delta: float | None, description: str | None, extra: Mapping[str, Any]
) -> dict[str, Any]:
    budget: dict[str, Any] = {"mu": mu}
    if delta is not None:
        budget["delta"] = delta
    body: dict[str, Any] = {"id": id, "budget": budget, **extra}
    if description is not None:
        body["description"] = description
    return body


def _unit_body(
    event: ev.EventLike,
    delta: float | None,
    label: str | None,
    metadata: Mapping[str, Any] | None,
    reserve: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {"event": ev.to_json(event)}
    if delta is not None:
        body["delta"] = delta
    if label is not None:
        body["label"] = label
    if metadata is not None:
        body["metadata"] = dict(metadata)
    if reserve:
        body["reserve"] = True
    return body


def _run_body(
    event: ev.EventLike,
    steps: int,
    chunk_steps: int | None,
    delta: float | None,
    allow_partial: bool,
    chunking_tolerance: float | None,
    label: str | None,
    metadata: Mapping[str, Any] | None,
    reserve: bool = False,
    sampler: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body = _unit_body(event, delta, label, metadata)
    if reserve:
        body["reserve"] = True
    if sampler is not None:
        body["sampler"] = dict(sampler)
    body["steps"] = steps
    if chunk_steps is not None:
        body["chunk_steps"] = chunk_steps
    if allow_partial:
        body["allow_partial"] = True
    if chunking_tolerance is not None:
        body["chunking_tolerance"] = chunking_tolerance
    return body


def _headline_call(dataset: str, delta: float | None) -> Call:
    params: dict[str, str | int] = {} if delta is None else {"delta": repr(float(delta))}
    return Call("GET", f"/v1/datasets/{seg(dataset)}/headline", params=params)


def _thresholds(body: Any) -> list[float]:
    return [float(t) for t in body.get("thresholds", [])] if isinstance(body, dict) else []


def _chunk_key(info: RunInfo, index: int, scope: str) -> str:
    # One key per chunk of a run and per Run object: asking for chunk i again (a retry, or the
    # same loop after a ConnectionFailed) gets the first outcome and never admits a second
    # chunk. The scope keeps two processes that resumed the same run from sharing chunk i (the
    # second is told chunk_mismatch and goes on from the next one). A refusal writes nothing,
    # so asking again later is evaluated afresh.
    return f"run-{info.id}-chunk-{index}-{scope}"


def _scope() -> str:
    return uuid.uuid4().hex[:12]


def _chunk(info: RunInfo, index: int, body: dict[str, Any]) -> Chunk:
    first = index * info.chunk_steps
    return Chunk(
        index=index,
        first_step=first,
        steps=min(info.chunk_steps, info.steps - first),
        charge=Charge.of(body),
    )


class Ledger:
    """A client of one privacy-ledger service (sync).

    ``url`` and ``token`` default to ``PRIVACY_LEDGER_URL`` and ``PRIVACY_LEDGER_TOKEN``
    (:class:`ConfigurationError` without them). Every non-2xx answer raises
    (:mod:`privacy_ledger.errors`); 408, 429, 503 and connection failures are retried, at most
    ``retries`` times (exponential backoff with jitter, honouring Retry-After, 10 s of waiting
    in all; ``retry``: a :class:`RetryPolicy` of your own), with the same Idempotency-Key: every
    state-changing POST carries one (the caller's ``idempotency_key``, else a uuid4 per call)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        transport: httpx.BaseTransport | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        base, tok = config(url, token)
        self.retry = policy(retries, retry)
        self._http = httpx.Client(
            base_url=base,
            headers={"Authorization": f"Bearer {tok}"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: Call) -> Any:
        # The same Call (so the same Idempotency-Key) on every attempt.
        attempt, waited = 0, 0.0
        while True:
            attempt += 1
            try:
                r = self._http.request(
                    call.method, call.path, json=call.body, params=call.params, headers=call.headers()
                )
            except httpx.TransportError as e:
                # Connect errors, and read errors on a request that may have been sent.
                wait = self.retry.wait(attempt, None, waited)
                if wait is None:
                    raise connection_failed(call, e) from e
                time.sleep(wait)
                waited += wait
                continue
            if r.status_code in RETRIED_STATUSES:
                wait = self.retry.wait(attempt, retry_after(r), waited)
                if wait is not None:
                    time.sleep(wait)
                    waited += wait
                    continue
            return answer(r)

    # Datasets -------------------------------------------------------------------------------

    def create_dataset(
        self,
        id: str,
        *,
        mu: float,
        delta: float | None = None,
        description: str | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> Dataset:
        """Make a dataset with a μ-GDP budget (``delta``: the budget's δ_B)."""
        body = _dataset_body(id, mu, delta, description, extra)
        return Dataset.of(self._send(Call.post("/v1/datasets", body, idempotency_key)))

    def dataset(self, id: str) -> Dataset:
        return Dataset.of(self._send(Call("GET", f"/v1/datasets/{seg(id)}")))

    def datasets(self) -> list[Dataset]:
        """Every dataset the token may read (all pages)."""
        out: list[Dataset] = []
        after: str | None = None
        while True:
            params: dict[str, str | int] = {"limit": 100}
            if after is not None:
                params["cursor"] = after
            page = self._send(Call("GET", "/v1/datasets", params=params))
            out += [Dataset.of(d) for d in page.get("items", [])]
            after = page.get("next_cursor")
            if after is None:
                return out

    def report(self, dataset: str) -> dict[str, Any]:
        """The budget's guarantee in every term (μ, ε(δ), f(α), attack risk), and what was spent."""
        out: dict[str, Any] = self._send(Call("GET", f"/v1/datasets/{seg(dataset)}/report"))
        return out

    def headline(self, dataset: str, *, delta: float | None = None) -> Headline:
        """The dataset at a glance: share used, what is left (μ, and ε at ``delta``), forecast."""
        return Headline.of(self._send(_headline_call(dataset, delta)))

    def alert_thresholds(self, dataset: str) -> list[float]:
        """The used shares whose crossing sends the dataset's webhook alerts."""
        return _thresholds(self._send(Call("GET", f"/v1/datasets/{seg(dataset)}/alerts")))

    def set_alert_thresholds(self, dataset: str, thresholds: list[float]) -> list[float]:
        """Sets them (admins of the dataset); an empty list leaves only the exhaustion alert."""
        call = Call("PUT", f"/v1/datasets/{seg(dataset)}/alerts", {"thresholds": thresholds})
        return _thresholds(self._send(call))

    # Units ----------------------------------------------------------------------------------

    def charge(
        self,
        dataset: str,
        event: ev.EventLike,
        *,
        delta: float | None = None,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Charge:
        """Charge one unit; :class:`~privacy_ledger.errors.BudgetExceeded` when it does not fit."""
        body = _unit_body(event, delta, label, metadata)
        path = f"/v1/datasets/{seg(dataset)}/charges"
        return Charge.of(self._send(Call.post(path, body, idempotency_key)))

    def preview(self, dataset: str, event: ev.EventLike, *, delta: float | None = None) -> dict[str, Any]:
        """What the charge would do; nothing is written."""
        path = f"/v1/datasets/{seg(dataset)}/charges/preview"
        out: dict[str, Any] = self._send(Call("POST", path, _unit_body(event, delta, None, None)))
        return out

    def reserve(
        self,
        dataset: str,
        event: ev.EventLike,
        *,
        outputs_seen: bool = True,
        delta: float | None = None,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> "Reservation":
        """Reserve a unit (the gate admits it now; :class:`BudgetExceeded` when it does not
        fit). As a context manager it commits on success; when the body raises, it is released
        only if the caller passed ``outputs_seen=False`` and never called ``start()``, and
        committed otherwise."""
        body = _unit_body(event, delta, label, metadata, reserve=True)
        path = f"/v1/datasets/{seg(dataset)}/charges"
        charge = Charge.of(self._send(Call.post(path, body, idempotency_key)))
        return Reservation(self, dataset, charge, outputs_seen)

    def _settle(
        self, dataset: str, charge_id: str, how: str, body: dict[str, Any], scope: str
    ) -> dict[str, Any]:
        path = f"/v1/datasets/{seg(dataset)}/charges/{seg(charge_id)}/{how}"
        out: dict[str, Any] = self._send(Call.keyed(path, body, f"{how}-{charge_id}-{scope}"))
        return out

    # Runs -----------------------------------------------------------------------------------

    def run(
        self,
        dataset: str,
        event: ev.EventLike,
        steps: int,
        chunk_steps: int | None = None,
        *,
        delta: float | None = None,
        allow_partial: bool = False,
        chunking_tolerance: float | None = None,
        reserve: bool = False,
        sampler: Mapping[str, Any] | None = None,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> "Run":
        """Declare a run of ``steps`` steps of ``event`` in chunks of ``chunk_steps``; nothing
        is charged. :class:`RunDoesNotFit` unless every chunk fits now (or ``allow_partial``).
        Iterate it: each chunk is asked of the gate before it is yielded.

        ``reserve=True`` reserves every chunk now (at most 100), so nothing charged later can
        take their room; iterating then starts each chunk before yielding it and commits it
        after, and ``release_unstarted()`` (called on leaving ``with run:``) refunds the chunks
        never started.

        ``sampler`` (:func:`~privacy_ledger.events.poisson_sampler`,
        :func:`~privacy_ledger.events.fixed_size_sampler`) says what the batch sampler does; the
        service derives the sampling rate from it and refuses a step that states another
        (:class:`BadRequest`)."""
        body = _run_body(
            event, steps, chunk_steps, delta, allow_partial, chunking_tolerance, label, metadata,
            reserve, sampler,
        )
        path = f"/v1/datasets/{seg(dataset)}/runs"
        return Run(self, dataset, RunInfo.of(self._send(Call.post(path, body, idempotency_key))))

    def resume_run(self, dataset: str, run_id: str) -> "Run":
        """A declared run, to go on from its next chunk."""
        return Run(self, dataset, self._run_info(dataset, run_id))

    def _run_info(self, dataset: str, run_id: str) -> RunInfo:
        return RunInfo.of(self._send(Call("GET", f"/v1/datasets/{seg(dataset)}/runs/{seg(run_id)}")))

    def runs(self, dataset: str) -> Iterator[RunInfo]:
        """The dataset's runs with their progress, oldest first (every page)."""
        after: int | None = None
        while True:
            params: dict[str, str | int] = {"limit": 100}
            if after is not None:
                params["after"] = after
            page = self._send(Call("GET", f"/v1/datasets/{seg(dataset)}/runs", params=params))
            yield from (RunInfo.of(r) for r in page.get("items", []))
            after = page.get("next_cursor")
            if after is None:
                return

    def _take(self, dataset: str, info: RunInfo, index: int, scope: str) -> dict[str, Any]:
        path = f"/v1/datasets/{seg(dataset)}/runs/{seg(info.id)}/chunks"
        out: dict[str, Any] = self._send(Call.keyed(path, {"chunk": index}, _chunk_key(info, index, scope)))
        return out

    # Stateless ------------------------------------------------------------------------------

    def compose(self, *events: ev.EventLike, deltas: list[float] | None = None) -> dict[str, Any]:
        """The exact composition of ``events`` (nothing is charged)."""
        body: dict[str, Any] = {"events": ev.events_json(events)}
        if deltas is not None:
            body["deltas"] = deltas
        out: dict[str, Any] = self._send(Call("POST", "/v1/accountant/compose", body))
        return out

    def create_token(
        self, name: str, role: str, *, expires_in_days: int | None = None
    ) -> Token:
        """Make a token (global admins); keep its ``bearer_token``, shown once."""
        body: dict[str, Any] = {"name": name, "role": role}
        if expires_in_days is not None:
            body["expires_in_days"] = expires_in_days
        return Token.of(self._send(Call.post("/v1/tokens", body)))


class Run:
    """A declared run. ``for chunk in run:`` asks the gate for each chunk before yielding it; a
    refusal raises :class:`BudgetExceeded` there, before the chunk's work. Stopping the loop
    early charges nothing more."""

    def __init__(self, ledger: Ledger, dataset: str, info: RunInfo) -> None:
        self._ledger, self.dataset, self.info = ledger, dataset, info
        self._next = info.next_chunk
        self._scope = _scope()

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def steps(self) -> int:
        return self.info.steps

    @property
    def chunk_steps(self) -> int:
        return self.info.chunk_steps

    @property
    def chunks(self) -> int:
        return self.info.chunks

    @property
    def run_mu(self) -> float:
        """The plan: μ of the whole run, chunk by chunk."""
        return self.info.run_mu

    @property
    def chunk_mu(self) -> float | None:
        """The plan: μ of each (full) chunk."""
        return self.info.chunk_mu

    @property
    def warnings(self) -> tuple[RunWarning, ...]:
        return self.info.warnings

    def refresh(self) -> RunInfo:
        """The run's progress as the service has it now."""
        self.info = self._ledger._run_info(self.dataset, self.id)
        self._next = self.info.next_chunk
        return self.info

    def _held(self) -> list[dict[str, Any]]:
        h = self.info.raw.get("reserved_chunks")
        return [x for x in h if isinstance(x, dict)] if isinstance(h, list) else []

    def _settle_chunk(self, held: dict[str, Any], how: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._ledger._settle(self.dataset, str(held["charge_id"]), how, body, self._scope)

    def _next_reserved(self) -> Chunk | None:
        # Commit the chunk yielded last (its steps ran), then start the next reserved one.
        for h in self._held():
            if h.get("status") == "started":
                self._settle_chunk(h, "commit", {})
        self.refresh()
        for h in self._held():
            if h.get("status") == "reserved":
                out = self._settle_chunk(h, "start", {})
                self.refresh()
                return _chunk(self.info, int(h["chunk"]), out)
        return None

    def release_unstarted(self) -> int:
        """A reserved run: commit the chunk started last, and release (refund) the chunks never
        started, newest first; returns how many were released. None of them ran, so nothing
        depends on them."""
        n = 0
        for h in self._held():
            if h.get("status") == "started":
                self._settle_chunk(h, "commit", {})
        for h in sorted(self._held(), key=lambda x: -int(x["chunk"])):
            if h.get("status") == "reserved":
                self._settle_chunk(h, "release", {"outputs_released": False})
                n += 1
        self.refresh()
        return n

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.info.raw.get("reserved"):
            self.release_unstarted()

    def next_chunk(self) -> Chunk | None:
        """Take the next chunk (None when every chunk is taken)."""
        if self.info.raw.get("reserved"):
            return self._next_reserved()
        for _ in range(2):
            if self._next is None:
                return None
            i = self._next
            try:
                body = self._ledger._take(self.dataset, self.info, i, self._scope)
            except RunComplete:
                self._next = None
                return None
            except ChunkMismatch:
                # Taken elsewhere (another process resumed this run): go on from the service's.
                self.refresh()
                continue
            self._next = i + 1 if i + 1 < self.info.chunks else None
            return _chunk(self.info, i, body)
        return None

    def __iter__(self) -> Iterator[Chunk]:
        while (c := self.next_chunk()) is not None:
            yield c


class Reservation:
    """A reserved unit. ``start()`` before its job reads the data; then it can only be
    committed. Used with ``with``: committed on success; when the body raises, released only
    if ``outputs_seen=False`` was passed and it was not started, else committed."""

    def __init__(self, ledger: Ledger, dataset: str, charge: Charge, outputs_seen: bool) -> None:
        self._ledger, self.dataset, self.charge = ledger, dataset, charge
        self._outputs_seen = outputs_seen
        self._scope = _scope()
        self.started = False
        self.settled: str | None = None

    def start(self) -> None:
        self._ledger._settle(self.dataset, self.charge.id, "start", {}, self._scope)
        self.started = True

    def commit(self) -> None:
        self._ledger._settle(self.dataset, self.charge.id, "commit", {}, self._scope)
        self.settled = "committed"

    def release(self, *, outputs_seen: bool) -> dict[str, Any]:
        """Refund the unit. Only with ``outputs_seen=False``: its job never read the data and
        nothing computed from it was seen by anyone or any process."""
        if outputs_seen:
            raise ValueError("a unit whose outputs were seen cannot be released: commit it")
        out = self._ledger._settle(
            self.dataset, self.charge.id, "release", {"outputs_released": False}, self._scope
        )
        self.settled = "released"
        return out

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.settled is not None:
            return
        if exc_type is not None and self._outputs_seen is False and not self.started:
            self.release(outputs_seen=False)
        else:
            self.commit()


class AsyncLedger:
    """:class:`Ledger` for asyncio: the same methods, awaited."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        base, tok = config(url, token)
        self.retry = policy(retries, retry)
        self._http = httpx.AsyncClient(
            base_url=base,
            headers={"Authorization": f"Bearer {tok}"},
            timeout=timeout,
            transport=transport,
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncLedger":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(self, call: Call) -> Any:
        # The same Call (so the same Idempotency-Key) on every attempt.
        attempt, waited = 0, 0.0
        while True:
            attempt += 1
            try:
                r = await self._http.request(
                    call.method, call.path, json=call.body, params=call.params, headers=call.headers()
                )
            except httpx.TransportError as e:
                # Connect errors, and read errors on a request that may have been sent.
                wait = self.retry.wait(attempt, None, waited)
                if wait is None:
                    raise connection_failed(call, e) from e
                await asyncio.sleep(wait)
                waited += wait
                continue
            if r.status_code in RETRIED_STATUSES:
                wait = self.retry.wait(attempt, retry_after(r), waited)
                if wait is not None:
                    await asyncio.sleep(wait)
                    waited += wait
                    continue
            return answer(r)

    async def create_dataset(
        self,
        id: str,
        *,
        mu: float,
        delta: float | None = None,
        description: str | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> Dataset:
        body = _dataset_body(id, mu, delta, description, extra)
        return Dataset.of(await self._send(Call.post("/v1/datasets", body, idempotency_key)))

    async def dataset(self, id: str) -> Dataset:
        return Dataset.of(await self._send(Call("GET", f"/v1/datasets/{seg(id)}")))

    async def datasets(self) -> list[Dataset]:
        out: list[Dataset] = []
        after: str | None = None
        while True:
            params: dict[str, str | int] = {"limit": 100}
            if after is not None:
                params["cursor"] = after
            page = await self._send(Call("GET", "/v1/datasets", params=params))
            out += [Dataset.of(d) for d in page.get("items", [])]
            after = page.get("next_cursor")
            if after is None:
                return out

    async def report(self, dataset: str) -> dict[str, Any]:
        out: dict[str, Any] = await self._send(Call("GET", f"/v1/datasets/{seg(dataset)}/report"))
        return out

    async def headline(self, dataset: str, *, delta: float | None = None) -> Headline:
        return Headline.of(await self._send(_headline_call(dataset, delta)))

    async def alert_thresholds(self, dataset: str) -> list[float]:
        return _thresholds(await self._send(Call("GET", f"/v1/datasets/{seg(dataset)}/alerts")))

    async def set_alert_thresholds(self, dataset: str, thresholds: list[float]) -> list[float]:
        call = Call("PUT", f"/v1/datasets/{seg(dataset)}/alerts", {"thresholds": thresholds})
        return _thresholds(await self._send(call))

    async def preview(
        self, dataset: str, event: ev.EventLike, *, delta: float | None = None
    ) -> dict[str, Any]:
        path = f"/v1/datasets/{seg(dataset)}/charges/preview"
        body = _unit_body(event, delta, None, None)
        out: dict[str, Any] = await self._send(Call("POST", path, body))
        return out

    async def compose(
        self, *events: ev.EventLike, deltas: list[float] | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"events": ev.events_json(events)}
        if deltas is not None:
            body["deltas"] = deltas
        out: dict[str, Any] = await self._send(Call("POST", "/v1/accountant/compose", body))
        return out

    async def create_token(
        self, name: str, role: str, *, expires_in_days: int | None = None
    ) -> Token:
        body: dict[str, Any] = {"name": name, "role": role}
        if expires_in_days is not None:
            body["expires_in_days"] = expires_in_days
        return Token.of(await self._send(Call.post("/v1/tokens", body)))

    async def charge(
        self,
        dataset: str,
        event: ev.EventLike,
        *,
        delta: float | None = None,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Charge:
        body = _unit_body(event, delta, label, metadata)
        path = f"/v1/datasets/{seg(dataset)}/charges"
        return Charge.of(await self._send(Call.post(path, body, idempotency_key)))

    def reserve(
        self,
        dataset: str,
        event: ev.EventLike,
        *,
        outputs_seen: bool = True,
        delta: float | None = None,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> "AsyncReservation":
        """:meth:`Ledger.reserve`: ``async with ledger.reserve(...) as unit:`` reserves on
        entering (or ``unit = await ledger.reserve(...)``)."""
        body = _unit_body(event, delta, label, metadata, reserve=True)
        call = Call.post(f"/v1/datasets/{seg(dataset)}/charges", body, idempotency_key)
        return AsyncReservation(self, dataset, call, outputs_seen)

    async def _settle(
        self, dataset: str, charge_id: str, how: str, body: dict[str, Any], scope: str
    ) -> dict[str, Any]:
        path = f"/v1/datasets/{seg(dataset)}/charges/{seg(charge_id)}/{how}"
        out: dict[str, Any] = await self._send(Call.keyed(path, body, f"{how}-{charge_id}-{scope}"))
        return out

    async def run(
        self,
        dataset: str,
        event: ev.EventLike,
        steps: int,
        chunk_steps: int | None = None,
        *,
        delta: float | None = None,
        allow_partial: bool = False,
        chunking_tolerance: float | None = None,
        reserve: bool = False,
        sampler: Mapping[str, Any] | None = None,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> "AsyncRun":
        body = _run_body(
            event, steps, chunk_steps, delta, allow_partial, chunking_tolerance, label, metadata,
            reserve, sampler,
        )
        path = f"/v1/datasets/{seg(dataset)}/runs"
        info = RunInfo.of(await self._send(Call.post(path, body, idempotency_key)))
        return AsyncRun(self, dataset, info)

    async def resume_run(self, dataset: str, run_id: str) -> "AsyncRun":
        return AsyncRun(self, dataset, await self._run_info(dataset, run_id))

    async def _run_info(self, dataset: str, run_id: str) -> RunInfo:
        path = f"/v1/datasets/{seg(dataset)}/runs/{seg(run_id)}"
        return RunInfo.of(await self._send(Call("GET", path)))

    async def runs(self, dataset: str) -> AsyncIterator[RunInfo]:
        after: int | None = None
        while True:
            params: dict[str, str | int] = {"limit": 100}
            if after is not None:
                params["after"] = after
            page = await self._send(Call("GET", f"/v1/datasets/{seg(dataset)}/runs", params=params))
            for r in page.get("items", []):
                yield RunInfo.of(r)
            after = page.get("next_cursor")
            if after is None:
                return

    async def _take(self, dataset: str, info: RunInfo, index: int, scope: str) -> dict[str, Any]:
        path = f"/v1/datasets/{seg(dataset)}/runs/{seg(info.id)}/chunks"
        body = {"chunk": index}
        out: dict[str, Any] = await self._send(Call.keyed(path, body, _chunk_key(info, index, scope)))
        return out


class AsyncRun:
    """:class:`Run` for asyncio: ``async for chunk in run``."""

    def __init__(self, ledger: AsyncLedger, dataset: str, info: RunInfo) -> None:
        self._ledger, self.dataset, self.info = ledger, dataset, info
        self._next = info.next_chunk
        self._scope = _scope()

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def steps(self) -> int:
        return self.info.steps

    @property
    def chunk_steps(self) -> int:
        return self.info.chunk_steps

    @property
    def chunks(self) -> int:
        return self.info.chunks

    @property
    def run_mu(self) -> float:
        """The plan: μ of the whole run, chunk by chunk."""
        return self.info.run_mu

    @property
    def chunk_mu(self) -> float | None:
        """The plan: μ of each (full) chunk."""
        return self.info.chunk_mu

    @property
    def warnings(self) -> tuple[RunWarning, ...]:
        return self.info.warnings

    async def refresh(self) -> RunInfo:
        self.info = await self._ledger._run_info(self.dataset, self.id)
        self._next = self.info.next_chunk
        return self.info

    def _held(self) -> list[dict[str, Any]]:
        h = self.info.raw.get("reserved_chunks")
        return [x for x in h if isinstance(x, dict)] if isinstance(h, list) else []

    async def _settle_chunk(self, held: dict[str, Any], how: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._ledger._settle(self.dataset, str(held["charge_id"]), how, body, self._scope)

    async def _next_reserved(self) -> Chunk | None:
        for h in self._held():
            if h.get("status") == "started":
                await self._settle_chunk(h, "commit", {})
        await self.refresh()
        for h in self._held():
            if h.get("status") == "reserved":
                out = await self._settle_chunk(h, "start", {})
                await self.refresh()
                return _chunk(self.info, int(h["chunk"]), out)
        return None

    async def release_unstarted(self) -> int:
        """:meth:`Run.release_unstarted`."""
        n = 0
        for h in self._held():
            if h.get("status") == "started":
                await self._settle_chunk(h, "commit", {})
        for h in sorted(self._held(), key=lambda x: -int(x["chunk"])):
            if h.get("status") == "reserved":
                await self._settle_chunk(h, "release", {"outputs_released": False})
                n += 1
        await self.refresh()
        return n

    async def __aenter__(self) -> "AsyncRun":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.info.raw.get("reserved"):
            await self.release_unstarted()

    async def next_chunk(self) -> Chunk | None:
        if self.info.raw.get("reserved"):
            return await self._next_reserved()
        for _ in range(2):
            if self._next is None:
                return None
            i = self._next
            try:
                body = await self._ledger._take(self.dataset, self.info, i, self._scope)
            except RunComplete:
                self._next = None
                return None
            except ChunkMismatch:
                await self.refresh()
                continue
            self._next = i + 1 if i + 1 < self.info.chunks else None
            return _chunk(self.info, i, body)
        return None

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Chunk]:
        while (c := await self.next_chunk()) is not None:
            yield c


class AsyncReservation:
    """:class:`Reservation` for asyncio. The unit is reserved when the object is awaited or
    entered (``async with``), once."""

    def __init__(self, ledger: AsyncLedger, dataset: str, call: Call, outputs_seen: bool) -> None:
        self._ledger, self.dataset, self._call = ledger, dataset, call
        self._outputs_seen = outputs_seen
        self._scope = _scope()
        self._charge: Charge | None = None
        self.started = False
        self.settled: str | None = None

    @property
    def charge(self) -> Charge:
        """The reserved unit (once reserved)."""
        if self._charge is None:
            raise RuntimeError("not reserved yet: await the reservation or enter it (async with)")
        return self._charge

    async def _reserve(self) -> "AsyncReservation":
        if self._charge is None:
            self._charge = Charge.of(await self._ledger._send(self._call))
        return self

    def __await__(self) -> Generator[Any, None, "AsyncReservation"]:
        return self._reserve().__await__()

    async def start(self) -> None:
        await self._ledger._settle(self.dataset, self.charge.id, "start", {}, self._scope)
        self.started = True

    async def commit(self) -> None:
        await self._ledger._settle(self.dataset, self.charge.id, "commit", {}, self._scope)
        self.settled = "committed"

    async def release(self, *, outputs_seen: bool) -> dict[str, Any]:
        """:meth:`Reservation.release`."""
        if outputs_seen:
            raise ValueError("a unit whose outputs were seen cannot be released: commit it")
        out = await self._ledger._settle(
            self.dataset, self.charge.id, "release", {"outputs_released": False}, self._scope
        )
        self.settled = "released"
        return out

    async def __aenter__(self) -> "AsyncReservation":
        return await self._reserve()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.settled is not None:
            return
        if exc_type is not None and self._outputs_seen is False and not self.started:
            await self.release(outputs_seen=False)
        else:
            await self.commit()

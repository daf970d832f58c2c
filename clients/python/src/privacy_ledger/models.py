"""The service's answers as typed, frozen objects; ``raw`` keeps the whole JSON answer (fields
added by newer services included)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


def _f(d: Mapping[str, Any], k: str) -> float | None:
    v = d.get(k)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _i(d: Mapping[str, Any], k: str) -> int | None:
    v = d.get(k)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _s(d: Mapping[str, Any], k: str) -> str | None:
    v = d.get(k)
    return v if isinstance(v, str) else None


def _d(d: Mapping[str, Any], k: str) -> dict[str, Any]:
    v = d.get(k)
    return v if isinstance(v, dict) else {}


@dataclass(frozen=True)
class Dataset:
    """A dataset's ledger: its μ-GDP budget (μ_B, δ_B), what is spent and what is left."""

    id: str
    budget_mu: float
    budget_delta: float
    mu_spent: float
    delta_spent: float
    remaining_mu: float
    remaining_delta: float
    units: int
    raw: dict[str, Any] = field(repr=False, compare=False)
    #: Whom the guarantee protects (``record``, ``user``, …) and how many, when stated.
    privacy_unit: str = "record"
    size: int | None = None

    @classmethod
    def of(cls, d: dict[str, Any]) -> "Dataset":
        b = _d(d, "budget")
        return cls(
            id=_s(d, "id") or "",
            budget_mu=_f(b, "mu") or 0.0,
            budget_delta=_f(b, "delta") or 0.0,
            mu_spent=_f(d, "mu_spent") or 0.0,
            delta_spent=_f(d, "delta_spent") or 0.0,
            remaining_mu=_f(d, "remaining_mu") or 0.0,
            remaining_delta=_f(d, "remaining_delta") or 0.0,
            units=_i(d, "units") or 0,
            raw=d,
            privacy_unit=_s(d, "privacy_unit") or "record",
            size=_i(d, "size"),
        )


@dataclass(frozen=True)
class Remaining:
    """What is left after a charge (every 201 carries it): μ and δ, the share of the budget used
    (``max(Σμᵢ²/μ_B², Σδᵢ/δ_B)``, exactly 1.0 when spent to the budget) and whether it is
    exhausted; ``share`` is the same for the quota the charge was paid from, when there are
    quotas."""

    mu: float
    delta: float
    used_fraction: float
    exhausted: bool
    share: "Remaining | None" = None
    holder: str | None = None

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> "Remaining | None":
        if not isinstance(d, dict) or _f(d, "mu") is None:
            return None
        s = d.get("share")
        return cls(
            mu=_f(d, "mu") or 0.0,
            delta=_f(d, "delta") or 0.0,
            used_fraction=_f(d, "used_fraction") or 0.0,
            exhausted=d.get("exhausted") is True,
            share=cls.of(s) if isinstance(s, dict) else None,
            holder=_s(d, "holder"),
        )


@dataclass(frozen=True)
class Headline:
    """A dataset at a glance (``GET /v1/datasets/{id}/headline``): the share of its budget used,
    what is left in μ and as ε at ``epsilon_delta``, and the forecast at the last seven days'
    rate. ``raw`` has the rest (runs in progress, the caller's share, a partitioned dataset's
    blocks)."""

    dataset: str
    used_fraction: float
    exhausted: bool
    remaining_mu: float
    remaining_delta: float
    epsilon_delta: float
    #: ε at ``epsilon_delta`` of the budget's whole guarantee, and of one release spending all
    #: that is left (None when no finite ε holds at that δ).
    epsilon_budget: float | None
    epsilon_remaining: float | None
    #: Days until the budget is used at the recent rate (None when nothing was spent lately).
    days_left: float | None
    exhausted_on: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, d: dict[str, Any]) -> "Headline":
        e, f = _d(d, "epsilon"), _d(d, "forecast")
        return cls(
            dataset=_s(d, "dataset") or "",
            used_fraction=_f(d, "used_fraction") or 0.0,
            exhausted=d.get("exhausted") is True,
            remaining_mu=_f(d, "remaining_mu") or 0.0,
            remaining_delta=_f(d, "remaining_delta") or 0.0,
            epsilon_delta=_f(e, "delta") or 0.0,
            epsilon_budget=_f(e, "budget"),
            epsilon_remaining=_f(e, "remaining"),
            days_left=_f(f, "days_left"),
            exhausted_on=_s(f, "exhausted_on"),
            raw=d,
        )


@dataclass(frozen=True)
class Charge:
    """A unit the gate admitted: its id, status (``committed``, ``reserved``, ``started``,
    ``released``), certificate (μᵢ, δᵢ) and the dataset's μ after it."""

    id: str
    status: str
    unit_mu: float | None
    unit_delta: float | None
    mu_after: float | None
    run_id: str | None
    chunk: int | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    #: What is left after it (absent on answers that are not a new charge's).
    remaining: Remaining | None = None

    @classmethod
    def of(cls, body: dict[str, Any]) -> "Charge":
        c = _d(body, "charge") if "charge" in body else body
        u = _d(c, "unit")
        return cls(
            id=_s(c, "id") or "",
            status=_s(c, "status") or "committed",
            unit_mu=_f(u, "mu"),
            unit_delta=_f(u, "delta"),
            mu_after=_f(c, "mu_after"),
            run_id=_s(c, "run_id"),
            chunk=_i(c, "chunk"),
            raw=body,
            remaining=Remaining.of(_d(body, "remaining")),
        )


@dataclass(frozen=True)
class RunWarning:
    """Something the declaration found worth saying (``chunking_cost``)."""

    code: str
    message: str
    suggested_chunk_steps: int | None


@dataclass(frozen=True)
class RunInfo:
    """A declared run: its plan and its progress."""

    id: str
    steps: int
    chunk_steps: int
    chunks: int
    next_chunk: int | None
    steps_taken: int
    run_mu: float
    run_delta: float
    run_mu_as_one_unit: float | None
    chunk_mu: float | None
    chunk_delta: float | None
    mu_used: float
    delta_used: float
    mu_to_finish: float
    delta_to_finish: float
    reserved: bool
    warnings: tuple[RunWarning, ...]
    label: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, d: dict[str, Any]) -> "RunInfo":
        ws = d.get("warnings")
        return cls(
            id=_s(d, "id") or "",
            steps=_i(d, "steps") or 0,
            chunk_steps=_i(d, "chunk_steps") or 0,
            chunks=_i(d, "chunks") or 0,
            next_chunk=_i(d, "next_chunk"),
            steps_taken=_i(d, "steps_taken") or 0,
            run_mu=_f(d, "run_mu") or 0.0,
            run_delta=_f(d, "run_delta") or 0.0,
            run_mu_as_one_unit=_f(d, "run_mu_as_one_unit"),
            chunk_mu=_f(_d(d, "chunk_unit"), "mu"),
            chunk_delta=_f(_d(d, "chunk_unit"), "delta"),
            mu_used=_f(d, "mu_used") or 0.0,
            delta_used=_f(d, "delta_used") or 0.0,
            mu_to_finish=_f(d, "mu_to_finish") or 0.0,
            delta_to_finish=_f(d, "delta_to_finish") or 0.0,
            reserved=d.get("reserved") is True,
            warnings=tuple(
                RunWarning(
                    code=_s(w, "code") or "",
                    message=_s(w, "message") or "",
                    suggested_chunk_steps=_i(w, "suggested_chunk_steps"),
                )
                for w in (ws if isinstance(ws, list) else [])
                if isinstance(w, dict)
            ),
            label=_s(d, "label"),
            raw=d,
        )


@dataclass(frozen=True)
class Chunk:
    """A chunk of a run the gate admitted: train on steps ``first_step`` …
    ``first_step + steps − 1`` now."""

    index: int
    first_step: int
    steps: int
    charge: Charge

    @property
    def charge_id(self) -> str:
        """The unit the chunk was charged as."""
        return self.charge.id

    @property
    def mu_after(self) -> float | None:
        """μ the dataset has spent with this chunk."""
        return self.charge.mu_after


@dataclass(frozen=True)
class Token:
    """A token just made. ``bearer_token`` is the one thing to keep (shown once)."""

    bearer_token: str = field(repr=False)
    id: str
    name: str
    role: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    created_at: str | None = None
    expires_at: str | None = None

    @classmethod
    def of(cls, d: dict[str, Any]) -> "Token":
        # The flat answer ({"bearer_token", "id", ...}); older services answered
        # {"token": {...}, "secret": "pl_..."}.
        t = _d(d, "token") if isinstance(d.get("token"), dict) else d
        return cls(
            bearer_token=_s(d, "bearer_token") or _s(d, "secret") or "",
            id=_s(t, "id") or "",
            name=_s(t, "name") or "",
            role=_s(t, "role") or "",
            raw=d,
            created_at=_s(t, "created_at"),
            expires_at=_s(t, "expires_at"),
        )

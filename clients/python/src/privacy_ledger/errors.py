"""Every answer of the service that is not a 2xx is one of these exceptions (the client fails
closed: a refusal is never a value to ignore).

Each carries the service's error ``code`` (``budget_exceeded``, ``invalid_field``, ...), its
``message``, the ``request_id`` to quote when reporting it, and the body's ``details``; the
409s of the gate carry their figures as attributes.
"""

from __future__ import annotations

from typing import Any, Mapping


class LedgerError(Exception):
    """A non-2xx answer of the service (or no answer at all: :class:`ConnectionFailed`)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
        dataset: str | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.details: dict[str, Any] = dict(details or {})
        self.body: dict[str, Any] = dict(body or {})
        #: The answer's Retry-After (seconds), when it had one.
        self.retry_after = retry_after
        #: The dataset the refused request was about, when it named one.
        self.dataset = dataset
        super().__init__(self._text())

    def _text(self) -> str:
        head = f"{self.status} {self.code}: " if self.status is not None else ""
        tail = f" (request id {self.request_id})" if self.request_id else ""
        return f"{head}{self.message}{tail}"


class ConfigurationError(LedgerError, ValueError):
    """No service address or token: pass them, or set PRIVACY_LEDGER_URL / PRIVACY_LEDGER_TOKEN."""


class ConnectionFailed(LedgerError):
    """The service could not be reached (after the retries); a change may or may not have landed:
    retry with the same Idempotency-Key to learn its outcome."""


class BadRequest(LedgerError):
    """400/413/414/415/422/431: the request was refused as written. ``field`` names what was wrong
    (``$.event.noise_multiplier``, ``query.limit``...), ``reason`` why."""

    @property
    def field(self) -> str | None:
        p = self.details.get("path")
        return p if isinstance(p, str) else None

    @property
    def reason(self) -> str | None:
        r = self.details.get("reason")
        return r if isinstance(r, str) else None


class IdempotencyKeyReused(BadRequest):
    """422 ``idempotency_key_reused``: the key was used for the same operation and target with
    a different body."""


class Unauthorized(LedgerError):
    """401: no valid bearer token."""


class Forbidden(LedgerError):
    """403: the token may not do this (``forbidden``), or the unit is another principal's
    (``not_owner``)."""


class NotFound(LedgerError):
    """404: no such dataset, charge or run."""


class Conflict(LedgerError):
    """409: the change does not apply to the ledger as it is."""


class BudgetExceeded(Conflict):
    """409 ``budget_exceeded``: the gate refused the unit; nothing was charged.

    ``ledger`` is the dataset (or block) that refused, ``quota`` the quota that did (None: the
    dataset's budget), ``unit_mu``/``unit_delta`` the unit's certificate, ``remaining_mu`` and
    ``remaining_delta`` what is left."""

    def _figure(self, name: str) -> float | None:
        v = self.body.get(name)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def ledger(self) -> str | None:
        """The ledger that refused: the body's ``dataset_id`` (a block, ``dataset@block``, for
        a charge over several ledgers), else the dataset charged."""
        for src in (self.body, self.details):
            v = src.get("dataset_id")
            if isinstance(v, str):
                return v
        return self.dataset

    @property
    def quota(self) -> str | None:
        v = self.body.get("quota")
        return v if isinstance(v, str) else None

    @property
    def unit_mu(self) -> float | None:
        u = self.body.get("unit")
        return float(u["mu"]) if isinstance(u, dict) and isinstance(u.get("mu"), (int, float)) else None

    @property
    def unit_delta(self) -> float | None:
        u = self.body.get("unit")
        return (
            float(u["delta"]) if isinstance(u, dict) and isinstance(u.get("delta"), (int, float)) else None
        )

    @property
    def remaining_mu(self) -> float | None:
        return self._figure("remaining_mu")

    @property
    def remaining_delta(self) -> float | None:
        return self._figure("remaining_delta")

    @property
    def reason(self) -> str | None:
        """Why (``mu``, ``delta``, a quota's...)."""
        v = self.body.get("reason")
        return v if isinstance(v, str) else None

    @property
    def mu_after(self) -> float | None:
        """μ the dataset would have spent with the unit."""
        return self._figure("mu_after")

    @property
    def mu_spent(self) -> float | None:
        return self._figure("mu_spent")

    @property
    def delta_spent(self) -> float | None:
        return self._figure("delta_spent")

    @property
    def delta_budget(self) -> float | None:
        return self._figure("delta_budget")

    @property
    def mu_budget(self) -> float | None:
        return self._figure("mu_budget")


class RunDoesNotFit(Conflict):
    """409 ``run_does_not_fit``: not every chunk of the declared run fits what is left for the
    caller; nothing was recorded. Declare ``steps_that_fit`` steps, or pass
    ``allow_partial=True``."""

    def _int(self, name: str) -> int | None:
        v = self.details.get(name)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def chunks(self) -> int | None:
        """The chunks declared."""
        return self._int("chunks")

    @property
    def steps(self) -> int | None:
        """The steps declared."""
        return self._int("steps")

    @property
    def chunks_that_fit(self) -> int | None:
        return self._int("chunks_that_fit")

    @property
    def steps_that_fit(self) -> int | None:
        return self._int("steps_that_fit")

    @property
    def refused_by(self) -> str | None:
        v = self.details.get("refused_by")
        return v if isinstance(v, str) else None

    @property
    def remaining_mu(self) -> float | None:
        v = self.details.get("remaining_mu")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def remaining_delta(self) -> float | None:
        v = self.details.get("remaining_delta")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class RunComplete(Conflict):
    """409 ``run_complete``: every chunk of the run is taken."""


class ChunkMismatch(Conflict):
    """409 ``chunk_mismatch``: the chunk asked for is not the run's next one."""


class UnitStarted(Conflict):
    """409 ``unit_started``: a started unit can only be committed."""


class UnitReleased(Conflict):
    """409 ``unit_released``: the unit was released."""


class NotReserved(Conflict):
    """409 ``not_reserved``: the unit is not reserved (already committed, say)."""


class AlreadyExists(Conflict):
    """409 ``already_exists``: a dataset with this id exists, with another body."""


class RequestTimeout(LedgerError):
    """408: the request took too long to arrive (retried)."""


class Overloaded(LedgerError):
    """429/503: the service is busy or its store unavailable (retried, honouring Retry-After)."""

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        if self.retry_after is None:
            v = self.details.get("retry_after_seconds")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.retry_after = float(v)


class ServerError(LedgerError):
    """Any other 5xx."""


_CONFLICTS: dict[str, type[Conflict]] = {
    "budget_exceeded": BudgetExceeded,
    "run_does_not_fit": RunDoesNotFit,
    "run_complete": RunComplete,
    "chunk_mismatch": ChunkMismatch,
    "unit_started": UnitStarted,
    "unit_released": UnitReleased,
    "not_reserved": NotReserved,
    "already_exists": AlreadyExists,
}


def error_for(
    status: int,
    body: Any,
    request_id: str | None,
    retry_after: float | None = None,
    dataset: str | None = None,
) -> LedgerError:
    """The exception for a non-2xx answer: its status, and the error body when there is one."""
    b: dict[str, Any] = body if isinstance(body, dict) else {}
    code = b.get("error") if isinstance(b.get("error"), str) else None
    message = b.get("message") if isinstance(b.get("message"), str) else f"HTTP {status}"
    rid = b.get("request_id") if isinstance(b.get("request_id"), str) else request_id
    details = b.get("details") if isinstance(b.get("details"), dict) else {}
    cls: type[LedgerError]
    if status == 409:
        cls = _CONFLICTS.get(code or "", Conflict)
    elif status == 422 and code == "idempotency_key_reused":
        cls = IdempotencyKeyReused
    elif status in (400, 413, 414, 415, 422, 431):
        cls = BadRequest
    elif status == 401:
        cls = Unauthorized
    elif status == 403:
        cls = Forbidden
    elif status == 404:
        cls = NotFound
    elif status == 408:
        cls = RequestTimeout
    elif status in (429, 503):
        cls = Overloaded
    elif status >= 500:
        cls = ServerError
    else:
        cls = LedgerError
    return cls(
        str(message),
        status=status,
        code=code,
        request_id=rid,
        details=details,
        body=b,
        retry_after=retry_after,
        dataset=dataset,
    )

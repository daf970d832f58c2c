"""What the sync and async clients share: configuration, requests, retries and the mapping of
answers to values or exceptions."""

from __future__ import annotations

import os
import random
import uuid
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote, unquote

import httpx

from .errors import ConfigurationError, ConnectionFailed, LedgerError, error_for

#: Statuses retried: the change did not land (408: the request did not arrive whole; 429 and
#: 503: refused before any change). A retry sends the same Idempotency-Key, so a change that did
#: land meanwhile is answered (200), never applied twice.
RETRIED_STATUSES = frozenset({408, 429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: at most ``retries`` more attempts, waiting ``base_seconds·2ⁿ`` with full
    jitter (at most ``max_wait_seconds`` each), or the answer's ``Retry-After`` when it says so,
    and ``max_total_seconds`` in all; an answer asking to wait past those bounds is raised
    instead of waited for."""

    retries: int = 4
    base_seconds: float = 0.2
    max_wait_seconds: float = 10.0
    max_total_seconds: float = 10.0

    def wait(self, attempt: int, retry_after: float | None, waited: float = 0.0) -> float | None:
        """Seconds to wait before retry ``attempt`` (1-based), ``waited`` seconds having been
        waited already for this call; None: give up."""
        if attempt > self.retries:
            return None
        if retry_after is not None:
            w = retry_after
            if w > self.max_wait_seconds:
                return None
        else:
            w = random.uniform(0, min(self.max_wait_seconds, self.base_seconds * 2 ** (attempt - 1)))
        if waited + w > self.max_total_seconds:
            return None
        return w


def policy(retries: int, retry: "RetryPolicy | None") -> RetryPolicy:
    """The policy of a client: ``retry`` when given, else the default one with ``retries``."""
    if retry is not None:
        return retry
    if retries < 0:
        raise ValueError("retries must be >= 0")
    return RetryPolicy(retries=retries)


def config(url: str | None, token: str | None) -> tuple[str, str]:
    """The service's address and token: given, else PRIVACY_LEDGER_URL / PRIVACY_LEDGER_TOKEN."""
    url = url or os.environ.get("PRIVACY_LEDGER_URL")
    token = token or os.environ.get("PRIVACY_LEDGER_TOKEN")
    if not url:
        raise ConfigurationError(
            "no service address: pass url=... or set PRIVACY_LEDGER_URL (e.g. http://127.0.0.1:8080)"
        )
    if not token:
        raise ConfigurationError(
            "no token: pass token=... or set PRIVACY_LEDGER_TOKEN (the pl_... bearer token; the "
            "service's first start prints one)"
        )
    return url.rstrip("/"), token


def seg(s: str) -> str:
    """A path segment, percent-encoded."""
    return quote(s, safe="")


@dataclass(frozen=True)
class Call:
    """One logical request: every retry of it sends the same Idempotency-Key."""

    method: str
    path: str
    body: Any = None
    params: Mapping[str, str | int] | None = None
    key: str | None = None

    @staticmethod
    def post(path: str, body: Any, key: str | None = None) -> "Call":
        # Every state change carries a key: the caller's, else one made for this call.
        return Call("POST", path, body, None, key or str(uuid.uuid4()))

    @staticmethod
    def keyed(path: str, body: Any, key: str) -> "Call":
        # A key derived from what the change is (a run's chunk, a unit's settlement), so that
        # even a retry from another process after a lost answer gets the first outcome.
        return Call("POST", path, body, None, key)

    def headers(self) -> dict[str, str]:
        return {"Idempotency-Key": self.key} if self.key else {}


def retry_after(r: httpx.Response) -> float | None:
    v = r.headers.get("retry-after")
    try:
        return max(0.0, float(v)) if v is not None else None
    except ValueError:
        return None


def answer(r: httpx.Response) -> Any:
    """The JSON of a 2xx answer (None when empty); the exception of any other."""
    if 200 <= r.status_code < 300:
        if not r.content:
            return None
        return r.json()
    try:
        body = r.json()
    except ValueError:
        body = None
    raise error_for(
        r.status_code, body, r.headers.get("x-request-id"), retry_after(r), _dataset_of(r)
    )


def _dataset_of(r: httpx.Response) -> str | None:
    """The dataset a request was about (``/v1/datasets/{id}/...``), if any."""
    try:
        parts = r.request.url.raw_path.decode("ascii").split("?")[0].split("/")
    except RuntimeError:  # a response built without its request
        return None
    if len(parts) > 3 and parts[1:3] == ["v1", "datasets"]:
        return unquote(parts[3])
    return None


def connection_failed(call: Call, e: Exception) -> LedgerError:
    note = (
        f"; a change may have landed: retry with Idempotency-Key {call.key!r} to learn its outcome"
        if call.key
        else ""
    )
    return ConnectionFailed(f"{call.method} {call.path}: {e}{note}")

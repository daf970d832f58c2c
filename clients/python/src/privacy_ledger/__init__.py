"""privacy-ledger's Python client: differential-privacy budgets that fail closed.

    from privacy_ledger import Ledger, BudgetExceeded, events

    ledger = Ledger()  # PRIVACY_LEDGER_URL, PRIVACY_LEDGER_TOKEN
    ledger.charge("census", events.Gaussian(noise_multiplier=2.0))  # raises BudgetExceeded
"""

from . import events
from ._transport import RetryPolicy
from .client import AsyncLedger, AsyncReservation, AsyncRun, Ledger, Reservation, Run
from .errors import (
    AlreadyExists,
    BadRequest,
    BudgetExceeded,
    ChunkMismatch,
    ConfigurationError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    IdempotencyKeyReused,
    LedgerError,
    NotFound,
    NotReserved,
    Overloaded,
    RequestTimeout,
    RunComplete,
    RunDoesNotFit,
    ServerError,
    Unauthorized,
    UnitReleased,
    UnitStarted,
)
from .events import Event, EventLike
from .models import Charge, Chunk, Dataset, Headline, Remaining, RunInfo, RunWarning, Token

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "AsyncLedger",
    "AsyncReservation",
    "AsyncRun",
    "BadRequest",
    "BudgetExceeded",
    "Charge",
    "Chunk",
    "ChunkMismatch",
    "ConfigurationError",
    "Conflict",
    "ConnectionFailed",
    "Dataset",
    "Headline",
    "Event",
    "EventLike",
    "Forbidden",
    "IdempotencyKeyReused",
    "Ledger",
    "LedgerError",
    "NotFound",
    "NotReserved",
    "Overloaded",
    "RequestTimeout",
    "Remaining",
    "Reservation",
    "RetryPolicy",
    "Run",
    "RunComplete",
    "RunDoesNotFit",
    "RunInfo",
    "RunWarning",
    "ServerError",
    "Token",
    "Unauthorized",
    "UnitReleased",
    "UnitStarted",
    "events",
]

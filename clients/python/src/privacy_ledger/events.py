"""Mechanisms as typed events: the service's closed tagged union (the meanings of Google
dp_accounting's ``DpEvent`` of the same names). A ``noise_multiplier`` is relative to the
per-record contribution bound C, as in dp_accounting.

Anywhere an event is taken, a plain ``dict`` in the service's JSON form and (when dp_accounting
is installed) a dp_accounting ``DpEvent`` are accepted too: :func:`to_json` converts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union


@dataclass(frozen=True)
class Gaussian:
    """Gaussian noise, sd = noise_multiplier × C."""

    noise_multiplier: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "gaussian", "noise_multiplier": self.noise_multiplier}


@dataclass(frozen=True)
class Laplace:
    """Laplace noise, scale = noise_multiplier × C."""

    noise_multiplier: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "laplace", "noise_multiplier": self.noise_multiplier}


@dataclass(frozen=True)
class DiscreteLaplace:
    """P[x] ∝ exp(−noise_parameter·|x|) on an integer query of the given sensitivity."""

    noise_parameter: float
    sensitivity: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "discrete_laplace",
            "noise_parameter": self.noise_parameter,
            "sensitivity": self.sensitivity,
        }


@dataclass(frozen=True)
class DiscreteGaussian:
    """P[x] ∝ exp(−x²/2σ²) on an integer query of the given sensitivity."""

    sigma: float
    sensitivity: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"type": "discrete_gaussian", "sigma": self.sigma, "sensitivity": self.sensitivity}


@dataclass(frozen=True)
class RandomizedResponse:
    """With probability noise_parameter, answer a uniform one of num_buckets buckets."""

    noise_parameter: float
    num_buckets: int

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "randomized_response",
            "noise_parameter": self.noise_parameter,
            "num_buckets": self.num_buckets,
        }


@dataclass(frozen=True)
class EpsilonDelta:
    """A black box known to be (ε, δ)-DP."""

    epsilon: float
    delta: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "epsilon_delta", "epsilon": self.epsilon, "delta": self.delta}


@dataclass(frozen=True)
class Gdp:
    """A black box known to be μ-GDP."""

    mu: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "gdp", "mu": self.mu}


@dataclass(frozen=True)
class Zcdp:
    """A black box known to be ρ-zCDP (or (ξ, ρ)-zCDP with ``xi``)."""

    rho: float
    xi: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "zcdp", "rho": self.rho}
        if self.xi is not None:
            out["xi"] = self.xi
        return out


@dataclass(frozen=True)
class Rdp:
    """A black box known by points (orders[i], rdp[i]) of its Rényi-DP curve."""

    orders: tuple[float, ...]
    rdp: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"type": "rdp", "orders": list(self.orders), "rdp": list(self.rdp)}


@dataclass(frozen=True)
class PoissonSampled:
    """``event`` on a Poisson subsample: each record in with probability sampling_rate."""

    sampling_rate: float
    event: "EventLike"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "poisson_sampled",
            "sampling_rate": self.sampling_rate,
            "event": to_json(self.event),
        }


@dataclass(frozen=True)
class SampledWithoutReplacement:
    """``event`` on a uniform subset of sample_size of population_size records."""

    sample_size: int
    population_size: int
    event: "EventLike"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "sampled_without_replacement",
            "sample_size": self.sample_size,
            "population_size": self.population_size,
            "event": to_json(self.event),
        }


@dataclass(frozen=True)
class SelfComposed:
    """``event`` run ``count`` times."""

    count: int
    event: "EventLike"

    def to_json(self) -> dict[str, Any]:
        return {"type": "self_composed", "count": self.count, "event": to_json(self.event)}


@dataclass(frozen=True)
class Composed:
    """Each event run in turn."""

    events: tuple["EventLike", ...]

    def to_json(self) -> dict[str, Any]:
        return {"type": "composed", "events": [to_json(e) for e in self.events]}


Event = Union[
    Gaussian,
    Laplace,
    DiscreteLaplace,
    DiscreteGaussian,
    RandomizedResponse,
    EpsilonDelta,
    Gdp,
    Zcdp,
    Rdp,
    PoissonSampled,
    SampledWithoutReplacement,
    SelfComposed,
    Composed,
]
"""A typed event."""

EventLike = Union[Event, Mapping[str, Any], Any]
"""What the client takes as an event: a typed :data:`Event`, a ``dict`` in the service's JSON
form, or a dp_accounting ``DpEvent``."""


def poisson_sampler(expected_batch_size: int, dataset_size: int) -> dict[str, Any]:
    """A run's sampler: each record in each batch independently with probability
    ``expected_batch_size / dataset_size`` (Opacus' ``UniformWithReplacementSampler``)."""
    return {"type": "poisson", "expected_batch_size": expected_batch_size, "dataset_size": dataset_size}


def fixed_size_sampler(batch_size: int, dataset_size: int) -> dict[str, Any]:
    """A run's sampler: a uniformly random batch of exactly ``batch_size`` records each step."""
    return {"type": "without_replacement", "batch_size": batch_size, "dataset_size": dataset_size}


def to_json(event: EventLike) -> dict[str, Any]:
    """The service's JSON form of ``event``; a ``TypeError`` for what is not an event."""
    if isinstance(event, Mapping):
        return dict(event)
    to = getattr(event, "to_json", None)
    if callable(to) and type(event).__module__ == __name__:
        out = to()
        assert isinstance(out, dict)
        return out
    return _from_dp_event(event)


def _num(x: Any) -> Any:
    # dp_accounting fields may be numpy scalars: plain numbers for JSON.
    return x.item() if hasattr(x, "item") else x


#: dp_accounting classes with a counterpart: (our type, {their field: our field}).
_DP_EVENTS: dict[str, tuple[str, dict[str, str]]] = {
    "GaussianDpEvent": ("gaussian", {"noise_multiplier": "noise_multiplier"}),
    "LaplaceDpEvent": ("laplace", {"noise_multiplier": "noise_multiplier"}),
    "DiscreteLaplaceDpEvent": (
        "discrete_laplace",
        {"noise_parameter": "noise_parameter", "sensitivity": "sensitivity"},
    ),
    "DiscreteGaussianDpEvent": ("discrete_gaussian", {"sigma": "sigma", "sensitivity": "sensitivity"}),
    "RandomizedResponseDpEvent": (
        "randomized_response",
        {"noise_parameter": "noise_parameter", "num_buckets": "num_buckets"},
    ),
    "EpsilonDeltaDpEvent": ("epsilon_delta", {"epsilon": "epsilon", "delta": "delta"}),
    "ZCDpEvent": ("zcdp", {"rho": "rho", "xi": "xi"}),
    "PoissonSampledDpEvent": (
        "poisson_sampled",
        {"sampling_probability": "sampling_rate", "event": "event"},
    ),
    "SampledWithoutReplacementDpEvent": (
        "sampled_without_replacement",
        {"source_dataset_size": "population_size", "sample_size": "sample_size", "event": "event"},
    ),
    "SelfComposedDpEvent": ("self_composed", {"event": "event", "count": "count"}),
    "ComposedDpEvent": ("composed", {"events": "events"}),
    "NoOpDpEvent": ("composed", {}),
}


def _fields(e: Any) -> list[str]:
    """The fields of a dp_accounting event (an attrs class; a dataclass or namedtuple in other
    versions)."""
    attrs = getattr(type(e), "__attrs_attrs__", None)
    if attrs is not None:
        return [a.name for a in attrs]
    dc = getattr(type(e), "__dataclass_fields__", None)
    if isinstance(dc, dict):
        return list(dc)
    nt = getattr(type(e), "_fields", None)
    return list(nt) if isinstance(nt, tuple) else []


def _from_dp_event(e: Any) -> dict[str, Any]:
    """A dp_accounting ``DpEvent`` in the service's form, by class name (dp_accounting is never
    imported here). Fails closed: an unknown class, or a field this client does not know (a
    newer dp_accounting's), is a ``TypeError`` rather than a guess."""
    name = type(e).__name__
    mod = type(e).__module__ or ""
    if not mod.startswith("dp_accounting"):
        raise TypeError(
            f"not an event: {name} (give a privacy_ledger.events type, a dict in the "
            "service's JSON form, or a dp_accounting DpEvent)"
        )
    if name not in _DP_EVENTS:
        raise TypeError(
            f"dp_accounting's {name} has no counterpart in the service (supported: "
            f"{', '.join(_DP_EVENTS)}; NonPrivate and Unsupported events cannot be accounted)"
        )
    tag, names = _DP_EVENTS[name]
    out: dict[str, Any] = {"type": tag}
    if name == "NoOpDpEvent":
        out["events"] = []
    for f in _fields(e):
        v = getattr(e, f)
        if name == "DiscreteGaussianDpEvent" and f == "dimension":
            if v is not None and _num(v) != 1:
                raise TypeError(f"{name}.dimension must be None or 1 (got {v!r})")
            continue
        if f not in names:
            raise TypeError(f"dp_accounting's {name} has a field {f!r} this client does not know")
        if f == "event":
            out[names[f]] = _from_dp_event(v)
        elif f == "events":
            out[names[f]] = [_from_dp_event(x) for x in v]
        elif v is not None:
            out[names[f]] = _num(v)
    return out


def events_json(events: Sequence[EventLike]) -> list[dict[str, Any]]:
    """Each of ``events`` in the service's form."""
    return [to_json(e) for e in events]

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
    """A black box known to be ρ-zCDP."""

    rho: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "zcdp", "rho": self.rho}


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
    event: "Event"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "poisson_sampled",
            "sampling_rate": self.sampling_rate,
            "event": self.event.to_json(),
        }


@dataclass(frozen=True)
class SampledWithoutReplacement:
    """``event`` on a uniform subset of sample_size of population_size records."""

    sample_size: int
    population_size: int
    event: "Event"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "sampled_without_replacement",
            "sample_size": self.sample_size,
            "population_size": self.population_size,
            "event": self.event.to_json(),
        }


@dataclass(frozen=True)
class SelfComposed:
    """``event`` run ``count`` times."""

    count: int
    event: "Event"

    def to_json(self) -> dict[str, Any]:
        return {"type": "self_composed", "count": self.count, "event": self.event.to_json()}


@dataclass(frozen=True)
class Composed:
    """Each event run in turn."""

    events: tuple["Event", ...]

    def to_json(self) -> dict[str, Any]:
        return {"type": "composed", "events": [e.to_json() for e in self.events]}


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


def _from_dp_event(e: Any) -> dict[str, Any]:
    """A dp_accounting ``DpEvent`` in the service's form (by class name, so dp_accounting is
    imported only by the caller)."""
    name = type(e).__name__
    mod = type(e).__module__ or ""
    if not mod.startswith("dp_accounting"):
        raise TypeError(
            f"not an event: {name} (give a privacy_ledger.events type, a dict in the "
            "service's JSON form, or a dp_accounting DpEvent)"
        )
    simple: dict[str, tuple[str, tuple[str, ...]]] = {
        "GaussianDpEvent": ("gaussian", ("noise_multiplier",)),
        "LaplaceDpEvent": ("laplace", ("noise_multiplier",)),
        "DiscreteLaplaceDpEvent": ("discrete_laplace", ("noise_parameter", "sensitivity")),
        "DiscreteGaussianDpEvent": ("discrete_gaussian", ("sigma", "sensitivity")),
        "RandomizedResponseDpEvent": ("randomized_response", ("noise_parameter", "num_buckets")),
        "EpsilonDeltaDpEvent": ("epsilon_delta", ("epsilon", "delta")),
        "ZCDpEvent": ("zcdp", ("rho",)),
    }
    if name in simple:
        tag, fields = simple[name]
        return {"type": tag, **{f: _num(getattr(e, f)) for f in fields}}
    if name == "PoissonSampledDpEvent":
        return {
            "type": "poisson_sampled",
            "sampling_rate": _num(e.sampling_probability),
            "event": _from_dp_event(e.event),
        }
    if name == "SampledWithoutReplacementDpEvent":
        return {
            "type": "sampled_without_replacement",
            "sample_size": _num(e.sample_size),
            "population_size": _num(e.source_dataset_size),
            "event": _from_dp_event(e.event),
        }
    if name == "SelfComposedDpEvent":
        return {"type": "self_composed", "count": _num(e.count), "event": _from_dp_event(e.event)}
    if name == "ComposedDpEvent":
        return {"type": "composed", "events": [_from_dp_event(x) for x in e.events]}
    raise TypeError(
        f"dp_accounting's {name} has no counterpart in the service (a NoOp, NonPrivate or "
        "Unsupported event cannot be accounted)"
    )


def events_json(events: Sequence[EventLike]) -> list[dict[str, Any]]:
    """Each of ``events`` in the service's form."""
    return [to_json(e) for e in events]

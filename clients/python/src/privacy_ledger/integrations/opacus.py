"""Opacus (≥ 1.6) training charged through privacy-ledger, chunk by chunk, before it happens.

    from opacus import PrivacyEngine
    from privacy_ledger import Ledger
    from privacy_ledger.integrations.opacus import register

    mechanism = register(Ledger(), "census", steps=epochs * len(loader), chunk_steps=50)
    engine = PrivacyEngine(accountant=mechanism)
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer,
                                                   data_loader=loader, noise_multiplier=1.0,
                                                   max_grad_norm=1.0)
    ...  # the usual loop: optimizer.step() raises BudgetExceeded before an unpaid update

How: Opacus calls its accountant's step hook inside ``DPOptimizer.pre_step``, after the noisy
gradient is formed and *before* the wrapped optimizer updates the parameters. The accountant
registered here declares a run on its first step (the step event is a Poisson-sampled Gaussian
with the optimizer's noise multiplier and sample rate; ``steps`` in chunks of ``chunk_steps``)
and takes the next chunk from the service's gate at the first step of each chunk. A refusal
(:class:`~privacy_ledger.errors.BudgetExceeded`, or :class:`~privacy_ledger.errors.RunDoesNotFit`
at the first step when the declared steps cannot all fit and ``allow_partial`` is false) is
raised from ``optimizer.step()`` before that step's update, so no parameter ever moves on a step
the ledger did not admit. Steps of a chunk are charged when the chunk is taken: stopping inside a
chunk spends the whole chunk.

What is charged is the mechanism of Opacus's default: Poisson sampling (``DPDataLoader``,
``poisson_sampling=True``) and the Gaussian mechanism with noise ``noise_multiplier ×
max_grad_norm`` on the sum of clipped per-sample gradients (sensitivity ``max_grad_norm`` under
add/remove-one, as the service's ``gaussian`` event states it). Training with
``poisson_sampling=False`` runs another mechanism than the one charged: do not. A change of noise
multiplier or sample rate during the run is refused (the chunks were certified for one step
event).
"""

from __future__ import annotations

import math
from typing import Any

from opacus.accountants import IAccountant  # type: ignore[import-untyped,import-not-found,unused-ignore]
from opacus.accountants.registry import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
    register_accountant,
)

from .. import events
from ..client import Ledger, Run
from ..errors import LedgerError

MECHANISM = "privacy_ledger"


def register(
    ledger: Ledger,
    dataset: str,
    *,
    steps: int,
    chunk_steps: int,
    allow_partial: bool = False,
    delta: float | None = None,
    label: str | None = None,
    mechanism: str = MECHANISM,
) -> str:
    """Registers an Opacus accountant, under ``mechanism``, that charges ``steps`` training steps
    on ``dataset`` in chunks of ``chunk_steps``; returns the name to pass as
    ``PrivacyEngine(accountant=...)``. (Opacus makes its accountant without arguments, so the
    registered class carries these settings; registering again replaces them.)"""
    if steps < 1 or chunk_steps < 1:
        raise ValueError("steps and chunk_steps must be at least 1")
    settings = _Settings(ledger, dataset, steps, min(chunk_steps, steps), allow_partial, delta, label)

    class Configured(LedgerAccountant):
        _settings = settings

        @classmethod
        def mechanism(cls) -> str:
            return mechanism

    register_accountant(mechanism, Configured, force=True)
    return mechanism


class _Settings:
    def __init__(
        self,
        ledger: Ledger,
        dataset: str,
        steps: int,
        chunk_steps: int,
        allow_partial: bool,
        delta: float | None,
        label: str | None,
    ) -> None:
        self.ledger, self.dataset, self.steps, self.chunk_steps = ledger, dataset, steps, chunk_steps
        self.allow_partial, self.delta, self.label = allow_partial, delta, label


class LedgerAccountant(IAccountant):  # type: ignore[misc]
    """An Opacus accountant whose steps are admitted by privacy-ledger's gate (see the module)."""

    _settings: _Settings | None = None

    def __init__(self) -> None:
        self.history: list[tuple[float, float, int]] = []
        self.run: Run | None = None
        self.steps_taken = 0
        self._step: tuple[float, float] | None = None

    @classmethod
    def mechanism(cls) -> str:
        return MECHANISM

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        s = self._settings
        if s is None:
            raise LedgerError("use privacy_ledger.integrations.opacus.register(...) to configure it")
        if self._step is None:
            self._step = (noise_multiplier, sample_rate)
            event = events.PoissonSampled(sample_rate, events.Gaussian(noise_multiplier))
            self.run = s.ledger.run(
                s.dataset,
                event,
                s.steps,
                s.chunk_steps,
                delta=s.delta,
                allow_partial=s.allow_partial,
                label=s.label or "opacus",
            )
        elif self._step != (noise_multiplier, sample_rate):
            raise LedgerError(
                f"the run was declared for noise multiplier {self._step[0]} and sample rate "
                f"{self._step[1]}; this step has {noise_multiplier} and {sample_rate}: declare "
                "another run"
            )
        assert self.run is not None
        if self.steps_taken % s.chunk_steps == 0:
            # The first step of a chunk: ask the gate before this step's update (raises).
            if self.run.next_chunk() is None:
                raise LedgerError(
                    f"all {s.steps} declared steps are taken: register a longer run to go on"
                )
        self.steps_taken += 1
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            nm, sr, n = self.history.pop()
            self.history.append((nm, sr, n + 1))
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def __len__(self) -> int:
        return self.steps_taken

    def mu(self) -> float:
        """μ of the chunks taken (what the run adds to the ledger's filter), from the service."""
        return self.run.refresh().mu_used if self.run is not None else 0.0

    def get_epsilon(self, delta: float, *args: Any, **kwargs: Any) -> float:
        """ε at ``delta`` of the chunks taken: the μ-GDP guarantee the service holds for them,
        converted exactly (Dong, Roth & Su, Corollary 2.13), ε rounded up by the bisection."""
        return gdp_epsilon(self.mu(), delta)


def _gdp_delta(mu: float, eps: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su, Corollary 2.13)."""

    def phi(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2))

    return phi(-eps / mu + mu / 2) - math.exp(eps) * phi(-eps / mu - mu / 2)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ ``delta`` for μ-GDP, by bisection kept on the side where δ(ε)
    ≤ delta (so the answer errs up, never down); 0 for μ = 0."""
    if not (0 < delta < 1):
        raise ValueError("delta must be in (0, 1)")
    if mu <= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while _gdp_delta(mu, hi) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if _gdp_delta(mu, mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi

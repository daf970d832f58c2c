"""Opacus 1.6 with the ledger's accountant, against a real service (integrations.sh starts one):
each chunk is taken before the first update of its steps; a refusal raises from
``optimizer.step()`` before the refused step moves any parameter."""

from __future__ import annotations

import math
import os
import uuid
from typing import Any

import pytest

pytest.importorskip("torch", reason="torch is not installed (integrations.sh installs it)")
pytest.importorskip("opacus", reason="opacus is not installed (integrations.sh installs it)")

import opacus  # type: ignore[import-untyped,unused-ignore]  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from privacy_ledger import BudgetExceeded, Ledger, RunDoesNotFit  # noqa: E402
from privacy_ledger.integrations.opacus import gdp_epsilon, register  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (os.environ.get("PRIVACY_LEDGER_URL") and os.environ.get("PRIVACY_LEDGER_TOKEN")),
    reason="no service: set PRIVACY_LEDGER_URL and PRIVACY_LEDGER_TOKEN (integrations.sh does)",
)

#: The service's sums are rounded up by a few ulps.
SUM_TOLERANCE = 1e-12


def setup(
    ledger: Ledger, mu: float, steps: int, chunk_steps: int, allow_partial: bool
) -> tuple[str, torch.nn.Module, torch.optim.Optimizer, Any, Any]:
    torch.manual_seed(1)
    x = torch.randn(1000, 5)
    y = (x.sum(dim=1) > 0).float()
    name = f"opacus-{uuid.uuid4().hex[:8]}"
    ledger.create_dataset(name, mu=mu)
    mechanism = register(ledger, name, steps=steps, chunk_steps=chunk_steps, allow_partial=allow_partial)
    engine = opacus.PrivacyEngine(accountant=mechanism)
    model = torch.nn.Linear(5, 1)
    model, optimizer, loader = engine.make_private(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=DataLoader(TensorDataset(x, y), batch_size=100),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
    )
    return name, model, optimizer, loader, engine


def one_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor
) -> None:
    optimizer.zero_grad()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(xb).squeeze(-1), yb)
    loss.backward()  # type: ignore[no-untyped-call,unused-ignore]
    optimizer.step()


def test_each_chunk_is_taken_before_its_first_update_and_a_refusal_moves_nothing() -> None:
    ledger = Ledger()
    # A chunk of 5 steps at q = 0.1, σ = 1 costs about μ_c (the gate picks each chunk's δᵢ from
    # the sums, so the ledger's may differ a little); the budget fits about 3.5 of them.
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    ledger.create_dataset(probe, mu=100.0)
    from privacy_ledger import events

    chunk_mu = ledger.run(probe, events.PoissonSampled(0.1, events.Gaussian(1.0)), 5).info.chunk_mu
    assert chunk_mu is not None
    budget = chunk_mu * math.sqrt(3.5)
    name, model, optimizer, loader, engine = setup(ledger, budget, steps=40, chunk_steps=5, allow_partial=True)
    accountant = engine.accountant
    steps = 0
    with pytest.raises(BudgetExceeded) as refused:
        for _ in range(4):
            for xb, yb in loader:
                before = [p.detach().clone() for p in model.parameters()]
                try:
                    one_step(model, optimizer, xb, yb)
                except BudgetExceeded:
                    # The refused step updated nothing.
                    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
                    raise
                steps += 1
                # After step s, exactly ⌈s / 5⌉ chunks are on the ledger: each was taken at the
                # first step of its chunk, before that step's update.
                [run] = list(ledger.runs(name))
                assert run.raw["chunks_committed"] == math.ceil(steps / 5), steps
    # Stopped at the first step of a chunk, after whole chunks only; the refused chunk is the
    # gate's rule at work: what was spent plus it exceeds the budget, what was spent does not.
    k = steps // 5
    assert steps == 5 * k and 1 <= k < 8 and len(accountant) == steps
    spent = ledger.dataset(name).mu_spent
    unit = refused.value.unit_mu
    assert unit is not None and spent <= budget < math.hypot(spent, unit)
    # Opacus's own get_epsilon answers from the ledger's μ of the chunks taken.
    eps = engine.get_epsilon(1e-5)
    assert eps == gdp_epsilon(accountant.mu(), 1e-5) and 0 < eps < math.inf


def test_a_run_that_cannot_finish_is_refused_at_the_first_step() -> None:
    ledger = Ledger()
    name, model, optimizer, loader, _ = setup(ledger, 0.5, steps=1000, chunk_steps=100, allow_partial=False)
    xb, yb = next(iter(loader))
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RunDoesNotFit) as e:
        one_step(model, optimizer, xb, yb)
    assert e.value.steps_that_fit is not None and e.value.steps_that_fit < 1000
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert ledger.dataset(name).units == 0


def test_gdp_epsilon_is_the_closed_form() -> None:
    # μ = 1: δ(ε) = Φ(−ε + 1/2) − e^ε Φ(−ε − 1/2); at ε = 1, δ = 0.12693 (Dong, Roth & Su).
    def phi(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2))

    d1 = phi(-0.5) - math.e * phi(-1.5)
    eps = gdp_epsilon(1.0, d1)
    assert abs(eps - 1.0) < 1e-9 and eps >= 1.0 - 1e-15

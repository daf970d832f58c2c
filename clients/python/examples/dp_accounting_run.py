"""A dp_accounting (or jax_privacy) user: the step is a DpEvent; the run is declared from it
and each chunk asked of the gate before its steps run.

    pip install './clients/python[dp-accounting]'
"""

import uuid

import dp_accounting  # type: ignore[import-untyped,unused-ignore]

from privacy_ledger import Ledger

with Ledger() as ledger:  # PRIVACY_LEDGER_URL, PRIVACY_LEDGER_TOKEN
    name = f"dpsgd-{uuid.uuid4().hex[:8]}"
    ledger.create_dataset(name, mu=1.0)
    q, sigma = 256 / 60_000, 1.1
    step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    run = ledger.run(name, step, steps=2000, chunk_steps=500, label="dp_accounting step")
    print(f"declared: {run.info.chunks} chunks of mu {run.info.chunk_mu:.4f}, run mu {run.info.run_mu:.4f}")
    for chunk in run:
        # ... run steps chunk.first_step .. chunk.first_step + chunk.steps - 1 here ...
        print(f"chunk {chunk.index}: steps {chunk.first_step}+{chunk.steps}, mu after {chunk.charge.mu_after:.4f}")

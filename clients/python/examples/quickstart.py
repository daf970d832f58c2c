import uuid

from privacy_ledger import BudgetExceeded, Ledger, events

with Ledger() as ledger:  # PRIVACY_LEDGER_URL, PRIVACY_LEDGER_TOKEN
    name = f"census-{uuid.uuid4().hex[:8]}"
    ledger.create_dataset(name, mu=1.0, description="census extract")

    # A one-off query: a Gaussian with noise multiplier 4 is 1/4-GDP.
    charge = ledger.charge(name, events.Gaussian(noise_multiplier=4.0), label="mean income")
    print(f"charged {charge.unit_mu:.4f}; spent so far {charge.mu_after:.4f}")

    # DP-SGD: 600 steps of a Poisson-sampled Gaussian, in chunks of 200 steps. Each chunk is
    # asked of the gate before it is trained on; stopping early charges nothing more.
    step = events.PoissonSampled(sampling_rate=0.01, event=events.Gaussian(noise_multiplier=1.5))
    run = ledger.run(name, step, steps=600, chunk_steps=200, label="fine-tune")
    for chunk in run:
        print(f"training steps {chunk.first_step}..{chunk.first_step + chunk.steps - 1}")
    print(f"run done: mu used {run.refresh().mu_used:.4f}")

    # A refusal is an exception, never a value to ignore.
    try:
        ledger.charge(name, events.Gaussian(noise_multiplier=0.5))
    except BudgetExceeded as refused:
        print(f"refused ({refused.request_id}): {refused.remaining_mu:.4f} of mu left")

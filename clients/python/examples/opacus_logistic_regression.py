"""Opacus DP-SGD on CPU, charged through privacy-ledger chunk by chunk before each chunk's steps
update the model: a logistic regression on 4,000 synthetic rows, with a budget that runs out.

    pip install ./clients/python opacus
    PRIVACY_LEDGER_URL=... PRIVACY_LEDGER_TOKEN=... python opacus_logistic_regression.py
"""

import uuid

import torch
from opacus import PrivacyEngine  # type: ignore[import-untyped,unused-ignore]
from torch.utils.data import DataLoader, TensorDataset

from privacy_ledger import BudgetExceeded, Ledger
from privacy_ledger.integrations.opacus import register

torch.manual_seed(0)
rows, features = 4000, 10
x = torch.randn(rows, features)
y = (x @ torch.randn(features) > 0).float()
loader = DataLoader(TensorDataset(x, y), batch_size=200)  # sample rate 200 / 4000 = 0.05

ledger = Ledger()  # PRIVACY_LEDGER_URL, PRIVACY_LEDGER_TOKEN
name = f"synthetic-{uuid.uuid4().hex[:8]}"
ledger.create_dataset(name, mu=2.0, description="4,000 synthetic rows")

epochs = 10
steps = epochs * len(loader)
# The budget fits only part of the 200 steps: allow_partial declares the run anyway, and the
# gate stops it at the first chunk that does not fit.
mechanism = register(ledger, name, steps=steps, chunk_steps=20, allow_partial=True, label="logreg")
model = torch.nn.Linear(features, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
engine = PrivacyEngine(accountant=mechanism)
model, optimizer, loader = engine.make_private(
    module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0
)
loss_fn = torch.nn.BCEWithLogitsLoss()
step = 0
try:
    for epoch in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb).squeeze(-1), yb)
            loss.backward()
            optimizer.step()  # asks the gate at the first step of each chunk
            step += 1
        print(f"epoch {epoch}: loss {loss.item():.3f}")
except BudgetExceeded as refused:
    print(f"stopped before step {step}: {refused.message} ({refused.request_id})")
with torch.no_grad():
    accuracy = ((model(x).squeeze(-1) > 0).float() == y).float().mean().item()
print(f"trained {step} of {steps} steps; accuracy {accuracy:.3f}; "
      f"epsilon at delta 1e-5: {engine.get_epsilon(1e-5):.3f}")

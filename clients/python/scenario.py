"""The README's scenario through a client generated from openapi/openapi.json by
openapi-python-client, unmodified: typed event models, typed answers.

Run by clients/python/run.sh (which generates the client and starts the service):
    python scenario.py BASE_URL TOKEN
"""

import sys
import uuid

from privacy_ledger_client import AuthenticatedClient
from privacy_ledger_client.api.accountant import compose
from privacy_ledger_client.api.charges import create_charge, declare_run, run_chunk
from privacy_ledger_client.api.datasets import create_dataset, get_dataset
from privacy_ledger_client.api.reports import get_report
from privacy_ledger_client.models import (
    Budget,
    BudgetExceededBody,
    ChargeCreated,
    ChargeRequest,
    ChunkRequestWire,
    ComposeRequest,
    CreateDatasetRequest,
    Dataset,
    DatasetReport,
    GaussianEvent,
    GaussianEventType,
    GdpEvent,
    GdpEventType,
    PoissonSampledEvent,
    PoissonSampledEventType,
    Report,
    Run,
    RunRequest,
)


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


def main(base_url: str, token: str) -> None:
    client = AuthenticatedClient(base_url=base_url, token=token, raise_on_unexpected_status=True)
    ds = f"cifar10-{uuid.uuid4().hex[:8]}"

    made = create_dataset.sync(client=client, body=CreateDatasetRequest(
        id=ds, budget=Budget(mu=2.0), description="CIFAR-10 training set"))
    check(isinstance(made, Dataset) and made.id == ds, "a dataset with a 2-GDP budget")

    # De et al. 2022: q = 16384/50000, σ = 9.4, 2000 steps, declared in 4 chunks of 500.
    step = PoissonSampledEvent(
        type_=PoissonSampledEventType.POISSON_SAMPLED, sampling_rate=0.32768,
        event=GaussianEvent(type_=GaussianEventType.GAUSSIAN, noise_multiplier=9.4))
    run = declare_run.sync(ds, client=client, body=RunRequest(
        event=step, steps=2000, chunk_steps=500, label="run 7"), idempotency_key="run-7")
    check(isinstance(run, Run) and run.chunks == 4, "a DP-SGD run declared in 4 chunks")
    check(abs(run.chunk_unit.mu - 0.78844) < 1e-4, f"each chunk's μ is 0.78844 (got {run.chunk_unit.mu})")

    chunk = run_chunk.sync(ds, run.id, client=client, body=ChunkRequestWire(chunk=0),
                           idempotency_key="run-7-chunk-0")
    check(isinstance(chunk, ChargeCreated) and chunk.charge.chunk == 0, "chunk 0 admitted")
    again = run_chunk.sync(ds, run.id, client=client, body=ChunkRequestWire(chunk=0),
                           idempotency_key="run-7-chunk-0")
    check(isinstance(again, ChargeCreated) and again.charge.id == chunk.charge.id,
          "the retried chunk is replayed, not charged twice")

    # A charge that does not fit: 409 with the figures.
    big = create_charge.sync(ds, client=client, body=ChargeRequest(
        event=GdpEvent(type_=GdpEventType.GDP, mu=1.9)))
    check(isinstance(big, BudgetExceededBody) and big.error == "budget_exceeded",
          "a charge beyond the budget is refused with the figures")

    report = get_report.sync(ds, client=client, deltas="1e-5")
    check(isinstance(report, DatasetReport) and abs(report.mu_spent - 0.78844) < 1e-4,
          f"the report: μ spent {report.mu_spent:.5f}")
    got = get_dataset.sync(ds, client=client)
    check(isinstance(got, Dataset) and got.charges == 1, "one unit on the ledger")

    stateless = compose.sync(client=client, body=ComposeRequest(
        events=[GdpEvent(type_=GdpEventType.GDP, mu=0.5)], deltas=[1e-5]))
    check(isinstance(stateless, Report) and abs(stateless.mu.upper - 0.5) < 1e-9,
          "stateless composition of a 0.5-GDP event is 0.5-GDP")
    print("scenario passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

#!/usr/bin/env python3
"""Cost of one charge as the ledger grows: starts `privacy-ledger serve` on a temporary SQLite file,
charges a DP-SGD step (Poisson-sampled Gaussian) N times on one keep-alive connection, and prints the
median latency of the first, middle and last 100 charges. Standard library only.

    cargo build --release && python3 bench/charge_cost.py [--steps 1000] [--q 0.01] [--sigma 1.1]
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "privacy-ledger"))
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--q", type=float, default=0.01)
    ap.add_argument("--sigma", type=float, default=1.1)
    args = ap.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [args.binary, "serve", "--listen", f"127.0.0.1:{port}",
             "--database-url", f"sqlite://{tmp}/bench.db"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            # The first start of an empty store prints its admin token, then the address.
            token = None
            for line in server.stdout:
                if line.startswith("admin token"):
                    token = line.rsplit(" ", 1)[1].strip()
                if line.startswith("listening on"):
                    break
            assert token, "the first start prints an admin token"
            conn = http.client.HTTPConnection("127.0.0.1", port)

            def call(method, path, body):
                conn.request(method, path, body=json.dumps(body),
                             headers={"content-type": "application/json",
                                      "authorization": f"Bearer {token}"})
                r = conn.getresponse()
                return r.status, r.read()

            status, _ = call("POST", "/v1/datasets", {
                "id": "bench", "budget": {"mu": 1000.0},
                "neighboring_relation": "add_or_remove_one"})
            assert status == 201, status
            event = {"type": "poisson_sampled", "sampling_rate": args.q,
                     "event": {"type": "gaussian", "noise_multiplier": args.sigma}}
            times = []
            for _ in range(args.steps):
                t = time.perf_counter()
                status, body = call("POST", "/v1/datasets/bench/charges", {"event": event})
                times.append(time.perf_counter() - t)
                if status != 201:
                    sys.exit(f"charge failed: {status} {body[:300]!r}")
            n = len(times)
            for name, lo in [("first", 0), ("middle", max(0, n // 2 - 50)), ("last", max(0, n - 100))]:
                part = times[lo:lo + 100]
                print(f"{name:6} 100 charges (from step {lo + 1}): median {statistics.median(part) * 1e3:.2f} ms")
            status, body = call("GET", "/v1/datasets/bench", None)
            d = json.loads(body)
            print(f"after {n} steps: mu spent under the filter = {d['mu_spent']:.6f}, "
                  f"exact composition (non-adaptive) = {d['exact_composition_mu']:.6f}")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()

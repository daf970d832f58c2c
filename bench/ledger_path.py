#!/usr/bin/env python3
"""The write path's costs (issue 33), measured from outside over HTTP on one keep-alive connection
per client. Standard library only.

Starts `privacy-ledger serve` on a fresh store (a temporary SQLite file, or the PostgreSQL database
given with --database-url, where it uses fresh dataset ids) and measures:

1. a mixed ledger filled with --units units, cycling a declared run's next chunk (10 steps of a
   Poisson-sampled Gaussian), a Laplace and a Gaussian charge: latency of every chunk, first 100
   against last 100 (flat or not), p50/p99;
2. GDP charges (μ = 0.01) on that ledger, and on an all-Gaussian one: p50/p99;
3. a report (the exact composition of the mixed ledger) once it is filled: latency;
4. bytes the server process wrote per charge while filling (SQLite only: /proc/<pid>/io wchar,
   i.e. WAL, checkpoints and snapshots together);
5. cheap GDP charges on one dataset while four clients send heavy charges to the mixed ledger
   (chunks with a new sampling rate each time, so each is certified by the numerical engine):
   p50/p99.

    cargo build --release && python3 bench/ledger_path.py [--units 1000] [--database-url URL]
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
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    def __init__(self, port, token):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}

    def call(self, method, path, body=None):
        t = time.perf_counter()
        self.conn.request(method, path, body=None if body is None else json.dumps(body),
                          headers=self.headers)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None), time.perf_counter() - t


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def ms(x):
    return f"{1000 * x:.1f}"


CHUNK = {"type": "self_composed", "count": 10, "event": {"type": "poisson_sampled",
         "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.0}}}
LAPLACE = {"type": "laplace", "noise_multiplier": 10.0}
GAUSS = {"type": "gaussian", "noise_multiplier": 5.0}


def wchar(pid):
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "privacy-ledger"))
    ap.add_argument("--units", type=int, default=1000)
    ap.add_argument("--gdp", type=int, default=300)
    ap.add_argument("--load-seconds", type=float, default=20.0)
    ap.add_argument("--database-url")
    args = ap.parse_args()
    port = free_port()
    tmp = tempfile.mkdtemp()
    url = args.database_url or f"sqlite://{tmp}/bench.db"
    sqlite = url.startswith("sqlite")
    token = None
    if not sqlite:
        # A database with tokens prints none on start: make one.
        out = subprocess.run([args.binary, "token", "--database-url", url, "create", "--name",
                              "bench", "--role", "admin"], capture_output=True, text=True,
                             check=True).stdout
        token = out.strip().splitlines()[-1].strip()
    server = subprocess.Popen(
        [args.binary, "serve", "--listen", f"127.0.0.1:{port}", "--database-url", url,
         "--rate-limit-per-second", "1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in server.stdout:
            if line.startswith("admin token"):
                token = line.rsplit(" ", 1)[1].strip()
            if line.startswith("listening on"):
                break
        assert token, "the first start prints an admin token"
        c = Client(port, token)
        tag = uuid.uuid4().hex[:8]
        mixed, gauss, cheap = (f"{n}-{tag}" for n in ("mixed", "gauss", "cheap"))
        for d in (mixed, gauss, cheap):
            s, b, _ = c.call("POST", "/v1/datasets", {"id": d, "budget": {"mu": 1000.0}})
            assert s == 201, b

        # 1. The mixed ledger.
        w0 = wchar(server.pid) if sqlite else None
        # A declared run whose chunks are 10 steps of a Poisson-sampled Gaussian.
        n_chunks = (args.units + 2) // 3
        decl = {"event": CHUNK["event"], "steps": 10 * n_chunks, "chunk_steps": 10}
        if n_chunks > 900:
            # Each chunk spends delta_B / 1000 by default: name a smaller one so that every chunk
            # of a long ledger fits the default delta budget (1e-10).
            decl["delta"] = 1e-10 / (2 * n_chunks)
        s, run, _ = c.call("POST", f"/v1/datasets/{mixed}/runs", decl)
        assert s == 201, run
        chunks = []
        for i in range(args.units):
            if i % 3 == 0:
                s, b, t = c.call("POST", f"/v1/datasets/{mixed}/runs/{run['id']}/chunks")
                chunks.append(t)
            else:
                e = (LAPLACE, GAUSS)[i % 3 - 1]
                s, b, t = c.call("POST", f"/v1/datasets/{mixed}/charges", {"event": e})
            assert s == 201, b
        w1 = wchar(server.pid) if sqlite else None
        first, last = chunks[:100], chunks[-100:]
        print(f"mixed ledger, {args.units} units: chunk p50 {ms(pct(chunks, 50))} ms, "
              f"p99 {ms(pct(chunks, 99))} ms; median of first 100 {ms(statistics.median(first))} ms, "
              f"last 100 {ms(statistics.median(last))} ms "
              f"(ratio {statistics.median(last) / statistics.median(first):.2f})")
        if w0 is not None:
            print(f"bytes written per charge while filling: {(w1 - w0) / args.units / 1024:.1f} KiB")

        # 2. GDP charges on it, and on an all-Gaussian ledger.
        for d, what in ((mixed, "mixed"), (gauss, "all-Gaussian")):
            ts = []
            for _ in range(args.gdp):
                s, b, t = c.call("POST", f"/v1/datasets/{d}/charges",
                                 {"event": {"type": "gdp", "mu": 0.01}})
                assert s == 201, b
                ts.append(t)
            print(f"GDP charge on the {what} ledger: p50 {ms(pct(ts, 50))} ms, "
                  f"p99 {ms(pct(ts, 99))} ms")

        # 3. The report.
        time.sleep(1.0)
        s, r, t = c.call("GET", f"/v1/datasets/{mixed}/report")
        assert s == 200, r
        ex = r.get("exact_composition") or {}
        print(f"report of the mixed ledger: {ms(t)} ms (exact composition at version "
              f"{ex.get('version')}, μ {ex.get('report', {}).get('mu', {}).get('upper')})")

        # 5. Cheap charges during heavy ones on another dataset.
        stop = time.monotonic() + args.load_seconds
        heavy_done = [0]

        def heavy_client(k):
            h = Client(port, token)
            i = 0
            while time.monotonic() < stop:
                rate = 0.01 + (k * 100000 + i) * 1e-9
                e = {"type": "self_composed", "count": 10, "event": {"type": "poisson_sampled",
                     "sampling_rate": rate, "event": {"type": "gaussian", "noise_multiplier": 1.0}}}
                s, b, _ = h.call("POST", f"/v1/datasets/{mixed}/charges", {"event": e})
                assert s in (201, 503), b
                heavy_done[0] += s == 201
                i += 1

        threads = [threading.Thread(target=heavy_client, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        ts = []
        while time.monotonic() < stop:
            s, b, t = c.call("POST", f"/v1/datasets/{cheap}/charges",
                             {"event": {"type": "gdp", "mu": 0.001}})
            assert s == 201, b
            ts.append(t)
        for th in threads:
            th.join()
        print(f"cheap charges during heavy load ({heavy_done[0]} heavy admitted in "
              f"{args.load_seconds:.0f} s): n {len(ts)}, p50 {ms(pct(ts, 50))} ms, "
              f"p99 {ms(pct(ts, 99))} ms, max {ms(max(ts))} ms")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())

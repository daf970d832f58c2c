#!/usr/bin/env python3
"""A storm of expensive requests against a running service, and what it does to cheap ones.

Measures, in one run: the latency of cheap GDP charges on their own dataset while idle, then while
N clients keep sending expensive numerical compositions; how the expensive ones were answered
(200, 503 overloaded with Retry-After, other); and the server's peak resident memory (VmHWM,
read from /proc, so run it on the server's machine).

    python3 bench/storm.py --url http://127.0.0.1:8080 --token pl_... --pid <server pid>

Standard library only.
"""

import argparse
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse
import uuid

HEAVY = {
    "events": [{
        "type": "self_composed", "count": 10000,
        "event": {"type": "poisson_sampled", "sampling_rate": 0.01,
                  "event": {"type": "gaussian", "noise_multiplier": 0.8}},
    }],
    "grid_step": 1e-5,
}


def request(conn, method, path, token, body=None, key=None):
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, data, r.getheader("Retry-After")


def rss_peak_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_now_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cheap_latencies(host, port, token, dataset, n):
    conn = http.client.HTTPConnection(host, port, timeout=120)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        s, body, _ = request(conn, "POST", f"/v1/datasets/{dataset}/charges", token,
                             {"event": {"type": "gdp", "mu": 1e-4}}, key=uuid.uuid4().hex)
        out.append((time.perf_counter() - t) * 1000)
        assert s == 201, (s, body)
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--token", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--cheap", type=int, default=300)
    ap.add_argument("--grid-step", type=float, default=1e-5,
                    help="the heavy requests' grid step (smaller: larger distributions; 9e-6 "
                         "takes them near the engine's 2^22-point limit)")
    ap.add_argument("--vary", action="store_true",
                    help="a different noise multiplier per heavy request, so no cache answers "
                         "and every cache fills (the worst case for memory)")
    a = ap.parse_args()
    HEAVY["grid_step"] = a.grid_step
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    conn = http.client.HTTPConnection(host, port, timeout=60)
    dataset = "storm-" + uuid.uuid4().hex[:8]
    s, body, _ = request(conn, "POST", "/v1/datasets", a.token, {"id": dataset, "budget": {"mu": 10}})
    assert s == 201, (s, body)

    rss_start = rss_now_mb(a.pid)
    idle = cheap_latencies(host, port, a.token, dataset, a.cheap)

    stop = threading.Event()
    outcomes = {}
    lock = threading.Lock()

    def storm():
        c = http.client.HTTPConnection(host, port, timeout=120)
        while not stop.is_set():
            try:
                heavy = HEAVY
                if a.vary:
                    heavy = json.loads(json.dumps(HEAVY))
                    inner = heavy["events"][0]["event"]["event"]
                    inner["noise_multiplier"] = round(0.8 + random.random() * 0.4, 6)
                s, body, retry = request(c, "POST", "/v1/accountant/compose", a.token, heavy)
            except Exception as e:  # noqa: BLE001 - counted, not hidden
                s, retry = f"exception {type(e).__name__}", None
                c = http.client.HTTPConnection(host, port, timeout=120)
            key = f"{s}" + (" (Retry-After)" if retry else "")
            with lock:
                outcomes[key] = outcomes.get(key, 0) + 1
            if s == 503:
                time.sleep(0.05)

    threads = [threading.Thread(target=storm, daemon=True) for _ in range(a.clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    during = cheap_latencies(host, port, a.token, dataset, a.cheap)
    rest = a.seconds - 1.0
    if rest > 0:
        time.sleep(rest)
    stop.set()
    for t in threads:
        t.join(timeout=180)

    peak = rss_peak_mb(a.pid)
    print(json.dumps({
        "clients": a.clients,
        "grid_step": a.grid_step,
        "vary": a.vary,
        "heavy_outcomes": outcomes,
        "cheap_idle_ms": {"p50": round(statistics.median(idle), 2), "p99": round(pct(idle, 99), 2)},
        "cheap_during_storm_ms": {"p50": round(statistics.median(during), 2),
                                  "p99": round(pct(during, 99), 2)},
        "p99_ratio": round(pct(during, 99) / pct(idle, 99), 2),
        "rss_mb": {"before": round(rss_start), "peak": round(peak)},
    }, indent=2))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""privacy-ledger vs Google dp_accounting 0.6.0 + gdpnum 0.1.2, side by side, in one run.

For each case both tools compose the same events at the same grid step h with pessimistic
connect-the-dots PLDs and answer ε at δ and μ (gdpnum's μ/regret on dp_accounting's PLD: the pipeline a
user of those libraries runs to get what one `privacy-ledger account` call returns). Each run is a
fresh process; times are medians over --repeats runs. Printed per case: times and their ratio, ε of
both and |Δε|/ε, μ of both and |Δμ|, and peak RSS of both processes.

Usage: bash bench/run.sh [--repeats 3] [--cases a,b] [--h 1e-4] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def G(s):
    return {"type": "gaussian", "noise_multiplier": s}


def L(b):
    return {"type": "laplace", "noise_multiplier": b}


def PS(q, e):
    return {"type": "poisson_sampled", "sampling_rate": q, "event": e}


def SC(n, e):
    return {"type": "self_composed", "count": n, "event": e}


Q_CIFAR = 16384 / 50000
CASES = {
    "de_cifar10_sigma40_T906": ([SC(906, PS(Q_CIFAR, G(40.0)))], 1e-5),
    "de_cifar10_sigma9.4_T2000": ([SC(2000, PS(Q_CIFAR, G(9.4)))], 1e-5),
    "opacus_sigma1.5_q0.04_T2250": ([SC(2250, PS(0.04, G(1.5)))], 1e-5),
    "q1e-3_sigma0.8_T1e5": ([SC(100000, PS(1e-3, G(0.8)))], 1e-6),
    "gaussians_30_distinct": ([G(1.0 + 0.5 * i) for i in range(30)], 1e-5),
    "laplace_b10_x100": ([SC(100, L(10.0))], 1e-5),
    "mixed_ledger": ([SC(100, PS(5e-3, G(0.8))), SC(200, G(8.0)), SC(100, L(10.0))], 1e-6),
}

# Runs in a fresh interpreter: dp_accounting then gdpnum, timed inside the process.
WORKER = r'''
import json, resource, sys, time
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
spec = json.loads(sys.argv[1])
def conv(e):
    t = e["type"]
    if t == "gaussian": return dp_event.GaussianDpEvent(e["noise_multiplier"])
    if t == "laplace": return dp_event.LaplaceDpEvent(e["noise_multiplier"])
    if t == "poisson_sampled": return dp_event.PoissonSampledDpEvent(e["sampling_rate"], conv(e["event"]))
    if t == "self_composed": return dp_event.SelfComposedDpEvent(conv(e["event"]), e["count"])
    raise ValueError(t)
t0 = time.perf_counter()
acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=spec["h"])
for e in spec["events"]:
    acc.compose(conv(e))
eps = acc.get_epsilon(spec["delta"])
t1 = time.perf_counter()
mu = regret = None
try:
    from gdpnum import PLDConverter
    mu, regret = PLDConverter(acc._pld).get_mu_and_regret()
    mu, regret = float(mu), float(regret)
except Exception as ex:  # gdpnum missing or failing: report, do not abort
    mu = None
t2 = time.perf_counter()
print(json.dumps({"eps": eps, "mu": mu, "regret": regret, "t_dpa": t1 - t0, "t_gdpnum": t2 - t1,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
'''


def run_ours(binary, events, delta, h):
    req = {"events": events, "deltas": [delta], "grid_step": h}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(req, fh)
        path = fh.name
    try:
        t = time.perf_counter()
        p = subprocess.run(["/usr/bin/time", "-f", "%M", binary, "account", path],
                           capture_output=True, text=True)
        wall = time.perf_counter() - t
    finally:
        os.unlink(path)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr else f"exit {p.returncode}"}
    r = json.loads(p.stdout)
    rss = int(p.stderr.strip().splitlines()[-1])
    return {"eps": r["epsilon"][0]["epsilon"], "mu": r["mu"]["upper"], "regret": r["mu"]["regret"],
            "wall": wall, "rss_kb": rss}


def run_theirs(python, events, delta, h):
    spec = json.dumps({"events": events, "delta": delta, "h": h})
    p = subprocess.run([python, "-c", WORKER, spec], capture_output=True, text=True)
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {p.returncode}"}
    return json.loads(p.stdout)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "privacy-ledger"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--h", type=float, default=1e-4)
    ap.add_argument("--json")
    a = ap.parse_args()
    # Process start-up of our binary (an empty ledger), reported so it can be discounted.
    empty = [run_ours(a.binary, [], 1e-5, a.h) for _ in range(5)]
    startup = median([e["wall"] for e in empty if "wall" in e])
    results = []
    print(f"{'case':30s} {'ours s':>8s} {'dpa s':>7s} {'gdpnum s':>8s} {'ratio':>6s} "
          f"{'eps ours':>10s} {'eps dpa':>10s} {'d_eps':>8s} {'mu ours':>8s} {'mu gdpnum':>9s} "
          f"{'MB ours':>7s} {'MB dpa':>6s}")
    for name in a.cases.split(","):
        events, delta = CASES[name]
        ours = [run_ours(a.binary, events, delta, a.h) for _ in range(a.repeats)]
        theirs = [run_theirs(a.python, events, delta, a.h) for _ in range(a.repeats)]
        if "error" in ours[0] or "error" in theirs[0]:
            print(f"{name:30s} error: ours={ours[0].get('error')} theirs={theirs[0].get('error')}")
            results.append({"case": name, "ours": ours[0], "theirs": theirs[0]})
            continue
        t_ours = median([o["wall"] for o in ours])
        t_dpa = median([t["t_dpa"] for t in theirs])
        t_gdp = median([t["t_gdpnum"] for t in theirs])
        e_o, e_t = ours[0]["eps"], theirs[0]["eps"]
        mu_o, mu_t = ours[0]["mu"], theirs[0]["mu"]
        if e_o is None or e_t is None:  # ε = +∞ on one side: report instead of failing
            print(f"{name:30s} eps ours={e_o} dp_accounting={e_t}")
            results.append({"case": name, "ours": ours[0], "theirs": theirs[0]})
            continue
        row = {"case": name, "t_ours": t_ours, "t_dp_accounting": t_dpa, "t_gdpnum": t_gdp,
               "ratio": (t_dpa + t_gdp) / t_ours, "eps_ours": e_o, "eps_dp_accounting": e_t,
               "rel_d_eps": abs(e_o - e_t) / e_t, "mu_ours": mu_o, "mu_gdpnum": mu_t,
               "d_mu": None if mu_t is None or mu_o is None else abs(mu_o - mu_t),
               "rss_mb_ours": ours[0]["rss_kb"] / 1024, "rss_mb_theirs": theirs[0]["rss_kb"] / 1024}
        results.append(row)
        print(f"{name:30s} {t_ours:8.3f} {t_dpa:7.3f} {t_gdp:8.3f} {row['ratio']:6.1f} "
              f"{e_o:10.6f} {e_t:10.6f} {row['rel_d_eps']:8.1e} {mu_o or float('nan'):8.4f} "
              f"{mu_t or float('nan'):9.4f} {row['rss_mb_ours']:7.1f} {row['rss_mb_theirs']:6.1f}")
    ok = [r for r in results if "ratio" in r]
    tot_o = sum(r["t_ours"] for r in ok)
    tot_t = sum(r["t_dp_accounting"] + r["t_gdpnum"] for r in ok)
    within = all(r["rel_d_eps"] <= 1e-3 for r in ok)
    print(f"\ntotal: ours {tot_o:.3f} s (process start-up {startup * 1000:.1f} ms each), "
          f"dp_accounting + gdpnum {tot_t:.3f} s, ratio {tot_t / tot_o:.1f}x; "
          f"every eps within 0.1% of dp_accounting: {within}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"h": a.h, "startup_s": startup, "cases": results}, fh, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Certified two-sided brackets (issue 14), side by side with prv_accountant, in one run.

For each DP-SGD case (Poisson subsampling, add/remove neighbours, grid 1e-4) it prints:
- ours: ε(δ) as [epsilon_lower, epsilon] and μ as [mu.lower, mu.upper] from one
  `privacy-ledger account` call, with the wall time of the whole process (median of --repeats);
- the same call on a baseline binary (--baseline; e.g. a build from before the lower PMFs, which
  computed the upper end only), for the time ratio the issue bounds by 2x;
- prv_accountant 0.2.0 (Gopi, Lee & Wutschitz 2021): its certified [eps_lower, eps_upper] at
  eps_error 0.001 (the bracket the issue quotes), timed inside the Python process.

Goal (issue 14, item 2): lower ε ≥ upper ε·(1 − 1e-3) and lower μ ≥ upper μ·(1 − 1e-3) at grid 1e-4,
in at most 2x the baseline's time. Run with `bash bench/brackets.sh` (installs prv-accountant).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = {
    "MNIST q=256/60000 s=1.1 T=14100": (256 / 60000, 1.1, 14100),
    "CIFAR-10 De et al. q=0.32768 s=9.4 T=2000": (16384 / 50000, 9.4, 2000),
    "CIFAR-10 De et al. q=0.32768 s=40 T=906": (16384 / 50000, 40.0, 906),
    "q=1e-3 s=0.8 T=1e5": (1e-3, 0.8, 100000),
}

PRV = r'''
import json, sys, time
from prv_accountant import Accountant
s = json.loads(sys.argv[1])
t = time.perf_counter()
acc = Accountant(noise_multiplier=s["sigma"], sampling_probability=s["q"], delta=s["delta"],
                 eps_error=s["eps_error"], max_compositions=s["steps"])
lo, est, hi = acc.compute_epsilon(num_compositions=s["steps"])
print(json.dumps({"lo": lo, "est": est, "hi": hi, "wall": time.perf_counter() - t}))
'''


def run_ours(binary, q, sigma, steps, delta, h):
    req = {"events": [{"type": "self_composed", "count": steps,
                       "event": {"type": "poisson_sampled", "sampling_rate": q,
                                 "event": {"type": "gaussian", "noise_multiplier": sigma}}}],
           "deltas": [delta], "grid_step": h, "neighboring_relation": "add_or_remove_one"}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(req, fh)
        path = fh.name
    try:
        t = time.perf_counter()
        p = subprocess.run([binary, "account", path], capture_output=True, text=True)
        wall = time.perf_counter() - t
    finally:
        os.unlink(path)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    r = json.loads(p.stdout)
    e = r["epsilon"][0]
    return {"eps": e["epsilon"], "eps_lo": e.get("epsilon_lower"), "mu": r["mu"]["upper"],
            "mu_lo": r["mu"]["lower"], "wall": wall}


def run_prv(python, q, sigma, steps, delta, eps_error):
    spec = json.dumps({"q": q, "sigma": sigma, "steps": steps, "delta": delta,
                       "eps_error": eps_error})
    p = subprocess.run([python, "-c", PRV, spec], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    return json.loads(p.stdout)


def med(runs, key):
    xs = [r[key] for r in runs if key in r]
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "privacy-ledger"))
    ap.add_argument("--baseline", help="an upper-only build of privacy-ledger, for the time ratio")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--h", type=float, default=1e-4)
    ap.add_argument("--eps-error", type=float, default=1e-3)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    print(f"{'case':44s} {'ours eps [lower, upper]':>26s} {'rel':>8s} {'ours mu [lower, upper]':>24s} "
          f"{'rel':>8s} {'s':>6s} {'base s':>7s} {'x':>5s} {'prv eps [lower, upper]':>24s} {'prv s':>7s}")
    for name, (q, sigma, steps) in CASES.items():
        ours = [run_ours(a.binary, q, sigma, steps, a.delta, a.h) for _ in range(a.repeats)]
        if "error" in ours[0]:
            print(f"{name}: ours failed: {ours[0]['error']}")
            continue
        o = ours[0]
        t_ours = med(ours, "wall")
        t_base = float("nan")
        if a.baseline:
            base = [run_ours(a.baseline, q, sigma, steps, a.delta, a.h) for _ in range(a.repeats)]
            t_base = med(base, "wall")
        prv = run_prv(a.python, q, sigma, steps, a.delta, a.eps_error)
        rel_e = 1 - o["eps_lo"] / o["eps"]
        rel_m = 1 - o["mu_lo"] / o["mu"]
        prv_s = (f"[{prv['lo']:.4f}, {prv['hi']:.4f}]" if "lo" in prv
                 else f"failed: {prv.get('error', '')[:40]}")
        print(f"{name:44s} [{o['eps_lo']:.5f}, {o['eps']:.5f}] {rel_e:8.1e} "
              f"[{o['mu_lo']:.5f}, {o['mu']:.5f}] {rel_m:8.1e} {t_ours:6.3f} {t_base:7.3f} "
              f"{t_ours / t_base:5.2f} {prv_s:>24s} {prv.get('wall', float('nan')):7.2f}")
        rows.append({"case": name, "ours": o, "t_ours": t_ours, "t_baseline": t_base,
                     "eps_rel_width": rel_e, "mu_rel_width": rel_m, "prv": prv})
    ok = [r for r in rows if r["eps_rel_width"] <= 1e-3 and r["mu_rel_width"] <= 1e-3]
    print(f"\n{len(ok)}/{len(rows)} cases with both brackets within 1e-3 relative")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()

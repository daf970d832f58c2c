#!/usr/bin/env python3
"""privacy-ledger against two anchor libraries, three ways, in one run.

Anchors (each in a fresh Python process per case and library, timed inside the process after its
imports and one warm-up run; median of --repeats):
  * Google dp_accounting 0.6.0 + gdpnum 0.1.2: PLDAccountant composition + get_epsilon(δ), then
    gdpnum's PLDConverter(acc._pld).get_mu_and_regret() on the same PLD (times reported apart and
    summed per run);
  * Opake (opake-accounting 0.16.1): the same events composed as PLDs on the same grid, epsilon_at(δ).
The anchors are measured once per run and shared by the three modes of ours:
  lib      the accountant in-process (target/release/examples/speed, bench/speed.rs; one process
           per case, one warm-up run, then --repeats timed runs of parse + account + report JSON);
  service  `privacy-ledger serve` on a temporary SQLite database, POST /v1/accountant/compose over
           one keep-alive HTTP/1.1 connection (one warm-up request, then --repeats timed ones);
  process  `privacy-ledger account FILE` as a whole process (--repeats fresh processes).
Same grid step h and the same δ per case on every side; pessimistic (connect-the-dots) PLDs.

Usage: bash bench/run.sh [--modes lib,service,process] [--repeats 3] [--cases a,b] [--h 1e-4]
                         [--json out.json] [--identical]
"""
import argparse
import datetime
import http.client
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ("lib", "service", "process")


# Events in our JSON form (src/accountant/event.rs); the workers below translate them.
def G(s):
    return {"type": "gaussian", "noise_multiplier": s}


def L(b):
    return {"type": "laplace", "noise_multiplier": b}


def DL(a, sensitivity=1):
    return {"type": "discrete_laplace", "noise_parameter": a, "sensitivity": sensitivity}


def RR(p, k):
    return {"type": "randomized_response", "noise_parameter": p, "num_buckets": k}


def ED(eps, delta):
    return {"type": "epsilon_delta", "epsilon": eps, "delta": delta}


def PS(q, e):
    return {"type": "poisson_sampled", "sampling_rate": q, "event": e}


def SC(n, e):
    return {"type": "self_composed", "count": n, "event": e}


def case(events, delta, relation="add_or_remove_one"):
    return {"events": events, "delta": delta, "relation": relation}


def mixed_400():
    """400 top-level events, every parameter distinct. The kinds are those both our service and
    dp_accounting accept in one ledger: randomized response (replace_one only, on both sides) cannot
    share a ledger with Laplace (dp_accounting: add_or_remove_one or replace_special only; we have
    no replace_special), so the fourth hundred is discrete Laplace; randomized response has a case
    of its own."""
    ev = [PS(0.001 + 0.00005 * i, G(1.0 + 0.01 * i)) for i in range(100)]
    ev += [G(20.0 + 0.5 * i) for i in range(100)]
    ev += [L(50.0 + 1.0 * i) for i in range(100)]
    ev += [DL(0.01 + 0.0001 * i) for i in range(100)]
    return ev


Q_CIFAR = 16384 / 50000
CASES = {
    "de_cifar10_sigma40_T906": case([SC(906, PS(Q_CIFAR, G(40.0)))], 1e-5),
    "de_cifar10_sigma9.4_T2000": case([SC(2000, PS(Q_CIFAR, G(9.4)))], 1e-5),
    "opacus_sigma1.5_q0.04_T2250": case([SC(2250, PS(0.04, G(1.5)))], 1e-5),
    "q1e-3_sigma0.8_T1e5": case([SC(100000, PS(1e-3, G(0.8)))], 1e-6),
    "gaussians_30_distinct": case([G(1.0 + 0.5 * i) for i in range(30)], 1e-5),
    "laplace_b10_x100": case([SC(100, L(10.0))], 1e-5),
    "mixed_ledger": case([SC(100, PS(5e-3, G(0.8))), SC(200, G(8.0)), SC(100, L(10.0))], 1e-6),
    "mnist_sigma1.1_q256of60000_T14100": case([SC(14100, PS(256 / 60000, G(1.1)))], 1e-5),
    "sigma0.6_q0.01_T1e4": case([SC(10000, PS(0.01, G(0.6)))], 1e-5),
    "mixed_400_distinct": case(mixed_400(), 1e-5),
    "rr_p0.98_k2_x1000": case([SC(1000, RR(0.98, 2))], 1e-5, "replace_one"),
    "eps_delta_0.1_1e-8_x100": case([SC(100, ED(0.1, 1e-8))], 1e-5),
}

# dp_accounting + gdpnum, in a fresh interpreter: imports, one warm-up run, --repeats timed runs.
DPA_WORKER = r'''
import json, resource, statistics, sys, time
from dp_accounting import dp_event, privacy_accountant
from dp_accounting.pld import common, pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as PLD
from gdpnum import PLDConverter
spec = json.loads(sys.argv[1])
h, delta = spec["h"], spec["delta"]
REL = {"add_or_remove_one": privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
       "replace_one": privacy_accountant.NeighboringRelation.REPLACE_ONE}[spec["relation"]]
def conv(e):
    t = e["type"]
    if t == "gaussian": return dp_event.GaussianDpEvent(e["noise_multiplier"])
    if t == "laplace": return dp_event.LaplaceDpEvent(e["noise_multiplier"])
    if t == "discrete_laplace": return dp_event.DiscreteLaplaceDpEvent(e["noise_parameter"], e["sensitivity"])
    if t == "poisson_sampled": return dp_event.PoissonSampledDpEvent(e["sampling_rate"], conv(e["event"]))
    if t == "self_composed": return dp_event.SelfComposedDpEvent(conv(e["event"]), e["count"])
    raise ValueError(f"no dp_accounting event for {t}")
# Kinds composed as dp_accounting's own PLDs instead of through PLDAccountant:
# * epsilon_delta: dp_accounting 0.6.0 has no EpsilonDeltaDpEvent (PLDAccountant: "Unsupported
#   event."); from_privacy_parameters is its pessimistic PLD of an (eps, delta) guarantee.
# * randomized_response: PLDAccountant 0.6.0 composes a RandomizedResponseDpEvent once whatever its
#   count (SelfComposedDpEvent(RR, 1000) gives the eps of one RR); the PLD it would compose, made the
#   same way (from_randomized_response, pessimistic, this relation), self-composed count times.
DIRECT = ("epsilon_delta", "randomized_response")
def direct_pld(e):
    if e["type"] == "epsilon_delta":
        return PLD.from_privacy_parameters(common.DifferentialPrivacyParameters(e["epsilon"], e["delta"]),
                                           value_discretization_interval=h)
    return PLD.from_randomized_response(noise_parameter=e["noise_parameter"], num_buckets=e["num_buckets"],
                                        value_discretization_interval=h, neighboring_relation=REL)
def compose(acc, e, count=1):
    if e["type"] == "self_composed" and e["event"]["type"] in DIRECT:
        return compose(acc, e["event"], count * e["count"])
    if e["type"] in DIRECT:
        p = direct_pld(e)
        acc._pld = acc._pld.compose(p.self_compose(count) if count > 1 else p)
        return
    acc.compose(conv(e), count)
def pipeline():
    t0 = time.perf_counter()
    acc = pld_privacy_accountant.PLDAccountant(neighboring_relation=REL, value_discretization_interval=h)
    for e in spec["events"]:
        compose(acc, e)
    eps = acc.get_epsilon(delta)
    t1 = time.perf_counter()
    mu = regret = err = None
    try:
        mu, regret = PLDConverter(acc._pld).get_mu_and_regret()
        mu, regret = float(mu), float(regret)
    except Exception as ex:  # report, do not abort
        err = f"{type(ex).__name__}: {ex}"
    t2 = time.perf_counter()
    return eps, mu, regret, err, t1 - t0, t2 - t1
eps, mu, regret, err, _, _ = pipeline()  # warm-up
runs = [pipeline() for _ in range(spec["repeats"])]
t_dpa = [r[4] for r in runs]
t_gdp = [r[5] for r in runs]
print(json.dumps({"eps": eps if eps != float("inf") else None, "mu": mu, "regret": regret,
                  "gdpnum_error": err, "t_dpa_runs": t_dpa, "t_gdpnum_runs": t_gdp,
                  "t_dpa": statistics.median(t_dpa), "t_gdpnum": statistics.median(t_gdp),
                  "t": statistics.median([a + b for a, b in zip(t_dpa, t_gdp)]),
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
'''

# Opake, in a fresh interpreter. The opake.accounting facade holds only the generic mechanisms
# (eps_delta, identity, nonprivate); its Gaussian and Poisson factories are in opake-dpsgd (not
# installed), so the native functions documented in opake_accounting.pyi are called directly, which
# also keeps the facade's per-process PLD cache (pld_cache) from answering the timed runs. Opake's
# discretisation is connect-the-dots (pessimistic) with no setting to choose another; a PLD keeps
# both directions (remove, add) and epsilon_at takes the worse.
OPAKE_WORKER = r'''
import json, resource, statistics, sys, time
from opake.api.accounting.core import opake_accounting as native
spec = json.loads(sys.argv[1])
h, delta = spec["h"], spec["delta"]
def build(e, cfg):
    t = e["type"]
    if t == "gaussian": return native.gaussian_pld(e["noise_multiplier"], cfg)
    if t == "poisson_sampled": return native.poisson_pld(build(e["event"], cfg), e["sampling_rate"])
    if t == "self_composed": return build(e["event"], cfg).self_compose(e["count"])
    if t == "epsilon_delta": return native.eps_delta_pld(e["epsilon"], e["delta"], cfg)
    raise ValueError(f"no Opake PLD for {t}")
def pipeline():
    t0 = time.perf_counter()
    # Everything but the grid step at the library's defaults, which are dp_accounting's (tails below
    # exp(-50) truncated per mechanism, 1e-15 of tail mass per composition).
    cfg = native.DiscretizationConfig(discretization=h)
    pld = None
    for e in spec["events"]:
        p = build(e, cfg)
        pld = p if pld is None else pld.compose(p)
    eps = pld.epsilon_at(delta)
    return eps, time.perf_counter() - t0
eps, _ = pipeline()  # warm-up
runs = [pipeline()[1] for _ in range(spec["repeats"])]
print(json.dumps({"eps": eps if eps != float("inf") else None, "t_runs": runs,
                  "t": statistics.median(runs),
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
'''

OPAKE_KINDS = {"gaussian", "poisson_sampled", "self_composed", "epsilon_delta"}
OPAKE_MISSING = {
    "laplace": "Laplace",
    "discrete_laplace": "discrete Laplace",
    "randomized_response": "randomized response",
}


def opake_gaps(events):
    """The event kinds of `events` Opake cannot express (opake-accounting 0.16.1 has PLDs for the
    Gaussian family, Poisson subsampling and (ε, δ) guarantees only)."""
    gaps = set()

    def walk(e):
        if e["type"] not in OPAKE_KINDS:
            gaps.add(OPAKE_MISSING.get(e["type"], e["type"]))
        if e["type"] == "poisson_sampled" and e["event"]["type"] != "gaussian":
            gaps.add("Poisson subsampling of " + e["event"]["type"])
        if "event" in e:
            walk(e["event"])
    for e in events:
        walk(e)
    return sorted(gaps)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def last_line(text, fallback):
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else fallback


def request_of(c, h, step=None):
    req = {"events": c["events"], "deltas": [c["delta"]], "grid_step": step or h}
    if c["relation"] != "add_or_remove_one":
        req["neighboring_relation"] = c["relation"]
    return req


def perturbed(h, k, identical):
    """The grid step of timed run k (k ≥ 1). Our leaf PLDs are memoised per process, keyed by the
    event, the relation and h (src/accountant/composition.rs `leaf_pld`), so a repeat of the same
    request would skip discretising its mechanisms, which neither Python library can do:
    h·(1 + k·10⁻¹²) is another key for the same work (the grid moves in the twelfth digit)."""
    return h if identical else h * (1 + 1e-12 * k)


def ours_summary(report):
    p = report["epsilon"][0]
    return {"eps": p["epsilon"], "eps_lower": p["epsilon_lower"], "mu": report["mu"]["upper"]}


# --- the anchors -------------------------------------------------------------------------------

def run_worker(python, code, spec):
    p = subprocess.run([python, "-c", code, json.dumps(spec)], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": last_line(p.stderr, f"exit {p.returncode}")}
    return json.loads(p.stdout)


def measure_python(a, names):
    out = {}
    for name in names:
        c = CASES[name]
        spec = {"events": c["events"], "delta": c["delta"], "relation": c["relation"], "h": a.h,
                "repeats": a.repeats}
        dpa = run_worker(a.python, DPA_WORKER, spec)
        gaps = opake_gaps(c["events"])
        if gaps:
            opake = {"skipped": "Opake cannot express " + ", ".join(gaps)}
        else:
            opake = run_worker(a.python, OPAKE_WORKER, spec)
        out[name] = {"dp_accounting_gdpnum": dpa, "opake": opake}
        print(f"  {name:34s} dpa+gdpnum {fmt_t(dpa.get('t'))} s  Opake "
              f"{fmt_t(opake.get('t')) if 't' in opake else '-'} s", flush=True)
    return out


# --- ours, three ways --------------------------------------------------------------------------

def run_lib(a, names):
    """One process of the speed example per case (so its peak RSS is the case's own)."""
    out = {}
    for name in names:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump({name: request_of(CASES[name], a.h)}, fh)
            path = fh.name
        try:
            cmd = [a.speed, "--repeats", str(a.repeats), path] + (["--identical"] if a.identical else [])
            p = subprocess.run(cmd, capture_output=True, text=True)
        finally:
            os.unlink(path)
        if p.returncode != 0 or not p.stdout.strip():
            out[name] = {"error": last_line(p.stderr, f"exit {p.returncode}")}
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        if "error" in r:
            out[name] = {"error": r["error"]}
            continue
        out[name] = {"t": r["median_s"], "runs": r["runs"], "eps": r["eps"],
                     "eps_lower": r["eps_lower"], "mu": r["mu_upper"], "rss_kb": r["rss_kb"]}
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def reset_peak(pid):
    """Resets the process's peak RSS (VmHWM) so the next reading is one case's own; False when the
    kernel does not let us (then readings are the peak since start)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def run_service(a, names):
    tmp = tempfile.mkdtemp(prefix="pl-bench-")
    db = f"sqlite://{tmp}/bench.db"
    # The first admin token, from the CLI on the fresh database (README: `token create`).
    t = subprocess.run([a.binary, "token", "create", "--database-url", db, "--name", "bench",
                        "--role", "admin"], capture_output=True, text=True)
    token = next((w for w in t.stdout.split() if w.startswith("pl_")), None)
    if t.returncode != 0 or token is None:
        err = last_line(t.stderr, f"token create: exit {t.returncode}")
        return {n: {"error": err} for n in names}, {}
    port = free_port()
    log = open(os.path.join(tmp, "serve.log"), "w")
    # A rate limit far above what one connection sends: cheap cases must not meet 429.
    proc = subprocess.Popen([a.binary, "serve", "--listen", f"127.0.0.1:{port}", "--database-url", db,
                             "--rate-limit-per-second", "100000"],
                            stdout=log, stderr=subprocess.STDOUT)
    out, info = {}, {"pid": proc.pid, "log": log.name}
    try:
        deadline = time.time() + 30
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    c.close()
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                log.flush()
                with open(log.name) as fh:
                    err = last_line(fh.read(), "the service did not start")
                return {n: {"error": err} for n in names}, info
            time.sleep(0.1)
        info["peak_reset"] = True
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

        def post(body):
            t0 = time.perf_counter()
            conn.request("POST", "/v1/accountant/compose", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return time.perf_counter() - t0, resp.status, data

        for name in names:
            c = CASES[name]
            bodies = [json.dumps(request_of(c, a.h, perturbed(a.h, k, a.identical))).encode()
                      for k in range(a.repeats + 1)]
            info["peak_reset"] &= reset_peak(proc.pid)
            _, status, data = post(bodies[0])  # warm-up (and the answer, at exactly h)
            if status != 200:
                out[name] = {"error": f"HTTP {status}: {data.decode(errors='replace')}"}
                continue
            runs, failed = [], None
            for body in bodies[1:]:
                dt, status, d = post(body)
                if status != 200:
                    failed = f"HTTP {status}: {d.decode(errors='replace')}"
                    break
                runs.append(dt)
            if failed:
                out[name] = {"error": failed}
                continue
            out[name] = {"t": median(runs), "runs": runs, "rss_kb": vm_hwm_kb(proc.pid),
                         **ours_summary(json.loads(data))}
        conn.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out, info


def run_process_once(binary, req):
    """`privacy-ledger account FILE` as a whole process: wall time and its own peak RSS (wait4)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(req, fh)
        path = fh.name
    try:
        with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
            t0 = time.perf_counter()
            p = subprocess.Popen([binary, "account", path], stdout=so, stderr=se)
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
            so.seek(0)
            se.seek(0)
            stdout, stderr = so.read().decode(), se.read().decode()
    finally:
        os.unlink(path)
    if p.returncode != 0:
        return {"error": last_line(stderr, f"exit {p.returncode}")}
    return {"wall": wall, "rss_kb": ru.ru_maxrss, **ours_summary(json.loads(stdout))}


def run_process(a, names):
    out = {}
    for name in names:
        runs = [run_process_once(a.binary, request_of(CASES[name], a.h)) for _ in range(a.repeats)]
        if "error" in runs[0]:
            out[name] = {"error": runs[0]["error"]}
            continue
        out[name] = {"t": median([r["wall"] for r in runs]), "runs": [r["wall"] for r in runs],
                     "rss_kb": max(r["rss_kb"] for r in runs),
                     **{k: runs[0][k] for k in ("eps", "eps_lower", "mu")}}
    return out


# --- tables ------------------------------------------------------------------------------------

def fmt_t(x):
    if x is None:
        return "-"
    return f"{x:.3f}" if x >= 0.1 else f"{x:.4f}" if x >= 1e-3 else f"{x:.1e}"


def fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def fmt_x(x):
    return "-" if x is None else f"{x:.1f}" if x >= 0.1 else f"{x:.0e}"


def mb(kb):
    return None if kb is None else kb / 1024


def rows_for(ours, py, names):
    rows = []
    for name in names:
        o, d, k = ours.get(name, {}), py[name]["dp_accounting_gdpnum"], py[name]["opake"]
        row = {"case": name}
        if "error" in o:
            row["error_ours"] = o["error"]
        else:
            row.update(t_ours=o["t"], eps_ours=o["eps"], eps_lower_ours=o["eps_lower"],
                       mu_ours=o["mu"], mb_ours=mb(o["rss_kb"]))
        if "error" in d:
            row["error_dpa"] = d["error"]
        else:
            row.update(t_dpa_gdpnum=d["t"], t_dpa=d["t_dpa"], t_gdpnum=d["t_gdpnum"], eps_dpa=d["eps"],
                       mu_gdpnum=d["mu"], mb_dpa=mb(d["rss_kb"]))
        if "skipped" in k:
            row["opake_note"] = k["skipped"]
        elif "error" in k:
            row["error_opake"] = k["error"]
        else:
            row.update(t_opake=k["t"], eps_opake=k["eps"], mb_opake=mb(k["rss_kb"]))
        if row.get("t_ours"):
            if row.get("t_dpa_gdpnum"):
                row["ratio_dpa"] = row["t_dpa_gdpnum"] / row["t_ours"]
            if row.get("t_opake"):
                row["ratio_opake"] = row["t_opake"] / row["t_ours"]
        if row.get("eps_ours") is not None and row.get("eps_dpa"):
            row["rel_d_eps_dpa"] = abs(row["eps_ours"] - row["eps_dpa"]) / row["eps_dpa"]
        if row.get("eps_ours") is not None and row.get("eps_opake"):
            row["rel_d_eps_opake"] = abs(row["eps_ours"] - row["eps_opake"]) / row["eps_opake"]
        rows.append(row)
    return rows


HEAD = (f"{'case':34s} {'ours s':>8s} {'dpa+gdp s':>9s} {'Opake s':>8s} {'x dpa':>6s} {'x Opk':>6s} "
        f"{'eps ours':>10s} {'eps lower':>10s} {'eps dpa':>10s} {'eps Opake':>10s} {'d_eps dpa':>9s} "
        f"{'MB ours':>7s} {'MB dpa':>6s} {'MB Opk':>6s}")


def print_table(mode, rows):
    print(f"\n== mode: {mode}")
    print(HEAD)
    for r in rows:
        if "error_ours" in r:
            print(f"{r['case']:34s} ours failed: {r['error_ours']}")
            continue
        print(f"{r['case']:34s} {fmt_t(r.get('t_ours')):>8s} {fmt_t(r.get('t_dpa_gdpnum')):>9s} "
              f"{'n/a' if 'opake_note' in r else fmt_t(r.get('t_opake')):>8s} "
              f"{fmt_x(r.get('ratio_dpa')):>6s} "
              f"{fmt_x(r.get('ratio_opake')):>6s} {fmt(r.get('eps_ours'), '10.6f'):>10s} "
              f"{fmt(r.get('eps_lower_ours'), '10.6f'):>10s} {fmt(r.get('eps_dpa'), '10.6f'):>10s} "
              f"{fmt(r.get('eps_opake'), '10.6f'):>10s} {fmt(r.get('rel_d_eps_dpa'), '9.1e'):>9s} "
              f"{fmt(r.get('mb_ours'), '7.0f'):>7s} {fmt(r.get('mb_dpa'), '6.0f'):>6s} "
              f"{fmt(r.get('mb_opake'), '6.0f'):>6s}")
        if "error_dpa" in r:
            print(f"{'':34s} (dp_accounting failed: {r['error_dpa']})")
        if "error_opake" in r:
            print(f"{'':34s} (Opake failed: {r['error_opake']})")
    both = [r for r in rows if "ratio_dpa" in r]
    with_opake = [r for r in rows if "ratio_opake" in r]
    tot = {"cases": len(both)}
    if both:
        tot.update(ours=sum(r["t_ours"] for r in both), dpa_gdpnum=sum(r["t_dpa_gdpnum"] for r in both))
        tot["ratio_dpa"] = tot["dpa_gdpnum"] / tot["ours"]
        print(f"total over {len(both)} cases: ours {tot['ours']:.3f} s, dp_accounting + gdpnum "
              f"{tot['dpa_gdpnum']:.3f} s: {fmt_x(tot['ratio_dpa'])}x")
    if with_opake:
        tot.update(opake_cases=[r["case"] for r in with_opake],
                   ours_on_opake_cases=sum(r["t_ours"] for r in with_opake),
                   opake=sum(r["t_opake"] for r in with_opake))
        tot["ratio_opake"] = tot["opake"] / tot["ours_on_opake_cases"]
        print(f"total over the {len(with_opake)} cases Opake expresses: ours "
              f"{tot['ours_on_opake_cases']:.3f} s, Opake {fmt_t(tot['opake'])} s: {fmt_x(tot['ratio_opake'])}x")
    compared = [r for r in rows if "rel_d_eps_dpa" in r]
    within = bool(compared) and all(r["rel_d_eps_dpa"] <= 1e-3 for r in compared)
    worst = max((r["rel_d_eps_dpa"] for r in compared), default=float("nan"))
    tot.update(eps_within_0_1pct_of_dpa=within, worst_rel_d_eps_dpa=worst,
               eps_compared=len(compared), eps_not_compared=[r["case"] for r in rows
                                                            if "rel_d_eps_dpa" not in r])
    print(f"every eps of ours within 0.1 % of dp_accounting's: {within} "
          f"({len(compared)} compared, worst {worst:.1e}"
          + (f"; not compared: {', '.join(tot['eps_not_compared'])}" if tot["eps_not_compared"] else "")
          + ")")
    for r in compared:
        if r["rel_d_eps_dpa"] > 1e-3:
            side = "below (tighter than)" if r["eps_ours"] < r["eps_dpa"] else "ABOVE"
            print(f"  {r['case']}: ours {r['eps_ours']:.6f} (lower bracket {r['eps_lower_ours']:.6f}) is "
                  f"{side} dp_accounting's {r['eps_dpa']:.6f} by {r['rel_d_eps_dpa']:.1e}")
    return tot


def load():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load averages " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "privacy-ledger"))
    ap.add_argument("--speed", default=os.path.join(ROOT, "target", "release", "examples", "speed"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--h", type=float, default=1e-4)
    ap.add_argument("--identical", action="store_true",
                    help="time identical repeated requests in lib and service modes (our leaf-PLD "
                         "memo answers them); by default each timed request has its own grid step")
    ap.add_argument("--json")
    a = ap.parse_args()
    # A terminated run still stops the service it started (the finally blocks run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = [n for n in a.cases.split(",") if n]
    modes = [m for m in a.modes.split(",") if m]
    bad = [n for n in names if n not in CASES] + [m for m in modes if m not in MODES]
    if bad or a.repeats < 1:
        ap.error(f"unknown case or mode {bad}; cases: {', '.join(CASES)}; modes: {', '.join(MODES)}"
                 if bad else "--repeats must be >= 1")

    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = load()
    print(f"date (UTC): {started:%Y-%m-%d %H:%M:%S}")
    print(f"uptime: {load_start}")
    print(f"nproc: {os.cpu_count()}")
    print(f"h = {a.h:g}, repeats = {a.repeats}, modes = {','.join(modes)}")

    notes = {n: opake_gaps(CASES[n]["events"]) for n in names}
    for n, gaps in notes.items():
        if gaps:
            print(f"note: Opake 0.16.1 cannot express {', '.join(gaps)}: left out of {n}")

    print("\nanchors (in-process Python, measured once, shared by every mode):", flush=True)
    py = measure_python(a, names)

    results, totals, extra = {}, {}, {}
    for mode in modes:
        print(f"\nmeasuring ours: {mode}", flush=True)
        if mode == "lib":
            ours = run_lib(a, names)
        elif mode == "service":
            ours, extra["service"] = run_service(a, names)
            if extra["service"].get("peak_reset") is False:
                print("note: could not reset the service's peak RSS: MB ours is the peak since start")
        else:
            empty = [run_process_once(a.binary, {"events": [], "deltas": [1e-5]}) for _ in range(5)]
            extra["process_startup_s"] = median([e["wall"] for e in empty if "wall" in e])
            ours = run_process(a, names)
        results[mode] = rows_for(ours, py, names)

    for mode in modes:
        totals[mode] = print_table(mode, results[mode])
        if mode == "process":
            print(f"process start-up on an empty ledger: {extra['process_startup_s'] * 1000:.1f} ms "
                  f"(median of 5)")
    gdp_errors = {n: py[n]["dp_accounting_gdpnum"].get("gdpnum_error") for n in names
                  if py[n]["dp_accounting_gdpnum"].get("gdpnum_error")}
    for n, e in gdp_errors.items():
        print(f"note: gdpnum failed on {n} (time counted up to the failure): {e}")
    load_end = load()
    print(f"\nuptime at the end: {load_end}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"date_utc": started.isoformat(), "uptime_start": load_start,
                       "uptime_end": load_end, "loadavg_end": os.getloadavg(),
                       "nproc": os.cpu_count(), "h": a.h, "repeats": a.repeats,
                       "identical_requests": a.identical, "modes": modes,
                       "cases": {n: CASES[n] for n in names}, "opake_cannot_express": notes,
                       "anchors": py, "results": results, "totals": totals, **extra},
                      fh, indent=1)


if __name__ == "__main__":
    main()

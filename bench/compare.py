#!/usr/bin/env python3
"""Benchmark: privacy-ledger vs dp_accounting 0.6.0 (PLDAccountant) + gdpnum 0.1.2.

For every case the same ledger (in privacy-ledger's JSON event model) is run

  (a) through our binary, `privacy-ledger account FILE`, as a fresh process per
      repeat (one call returns epsilon at delta, mu-GDP with its regret, and the
      rest of the report);
  (b) through what a user of the Python tools runs to get the same two headline
      figures: dp_accounting's PLDAccountant (its own defaults: pessimistic
      estimate, connect-the-dots where the accountant uses it, the same grid
      step h) composing the events and answering get_epsilon(delta), then
      gdpnum's PLDConverter(pld).get_mu_and_regret() on that same PLD. Each
      repeat is a fresh Python process (this script re-invoked with --worker),
      so its peak RSS is that case's alone.

Timing:
  * Python side: measured inside the worker with time.perf_counter(), after the
    imports (interpreter start-up and `import dp_accounting` are excluded).
    "dpacc" = PLDAccountant construction + compose() of every event (this is
    where dp_accounting builds and composes the PLDs) + get_epsilon(delta).
    "gdpnum" = PLDConverter(acc._pld) + get_mu_and_regret().
  * Our side: wall time of the whole process (spawn to exit, so it includes
    process start-up, reading/parsing the request and printing the report),
    and "net" = that minus the median wall time of a trivial `account` call
    with an empty event list (process start-up + I/O).
  * Every case is repeated R times (--repeats, default 3); medians are shown.

Memory: peak resident set size (ru_maxrss) of the child process, read with
os.wait4() on that exact child (not RUSAGE_CHILDREN, which would mix children).
For the Python side this includes the interpreter, numpy and scipy; the RSS
right after the imports is recorded too ("rss_after_import_kib" in --json).

Our binary may not yet support every event (exit code 3 = "needs the numerical
engine"): a failing run is recorded (exit code + stderr) and the benchmark goes
on; such a case is left out of the totals and makes the accuracy verdict
INCOMPLETE.

Only the standard library is needed to run this script; the worker needs
dp-accounting==0.6.0 and gdpnum==0.1.2 in the interpreter given by --python
(default: the one running this script). See bench/run.sh.
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_BINARY = os.path.join(ROOT, 'target', 'release', 'privacy-ledger')
DEFAULT_H = 1e-4
EPS_REL_TOL = 1e-3  # "within 0.1% of dp_accounting"
AOR = 'add_or_remove_one'

# ---------------------------------------------------------------------------
# Cases (privacy-ledger JSON event model).
# ---------------------------------------------------------------------------


def G(sigma):
  return {'type': 'gaussian', 'noise_multiplier': sigma}


def L(b):
  return {'type': 'laplace', 'noise_multiplier': b}


def PS(q, ev):
  return {'type': 'poisson_sampled', 'sampling_rate': q, 'event': ev}


def SC(count, ev):
  return {'type': 'self_composed', 'count': count, 'event': ev}


CIFAR_Q = 16384 / 50000  # De et al. 2022, CIFAR-10: batch 16384 of 50000

# name -> (events, delta, description)
CASES = {
    'cifar10_sigma40_T906': (
        [SC(906, PS(CIFAR_Q, G(40.0)))], 1e-5,
        'De et al. 2022 CIFAR-10: q=16384/50000, sigma=40, T=906'),
    'cifar10_sigma9.4_T2000': (
        [SC(2000, PS(CIFAR_Q, G(9.4)))], 1e-5,
        'De et al. 2022 CIFAR-10: q=16384/50000, sigma=9.4, T=2000'),
    'opacus_q0.04_sigma1.5_T2250': (
        [SC(2250, PS(0.04, G(1.5)))], 1e-5,
        'Opacus canonical: q=0.04, sigma=1.5, T=2250'),
    'q1e-3_sigma0.8_T1e5': (
        [SC(100000, PS(1e-3, G(0.8)))], 1e-6,
        'DP-SGD q=1e-3, sigma=0.8, T=1e5 (delta=1e-6)'),
    'gaussians_30_distinct': (
        [G(1.0 + 0.5 * i) for i in range(30)], 1e-5,
        '30 Gaussians sigma_i = 1 + 0.5 i, i=0..29, as 30 separate events'),
    'laplace_b10_x100': (
        [SC(100, L(10.0))], 1e-5,
        '100 Laplace b=10 (self_composed count 100)'),
    'mixed_ledger': (
        [SC(100, PS(5e-3, G(0.8))), SC(200, G(8.0)), SC(100, L(10.0))], 1e-6,
        'poisson_sampled(q=5e-3, gaussian 0.8) x100 + gaussian 8 x200 + '
        'laplace 10 x100 (delta=1e-6)'),
}

# ---------------------------------------------------------------------------
# Worker: one case through dp_accounting + gdpnum, in a fresh process.
# ---------------------------------------------------------------------------


def _finite_or_none(x):
  if x is None:
    return None
  x = float(x)
  return None if math.isinf(x) or math.isnan(x) else x


def worker_main(spec_path):
  """Runs one case; prints one JSON object on stdout."""
  import resource  # pylint: disable=import-outside-toplevel
  out = {'ok': False}
  with open(spec_path) as f:
    spec = json.load(f)
  try:
    # pylint: disable=import-outside-toplevel
    from importlib import metadata
    from dp_accounting import dp_event
    from dp_accounting import privacy_accountant
    from dp_accounting.pld import pld_privacy_accountant
    import gdpnum  # noqa: F401
    from gdpnum import PLDConverter
    import numpy
    import scipy
  except Exception as e:  # pylint: disable=broad-except
    out['error'] = f'import failed: {type(e).__name__}: {e}'
    print(json.dumps(out))
    return
  out['versions'] = {
      'dp_accounting': metadata.version('dp-accounting'),
      'gdpnum': metadata.version('gdpnum'),
      'numpy': numpy.__version__,
      'scipy': scipy.__version__,
      'python': platform.python_version(),
  }
  out['rss_after_import_kib'] = _maxrss_kib(
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
  rel = privacy_accountant.NeighboringRelation
  relation = (rel.ADD_OR_REMOVE_ONE if spec['neighboring_relation'] == AOR
              else rel.REPLACE_ONE)

  def to_dp_event(ev):
    t = ev['type']
    if t == 'gaussian':
      return dp_event.GaussianDpEvent(float(ev['noise_multiplier']))
    if t == 'laplace':
      return dp_event.LaplaceDpEvent(float(ev['noise_multiplier']))
    if t == 'gdp':  # no GDP event in dp_accounting: Gaussian of sigma 1/mu
      scale = 1.0 if relation == rel.ADD_OR_REMOVE_ONE else 2.0
      return dp_event.GaussianDpEvent(scale / float(ev['mu']))
    if t == 'poisson_sampled':
      return dp_event.PoissonSampledDpEvent(float(ev['sampling_rate']),
                                           to_dp_event(ev['event']))
    if t == 'self_composed':
      return dp_event.SelfComposedDpEvent(to_dp_event(ev['event']),
                                         int(ev['count']))
    if t == 'composed':
      return dp_event.ComposedDpEvent([to_dp_event(e) for e in ev['events']])
    raise ValueError(f'event type {t!r} is not mapped in bench/compare.py')

  try:
    dp_events = [to_dp_event(e) for e in spec['events']]  # not timed
    h = float(spec['h'])
    delta = float(spec['delta'])

    t0 = time.perf_counter()
    acc = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=relation, value_discretization_interval=h)
    for ev in dp_events:
      acc.compose(ev)
    eps = acc.get_epsilon(delta)
    t1 = time.perf_counter()
    out['dpacc_seconds'] = t1 - t0
    out['epsilon'] = _finite_or_none(eps)
    pld = acc._pld  # pylint: disable=protected-access
    out['pmf_sizes'] = {
        'remove': int(pld._pmf_remove.size),  # pylint: disable=protected-access
        'add': (None if pld._symmetric  # pylint: disable=protected-access
                else int(pld._pmf_add.size)),  # pylint: disable=protected-access
    }
  except Exception as e:  # pylint: disable=broad-except
    out['error'] = f'dp_accounting: {type(e).__name__}: {e}'[:500]
    out['rss_kib'] = _maxrss_kib(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    print(json.dumps(out))
    return

  t2 = time.perf_counter()
  try:
    mu, regret = PLDConverter(pld).get_mu_and_regret()
    out['mu'] = _finite_or_none(mu)
    out['regret'] = _finite_or_none(regret)
  except Exception as e:  # pylint: disable=broad-except
    out['gdpnum_error'] = f'{type(e).__name__}: {e}'[:500]
  out['gdpnum_seconds'] = time.perf_counter() - t2
  out['ok'] = True
  out['rss_kib'] = _maxrss_kib(
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
  print(json.dumps(out))


# ---------------------------------------------------------------------------
# Process runner: wall time + peak RSS of exactly one child.
# ---------------------------------------------------------------------------


def _maxrss_kib(ru_maxrss):
  # Linux reports KiB, macOS bytes.
  return ru_maxrss // 1024 if sys.platform == 'darwin' else ru_maxrss


def run_child(argv, timeout):
  """Runs argv; returns dict(rc, wall, rss_kib, stdout, stderr, timed_out)."""
  with tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fout,
                            stderr=ferr)
    timed_out = []

    def kill():
      timed_out.append(True)
      try:
        proc.kill()
      except OSError:
        pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
      _, status, ru = os.wait4(proc.pid, 0)
    finally:
      timer.cancel()
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc  # we reaped it ourselves
    fout.seek(0)
    ferr.seek(0)
    return {
        'rc': rc,
        'wall': wall,
        'rss_kib': _maxrss_kib(ru.ru_maxrss),
        'stdout': fout.read().decode('utf-8', 'replace'),
        'stderr': ferr.read().decode('utf-8', 'replace'),
        'timed_out': bool(timed_out),
    }


def _write_json_tmp(obj, tmpdir, name):
  path = os.path.join(tmpdir, name)
  with open(path, 'w') as f:
    json.dump(obj, f)
  return path


def _median(xs):
  xs = [x for x in xs if x is not None]
  return statistics.median(xs) if xs else None


def _short_err(run):
  if run['timed_out']:
    return 'timed out'
  msg = run['stderr'].strip().splitlines()
  msg = msg[-1] if msg else ''
  return f'exit {run["rc"]}: {msg}'[:300]


# ---------------------------------------------------------------------------
# The two sides.
# ---------------------------------------------------------------------------


def our_request(events, delta, h):
  return {'events': events, 'neighboring_relation': AOR, 'deltas': [delta],
          'grid_step': h}


def measure_startup(binary, h, repeats, timeout, tmpdir):
  path = _write_json_tmp(our_request([], 1e-5, h), tmpdir, 'empty.json')
  walls, err, rss = [], None, None
  for _ in range(max(repeats, 5)):
    r = run_child([binary, 'account', path], timeout)
    rss = max(rss or 0, r['rss_kib'])
    if r['rc'] != 0:
      err = _short_err(r)
      break
    walls.append(r['wall'])
  return {'wall': _median(walls), 'runs': walls, 'rss_kib': rss, 'error': err}


def run_ours(binary, name, events, delta, h, repeats, timeout, tmpdir):
  path = _write_json_tmp(our_request(events, delta, h), tmpdir,
                         f'ours_{name}.json')
  res = {'ok': False, 'walls': [], 'rss_kib': None, 'error': None}
  for _ in range(repeats):
    r = run_child([binary, 'account', path], timeout)
    res['rss_kib'] = max(res['rss_kib'] or 0, r['rss_kib'])
    if r['rc'] != 0:
      res['error'] = _short_err(r)
      res['exit_code'] = r['rc']
      return res  # a failure is deterministic: do not repeat it
    res['walls'].append(r['wall'])
    try:
      rep = json.loads(r['stdout'])
    except ValueError as e:
      res['error'] = f'unparsable report: {e}'
      return res
  res['ok'] = True
  res['wall'] = _median(res['walls'])
  res['method'] = rep.get('method')
  eps_rows = [row for row in rep.get('epsilon', [])
              if row.get('delta') == delta] or rep.get('epsilon', [])
  res['epsilon'] = eps_rows[0].get('epsilon') if eps_rows else None
  res['epsilon_lower'] = eps_rows[0].get('epsilon_lower') if eps_rows else None
  mu = rep.get('mu') or {}
  res['mu'] = mu.get('upper')
  res['mu_lower'] = mu.get('lower')
  res['regret'] = mu.get('regret')
  res['mu_reason'] = mu.get('reason')
  return res


def run_theirs(python, name, events, delta, h, repeats, timeout, tmpdir):
  spec = {'events': events, 'neighboring_relation': AOR, 'delta': delta,
          'h': h}
  path = _write_json_tmp(spec, tmpdir, f'theirs_{name}.json')
  res = {'ok': False, 'dpacc_runs': [], 'gdpnum_runs': [], 'total_runs': [],
         'rss_kib': None, 'error': None}
  out = None
  for _ in range(repeats):
    r = run_child([python, os.path.abspath(__file__), '--worker', path],
                  timeout)
    res['rss_kib'] = max(res['rss_kib'] or 0, r['rss_kib'])
    try:
      out = json.loads(r['stdout'].strip().splitlines()[-1])
    except (ValueError, IndexError):
      res['error'] = _short_err(r)
      return res
    if not out.get('ok'):
      res['error'] = out.get('error') or _short_err(r)
      return res
    res['dpacc_runs'].append(out['dpacc_seconds'])
    res['gdpnum_runs'].append(out['gdpnum_seconds'])
    res['total_runs'].append(out['dpacc_seconds'] + out['gdpnum_seconds'])
  res['ok'] = True
  res['dpacc'] = _median(res['dpacc_runs'])
  res['gdpnum'] = _median(res['gdpnum_runs'])
  res['total'] = _median(res['total_runs'])
  for k in ('epsilon', 'mu', 'regret', 'gdpnum_error', 'pmf_sizes',
            'versions', 'rss_after_import_kib'):
    res[k] = out.get(k)
  return res


# ---------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------


def rel_diff(ours, theirs):
  """|ours - theirs| / theirs; None (JSON) means +infinity."""
  if ours is None and theirs is None:
    return 0.0
  if ours is None or theirs is None:
    return math.inf
  if theirs == 0:
    return 0.0 if ours == 0 else math.inf
  return abs(ours - theirs) / abs(theirs)


def fmt(x, spec='.4g', none='-'):
  if x is None:
    return none
  if isinstance(x, float) and math.isinf(x):
    return 'inf'
  return format(x, spec)


def fmt_ms(s):
  return fmt(None if s is None else s * 1e3, '.1f')


def fmt_mib(kib):
  return fmt(None if kib is None else kib / 1024, '.1f')


def _json_safe(x):
  """Strict JSON: +-infinity and NaN become null."""
  if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
    return None
  if isinstance(x, dict):
    return {k: _json_safe(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_json_safe(v) for v in x]
  return x


def _git_describe():
  try:
    return subprocess.run(
        ['git', '-C', ROOT, 'describe', '--always', '--dirty', '--abbrev=12'],
        capture_output=True, text=True, timeout=10, check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None


def main():
  ap = argparse.ArgumentParser(
      description=__doc__.split('\n\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter,
      epilog='cases: ' + ', '.join(CASES))
  ap.add_argument('--binary', default=DEFAULT_BINARY,
                  help='privacy-ledger binary (default: %(default)s)')
  ap.add_argument('--repeats', type=int, default=3,
                  help='runs per case and side; medians are reported '
                  '(default: %(default)s)')
  ap.add_argument('--cases', default=None,
                  help='comma-separated case names (default: all)')
  ap.add_argument('--h', type=float, default=DEFAULT_H,
                  help='grid step / value_discretization_interval '
                  '(default: %(default)s)')
  ap.add_argument('--json', dest='json_out', default=None,
                  help='write machine-readable results to this file')
  ap.add_argument('--python', default=sys.executable,
                  help='interpreter with dp-accounting and gdpnum for the '
                  'worker (default: this one, %(default)s)')
  ap.add_argument('--timeout', type=float, default=1800.0,
                  help='seconds per single run before it is killed '
                  '(default: %(default)s)')
  ap.add_argument('--list', action='store_true', help='list the cases')
  ap.add_argument('--worker', metavar='SPEC', help=argparse.SUPPRESS)
  args = ap.parse_args()

  if args.worker:
    worker_main(args.worker)
    return 0
  if args.list:
    for name, (_, delta, desc) in CASES.items():
      print(f'{name:30s} delta={delta:g}  {desc}')
    return 0
  if args.repeats < 1:
    ap.error('--repeats must be >= 1')
  if args.cases:
    names = [n.strip() for n in args.cases.split(',') if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
      ap.error(f'unknown case(s) {", ".join(unknown)}; known: '
               + ', '.join(CASES))
  else:
    names = list(CASES)
  binary = os.path.abspath(args.binary)
  have_binary = os.path.isfile(binary) and os.access(binary, os.X_OK)

  print(f'privacy-ledger: {binary} (git {_git_describe()})')
  print(f'h = {args.h:g}, repeats = {args.repeats} (medians), '
        f'relation = {AOR}, host: {platform.machine()}, '
        f'{os.cpu_count()} CPUs, python {platform.python_version()}',
        flush=True)

  results = []
  with tempfile.TemporaryDirectory(prefix='pl-bench-') as tmpdir:
    if have_binary:
      startup = measure_startup(binary, args.h, args.repeats, args.timeout,
                                tmpdir)
    else:
      startup = {'wall': None, 'runs': [],
                 'error': f'binary not found or not executable: {binary}'}
    if startup['error']:
      print(f'our start-up baseline: FAILED ({startup["error"]})')
    else:
      print(f'our start-up baseline (empty `account` call): '
            f'{fmt_ms(startup["wall"])} ms, {fmt_mib(startup["rss_kib"])} MiB')
    print(flush=True)

    for name in names:
      events, delta, desc = CASES[name]
      print(f'[{name}] {desc} ...', end=' ', flush=True)
      if have_binary:
        ours = run_ours(binary, name, events, delta, args.h, args.repeats,
                        args.timeout, tmpdir)
      else:
        ours = {'ok': False, 'error': startup['error'], 'rss_kib': None}
      theirs = run_theirs(args.python, name, events, delta, args.h,
                          args.repeats, args.timeout, tmpdir)
      case = {'name': name, 'description': desc, 'delta': delta,
              'events': events, 'ours': ours, 'theirs': theirs}
      if ours['ok'] and startup['wall'] is not None:
        ours['net'] = ours['wall'] - startup['wall']
      if ours['ok'] and theirs['ok']:
        case['ratio'] = theirs['total'] / ours['wall']
        case['ratio_net'] = (theirs['total'] / ours['net']
                             if ours.get('net', 0) > 0 else None)
        case['eps_rel_diff'] = rel_diff(ours['epsilon'], theirs['epsilon'])
        case['eps_within_tol'] = case['eps_rel_diff'] <= EPS_REL_TOL
        if ours['mu'] is not None and theirs.get('mu') is not None:
          case['mu_abs_diff'] = abs(ours['mu'] - theirs['mu'])
      results.append(case)
      print('ours: ' + ('ok' if ours['ok'] else 'FAILED') + ', theirs: '
            + ('ok' if theirs['ok'] else 'FAILED'), flush=True)

  # ---- per-case tables ----------------------------------------------------
  print()
  print('Time (ms, median of %d) and peak RSS (MiB)' % args.repeats)
  hdr = (f'{"case":30s} {"ours":>9s} {"ours net":>9s} {"dpacc":>9s} '
         f'{"gdpnum":>9s} {"theirs":>9s} {"ratio":>7s} {"ratio net":>9s} '
         f'{"RSS ours":>9s} {"RSS theirs":>10s} {"(imports)":>9s}')
  print(hdr)
  print('-' * len(hdr))
  for c in results:
    o, t = c['ours'], c['theirs']
    print(f'{c["name"]:30s} {fmt_ms(o.get("wall")):>9s} '
          f'{fmt_ms(o.get("net")):>9s} {fmt_ms(t.get("dpacc")):>9s} '
          f'{fmt_ms(t.get("gdpnum")):>9s} {fmt_ms(t.get("total")):>9s} '
          f'{fmt(c.get("ratio"), ".1f"):>7s} '
          f'{fmt(c.get("ratio_net"), ".1f"):>9s} '
          f'{fmt_mib(o.get("rss_kib")):>9s} {fmt_mib(t.get("rss_kib")):>10s} '
          f'{fmt_mib(t.get("rss_after_import_kib")):>9s}')
  print('ratio = theirs / ours (> 1: we are faster); ours = process wall '
        'time, ours net = minus the empty-call start-up; theirs = dpacc + '
        'gdpnum, in-process (no interpreter start-up or imports). RSS is '
        'the peak of the whole process; (imports) = theirs right after '
        'importing Python + numpy + scipy + dp_accounting + gdpnum.')

  print()
  print('Accuracy (ours = privacy-ledger upper bound; theirs = dp_accounting '
        'epsilon, gdpnum mu)')
  hdr = (f'{"case":30s} {"delta":>6s} {"eps ours":>11s} {"eps dpacc":>11s} '
         f'{"rel |de|":>9s} {"mu ours":>9s} {"mu gdpnum":>9s} '
         f'{"|dmu|":>9s} {"regret ours":>11s} {"regret gdpnum":>13s} '
         f'{"method":>8s}')
  print(hdr)
  print('-' * len(hdr))
  for c in results:
    o, t = c['ours'], c['theirs']
    print(f'{c["name"]:30s} {c["delta"]:>6.0e} '
          f'{fmt(o.get("epsilon"), ".7g", "inf" if o["ok"] else "-"):>11s} '
          f'{fmt(t.get("epsilon"), ".7g", "inf" if t["ok"] else "-"):>11s} '
          f'{fmt(c.get("eps_rel_diff"), ".2e"):>9s} '
          f'{fmt(o.get("mu"), ".6g"):>9s} {fmt(t.get("mu"), ".6g"):>9s} '
          f'{fmt(c.get("mu_abs_diff"), ".2e"):>9s} '
          f'{fmt(o.get("regret"), ".3e"):>11s} '
          f'{fmt(t.get("regret"), ".3e"):>13s} '
          f'{(o.get("method") or "-"):>8s}')
  problems = []
  for c in results:
    for side in ('ours', 'theirs'):
      if c[side].get('error'):
        problems.append(f'{c["name"]}: {side} failed: {c[side]["error"]}')
    if c['theirs'].get('gdpnum_error'):
      problems.append(f'{c["name"]}: gdpnum failed: '
                      f'{c["theirs"]["gdpnum_error"]}')
    if c['ours'].get('ok') and c['ours'].get('mu') is None:
      problems.append(f'{c["name"]}: our mu is null '
                      f'({c["ours"].get("mu_reason")})')

  # ---- totals -------------------------------------------------------------
  both = [c for c in results if 'ratio' in c]
  sum_ours = sum(c['ours']['wall'] for c in both)
  sum_net = sum(c['ours'].get('net') or 0.0 for c in both)
  sum_dpacc = sum(c['theirs']['dpacc'] for c in both)
  sum_gdpnum = sum(c['theirs']['gdpnum'] for c in both)
  sum_theirs = sum(c['theirs']['total'] for c in both)
  totals = {
      'cases_compared': len(both), 'cases_total': len(results),
      'ours_wall': sum_ours, 'ours_net': sum_net, 'theirs_dpacc': sum_dpacc,
      'theirs_gdpnum': sum_gdpnum, 'theirs_total': sum_theirs,
      'ratio': sum_theirs / sum_ours if sum_ours > 0 else None,
      'ratio_net': sum_theirs / sum_net if sum_net > 0 else None,
  }
  n_ok = sum(1 for c in both if c['eps_within_tol'])
  if len(both) < len(results):
    verdict = ('INCOMPLETE' if n_ok == len(both) else 'NO')
  else:
    verdict = 'YES' if n_ok == len(both) and both else 'NO'
  totals['eps_within_0.1pct'] = verdict
  totals['eps_within_0.1pct_count'] = n_ok
  print()
  print(f'TOTAL over {len(both)}/{len(results)} cases run by both: ours '
        f'{fmt_ms(sum_ours)} ms (net {fmt_ms(sum_net)} ms) vs theirs '
        f'{fmt_ms(sum_theirs)} ms (dpacc {fmt_ms(sum_dpacc)} + gdpnum '
        f'{fmt_ms(sum_gdpnum)}): ratio {fmt(totals["ratio"], ".1f")}x '
        f'(net {fmt(totals["ratio_net"], ".1f")}x)')
  print(f'every epsilon within 0.1% of dp_accounting: {verdict} '
        f'({n_ok}/{len(both)} compared within, '
        f'{len(results) - len(both)} not compared)')
  if problems:
    print()
    print('Problems:')
    for p in problems:
      print('  ' + p)

  if args.json_out:
    versions = next((c['theirs'].get('versions') for c in results
                     if c['theirs'].get('versions')), None)
    doc = {
        'meta': {
            'binary': binary, 'git': _git_describe(), 'h': args.h,
            'repeats': args.repeats, 'neighboring_relation': AOR,
            'eps_rel_tol': EPS_REL_TOL, 'python_side_versions': versions,
            'host': {'machine': platform.machine(),
                     'system': platform.system(),
                     'release': platform.release(),
                     'cpus': os.cpu_count()},
            'time': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
            'startup': startup,
        },
        'cases': results,
        'totals': totals,
    }
    with open(args.json_out, 'w') as f:
      json.dump(_json_safe(doc), f, indent=1, allow_nan=False)
      f.write('\n')
    print(f'\nwrote {args.json_out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())

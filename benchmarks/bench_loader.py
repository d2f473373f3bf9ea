"""How long the smoke test takes, and how close its recommendation is to an exhaustive sweep's best.

For the built-in synthetic dataset and one loader of the test suite (the sleep-bound "remote read"),
in the same run on the same machine:

- the smoke test's wall time (`envdoctor loader`, default 15 s budget) — the baseline it is
  compared with is the exhaustive sweep's wall time;
- the throughput the exhaustive sweep measures at the recommended num_workers, as a ratio of the
  best throughput the exhaustive sweep finds over num_workers 0, 1, 2, 3, 4, 6, 8 (1.0 = the
  recommendation is the best; the smoke test aims for >= 0.95 by picking the knee).

Run from the repository root:  python benchmarks/bench_loader.py [--budget 15] [--point 1.5]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXHAUSTIVE = [0, 1, 2, 3, 4, 6, 8]


def smoke(args: list[str], budget: float) -> tuple[dict, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "fixtures"), env.get("PYTHONPATH")]))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envdoctor", "loader", *args, "--budget", str(budget),
                           "--format", "json"], capture_output=True, text=True, env=env, cwd=str(ROOT / "fixtures"))
    wall = time.monotonic() - start
    return json.loads(proc.stdout)["loader"], wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=15.0, help="the smoke test's budget (default 15)")
    parser.add_argument("--point", type=float, default=1.5, help="seconds each exhaustive point is timed")
    options = parser.parse_args()
    from envdoctor.loader import exhaustive_sweep

    cases = [
        ("synthetic", [], {"kind": "synthetic"}),
        ("suite:remote_read", ["--dataset", "loaderfixtures.suite:remote_read"],
         {"kind": "factory", "spec": "loaderfixtures.suite:remote_read", "cwd": str(ROOT / "fixtures")}),
    ]
    sys.path.insert(0, str(ROOT / "fixtures"))
    print(f"{'dataset':<20} {'smoke s':>8} {'sweep s':>8} {'speed-up':>8} {'rec nw':>6} "
          f"{'best nw':>7} {'ratio':>6}  bottleneck")
    for name, args, source in cases:
        loader, smoke_wall = smoke(args, options.budget)
        start = time.monotonic()
        section = exhaustive_sweep(source, EXHAUSTIVE, point_s=options.point, cwd=str(ROOT / "fixtures"))
        sweep_wall = time.monotonic() - start
        rates = {r["num_workers"]: r["samples_per_s"] for r in section["runs"] if r.get("samples_per_s")}
        rec = (loader.get("recommendation") or {}).get("num_workers")
        best_nw = max(rates, key=rates.get) if rates else None
        ratio = rates.get(rec, 0.0) / rates[best_nw] if rates and rec is not None else float("nan")
        print(f"{name:<20} {smoke_wall:>8.1f} {sweep_wall:>8.1f} {sweep_wall / smoke_wall:>7.1f}x {rec!s:>6} "
              f"{best_nw!s:>7} {ratio:>6.2f}  {loader.get('bottleneck')}")
        print(f"{'':<20} smoke curve {[(r['num_workers'], r['samples_per_s']) for r in loader['runs']]}")
        print(f"{'':<20} sweep curve {sorted(rates.items())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

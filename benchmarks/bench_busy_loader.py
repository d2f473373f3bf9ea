"""Does the smoke test's pick hold under one busy core? The two loaders of issue 23, judged in the same run.

Beside a busy core (`python -c 'while True: pass'`, started here and killed at the end), for each loader in
fixtures/loaderfixtures/busy.py — the CPU-heavy dataset (about 4 ms of pure Python a sample) and the image
folder (Pillow decode when Pillow is installed, else the same crop/flip/normalise of a stored array; torch ops
on the main process's intra-op threads at num_workers=0):

1. `envdoctor loader --dataset … --format json`: the bottleneck, the CPUs other processes held (others_cpu),
   the pick and its trust, and SYS005's main-process thread contention (the samples re-fetched with one
   intra-op thread) when it fires;
2. every worker count in [0, 1, 2, 4] and the pick re-measured (`exhaustive_sweep`, `--point` s each), the best
   among them (computing workers past the usable CPUs left out, as the recommendation leaves them out);
3. when the best is not the pick, the two re-measured against each other in paired windows, and the ratio:
   the geometric mean of pick / best over the pairs.

A case passes at a ratio of at least 0.9, or when the report said it could not tell (trust "too-noisy", or
"incomplete" with the user's setting kept); a pick the budget cut short ("incomplete" with a pick, the
report saying more may gain) still has to reach 0.9. Measured here, never asserted in the tests.

Run from the repository root:  python benchmarks/bench_busy_loader.py [--budget 20] [--point 1.0]
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from pathlib import Path

from bench_loader import smoke  # the same `envdoctor loader` run as the quiet benchmark's

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
EXHAUSTIVE = [0, 1, 2, 4]
REACH = 0.9
# The four shapes of issue 32, and the two loaders of issue 23: CPU-bound (pure Python; decode and augment),
# slow worker start-up, I/O-bound (a wait per sample) and IPC-bound (samples that cost nothing to make).
CASES = {
    "cpu-bound": "loaderfixtures.busy:cpu_heavy",
    "cpu-bound, image decode": "loaderfixtures.busy:image_folder",
    "slow start": "loaderfixtures.suite:slow_worker_start",
    "I/O-bound": "loaderfixtures.suite:remote_read",
    "IPC-bound": "loaderfixtures.suite:tiny_samples",
}


def paired_ratio(source: dict, pick: int, best: int) -> float | None:
    from envdoctor.loader import exhaustive_sweep

    again = exhaustive_sweep(source, [pick, best], point_s=0.5, cwd=str(FIXTURES), pair=(best, pick))
    pairs = (again.get("paired") or {}).get("windows") or []
    logs = [math.log(w["candidate_samples_per_s"] / w["current_samples_per_s"]) for w in pairs
            if w["candidate_samples_per_s"] > 0 and w["current_samples_per_s"] > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def one_case(spec: str, options: argparse.Namespace) -> bool:
    from envdoctor.inside.loader_knee import computes_past_cpus
    from envdoctor.judge.bottleneck import others_cpus
    from envdoctor.loader import exhaustive_sweep

    report, wall = smoke(spec, options.budget)
    loader = report["loader"]
    rec = loader.get("recommendation") or {}
    pick = rec.get("num_workers")
    trust = rec.get("trust", "-")
    usable = loader.get("usable_cpus") or 1
    source = {"kind": "factory", "spec": spec, "cwd": str(FIXTURES)}
    workers = sorted(set(EXHAUSTIVE) | ({pick} if pick is not None else set()))
    section = exhaustive_sweep(source, workers, point_s=options.point, cwd=str(FIXTURES))
    rates = {r["num_workers"]: r["samples_per_s"] for r in section["runs"] if r["samples_per_s"]}
    eligible = {r["num_workers"]: r["samples_per_s"] for r in section["runs"]
                if r["samples_per_s"] and not computes_past_cpus(r, usable)}
    best = max(eligible, key=lambda n: eligible[n]) if eligible else None
    ratio = None
    if pick is not None and best is not None:
        ratio = 1.0 if best == pick else paired_ratio(source, pick, best)
        if ratio is None and pick in rates:  # the pairs ran out of budget: the re-measured points, then
            ratio = rates[pick] / rates[best]
    kept = rec.get("basis") == "current"
    # "incomplete" with a pick: the budget cut the curve and the report said more workers may gain more.
    ok = (ratio is not None and ratio >= REACH) or trust == "too-noisy" or (trust == "incomplete" and kept)
    name = spec.removeprefix("loaderfixtures.")
    print(f"== {name}: smoke {wall:.1f} s, others held {others_cpus(loader)} of {usable} CPUs")
    print(f"   smoke sweep   {[(r['num_workers'], r['samples_per_s']) for r in loader.get('runs', [])]}")
    print(f"   bottleneck    {loader.get('bottleneck')}: {loader.get('bottleneck_reason')}")
    print(f"   pick          num_workers={pick} trust={trust} gain={rec.get('gain')} "
          f"interval={rec.get('gain_interval')} baseline={rec.get('current_basis')} "
          f"(sweep {rec.get('current_sweep_samples_per_s')}, used {rec.get('current_samples_per_s')})")
    for hit in report.get("findings", []):
        if hit["rule"] == "SYS005" and "threads_median_s" in hit["evidence"]:
            ev = hit["evidence"]
            print(f"   SYS005        {ev.get('intra_op_threads')} intra-op threads: "
                  f"{(ev.get('threads_median_s') or 0) * 1e3:.2f} ms a sample, "
                  f"{(ev.get('one_thread_median_s') or 0) * 1e3:.2f} ms with one thread")
    print(f"   re-measured   {sorted(rates.items())}; best {best}")
    said = {"too-noisy": " (said it could not tell)",
            "incomplete": " (said it could not tell)" if kept else
            f" (said the budget cut the curve before num_workers={rec.get('unmeasured')}: more may gain)"}
    print(f"   ratio         {ratio if ratio is None else round(ratio, 2)} -> {'ok' if ok else 'MISS'}"
          + said.get(trust, ""))
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget", type=float, default=20.0, help="the smoke test's budget (default 20)")
    parser.add_argument("--point", type=float, default=1.0, help="seconds each re-measured point is timed")
    parser.add_argument("--rounds", type=int, default=1, help="times to run each case")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="run only these (repeatable)")
    options = parser.parse_args()
    sys.path.insert(0, str(FIXTURES))
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    results = []
    try:
        print(f"conditions: one core busy beside it, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
              f"budget {options.budget:g} s, points of {options.point:g} s")
        for _ in range(options.rounds):
            for name in options.case or CASES:
                print(f"-- {name}")
                results.append(one_case(CASES[name], options))
    finally:
        busy.kill()
        busy.wait()
    print(f"{sum(results)} of {len(results)} picks reach {REACH:g} of the best re-measured setting or say they "
          "could not tell")
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

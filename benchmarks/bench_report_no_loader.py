"""Wall time of `envdoctor report --no-loader` against `python -m torch.utils.collect_env`.

Both run on the same environment (this interpreter), in the same run, each as
a fresh process, alternating so background load hits both alike; the figure
is the median of the runs. The target is a ratio of 0.2 or less: the static
checks must cost a fraction of what importing torch alone costs, which is why
they read torch's version and build from its files instead.

    python benchmarks/bench_report_no_loader.py [--runs 5] [--data PATH]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, NO_COLOR="1"))
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1 = findings, which is a normal report
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data", help="pass --data PATH to envdoctor (adds the storage read probe)")
    args = parser.parse_args()
    ours = [sys.executable, "-m", "envdoctor", "report", "--json", "--no-loader"]
    if args.data:
        ours += ["--data", args.data]
    baseline = [sys.executable, "-m", "torch.utils.collect_env"]
    timed(ours), timed(baseline)  # warm the page cache for both before measuring
    our_times, base_times = [], []
    for _ in range(args.runs):
        our_times.append(timed(ours))
        base_times.append(timed(baseline))
    ours_s, base_s = statistics.median(our_times), statistics.median(base_times)
    print(f"envdoctor report --no-loader : {ours_s:.3f} s (median of {args.runs}; runs: "
          + ", ".join(f"{t:.2f}" for t in our_times) + ")")
    print(f"python -m torch.utils.collect_env: {base_s:.3f} s (median of {args.runs}; runs: "
          + ", ".join(f"{t:.2f}" for t in base_times) + ")")
    print(f"ratio: {ours_s / base_s:.3f} (target <= 0.2)")


if __name__ == "__main__":
    main()

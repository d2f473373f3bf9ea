"""How much `import envdoctor` adds to interpreter start-up.

Measures, in the same run and interleaved: `python -c pass` (the baseline)
and `python -c "import envdoctor"`, best of N wall times each, and the
self-reported cumulative import time from `-X importtime`. Prints the
figures and the ratio. Target: under 60 ms of extra import time.

    python benchmarks/bench_import.py [--runs 30]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def importtime_us() -> int:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import envdoctor"],
                         capture_output=True, text=True, check=True).stderr
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == "envdoctor":
            return int(parts[1])
    raise SystemExit("envdoctor not found in -X importtime output")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    base, imp = [], []
    for _ in range(runs):  # interleaved so machine noise hits both alike
        base.append(wall([sys.executable, "-c", "pass"]))
        imp.append(wall([sys.executable, "-c", "import envdoctor"]))
    cumulative = statistics.median(importtime_us() for _ in range(5))
    b, i = min(base), min(imp)
    print(f"baseline  python -c pass:              best {b * 1000:7.1f} ms  median {statistics.median(base) * 1000:7.1f} ms")
    print(f"candidate python -c 'import envdoctor': best {i * 1000:7.1f} ms  median {statistics.median(imp) * 1000:7.1f} ms")
    print(f"extra wall time (best): {(i - b) * 1000:.1f} ms; ratio import/baseline: {i / b:.2f}")
    print(f"-X importtime cumulative for envdoctor: {cumulative / 1000:.1f} ms (target < 60 ms)")


if __name__ == "__main__":
    main()

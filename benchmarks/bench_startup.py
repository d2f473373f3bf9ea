"""What one short `envdoctor` run costs in CPU: the runs the test suite and the pre-commit hook start.

Each run is a fresh process, as the suite's `run_envdoctor` children and the
pre-commit hook are; what they cost is mostly start-up (importing envdoctor,
its dependencies and the catalog), not the checks. Measured, interleaved so
machine noise hits each alike, as CPU time (user + system, this process's
children: wall time on a busy machine says more about the machine):

* `check --no-loader --select PKG,CHN --prefix VENV --format json` on a fresh
  `--without-pip` venv (the hostile corpus's kind of target),
* the pre-commit hook, `check --no-loader --select SPW001,SPW004 SCRIPT`,
* `render REPORT` (text) and `compare REPORT REPORT` of a saved report,
* `python -c pass`, the baseline.

Prints the best and the median of each. The target: the PKG,CHN check in
about half the CPU it took before rule modules were imported lazily (0.23-0.30 s
on the 2-core development machine; CONTRIBUTING.md, Benchmarks, has the figures).

    python benchmarks/bench_startup.py [--runs 20]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def cpu(argv: list[str], cwd: str) -> float:
    """User + system seconds of one run (the children this process waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, cwd=cwd, env=dict(os.environ, NO_COLOR="1"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):  # 1 = findings, a normal run
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    envdoctor = [sys.executable, "-m", "envdoctor"]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        venv = Path(tmp, "venv")
        subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                       check=True)
        script = Path(tmp, "train.py")
        script.write_text("from torch.utils.data import DataLoader\n\n"
                          "loader = DataLoader(range(10), num_workers=2)\nfor batch in loader:\n    pass\n")
        report = Path(tmp, "node.json")
        subprocess.run([*envdoctor, "report", "--no-loader", "--select", "SYS", "-o", str(report)], check=True)
        cases = {
            "check PKG,CHN --format json": [*envdoctor, "check", "--no-loader", "--select", "PKG,CHN", "--prefix",
                                            str(venv), "--format", "json"],
            "pre-commit hook (SPW001,SPW004)": [*envdoctor, "check", "--no-loader", "--select", "SPW001,SPW004",
                                                str(script)],
            "render (text)": [*envdoctor, "render", str(report)],
            "compare (2 reports)": [*envdoctor, "compare", str(report), str(report)],
            "python -c pass": [sys.executable, "-c", "pass"],
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for argv in cases.values():  # warm the page cache (and, where bytecode is not written, nothing more)
            cpu(argv, tmp)
        for _ in range(runs):
            for name, argv in cases.items():
                times[name].append(cpu(argv, tmp))
    for name, values in times.items():
        print(f"{name:34} CPU best {min(values) * 1000:6.0f} ms  median {statistics.median(values) * 1000:6.0f} ms")


if __name__ == "__main__":
    main()

"""Benchmark: envdoctor's static package checks against `pip check` on one big environment.

Generates an environment with N Python distributions (default 2,000), each
also recorded in conda-meta the way a conda installer records it (files,
paths_data with sizes and sha256, the dist-info it owns, INSTALLER = conda),
with Requires-Dist between them. Then, in the same run, it times

  * envdoctor: `envdoctor report --json --no-loader --select PKG CHN --prefix P`
    (starting envdoctor, asking the target interpreter for its sys.path,
    reading every record and dist-info, stat-ing every recorded file, running
    PKG001-PKG009 and CHN001-CHN003), and
  * the baseline: `P/bin/python -m pip check` (reading every dist-info and
    checking requirements, nothing else),

each as a fresh process, alternating, best of R runs each, and prints both and the ratio.

    python benchmarks/bench_static_check.py [--dists 2000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _write(path: Path, data: bytes) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"sha256": hashlib.sha256(data).hexdigest(), "size_in_bytes": len(data)}


def make_environment(root: Path, count: int) -> Path:
    """A venv holding `count` distributions, each with a conda-meta record that owns it."""
    prefix = root / "env"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(prefix)], check=True)
    site = next(prefix.glob("lib/python3*/site-packages"))
    site_rel = site.relative_to(prefix).as_posix()
    # pip itself, linked in from the running interpreter, so `P/bin/python -m pip check` works offline.
    import pip

    pip_dir = Path(pip.__file__).parent
    os.symlink(pip_dir, site / "pip")
    for info in pip_dir.parent.glob("pip-*.dist-info"):
        os.symlink(info, site / info.name)
    meta = prefix / "conda-meta"
    meta.mkdir()
    for i in range(count):
        name, version = f"pkg{i:04d}", f"1.{i % 10}.{i}"
        deps = [f"pkg{j:04d}>=1.0" for j in (i - 1, i // 2) if 0 <= j < i]
        files = {
            f"{name}/__init__.py": f"VERSION = '{version}'\n".encode(),
            f"{name}/core.py": b"def work():\n    return 42\n" * (1 + i % 7),
        }
        dist = f"{name}-{version}.dist-info"
        metadata = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s\n" % (
            name, version, "".join(f"Requires-Dist: {d}\n" for d in deps))
        files[f"{dist}/METADATA"] = metadata.encode()
        files[f"{dist}/INSTALLER"] = b"conda\n"
        files[f"{dist}/top_level.txt"] = f"{name}\n".encode()
        record_lines = "".join(f"{site_rel}/{p},,\n" for p in files) + f"{site_rel}/{dist}/RECORD,,\n"
        files[f"{dist}/RECORD"] = record_lines.encode()
        paths = []
        for rel, data in files.items():
            info = _write(site / rel, data)
            paths.append({"_path": f"{site_rel}/{rel}", "path_type": "hardlink", **info})
        record = {
            "name": name, "version": version, "build": "py_0", "build_number": 0,
            "channel": "https://conda.anaconda.org/conda-forge", "subdir": "noarch",
            "url": f"https://conda.anaconda.org/conda-forge/noarch/{name}-{version}-py_0.conda",
            "depends": [d.replace(">=", " >=") for d in deps],
            "files": [p["_path"] for p in paths], "paths_data": {"paths_version": 1, "paths": paths},
        }
        (meta / f"{name}-{version}-py_0.json").write_text(json.dumps(record))
    return prefix


def interleaved_best(commands: list[list[str]], repeat: int, env: dict[str, str]) -> list[tuple[float, subprocess.CompletedProcess]]:
    """Best wall time of each command, the commands alternating so machine load hits both alike."""
    best: list[tuple[float, subprocess.CompletedProcess | None]] = [(float("inf"), None)] * len(commands)
    for _ in range(repeat):
        for index, argv in enumerate(commands):
            start = time.perf_counter()
            run = subprocess.run(argv, capture_output=True, text=True, env=env)
            elapsed = time.perf_counter() - start
            if elapsed < best[index][0]:
                best[index] = (elapsed, run)
    return best  # type: ignore[return-value]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dists", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="envdoctor-bench-"))
    try:
        start = time.perf_counter()
        prefix = make_environment(root, args.dists)
        print(f"generated {args.dists} distributions and {args.dists} conda records in "
              f"{time.perf_counter() - start:.1f} s at {prefix}")
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
               "PYTHONUSERBASE": str(root / "no-user-base")}
        (doctor_s, doctor), (pip_s, pip_run) = interleaved_best([
            [sys.executable, "-m", "envdoctor", "report", "--json", "--no-loader",
             "--select", "PKG", "CHN", "--prefix", str(prefix)],
            [str(prefix / "bin" / "python"), "-m", "pip", "check"],
        ], args.repeat, env)
        if not doctor.stdout.strip():
            print(f"envdoctor printed no report (exit {doctor.returncode}): {doctor.stderr.strip()[:500]}")
            return 1
        report = json.loads(doctor.stdout)
        packages = report["facts"]["packages"]
        checked = sum(r["checked_files"] for r in packages["conda"]["records"])
        print(f"envdoctor static check: {doctor_s:.3f} s  ({len(packages['distributions'])} distributions, "
              f"{len(packages['conda']['records'])} conda records, {checked} files stat-ed, "
              f"{len(report['findings'])} findings, exit {doctor.returncode})")
        print(f"python -m pip check:    {pip_s:.3f} s  (exit {pip_run.returncode}: {pip_run.stdout.strip()[:60]})")
        print(f"ratio envdoctor / pip check: {doctor_s / pip_s:.2f}  (best of {args.repeat} runs each)")
    finally:
        if not os.environ.get("KEEP_BENCH"):
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

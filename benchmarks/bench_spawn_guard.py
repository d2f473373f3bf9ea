"""How fast the spawn-guard analysis is, against `python -m py_compile` on the same files.

The files: every parsable spawn fixture plus a generated 50,000-line script
(functions, classes, calls, one unguarded worker start near the end), written
to a temporary folder. Both sides are measured in the same run, best of N:

  * in process: envdoctor's analysis (read, decode, parse, walk) against
    `py_compile.compile` (read, parse, compile, write .pyc), per 1,000 lines;
  * end to end: `python -m envdoctor check --no-loader --select SPW001 SPW004 FILES`
    (what the pre-commit hook runs) against `python -m py_compile FILES`.

Run: python benchmarks/bench_spawn_guard.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import py_compile
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "spawn"


def generate(path: Path, lines: int = 50_000) -> None:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from test_spawn_rules import generate_large_script

    generate_large_script(path, lines)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from envdoctor.facts.scripts import analyse_script

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        generated = tmp_path / "generated_50k.py"
        generate(generated)
        files = [generated]
        for path in sorted(FIXTURES.glob("*.py")):
            try:
                py_compile.compile(str(path), cfile=str(tmp_path / "probe.pyc"), doraise=True)
            except py_compile.PyCompileError:
                continue  # the deliberately broken fixtures: neither side can do a full job on them
            files.append(path)
        lines = sum(len(p.read_bytes().splitlines()) for p in files)
        names = [str(p) for p in files]

        def analyse() -> None:
            for name in names:
                info = analyse_script(name)
                assert info["status"] == "ok", name

        def compile_all() -> None:
            for i, name in enumerate(names):
                py_compile.compile(name, cfile=str(tmp_path / f"{i}.pyc"), doraise=True)

        env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path / "pycache"), NO_COLOR="1")

        def cli_check() -> None:
            subprocess.run([sys.executable, "-m", "envdoctor", "check", "--no-loader", "--select", "SPW001",
                            "SPW004", "--fail-on", "never", *names], check=True, capture_output=True, env=env,
                           cwd=tmp, timeout=600)

        def cli_compile() -> None:
            subprocess.run([sys.executable, "-m", "py_compile", *names], check=True, capture_output=True,
                           env=env, cwd=tmp, timeout=600)

        analysis_s = best(analyse, args.repeat)
        compile_s = best(compile_all, args.repeat)
        cli_s = best(cli_check, args.repeat)
        cli_compile_s = best(cli_compile, args.repeat)

    per_k = lambda seconds: seconds / lines * 1000 * 1000  # noqa: E731  (ms per 1,000 lines)
    print(f"files: {len(files)} ({lines:,} lines, one of them generated with 50,000), best of {args.repeat}")
    print(f"in process   envdoctor analysis   {analysis_s:7.3f} s  {per_k(analysis_s):6.2f} ms/1000 lines")
    print(f"in process   py_compile.compile   {compile_s:7.3f} s  {per_k(compile_s):6.2f} ms/1000 lines")
    print(f"             ratio analysis / py_compile: {analysis_s / compile_s:.2f}x")
    print(f"end to end   envdoctor check      {cli_s:7.3f} s  {per_k(cli_s):6.2f} ms/1000 lines")
    print(f"end to end   python -m py_compile {cli_compile_s:7.3f} s  {per_k(cli_compile_s):6.2f} ms/1000 lines")
    print(f"             ratio check / py_compile: {cli_s / cli_compile_s:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

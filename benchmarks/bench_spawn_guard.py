"""How fast the spawn-guard analysis is, against `python -m py_compile` / `ast.parse` on the same files.

The files: every parsable spawn fixture plus a generated 50,000-line script
(functions, classes, calls, one unguarded worker start near the end), written
to a temporary folder. Both sides are measured in the same run, best of N:

  * in process: envdoctor's analysis (read, decode, parse, walk) against
    `py_compile.compile` (read, parse, compile, write .pyc), per 1,000 lines;
  * end to end: `python -m envdoctor check --no-loader --select SPW001 SPW004 FILES`
    (what the pre-commit hook runs) against `python -m py_compile FILES`.

With `--corpus DIR` (a folder of checked-out repositories, never part of this
project) it measures the largest repository there instead, by lines of Python:
every *.py file of it checked at once (`gather_scripts`, which follows every
script's imports of the project's own modules, each module parsed and walked
once) against `ast.parse` on the same files, each side in a fresh interpreter
of its own so that its peak memory (ru_maxrss) is its own: lines/second, peak
MB and the ratio. `--whole` measures DIR itself as one tree. `--tree DIR` measures a tree the same
way, twice: every SPW rule (what a default check runs) and the pre-commit hook's selection (SPW001,
SPW004: the code under a main guard that ends a script is not walked).

The second corpus (issue 22; read-only snapshots fetched 2026-12-01, HEAD commits):
Atcold/NYU-DLSP20 3049c832, HobbitLong/SupContrast 66a8fe53,
Lightning-AI/pytorch-lightning 7f0c3436, Lightning-AI/tutorials 15817658,
Project-MONAI/tutorials b3c6c998, facebookresearch/dino 7c446df5, facebookresearch/mae efb2a806,
hendrycks/outlier-exposure e6ede98a, huggingface/accelerate 16cb6eb8, huggingface/diffusers 58eb52c0,
huggingface/notebooks 5068b114, mrdbourke/pytorch-deep-learning baa27b69, timgaripov/swa 411b2fca,
udacity/deep-learning-v2-pytorch c9404fc8 (3,291 .py files, 1,311,751 lines; 1,838 notebooks).
Largest repository: huggingface/diffusers (2,089 files, 1,029,213 lines), best of 3, 2026-12-02:
on a quiet 2-core machine envdoctor 111,613 lines/s (9.2 s) against ast.parse's 174,474 in the
same run (1.56x), and 102,319 against 173,568 (1.70x) in a second quiet run, peak 174 MB
(ast.parse: 31 MB); on the shared machine (load 2.2-2.5) 91,802 against 151,022 (1.65x). The
code before that day's changes: 55,577 lines/s quiet (2.08x, 371 MB), 65,389 loaded (1.91x).
diffusers/src alone (--whole, 574,922 lines, shared machine): 103,473 lines/s against 124,689
(1.21x), 133 MB.

The corpus docs/checks.md's precision and recall figures come from (read-only
checkouts of public repositories, HEAD commits of 2026-11-30): GunhoChoi/PyTorch-FastCampus
1e9ba63e, bearpaw/pytorch-classification 24f1c456, bentrevett/pytorch-sentiment-analysis
329f654b, chenyuntc/simple-faster-rcnn-pytorch 367db367, eriklindernoren/PyTorch-GAN
36d3c77e, facebookresearch/detr 29901c51, huggingface/pytorch-image-models aa4b5850,
karpathy/minGPT 37baab71, karpathy/nanoGPT 3adf61e1, kuangliu/pytorch-cifar 49b7aa97,
lucidrains/vit-pytorch 69d24fe9, milesial/Pytorch-UNet 21d7850f, pytorch/examples 77f55b91,
pytorch/ignite de08e799, sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning cc9c7e2f,
sgrvinod/a-PyTorch-Tutorial-to-Object-Detection 5d5b7596,
utkuozbulak/pytorch-cnn-visualizations ba22fa07, yunjey/pytorch-tutorial 0500d3df,
znxlwm/pytorch-MNIST-CelebA-GAN-DCGAN c88438c7 (facebookresearch/moco's tree was empty).

Issue 29's trees (read-only snapshots, HEAD commits): pyg-team/pytorch_geometric 5c6461b23
(`torch_geometric/`, 117,382 lines), dmlc/dgl 3d16000b41 (`examples/`, 111,713 lines),
NVIDIA/NeMo 8cfedd7203 (every .py file, 667,321 lines); figures in docs/spawn-guard.md.
Before and after the speed changes of 2026-12-04 (`--source` the checkout before, `--repeat 2`,
same session, quiet shared machine at load 1.3-1.9), CPU against ast.parse's: torch_geometric
1.61x to 1.57x (0.93 s, 0.94 s), dgl/examples 3.88x to 3.37x (2.42 s to 2.03 s), NeMo 4.19x to
3.52x (15.16 s to 13.41 s, peak 257 to 256 MB); the three as one tree 311 to 294 MB. Repeated
(load 1.3-2.9): dgl/examples 3.37x to 2.87x, NeMo 3.84x to 3.64x (14.90 s to 12.51 s).
Later the same day (fact-neutral savings on the walk's hot paths; `--source`, `--repeat 2`, same
session, load 4.1-6.1): torch_geometric 1.38x to 1.34x (1.05 s to 1.02 s), dgl/examples 2.60x to
2.53x (2.12 s to 2.07 s), NeMo 3.57x to 3.42x (14.70 s to 14.13 s, peak 256 MB both). What is left
on NeMo is the walk under the guard, most of it functions an earlier script already walked, given
values made from each script's own expressions (docs/spawn-guard.md says why no summary yet).
At c95c6fd (--repeat 2, quiet): SPW all 1.33x / 2.54x / 3.97x, hook 1.34x / 1.70x / 1.69x. With every
function body walked at most once in the whole check (a throwaway measurement, facts lost) the whole
walk would still be 2.20x on dgl/examples and 2.03x on NeMo: no summary reaches 2.0x on its own
(docs/spawn-guard.md, "What a summary could save at best").
2026-12-05, after fact-neutral savings off the walk (an object made during an import is that import's,
folder listings for the paths an import is not at; --repeat 2, quiet): SPW all 1.24x / 2.42x / 3.66x,
hook 1.27x / 1.63x / 1.53x, hook 122,760 / 86,495 / 105,451 lines per CPU-second (docs/spawn-guard.md,
"Off the walk, and four levers measured and left out").
Later that day, on a machine whose ast.parse is twice as fast (--repeat 2, quiet): bodies parsed again for
calls kept up to 20,000 lines, kept trees without annotations, a kept module's lines as one text; facts
byte-identical: NeMo's peak 272 to 186 MB (hook 196 to 161 MB), the three trees with dgl's python/ as one
1,012,196-line tree (`--corpus DIR --whole`) 340 to 236 MB (hook 254 to 211 MB); CPU within run-to-run
spread; SPW all 1.23-1.46x / 2.48-2.56x / 3.89-4.63x, hook 1.25-1.50x / 1.62-1.98x / 1.51-2.26x there
(docs/spawn-guard.md, "Memory on a 1M-line tree").

2026-12-05, stop 48 (classes followed by name, static methods, one of several objects, memo keys; --repeat 2,
the stop's start with --source, quiet): SPW all 1.50x / 2.91x / 4.19x to 1.36x / 2.83x / 4.78x (NeMo 8.67 s to
10.14 s, callgrind +5.6%), hook 1.57x / 1.92x / 1.99x to 1.39x / 1.79x / 1.85x; the 1M-line tree 241 MB
(docs/spawn-guard.md, "Classes by name, static methods, one of several objects, and memo keys").

The third fresh corpus (issue 29's recall and precision; read-only snapshots fetched 2026-12-04,
HEAD commits): snap-stanford/ogb 61e9784ca7, benedekrozemberczki/pytorch_geometric_temporal
adefe44265, graphdeeplearning/benchmarking-gnns b6c407712f, microsoft/torchgeo 7ea0616ded,
facebookresearch/pytorch3d 9381c40163, meliketoy/wide-resnet.pytorch 292b3ede06,
L1aoXingyu/pytorch-beginner a57dd7ea35, hunkim/PyTorchZeroToAll e5a260fac0,
aitorzip/PyTorch-CycleGAN 67da8f9e2b, MorvanZhou/PyTorch-Tutorial dbe154a9e5,
dsgiitr/d2l-pytorch e84da49a9e, rasbt/deeplearning-models 18e0469265 (1,447 .py files and 2
extensionless scripts, 277,065 lines; 328 notebooks); figures in docs/spawn-guard.md.

`--tree DIR` (repeatable) measures each tree as one check, CPU time and peak memory against
ast.parse on the same files in the same run; `--source CHECKOUT` measures another envdoctor
checkout's `src/` (before/after a change); `--compiled DIR` measures also, in the same run, the
envdoctor installed into DIR from the wheel whose walk mypyc compiles
(`HATCH_BUILD_HOOKS_ENABLE=1 pip wheel --no-deps .` in a clean clone, then `pip install --no-deps
--target DIR` it; figures in docs/spawn-guard.md, "The compiled walk").

Run: python benchmarks/bench_spawn_guard.py [--repeat 3] [--corpus /tmp/corpus [--whole]]
     python benchmarks/bench_spawn_guard.py --tree LIB --tree EXAMPLES --tree FRAMEWORK [--source OLD] [--compiled DIR]
"""
from __future__ import annotations

import argparse
import importlib.machinery
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


def python_files(repo: Path) -> list[Path]:
    skipped = {"__pycache__", "site-packages", "node_modules"}
    return sorted(p for p in repo.rglob("*.py") if not any(part.startswith(".") or part in skipped
                                                             for part in p.relative_to(repo).parts[:-1]))


def count_lines(files: list[Path]) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in files)


#: What each side runs in its own interpreter, so that its peak memory is its own.
_CHILD = r"""
import ast, json, resource, sys, time
from pathlib import Path
side, listing = sys.argv[1], sys.argv[2]
files = Path(listing).read_text(encoding="utf-8").splitlines()
start, cpu_start = time.perf_counter(), time.process_time()
if side == "ast.parse":
    for name in files:
        try:
            ast.parse(Path(name).read_bytes(), filename=name)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
else:
    from envdoctor.config import Config
    from envdoctor.facts.scripts import gather_scripts

    # "hook": only SPW001 and SPW004 selected, as the pre-commit hook runs it (the code under a main guard
    # that ends a script is not walked); "envdoctor": every SPW rule, as a default check walks them.
    class Facts:
        config = Config(scripts=tuple(files), no_loader=True, select=("SPW001", "SPW004") if side == "hook" else ())

    section = gather_scripts(Facts())
    assert section is not None and len(section["files"]) == len(files)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
walker = sys.modules.get("envdoctor.analysis.spawn.walker")
print(json.dumps({"seconds": seconds, "cpu": cpu, "walker": walker.__file__ if walker else None,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

#: `--source DIR`: measure the envdoctor whose `src/` is under DIR (another checkout: before/after).
SOURCE: Path | None = None
#: `--compiled DIR`: measure also the envdoctor installed into DIR from the compiled wheel, in the same run.
COMPILED: Path | None = None


def measure(side: str, files: list[Path], repeat: int, installed: Path | None = None) -> dict:
    """The best of `repeat` runs of `side` on `files` by CPU time ({"seconds", "cpu", "peak_mb", "walker"}),
    each run a fresh interpreter (so its peak memory is its own); envdoctor from `installed` when given."""
    import json

    env = dict(os.environ)
    found = installed if installed is not None else SOURCE / "src" if SOURCE is not None else None
    if found is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(found), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp) / "files.txt"
        listing.write_text("\n".join(map(str, files)), encoding="utf-8")
        runs = []
        for _ in range(repeat):
            proc = subprocess.run([sys.executable, "-c", _CHILD, side, str(listing)], capture_output=True,
                                  text=True, check=True, timeout=3600, cwd=tmp, env=env)
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return min(runs, key=lambda r: r["cpu"])


def bench_tree(name: str, files: list[Path], repeat: int) -> None:
    """Lines/s and peak memory of the analysis against ast.parse on the same files, in the same run (and of
    the compiled wheel's, with --compiled)."""
    lines = count_lines(files)
    parse = measure("ast.parse", files, repeat)
    runs = {"SPW all": measure("envdoctor", files, repeat), "hook": measure("hook", files, repeat)}
    if COMPILED is not None:
        runs["compiled SPW all"] = measure("envdoctor", files, repeat, COMPILED)
        runs["compiled hook"] = measure("hook", files, repeat, COMPILED)
        extension = tuple(importlib.machinery.EXTENSION_SUFFIXES)
        if not all(str(runs[side]["walker"]).endswith(extension) for side in ("compiled SPW all", "compiled hook")):
            raise SystemExit(f"{COMPILED} holds no compiled walk (envdoctor's walker there is Python source)")
    print(f"{name}: {len(files):,} Python files, {lines:,} lines, best of {repeat} by CPU time"
          + (f" (envdoctor from {SOURCE})" if SOURCE else ""))
    for side, run in (("ast.parse", parse), *runs.items()):
        print(f"  {side:20} CPU {run['cpu']:8.2f} s  {lines / run['cpu']:10,.0f} lines/CPU-s  "
              f"wall {run['seconds']:8.2f} s  peak {run['peak_mb']:6.0f} MB")
    for side, run in runs.items():
        print(f"  ratio {side} / ast.parse: CPU {run['cpu'] / parse['cpu']:.2f}x, "
              f"wall {run['seconds'] / parse['seconds']:.2f}x")


def bench_corpus(corpus: Path, repeat: int, whole: bool) -> int:
    """The largest repository under `corpus` (a folder of checkouts), or with `whole` the folder as one tree."""
    repos = [d for d in sorted(corpus.iterdir()) if d.is_dir()]
    if whole or not repos:
        bench_tree(f"{corpus} (whole tree)", python_files(corpus), repeat)
        return 0
    sizes = {repo: count_lines(python_files(repo)) for repo in repos}
    repo = max(sizes, key=lambda r: sizes[r])
    bench_tree(f"largest repository {repo.name}", python_files(repo), repeat)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--corpus", type=Path, help="a folder of repositories: measure the largest one")
    parser.add_argument("--whole", action="store_true", help="with --corpus: the whole folder as one tree")
    parser.add_argument("--tree", type=Path, action="append", default=[],
                        help="a source tree to measure as one check (repeat for several: a library, an "
                             "examples folder, a large framework)")
    parser.add_argument("--source", type=Path, help="measure the envdoctor checkout at this path instead")
    parser.add_argument("--compiled", type=Path,
                        help="with --tree: measure also the envdoctor installed in this folder from the compiled "
                             "wheel (`HATCH_BUILD_HOOKS_ENABLE=1 pip wheel .`, then `pip install --target`)")
    args = parser.parse_args()
    global SOURCE, COMPILED
    SOURCE, COMPILED = args.source, args.compiled
    if args.tree:
        for tree in args.tree:
            bench_tree(str(tree), python_files(tree), args.repeat)
        return 0
    if args.corpus is not None:
        return bench_corpus(args.corpus, args.repeat, args.whole)

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
    print(f"lines/second: envdoctor {lines / analysis_s:,.0f} in process, {lines / cli_s:,.0f} end to end; "
          f"py_compile {lines / compile_s:,.0f} in process")
    print(f"in process   envdoctor analysis   {analysis_s:7.3f} s  {per_k(analysis_s):6.2f} ms/1000 lines")
    print(f"in process   py_compile.compile   {compile_s:7.3f} s  {per_k(compile_s):6.2f} ms/1000 lines")
    print(f"             ratio analysis / py_compile: {analysis_s / compile_s:.2f}x")
    print(f"end to end   envdoctor check      {cli_s:7.3f} s  {per_k(cli_s):6.2f} ms/1000 lines")
    print(f"end to end   python -m py_compile {cli_compile_s:7.3f} s  {per_k(cli_compile_s):6.2f} ms/1000 lines")
    print(f"             ratio check / py_compile: {cli_s / cli_compile_s:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

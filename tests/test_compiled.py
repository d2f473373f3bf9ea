"""The compiled walk: the wheel whose spawn-guard walk mypyc compiles finds what the pure-Python one finds.

`HATCH_BUILD_HOOKS_ENABLE=1 pip wheel .` builds it (pyproject.toml, the mypyc
hook; docs/spawn-guard.md, "The compiled walk"). The same source compiled is
not the same program: mypyc checks at run time the types the code only
declares (a lambda's body, declared a list of statements, stopped a notebook's
walk with a TypeError there), and a class attribute bound to a method becomes
data. So the wheel is built here, from a copy of the source tree (the build
writes its extension modules beside the sources, where they would shadow the
checkout's own), installed into a folder of its own, and run on every spawn
fixture, every fixture project and every fixture notebook, as a default check
and as the pre-commit hook: its facts must be the pure walk's, byte for byte.
"""
from __future__ import annotations

import ast
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
#: How this interpreter names an extension module's file (`.cpython-311-x86_64-linux-gnu.so`, `.so`, …).
EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)

#: The modules the wheel compiles: the mypyc hook's list in pyproject.toml.
COMPILED = [ROOT / path for path in tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
            ["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]["include"]]

#: What the wheel is built from: the build reads no other file of the tree.
_BUILT_FROM = ("src", "catalog", "pyproject.toml", "README.md", "LICENSE")

#: Runs gather_scripts on the files listed in argv[2] (the selection in argv[1]: "all" or "hook") and prints
#: where envdoctor's walk came from and the facts.
_FACTS = r"""
import json, sys
from pathlib import Path
import envdoctor.analysis.spawn.walker as walker
from envdoctor.config import Config
from envdoctor.facts.scripts import gather_scripts
files = Path(sys.argv[2]).read_text(encoding="utf-8").splitlines()
class Facts:
    config = Config(scripts=tuple(files), no_loader=True, select=("SPW001", "SPW004") if sys.argv[1] == "hook" else ())
    def __getitem__(self, name):  # the target environment: this interpreter's (notebook kernels, OpenCV)
        return {"prefix": sys.prefix, "interpreter": sys.executable}
section = gather_scripts(Facts())
print(json.dumps({"walker": walker.__file__, "facts": section}, sort_keys=True, default=str))
"""


def _compiler() -> str | None:
    command = (sysconfig.get_config_var("CC") or "cc").split()
    return shutil.which(command[0]) if command else None


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding envdoctor installed from the compiled wheel (and nothing else)."""
    if _compiler() is None:
        pytest.skip("no C compiler: mypyc cannot build the compiled wheel on this machine")
    base = tmp_path_factory.mktemp("compiled")
    tree = base / "tree"
    tree.mkdir()
    for name in _BUILT_FROM:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
        else:
            shutil.copy2(source, tree / name)
    env = {**os.environ, "HATCH_BUILD_HOOKS_ENABLE": "1"}
    # The build's own requirements (hatchling, hatch-mypyc, mypy) are the test extras': nothing downloaded.
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "--wheel-dir", str(base / "dist"), str(tree)],
                           capture_output=True, text=True, env=env, timeout=1200)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    wheel = next((base / "dist").glob("*.whl"))
    site = base / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    return site


def _facts(selection: str, files: list[Path], listing: Path, site: Path | None) -> dict:
    listing.write_text("\n".join(map(str, files)), encoding="utf-8")
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _FACTS, selection, str(listing)], capture_output=True, text=True,
                          env=env, cwd=FIXTURES, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def _every_fixture() -> list[Path]:
    scripts = sorted((FIXTURES / "spawn").glob("*.py"))
    projects = sorted((FIXTURES / "spawn_projects").rglob("*.py"))
    notebooks = sorted((FIXTURES / "notebooks").glob("*.ipynb"))
    return [*scripts, *projects, *notebooks]


def test_no_compiled_class_binds_a_method_to_another_name():
    """`stmt_AsyncFor = stmt_For` in a class body is a method in Python and data once compiled: the walk's
    dispatch (`Walker.handler`) then calls a descriptor. A node type walked as another is named in SAME_WALK."""
    assert len(COMPILED) >= 10 and all(path.is_file() for path in COMPILED)
    aliases = []
    for path in COMPILED:
        for cls in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(cls, ast.ClassDef):
                methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                aliases += [f"{path.name}: {cls.name}.{target.id} = {stmt.value.id}" for stmt in cls.body
                            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name)
                            and stmt.value.id in methods for target in stmt.targets if isinstance(target, ast.Name)]
    assert aliases == []


def test_no_extension_module_beside_the_sources():
    """A compiled wheel built in the checkout leaves its extension modules beside the sources (hatch-mypyc
    builds in place), where an editable install imports them instead of the .py files being edited: every
    test would then check a stale compiled walk."""
    stray = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob("*") if p.name.endswith(EXTENSIONS))
    assert stray == [], "remove them (`git clean -n src` lists them), and build the compiled wheel from a clean clone"


@pytest.mark.slow
def test_the_wheel_compiles_the_walk(compiled: Path):
    """Every module the hook names is an extension module in the wheel, and it is what gets imported."""
    spawn = compiled / "envdoctor" / "analysis" / "spawn"
    built = sorted(p.name.split(".")[0] for p in spawn.iterdir() if p.name.endswith(EXTENSIONS))
    assert built == sorted(path.stem for path in COMPILED)
    probe = subprocess.run([sys.executable, "-c", "import envdoctor.analysis.spawn.walker as w; print(w.__file__)"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(compiled)},
                           timeout=120)
    assert probe.stdout.strip().endswith(EXTENSIONS), probe.stdout + probe.stderr


@pytest.mark.slow
@pytest.mark.parametrize("selection", ["all", "hook"])
def test_the_compiled_walk_finds_what_the_pure_walk_finds(compiled: Path, selection: str, tmp_path: Path):
    files = _every_fixture()
    pure = _facts(selection, files, tmp_path / "pure.txt", None)
    fast = _facts(selection, files, tmp_path / "compiled.txt", compiled)
    assert fast["walker"].endswith(EXTENSIONS)
    assert not pure["walker"].endswith(EXTENSIONS)
    # Not a comparison of two empty answers: the fixtures start workers at import time and under the guard.
    infos = pure["facts"]["files"]
    assert len(infos) == len(files)
    assert sum(1 for info in infos for s in info.get("worker_starts", []) if not s["guarded"]) >= 40
    if selection == "all":
        assert sum(1 for info in infos for s in info.get("worker_starts", []) if s["guarded"]) >= 15
        assert any(info.get("cuda_inits") for info in infos)
    for mine, theirs in zip(fast["facts"]["files"], infos):
        assert mine == theirs, mine["path"]
    assert fast["facts"] == pure["facts"]

"""Shared fixtures. Every Report built in-process is validated against the schema.

Three hooks keep the test loop short without changing what any test checks: the
quick tier does not import the modules it would deselect whole (Lightning,
transformers and the MCP client cost seconds to import, in every pytest-xdist
worker); envdoctor's own modules are compiled once per session where the
environment says not to write bytecode, so the hundreds of `envdoctor` children
the suite starts do not each compile them again; and under that same setting the
test modules' rewritten asserts are still cached while they are collected.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fixenvs import offline_env
from shared_build import built_once
from support import validate_report

# The conda fixture builder (fixtures/condafixtures.py) provides the session-scoped `conda_world`;
# fixtures/fixenvs.py the session's pip venv and unpacked pip (`pip_venv_template`, `bundled_pip`).
pytest_plugins = ["condafixtures", "fixenvs"]

#: A module marked slow as a whole: `pytestmark = pytest.mark.slow` or a list that starts with it.
_SLOW_MODULE = re.compile(r"^pytestmark = (?:pytest\.mark\.slow$|\[\s*pytest\.mark\.slow,)", re.MULTILINE)
#: A module whose tests each stand alone: `pytest.mark.standalone` in its `pytestmark` list.
_STANDALONE_MODULE = re.compile(r"^pytestmark = \[[^\]]*\bpytest\.mark\.standalone\b", re.MULTILINE)
QUICK_TIER = "not slow"

# The suite sends SIGHUP and checks what it does; envdoctor honours a SIGHUP its starter ignored (nohup), and the
# processes the tests start would inherit that. The tests start as from a terminal, whatever started pytest:
# test_loader_leftovers checks the nohup case on its own, through the real `nohup`.
if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """What `-n auto` means here: a worker per usable CPU for the quick tier, which computes in-process; for
    the whole suite a few more, since its slow tests mostly wait on real processes (torch importing in a
    spawned worker, a budget running out, a server starting) while another worker could compute.

    Measured on 2 CPUs with a third process keeping one busy: the quick tier took 52 s with 2 workers and
    55 s with 4; the whole suite 583 s with 2 and 407 s with 4.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if config.getoption("markexpr", "") == QUICK_TIER:
        return cpus
    return min(2 * cpus, cpus + 4)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadfile`, except that the tests of a module marked `standalone` are units of their own.

    loadfile runs a module on one worker, so its module fixtures are built once. A module of
    independent real runs (the hostile corpus, the spawn ground truth, the loader's live
    cases) then ran serially on one worker for most of the suite's length, one core idle.
    Split, its tests fill the workers' gaps; xdist sends the largest units first. The
    controller collects nothing, so it reads the mark from the module's source, as the
    quick tier's `pytest_ignore_collect` reads `slow`.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    standalone = set()
    for path in sorted((config.rootpath / "tests").glob("test_*.py")):
        if _STANDALONE_MODULE.search(path.read_text(encoding="utf-8")):
            standalone.add(path.relative_to(config.rootpath).as_posix())

    class StandaloneSplitting(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if module in standalone else module

    return StandaloneSplitting(config, log)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m "not slow"` every test of a slow module would be deselected: do not import it at all."""
    if config.getoption("markexpr", "") != QUICK_TIER or collection_path.suffix != ".py":
        return None
    try:
        source = collection_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return True if _SLOW_MODULE.search(source) else None


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> object:
    """Cache the rewritten test modules as bytecode even where Python is told not to write it.

    pytest rewrites the asserts of each test module it imports and caches the result in
    tests/__pycache__ (which git ignores) unless `sys.dont_write_bytecode` is set (by
    PYTHONDONTWRITEBYTECODE, which some machines set for every process): then every
    pytest-xdist worker rewrote every module again, 2-5 s of CPU a worker a run. Only
    what collection imports is written; the children the tests start keep the setting.
    """
    told = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = told


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile envdoctor's modules to bytecode once when Python is told not to write it (PYTHONDONTWRITEBYTECODE).

    An installed envdoctor was compiled by pip; an editable one under that setting would
    be compiled from source by every child `python -m envdoctor` (a third of its start-up).
    Only stale or missing files are written, atomically, into the package's own __pycache__
    folders (which git ignores): the same files Python itself writes without the setting.
    """
    if not sys.flags.dont_write_bytecode:
        return
    import compileall

    import envdoctor

    compileall.compile_dir(Path(envdoctor.__file__).parent, quiet=2)


@pytest.fixture(autouse=True)
def _validate_every_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Report rendered or returned by the engine in a test must obey the schema."""
    from envdoctor import engine

    original = engine.assemble_report

    def checked(*args, **kwargs):
        report = original(*args, **kwargs)
        validate_report(report.to_dict())
        return report

    monkeypatch.setattr(engine, "assemble_report", checked)


@pytest.fixture(scope="session")
def envdoctor_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding this checkout built as a wheel (pip, offline, no build isolation), once per test run."""
    repo = Path(__file__).resolve().parents[1]

    def build(out: Path) -> None:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                        "-w", str(out), str(repo)], check=True, capture_output=True, text=True)

    return built_once(tmp_path_factory, "envdoctor-wheel", build)


@pytest.fixture()
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """For the fix round trips: this process and every step it runs offline (pip/uv), the journal under tmp_path."""
    env = offline_env(tmp_path / "wheels", tmp_path / "cache")
    for key in list(os.environ):
        if key not in env:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env

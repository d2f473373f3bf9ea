"""The pre-commit hook: it runs only the spawn-guard check, without torch and without child processes.

The hook's own `entry` from .pre-commit-hooks.yaml is run the way pre-commit
runs it (the staged file names appended), inside a Python process that
records, through an audit hook, every attempt to start a process, and
reports which modules were imported. The repository file is found next to
the tests (it is part of the source tree, not of the wheel).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_spawn_fixtures import FIXTURE_DIR

HOOKS_FILE = Path(__file__).resolve().parents[1] / ".pre-commit-hooks.yaml"

# Runs the CLI in-process and writes what happened to the file named in argv[1].
_DRIVER = r"""
import json, sys
started = []
def audit(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec", "os.system",
                 "os.spawn", "os.startfile"):
        started.append(event)
sys.addaudithook(audit)
out = sys.argv[1]
from envdoctor.cli import main
try:
    code = main(sys.argv[2:])
finally:
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy", "psutil", "pynvml"))
    json.dump({"started": started, "heavy": heavy}, open(out, "w"))
sys.exit(code)
"""

pytestmark = pytest.mark.skipif(not HOOKS_FILE.exists(), reason="not running from a source checkout")


def hook() -> dict:
    hooks = yaml.safe_load(HOOKS_FILE.read_text(encoding="utf-8"))
    [spawn_guard] = [h for h in hooks if h["id"] == "envdoctor-spawn-guard"]
    return spawn_guard


def run_hook(files: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    argv = shlex.split(hook()["entry"])
    assert argv[0] == "envdoctor"
    record = tmp_path / "record.json"
    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(record), *argv[1:], *files],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    return proc, json.loads(record.read_text(encoding="utf-8"))


def test_the_hook_definition():
    spawn_guard = hook()
    assert spawn_guard["language"] == "python" and spawn_guard["types"] == ["python"]
    assert spawn_guard.get("pass_filenames", True) is True
    argv = shlex.split(spawn_guard["entry"])
    assert argv[:2] == ["envdoctor", "check"]
    selected = argv[argv.index("--select") + 1]
    assert "--no-loader" in argv and selected.split(",") == ["SPW001", "SPW004"]
    # pre-commit appends the file names: the entry must end with an option that takes one value.
    assert argv[-2] == "--fail-on"


def test_hook_fails_on_an_unguarded_script_and_passes_a_guarded_one_without_torch_or_processes(tmp_path):
    bad, record = run_hook([str(FIXTURE_DIR / "main_unguarded.py"), str(FIXTURE_DIR / "guarded_loop.py")],
                           tmp_path)
    assert bad.returncode == 1, bad.stderr
    assert "SPW001 missing-main-guard" in bad.stdout
    assert f"{FIXTURE_DIR / 'main_unguarded.py'}:10:5" in bad.stdout.replace("\n", "")
    assert record == {"started": [], "heavy": []}
    good, record = run_hook([str(FIXTURE_DIR / "guarded_loop.py"), str(FIXTURE_DIR / "construct_only.py")],
                            tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert record == {"started": [], "heavy": []}


def test_hook_reports_a_syntax_error_without_failing_the_commit_on_its_own(tmp_path):
    proc, record = run_hook([str(FIXTURE_DIR / "syntax_error.py")], tmp_path)
    assert proc.returncode == 0  # SPW004 is a warning; the interpreter's own hooks block the commit
    assert "SPW004 unparsable-script" in proc.stdout and "Traceback" not in proc.stderr
    assert record["started"] == []


def test_importtime_shows_the_hook_reads_syntax_trees_and_never_imports_torch(tmp_path):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import sys; from envdoctor.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", *shlex.split(hook()["entry"])[1:],
                           str(FIXTURE_DIR / "guarded_loop.py")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "envdoctor.analysis.spawn.analysis" in imported
    assert not {m for m in imported if m.split(".")[0] == "torch"}

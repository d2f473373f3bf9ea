"""`import envdoctor` stays cheap: no rich, psutil, torch or numpy until they are needed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("rich", "psutil", "torch", "numpy", "pynvml", "threadpoolctl", "packaging")


def modules_after(code: str) -> list[str]:
    probe = (f"{code}\nimport sys, json\n"
             f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_import_envdoctor_pulls_nothing_heavy() -> None:
    assert modules_after("import envdoctor") == []


def test_public_types_and_check_are_importable_without_rich() -> None:
    assert modules_after("from envdoctor import Report, Finding, Severity, check, preflight, PreflightError") == []


def test_render_reads_no_environment_and_imports_nothing_to_read_one() -> None:
    """`render` only renders: no target probe, no rule, no TOML reader (and no plugin scan)."""
    report = Path(__file__).resolve().parent.parent / "fixtures" / "reports" / "small-ok.json"
    code = ("import contextlib, io, json, sys\nfrom envdoctor.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()) as out:\n    code = main(['render', {str(report)!r}])\n"
            "print(json.dumps([code, bool(out.getvalue()), sorted(m for m in sys.modules if m in "
            "('envdoctor.facts.target', 'envdoctor.engine', 'envdoctor.rules', 'tomllib', 'importlib.metadata'))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [0, True, []]

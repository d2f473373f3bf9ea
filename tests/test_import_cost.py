"""`import envdoctor` stays cheap: no rich, psutil, torch or numpy until they are needed."""
from __future__ import annotations

import json
import subprocess
import sys

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

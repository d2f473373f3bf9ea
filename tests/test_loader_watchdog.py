"""The runner's watchdog: a phase that overstays is a hang finding, a data check that overstays is a skip.

The watchdog ends the runner with os._exit, so each case runs the real loader_session module in a
child interpreter (as the runner does) and reads the events it wrote.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBES = Path(__file__).resolve().parent.parent / "src" / "envdoctor" / "inside"

SCRIPT = """
import os, sys, time
sys.path.insert(0, {probes!r})
from loader_session import Events, Session
fd = os.open({events!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
session = Session(plan={{"budget_left_s": 30}}, events=Events(fd))
session.guarded(0.3, "drawing index 3 twice and in two workers", "rng", check={check!r})
time.sleep(20)
print("the watchdog did not end the runner")
"""


def run_overstaying_phase(tmp_path: Path, check: str | None) -> list[dict]:
    events = tmp_path / "events.jsonl"
    script = SCRIPT.format(probes=str(PROBES), events=str(events), check=check)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0 and "did not end" not in proc.stdout, proc.stdout + proc.stderr
    return [json.loads(line) for line in events.read_text().splitlines()]


def test_a_data_check_that_overstays_is_a_skip_not_a_hang(tmp_path: Path) -> None:
    events = run_overstaying_phase(tmp_path, "cloned randomness (DL008)")
    assert not [e for e in events if e["ev"] == "failure"], events
    [skip] = [e["value"] for e in events if e["ev"] == "result" and e["key"] == "skip"]
    assert skip["what"] == "cloned randomness (DL008)"
    assert "drawing index 3 twice and in two workers did not finish" in skip["reason"]
    assert [e.get("reason") for e in events if e["ev"] == "done"] == ["budget"]


def test_any_other_phase_that_overstays_is_a_hang(tmp_path: Path) -> None:
    events = run_overstaying_phase(tmp_path, None)
    [failure] = [e["value"] for e in events if e["ev"] == "failure"]
    assert failure["kind"] == "hung" and "did not finish in time" in failure["message"]
    assert [e.get("reason") for e in events if e["ev"] == "done"] == ["watchdog"]

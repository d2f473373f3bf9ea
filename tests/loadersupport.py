"""Helpers of the loader tests: run the real `envdoctor loader` from fixtures/, check nothing is left."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil

from support import json_report, leftover_children, run_envdoctor, shm_left, shm_names

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"


def shm_torch_segments() -> set[str]:
    return shm_names("torch_")


def loader_report(*args: str, env: dict[str, str] | None = None, prefix_cmd: tuple[str, ...] = ()
                  ) -> tuple[dict[str, Any], float, Any]:
    """Run `envdoctor loader ... --format json` from fixtures/; (validated report, wall seconds, process)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    start = time.monotonic()
    proc = run_envdoctor("loader", *args, "--format", "json", cwd=str(FIXTURES_DIR), env=full_env,
                         prefix_cmd=prefix_cmd)
    wall = time.monotonic() - start
    assert proc.returncode in (0, 1), f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json_report(proc), wall, proc


def assert_nothing_left(report: dict[str, Any], shm_before: set[str]) -> None:
    """No process of the runner's group survives, and no torch segment was added to /dev/shm. A zombie
    (dead, its pid not yet reaped by init, which this sandbox does late) is no survivor."""
    pgid = report["loader"]["runner"]["pid"]
    survivors = []
    for proc in psutil.process_iter(["pid", "name", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                survivors.append({"pid": proc.info["pid"], "name": proc.info["name"]})
        except (ProcessLookupError, PermissionError):
            continue
    assert survivors == [], f"processes of the runner's group survived: {survivors}"
    assert leftover_children() == []
    assert shm_left(shm_before, "torch_") == set()


def dump(report: dict[str, Any]) -> str:
    """The loader section for an assertion message."""
    loader = dict(report.get("loader") or {})
    loader.pop("torch_probe", None)
    # The verdict and what it was drawn from first: the message is cut, and the runs are long.
    first = ("recommendation", "paired", "bottleneck", "bottleneck_reason", "skipped")
    ordered = {**{k: loader[k] for k in first if k in loader}, **{k: v for k, v in loader.items() if k not in first}}
    return json.dumps(ordered, indent=1, default=str)[:6000]

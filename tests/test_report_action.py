"""action.yml: its steps are real envdoctor invocations, run here the way the runner would run them.

The composite action is parsed with PyYAML; every `run:` step is executed with
bash (as GitHub does: `bash --noprofile --norc -eo pipefail`) after its
`${{ … }}` expressions are filled in from the inputs, the step outputs written
to $GITHUB_OUTPUT, and a temporary runner folder — on a real repository of
three unguarded scripts, under a low open-file limit. Only the pip install and
the upload to code scanning (a `uses:` step) are not run; their wiring is checked.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from reportfixtures import make_train_repo
from test_sarif import validate_sarif

ACTION = Path(__file__).resolve().parents[1] / "action.yml"
_EXPR = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def _evaluate(expr: str, context: dict[str, Any]) -> str:
    compared = re.fullmatch(r"inputs\.([\w-]+) == '(.*)'", expr)
    if compared:
        return "true" if context["inputs"][compared.group(1)] == compared.group(2) else "false"
    parts = expr.split(".")
    if parts[0] == "steps":
        return str(context["steps"].get(parts[1], {}).get("outputs", {}).get(parts[3], ""))
    return str(context[parts[0]][parts[1]])


def _fill(text: str, context: dict[str, Any]) -> str:
    return _EXPR.sub(lambda m: _evaluate(m.group(1), context), text)


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def run_action(repo: Path, runner: Path, inputs: dict[str, str]) -> dict[str, Any]:
    action = yaml.safe_load(ACTION.read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    defaults = {name: spec.get("default", "") for name, spec in action["inputs"].items()}
    context: dict[str, Any] = {"inputs": {**defaults, **inputs}, "steps": {},
                               "github": {"action_path": str(ACTION.parent)}, "runner": {"temp": str(runner)}}
    summary = runner / "summary.md"
    ran: dict[str, Any] = {"summary": summary, "logs": {}, "uses": []}
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    for step in action["runs"]["steps"]:
        if "uses" in step:
            if _fill(step.get("if", "true"), context).strip() == "true":
                ran["uses"].append((step["uses"], {k: _fill(str(v), context) for k, v in step["with"].items()}))
            continue
        env = {k: _fill(str(v), context) for k, v in (step.get("env") or {}).items()}
        if step["name"] == "Install envdoctor":  # not run: envdoctor is installed in this venv already
            assert step["run"].startswith("python -m pip install") and env["ACTION_PATH"] == str(ACTION.parent)
            continue
        output = runner / f"out-{len(ran['logs'])}"
        output.write_text("")
        proc = subprocess.run(["prlimit", "--nofile=256:4096", "bash", "--noprofile", "--norc", "-eo", "pipefail",
                               "-c", _fill(step["run"], context)], cwd=repo, capture_output=True, text=True,
                              timeout=240, env={**os.environ, **env, "PATH": path, "NO_COLOR": "1",
                                                "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)})
        ran["logs"][step["name"]] = proc
        if "id" in step:
            context["steps"][step["id"]] = {"outputs": _outputs(output)}
        if proc.returncode != 0:
            ran["failed"] = (step["name"], proc.returncode)
            break
    ran["context"] = context
    return ran


def test_action_annotates_summarises_and_writes_sarif_then_fails_on_the_errors(tmp_path):
    repo = make_train_repo(tmp_path / "repo")
    runner = tmp_path / "runner"
    runner.mkdir()
    ran = run_action(repo, runner, {"args": "--no-loader --select SPW001,SYS001",
                                    "scripts": "train/a.py train/b.py train/c.py"})
    # Every step ran; the last one failed the job with envdoctor's exit code.
    assert ran["failed"] == ("Fail on findings", 1), {k: v.stderr for k, v in ran["logs"].items()}
    annotations = ran["logs"]["Annotate the files"].stdout.splitlines()
    assert any(a.startswith("::error file=train/a.py,line=8,col=1,title=SPW001 missing-main-guard::")
               for a in annotations), annotations
    assert any(re.match(r"::(error|warning) file=pyproject\.toml,line=1,title=SYS001 nofile-limit-low::", a)
               for a in annotations), annotations
    assert ran["context"]["steps"]["annotate"]["outputs"]["exit-code"] == "1"
    summary = ran["summary"].read_text(encoding="utf-8")
    assert summary.startswith("# envdoctor report") and "### ✗ SPW001 `missing-main-guard`" in summary
    sarif_path = Path(ran["context"]["steps"]["check"]["outputs"]["sarif"])
    log = json.loads(sarif_path.read_text(encoding="utf-8"))
    validate_sarif(log)
    assert sorted(r["ruleId"] for r in log["runs"][0]["results"]) == ["SPW001", "SPW001", "SPW001", "SYS001"]
    [(uses, with_)] = ran["uses"]
    assert uses.startswith("github/codeql-action/upload-sarif@") and with_["sarif_file"] == str(sarif_path)


def test_action_passes_when_nothing_reaches_fail_on_and_can_skip_the_upload(tmp_path):
    repo = make_train_repo(tmp_path / "repo")
    runner = tmp_path / "runner"
    runner.mkdir()
    ran = run_action(repo, runner, {"args": "--no-loader --select SPW001", "scripts": "train/a.py",
                                    "fail-on": "never", "upload-sarif": "false"})
    assert "failed" not in ran, {k: v.stderr for k, v in ran["logs"].items()}
    assert ran["uses"] == []
    assert ran["logs"]["Annotate the files"].stdout.startswith("::error file=train/a.py,line=8")

"""No interpreter from a repository's settings without the user's consent (issue 33).

The attack, for real: a cloned repository commits `tools/env/bin/python` (a program that leaves a mark when it
runs) and `[tool.envdoctor] prefix = "tools/env"` in its pyproject.toml. Before, the pre-commit hook (which
says it starts no interpreter), `check` and the Action's `report` all started it. Now each ignores the
setting, says so and why on standard error, and starts it only when the user consents: the option on the
command line, ENVDOCTOR_TRUST_PROJECT, or the user's own trusted-projects file (read only when no other user
can write it).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.config import TRUST_ENV, load_config
from test_report_action import run_action
from test_spawn_precommit import _DRIVER, hook

pytestmark = pytest.mark.slow

NOTE = "ignored prefix = 'tools/env' from"


def _hostile_repo(folder: Path) -> Path:
    """A git repository whose pyproject.toml names the interpreter it commits; MARKER appears when it runs."""
    env_bin = folder / "tools" / "env" / "bin"
    env_bin.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    (folder / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.envdoctor]\nprefix = "tools/env"\n')
    (folder / "tools" / "env" / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\n")
    python = env_bin / "python"
    python.write_text(f"#!/bin/sh\necho ran >> {shlex.quote(str(folder / 'MARKER'))}\n"
                      f"exec {shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    (folder / "a.py").write_text("import os\n")
    return folder


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment, less any consent of the user running the tests, with a config folder of
    the test's own."""
    env = {k: v for k, v in os.environ.items() if k != TRUST_ENV}
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    return {**env, "XDG_CONFIG_HOME": str(config), "NO_COLOR": "1", **extra}


def _hook(repo: Path, tmp_path: Path, env: dict[str, str], *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """The hook's own entry, as pre-commit runs it in the repository, every process start recorded."""
    record = tmp_path / "record.json"
    argv = shlex.split(hook()["entry"])
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(record), *argv[1:], *extra, "a.py"],
                          capture_output=True, text=True, timeout=120, cwd=repo, env=env)
    return proc, json.loads(record.read_text())


def test_the_pre_commit_hook_ignores_a_prefix_from_the_repository_and_says_why(tmp_path: Path) -> None:
    repo = _hostile_repo(tmp_path / "repo")
    proc, record = _hook(repo, tmp_path, _env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert not (repo / "MARKER").exists(), "the repository's interpreter ran"
    assert record["started"] == []
    assert NOTE in proc.stderr and "may not choose code for envdoctor to run" in proc.stderr
    assert f"{TRUST_ENV}={repo.resolve()}" in proc.stderr  # how to consent, named


def test_consent_by_the_environment_the_users_file_or_the_command_line(tmp_path: Path) -> None:
    repo = _hostile_repo(tmp_path / "repo")
    given, record = _hook(repo, tmp_path, _env(tmp_path), "--prefix", "tools/env")
    assert given.returncode == 0 and (repo / "MARKER").exists() and NOTE not in given.stderr
    (repo / "MARKER").unlink()

    trusted, _ = _hook(repo, tmp_path, _env(tmp_path, **{TRUST_ENV: str(repo)}))
    assert trusted.returncode == 0 and (repo / "MARKER").exists() and NOTE not in trusted.stderr
    (repo / "MARKER").unlink()

    listed = tmp_path / "config" / "envdoctor" / "trusted-projects"
    listed.parent.mkdir(parents=True)
    listed.write_text(f"# projects whose settings may run code\n{repo}\n")
    listed.chmod(0o600)
    in_file, _ = _hook(repo, tmp_path, _env(tmp_path))
    assert in_file.returncode == 0 and (repo / "MARKER").exists() and NOTE not in in_file.stderr
    (repo / "MARKER").unlink()

    listed.chmod(0o666)  # another user could have written it: not consent
    loose, _ = _hook(repo, tmp_path, _env(tmp_path))
    assert not (repo / "MARKER").exists() and NOTE in loose.stderr
    assert "is writable by other users, so it is not read" in loose.stderr


def test_check_ignores_it_too(tmp_path: Path) -> None:
    repo = _hostile_repo(tmp_path / "repo")
    proc = subprocess.run([sys.executable, "-m", "envdoctor", "check", "--no-loader", "--select", "SYS001"],
                          capture_output=True, text=True, timeout=120, cwd=repo, env=_env(tmp_path))
    assert proc.returncode in (0, 1), proc.stderr
    assert not (repo / "MARKER").exists() and NOTE in proc.stderr
    assert str(repo / "tools" / "env") not in proc.stdout  # the target is the environment envdoctor runs in


def test_the_action_ignores_it_unless_the_workflow_trusts_the_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _hostile_repo(tmp_path / "repo")
    for name, value in _env(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(TRUST_ENV, raising=False)
    runner = tmp_path / "runner"
    runner.mkdir()
    inputs = {"args": "--no-loader --select SPW001", "scripts": "a.py", "upload-sarif": "false"}
    ran = run_action(repo, runner, inputs)
    assert "failed" not in ran, {k: v.stderr for k, v in ran["logs"].items()}
    assert not (repo / "MARKER").exists() and NOTE in ran["logs"]["Check the environment"].stderr
    ran = run_action(repo, runner, {**inputs, "trust-project-settings": "true"})
    assert "failed" not in ran, {k: v.stderr for k, v in ran["logs"].items()}
    assert (repo / "MARKER").exists() and NOTE not in ran["logs"]["Check the environment"].stderr


def test_every_setting_that_runs_code_needs_consent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """prefix, env-name, dataset and deep from an untrusted pyproject.toml are dropped, each with a note; the
    rest (select, budget) stays; the command line wins either way."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(TRUST_ENV, raising=False)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.envdoctor]\nprefix = "tools/env"\nenv-name = "evil"\ndataset = "evil:make"\n'
                         'deep = true\nselect = ["SYS"]\nbudget = 7\n')
    said: list[str] = []
    config = load_config({}, pyproject, say=said.append)
    assert (config.prefix, config.env_name, config.dataset, config.deep) == (None, None, None, False)
    assert config.select == ("SYS",) and config.budget == 7
    assert [note.split(" from ")[0] for note in said] == [
        "ignored prefix = 'tools/env'", "ignored env-name = 'evil'", "ignored dataset = 'evil:make'", "ignored deep = true"]
    assert config.ignored_settings == tuple(said)
    given = load_config({"dataset": "mine:make"}, pyproject, say=said.append)
    assert given.dataset == "mine:make"
    monkeypatch.setenv(TRUST_ENV, os.pathsep.join(["/elsewhere", str(tmp_path)]))
    trusted = load_config({}, pyproject, say=said.append)
    assert (trusted.prefix, trusted.env_name, trusted.dataset, trusted.deep) == ("tools/env", "evil", "evil:make", True)
    assert trusted.ignored_settings == ()

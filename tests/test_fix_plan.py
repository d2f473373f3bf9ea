"""The fix plan: which steps run, with which executable, and which are refused and why.

Conda, mamba, micromamba and pixi cannot be installed here: their steps are
tested up to the plan, with the exact argv that would run. The prefixes are
real folders (conda-meta/, pyvenv.cfg, a pixi workspace) and the tools real
executables on a PATH the test builds; nothing here runs them.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from envdoctor.fix.plan import make_plan
from envdoctor.fix.tools import Target, package_arguments
from envdoctor.model import Finding, FixStep, Report, Severity


def report_for(target: dict[str, object], *steps_per_finding: tuple[FixStep, ...]) -> Report:
    findings = [Finding(rule="PKG001", name="conda-pip-double", severity=Severity.ERROR, message=f"finding {i}",
                        evidence={"package": f"p{i}"}, fix="(text)", fix_steps=steps)
                for i, steps in enumerate(steps_per_finding)]
    return Report(tool={}, generated_at="", host={}, target=target, facts={}, findings=findings)


def executable(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 99\n")  # never run: the plan only finds it
    path.chmod(0o755)
    return path


@pytest.fixture()
def conda_prefix(tmp_path: Path) -> Path:
    prefix = tmp_path / "envs" / "train"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "bin").mkdir()
    return prefix


def only_step(report: Report, environ: dict[str, str]) -> tuple[tuple[str, ...], str | None]:
    [step] = make_plan(report, environ).steps
    return step.argv, step.skip


def test_conda_step_runs_the_conda_on_path_with_the_exact_argv(conda_prefix: Path, tmp_path: Path) -> None:
    conda = executable(tmp_path / "tools", "conda")
    target = {"prefix": str(conda_prefix), "kind": "conda"}
    step = FixStep.command("conda", "conda", "install", "-p", str(conda_prefix), "--force-reinstall", "numpy=1.26.4")
    argv, skip = only_step(report_for(target, (step,)), {"PATH": str(tmp_path / "tools")})
    assert skip is None
    assert argv == (str(conda), "install", "-p", str(conda_prefix), "--force-reinstall", "numpy=1.26.4")


def test_conda_found_through_conda_exe_or_the_base_prefix(conda_prefix: Path, tmp_path: Path) -> None:
    target = {"prefix": str(conda_prefix), "kind": "conda"}
    step = FixStep.command("conda", "conda", "remove", "-p", str(conda_prefix), "cudatoolkit")
    elsewhere = executable(tmp_path / "miniforge" / "bin", "conda")
    argv, skip = only_step(report_for(target, (step,)), {"PATH": "/nonexistent", "CONDA_EXE": str(elsewhere)})
    assert (argv, skip) == ((str(elsewhere), "remove", "-p", str(conda_prefix), "cudatoolkit"), None)
    base = executable(tmp_path / "bin", "conda")  # <base>/envs/train: the base holds conda itself
    argv, skip = only_step(report_for(target, (step,)), {"PATH": "/nonexistent"})
    assert (argv, skip) == ((str(base), "remove", "-p", str(conda_prefix), "cudatoolkit"), None)


def test_mamba_and_micromamba_steps(conda_prefix: Path, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    target = {"prefix": str(conda_prefix), "kind": "conda"}
    for tool in ("mamba", "micromamba"):
        exe = executable(tools, tool)
        step = FixStep.command(tool, tool, "install", "-p", str(conda_prefix), "-c", "conda-forge", "pytorch=2.5.1")
        argv, skip = only_step(report_for(target, (step,)), {"PATH": str(tools)})
        assert (argv, skip) == ((str(exe), "install", "-p", str(conda_prefix), "-c", "conda-forge", "pytorch=2.5.1"),
                                None)


def test_conda_refusals_say_why(conda_prefix: Path, tmp_path: Path) -> None:
    target = {"prefix": str(conda_prefix), "kind": "conda"}
    path = {"PATH": str(tmp_path / "empty")}
    step = FixStep.command("conda", "conda", "install", "-p", str(conda_prefix), "numpy=1.26.4")
    assert only_step(report_for(target, (step,)), path)[1] == "conda is not on PATH or in the prefix"
    executable(tmp_path / "tools", "conda")
    path = {"PATH": str(tmp_path / "tools")}
    other = FixStep.command("conda", "conda", "install", "-p", str(tmp_path / "other"), "numpy=1.26.4")
    assert "does not name the prefix" in only_step(report_for(target, (other,)), path)[1]
    active = FixStep.command("conda", "conda", "install", "numpy=1.26.4")  # whichever env is active: never
    assert "does not name the prefix" in only_step(report_for(target, (active,)), path)[1]
    disguised = FixStep.command("conda", "/bin/sh", "-c", "conda install numpy")
    assert "not conda" in only_step(report_for(target, (disguised,)), path)[1]


def test_pixi_step_names_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "proj"
    prefix = workspace / ".pixi" / "envs" / "default"
    (prefix / "conda-meta").mkdir(parents=True)
    pixi = executable(tmp_path / "tools", "pixi")
    target = {"prefix": str(prefix), "kind": "pixi"}
    env = {"PATH": str(tmp_path / "tools")}
    step = FixStep.command("pixi", "pixi", "reinstall", "--manifest-path", str(workspace), "-e", "default", "numpy")
    assert only_step(report_for(target, (step,)), env) == (
        (str(pixi), "reinstall", "--manifest-path", str(workspace), "-e", "default", "numpy"), None)
    wrong = FixStep.command("pixi", "pixi", "add", "--manifest-path", str(tmp_path / "elsewhere"), "numpy")
    assert "does not name the pixi workspace" in only_step(report_for(target, (wrong,)), env)[1]


def system_prefix(tmp_path: Path, managed: bool) -> Path:
    """A system-style prefix whose bin/python is this interpreter (it has pip)."""
    prefix = tmp_path / "usr"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3").symlink_to(sys.executable)
    stdlib = prefix / "lib" / "python3.11"
    stdlib.mkdir(parents=True)
    if managed:
        (stdlib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\nError=use apt\n")
    return prefix


def test_externally_managed_interpreter_needs_break_system_packages(tmp_path: Path) -> None:
    prefix = system_prefix(tmp_path, managed=True)
    python = str(prefix / "bin" / "python3")
    target = {"prefix": str(prefix), "kind": "system", "stdlib": [str(prefix / "lib" / "python3.11")]}
    bare = FixStep.command("pip", python, "-m", "pip", "install", "PyYAML==6.0.2")
    assert "EXTERNALLY-MANAGED" in only_step(report_for(target, (bare,)), dict(os.environ))[1]
    uv = FixStep.command("uv", "uv", "pip", "uninstall", "--python", python, "pyyaml")
    assert "EXTERNALLY-MANAGED" in only_step(report_for(target, (uv,)), dict(os.environ))[1]
    allowed = FixStep.command("pip", python, "-m", "pip", "uninstall", "--break-system-packages", "-y", "PyYAML")
    assert only_step(report_for(target, (allowed,)), dict(os.environ)) == (allowed.argv, None)
    # The same interpreter without the marker, or the marker seen from a venv: plain pip is fine.
    target_venv = {**target, "kind": "venv"}
    assert only_step(report_for(target_venv, (bare,)), dict(os.environ)) == (bare.argv, None)


def test_pip_must_be_the_prefixs_own_interpreter(tmp_path: Path) -> None:
    prefix = system_prefix(tmp_path, managed=False)
    target = {"prefix": str(prefix), "kind": "system"}
    other = FixStep.command("pip", sys.executable, "-m", "pip", "install", "x")
    assert "is not an interpreter of the prefix" in only_step(report_for(target, (other,)), {})[1]
    bare = FixStep.command("pip", "python", "-m", "pip", "install", "x")
    assert "is not a path" in only_step(report_for(target, (bare,)), {})[1]
    shell = FixStep.command("pip", str(prefix / "bin" / "python3"), "-c", "import os")
    assert "must be" in only_step(report_for(target, (shell,)), {})[1]
    escape = FixStep.command("pip", str(prefix / "bin" / "python3"), "-m", "pip", "install", "--target", "/tmp/x", "y")
    assert "outside the prefix" in only_step(report_for(target, (escape,)), {})[1]


def test_a_venv_without_pip_gets_pip_from_ensurepip_first(tmp_path: Path) -> None:
    import subprocess

    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    python = str(venv / "bin" / "python")
    target = {"prefix": str(venv), "kind": "venv"}
    install = FixStep.command("pip", python, "-m", "pip", "install", "urllib3")
    assert "pip is not installed" in only_step(report_for(target, (install,)), {})[1]
    plan = make_plan(report_for(target, (FixStep.command("pip", python, "-m", "ensurepip"), install)), {})
    assert [s.skip for s in plan.steps] == [None, None]


def test_uv_step_must_name_the_target(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("uv = 0.13.9\n")
    uv = executable(tmp_path / "tools", "uv")
    target = {"prefix": str(venv), "kind": "venv"}
    env = {"PATH": str(tmp_path / "tools")}
    good = FixStep.command("uv", "uv", "pip", "install", "--python", str(venv), "urllib3<3,>=1.21.1")
    assert only_step(report_for(target, (good,)), env) == ((str(uv), *good.argv[1:]), None)
    unnamed = FixStep.command("uv", "uv", "pip", "install", "urllib3")  # VIRTUAL_ENV or ./.venv: never
    assert "--python" in only_step(report_for(target, (unnamed,)), env)[1]
    other = FixStep.command("uv", "uv", "pip", "install", "--python", str(tmp_path), "urllib3")
    assert "is not the prefix" in only_step(report_for(target, (other,)), env)[1]


def test_file_moves_stay_inside_the_prefix_after_resolving_symlinks(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    site = prefix / "lib" / "python3.11" / "site-packages"
    (site / "a-1.0.dist-info").mkdir(parents=True)
    outside = tmp_path / "outside"
    (outside / "b-1.0.dist-info").mkdir(parents=True)
    (site / "sneaky").symlink_to(outside)  # a folder inside that leads outside
    target = {"prefix": str(prefix), "kind": "venv"}
    ok = FixStep.file_move(str(site / "a-1.0.dist-info"), str(site / "a-1.0.dist-info.envdoctor-aside"))
    assert only_step(report_for(target, (ok,)), {}) == ((), None)
    through_link = FixStep.file_move(str(site / "sneaky" / "b-1.0.dist-info"), str(site / "b.aside"))
    assert "outside the prefix" in only_step(report_for(target, (through_link,)), {})[1]
    out = FixStep.file_move(str(site / "a-1.0.dist-info"), str(outside / "x"))
    assert "outside the prefix" in only_step(report_for(target, (out,)), {})[1]
    dotdot = FixStep.file_move(str(site / ".." / ".." / ".." / ".." / "outside" / "b-1.0.dist-info"), str(site / "b"))
    assert "outside the prefix" in only_step(report_for(target, (dotdot,)), {})[1]
    (site / "taken").mkdir()
    clash = FixStep.file_move(str(site / "a-1.0.dist-info"), str(site / "taken"))
    assert "already exists" in only_step(report_for(target, (clash,)), {})[1]


def test_apt_never_runs_for_a_prefix_that_is_not_the_system(tmp_path: Path) -> None:
    executable(tmp_path / "tools", "apt-get")
    target = {"prefix": str(tmp_path), "kind": "venv"}
    step = FixStep.command("apt", "apt-get", "install", "-y", "python3-yaml")
    assert "installs into the system" in only_step(report_for(target, (step,)), {"PATH": str(tmp_path / "tools")})[1]


def test_a_refused_step_blocks_the_rest_of_its_fix_and_duplicates_run_once(conda_prefix: Path, tmp_path: Path) -> None:
    target = {"prefix": str(conda_prefix), "kind": "conda"}
    executable(tmp_path / "tools", "conda")
    env = {"PATH": str(tmp_path / "tools")}
    outside = FixStep.file_move(str(tmp_path / "x"), str(conda_prefix / "x"))
    reinstall = FixStep.command("conda", "conda", "install", "-p", str(conda_prefix), "--force-reinstall", "numpy=1.26.4")
    plan = make_plan(report_for(target, (outside, reinstall), (reinstall,), (reinstall,)), env)
    assert [s.number for s in plan.steps] == [1, 2, 3, 4]
    assert "outside the prefix" in plan.steps[0].skip
    assert plan.steps[1].skip == "another step of this fix cannot run (step 1)"
    assert plan.steps[2].skip is None  # the second finding's own, identical step still runs, once
    assert plan.steps[3].skip == "same as step 3"


def test_a_refused_later_step_also_holds_back_the_earlier_ones(conda_prefix: Path, tmp_path: Path) -> None:
    """pip uninstall then conda reinstall, without conda: running the uninstall alone would be half a fix."""
    target = {"prefix": str(conda_prefix), "kind": "conda"}
    (conda_prefix / "bin" / "python3").symlink_to(sys.executable)
    uninstall = FixStep.command("pip", str(conda_prefix / "bin" / "python3"), "-m", "pip", "uninstall", "-y", "numpy")
    reinstall = FixStep.command("conda", "conda", "install", "-p", str(conda_prefix), "--force-reinstall", "numpy=1.26.4")
    plan = make_plan(report_for(target, (uninstall, reinstall)), {"PATH": str(tmp_path / "empty")})
    assert [s.skip for s in plan.steps] == ["another step of this fix cannot run (step 2)",
                                            "conda is not on PATH or in the prefix"]
    assert plan.runnable == []


def test_package_arguments(tmp_path: Path) -> None:
    assert package_arguments("pip", ["/e/bin/python", "-m", "pip", "install", "--force-reinstall", "--no-deps",
                                     "-f", "/wheels", "numpy==2.1.3"]) == ("install", ["numpy==2.1.3"])
    assert package_arguments("uv", ["uv", "pip", "uninstall", "--python", "/e", "PyYAML"]) == ("uninstall", ["PyYAML"])


def test_target_contains_resolves_symlinks(tmp_path: Path) -> None:
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "link").symlink_to("/etc")
    target = Target.from_report_target({"prefix": str(tmp_path / "env")})
    assert target.contains(tmp_path / "env" / "x")
    assert not target.contains(tmp_path / "env" / "link" / "passwd")
    assert target.contains_entry(tmp_path / "env" / "link")  # the link itself sits inside
    assert not target.contains_entry(tmp_path / "env")  # the prefix itself is never moved

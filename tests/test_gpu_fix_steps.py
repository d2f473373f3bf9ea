"""GPU001's fix as data, on real environments: a pip venv, a uv venv, a conda prefix, NVIDIA's container layout.

The GPU is fake_pynvml's idle H100 with driver 550.54.15 (CUDA 12.4), read by
the real read_nvml(); everything else is real: the environments are built
here (python -m venv, uv venv, py-rattler, a Debian root with a dpkg
database) and torch in them is a tiny wheel or package holding the version
module a CPU build ships, installed by the tool under test. The real engine
checks each one, so GPU001 fires with the fix its owner's tool runs.

Those steps install torch from download.pytorch.org, which no test may reach,
so they are not run: they are asserted argv for argv, and passed through
`envdoctor fix`'s own planner (make_plan), which authorizes each step the way
`envdoctor fix` would — the tool is found, the command names the target, and
what it writes is inside it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from condafixtures import PY_FULL, SITE, World, write_wheel
from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.fix.plan import Plan, make_plan
from envdoctor.model import Finding, FixStep, Report
from envs.systemroot import SystemRoot, system_python_version
from fixenvs import make_pip_venv, make_uv_venv, offline_env, run_ok, uv_executable

pytestmark = pytest.mark.slow

GPU = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"
CU124 = "https://download.pytorch.org/whl/cu124"  # the newest wheel CUDA driver 550.54.15 runs
#: torch/version.py of a CPU wheel (torch 2.13.0+cpu's, less the fields envdoctor does not read).
CPU_VERSION_MODULE = (b"__version__ = '2.13.0+cpu'\ndebug = False\ncuda = None\n"
                      b"git_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'\nhip = None\n")
CPU_TORCH = {"torch/__init__.py": b"from .version import __version__\n", "torch/version.py": CPU_VERSION_MODULE}


@pytest.fixture()
def h100(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML answers as on an idle H100 (fixtures/gpu/states/h100_idle.json)."""
    sys.path.insert(0, str(GPU))
    try:
        import fake_pynvml
    finally:
        sys.path.remove(str(GPU))
    monkeypatch.setattr(fake_pynvml, "_state", json.loads((GPU / "states" / "h100_idle.json").read_text()))
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)


def gpu001(prefix: Path) -> tuple[Report, Finding]:
    report = run_check(Config(prefix=str(prefix), no_loader=True, select=("GPU001",)))
    assert report.errors == []
    [finding] = report.by_rule("GPU001")
    assert finding.evidence["torch_build"] == "cpu" and finding.evidence["suggested_cuda"] == "12.4"
    return report, finding


def planned(report: Report, path: list[str]) -> Plan:
    """envdoctor fix's plan for the report, with only `path` on PATH."""
    plan = make_plan(report, {"PATH": ":".join(path)})
    assert plan.without_steps == []
    return plan


def fake_tool(folder: Path, name: str) -> Path:
    """An executable named like the tool, so the plan finds it; the plan never starts it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\necho 'a plan must not start me' >&2\nexit 99\n")
    path.chmod(0o755)
    return path


def test_pip_venv_gets_its_own_pip_with_the_cuda_index_and_torchvision(h100: None, tmp_path: Path,
                                                                         pip_venv_template: Path) -> None:
    wheels = tmp_path / "wheels"
    env = offline_env(wheels, tmp_path / "cache")
    torch = write_wheel(wheels, "torch", "2.13.0+cpu", CPU_TORCH)
    vision = write_wheel(wheels, "torchvision", "0.28.0", {"torchvision/__init__.py": b""})
    venv = make_pip_venv(pip_venv_template, tmp_path / "venv")
    run_ok([str(venv / "bin" / "python"), "-m", "pip", "install", str(torch), str(vision)], env)
    report, finding = gpu001(venv)
    python = str(venv / "bin" / "python3")  # the venv's own interpreter, never a `python` from PATH
    command = (python, "-m", "pip", "install", "--force-reinstall", "torch", "torchvision", "--index-url", CU124)
    assert finding.fix_steps == (FixStep.command("pip", *command),)
    assert finding.fix.startswith(" ".join(command) + "   # to stay on torch 2.13.0")
    plan = planned(report, [])
    [step] = plan.steps
    assert step.runs and step.argv == command and step.rule == "GPU001"


def test_uv_venv_gets_uv_pip_naming_the_venv(h100: None, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    env = offline_env(wheels, tmp_path / "cache")
    torch = write_wheel(wheels, "torch", "2.13.0+cpu", CPU_TORCH)
    venv = make_uv_venv(tmp_path / "venv", env)
    run_ok([uv_executable(), "pip", "install", "--python", str(venv), str(torch)], env)
    assert not list(venv.glob("lib/python3*/site-packages/pip"))  # uv venvs have no pip: `-m pip` would fail
    report, finding = gpu001(venv)
    command = ("uv", "pip", "install", "--python", str(venv), "--reinstall", "torch", "--index-url", CU124)
    assert finding.fix_steps == (FixStep.command("uv", *command),)
    assert finding.fix.startswith(" ".join(command) + "   # ")
    [step] = planned(report, [str(Path(uv_executable()).parent)]).steps
    assert step.runs and step.argv == (uv_executable(), *command[1:])


def test_conda_prefix_gets_conda_install_naming_the_prefix(h100: None, conda_world: World, tmp_path: Path) -> None:
    prefix = conda_world.make_prefix(tmp_path / "envs" / "train",
                                     [f"python =={PY_FULL}", "pip >=1", "numpy ==1.26.4", "pytorch >=1"])
    # The channel's tiny pytorch has no version module; the real package ships one (a CPU build's here).
    (prefix / SITE / "torch" / "version.py").write_bytes(CPU_VERSION_MODULE.replace(b"2.13.0+cpu", b"2.5.1"))
    report, finding = gpu001(prefix)
    command = ("conda", "install", "-p", str(prefix), "-c", "conda-forge", "pytorch=*=cuda*", "cuda-version=12.4")
    assert finding.fix_steps == (FixStep.command("conda", *command),)
    assert finding.fix == (f"conda install -p {prefix} -c conda-forge 'pytorch=*=cuda*' cuda-version=12.4   "
                           "# to stay on torch 2.5.1, ask for 'pytorch=2.5.1=cuda*' if conda-forge has that build")
    # No conda can be installed here: the plan finds the conda a user has on PATH (a stand-in it never starts).
    conda = fake_tool(tmp_path / "tools", "conda")
    [step] = planned(report, [str(conda.parent)]).steps
    assert step.runs and step.argv == (str(conda), *command[1:])
    # Without conda anywhere, the step is not run, and the plan says why.
    [step] = planned(report, [str(tmp_path / "empty")]).steps
    assert step.skip == "conda is not on PATH or in the prefix"


needs_debian = pytest.mark.skipif(system_python_version() is None or not Path("/var/lib/dpkg/info").is_dir(),
                                  reason="needs Debian's python3 with python3-pip and a dpkg database")


@needs_debian
def test_nvidia_container_layout_pip_torch_over_the_system_python(h100: None, tmp_path: Path) -> None:
    """torch pip put into /usr/local of an EXTERNALLY-MANAGED Debian python: pip's copy, so pip replaces it."""
    root = SystemRoot(tmp_path / "root")
    wheels = tmp_path / "wheels"
    write_wheel(wheels, "torch", "2.13.0+cpu", CPU_TORCH)
    root.pip("install", "--break-system-packages", "--no-index", "--find-links", str(wheels), "torch")
    assert (root.local_dist_packages / "torch" / "version.py").is_file()
    report, finding = gpu001(root.usr)
    command = (str(root.python), "-m", "pip", "install", "--break-system-packages", "--force-reinstall", "torch",
               "--index-url", CU124)
    assert finding.fix_steps == (FixStep.command("pip", *command),)
    [step] = planned(report, []).steps
    assert step.runs and step.argv == command


@needs_debian
def test_torch_from_the_system_package_manager_gets_advice_not_pip(h100: None, tmp_path: Path) -> None:
    root = SystemRoot(tmp_path / "root")
    root.apt_install("python3-torch", "torch", "2.6.0", CPU_TORCH)
    report, finding = gpu001(root.usr)
    assert finding.fix_steps == ()
    assert finding.fix.startswith("torch here is python3-torch (dpkg), which has no build for CUDA 12.4: create a venv")
    assert "--break-system-packages" not in finding.fix and f"{root.python} -m pip" not in finding.fix
    plan = make_plan(report, {"PATH": ""})
    assert plan.steps == [] and [f.rule for f in plan.without_steps] == ["GPU001"]

"""The torch facts: files read without importing, and the import probe in the target interpreter.

Target environments are real venvs made here (`python -m venv --without-pip`)
holding the real numpy (linked from this environment) and a small `torch`
package whose import fails, hangs, or meets numpy the way an extension
compiled for NumPy 1.x does (numpy's own `_ARRAY_API` path, which prints the
real message). The real torch of this environment is probed in the slow tests.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy
import psutil
import pytest

from envdoctor.config import Config
from envdoctor.facts import Facts
from envdoctor.facts import torch as torch_facts
from envdoctor.facts.torch import (
    PROBE_SCRIPT,
    TorchProbe,
    gather_torch,
    probe_environment,
    probe_timeout,
    read_torch_files,
    read_version_module,
    run_torch_probe,
)
from support import findings, json_report, run_envdoctor

NUMPY_DIR = Path(numpy.__file__).resolve().parent


def make_venv(root: Path) -> tuple[Path, Path]:
    """A real venv with this environment's numpy in it; (prefix, site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    for name in ("numpy", "numpy.libs"):
        source = NUMPY_DIR.parent / name
        if source.exists():
            (site / name).symlink_to(source)
    dist = next(NUMPY_DIR.parent.glob("numpy-*.dist-info"), None)
    if dist:
        (site / dist.name).symlink_to(dist)
    return root, site


def fake_torch(site: Path, init: str, version: str = "2.5.1+cu124", cuda: str | None = "12.4") -> None:
    package = site / "torch"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(init))
    (package / "version.py").write_text(textwrap.dedent(f"""\
        from typing import Optional
        __all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']
        __version__ = {version!r}
        debug = False
        cuda: Optional[str] = {cuda!r}
        git_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'
        hip: Optional[str] = None
        """))
    dist = site / f"torch-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
                                   "Requires-Dist: nvidia-cudnn-cu12==9.1.0.70; platform_system == \"Linux\"\n\n")
    (dist / "INSTALLER").write_text("pip\n")


BROKEN = """\
    raise OSError("libcudnn.so.9: cannot open shared object file: No such file or directory")
    """

# What torch's C extension does at import under an ABI it was not built for:
# ask numpy for _ARRAY_API (numpy prints its message and raises), then warn.
NUMPY1_EXTENSION = """\
    import importlib
    import warnings
    from . import version
    __version__ = version.__version__
    try:
        getattr(importlib.import_module("numpy.core._multiarray_umath"), "_ARRAY_API")
    except ImportError:
        warnings.warn("Failed to initialize NumPy: _ARRAY_API not found (Triggered internally at "
                      "../torch/csrc/utils/tensor_numpy.cpp:84.)", UserWarning)
    """

HEALTHY = """\
    from . import version
    __version__ = version.__version__
    """


def target_facts(prefix: Path, **config) -> Facts:
    return Facts(Config(prefix=str(prefix), **config))


# --- files, no import -------------------------------------------------------------------------


def test_version_module_is_read_without_executing(tmp_path: Path) -> None:
    module = tmp_path / "version.py"
    module.write_text("import sys; sys.exit('executed!')\n__version__ = '2.4.0+cu121'\ncuda: str = '12.1'\n")
    assert read_version_module(module) == {"__version__": "2.4.0+cu121", "cuda": "12.1"}


def test_files_give_version_build_and_wheels(tmp_path: Path) -> None:
    prefix, site = make_venv(tmp_path / "env")
    fake_torch(site, BROKEN)
    (site / "nvidia_cudnn_cu12-9.1.0.70.dist-info").mkdir()
    section = read_torch_files({"site_packages": [str(site)], "sys_path": []})
    assert section["version"] == "2.5.1+cu124" and section["cuda_build"] == "12.4" and section["build"] == "cuda"
    assert section["git_version"] == "a8d6afb511a69687bbb2b7e88a3cf67917e1697e"
    assert section["installer"] == "pip" and section["requires_nvidia"] == ["nvidia-cudnn-cu12==9.1.0.70"]
    assert section["cudnn_wheel"] == "9.1.0.70"


def test_no_torch_is_a_fact(tmp_path: Path) -> None:
    prefix, _ = make_venv(tmp_path / "env")
    section = gather_torch(target_facts(prefix, deep=True))
    assert section["installed"] is False
    assert section["probe"]["ran"] is False


# --- the probe in a target that fails, hangs, warns --------------------------------------------


def test_import_error_is_a_finding_within_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, site = make_venv(tmp_path / "env")
    fake_torch(site, BROKEN)
    monkeypatch.setenv("ENVDOCTOR_TORCH_PROBE_TIMEOUT", "30")
    start = time.monotonic()
    proc = run_envdoctor("report", "--json", "--prefix", str(prefix), "--no-loader", "--deep",
                         "--select", "PKG010", "PKG008", "GPU001")
    assert time.monotonic() - start < 1.5 * 30  # the probe's limit, set above; slack derived from it
    report = json_report(proc)
    assert proc.returncode == 1
    hits = findings(report, "PKG010")
    assert len(hits) == 1
    assert hits[0]["evidence"]["error"] == ("OSError: libcudnn.so.9: cannot open shared object file: "
                                            "No such file or directory")
    assert hits[0]["evidence"]["torch_version"] == "2.5.1+cu124"
    assert any("libcudnn" in line for line in hits[0]["evidence"]["traceback_tail"])
    assert "whl/cu124" in hits[0]["fix"]
    # The venv has no pip (venv --without-pip): ensurepip, then its own pip puts the cu124 build back.
    python = str(prefix / "bin" / "python3")
    assert hits[0]["fix_steps"] == [
        {"tool": "pip", "argv": [python, "-m", "ensurepip"]},
        {"tool": "pip", "argv": [python, "-m", "pip", "install", "--force-reinstall", "torch==2.5.1",
                                 "--index-url", "https://download.pytorch.org/whl/cu124"]}]
    assert findings(report, "PKG008") == []


def test_hanging_sitecustomize_times_out_and_leaves_nothing(tmp_path: Path) -> None:
    prefix, site = make_venv(tmp_path / "env")
    fake_torch(site, HEALTHY)
    pidfile = tmp_path / "pid"
    (site / "sitecustomize.py").write_text(
        f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    start = time.monotonic()
    # The probe waits its timeout out: 2 s is over ten times what the interpreter took to reach sitecustomize
    # on the loaded machine (0.1 s).
    probe = run_torch_probe(str(prefix / "bin" / "python"), timeout=2)
    assert time.monotonic() - start < 4 * 2  # the limit given, with slack derived from it for the kill
    assert probe["timed_out"] is True and probe["timeout_s"] == 2
    assert "did not finish within 2 s" in probe["error"]
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # …and the rule says so.
    from envdoctor.rules.packages.torch_import import RULES as PKG_RUNTIME_RULES
    from envdoctor.rules.system.runtime import RULES as SYS_RUNTIME_RULES
    RULES = {**SYS_RUNTIME_RULES, **PKG_RUNTIME_RULES}

    facts = Facts.from_dict({"torch": {"installed": True, "version": "2.5.1+cu124", "probe": {**probe, "ran": True}},
                             "target": {"interpreter": str(prefix / "bin" / "python")}})
    hits = list(RULES["PKG010"](facts))
    assert hits[0].evidence["timeout_s"] == 2 and "did not finish within 2 s" in hits[0].message


def test_the_probe_shares_the_budget_with_a_loader_stage_that_waited_on_torch() -> None:
    # What the loader stage hands the torch section (loader.started_hung and the import-phase kill).
    def facts(handed: dict[str, Any], budget: float = 12.0) -> Facts:
        return Facts.from_dict({"loader": {"torch_probe": handed}}, Config(budget=budget))

    hung = {"ran": True, "source": "loader", "timed_out": True, "stage": "start", "timeout_s": 12.0,
            "seconds": 15.1, "error": "the environment's Python did not start within the loader stage's 12 s"}
    probe = torch_facts._loader_probe(facts(hung))
    assert probe is not None and probe["timed_out"] is True and probe["source"] == "loader" and "stage" not in probe
    slow_import = {"source": "loader", "timed_out": True, "stage": "import", "seconds": 15.2}
    assert torch_facts._loader_probe(facts(slow_import)) is None  # slow is not hung: the probe runs ...
    assert torch_facts._timeout_after_loader(facts(slow_import)) == 12.0  # ... within the budget, not 60 s
    assert torch_facts._timeout_after_loader(facts(slow_import, budget=3)) == torch_facts.MIN_SHARED_TIMEOUT_S
    assert torch_facts._timeout_after_loader(facts({"probe_version": 3})) == torch_facts.probe_timeout()


#: The hung start-up test's budget: the stage waits it out (plus the supervisor's 3 s grace), which must pass
#: loader.STARTUP_HANG_S (5 s) for the wait to count as a hang, not a slow start.
HANG_BUDGET = 5


@pytest.mark.slow
def test_a_target_that_hangs_at_start_up_costs_the_budget_once(tmp_path: Path) -> None:
    # The loader stage meets the hang first; the torch probe must not start the interpreter to hang again.
    prefix, site = make_venv(tmp_path / "env")
    fake_torch(site, HEALTHY)
    (site / "sitecustomize.py").write_text("import time\ntime.sleep(600)\n")
    start = time.monotonic()
    proc = run_envdoctor("check", "--format", "json", "--budget", str(HANG_BUDGET), "--prefix", str(prefix))
    wall = time.monotonic() - start
    report = json_report(proc)
    assert proc.returncode == 1
    (hit,) = findings(report, "PKG010")
    assert f"did not finish within {HANG_BUDGET} s" in hit["message"]
    assert hit["evidence"]["probe_source"] == "loader" and hit["evidence"]["timeout_s"] == HANG_BUDGET
    probe = report["facts"]["torch"]["probe"]
    assert probe["source"] == "loader" and probe["timed_out"] is True and "not started again" in probe["error"]
    assert {"what": "smoke test",
            "reason": f"the environment's Python did not start within the {HANG_BUDGET} s budget"} in \
        report["loader"]["skipped"]
    assert report["loader"]["failure"] is None  # a hung start-up is no hung dataset (DL006)
    assert findings(report, "DL006") == []
    assert report["verdict"]["areas"]["loader"] == "not-checked"
    assert "did not start" in report["verdict"]["details"]["loader"]["reason"]
    # The hang is waited out once (the stage's deadline, budget + grace), never again for the probe's own limit
    # after it (78 s at --budget 15 before): below that sum, whatever else a busy machine makes slow.
    from envdoctor.loader.supervisor import STAGE_GRACE_S

    assert wall < HANG_BUDGET + STAGE_GRACE_S + torch_facts.PROBE_TIMEOUT_S, wall


def test_numpy_abi_warning_fires_pkg008(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, site = make_venv(tmp_path / "env")
    fake_torch(site, NUMPY1_EXTENSION, version="2.1.2+cu121", cuda="12.1")
    monkeypatch.setenv("ENVDOCTOR_TORCH_PROBE_TIMEOUT", "30")
    proc = run_envdoctor("report", "--json", "--prefix", str(prefix), "--no-loader", "--deep",
                         "--select", "PKG008", "PKG010")
    report = json_report(proc)
    hits = findings(report, "PKG008")
    assert len(hits) == 1, report["findings"]
    evidence = hits[0]["evidence"]
    assert evidence["kind"] == "numpy1-extension-on-numpy2"
    assert evidence["numpy_version"] == numpy.__version__
    assert evidence["extension"] == "torch"
    assert evidence["matched"].startswith("compiled using NumPy 1.x cannot be run in")
    # The venv's own interpreter (it has no pip: ensurepip first); two alternatives, so nothing runs by itself.
    pip = f"{prefix / 'bin' / 'python3'} -m ensurepip && {prefix / 'bin' / 'python3'} -m pip install"
    assert hits[0]["fix"] == f"`{pip} --upgrade torch` (a build for NumPy 2), or `{pip} 'numpy<2'`"
    assert hits[0]["fix_steps"] == []
    assert findings(report, "PKG010") == []  # the import itself went through
    torch_section = report["facts"]["torch"]
    assert any("_ARRAY_API not found" in w for w in torch_section["import_warnings"])


def test_healthy_fake_torch_stays_quiet_and_gets_threadpoolctl_without_leaks(tmp_path: Path) -> None:
    """threadpoolctl is missing from this target: the probe loads envdoctor's copy as one file."""
    prefix, site = make_venv(tmp_path / "env")
    fake_torch(site, HEALTHY)
    probe = run_torch_probe(str(prefix / "bin" / "python"), timeout=30)
    assert probe["import_error"] is None and probe["import_warnings"] == []
    assert probe["threadpoolctl_source"] == "envdoctor"
    assert any(p["internal_api"] == "openblas" for p in probe["threadpools"])
    # The loader stage imports the probe module in its own process: nothing else of ours is visible.
    code = ("import sys, json, importlib.util as u; sys.path.insert(0, sys.argv[1]); import torch_probe; "
            "r = torch_probe.collect(); print(json.dumps({'src': r['threadpoolctl_source'], "
            "'rich': u.find_spec('rich') is not None, 'psutil': u.find_spec('psutil') is not None, "
            "'envdoctor_site': any('envdoctor' in p or '.venv' in p for p in sys.path[1:])}))")
    env = probe_environment()
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(prefix / "bin" / "python"), "-B", "-c", code, str(PROBE_SCRIPT.parent)],
                         capture_output=True, text=True, env=env, timeout=60)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"src": "envdoctor", "rich": False, "psutil": False, "envdoctor_site": False}


def test_probe_is_stdlib_only_and_never_imports_envdoctor() -> None:
    import ast

    tree = ast.parse(PROBE_SCRIPT.read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert {alias.name.split(".")[0] for n in top for alias in n.names} <= set(sys.stdlib_module_names)
    everywhere = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    imported = {alias.name for n in everywhere for alias in n.names} | {
        n.module for n in everywhere if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(name.startswith("envdoctor") for name in imported)


# --- when the probe runs, and sharing it with the loader stage --------------------------------


def test_loader_probe_result_is_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_subprocess(*args, **kwargs):
        raise AssertionError("the loader's probe result should have been used")

    monkeypatch.setattr(torch_facts, "run_torch_probe", no_subprocess)
    shared = {"probe_version": 1, "torch_preimported": False, "version": "2.13.0+cpu",
              "sharing_strategy": "file_system", "import_error": None, "import_warnings": [], "threadpools": []}
    facts = Facts(Config(), preset={"loader": {"torch_probe": shared}})
    section = gather_torch(facts)
    assert section["probe"]["source"] == "loader" and section["probe"]["reason"] == "loader stage"
    assert section["sharing_strategy"] == "file_system"


def test_loader_result_that_missed_the_import_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loader that imported torch before calling collect() missed what the import printed."""
    ran = []
    monkeypatch.setattr(torch_facts, "run_torch_probe", lambda interpreter, timeout=None: ran.append(1) or {
        "ran": True, "source": "envdoctor", "probe_version": 1, "sharing_strategy": "file_descriptor"})
    late = {"probe_version": 1, "torch_preimported": True, "sharing_strategy": "file_descriptor"}
    for loader_result in (late, {"error": "RuntimeError: boom"}):
        section = gather_torch(Facts(Config(), preset={"loader": {"torch_probe": loader_result}}))
        assert section["probe"]["source"] == "envdoctor"
    assert len(ran) == 2


def test_collect_says_when_torch_was_imported_first(tmp_path: Path) -> None:
    prefix, site = make_venv(tmp_path / "env")
    fake_torch(site, HEALTHY)
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import torch, torch_probe; "
            "print(json.dumps(torch_probe.collect()['torch_preimported']))")
    out = subprocess.run([str(prefix / "bin" / "python"), "-B", "-c", code, str(PROBE_SCRIPT.parent)],
                         capture_output=True, text=True, env=probe_environment(), timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "true"
    assert run_torch_probe(str(prefix / "bin" / "python"), timeout=30)["torch_preimported"] is False


def loader_that_asks_for_torch(facts):
    """A loader stage that reads the torch section while it runs (as SYS001 would)."""
    facts["torch"]
    return {"torch_probe": {"probe_version": 1, "torch_preimported": False, "sharing_strategy": "file_descriptor"}}


def test_loader_asking_for_torch_is_refused_not_recursed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader does not declare it reads torch (facts.PROBES), so the cycle cannot start."""
    from envdoctor import facts as facts_module

    monkeypatch.setitem(facts_module.PROBES, "loader", facts_module.Probe(
        "test_torch_probe:loader_that_asks_for_torch", reads=("target",), hands_over={"torch_probe": "torch"}))
    with pytest.raises(facts_module.UndeclaredRead, match="the loader probe read the 'torch' section"):
        Facts(Config())["torch"]


def test_no_loader_without_gpu_reads_files_only() -> None:
    section = gather_torch(Facts(Config(no_loader=True)))
    assert section["probe"]["ran"] is False
    assert "files were enough" in section["probe"]["reason"]


HOOK = """\
import os, sys
class _TorchImportWatch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            with open(os.environ["TORCH_IMPORT_LOG"], "a") as fh:
                fh.write(repr((os.getpid(), sys.argv)) + "\\n")
        return None
sys.meta_path.insert(0, _TorchImportWatch())
"""


@pytest.mark.slow
def test_report_no_loader_imports_torch_in_no_process(tmp_path: Path) -> None:
    """Every Python process started with this environment logs any `import torch` (a sitecustomize hook)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    log = tmp_path / "torch-imports.log"
    env = dict(os.environ, TORCH_IMPORT_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]))
    proc = run_envdoctor("report", "--json", "--no-loader", env=env)
    json_report(proc)
    assert not log.exists(), log.read_text()
    # The hook does see torch when the probe runs (--deep), and only in the probe's process.
    proc = run_envdoctor("report", "--json", "--no-loader", "--deep", "--select", "PKG010", env=env)
    report = json_report(proc)
    lines = [eval(line) for line in log.read_text().splitlines()]
    assert lines and all(argv[0].endswith("torch_probe.py") for _, argv in lines)
    assert report["facts"]["torch"]["probe"]["ran"] is True


@pytest.fixture(scope="module")
def real_probe() -> TorchProbe:
    """The import probe run once on this environment's real torch (each run imports torch: about 2 s of CPU);
    the tests that read it get a copy."""
    return run_torch_probe(sys.executable)


@pytest.mark.slow
def test_real_torch_probe_agrees_with_the_files(real_probe: TorchProbe) -> None:
    files = read_torch_files(Facts(Config(no_loader=True))["target"])
    if not files["installed"]:
        pytest.skip("torch is not installed here")
    probe = copy.deepcopy(real_probe)
    assert probe["timed_out"] is False and probe["import_error"] is None
    assert probe["version"] == files["version"] and probe["git_version"] == files["git_version"]
    assert probe["cuda"]["built"] == files["cuda_build"]
    assert probe["sharing_strategy"] in ("file_descriptor", "file_system")
    assert probe["intra_op_threads"] >= 1
    assert probe["threadpoolctl_source"] == "target"
    assert probe["start_method"] in ("fork", "spawn", "forkserver") and probe["start_method_set"] is False


def _shape(value: Any) -> Any:
    """The keys of a section, nested, without the values: what a format change alters."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted({json.dumps(_shape(v), sort_keys=True) for v in value})
    return None


@pytest.mark.slow
def test_captured_torch_section_is_in_the_format_the_probe_emits_now(real_probe: TorchProbe,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """fixtures/torch/cpu_build_section.json, which the GPU and runtime tests start from, is not stale."""
    fixtures = Path(__file__).resolve().parent.parent / "fixtures" / "torch"
    if not read_torch_files(Facts(Config(no_loader=True))["target"])["installed"]:
        pytest.skip("torch is not installed here")
    real_run = torch_facts.run_torch_probe

    def probe_once(interpreter: str, timeout: float | None = None) -> TorchProbe:
        # The capture's own probe run is the one real_probe made: this interpreter, the default limit.
        if os.path.realpath(interpreter) == os.path.realpath(sys.executable) and timeout == probe_timeout():
            return copy.deepcopy(real_probe)
        return real_run(interpreter, timeout)

    monkeypatch.setattr(torch_facts, "run_torch_probe", probe_once)
    sys.path.insert(0, str(fixtures))
    try:
        import capture
    finally:
        sys.path.remove(str(fixtures))
    fresh = capture.capture()
    stored = json.loads((fixtures / "cpu_build_section.json").read_text())
    for section in (stored, fresh):
        section["probe"].pop("environ")  # which thread variables this shell sets: not the format
    assert _shape(stored) == _shape(fresh)
    assert stored["probe"]["cuda"]["arch_list_source"] == fresh["probe"]["cuda"]["arch_list_source"]
    # Paths name /opt/venv, not the checkout it was taken in, and each library's realpath is kept.
    assert stored["location"] == fresh["location"]
    assert fresh["location"].startswith("/opt/venv/lib/python") and fresh["location"].endswith("/site-packages/torch")
    assert all(pool["realpath"].startswith("/opt/venv/") for pool in stored["threadpools"])
    assert sys.prefix not in json.dumps(fresh)


# --- odd files and odd self-reports: facts, never a failed probe ------------------------------


@pytest.mark.parametrize(("content", "odd"), [
    ("__version__ = 123\ncuda = ['12.4']\ndebug = 'yes'\ngit_version = None\n",
     "__version__ = int, cuda = list, debug = str"),
    ("__version__ = '2.5.1'\ncuda = {[]: 1}\n", None),  # literal_eval raises TypeError: unknown, not a crash
    ("__version__ = '2.5.1'\ncuda = " + "(" * 5000 + "1" + ")" * 5000 + "\n", "could not be read"),
    ("__version__ = '2.5.1'\n" + "# padding\n" * 8000, "could not be read"),  # over the 64 KiB bound
    ("\x00\xff garbage", "could not be read"),
])
def test_odd_version_module_is_a_fact(tmp_path: Path, content: str, odd: str | None) -> None:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text(content, encoding="latin-1")
    section = read_torch_files({"site_packages": [str(site)], "sys_path": []})
    assert section["installed"] is True
    assert section["version"] in (None, "2.5.1") and section["cuda_build"] is None and section["build"] == "cpu"
    if odd is None:
        assert "version_module_error" not in section
    else:
        assert odd in section["version_module_error"] and str(site / "torch" / "version.py") in section["version_module_error"]


def test_version_module_that_is_a_fifo_does_not_block(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    os.mkfifo(site / "torch" / "version.py")
    # Reading torch's files enforces no time limit: what shows it never blocked is that it returned, naming the FIFO.
    section = read_torch_files({"site_packages": [str(site)], "sys_path": []})
    assert section["installed"] is True and "not a regular file" in section["version_module_error"]


# torch attributes of odd types, and a sitecustomize that prints its own JSON line after the probe's.
ODD_TORCH = """\
    from . import version
    __version__ = version.__version__
    def get_num_threads():
        return "many"
    """
HOSTILE_SITECUSTOMIZE = """\
    import atexit, sys
    if sys.argv[0].endswith("torch_probe.py"):  # the torch probe only: the target's own query is another's test
            atexit.register(lambda: sys.stdout.write('\\n{"probe_version": 1, "cuda": "x", "threadpools": 5,'
                                                 ' "sharing_strategy": 7, "import_error": null, "pid": 1}\\n'))
    """


def test_probe_self_report_with_wrong_types_is_checked_not_fatal(tmp_path: Path) -> None:
    from envdoctor.rules.gpu import RULES as GPU_RULES
    from envdoctor.rules.packages.torch_import import RULES as PKG_RUNTIME_RULES
    from envdoctor.rules.system.runtime import RULES as SYS_RUNTIME_RULES
    RUNTIME_RULES = {**SYS_RUNTIME_RULES, **PKG_RUNTIME_RULES}

    prefix, site = make_venv(tmp_path / "env")
    fake_torch(site, ODD_TORCH)
    (site / "sitecustomize.py").write_text(textwrap.dedent(HOSTILE_SITECUSTOMIZE))
    facts = target_facts(prefix, deep=True, no_loader=True)
    section = gather_torch(facts)
    probe = section["probe"]
    assert probe["ran"] is True and probe["source"] == "envdoctor"
    assert sorted(probe["invalid_fields"]) == ["cuda: str, not TorchCuda", "sharing_strategy: int, not str | None",
                                               "threadpools: int, not list[ThreadPool] | None"]
    assert "cuda" not in probe and "threadpools" not in probe and section["sharing_strategy"] is None
    # Every rule that reads the torch section runs on it without raising.
    gpu = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "h100_idle.json").read_text())
    preset = Facts.from_dict({"torch": section, "gpu": gpu, "system": facts["system"], "target": facts["target"]},
                             Config(no_loader=True))
    for rule in (*GPU_RULES.values(), *RUNTIME_RULES.values()):
        list(rule(preset))


def test_probe_reads_compiled_arch_flags_when_cuda_does_not_initialise() -> None:
    """torch.cuda.get_arch_list() answers [] without a working CUDA; the compiled flags still say."""
    from types import SimpleNamespace

    sys.path.insert(0, str(PROBE_SCRIPT.parent))
    try:
        import torch_probe
    finally:
        sys.path.remove(str(PROBE_SCRIPT.parent))
    fake = SimpleNamespace(cuda=SimpleNamespace(get_arch_list=lambda: []),
                           _C=SimpleNamespace(_cuda_getArchFlags=lambda: "sm_80 sm_90 compute_90"))
    cuda: dict = {}
    torch_probe._arch_list(fake, cuda)
    assert cuda == {"arch_list": ["sm_80", "sm_90", "compute_90"], "arch_list_source": "torch._C._cuda_getArchFlags"}
    cpu_only = SimpleNamespace(cuda=SimpleNamespace(get_arch_list=lambda: []), _C=SimpleNamespace())
    torch_probe._arch_list(cpu_only, cuda)
    assert cuda["arch_list"] == []


def test_loader_relayed_probe_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's subprocess relays the probe: the same check applies, nested fields one by one."""
    monkeypatch.setattr(torch_facts, "run_torch_probe", lambda *a, **k: pytest.fail("the loader's result is usable"))
    relayed = {"probe_version": 1, "torch_preimported": False, "sharing_strategy": "file_system",
               "intra_op_threads": "4", "threadpools": [{"user_api": "openmp", "num_threads": 2, "filepath": 3}],
               "cuda": {"available": True, "arch_list": "sm_90", "devices": [{"index": 0, "capability": "9.0"}]},
               "unknown_key": {"deep": [1, 2]}}
    section = gather_torch(Facts(Config(), preset={"loader": {"torch_probe": relayed}}))
    probe = section["probe"]
    assert sorted(probe["invalid_fields"]) == ["cuda.arch_list: str, not list[str] | None",
                                               "intra_op_threads: str, not int",
                                               "threadpools: list, not list[ThreadPool] | None"]
    assert probe["cuda"] == {"available": True, "devices": [{"index": 0, "capability": "9.0"}]}
    assert section["sharing_strategy"] == "file_system" and "unknown_key" not in probe
    assert "intra_op_threads" not in section and "threadpools" not in section

"""GPU facts and the GPU rules.

This machine has no GPU and no NVML, which is itself tested for real. No GPU
machine was lent to this project, so the GPU states are fixtures in the exact
format gather_gpu emits: fixtures/gpu/*.json, made by running the real
read_nvml() against fake_pynvml (see regenerate.py; a test below checks they
still match). The torch side starts from a real capture on this machine
(fixtures/torch/cpu_build_section.json) and changes only the CUDA fields.
"""
from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from envdoctor.config import Config
from envdoctor.facts import Facts
from envdoctor.facts.gpu import cuda_version_text, gather_gpu, gpu_present, pci_nvidia_gpus
from envdoctor.model import FixStep, Severity
from envdoctor.rules.gpu import RULES, best_wheel_cuda, driver_needs

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GPU = FIXTURES / "gpu"


def gpu_fixture(name: str) -> dict[str, Any]:
    return json.loads((GPU / f"{name}.json").read_text())


def cpu_section() -> dict[str, Any]:
    return json.loads((FIXTURES / "torch" / "cpu_build_section.json").read_text())


def cuda_section(cuda: str = "12.4", available: bool = True, error: str | None = None,
                 devices: list[str] = ("NVIDIA H100 80GB HBM3",)) -> dict[str, Any]:
    """The real capture with the fields a CUDA build reports differently."""
    section = cpu_section()
    version = section["version"].split("+")[0] + "+cu" + cuda.replace(".", "")
    section.update(version=version, dist_version=version, cuda_build=cuda, build="cuda", cudnn=90100,
                   nvidia_wheels={"nvidia-cuda-runtime-cu12": f"{cuda}.127", "nvidia-cudnn-cu12": "9.1.0.70"},
                   cudnn_wheel="9.1.0.70")
    probe_cuda = {"built": cuda, "hip": None, "available": available,
                  "device_count": len(devices) if available else 0,
                  "devices": [{"index": i, "name": n, "capability": "9.0"} for i, n in enumerate(devices)]
                  if available else [],
                  "arch_list": ["sm_50", "sm_80", "sm_86", "sm_90"], "init_output": "", "init_warnings": []}
    if error:
        probe_cuda["error"] = error
    section["probe"].update(version=version, cudnn=90100, cuda=probe_cuda)
    section["cuda"] = probe_cuda
    return section


def facts_for(gpu: dict[str, Any], torch: dict[str, Any], kind: str = "venv", container: bool = False,
              packages: dict[str, Any] | None = None) -> Facts:
    return Facts.from_dict({
        "gpu": gpu, "torch": torch, "packages": packages,
        "target": {"kind": kind, "platform": "linux-64", "prefix": "/env", "interpreter": "/env/bin/python"},
        "system": {"container": {"in_container": container}, "environ": {}},
    }, Config(no_loader=True))


def hits(rule: str, facts: Facts) -> list:
    return list(RULES[rule](facts))


# --- the real machine -------------------------------------------------------------------------


def test_no_nvml_here_is_a_fact_not_an_error() -> None:
    section = gather_gpu(Facts(Config(no_loader=True)))
    if section["available"]:
        pytest.skip("this machine has NVML")
    assert section["device_count"] == 0 and section["devices"] == []
    assert "NVML" in section["reason"] or "nvidia-ml-py" in section["reason"]
    assert gpu_present(section) is bool(section["pci_gpus"])


def test_report_on_this_machine_has_gpu_section_and_no_gpu_findings() -> None:
    from envdoctor.engine import run_check

    report = run_check(Config(no_loader=True, select=("GPU",)))
    assert report.facts["gpu"]["available"] is False
    assert report.findings == [] and report.errors == []


def test_fixtures_match_what_read_nvml_emits(monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(GPU))
    try:
        import regenerate
    finally:
        sys.path.remove(str(GPU))
    for state in sorted((GPU / "states").glob("*.json")):
        assert regenerate.section_for(state) == gpu_fixture(state.stem), state.name


def test_pci_gpu_without_driver_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "pci"
    for address, vendor, cls in (("0000:00:02.0", "0x1af4", "0x010000"),
                                 ("0000:3b:00.0", "0x10de", "0x030200"),
                                 ("0000:3c:00.1", "0x10de", "0x040300")):  # the GPU's audio function
        (root / address).mkdir(parents=True)
        (root / address / "vendor").write_text(vendor + "\n")
        (root / address / "class").write_text(cls + "\n")
        (root / address / "device").write_text("0x2330\n")
    found = pci_nvidia_gpus(root)
    assert found == [{"address": "0000:3b:00.0", "device_id": "0x2330", "driver": None}]


def test_cuda_version_text() -> None:
    assert cuda_version_text(12040) == "12.4" and cuda_version_text(11080) == "11.8"
    assert cuda_version_text(None) is None


# --- GPU001 ------------------------------------------------------------------------------------


def test_gpu001_fires_for_cpu_build_on_gpu_machine() -> None:
    found = hits("GPU001", facts_for(gpu_fixture("h100_idle"), cpu_section()))
    assert len(found) == 1
    evidence = found[0].evidence
    assert evidence["torch_build"] == "cpu" and evidence["torch_version"] == "2.13.0+cpu"
    assert evidence["driver_version"] == "550.54.15" and evidence["driver_cuda"] == "12.4"
    assert evidence["suggested_cuda"] == "12.4"
    assert evidence["gpus"] == ["NVIDIA H100 80GB HBM3"]
    # The prefix's own interpreter runs pip (no other environment's pip), from the index for the driver's CUDA.
    command = ("/env/bin/python", "-m", "pip", "install", "--force-reinstall", "torch",
               "--index-url", "https://download.pytorch.org/whl/cu124")
    assert found[0].fix_steps == (FixStep.command("pip", *command),)
    # A pinned torch==2.13.0 may not be built for cu124: the command does not pin; the comment says how to keep it.
    assert found[0].fix == (" ".join(command) + "   # to stay on torch 2.13.0, first check that "
                            "https://download.pytorch.org/whl/cu124/torch/ lists it, then pin torch==2.13.0")


def test_gpu001_conda_env_gets_the_conda_command_first() -> None:
    torch = cpu_section()
    torch["installer"] = "conda"
    found = hits("GPU001", facts_for(gpu_fixture("a100_busy"), torch, kind="conda"))
    assert found[0].fix.startswith("conda install -p /env -c conda-forge 'pytorch=*=cuda*' cuda-version=12.1   # ")
    assert found[0].fix_steps == (FixStep.command("conda", "conda", "install", "-p", "/env", "-c", "conda-forge",
                                                  "pytorch=*=cuda*", "cuda-version=12.1"),)


def test_gpu001_fires_when_cuda_init_fails() -> None:
    error = "RuntimeError: Found no NVIDIA driver on your system."
    found = hits("GPU001", facts_for(gpu_fixture("h100_idle"), cuda_section(available=False, error=error)))
    assert len(found) == 1
    assert found[0].evidence["cuda_error"] == error
    assert found[0].evidence["torch_cuda_build"] == "12.4"
    assert error in found[0].message
    # The driver is new enough: the user must first check what hides the devices, so nothing runs by itself.
    assert "CUDA_VISIBLE_DEVICES=<unset>" in found[0].fix and "-m pip install --force-reinstall torch" in found[0].fix
    assert found[0].fix_steps == ()


def test_gpu001_fires_when_driver_is_missing_but_gpu_is_on_the_bus() -> None:
    gpu = {"available": False, "reason": "NVML could not start: Driver Not Loaded", "device_count": 0,
           "devices": [], "pci_gpus": [{"address": "0000:3b:00.0", "device_id": "0x2330", "driver": None}]}
    found = hits("GPU001", facts_for(gpu, cpu_section(), container=True))
    assert found[0].evidence["nvml_reason"] == "NVML could not start: Driver Not Loaded"
    assert "--gpus all" in found[0].fix
    assert found[0].fix_steps == ()  # the container's start, not the environment


def test_gpu001_quiet_when_cuda_works_or_no_gpu() -> None:
    assert hits("GPU001", facts_for(gpu_fixture("h100_idle"), cuda_section())) == []
    no_gpu = {"available": False, "reason": "NVML could not start: NVML Shared Library Not Found",
              "device_count": 0, "devices": [], "pci_gpus": []}
    assert hits("GPU001", facts_for(no_gpu, cpu_section())) == []


# --- GPU002 ------------------------------------------------------------------------------------


def test_gpu002_fires_for_cuda12_build_on_cuda11_driver() -> None:
    found = hits("GPU002", facts_for(gpu_fixture("v100_old_driver"), cuda_section("12.4", available=False)))
    assert len(found) == 1 and found[0].severity is None  # the catalog's error
    evidence = found[0].evidence
    assert evidence["driver_version"] == "470.256.02" and evidence["driver_cuda"] == "11.4"
    assert evidence["torch_cuda_build"] == "12.4"
    assert evidence["family_minimum_driver"] == "525.60.13"
    assert "whl/cu118" not in found[0].fix  # 11.8 needs 520+, the driver is 470: nothing fits but an upgrade
    assert "upgrade the driver to 550.54.14" in found[0].fix
    assert found[0].fix_steps == ()  # only the driver upgrade is left, and it is the user's


def test_gpu002_does_not_say_cuda_will_not_start_when_the_probe_saw_it_start() -> None:
    # NGC containers on older hosts: driver 470 (CUDA 11.4) plus cuda-compat, and torch cu124
    # initialises CUDA. The import probe saw it work, so "CUDA will not initialise" is false.
    found = hits("GPU002", facts_for(gpu_fixture("v100_old_driver"), cuda_section("12.4", available=True)))
    assert all("will not initialise" not in f.message for f in found)
    [warning] = found
    assert warning.severity == Severity.WARNING and warning.evidence["cuda_initialised"]
    assert "forward-compatibility package" in warning.message
    # Without the probe's word, the table decides: an error.
    unprobed = cuda_section("12.4", available=True)
    unprobed["probe"] = {"ran": False}
    [error] = hits("GPU002", facts_for(gpu_fixture("v100_old_driver"), unprobed))
    assert error.severity is None and "will not initialise" in error.message


def test_gpu002_warns_under_minor_version_compatibility() -> None:
    found = hits("GPU002", facts_for(gpu_fixture("a100_busy"), cuda_section("12.4")))
    assert len(found) == 1 and found[0].severity == Severity.WARNING
    assert found[0].evidence["toolkit_driver"] == "550.54.14"
    assert found[0].evidence["driver_version"] == "535.183.01"
    assert "whl/cu121" in found[0].fix  # the newest wheel CUDA whose toolkit driver 535 meets
    command = ("/env/bin/python", "-m", "pip", "install", "--force-reinstall", "torch",
               "--index-url", "https://download.pytorch.org/whl/cu121")
    assert found[0].fix_steps == (FixStep.command("pip", *command),)
    assert found[0].fix.startswith("upgrade the driver to 550.54.14 or newer, or use the torch build for CUDA 12.1: "
                                   + " ".join(command) + "   # to stay on torch 2.13.0")


def test_gpu002_quiet_when_driver_is_new_enough() -> None:
    assert hits("GPU002", facts_for(gpu_fixture("h100_idle"), cuda_section("12.4"))) == []
    assert hits("GPU002", facts_for(gpu_fixture("h100_idle"), cpu_section())) == []


def test_driver_table_is_data() -> None:
    assert driver_needs("11.8") == {"cuda": "11.8", "family_minimum": "450.80.02", "toolkit_driver": "520.61.05"}
    assert best_wheel_cuda("12.2", "535.183.01") == "12.1"
    assert best_wheel_cuda("11.4", "470.256.02") is None


def test_driver_table_uses_the_ga_rows_of_nvidias_table() -> None:
    # NVIDIA's "CUDA Toolkit and Corresponding Driver Versions": CUDA 11.0.2 GA >= 450.51.05 / >= 451.48
    # (450.36.06 / 451.22 is the 11.0.1 RC row), CUDA 11.5 GA >= 495.29.05 / >= 496.04 (496.13 is Update 1).
    assert driver_needs("11.0")["toolkit_driver"] == "450.51.05"
    assert driver_needs("11.0", "windows")["toolkit_driver"] == "451.48"
    assert driver_needs("11.5", "windows")["toolkit_driver"] == "496.04"
    assert driver_needs("12.4") == {"cuda": "12.4", "family_minimum": "525.60.13", "toolkit_driver": "550.54.14"}
    assert driver_needs("13.0", "windows") == {"cuda": "13.0", "family_minimum": "580.88", "toolkit_driver": "580.88"}


# --- GPU003 ------------------------------------------------------------------------------------


def test_gpu003_fires_for_a_gpu_held_by_another_process() -> None:
    found = hits("GPU003", facts_for(gpu_fixture("a100_busy"), cuda_section()))
    assert len(found) == 1
    busy = found[0].evidence["busy_gpus"]
    assert [b["index"] for b in busy] == [0]
    assert busy[0]["utilization_gpu"] == 97
    assert busy[0]["processes"][0]["pid"] == 4000001
    assert found[0].evidence["free_gpus"] == [1]
    assert "CUDA_VISIBLE_DEVICES=1" in found[0].fix


def test_gpu003_ignores_our_own_process_and_idle_gpus() -> None:
    assert hits("GPU003", facts_for(gpu_fixture("h100_idle"), cuda_section())) == []
    gpu = copy.deepcopy(gpu_fixture("h100_idle"))
    gpu["devices"][0]["processes"] = [{"pid": gpu["own_pid"], "name": "python", "used_memory": 500_000_000,
                                       "kinds": ["compute"]}]
    assert hits("GPU003", facts_for(gpu, cuda_section())) == []


def test_gpu003_other_ranks_of_our_own_job_are_not_other_jobs() -> None:
    # preflight() on rank 0 under torchrun: ranks 1-3 hold GPUs 1-3. Before, GPU003 told
    # the user to "wait for or stop the other jobs" (its own ranks) and to use no GPU.
    gpu = copy.deepcopy(gpu_fixture("h100_idle"))
    gpu["devices"] = [copy.deepcopy(gpu["devices"][0]) for _ in range(4)]
    ranks = [gpu["own_pid"], 5101, 5102, 5103]
    for index, (device, pid) in enumerate(zip(gpu["devices"], ranks)):
        device["index"] = index
        device["memory_used"] = device["memory_total"] // 2
        device["utilization_gpu"] = 90
        device["processes"] = [{"pid": pid, "name": "python", "used_memory": 40 * 1024**3, "kinds": ["compute"]}]
    gpu["job_pids"] = [5101, 5102, 5103]
    assert hits("GPU003", facts_for(gpu, cuda_section())) == []
    # Another job's process on GPU 3 is still reported, and only that GPU.
    gpu["devices"][3]["processes"].append({"pid": 7777, "name": "other", "used_memory": 10**9, "kinds": ["compute"]})
    [found] = hits("GPU003", facts_for(gpu, cuda_section()))
    assert [b["index"] for b in found.evidence["busy_gpus"]] == [3]
    assert [p["pid"] for p in found.evidence["busy_gpus"][0]["processes"]] == [7777]
    assert {p["pid"] for p in found.evidence["same_job_processes"]} == {5101, 5102, 5103}


_RANK = """
import json, os, pathlib, sys, time
from envdoctor.facts.gpu import job_pids
barrier = pathlib.Path(sys.argv[1])

def wait(stage):
    (barrier / f"{stage}-{os.getpid()}").touch()
    deadline = time.monotonic() + 30
    while len(list(barrier.glob(stage + "-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)

wait("ready")  # both ranks alive while each looks
job = job_pids()
(barrier / f"result-{os.getpid()}.json").write_text(json.dumps({"pid": os.getpid(), "job": job}))
wait("done")
"""


@pytest.mark.parametrize("launcher_env", [{"LOCAL_RANK": "0"}, {}])
def test_job_pids_are_the_sibling_ranks_only_under_a_launcher(launcher_env, tmp_path: Path) -> None:
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK",
                                                               "SLURM_STEP_ID", "OMPI_COMM_WORLD_LOCAL_RANK")}
    env.update(launcher_env)
    # A launcher: one parent starting two ranks, as torchrun does.
    launcher = ("import subprocess, sys\n"
                f"procs = [subprocess.Popen([sys.executable, '-c', {_RANK!r}, {str(tmp_path)!r}]) for _ in range(2)]\n"
                "sys.exit(max(p.wait() for p in procs))\n")
    proc = subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # Each rank writes its own file: two ranks printing to one pipe interleave their lines.
    first, second = (json.loads(path.read_text()) for path in sorted(tmp_path.glob("result-*.json")))
    if launcher_env:
        assert first["pid"] in second["job"] and second["pid"] in first["job"]
    else:
        assert first["pid"] not in second["job"] and second["pid"] not in first["job"]


# --- GPU004 arch-not-in-build -----------------------------------------------------------------

ARCH = GPU / "arch"


def arch_case(name: str) -> tuple[Facts, dict[str, Any]]:
    """A fixture machine: the gpu section from the real read_nvml() over fake_pynvml, the torch probe's cuda."""
    case = json.loads((ARCH / name).read_text())
    sys.path.insert(0, str(GPU))
    try:
        import fake_pynvml

        fake_pynvml._state = case["nvml_state"]
        sys.modules["pynvml"] = fake_pynvml
        from envdoctor.facts.gpu import read_nvml

        gpu = read_nvml()
    finally:
        sys.modules.pop("pynvml", None)
        sys.path.remove(str(GPU))
    torch = cuda_section(case["cuda_build"])
    torch.update(version=case["torch_version"], dist_version=case["torch_version"])
    torch["probe"].update(version=case["torch_version"], cuda=case["probe_cuda"])
    torch["cuda"] = case["probe_cuda"]
    return facts_for(gpu, torch), case


def test_gpu004_fires_for_blackwell_on_a_wheel_that_stops_at_sm_90() -> None:
    facts, case = arch_case("rtx5090_cu124.json")
    [found] = hits("GPU004", facts)
    assert found.severity is None  # the rule's default: error
    [gpu] = found.evidence["gpus_missing"]
    assert gpu == {"index": 0, "name": "NVIDIA GeForce RTX 5090", "capability": "12.0", "needs": "sm_120",
                   "machine_code": [], "ptx": [], "first_cuda": "12.8"}
    assert found.evidence["arch_list"] == case["probe_cuda"]["arch_list"]
    assert "not compatible with the current PyTorch installation" in found.evidence["torch_warning"]
    assert "no kernel image is available for execution on the device" in found.message
    # The driver runs CUDA 12.8: the fix is a cu128 (or newer) wheel, not a driver upgrade.
    assert "download.pytorch.org/whl/cu128" in found.fix and "upgrade the NVIDIA driver" not in found.fix
    command = ("/env/bin/python", "-m", "pip", "install", "--force-reinstall", "torch",
               "--index-url", "https://download.pytorch.org/whl/cu128")
    assert found.fix_steps == (FixStep.command("pip", *command),)
    # No "stay on this version" comment: a release older than the GPU has no build for it.
    assert found.fix == "install a torch built for CUDA 12.8, whose arch list includes sm_120: " + " ".join(command)


def test_gpu004_fires_for_h100_on_a_build_that_stops_at_sm_86() -> None:
    facts, _ = arch_case("h100_sm86_build.json")
    [found] = hits("GPU004", facts)
    assert [g["needs"] for g in found.evidence["gpus_missing"]] == ["sm_90"]
    assert found.evidence["torch_cuda_build"] == "11.3"
    assert "sm_90" in found.fix and "/whl/cu124" in found.fix  # the newest wheel driver 550 runs


def test_gpu004_names_a_gpu_older_than_the_build() -> None:
    facts, _ = arch_case("p100_dropped.json")
    [found] = hits("GPU004", facts)
    assert found.evidence["gpus_missing"][0]["capability"] == "6.0"
    assert "dropped Tesla P100-PCIE-16GB (sm_60)" in found.fix and "TORCH_CUDA_ARCH_LIST=6.0" in found.fix
    assert found.fix_steps == ()  # an older release or a source build: a person's choice


@pytest.mark.parametrize("name", ["rtx5090_cu128.json", "l4_sm86_compatible.json"])
def test_gpu004_quiet_when_the_build_has_machine_code_for_the_gpu(name: str) -> None:
    facts, case = arch_case(name)
    assert case["expect"] == "quiet"
    assert hits("GPU004", facts) == []


def test_gpu004_warns_when_only_ptx_covers_the_gpu() -> None:
    facts, _ = arch_case("h100_ptx_only.json")
    [found] = hits("GPU004", facts)
    assert found.severity is Severity.WARNING
    assert found.evidence["gpus_missing"] == []
    [gpu] = found.evidence["gpus_ptx_only"]
    assert gpu["ptx"] == ["compute_80"] and gpu["machine_code"] == []
    assert "JIT" in found.message
    assert [s.argv[-1] for s in found.fix_steps] == ["https://download.pytorch.org/whl/cu124"]
    assert found.fix.endswith("/whl/cu124   # meanwhile CUDA_CACHE_MAXSIZE=4294967296 keeps the JIT results between runs")


def test_every_arch_fixture_says_what_it_expects() -> None:
    seen = {}
    for path in sorted(ARCH.glob("*.json")):
        facts, case = arch_case(path.name)
        found = hits("GPU004", facts)
        got = "quiet" if not found else ("warning" if found[0].severity is Severity.WARNING else "error")
        seen[path.name] = got
        assert got == case["expect"], path.name
    assert set(seen.values()) == {"quiet", "warning", "error"}


def test_gpu004_quiet_without_the_probe_or_an_arch_list() -> None:
    facts, _ = arch_case("rtx5090_cu124.json")
    torch = facts["torch"]
    torch["probe"]["cuda"]["arch_list"] = []  # what torch answers when it cannot tell
    assert hits("GPU004", facts) == []
    torch["probe"] = {"ran": False, "reason": "no GPU, no loader stage and no --deep: files were enough"}
    assert hits("GPU004", facts) == []


def test_arch_entries_follow_cudas_compatibility_rules() -> None:
    from envdoctor.rules.gpu import parse_arch

    sm86, sm90a, ptx80, sm120 = (parse_arch(t) for t in ("sm_86", "sm_90a", "compute_80", "sm_120"))
    assert sm86 and sm90a and ptx80 and sm120
    assert (sm120.major, sm120.minor) == (12, 0)
    assert sm86.runs_on(8, 9) and not sm86.runs_on(8, 0) and not sm86.runs_on(9, 0)
    assert sm90a.runs_on(9, 0) and not sm90a.runs_on(9, 1)
    assert ptx80.runs_on(12, 0) and ptx80.runs_on(8, 0) and not ptx80.runs_on(7, 5)
    assert parse_arch("gfx90a") is None and parse_arch("sm_") is None


# A torch whose CUDA answers as torch 2.5.1+cu124 does on an RTX 5090: available, capability (12, 0),
# an arch list that stops at sm_90, and torch's own warning when the capability is asked for.
BLACKWELL_ON_CU124_TORCH = '''\
import warnings
from . import version
__version__ = version.__version__
ARCHES = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
class _Cuda:
    def is_available(self):
        return True
    def device_count(self):
        return 1
    def get_device_capability(self, index):
        warnings.warn("\\nNVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
                      "PyTorch installation.\\nThe current PyTorch install supports CUDA capabilities "
                      + " ".join(ARCHES) + ".\\n", UserWarning)
        return (12, 0)
    def get_device_name(self, index):
        return "NVIDIA GeForce RTX 5090"
    def get_arch_list(self):
        return list(ARCHES)
cuda = _Cuda()
'''


def test_gpu004_end_to_end_through_the_real_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML (fake_pynvml) shows the GPU, so the real torch probe runs in the target venv and GPU004 fires."""
    from envdoctor.engine import run_check
    from test_torch_probe import fake_torch, make_venv

    prefix, site = make_venv(tmp_path / "env")
    fake_torch(site, BLACKWELL_ON_CU124_TORCH, version="2.5.1+cu124", cuda="12.4")
    sys.path.insert(0, str(GPU))
    try:
        import fake_pynvml
    finally:
        sys.path.remove(str(GPU))
    monkeypatch.setattr(fake_pynvml, "_state", json.loads((ARCH / "rtx5090_cu124.json").read_text())["nvml_state"])
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    report = run_check(Config(prefix=str(prefix), no_loader=True, select=["GPU"]))
    assert report.errors == []
    probe = report.facts["torch"]["probe"]
    assert probe["reason"] == "gpu present" and probe["cuda"]["arch_list"][-1] == "sm_90"
    [found] = report.by_rule("GPU004")
    assert found.evidence["gpus_missing"][0]["needs"] == "sm_120"
    assert "not compatible with the current PyTorch installation" in found.evidence["torch_warning"]
    assert [f.rule for f in report.findings] == ["GPU004"]  # CUDA initialised: not GPU001; driver 570: not GPU002
    # The venv has no pip (venv --without-pip) and torch's INSTALLER says pip: ensurepip, then the venv's own pip.
    python = str(prefix / "bin" / "python3")
    install = (python, "-m", "pip", "install", "--force-reinstall", "torch", "--index-url",
               "https://download.pytorch.org/whl/cu128")
    assert found.fix_steps == (FixStep.command("pip", python, "-m", "ensurepip"), FixStep.command("pip", *install))
    assert found.fix.endswith(f"sm_120: {python} -m ensurepip && {' '.join(install)}")
    from envdoctor.fix.plan import make_plan

    plan = make_plan(report, {"PATH": ""})
    assert [(s.rule, s.runs, s.argv) for s in plan.steps] == [("GPU004", True, (python, "-m", "ensurepip")),
                                                              ("GPU004", True, install)]


def test_gpu001_moves_the_companions_the_same_tool_installed() -> None:
    """torchvision/torchaudio are built against one torch: reinstalled with it, when torch's tool put them there."""
    def dist(key: str, tool: str, order: int = 0) -> dict[str, Any]:
        return {"key": key, "name": key, "location": "env", "order": order,
                "owner": {"tool": tool, "package": None, "source": "INSTALLER", "editable": False}}
    packages = {"prefix": "/env", "kind": "venv", "interpreter": "/env/bin/python3",
                "installer": {"externally_managed": None, "uv_venv": None, "has_pip": True},
                "distributions": [dist("torch", "pip"), dist("torchaudio", "pip"), dist("torchvision", "uv"),
                                  dist("torchvision", "pip", order=5)]}  # shadowed: import finds uv's copy first
    [found] = hits("GPU001", facts_for(gpu_fixture("h100_idle"), cpu_section(), packages=packages))
    assert [s.argv for s in found.fix_steps] == [("/env/bin/python3", "-m", "pip", "install", "--force-reinstall",
                                                  "torch", "torchaudio", "--index-url",
                                                  "https://download.pytorch.org/whl/cu124")]

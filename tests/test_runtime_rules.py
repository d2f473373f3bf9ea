"""SYS004 sharing-strategy, SYS005 thread-oversubscription, PKG008 and PKG010 on probe facts.

The torch sections start from the real capture of this machine
(fixtures/torch/cpu_build_section.json), changed only where a state
needs it; SYS004 and SYS005 also run end to end under real limits (prlimit,
OMP_NUM_THREADS).
"""
from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from envdoctor.config import Config
from envdoctor.facts import Facts
from envdoctor.model import FixStep, Severity
from envdoctor.rules.packages.torch_import import RULES as PKG_RUNTIME_RULES
from envdoctor.rules.system.runtime import RULES as SYS_RUNTIME_RULES
from support import findings, json_report, run_envdoctor

RULES = {**SYS_RUNTIME_RULES, **PKG_RUNTIME_RULES}

CAPTURE = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "torch" / "cpu_build_section.json").read_text())
OPENBLAS = next(p for p in CAPTURE["threadpools"] if p["internal_api"] == "openblas")
GOMP = next(p for p in CAPTURE["threadpools"] if p["internal_api"] == "openmp")


def system(usable: int = 8, soft: int | None = 65536, hard: int | None = 65536,
           environ: dict[str, str] | None = None) -> dict[str, Any]:
    return {"os": "Linux", "cpu": {"usable": usable, "count": usable},
            "limits": {"nofile": {"soft": soft, "hard": hard}}, "environ": environ or {},
            "memory": {"effective_available": 64 * 1024**3}, "shm": None}


def torch_with(**probe_changes: Any) -> dict[str, Any]:
    section = copy.deepcopy(CAPTURE)
    section["probe"].update(probe_changes)
    for key in ("sharing_strategy", "threadpools", "intra_op_threads", "import_warnings", "import_error"):
        if key in probe_changes:
            section[key] = probe_changes[key]
    return section


def run(rule: str, torch: dict[str, Any], sys_facts: dict[str, Any], kind: str = "venv") -> list:
    facts = Facts.from_dict({"torch": torch, "system": sys_facts,
                             "target": {"kind": kind, "prefix": "/env", "interpreter": "/env/bin/python"}},
                            Config(no_loader=True))
    return list(RULES[rule](facts))


# --- SYS004 ------------------------------------------------------------------------------------


def test_sys004_info_when_limit_is_low_but_raisable() -> None:
    hits = run("SYS004", torch_with(sharing_strategy="file_descriptor"), system(usable=8, soft=1024, hard=65536))
    assert len(hits) == 1 and hits[0].severity is None
    assert hits[0].evidence["sharing_strategy"] == "file_descriptor"
    assert hits[0].evidence["strategy_source"] == "probe"
    assert hits[0].evidence["soft_limit"] == 1024 and hits[0].evidence["needed"] == 4096
    assert "set_sharing_strategy('file_system')" in hits[0].fix and "ulimit -n 65536" in hits[0].fix


def test_sys004_warns_when_the_hard_limit_is_low_too() -> None:
    hits = run("SYS004", torch_with(sharing_strategy="file_descriptor"), system(soft=1024, hard=2048))
    assert hits[0].severity == Severity.WARNING and hits[0].evidence["hard_limit"] == 2048
    assert "ulimit" not in hits[0].fix


def test_sys004_quiet_with_file_system_strategy_or_high_limit() -> None:
    assert run("SYS004", torch_with(sharing_strategy="file_system"), system(soft=1024, hard=1024)) == []
    assert run("SYS004", torch_with(sharing_strategy="file_descriptor"), system(soft=65536)) == []


@pytest.mark.skipif(not shutil.which("prlimit"), reason="needs prlimit")
def test_sys004_end_to_end_under_prlimit() -> None:
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "SYS004",
                         prefix_cmd=["prlimit", "--nofile=1024:1024"])
    report = json_report(proc)
    hits = findings(report, "SYS004")
    assert len(hits) == 1
    assert hits[0]["severity"] == "warning"  # the hard limit is 1024 too
    assert hits[0]["evidence"]["soft_limit"] == 1024 and hits[0]["evidence"]["hard_limit"] == 1024
    # --no-loader without a GPU runs no probe: torch's Linux default is assumed, and said so.
    assert hits[0]["evidence"]["strategy_source"].startswith("torch's Linux default")


# --- SYS005 ------------------------------------------------------------------------------------


def test_sys005_fires_for_inherited_blas_threads() -> None:
    pools = [dict(OPENBLAS, num_threads=8), dict(GOMP, num_threads=8)]
    hits = run("SYS005", torch_with(threadpools=pools, intra_op_threads=8), system(usable=8))
    assert len(hits) == 1
    evidence = hits[0].evidence
    # torch's own libgomp is set to 1 in workers; numpy's OpenBLAS keeps 8 in each of 8 workers.
    assert evidence["num_workers"] == 8 and evidence["threads_per_worker"] == 8
    assert evidence["total_threads"] == 64 and evidence["usable_cpus"] == 8
    assert "OMP_NUM_THREADS=1" in hits[0].fix
    # The fix must work under spawn/forkserver too: a lambda worker_init_fn cannot be pickled
    # there (checked: DataLoader(..., worker_init_fn=lambda _: ...) under spawn raises PicklingError).
    assert "lambda _:" not in hits[0].fix and "worker_init_fn=limit_threads" in hits[0].fix
    # Only a BLAS pool is inherited: it runs only when the dataset calls BLAS, so information.
    assert hits[0].severity is Severity.INFO and "calls BLAS" in hits[0].message


def test_sys005_warns_when_an_openmp_pool_other_than_torchs_is_inherited() -> None:
    other_omp = {"user_api": "openmp", "internal_api": "openmp", "num_threads": 8, "prefix": "libgomp",
                 "filepath": "/opt/venv/lib/python3.11/site-packages/opencv_python.libs/libgomp-a34b3233.so.1",
                 "version": None}
    hits = run("SYS005", torch_with(threadpools=[dict(OPENBLAS, num_threads=1), GOMP, other_omp]), system(usable=8))
    # opencv's bundled libgomp is also a second OpenMP runtime beside torch's: both hits.
    runtimes, [threads] = ([h for h in hits if "openmp_runtimes" in h.evidence],
                           [h for h in hits if "threads_per_worker" in h.evidence])
    assert len(runtimes) == 1
    assert threads.severity is None  # the rule's default: warning
    assert threads.evidence["threads_per_worker"] == 8 and threads.evidence["total_threads"] == 64


def test_sys005_quiet_when_omp_num_threads_is_set_or_pools_are_single() -> None:
    pools = [dict(OPENBLAS, num_threads=8), dict(GOMP, num_threads=8)]
    assert run("SYS005", torch_with(threadpools=pools), system(environ={"OMP_NUM_THREADS": "1"})) == []
    single = [dict(OPENBLAS, num_threads=1), dict(GOMP, num_threads=8)]
    assert run("SYS005", torch_with(threadpools=single), system(usable=8)) == []


def test_sys005_fires_for_two_openmp_runtimes() -> None:
    iomp = {"user_api": "openmp", "internal_api": "openmp", "num_threads": 1, "prefix": "libiomp",
            "filepath": "/opt/conda/envs/train/lib/libiomp5.so", "version": None}
    pools = [dict(OPENBLAS, num_threads=1), GOMP, iomp]
    hits = run("SYS005", torch_with(threadpools=pools), system(usable=8, environ={"OMP_NUM_THREADS": "1",
                                                                               "KMP_DUPLICATE_LIB_OK": "TRUE"}))
    assert len(hits) == 1
    assert {p["prefix"] for p in hits[0].evidence["openmp_runtimes"]} == {"libgomp", "libiomp"}
    assert hits[0].evidence["KMP_DUPLICATE_LIB_OK"] == "TRUE"
    assert "OMP: Error #15" in hits[0].message


@pytest.mark.slow
def test_sys005_end_to_end_with_the_real_probe() -> None:
    """The real torch and numpy of this environment, with and without OMP_NUM_THREADS."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    report = json_report(run_envdoctor("report", "--json", "--no-loader", "--deep",
                                       "--select", "SYS005", "PKG008", "PKG010", env=env))
    torch = report["facts"]["torch"]
    usable = report["facts"]["system"]["cpu"]["usable"]
    assert torch["probe"]["ran"] and torch["threadpools"]
    assert findings(report, "PKG008") == [] and findings(report, "PKG010") == []
    blas = max(p["num_threads"] for p in torch["threadpools"] if "torch" not in p["filepath"])
    hits = findings(report, "SYS005")
    if usable * blas > usable:
        assert hits and hits[0]["evidence"]["threads_per_worker"] == blas
    env["OMP_NUM_THREADS"] = "1"
    quiet = json_report(run_envdoctor("report", "--json", "--no-loader", "--deep", "--select", "SYS005", env=env))
    assert findings(quiet, "SYS005") == []


# --- PKG008 and PKG010 on captured text ---------------------------------------------------------


NUMPY_MESSAGE = """
A module that was compiled using NumPy 1.x cannot be run in
NumPy 2.1.3 as it may crash. To support both 1.x and 2.x
versions of NumPy, modules must be compiled with NumPy 2.0.

Traceback (most recent call last):  File "/opt/conda/envs/train/lib/python3.11/site-packages/torch/__init__.py", line 1477, in <module>
    from .functional import *  # noqa: F403
  File "/opt/conda/envs/train/lib/python3.11/site-packages/torchvision/io/image.py", line 13, in <module>
    from ..extension import _load_library
"""


def test_pkg008_names_the_extension_from_numpys_traceback() -> None:
    torch = torch_with(import_output=NUMPY_MESSAGE, import_warnings=[], numpy_version="2.1.3")
    hits = run("PKG008", torch, system(), kind="conda")
    assert hits[0].evidence["extension"] == "torchvision"
    assert hits[0].evidence["numpy_version"] == "2.1.3"
    # conda has no `install --upgrade`; the commands name the prefix. Which to run is the user's choice: no steps.
    assert hits[0].fix == "`conda update -p /env torchvision` (a build for NumPy 2), or `conda install -p /env 'numpy<2'`"
    assert hits[0].fix_steps == ()


def test_pkg008_reverse_abi() -> None:
    warning = "numpy.dtype size changed, may indicate binary incompatibility. Expected 96 from C header, got 88"
    hits = run("PKG008", torch_with(import_warnings=[warning], numpy_version="1.26.4"), system())
    assert hits[0].evidence["kind"] == "numpy2-extension-on-numpy1"
    assert hits[0].fix == "`/env/bin/python -m pip install 'numpy>=2'`"  # the target's own pip, not a bare one


def test_pkg008_abi_version_message_means_an_old_extension_on_a_new_numpy() -> None:
    # numpy/_core/include/numpy/__multiarray_api.h raises this when the extension's ABI
    # (NPY_VERSION) is below the running numpy's: a NumPy 1.x build under NumPy 2.
    text = ("RuntimeError: module compiled against ABI version 0x1000009 but this version of numpy is 0x2000000\n"
            "ImportError: numpy._core.multiarray failed to import")
    hits = run("PKG008", torch_with(import_output=text, import_warnings=[], numpy_version="2.1.3"), system())
    assert hits[0].evidence["kind"] == "numpy1-extension-on-numpy2"
    assert "numpy<2" in hits[0].fix and "numpy>=2" not in hits[0].fix


def test_pkg008_numpy2_header_messages() -> None:
    # The NumPy 2 headers word the failure "numpy._core.multiarray failed to import".
    hits = run("PKG008", torch_with(import_output="ImportError: numpy._core.multiarray failed to import",
                                    import_warnings=[], numpy_version="2.0.2"), system())
    assert hits[0].evidence["kind"] == "numpy-import-failed"
    newer = ("RuntimeError: module was compiled against NumPy C-API version 0x14 (NumPy 2.3) but the running NumPy "
             "has C-API version 0x12. Check the section C-API incompatibility at the Troubleshooting ImportError")
    [hit] = run("PKG008", torch_with(import_output=newer, import_warnings=[], numpy_version="2.0.2"), system())
    assert hit.evidence["kind"] == "extension-newer-than-numpy"
    assert hit.fix.startswith("`/env/bin/python -m pip install 'numpy>=2.3'`")
    # NumPy 1.x headers, built against a later 1.x: NumPy 2 would not run it either.
    older = "RuntimeError: module compiled against API version 0x10 but this version of numpy is 0xe"
    [hit] = run("PKG008", torch_with(import_output=older, import_warnings=[], numpy_version="1.21.6"), system())
    assert hit.fix.startswith("`/env/bin/python -m pip install --upgrade 'numpy<2'`")


def test_pkg008_and_pkg010_quiet_on_the_real_capture() -> None:
    for rule in ("PKG008", "PKG010"):
        assert run(rule, copy.deepcopy(CAPTURE), system()) == []


def test_pkg010_on_a_probe_that_crashed() -> None:
    probe = {"ran": True, "timed_out": False, "error": "the torch probe was killed by SIGSEGV", "returncode": -11,
             "stderr_tail": "Segmentation fault (core dumped)", "source": "envdoctor"}
    torch = copy.deepcopy(CAPTURE)
    torch["probe"] = probe
    hits = run("PKG010", torch, system())
    assert hits[0].evidence["error"] == "the torch probe was killed by SIGSEGV"
    assert hits[0].evidence["returncode"] == -11


def test_sys005_one_openmp_library_under_two_names_is_one_runtime(tmp_path: Path) -> None:
    """libgomp reached through a symlink and through its file: the probe's realpath makes them one runtime."""
    library = tmp_path / "libgomp-a34b3233.so.1"
    library.write_bytes(b"\x7fELF")
    alias = tmp_path / "libgomp.so.1"
    alias.symlink_to(library.name)
    pools = [dict(GOMP, filepath=str(alias), realpath=os.path.realpath(alias)),
             dict(GOMP, filepath=str(library), realpath=os.path.realpath(library))]
    quiet = run("SYS005", torch_with(threadpools=pools), system(usable=8, environ={"OMP_NUM_THREADS": "1"}))
    assert quiet == []
    distinct = [pools[0], dict(GOMP, filepath="/other/libgomp.so.1", realpath="/other/libgomp.so.1")]
    [clash] = run("SYS005", torch_with(threadpools=distinct), system(usable=8, environ={"OMP_NUM_THREADS": "1"}))
    assert len(clash.evidence["openmp_runtimes"]) == 2


def test_probe_records_the_realpath_of_each_native_library() -> None:
    import sys

    from envdoctor.facts.torch import PROBE_SCRIPT

    sys.path.insert(0, str(PROBE_SCRIPT.parent))
    try:
        import torch_probe
    finally:
        sys.path.remove(str(PROBE_SCRIPT.parent))
    import numpy  # noqa: F401  # loads a BLAS, so threadpoolctl has a pool to list

    result: dict[str, Any] = {}
    torch_probe._native_libraries(result)
    assert result["threadpools"], result
    for pool in result["threadpools"]:
        assert pool["realpath"] == os.path.realpath(pool["filepath"])


# --- PKG010's fix as data: the installed release put back by its owner's tool ---------------------


def _failed_import(error: str, version: str = "2.5.1+cu124", cuda: str | None = "12.4") -> dict[str, Any]:
    torch = torch_with(import_error=error)
    torch.update(version=version, dist_version=version, cuda_build=cuda, build="cuda" if cuda else "cpu")
    return torch


def test_pkg010_missing_cuda_libraries_reinstall_the_build_from_its_index() -> None:
    error = "OSError: libcudnn.so.9: cannot open shared object file: No such file or directory"
    [hit] = run("PKG010", _failed_import(error), system())
    command = ("/env/bin/python", "-m", "pip", "install", "--force-reinstall", "torch==2.5.1",
               "--index-url", "https://download.pytorch.org/whl/cu124")
    assert hit.fix_steps == (FixStep.command("pip", *command),)
    assert hit.fix == ("the CUDA libraries torch was built against are missing: reinstall the matching build: "
                       + " ".join(command) + "   # check that LD_LIBRARY_PATH does not point at another CUDA")


def test_pkg010_missing_dependency_reinstalls_the_cpu_build_from_the_cpu_index() -> None:
    # torch 2.13.0+cpu pinned from PyPI would come back as the CUDA build: the local version names the index.
    [hit] = run("PKG010", _failed_import("ModuleNotFoundError: No module named 'sympy'", "2.13.0+cpu", None),
                system())
    assert [s.argv for s in hit.fix_steps] == [("/env/bin/python", "-m", "pip", "install", "--force-reinstall",
                                                "torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu")]
    assert hit.fix.startswith("a dependency of torch is missing: reinstall torch with its dependencies: ")


def test_pkg010_conda_torch_is_reinstalled_by_conda_and_an_unclear_error_runs_nothing() -> None:
    torch = _failed_import("ModuleNotFoundError: No module named 'typing_extensions'")
    torch["installer"] = "conda"
    facts = Facts.from_dict({"torch": torch, "system": system(),
                             "target": {"kind": "conda", "prefix": "/opt/conda/envs/train",
                                        "interpreter": "/opt/conda/envs/train/bin/python"}}, Config(no_loader=True))
    [hit] = list(RULES["PKG010"](facts))
    assert hit.fix_steps == (FixStep.command("conda", "conda", "install", "-p", "/opt/conda/envs/train",
                                             "--force-reinstall", "pytorch=2.5.1"),)
    # An error that may have another cause (a module shadowing torch, a broken .pth): advice, no steps.
    [unclear] = run("PKG010", _failed_import("ImportError: cannot import name 'Tensor'"), system())
    assert unclear.fix_steps == () and "to see the full error" in unclear.fix

"""Rules on what torch does once imported: sharing strategy, threads, native libraries, import health.

SYS004 sharing-strategy and SYS005 thread-oversubscription (family SYS,
catalogued in rules/SYS-RUNTIME.toml); PKG008 numpy-abi-mismatch and PKG010
torch-import-failed (family PKG, in rules/PKG-RUNTIME.toml). They read the
`torch` section, whose probe imports numpy and torch in the target
interpreter and lists the BLAS and OpenMP libraries loaded (threadpoolctl).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from envdoctor.facts import Facts
from envdoctor.model import Severity
from envdoctor.rules import Hit
from envdoctor.rules.install_commands import advice
from envdoctor.rules.system import BASE_NOFILE, loader_plan
from envdoctor.rules.torch_install import install_text, led, reinstall_torch, wheel_index

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.torch import ThreadPool, TorchFacts, TorchProbe

#: Messages numpy and torch print when an extension meets a NumPy of the other ABI, as
#: numpy's own headers (numpy/_core/include/numpy/__multiarray_api.h, _import_array)
#: and numpy/core/_multiarray_umath.py word them. Which way round is read from the
#: message: "module compiled against ABI version 0x1000009 but this version of numpy is
#: 0x2000000" is raised when the extension's ABI is the OLDER one (NPY_VERSION <
#: PyArray_GetNDArrayCVersion()); "API version X but this version of numpy is Y" (NumPy
#: 1.x headers) and "compiled against NumPy C-API version X (NumPy V) but the running
#: NumPy has C-API version Y" (NumPy 2 headers) when the extension is the NEWER one.
NUMPY_ABI_PATTERNS = (
    ("numpy1-extension-on-numpy2", re.compile(r"compiled using NumPy 1\.x cannot be run in\s+NumPy [\d.]+")),
    ("numpy1-extension-on-numpy2", re.compile(r"_ARRAY_API not found")),
    ("numpy1-extension-on-numpy2", re.compile(r"module compiled against ABI version 0x[0-9a-f]+ but this "
                                              r"version of numpy is 0x[0-9a-f]+")),
    ("numpy2-extension-on-numpy1", re.compile(r"numpy\.dtype size changed, may indicate binary incompatibility")),
    ("extension-newer-than-numpy", re.compile(r"module compiled against API version 0x[0-9a-f]+ but this "
                                              r"version of numpy is 0x[0-9a-f]+")),
    ("extension-newer-than-numpy", re.compile(r"module was compiled against NumPy C-API version 0x[0-9a-f]+ "
                                              r"\(NumPy (?P<built_for>[\d.]+)\) but the running NumPy has C-API "
                                              r"version 0x[0-9a-f]+")),
    ("numpy-import-failed", re.compile(r"numpy\._?core\.multiarray failed to import")),
)
_SITE_FRAME = re.compile(r'File "([^"]*[/\\](?:site|dist)-packages[/\\]([^/\\"]+))')


def _probe(facts: Facts) -> TorchProbe | None:
    torch = facts["torch"]
    if not torch["installed"]:
        return None
    probe = torch["probe"]
    return probe if probe.get("ran") else None


def _usable(facts: Facts) -> int:
    return facts["system"]["cpu"]["usable"]


def find_sharing_strategy(facts: Facts) -> Iterator[Hit]:
    torch = facts["torch"]
    if not torch["installed"]:
        return
    nofile = facts["system"]["limits"]["nofile"]
    soft, hard = nofile["soft"], nofile["hard"]
    strategy = torch["sharing_strategy"]
    source = "probe"
    if strategy is None:
        # Without the probe: torch's default is file_descriptor wherever it is supported (Linux).
        if facts["system"]["os"] != "Linux":
            return
        strategy, source = "file_descriptor", "torch's Linux default (probe not run)"
    if strategy != "file_descriptor" or soft is None:
        return
    plan = loader_plan(facts)
    workers = plan["num_workers"]
    if not workers:
        return
    in_flight = workers * plan["prefetch_factor"] * plan["tensors_per_batch"]
    need = max(4096, BASE_NOFILE + 64 * in_flight)  # the estimate SYS001 uses
    if soft >= need:
        return
    # Without root the soft limit can only rise to the hard one; past that the
    # strategy is the one lever left, so this note becomes a warning.
    stuck = hard is not None and hard < need
    yield Hit(
        message=(f"torch's sharing strategy is file_descriptor and the open-file limit is {soft} (hard {hard}), "
                 f"below the ~{need} that {workers} workers can hold open"
                 + ("; the hard limit cannot be raised without root, so switching strategy is the fix here"
                    if stuck else "")),
        evidence={"sharing_strategy": strategy, "strategy_source": source, "soft_limit": soft,
                  "hard_limit": hard, "needed": need, "num_workers": workers, "workers_from": plan["source"]},
        fix=("call torch.multiprocessing.set_sharing_strategy('file_system') at the top of the training script, "
             "before any DataLoader exists (it keeps tensors in /dev/shm files instead of open descriptors; a "
             "crashed process can leave those files behind, so clean /dev/shm/torch_* after crashes)"
             + ("" if stuck else f", or raise the limit: ulimit -n {max(need, 65536) if hard is None else min(max(need, 65536), hard)}")),
        severity=Severity.WARNING if stuck else None,
    )


def _torch_lib_dir(torch: TorchFacts, probe: TorchProbe) -> str | None:
    probe_file = probe.get("file")
    location = torch.get("location") or (os.path.dirname(probe_file) if probe_file else None)
    return os.path.join(location, "lib") if location else None


def find_thread_oversubscription(facts: Facts) -> Iterator[Hit]:
    probe = _probe(facts)
    if probe is None:
        return
    torch = facts["torch"]
    pools = probe.get("threadpools") or []
    usable = _usable(facts)
    environ = {**facts["system"]["environ"], **probe.get("environ", {})}
    omp_set = "OMP_NUM_THREADS" in environ
    workers = loader_plan(facts)["num_workers"]
    torch_lib = _torch_lib_dir(torch, probe)
    # DataLoader workers call torch.set_num_threads(1), which tames torch's own
    # OpenMP pool; every other pool (numpy's OpenBLAS, a second OpenMP) keeps the
    # count it started with in each worker.
    inherited = [p for p in pools if not (torch_lib and str(p.get("filepath") or "").startswith(torch_lib))]
    per_worker = max([p.get("num_threads") or 1 for p in inherited] or [1])
    # One library reached by two names (symlinks) is one runtime: the probe resolved the paths.
    openmp: dict[str, ThreadPool] = {}
    for pool in pools:
        if pool.get("user_api") == "openmp":
            openmp.setdefault(pool.get("realpath") or pool.get("filepath") or "?", pool)
    libraries = [{"user_api": p.get("user_api"), "internal_api": p.get("internal_api"), "prefix": p.get("prefix"),
                  "filepath": p.get("filepath"), "version": p.get("version"), "num_threads": p.get("num_threads")}
                 for p in pools]
    if len(openmp) > 1:
        names = ", ".join(f"{p.get('prefix')} ({p.get('filepath')})" for p in openmp.values())
        yield Hit(
            message=(f"{len(openmp)} OpenMP runtimes are loaded in one process: {names}; they fight over the same "
                     "cores, and two copies of Intel's libiomp5 abort with 'OMP: Error #15'"),
            evidence={"openmp_runtimes": list(openmp.values()), "libraries": libraries,
                      "KMP_DUPLICATE_LIB_OK": environ.get("KMP_DUPLICATE_LIB_OK")},
            fix=("install the packages that bring OpenMP from one source (all from conda-forge, or all wheels "
                 "from PyPI in a venv), so one runtime is shared; KMP_DUPLICATE_LIB_OK=TRUE only hides the "
                 "clash and can give wrong results"),
        )
    if omp_set or not workers:
        return
    total = workers * per_worker
    if total <= usable:
        return
    heaviest = max(inherited, key=lambda p: p.get("num_threads") or 0) if inherited else None
    # A BLAS pool only runs when the dataset's own code calls BLAS (matrix products,
    # solvers); decoding and element-wise work leave it idle. An inherited OpenMP pool
    # is used far more widely, so only that one makes this a warning.
    busy = [p for p in inherited if p.get("user_api") != "blas" and (p.get("num_threads") or 1) > 1]
    only_blas = not busy
    yield Hit(
        message=(f"{workers} DataLoader workers × {per_worker} threads each "
                 f"({heaviest.get('internal_api') if heaviest else 'native'} pool, inherited by every worker) = "
                 f"{total} threads on {usable} usable CPUs, with OMP_NUM_THREADS unset"
                 + ("; this matters only if the dataset's code calls BLAS (numpy matrix products, "
                    "solvers) in the workers" if only_blas else "")),
        evidence={"num_workers": workers, "threads_per_worker": per_worker, "total_threads": total,
                  "usable_cpus": usable, "intra_op_threads": probe.get("intra_op_threads"),
                  "OMP_NUM_THREADS": None, "libraries": libraries},
        fix=("export OMP_NUM_THREADS=1 (and MKL_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1) for the workers, or "
             "limit the pools in each worker with a module-level function (a lambda cannot be pickled for "
             "spawn or forkserver workers): `def limit_threads(_): threadpoolctl.threadpool_limits(1)` and "
             f"DataLoader(..., worker_init_fn=limit_threads); keep torch.set_num_threads({usable}) in the main process"),
        severity=Severity.INFO if only_blas else None,
    )


def _culprit(text: str) -> str | None:
    """The last third-party package in the traceback numpy prints: the one that imported it."""
    frames = [m.group(2) for m in _SITE_FRAME.finditer(text)]
    for package in reversed(frames):
        name = re.split(r"[.-]", package)[0]
        if name not in ("numpy", "importlib", "_distutils_hack"):
            return name
    return None


def find_numpy_abi_mismatch(facts: Facts) -> Iterator[Hit]:
    probe = _probe(facts)
    if probe is None:
        return
    texts = [probe.get("import_output") or "", *(probe.get("import_warnings") or []), probe.get("import_error") or "",
             probe.get("torch_import_traceback") or ""]
    joined = "\n".join(texts)
    found = next(((kind, match) for kind, pattern in NUMPY_ABI_PATTERNS if (match := pattern.search(joined))), None)
    if found is None:
        return
    kind, match = found
    numpy_version = probe.get("numpy_version")
    culprit = _culprit(joined)
    line = joined[max(0, match.start() - 40):match.end() + 40].strip().replace("\n", " ")
    # Every fix here is a choice between moving numpy and moving the extension, which depends on what
    # else needs that numpy: the commands (the owner's tool, naming the target) are advice, not steps.
    def install(name: str, *specs: str, upgrade: bool = False) -> str:
        return f"`{install_text(facts, name, *specs, upgrade=upgrade)}`"

    rebuilt = f", or a {culprit} built for NumPy {numpy_version}" if culprit else ""
    if kind == "numpy1-extension-on-numpy2":
        upgrade = install(culprit, culprit, upgrade=True) if culprit else "upgrade the extension to a NumPy 2 build"
        fix = f"{upgrade} (a build for NumPy 2), or {install('numpy', 'numpy<2')}"
        summary = f"an extension compiled for NumPy 1.x is imported under NumPy {numpy_version}"
    elif kind == "extension-newer-than-numpy" and match.groupdict().get("built_for"):
        built_for = match.group("built_for")
        fix = install("numpy", f"numpy>={built_for}") + rebuilt
        summary = f"an extension compiled for NumPy {built_for} is imported under the older NumPy {numpy_version}"
    elif kind == "extension-newer-than-numpy" and str(numpy_version or "").startswith("1."):
        # NumPy 1.x headers: built against a later 1.x, which a NumPy 2 would not run either.
        fix = install("numpy", "numpy<2", upgrade=True) + rebuilt
        summary = f"an extension compiled for a newer NumPy 1.x is imported under NumPy {numpy_version}"
    elif kind in ("numpy2-extension-on-numpy1", "extension-newer-than-numpy"):
        fix = install("numpy", "numpy>=2") + rebuilt
        summary = f"an extension compiled for a newer NumPy is imported under NumPy {numpy_version}"
    else:
        fix = install("numpy", "--force-reinstall", "numpy", *((culprit,) if culprit else ()))
        summary = f"numpy's C API could not be imported by an extension (NumPy {numpy_version})"
    yield Hit(
        message=f"{summary}{f' ({culprit})' if culprit else ''}: importing torch printed '{match.group(0)}'",
        evidence={"kind": kind, "numpy_version": numpy_version, "extension": culprit, "matched": match.group(0),
                  "context": line[:400], "torch_version": facts["torch"].get("version")},
        fix=fix,
    )


def find_torch_import_failure(facts: Facts) -> Iterator[Hit]:
    probe = _probe(facts)
    if probe is None:
        return
    torch = facts["torch"]
    interpreter = (facts.get("target") or {}).get("interpreter") or "python"
    base = {"torch_version": torch.get("version"), "interpreter": probe.get("executable") or interpreter,
            "probe_source": probe.get("source")}
    if probe.get("timed_out"):
        yield Hit(
            message=(f"importing torch in the target environment did not finish within {probe.get('timeout_s'):g} s: "
                     "every training start will hang or crawl the same way"),
            evidence={**base, "timeout_s": probe.get("timeout_s"), "seconds": probe.get("seconds"),
                      "stderr_tail": (probe.get("stderr_tail") or "")[-600:]},
            fix=(f"find what blocks: `{interpreter} -X importtime -c 'import torch'` and look for a sitecustomize, "
                 "usercustomize or .pth file that runs code, or torch installed on a hung network file system; "
                 "raise the limit with ENVDOCTOR_TORCH_PROBE_TIMEOUT=SECONDS if the file system is merely slow"),
        )
        return
    error = probe.get("import_error")
    if error is None and probe.get("error"):
        error = probe["error"]
    if not error:
        return
    traceback_tail = (probe.get("torch_import_traceback") or probe.get("stderr_tail") or "").strip().splitlines()[-6:]
    cuda_build = torch.get("cuda_build")
    missing_cuda = any(name in error for name in ("libcudnn", "libcu", "libnccl", "libnv"))
    reinstall = reinstall_torch(facts, wheel_index(cuda_build) if missing_cuda and cuda_build else None,
                                note="check that LD_LIBRARY_PATH does not point at another CUDA" if missing_cuda else "")
    if reinstall is None:
        fix = advice(f"run `{interpreter} -c 'import torch'` to see the full error, and reinstall torch the way it "
                     "was installed")
    elif missing_cuda:
        fix = led("the CUDA libraries torch was built against are missing: reinstall the matching build: ", reinstall)
    elif error.startswith("ModuleNotFoundError"):
        fix = led("a dependency of torch is missing: reinstall torch with its dependencies: ", reinstall)
    else:
        # The error may have another cause (a shadowing module, a broken .pth): the reinstall is advice.
        fix = advice(f"run `{interpreter} -c 'import torch'` to see the full error; reinstall torch "
                     f"(`{reinstall.text}`) if its files are damaged")
    yield Hit(
        message=f"`import torch` fails in the target environment: {error}",
        evidence={**base, "error": error, "traceback_tail": traceback_tail, "returncode": probe.get("returncode")},
        **fix.hit(),
    )


RULES = {
    "SYS004": find_sharing_strategy,
    "SYS005": find_thread_oversubscription,
    "PKG008": find_numpy_abi_mismatch,
    "PKG010": find_torch_import_failure,
}

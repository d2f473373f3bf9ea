"""SYS rules on what torch does once imported: its sharing strategy and its thread pools.

SYS004 sharing-strategy and SYS005 thread-oversubscription read the `torch`
section, whose probe imports numpy and torch in the target interpreter and lists
the BLAS and OpenMP libraries loaded (threadpoolctl). SYS005 also reads the
loader smoke test's re-time of `__getitem__` with one intra-op thread: the
main process's own pool contending for CPUs other load holds.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from envdoctor.facts import Facts
from envdoctor.model import Severity
from envdoctor.rules import Hit
from envdoctor.rules.system.limits import BASE_NOFILE, loader_plan

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.torch import ThreadPool, TorchFacts, TorchProbe


def _probe(facts: Facts) -> TorchProbe | None:
    torch = facts["torch"]
    if not torch or not torch["installed"]:
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


def main_process_contention(facts: Facts) -> Hit | None:
    """At num_workers=0 the samples are made in the training process, with torch's intra-op pool (as many
    threads as CPUs); on CPUs other load holds a parallel region waits for its slowest thread. The smoke
    test re-fetches samples alternately with that pool and with one thread (workers run one each)."""
    from envdoctor.judge.loader import loader_judgement

    section = facts.get("loader")
    if not section or section.get("failure"):
        return None
    judged = loader_judgement(facts)
    contention = judged.pool_contention if judged else None
    if judged is None or contention is None:
        return None
    threads, pooled, single = contention
    getitem = section.get("getitem", {})
    current = (section["current"] or {}).get("num_workers", 0)
    recommendation = judged.rec
    recommended = recommendation["num_workers"] if recommendation else None
    at_zero = current == 0 or recommended == 0
    usable = section.get("usable_cpus") or facts["system"]["cpu"]["usable"]
    cpu, wall = getitem.get("process_cpu_per_sample_s"), getitem.get("wall_per_sample_s")
    others = judged.others_cpus
    spin = (f"; the main process burned {cpu / wall:.1f} CPU-seconds per second while fetching"
            if cpu and wall and cpu > 1.2 * wall else "")
    return Hit(
        message=(f"at num_workers=0 torch's {threads} intra-op threads in the loading process fight "
                 + (f"other load ({others} of {usable} usable CPUs busy with other processes)" if others
                    else "other load") + f" for the {usable} usable CPU(s): a sample costs "
                 f"{pooled * 1e3:.2f} ms, {single * 1e3:.2f} ms with torch.set_num_threads(1) "
                 f"({pooled / single:.1f}× slower){spin}; DataLoader workers run one thread each and escape it"),
        evidence={"intra_op_threads": threads, "threads_median_s": pooled, "one_thread_median_s": single,
                  "slowdown": round(pooled / single, 2), "retimed_samples": getitem.get("retimed_samples"),
                  "process_cpu_per_sample_s": cpu, "wall_per_sample_s": wall, "others_cpu": others,
                  "usable_cpus": usable, "current_num_workers": current,
                  "recommended_num_workers": recommended},
        fix=("in the process that loads at num_workers=0, call torch.set_num_threads(1) before iterating (or "
             "start it with OMP_NUM_THREADS=1), or use DataLoader workers (each runs one intra-op thread); if "
             "the training step itself needs the threads, use workers"),
        severity=Severity.WARNING if at_zero else Severity.INFO,
    )


# complexity: 30 — three findings from one thread-pool probe (a busy main process, two OpenMP runtimes, workers ×
#   inherited threads over the usable CPUs) share its pools; split, each would re-read them.
def find_thread_oversubscription(facts: Facts) -> Iterator[Hit]:
    contention = main_process_contention(facts)
    if contention is not None:
        yield contention
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


RULES = {
    "SYS004": find_sharing_strategy,
    "SYS005": find_thread_oversubscription,
}

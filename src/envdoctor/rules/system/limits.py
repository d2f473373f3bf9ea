"""SYS rules: the limits of the machine the workers will run on.

SYS001 open-file limit, SYS002 /dev/shm size, SYS003 CPU quota, SYS006
memory headroom (on Windows also the commit limit, which spawned workers
exhaust before memory). Where a limit does not exist (no RLIMIT_NOFILE or
/dev/shm on Windows, no /dev/shm on macOS) the facts name it in
`system.not_applicable` and its rule has nothing to judge. SYS004 and SYS005 (sharing strategy, thread
oversubscription) read torch facts and live in `rules.system.runtime`.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from envdoctor.facts import Facts
from envdoctor.facts.system import worker_cpus
from envdoctor.model import Severity
from envdoctor.rules import Hit
from envdoctor.units import GIB, MIB, human_bytes

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.system import MemoryFacts
    from envdoctor.facts.torch import TorchFacts

#: With no estimate of the bytes in flight, /dev/shm below this is too small.
SHM_FLOOR = 512 * MIB
#: What one DataLoader worker is assumed to need when the loader did not measure it.
ASSUMED_WORKER_BYTES = 512 * MIB
#: What a spawned Windows worker that imports a CUDA build of torch is assumed to commit: Windows commits
#: each process's copy of the CUDA libraries' writable sections, so the commit far exceeds what it touches.
ASSUMED_CUDA_WORKER_COMMIT = 2 * GIB
#: Open files the main process needs before any worker starts.
BASE_NOFILE = 1024
#: The limit we recommend when one is too low.
RECOMMENDED_NOFILE = 65536


def loader_plan(facts: Facts) -> dict[str, Any]:
    """The worker settings a run will use: measured by the loader stage, else assumed.

    Returns num_workers, prefetch_factor, batch_bytes, tensors_per_batch,
    worker_bytes and `source` ("loader" when the smoke test measured them,
    "usable-cpus" when num_workers is assumed from the usable CPUs).
    """
    from envdoctor.facts.node_share import cpus_per_process, processes_per_node
    from envdoctor.judge.loader import loader_judgement

    system = facts["system"]
    section = facts.get("loader")
    # The loader's recommendation is the judge layer's, decided once for the check, not a fact itself.
    judged = loader_judgement(facts) if section else None  # gathered already: facts.get gave it
    recommendation: dict[str, Any] = dict(judged.rec or {}) if judged else {}
    loader: dict[str, Any] = dict(section or {})
    current = loader.get("current") or {}
    # One training process's share of the node's CPUs (--procs-per-node, LOCAL_WORLD_SIZE).
    # Apple silicon: the performance cores only (facts.system.worker_cpus).
    usable = cpus_per_process(worker_cpus(system["cpu"]), processes_per_node(facts.config.procs_per_node))
    if recommendation.get("num_workers") is not None or current.get("num_workers") is not None:
        workers = max(recommendation.get("num_workers") or 0, current.get("num_workers") or 0)
        prefetch = recommendation.get("prefetch_factor") or current.get("prefetch_factor") or 2
        source = "loader"
    else:
        workers, prefetch, source = usable, 2, "usable-cpus"
    return {
        "num_workers": workers,
        "prefetch_factor": prefetch,
        "batch_bytes": loader.get("batch_bytes"),
        "tensors_per_batch": loader.get("tensors_per_batch") or 2,
        "worker_bytes": loader.get("worker_rss_bytes"),
        "source": source,
    }


def _sharing_strategy(facts: Facts) -> str | None:
    """torch's sharing strategy as the probe saw it; None when torch's facts are missing or unprobed."""
    torch: TorchFacts | None = facts.get("torch")
    return torch["sharing_strategy"] if torch else None


def find_low_nofile_limit(facts: Facts) -> Iterator[Hit]:
    nofile = facts["system"]["limits"]["nofile"]
    soft, hard = nofile["soft"], nofile["hard"]
    if soft is None:
        return
    plan = loader_plan(facts)
    workers = plan["num_workers"]
    if workers == 0:
        return
    strategy = _sharing_strategy(facts) or "file_descriptor"
    # Under file_descriptor every tensor a worker hands over holds an open file
    # until the main process frees it; keep room for batches the loop keeps alive.
    in_flight = workers * plan["prefetch_factor"] * plan["tensors_per_batch"]
    need = BASE_NOFILE if strategy == "file_system" else max(4096, BASE_NOFILE + 64 * in_flight)
    if soft >= need:
        return
    severity = Severity.ERROR if soft < BASE_NOFILE else None
    target = max(need, RECOMMENDED_NOFILE)
    if hard is None or hard >= target:
        fix = f"ulimit -n {target}   # in the shell (or job script) that starts training"
    elif hard >= need:
        fix = f"ulimit -n {hard}   # the hard limit; raising it further needs root"
    else:
        fix = (f"the hard limit ({hard}) is too low too: raise it as root "
               f"(`sudo prlimit --pid $$ --nofile={target}:{target}` for this shell, /etc/security/limits.conf, "
               f"or `docker run --ulimit nofile={target}:{target}`), then `ulimit -n {target}`")
    fix += "; or call torch.multiprocessing.set_sharing_strategy('file_system') before creating the DataLoader"
    yield Hit(
        message=(f"the open-file limit is {soft} but {workers} DataLoader workers with the "
                 f"{strategy} sharing strategy need about {need}: expect 'Too many open files'"),
        evidence={"soft_limit": soft, "hard_limit": hard, "needed": need, "num_workers": workers,
                  "prefetch_factor": plan["prefetch_factor"], "sharing_strategy": strategy,
                  "workers_from": plan["source"]},
        fix=fix,
        severity=severity,
    )


def find_small_shm(facts: Facts) -> Iterator[Hit]:
    shm = facts["system"]["shm"]
    if not shm:
        return
    plan = loader_plan(facts)
    total, free = shm["total"], shm["free"]
    in_flight = None
    if plan["batch_bytes"] and plan["num_workers"]:
        in_flight = plan["batch_bytes"] * plan["num_workers"] * plan["prefetch_factor"]
        short = free < in_flight
        reason = (f"{human_bytes(free)} free in {shm['path']} but {plan['num_workers']} workers × "
                  f"prefetch_factor {plan['prefetch_factor']} × {human_bytes(plan['batch_bytes'])} a batch "
                  f"put {human_bytes(in_flight)} in flight")
    else:
        short = total < SHM_FLOOR
        reason = (f"{shm['path']} is {human_bytes(total)}, below the {human_bytes(SHM_FLOOR)} "
                  "floor for DataLoader workers")
    if not short:
        return
    wanted = max(in_flight or 0, 2 * SHM_FLOOR) * 2
    size_gib = max(1, math.ceil(wanted / GIB))
    yield Hit(
        message=f"shared memory is too small: {reason}; workers will die with 'Bus error'",
        evidence={"path": shm["path"], "shm_total": total, "shm_free": free, "bytes_in_flight": in_flight,
                  "batch_bytes": plan["batch_bytes"], "num_workers": plan["num_workers"],
                  "prefetch_factor": plan["prefetch_factor"], "floor": SHM_FLOOR},
        fix=(f"docker run --shm-size={size_gib}g … (or --ipc=host); on Kubernetes mount an emptyDir "
             f"with medium: Memory at /dev/shm; on a host: sudo mount -o remount,size={size_gib}G /dev/shm"),
    )


def find_cpu_quota(facts: Facts) -> Iterator[Hit]:
    cpu = facts["system"]["cpu"]
    count, usable = cpu["count"], cpu["usable"]
    if not count or usable >= count:
        return
    limits = []
    affinity, quota = cpu["affinity"], cpu["quota_cpus"]
    if affinity is not None and affinity < count:
        limits.append(f"CPU affinity allows {affinity}")
    if quota is not None and quota < count:
        limits.append(f"the cgroup quota is {quota:g} CPUs")
    yield Hit(
        message=(f"only {usable} of the {count} CPUs that os.cpu_count() reports are usable "
                 f"({'; '.join(limits)}): worker counts derived from os.cpu_count() oversubscribe"),
        evidence={"usable_cpus": usable, "cpu_count": count, "affinity": affinity,
                  "quota_cpus": quota, "cgroup_version": cpu["cgroup_version"]},
        fix=(f"use num_workers={usable} at most, derived from len(psutil.Process().cpu_affinity()) "
             f"(Windows has no os.sched_getaffinity), not os.cpu_count(); and `set OMP_NUM_THREADS={max(1, usable)}`"
             if facts["system"].get("os") == "Windows" else
             f"use num_workers={usable} at most, derived from len(os.sched_getaffinity(0)) and the "
             f"cgroup quota, not os.cpu_count(); and `export OMP_NUM_THREADS={max(1, usable)}`"),
    )


def find_low_memory_headroom(facts: Facts) -> Iterator[Hit]:
    memory = facts["system"]["memory"]
    available = memory["effective_available"]
    plan = loader_plan(facts)
    workers = plan["num_workers"]
    if not workers:
        return
    yield from _short_commit(facts, memory, plan)
    per_worker = plan["worker_bytes"] or ASSUMED_WORKER_BYTES
    batches = (plan["batch_bytes"] or 0) * workers * plan["prefetch_factor"]
    need = workers * per_worker + batches
    if available >= need:
        return
    fits = max(0, int((available - batches) * 0.8 // per_worker))
    limited_by = "the cgroup memory limit" if memory["cgroup_limit"] else "the machine's free memory"
    yield Hit(
        message=(f"{human_bytes(available)} of memory is available ({limited_by}) but {workers} workers "
                 f"need about {human_bytes(need)}: expect the OOM killer to end workers"),
        evidence={"available_bytes": available, "cgroup_limit": memory["cgroup_limit"],
                  "num_workers": workers, "per_worker_bytes": per_worker,
                  "per_worker_source": "measured" if plan["worker_bytes"] else "assumed",
                  "batch_bytes_in_flight": batches, "estimated_need": need},
        fix=(f"use num_workers={fits}" if fits else "run with num_workers=0")
        + " or raise the memory limit (docker run --memory / the job's --mem)",
    )


def _short_commit(facts: Facts, memory: MemoryFacts, plan: dict[str, Any]) -> Iterator[Hit]:
    """Windows: the commit limit (RAM plus paging file) against N spawned workers that each import torch."""
    commit_available = memory.get("commit_available")
    if commit_available is None:
        return
    workers = plan["num_workers"]
    torch: TorchFacts | None = facts.get("torch")
    cuda = bool(torch and torch.get("build") == "cuda")
    per_worker = max(plan["worker_bytes"] or 0, ASSUMED_CUDA_WORKER_COMMIT if cuda else ASSUMED_WORKER_BYTES)
    batches = (plan["batch_bytes"] or 0) * workers * plan["prefetch_factor"]
    need = workers * per_worker + batches
    if commit_available >= need:
        return
    fits = max(0, int((commit_available - batches) * 0.8 // per_worker))
    yield Hit(
        message=(f"{human_bytes(commit_available)} of commit is left (of a {human_bytes(memory.get('commit_limit') or 0)} "
                 f"limit: memory plus the paging file) but {workers} spawned workers, each importing "
                 f"{'a CUDA build of ' if cuda else ''}torch afresh, need about {human_bytes(need)}: expect "
                 "'[WinError 1455] The paging file is too small for this operation to complete'"),
        evidence={"commit_available_bytes": commit_available, "commit_limit_bytes": memory.get("commit_limit"),
                  "num_workers": workers, "per_worker_commit_bytes": per_worker, "torch_cuda": cuda,
                  "batch_bytes_in_flight": batches, "estimated_need": need},
        fix=(f"use num_workers={fits}" if fits else "run with num_workers=0")
        + " with persistent_workers=True, or let Windows grow the paging file (System Properties > Advanced > "
          "Performance > Virtual memory: 'System managed size', or a larger maximum on a disk with room)",
    )


RULES = {
    "SYS001": find_low_nofile_limit,
    "SYS002": find_small_shm,
    "SYS003": find_cpu_quota,
    "SYS006": find_low_memory_headroom,
}

"""System facts: usable CPUs, memory with cgroup limits, rlimits, /dev/shm, container.

Each reader takes the paths it reads as arguments (defaulting to the real
ones), so tests can point it at saved copies of /proc and /sys as well as at
the live machine.

Not every fact exists everywhere. Windows has no RLIMIT_NOFILE and no
/dev/shm, macOS no /dev/shm, and cgroups are Linux's alone: such a fact is
left out and named in `not_applicable` with the reason, so its rule stays
quiet and the report says "n/a" rather than "not checked". In their place
Windows has the commit limit (`memory.commit_limit`, see facts.windows) and
Apple silicon its performance and efficiency cores (see facts.macos).
"""
from __future__ import annotations

import math
import os
import platform
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from envdoctor.facts.kernel_files import read_kernel_file
from envdoctor.facts.session import LogindFacts, WslFacts, read_logind, read_wsl
from envdoctor.redact import redact_environ

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import FactsReader


class CpuFacts(TypedDict):
    """CPUs: what os.cpu_count() says, and what affinity and the cgroup quota leave usable."""

    count: int | None
    affinity: int | None
    cgroup_version: int | None
    quota_cpus: float | None
    usable: int
    #: Apple silicon's performance and efficiency cores (sysctl hw.perflevel0/1.logicalcpu); None elsewhere.
    performance_cores: int | None
    efficiency_cores: int | None


class MemoryFacts(TypedDict):
    """Memory in bytes: the machine's, the tightest cgroup limit, and what is left under both."""

    total: int
    available: int
    cgroup_limit: int | None
    cgroup_usage: int | None
    effective_available: int
    #: Windows: physical memory plus the paging file, and what of it is not committed yet; None elsewhere.
    commit_limit: int | None
    commit_available: int | None


class NofileLimit(TypedDict):
    """RLIMIT_NOFILE; a limit is None when unlimited (or unknown, on Windows)."""

    soft: int | None
    hard: int | None
    soft_unlimited: bool
    hard_unlimited: bool


class LimitsFacts(TypedDict):
    nofile: NofileLimit


class ShmFacts(TypedDict):
    """statvfs of /dev/shm, in bytes."""

    path: str
    total: int
    free: int


class ContainerFacts(TypedDict):
    in_container: bool
    kind: str | None
    evidence: list[str]


class SystemFacts(TypedDict):
    """The `system` facts section (what `gather_system` returns; the report's facts.system)."""

    hostname: str
    os: str
    kernel: str
    python: str
    cpu: CpuFacts
    memory: MemoryFacts
    limits: LimitsFacts
    shm: ShmFacts | None
    container: ContainerFacts
    #: The relevant environment variables, secrets redacted (envdoctor.redact).
    environ: dict[str, str]
    #: Facts that cannot exist on this platform ("nofile", "shm", "cgroups"), each with the reason.
    not_applicable: dict[str, str]
    #: systemd-logind's RemoveIPC as it applies to this user (Linux; None elsewhere). See facts.session.
    logind: LogindFacts | None
    wsl: WslFacts


SHM_PATH = "/dev/shm"
#: Why a fact does not apply, by platform (sys.platform prefix) and fact.
NOT_APPLICABLE: dict[str, dict[str, str]] = {
    "win32": {
        "nofile": "Windows has no open-file rlimit (RLIMIT_NOFILE): handles are not capped by a soft limit",
        "shm": "Windows has no /dev/shm: torch shares tensors through file mappings backed by the paging "
               "file (see the commit limit)",
        "cgroups": "cgroups exist on Linux only",
    },
    "darwin": {
        "shm": "macOS has no /dev/shm file system to fill: POSIX shared memory is not size-limited by a mount",
        "cgroups": "cgroups exist on Linux only",
    },
    "other": {"cgroups": "cgroups exist on Linux only"},
}


def not_applicable_here(platform: str | None = None) -> dict[str, str]:
    """The facts that cannot exist on `platform` (sys.platform by default), with the reason."""
    platform = platform or sys.platform
    if platform.startswith("linux"):
        return {}
    return dict(NOT_APPLICABLE.get(platform, NOT_APPLICABLE["other"]))


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; cgroup v2 is under the key ''."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            paths[""] = path
        for controller in controllers.split(","):
            if controller:
                paths[controller] = path
    return paths


def _candidates(root: Path, path: str) -> list[Path]:
    """The cgroup folder for `path` and its ancestors up to the mount root."""
    rel = Path(path.lstrip("/"))
    folders = [root / rel]
    folders += [root / parent for parent in rel.parents]
    return list(dict.fromkeys(f for f in folders))


def _v1_mount(cgroup_root: Path, controller: str) -> Path | None:
    for name in (controller, f"{controller},cpuacct", f"cpuacct,{controller}"):
        path = cgroup_root / name
        if path.is_dir():
            return path
    return None


def _integer(text: str | None) -> int | None:
    """A kernel file's integer ("-1" included), or None when it is missing or not a number."""
    try:
        return int(text) if text else None
    except ValueError:
        return None


def read_cpu_quota(proc_cgroup: Path = Path("/proc/self/cgroup"),
                   cgroup_root: Path = Path("/sys/fs/cgroup")) -> dict[str, Any]:
    """The tightest CPU quota on this process's cgroup and its ancestors, in CPUs."""
    paths = parse_proc_cgroup(read_kernel_file(proc_cgroup) or "")
    quotas: list[float] = []
    version = None
    if "" in paths and (cgroup_root / "cgroup.controllers").exists():
        version = 2
        for folder in _candidates(cgroup_root, paths[""]):
            text = read_kernel_file(folder / "cpu.max")
            if text:
                quota, _, period = text.partition(" ")
                if quota.isdigit() and period.isdigit() and int(period) > 0:
                    quotas.append(int(quota) / int(period))
    elif "cpu" in paths:
        mount = _v1_mount(cgroup_root, "cpu")
        if mount is not None:
            version = 1
            for folder in _candidates(mount, paths["cpu"]):
                quota_text = _integer(read_kernel_file(folder / "cpu.cfs_quota_us"))
                period_text = _integer(read_kernel_file(folder / "cpu.cfs_period_us"))
                if quota_text and period_text and quota_text > 0 and period_text > 0:
                    quotas.append(quota_text / period_text)
    return {"cgroup_version": version, "quota_cpus": min(quotas) if quotas else None}


def read_memory_limit(proc_cgroup: Path = Path("/proc/self/cgroup"),
                      cgroup_root: Path = Path("/sys/fs/cgroup")) -> dict[str, Any]:
    """The tightest cgroup memory limit and that cgroup's reclaim-adjusted usage, in bytes."""
    paths = parse_proc_cgroup(read_kernel_file(proc_cgroup) or "")
    best: tuple[int, int | None] | None = None

    def consider(limit: int, usage: int | None) -> None:
        nonlocal best
        if best is None or limit < best[0]:
            best = (limit, usage)

    if "" in paths and (cgroup_root / "cgroup.controllers").exists():
        for folder in _candidates(cgroup_root, paths[""]):
            limit = _integer(read_kernel_file(folder / "memory.max"))  # "max" is no limit
            if limit is not None:
                consider(limit, _usage(folder, "memory.current", "inactive_file"))
    elif "memory" in paths:
        mount = _v1_mount(cgroup_root, "memory")
        if mount is not None:
            for folder in _candidates(mount, paths["memory"]):
                limit = _integer(read_kernel_file(folder / "memory.limit_in_bytes"))
                # v1 reports "no limit" as a huge page-aligned number.
                if limit is not None and limit < 2**60:
                    consider(limit, _usage(folder, "memory.usage_in_bytes", "total_inactive_file"))
    if best is None:
        return {"cgroup_limit": None, "cgroup_usage": None}
    return {"cgroup_limit": best[0], "cgroup_usage": best[1]}


def _usage(folder: Path, usage_file: str, inactive_key: str) -> int | None:
    usage = _integer(read_kernel_file(folder / usage_file))
    if usage is None:
        return None
    for line in (read_kernel_file(folder / "memory.stat") or "").splitlines():
        key, _, value = line.partition(" ")
        if key == inactive_key and value.strip().isdigit():
            usage -= min(usage, int(value))
    return usage


def usable_cpus(cpu_count: int | None, affinity: int | None, quota_cpus: float | None) -> int:
    """CPUs a worker pool can really use: affinity, then the cgroup quota, at least 1."""
    usable = affinity or cpu_count or 1
    if quota_cpus:
        usable = min(usable, max(1, math.floor(quota_cpus)))
    return max(1, usable)


def worker_cpus(cpu: CpuFacts | dict[str, Any]) -> int:
    """CPUs worth one DataLoader worker each: the usable CPUs, on Apple silicon only its performance cores.

    An efficiency core is several times slower than a performance core, and the
    training step waits for the slowest worker's batch: workers beyond the
    performance cores add little but contention.
    """
    usable = int(cpu.get("usable") or 1)
    performance = cpu.get("performance_cores")
    if performance and cpu.get("efficiency_cores"):
        return max(1, min(usable, int(performance)))
    return usable


def read_shm(path: str = SHM_PATH) -> ShmFacts | None:
    if sys.platform == "win32":
        return None
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return {"path": path, "total": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize}


def detect_container(root: Path = Path("/"), environ: dict[str, str] | None = None) -> ContainerFacts:
    environ = dict(os.environ) if environ is None else environ
    evidence: list[str] = []
    kind: str | None = None
    if (root / ".dockerenv").exists():
        kind, evidence = "docker", evidence + ["/.dockerenv exists"]
    if (root / "run/.containerenv").exists():
        kind, evidence = "podman", evidence + ["/run/.containerenv exists"]
    if environ.get("KUBERNETES_SERVICE_HOST"):
        kind, evidence = "kubernetes", evidence + ["KUBERNETES_SERVICE_HOST is set"]
    init_cgroup = read_kernel_file(root / "proc/1/cgroup") or ""
    for marker, name in (("kubepods", "kubernetes"), ("docker", "docker"), ("lxc", "lxc"), ("containerd", "containerd")):
        if marker in init_cgroup:
            kind = kind or name
            evidence.append(f"/proc/1/cgroup mentions {marker}")
            break
    if environ.get("container"):
        kind = kind or environ["container"]
        evidence.append(f"container={environ['container']}")
    return {"in_container": bool(evidence), "kind": kind, "evidence": evidence}


def read_nofile() -> NofileLimit:
    if sys.platform == "win32":
        return {"soft": None, "hard": None, "soft_unlimited": False, "hard_unlimited": False}
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    return {"soft": None if soft == unlimited else soft, "hard": None if hard == unlimited else hard,
            "soft_unlimited": soft == unlimited, "hard_unlimited": hard == unlimited}


def read_affinity() -> int | None:
    """CPUs this process may run on: sched_getaffinity on Linux, psutil on Windows; macOS has no affinity."""
    if sys.platform.startswith("linux"):
        return len(os.sched_getaffinity(0))
    if sys.platform == "win32":
        import psutil

        try:
            return len(psutil.Process().cpu_affinity() or []) or None
        except (psutil.Error, AttributeError):
            return None
    return None


def read_own_logind() -> LogindFacts | None:
    """logind's RemoveIPC for the user this process runs as; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    import pwd

    uid = os.getuid()
    try:
        user: str | None = pwd.getpwuid(uid).pw_name
    except KeyError:  # a UID with no passwd entry (containers started with --user N)
        user = None
    return read_logind(uid=uid, user=user)


def gather_system(facts: FactsReader) -> SystemFacts:
    import psutil

    from envdoctor.facts.macos import read_core_counts
    from envdoctor.facts.windows import read_cim

    cpu_count = os.cpu_count()
    affinity = read_affinity()
    linux = sys.platform.startswith("linux")
    quota = read_cpu_quota() if linux else {"cgroup_version": None, "quota_cpus": None}
    memory = psutil.virtual_memory()
    limit = read_memory_limit() if linux else {"cgroup_limit": None, "cgroup_usage": None}
    performance, efficiency = read_core_counts()
    windows = read_cim()
    available = memory.available
    if limit["cgroup_limit"] is not None:
        used = limit["cgroup_usage"] or 0
        available = min(available, max(0, limit["cgroup_limit"] - used))
    return {
        "hostname": socket.gethostname(),
        "os": platform.system(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "cpu": {
            "count": cpu_count,
            "affinity": affinity,
            "cgroup_version": quota["cgroup_version"],
            "quota_cpus": quota["quota_cpus"],
            "usable": usable_cpus(cpu_count, affinity, quota["quota_cpus"]),
            "performance_cores": performance,
            "efficiency_cores": efficiency,
        },
        "memory": {
            "total": memory.total,
            "available": memory.available,
            "cgroup_limit": limit["cgroup_limit"],
            "cgroup_usage": limit["cgroup_usage"],
            "effective_available": available,
            "commit_limit": windows["commit_limit"] if windows else None,
            "commit_available": windows["commit_available"] if windows else None,
        },
        "limits": {"nofile": read_nofile()},
        "shm": read_shm(),
        "container": detect_container() if linux else {"in_container": False, "kind": None, "evidence": []},
        "environ": redact_environ(os.environ),
        "not_applicable": not_applicable_here(),
        "logind": read_own_logind(),
        "wsl": read_wsl(platform.release(), os.environ),
    }

"""One node's comparable facts, read out of one envdoctor JSON report.

`compare` reads reports from files and `--distributed` receives them from
every rank; both turn each report into the same small *node record* here,
and the FLT rules and the side-by-side view work on those records only.

Reports are read by key and defensively: a section a report lacks (an older
envdoctor, a probe that failed, a machine without a GPU probe) leaves the
value out of the record, and out of the comparison, rather than failing.

The package facts are read in this minimal shape::

    facts.packages.distributions: [{"name": "numpy", "version": "1.26.4", ...}, ...]
    facts.packages.conda:         {"present": true, "records": [{"name": "numpy", "version": "1.26.4",
                                   "channel": "conda-forge", ...}, ...]}   (a bare list is read too)

and the torch, gpu and storage facts by the keys their probes write
(torch.version, torch.cuda_build, torch.nvidia_wheels, gpu.driver_version,
storage.read_probe.sequential.mib_per_s …), with a few fallbacks.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict

#: The report sections the comparison reads, in the order "not compared" notes list them.
SECTIONS = ("system", "packages", "torch", "gpu", "storage", "loader")

#: How a limit that is not set at all is written in a node record.
UNLIMITED = "unlimited"
#: Sizes that wobble a little between identical machines (memory the kernel
#: reserves, /dev/shm as half of RAM) differ only beyond this fraction.
SIZE_TOLERANCE = 0.10
#: Why `compare` skips a report that already compares nodes (an `unreadable` entry's reason).
FLEET_REPORT_REASON = "a fleet report (from compare or --distributed), not one node's report"
#: How a node without torch is written in its record.
NOT_INSTALLED = "not installed"


@dataclass(frozen=True)
class Field:
    """One comparable value: its key in a node record, label, group and reader."""

    key: str
    label: str
    group: str  # "core", "version", "limit", "throughput"
    #: The report sections it is read from; the value is compared only where one is present.
    sections: tuple[str, ...]
    #: Reads the value out of one report; node_record keeps it only when it is a text or a number.
    read: Callable[[Mapping[str, object]], object]
    kind: str = "version"  # "version", "count", "bytes", "rate" (samples/s), "bytes-rate" (bytes/s)


def _dig(tree: object, *path: str) -> object:
    for part in path:
        if not isinstance(tree, Mapping):
            return None
        tree = tree.get(part)
    return tree


def _first(tree: object, *keys: str) -> object:
    """The first of several candidate keys that holds a plain value (not a nested table)."""
    if not isinstance(tree, Mapping):
        return None
    for key in keys:
        value = tree.get(key)
        if value not in (None, "") and not isinstance(value, Mapping):
            return value
    return None


def _version_text(value: object) -> str | None:
    """Versions as text: NCCL reports a tuple (2, 21, 5), some probes an int."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return ".".join(str(v) for v in value)
    return str(value)


def _facts(report: Mapping[str, object]) -> Mapping[str, object]:
    facts = report.get("facts")
    return facts if isinstance(facts, Mapping) else {}


def _section(report: Mapping[str, object], name: str) -> Mapping[str, object] | None:
    value = _facts(report).get(name)
    return value if isinstance(value, Mapping) else None


def _torch(report: Mapping[str, object], *keys: str) -> object:
    torch = _section(report, "torch")
    if torch is None:
        return None
    return _version_text(_first(torch, *keys))


def _nvidia_wheel(report: Mapping[str, object], prefix: str) -> str | None:
    """The version of an nvidia-* wheel beside torch (nvidia-nccl-cu12, nvidia-cudnn-cu12 …)."""
    wheels = _dig(_section(report, "torch"), "nvidia_wheels")
    if not isinstance(wheels, Mapping):
        return None
    return next((str(v) for k, v in sorted(wheels.items()) if str(k).startswith(prefix)), None)


def _read_nccl(report: Mapping[str, object]) -> object:
    return _torch(report, "nccl", "nccl_version") or _nvidia_wheel(report, "nvidia-nccl")


def _read_cudnn(report: Mapping[str, object]) -> object:
    # The wheel's version first: the probe's integer (90100) is only there when
    # torch was imported, and mixing the two forms would look like drift.
    return (_torch(report, "cudnn_wheel") or _nvidia_wheel(report, "nvidia-cudnn")
            or _torch(report, "cudnn", "cudnn_version"))


def _package_version(report: Mapping[str, object], name: str) -> str | None:
    return (read_distributions(report) or {}).get(name)


def _read_python(report: Mapping[str, object]) -> object:
    target = report.get("target")
    return _first(target, "python") or _dig(_facts(report), "system", "python")


def _read_torch(report: Mapping[str, object]) -> object:
    if _dig(_section(report, "torch"), "installed") is False:
        return NOT_INSTALLED
    return _torch(report, "version", "torch_version") or _package_version(report, "torch")


def _read_cuda_build(report: Mapping[str, object]) -> object:
    torch = _section(report, "torch")
    if torch is None or torch.get("installed") is False:
        return None
    built = _torch(report, "cuda_build", "cuda_version", "version_cuda") \
        or _version_text(_dig(torch, "cuda", "built"))
    if built is None and torch.get("installed") and torch.get("version"):
        return "cpu"  # a CPU-only build beside CUDA builds is drift worth naming
    return built


def _read_numpy(report: Mapping[str, object]) -> object:
    return _package_version(report, "numpy") or _torch(report, "numpy_version", "numpy")


def _read_gpu(report: Mapping[str, object], *keys: str) -> object:
    gpu = _section(report, "gpu")
    if gpu is None:
        return None
    value = _first(gpu, *keys)
    if value is None:  # some probes keep the driver under "nvml" or per device
        value = _first(gpu.get("nvml"), *keys)
    devices = gpu.get("devices")
    if value is None and isinstance(devices, list) and devices:
        value = _first(devices[0], *keys)
    # A machine without an NVIDIA driver is a fact worth comparing: "none".
    return _version_text(value) if value is not None else "none"


def _read_loader(report: Mapping[str, object]) -> float | None:
    """The best steady-state samples/s the node's loader stage measured."""
    loader = report.get("loader")
    runs = loader.get("runs") if isinstance(loader, Mapping) else None
    measured = [r.get("samples_per_s") for r in runs or [] if isinstance(r, Mapping)]
    rates = [float(r) for r in measured if isinstance(r, (int, float))]
    return max(rates) if rates else None


_RATE_UNITS = {"bytes_per_s": 1.0, "mb_per_s": 1e6, "mib_per_s": 2.0**20, "mbps": 1e6,
               "gb_per_s": 1e9, "gib_per_s": 2.0**30}


def _rate_in(tree: object) -> float | None:
    if not isinstance(tree, Mapping):
        return None
    for key, value in tree.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        for suffix, scale in _RATE_UNITS.items():
            if str(key).endswith(suffix) and "write" not in str(key):
                return float(value) * scale
    return None


def _read_disk(report: Mapping[str, object]) -> float | None:
    """The data path's measured read throughput, in bytes per second."""
    storage = _section(report, "storage")
    if storage is None:
        return None
    probe = storage.get("read_probe")
    # Sequential reads first: that is what a loader streaming files sees.
    for candidate in (_dig(probe, "sequential"), probe, _dig(probe, "random"), storage,
                      storage.get("read"), storage.get("throughput")):
        rate = _rate_in(candidate)
        if rate is not None:
            return rate
    paths = storage.get("paths")
    for item in paths if isinstance(paths, list) else []:  # one entry per data path: take the first measured
        rate = _rate_in(item) or _rate_in(_dig(item, "read_probe"))
        if rate is not None:
            return rate
    return None


def _read_system(report: Mapping[str, object], *path: str) -> object:
    return _dig(_facts(report), "system", *path)


def _read_nofile(report: Mapping[str, object]) -> object:
    nofile = _read_system(report, "limits", "nofile")
    if not isinstance(nofile, Mapping):
        return None
    if nofile.get("soft") is None:
        return UNLIMITED if nofile.get("soft_unlimited") else None
    return nofile["soft"]


def _read_memory_limit(report: Mapping[str, object]) -> object:
    memory = _read_system(report, "memory")
    if not isinstance(memory, Mapping):
        return None
    return memory.get("cgroup_limit") or UNLIMITED


FIELDS: tuple[Field, ...] = (
    # Drift here breaks collectives or kernels outright: FLT001, error.
    Field("torch", "torch", "core", ("torch", "packages"), _read_torch),
    Field("cuda_build", "CUDA (torch build)", "core", ("torch",), _read_cuda_build),
    Field("nccl", "NCCL", "core", ("torch",), _read_nccl),
    Field("driver", "NVIDIA driver", "core", ("gpu",), lambda r: _read_gpu(r, "driver_version", "driver")),
    Field("cuda_driver", "CUDA (driver)", "core", ("gpu",),
          lambda r: _read_gpu(r, "cuda_driver_version", "cuda_driver")),
    # Drift here is a warning: FLT002.
    Field("python", "Python", "version", ("target",), _read_python),
    Field("cudnn", "cuDNN", "version", ("torch",), _read_cudnn),
    Field("numpy", "numpy", "version", ("packages", "torch"), _read_numpy),
    # Limits of the machine: FLT005.
    Field("nofile", "open files (soft)", "limit", ("system",), lambda r: _read_nofile(r), "count"),
    Field("shm_total", "/dev/shm size", "limit", ("system",), lambda r: _read_system(r, "shm", "total"), "bytes"),
    Field("usable_cpus", "usable CPUs", "limit", ("system",), lambda r: _read_system(r, "cpu", "usable"), "count"),
    Field("memory_total", "memory", "limit", ("system",), lambda r: _read_system(r, "memory", "total"), "bytes"),
    Field("memory_limit", "cgroup memory limit", "limit", ("system",), lambda r: _read_memory_limit(r), "bytes"),
    # Measured speeds: FLT006 stragglers.
    Field("loader_samples_per_s", "loader samples/s", "throughput", ("loader",), _read_loader, "rate"),
    Field("disk_read_bytes_per_s", "disk read", "throughput", ("storage",), _read_disk, "bytes-rate"),
)

def show_value(value: object, kind: str = "version") -> str:
    """A node's value as people read it: sizes in GiB, speeds per second, absent as "absent"."""
    from envdoctor.units import human_bytes

    if value is None:
        return "absent"
    if value == UNLIMITED or not isinstance(value, (int, float, str)):
        return str(value)
    if kind == "bytes":
        return human_bytes(float(value))
    if kind == "bytes-rate":
        return f"{human_bytes(float(value))}/s"
    if kind == "rate":
        return f"{float(value):.1f}"
    return str(value)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def read_distributions(report: Mapping[str, object]) -> dict[str, str] | None:
    """{normalized name: version} of the Python distributions, or None when not gathered."""
    packages = _section(report, "packages")
    if packages is None:
        return None
    entries = packages.get("distributions")
    if not isinstance(entries, list):
        return None
    copies: dict[str, list[Mapping[str, object]]] = {}
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("name"):
            copies.setdefault(_canonical(entry["name"]), []).append(entry)
    return {name: str(_loaded_copy(group).get("version")) for name, group in copies.items()}


def _loaded_copy(group: list[Mapping[str, object]]) -> Mapping[str, object]:
    """Of the copies of one distribution, the one `import` loads.

    Copies in one folder (`pip install --ignore-installed`): the one whose RECORD matches the files
    on disk (`files_on_disk`, gathered for doubled copies); in several folders: the first on the
    import path (`order`, else the listing's order).
    """
    if len(group) == 1:
        return group[0]

    def share(entry: Mapping[str, object]) -> float:
        files = entry.get("files_on_disk")
        if not isinstance(files, Mapping) or not isinstance(files.get("listed"), int) or not files["listed"]:
            return -1.0
        return float(files.get("matching") or 0) / files["listed"]

    def order(entry: Mapping[str, object]) -> float:
        value = entry.get("order")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("inf")

    first_dir = min(group, key=order).get("site_dir")
    same_folder = [e for e in group if e.get("site_dir") == first_dir]
    if len(same_folder) > 1:
        return max(same_folder, key=lambda e: (share(e), -order(e)))
    return min(group, key=order)


def channel_name(channel: object) -> str | None:
    """A conda channel as people name it: conda-forge, pkgs/main, pytorch …"""
    if not channel:
        return None
    text = str(channel).strip().rstrip("/")
    text = re.sub(r"^[a-z]+://", "", text)
    for host in ("conda.anaconda.org/", "repo.anaconda.com/", "anaconda.org/"):
        if text.startswith(host):
            text = text[len(host):]
    text = re.sub(r"/(noarch|linux-64|linux-aarch64|osx-64|osx-arm64|win-64)$", "", text)
    return text or None


def read_conda(report: Mapping[str, object]) -> dict[str, CondaEntry] | None:
    """{name: {"version", "channel"}} of the conda records, or None when not gathered."""
    packages = _section(report, "packages")
    if packages is None:
        return None
    entries = packages.get("conda")
    if isinstance(entries, Mapping):  # {"present": bool, "records": [...]}
        if entries.get("present") is False:
            return None
        entries = entries.get("records")
    if not isinstance(entries, list):
        return None
    found: dict[str, CondaEntry] = {}
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("name"):
            found.setdefault(str(entry["name"]).lower(), {
                "version": _text_or_none(entry.get("version")),
                "channel": channel_name(entry.get("channel") or entry.get("url")),
            })
    return found


def _has_section(report: Mapping[str, object], name: str) -> bool:
    if name == "loader":
        return isinstance(report.get("loader"), Mapping)
    if name == "target":
        return isinstance(report.get("target"), Mapping)
    return _section(report, name) is not None


#: Environment variables that steer a training job and should be the same on every node (FLT005):
#: thread counts, NCCL and gloo settings, the visible GPUs, torch's own switches. Values are read
#: from the report's (already redacted) system.environ.
COMPARED_ENV_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "NCCL_", "GLOO_", "PYTORCH_", "TORCH_",
                         "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_ORDER", "CUBLAS_",
                         "CUDNN_")
#: Of those, the ones that legitimately differ per node or per run.
_PER_NODE_ENV = ("TORCHELASTIC_", "TORCH_NCCL_ASYNC_ERROR_HANDLING_RANK")


def read_environ(report: Mapping[str, object]) -> dict[str, str] | None:
    """{name: value} of the compared environment variables, or None when the report has no environ."""
    environ = _read_system(report, "environ")
    if not isinstance(environ, Mapping):
        return None
    return {str(k): str(v) for k, v in environ.items()
            if str(k).startswith(COMPARED_ENV_PREFIXES) and not str(k).startswith(_PER_NODE_ENV)}


#: One node's value of a compared field (see FIELDS): a version text, a count, a size or a rate, or UNLIMITED.
FleetValue = str | int | float


class CondaEntry(TypedDict):
    version: str | None
    channel: str | None


class _NodeRequired(TypedDict):
    node: str
    hostname: str | None
    source: str
    generated_at: str | None
    envdoctor: str | None
    #: Field key (see FIELDS) -> the node's value: a version text, a count, a size or rate, or UNLIMITED.
    values: dict[str, FleetValue]
    #: {normalized distribution name: version}, None when the report lists no packages.
    packages: dict[str, str] | None
    conda: dict[str, CondaEntry] | None
    missing_sections: list[str]
    #: The node's own finding counts by severity.
    findings: dict[str, int]


class NodeRecord(_NodeRequired, total=False):
    """One node of a fleet: what `compare` and the FLT rules line up (the fleet facts' `nodes`)."""

    #: The compared environment variables (see COMPARED_ENV_PREFIXES); absent when the report has none.
    environ: dict[str, str]
    #: The scheduler's node name (SLURMD_NODENAME) when the report was made inside a Slurm job.
    scheduler_node: str
    #: --distributed only: where the rank ran, and whether it ran the loader stage (local rank 0).
    rank: int
    local_rank: int
    node_rank: int
    loader_stage: bool


def node_record(label: str, report: Mapping[str, object], source: str, *, rank: int | None = None,
                local_rank: int | None = None, node_rank: int | None = None,
                loader_stage: bool | None = None) -> NodeRecord:
    """The comparable facts of one report, under the node's label."""
    values: dict[str, FleetValue] = {}
    for fld in FIELDS:
        if not any(_has_section(report, name) for name in fld.sections):
            continue
        try:
            value = fld.read(report)
        except (TypeError, ValueError, AttributeError, IndexError):
            value = None
        if isinstance(value, (str, int, float)):  # a version text, a count, a size or a rate; nothing nested
            values[fld.key] = value
    given = report.get("summary")
    summary: Mapping[str, object] = given if isinstance(given, Mapping) else {}
    record: NodeRecord = {
        "node": label,
        "hostname": _text_or_none(_dig(report, "host", "hostname")),
        "source": source,
        "generated_at": _text_or_none(report.get("generated_at")),
        "envdoctor": _text_or_none(_dig(report, "tool", "version")),
        "values": values,
        "packages": read_distributions(report),
        "conda": read_conda(report),
        "missing_sections": [name for name in SECTIONS if not _has_section(report, name)],
        "findings": {k: _count(summary.get(k)) for k in ("error", "warning", "info")},
    }
    environ = read_environ(report)
    if environ is not None:
        record["environ"] = environ
    scheduler = _dig(report, "host", "scheduler", "node")
    if scheduler:
        record["scheduler_node"] = str(scheduler)
    if rank is not None and local_rank is not None and node_rank is not None and loader_stage is not None:
        record["rank"], record["local_rank"], record["node_rank"] = rank, local_rank, node_rank
        record["loader_stage"] = loader_stage
    return record


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class NotCompared(TypedDict):
    """A field that could not be compared on every node, and why."""

    key: str
    label: str
    missing_on: list[str]
    reason: str


class _ExpectedRequired(TypedDict):
    #: Where the expectation came from (--nodes, --expect, SLURM_JOB_NODELIST); None when nothing was expected.
    source: str | None
    nodes: list[str]
    count: int | None


class ExpectedNodes(_ExpectedRequired, total=False):
    """compare: the nodes expected, and (once matched against the reports) the ones missing."""

    missing: list[str]
    reported: int


class FailedRank(TypedDict, total=False):
    """--distributed: a rank that failed, timed out or was stopped before it reported."""

    rank: int
    hostname: str | None
    status: str  # "failed", "timed-out", "stopped"
    reason: str | None
    waited_s: float


class Collective(TypedDict, total=False):
    """--distributed: the gloo all_reduce across every rank."""

    backend: str
    world_size: int
    environ: dict[str, str]
    ok: bool
    error: str | None
    seconds: float


#: health --expect: node-record keys -> the agreed value (sizes in bytes, counts, versions as text), and
#: "environ" -> {name: value}.
ExpectedValues = dict[str, FleetValue | dict[str, str]]


class FleetFacts(TypedDict, total=False):
    """The `fleet` facts section of a fleet report (compare or --distributed)."""

    #: "compare" (saved reports) or "distributed" (torch.distributed ranks).
    mode: str
    #: One record per node (see node_record).
    nodes: list[NodeRecord]
    #: compare: the files that could not be used, with the reason ({source, reason}).
    unreadable: list[dict[str, str]]
    #: The fields that could not be compared on every node, and why.
    not_compared: list[NotCompared]
    #: --distributed: the world size, ranks that failed or timed out, the gloo check, rank 0's wait.
    world_size: int
    failed: list[FailedRank]
    collective: Collective | None
    timeout_s: float
    #: compare: the nodes expected ({source, nodes, count, missing, reported}; source None when none were).
    expected: ExpectedNodes
    #: health --expect: the fleet's agreed values this node is checked against (node-record keys, environ).
    expected_values: ExpectedValues


def nodes_of(fleet: FleetFacts) -> list[NodeRecord]:
    """The fleet's node records (anything else in the list is left out)."""
    return [n for n in fleet.get("nodes") or [] if isinstance(n, Mapping)]

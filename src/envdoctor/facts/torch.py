"""Torch facts: the build read from files, and the import probe when it is worth its cost.

Importing torch takes seconds, longer than every other static check together,
and envdoctor itself never imports it. So this section has two layers:

* always, from files in the target environment, no import: the version, the
  CUDA/ROCm build and the git revision from `torch/version.py` (read with
  `ast`, not executed), the distribution's metadata and installer, and the
  versions of the nvidia-* wheels (cuDNN, the CUDA runtime) beside it;
* when a GPU is present (NVML or PCI), when the loader stage runs, or with
  `--deep`: the probe (inside/torch_probe.py) run by the target's own
  interpreter in a bounded subprocess. When the loader stage ran it already
  imported the probe in its own subprocess, and that result is reused.

A probe that fails, hangs or warns is recorded here (`import_error`,
`timed_out`, `import_warnings`) for the rules to judge.
"""
from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from envdoctor.process import quiet_python_env, run_bounded

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import FactsReader


class ProbeWarning(TypedDict):
    category: str
    message: str
    filename: str


class TorchCudaDevice(TypedDict, total=False):
    """A device as torch sees it (CUDA_VISIBLE_DEVICES applied); `error` when torch could not describe it."""

    index: int
    name: str
    #: "major.minor", from torch.cuda.get_device_capability().
    capability: str
    error: str


class TorchCuda(TypedDict, total=False):
    """What the import probe learnt of torch's CUDA: the build, whether it initialises, the devices."""

    built: str | None
    hip: str | None
    available: bool
    device_count: int
    devices: list[TorchCudaDevice]
    #: torch.cuda.get_arch_list() (or the compiled arch flags when CUDA does not initialise):
    #: "sm_90" is machine code for capability 9.x, "compute_90" PTX that the driver can JIT.
    arch_list: list[str] | None
    arch_list_source: str
    error: str
    init_output: str
    init_warnings: list[ProbeWarning]


class ThreadPool(TypedDict, total=False):
    """A native thread pool loaded in the target (threadpoolctl.threadpool_info() entry)."""

    user_api: str
    internal_api: str
    prefix: str
    filepath: str
    #: The library's path with symlinks resolved, observed by the probe: two names of one file are one runtime.
    realpath: str
    version: str | None
    num_threads: int
    threading_layer: str
    architecture: str


class TorchMps(TypedDict, total=False):
    """Apple's Metal backend (macOS): compiled into this torch, and usable on this machine."""

    built: bool | None
    available: bool | None
    error: str


class TorchProbe(TypedDict, total=False):
    """The import probe (inside/torch_probe.py) as envdoctor ran it, or why it did not run."""

    ran: bool
    reason: str
    source: str
    seconds: float
    timeout_s: float
    timed_out: bool
    error: str
    returncode: int | None
    stderr_tail: str
    stdout_tail: str
    #: Keys of the probe's self-report that had the wrong type and were dropped.
    invalid_fields: list[str]
    probe_version: int
    python: str
    executable: str
    pid: int
    environ: dict[str, str]
    torch_preimported: bool
    numpy_version: str | None
    numpy_file: str | None
    numpy_import_error: str
    numpy_import_traceback: str
    numpy_import_seconds: float
    numpy_import_output: str
    numpy_import_warnings: list[ProbeWarning]
    torch_import_error: str
    torch_import_traceback: str
    torch_import_seconds: float
    torch_import_output: str
    torch_import_warnings: list[ProbeWarning]
    import_error: str | None
    import_warnings: list[str]
    import_output: str
    describe_error: str
    version: str | None
    file: str | None
    git_version: str | None
    debug: bool | None
    cudnn: int | None
    cudnn_error: str
    cuda: TorchCuda
    mps: TorchMps
    sharing_strategy: str | None
    sharing_strategies: list[str]
    sharing_strategy_error: str
    intra_op_threads: int
    inter_op_threads: int
    threads_error: str
    parallel_info: str | None
    start_method: str | None
    start_method_set: bool
    start_method_error: str
    threadpools: list[ThreadPool] | None
    threadpools_error: str
    threadpoolctl_source: str | None


class _TorchRequired(TypedDict):
    installed: bool
    probe: TorchProbe
    #: From the probe; None when it did not run (SYS001/SYS004 then assume torch's Linux default).
    sharing_strategy: str | None


class TorchFacts(_TorchRequired, total=False):
    """The `torch` facts section (what `gather_torch` returns; the report's facts.torch).

    File facts (no import) always; the probe's keys rules read are copied to the top
    level when it ran.
    """

    searched: list[str]
    location: str
    #: torch/version.py could not be read or held values of odd types (they are None here).
    version_module_error: str
    version: str | None
    cuda_build: str | None
    hip_build: str | None
    rocm_build: str | None
    git_version: str | None
    debug: bool | None
    dist_version: str | None
    installer: str | None
    requires_nvidia: list[str]
    nvidia_wheels: dict[str, str]
    cudnn_wheel: str | None
    build: Literal["cuda", "rocm", "cpu"]
    start_method: str | None
    intra_op_threads: int
    threadpools: list[ThreadPool] | None
    cudnn: int | None
    import_error: str | None
    import_warnings: list[str]
    timed_out: bool
    cuda: TorchCuda
    mps: TorchMps
    numpy_version: str | None


#: How long `import torch` and the probe may take in the target (cold caches, network file systems).
PROBE_TIMEOUT_S = 60.0
#: Overrides PROBE_TIMEOUT_S (seconds), e.g. for a cluster node with a slow shared file system.
PROBE_TIMEOUT_ENV = "ENVDOCTOR_TORCH_PROBE_TIMEOUT"
PROBE_SCRIPT = Path(__file__).resolve().parent.parent / "inside" / "torch_probe.py"
THREADPOOLCTL_ENV = "ENVDOCTOR_THREADPOOLCTL_PATH"

_VERSION_FIELDS = ("__version__", "cuda", "hip", "rocm", "xpu", "git_version", "debug")
#: torch/version.py is a few hundred bytes; anything past this is not torch's.
VERSION_MODULE_MAX_BYTES = 64 * 1024


def read_version_module(path: Path) -> dict[str, Any]:
    """The literal assignments of torch/version.py, without executing it.

    Read bounded (a regular file of at most VERSION_MODULE_MAX_BYTES); raises
    OSError, SyntaxError or ValueError for a file that is not one.
    """
    from envdoctor.facts.readfile import read_bytes

    text = read_bytes(str(path), VERSION_MODULE_MAX_BYTES).decode("utf-8", errors="replace")
    try:
        tree = ast.parse(text)
    except (RecursionError, MemoryError) as exc:  # deeply nested expressions
        raise ValueError(f"too deeply nested to parse ({type(exc).__name__})") from None
    values: dict[str, Any] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and target.id in _VERSION_FIELDS:
                try:
                    values[target.id] = ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                    values[target.id] = None  # not a literal (an f-string, a call): unknown
    return values


def _typed_version_values(values: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Keep the values of the types torch writes (str or None; debug a bool); name the others."""
    typed: dict[str, Any] = {}
    odd: list[str] = []
    for name, value in values.items():
        wanted: tuple[type, ...] = (bool,) if name == "debug" else (str,)
        if value is None or isinstance(value, wanted):
            typed[name] = value
        else:
            typed[name] = None
            odd.append(f"{name} = {type(value).__name__}")
    return typed, odd


def _site_dirs(target: dict[str, Any]) -> list[Path]:
    """Where the target imports from: its site-packages first, then the rest of sys.path."""
    dirs: list[str] = []
    dirs += target.get("site_packages") or []
    if target.get("purelib"):
        dirs.append(target["purelib"])
    dirs += target.get("sys_path") or []
    seen: dict[str, None] = {}
    for d in dirs:
        if d and os.path.isdir(d):
            seen.setdefault(os.path.realpath(d), None)
    return [Path(d) for d in seen]


def _metadata(dist_info: Path) -> dict[str, Any]:
    from envdoctor.facts.readfile import read_bytes

    text = ""
    try:
        # Never a plain open(): a FIFO named METADATA would block the whole run.
        text = read_bytes(str(dist_info / "METADATA")).decode("utf-8", errors="replace")
    except OSError:
        pass
    fields: dict[str, Any] = {"requires": []}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(": ")
        if key == "Version":
            fields["version"] = value.strip()
        elif key == "Requires-Dist":
            fields["requires"].append(value.strip())
    try:
        fields["installer"] = read_bytes(str(dist_info / "INSTALLER")).decode("utf-8", errors="replace").strip() or None
    except OSError:
        fields["installer"] = None
    return fields


def _dist_infos(site: Path, name: str) -> list[Path]:
    pattern = re.compile(rf"^{re.escape(name)}-[^-]+\.(dist|egg)-info$", re.IGNORECASE)
    try:
        return sorted(p for p in site.iterdir() if pattern.match(p.name))
    except OSError:
        return []


def _nvidia_wheels(sites: Iterable[Path]) -> dict[str, str]:
    """Versions of the nvidia-* wheels torch's CUDA builds pull in (cudnn, cuda-runtime …)."""
    found: dict[str, str] = {}
    for site in sites:
        try:
            entries = list(site.iterdir())
        except OSError:
            continue
        for entry in entries:
            match = re.match(r"^(nvidia_[a-z0-9_]+)-([^-]+)\.dist-info$", entry.name)
            if match and not match.group(1).startswith(("nvidia_ml_py", "nvidia_pyindex")):
                found.setdefault(match.group(1).replace("_", "-"), match.group(2))
    return dict(sorted(found.items()))


def read_torch_files(target: dict[str, Any]) -> TorchFacts:
    """What the target's installed files say about torch, with no import."""
    sites = _site_dirs(target)
    for site in sites:
        version_py = site / "torch" / "version.py"
        # lexists, not is_file: a FIFO or a dangling link there is torch with a broken
        # version module (said so below), not "torch is not installed".
        if not (site / "torch").is_dir() or not os.path.lexists(version_py):
            continue
        info: TorchFacts = {"installed": True, "location": str(site / "torch"), "sharing_strategy": None,
                            "probe": {"ran": False}}
        try:
            values, odd = _typed_version_values(read_version_module(version_py))
            if odd:
                info["version_module_error"] = (f"{version_py} assigns values of unexpected types "
                                                f"({', '.join(odd)}); they are treated as unknown")
        except (OSError, SyntaxError, ValueError) as exc:
            values = {}
            info["version_module_error"] = f"{version_py} could not be read: {type(exc).__name__}: {exc}"
        info["version"] = values.get("__version__")
        info["cuda_build"] = values.get("cuda")
        info["hip_build"] = values.get("hip")
        info["rocm_build"] = values.get("rocm")
        info["git_version"] = values.get("git_version")
        info["debug"] = values.get("debug")
        dists = _dist_infos(site, "torch")
        if dists:
            meta = _metadata(dists[-1])
            info["dist_version"] = meta.get("version")
            info["installer"] = meta.get("installer")
            info["requires_nvidia"] = sorted({r.split()[0].split(";")[0] for r in meta["requires"]
                                              if r.lower().startswith("nvidia-")})
        nvidia_wheels = _nvidia_wheels(sites)
        info["nvidia_wheels"] = nvidia_wheels
        info["cudnn_wheel"] = next((v for k, v in nvidia_wheels.items() if k.startswith("nvidia-cudnn")), None)
        info["build"] = build_flavour(info)
        return info
    return {"installed": False, "searched": [str(s) for s in sites], "sharing_strategy": None, "probe": {"ran": False}}


def build_flavour(info: TorchFacts) -> Literal["cuda", "rocm", "cpu"]:
    """cuda, rocm or cpu, from the version module."""
    if info.get("cuda_build"):
        return "cuda"
    if info.get("hip_build") or info.get("rocm_build"):
        return "rocm"
    return "cpu"


def probe_timeout() -> float:
    raw = os.environ.get(PROBE_TIMEOUT_ENV)
    if raw:
        try:
            value = float(raw)
            if value > 0:
                return value
        except ValueError:
            pass
    return PROBE_TIMEOUT_S


def probe_environment() -> dict[str, str]:
    """The environment for any process that runs torch_probe (this one or the loader's).

    It carries the path of envdoctor's own threadpoolctl.py, which the probe
    loads only if the target lacks threadpoolctl, as a single file.
    """
    env = quiet_python_env()
    try:
        import importlib.util

        spec = importlib.util.find_spec("threadpoolctl")
        if spec and spec.origin:
            env[THREADPOOLCTL_ENV] = spec.origin
    except (ImportError, ValueError):
        pass
    return env


def run_torch_probe(interpreter: str, timeout: float | None = None) -> TorchProbe:
    """Run inside/torch_probe.py with the target's interpreter; failures become facts."""
    timeout = probe_timeout() if timeout is None else timeout
    run = run_bounded([interpreter, "-B", str(PROBE_SCRIPT)], timeout, env=probe_environment())
    base: TorchProbe = {"ran": True, "source": "envdoctor", "seconds": round(run.seconds, 3), "timeout_s": timeout}
    if run.timed_out:
        return {**base, "timed_out": True,
                "error": f"the torch probe did not finish within {timeout:g} s (import torch hung?)",
                "stderr_tail": run.stderr[-2000:]}
    result = _last_json(run.stdout)
    if result is None:
        return {**base, "timed_out": False, "error": f"the torch probe {run.describe_failure()}",
                "returncode": run.returncode, "stderr_tail": run.stderr[-2000:], "stdout_tail": run.stdout[-2000:]}
    return {**checked_probe(result), **base, "timed_out": False}


def checked_probe(raw: dict[str, Any]) -> TorchProbe:
    """The probe's self-report with every value of the wrong type dropped and named in `invalid_fields`.

    The report comes from the target's interpreter (or the loader's subprocess
    relaying it): an environment that prints its own JSON, or a torch whose
    attributes are odd, must not make rules crash on a `str` where a list was due.
    """
    from envdoctor.facts.shapes import conform_typeddict

    clean, problems = conform_typeddict(raw, TorchProbe)
    probe = cast(TorchProbe, clean)
    if problems:
        probe["invalid_fields"] = problems[:50]
    return probe


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
                continue
            if isinstance(value, dict):
                return value
    return None


def _probe_reason(facts: FactsReader) -> str | None:
    """Why the import probe should run, or None when files are enough."""
    from envdoctor.facts.gpu import gpu_present

    if getattr(facts.config, "deep", False):
        return "--deep"
    if not facts.config.no_loader:
        return "loader stage"
    if gpu_present(facts.get("gpu")):
        return "gpu present"
    if facts["target"].get("platform") == "osx-arm64":
        return "Apple silicon: whether MPS is usable"
    return None


def _loader_probe(facts: FactsReader) -> TorchProbe | None:
    """The probe result the loader stage gathered in its own subprocess, if it did."""
    if facts.config.no_loader:
        return None
    raw = facts.handed_over("torch").get("torch_probe")  # declared in facts.PROBES
    if isinstance(raw, dict) and raw.get("timed_out") and raw.get("stage") == "start":
        # The loader stage saw this interpreter hang at start-up (loader.started_hung): started
        # again, it would hang again, and the user's --budget would be spent twice.
        return checked_probe({k: v for k, v in raw.items() if k != "stage"})
    if not isinstance(raw, dict) or "probe_version" not in raw:
        return None  # not run, or it failed in the loader's process: run our own
    if raw.get("torch_preimported"):
        # The loader imported torch before the probe, so the import-time output
        # (the NumPy ABI message, PKG008) was missed: worth our own 2-3 s run.
        return None
    probe = checked_probe(raw)
    probe["source"] = "loader"
    return probe


def _timeout_after_loader(facts: FactsReader) -> float:
    """The probe's time limit: its own, or the user's --budget (at least 10 s) when the loader stage
    already waited that long for `import torch` — a slow import gets a second chance, not 60 s more."""
    raw = facts.handed_over("torch").get("torch_probe") if not facts.config.no_loader else None
    if isinstance(raw, dict) and raw.get("timed_out") and raw.get("stage") == "import":
        return min(probe_timeout(), max(MIN_SHARED_TIMEOUT_S, float(facts.config.budget or 0)))
    return probe_timeout()


#: The shortest limit the probe gets when it shares the budget with the loader stage.
MIN_SHARED_TIMEOUT_S = 10.0
#: The probe's keys that rules read at the top of the section (SYS001 reads sharing_strategy).
_LIFTED = ("sharing_strategy", "start_method", "intra_op_threads", "threadpools", "cudnn",
           "import_error", "import_warnings", "timed_out", "cuda", "mps", "numpy_version")


def gather_torch(facts: FactsReader) -> TorchFacts:
    """The torch section: file facts always, the import probe's facts when warranted."""
    target = facts["target"]
    section = read_torch_files(target)
    reason = _probe_reason(facts)
    if not section["installed"]:
        section["probe"] = {"ran": False, "reason": "torch is not installed in the target environment"}
        return section
    if reason is None:
        section["probe"] = {"ran": False, "reason": "no GPU, no loader stage and no --deep: files were enough"}
        return section
    probe = _loader_probe(facts)
    if probe is None:
        interpreter = target.get("interpreter")
        if not interpreter:
            section["probe"] = {"ran": False, "reason": target.get("interpreter_error") or "no interpreter"}
            return section
        probe = run_torch_probe(interpreter, _timeout_after_loader(facts))
    probe.setdefault("ran", True)
    probe["reason"] = reason
    section["probe"] = probe
    lifted, reported = cast(dict[str, Any], section), cast(dict[str, Any], probe)
    for key in _LIFTED:
        if key in reported:
            lifted[key] = reported[key]
    return section

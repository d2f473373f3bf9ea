"""Torch facts: the build read from files, and the import probe when it is worth its cost.

Importing torch takes seconds, longer than every other static check together,
and envdoctor itself never imports it. So this section has two layers:

* always, from files in the target environment, no import: the version, the
  CUDA/ROCm build and the git revision from `torch/version.py` (read with
  `ast`, not executed), the distribution's metadata and installer, and the
  versions of the nvidia-* wheels (cuDNN, the CUDA runtime) beside it;
* when a GPU is present (NVML or PCI), when the loader stage runs, or with
  `--deep`: the probe (probes/torch_probe.py) run by the target's own
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
from typing import Any, TypedDict

from envdoctor.process import quiet_python_env, run_bounded


class TorchFacts(TypedDict, total=False):
    """The `torch` facts section (what `gather_torch` returns; the report's facts.torch)."""

    build: Any
    cuda: Any
    cuda_build: Any
    cudnn: Any
    cudnn_wheel: Any
    debug: Any
    dist_version: Any
    git_version: Any
    hip_build: Any
    import_error: Any
    import_warnings: Any
    installed: Any
    installer: Any
    intra_op_threads: Any
    location: Any
    numpy_version: Any
    nvidia_wheels: Any
    probe: Any
    requires_nvidia: Any
    rocm_build: Any
    searched: Any
    sharing_strategy: Any
    start_method: Any
    threadpools: Any
    timed_out: Any
    version: Any


#: How long `import torch` and the probe may take in the target (cold caches, network file systems).
PROBE_TIMEOUT_S = 60.0
#: Overrides PROBE_TIMEOUT_S (seconds), e.g. for a cluster node with a slow shared file system.
PROBE_TIMEOUT_ENV = "ENVDOCTOR_TORCH_PROBE_TIMEOUT"
PROBE_SCRIPT = Path(__file__).resolve().parent.parent / "probes" / "torch_probe.py"
THREADPOOLCTL_ENV = "ENVDOCTOR_THREADPOOLCTL_PATH"

_VERSION_FIELDS = ("__version__", "cuda", "hip", "rocm", "xpu", "git_version", "debug")


def read_version_module(path: Path) -> dict[str, Any]:
    """The literal assignments of torch/version.py, without executing it."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
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
                except ValueError:
                    values[target.id] = None
    return values


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
    from envdoctor.facts.packages import read_bytes

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


def read_torch_files(target: dict[str, Any]) -> dict[str, Any]:
    """What the target's installed files say about torch, with no import."""
    sites = _site_dirs(target)
    for site in sites:
        version_py = site / "torch" / "version.py"
        if not version_py.is_file():
            continue
        info: dict[str, Any] = {"installed": True, "location": str(site / "torch")}
        try:
            values = read_version_module(version_py)
        except (OSError, SyntaxError, ValueError) as exc:
            values = {}
            info["version_module_error"] = f"{type(exc).__name__}: {exc}"
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
        info["nvidia_wheels"] = _nvidia_wheels(sites)
        cudnn = next((v for k, v in info["nvidia_wheels"].items() if k.startswith("nvidia-cudnn")), None)
        info["cudnn_wheel"] = cudnn
        info["build"] = build_flavour(info)
        return info
    return {"installed": False, "searched": [str(s) for s in sites]}


def build_flavour(info: dict[str, Any]) -> str:
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


def run_torch_probe(interpreter: str, timeout: float | None = None) -> dict[str, Any]:
    """Run probes/torch_probe.py with the target's interpreter; failures become facts."""
    timeout = probe_timeout() if timeout is None else timeout
    run = run_bounded([interpreter, "-B", str(PROBE_SCRIPT)], timeout, env=probe_environment())
    base = {"ran": True, "source": "envdoctor", "seconds": round(run.seconds, 3), "timeout_s": timeout}
    if run.timed_out:
        return {**base, "timed_out": True,
                "error": f"the torch probe did not finish within {timeout:g} s (import torch hung?)",
                "stderr_tail": run.stderr[-2000:]}
    result = _last_json(run.stdout)
    if result is None:
        return {**base, "timed_out": False, "error": f"the torch probe {run.describe_failure()}",
                "returncode": run.returncode, "stderr_tail": run.stderr[-2000:], "stdout_tail": run.stdout[-2000:]}
    return {**base, "timed_out": False, **result}


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def _probe_reason(facts: Any) -> str | None:
    """Why the import probe should run, or None when files are enough."""
    from envdoctor.facts.gpu import gpu_present

    if getattr(facts.config, "deep", False):
        return "--deep"
    if not facts.config.no_loader:
        return "loader stage"
    if gpu_present(facts.get("gpu")):
        return "gpu present"
    return None


def _loader_probe(facts: Any) -> dict[str, Any] | None:
    """The probe result the loader stage gathered in its own subprocess, if it did."""
    if facts.config.no_loader:
        return None
    probe = facts.handed_over("torch").get("torch_probe")  # declared in facts.PROBES
    if not isinstance(probe, dict) or "probe_version" not in probe:
        return None  # not run, or it failed in the loader's process: run our own
    if probe.get("torch_preimported"):
        # The loader imported torch before the probe, so the import-time output
        # (the NumPy ABI message, PKG008) was missed: worth our own 2-3 s run.
        return None
    return dict(probe, source="loader")


def gather_torch(facts: Any) -> dict[str, Any]:
    """The torch section: file facts always, the import probe's facts when warranted."""
    target = facts["target"]
    section = read_torch_files(target)
    reason = _probe_reason(facts)
    # SYS001 reads this key; None until the probe says otherwise.
    section["sharing_strategy"] = None
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
        probe = run_torch_probe(interpreter)
    probe.setdefault("ran", True)
    probe["reason"] = reason
    section["probe"] = probe
    # The keys other rules read at the top of the section (SYS001 reads sharing_strategy).
    for key in ("sharing_strategy", "start_method", "intra_op_threads", "threadpools", "cudnn",
                "import_error", "import_warnings", "timed_out", "cuda", "numpy_version"):
        if key in probe:
            section[key] = probe[key]
    return section

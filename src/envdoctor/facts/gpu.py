"""GPU facts from NVML (through nvidia-ml-py, whose module is `pynvml`) and the PCI bus.

NVML is what nvidia-smi reads: the driver version, the newest CUDA version
that driver supports, and for each GPU its name, memory, utilisation and the
processes on it. No NVML (no driver, no GPU, macOS) is a fact, recorded as
`{"available": false, "reason": ...}`, never an error. The PCI bus is read as
well, so a GPU whose driver is missing is still seen.

nvidia-ml-py is the maintained binding; the `pynvml` PyPI package is a
deprecated shim over it that torch warns about, so only the module name is
shared.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict, TypeVar

from envdoctor.facts.applicability import Applicability, not_applicable
from envdoctor.facts.kernel_files import read_kernel_file
from envdoctor.facts.native_libs import NativeLibsFacts, read_target_native_libs

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import FactsReader


class GpuProcess(TypedDict):
    """A process NVML lists on a GPU; `used_memory` is None where NVML cannot say (containers, MIG)."""

    pid: int
    name: str | None
    used_memory: int | None
    kinds: list[str]


class GpuDevice(TypedDict):
    """One GPU as NVML reports it. Values NVML does not support on it (MIG slices, old drivers) are None."""

    index: int
    name: str
    uuid: str | None
    memory_total: int | None
    memory_used: int | None
    utilization_gpu: int | None
    utilization_memory: int | None
    #: "major.minor", e.g. "9.0" for an H100, "12.0" for an RTX 5090.
    compute_capability: str | None
    processes: list[GpuProcess]


class PciGpu(TypedDict):
    """An NVIDIA display/3D controller on the PCI bus, seen whatever the driver's state."""

    address: str
    device_id: str | None
    #: The kernel driver bound to it (nvidia, nouveau, vfio-pci), None when none is.
    driver: str | None


class _GpuRequired(TypedDict):
    available: bool
    device_count: int
    devices: list[GpuDevice]
    pci_gpus: list[PciGpu]


class GpuFacts(_GpuRequired, Applicability, total=False):
    """The `gpu` facts section (what `gather_gpu` returns; the report's facts.gpu).

    With NVML (`available` true) the driver keys are set; without it, `reason` says why.
    """

    reason: str
    driver_version: str
    nvml_version: str | None
    #: The newest CUDA the driver supports, "12.4".
    cuda_driver_version: str | None
    own_pid: int
    #: The rest of envdoctor's own job (children; sibling ranks under a launcher).
    job_pids: list[int]
    #: CUDA libraries on LD_LIBRARY_PATH/LD_PRELOAD and those the target ships for torch (Linux; see facts.native_libs).
    native_libraries: NativeLibsFacts | None


NVIDIA_PCI_VENDOR = "0x10de"
#: PCI classes of display and 3D controllers (GPUs); 0x0302 is what data-centre GPUs use.
GPU_PCI_CLASSES = ("0x0300", "0x0302")


def pci_nvidia_gpus(pci_root: Path = Path("/sys/bus/pci/devices")) -> list[PciGpu]:
    """NVIDIA display/3D controllers on the PCI bus, whatever the driver's state."""
    found: list[PciGpu] = []
    try:
        devices = sorted(pci_root.iterdir())
    except OSError:
        return found
    for device in devices:
        try:
            vendor = (device / "vendor").read_text().strip()
            pci_class = (device / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_PCI_VENDOR and pci_class[:6] in GPU_PCI_CLASSES:
            driver = device / "driver"
            found.append({
                "address": device.name,
                "device_id": read_kernel_file(device / "device"),
                "driver": os.path.basename(os.path.realpath(driver)) if driver.exists() else None,
            })
    return found


_Value = TypeVar("_Value")


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def cuda_version_text(encoded: int | None) -> str | None:
    """NVML's CUDA driver version (12040) as "12.4"."""
    if not encoded:
        return None
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def _optional(call: Callable[[], _Value]) -> _Value | None:
    """A value NVML may not support on this GPU (MIG slices, old drivers): None then."""
    import pynvml

    try:
        return call()
    except pynvml.NVMLError:
        return None


def _process_name(pid: int) -> str | None:
    try:
        import psutil

        name: str = psutil.Process(pid).name()
        return name
    except Exception:  # gone, or in another PID namespace
        return None


def _processes(pynvml: ModuleType, handle: object) -> list[GpuProcess]:
    seen: dict[int, GpuProcess] = {}
    for kind, getter in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                         ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        listed = _optional(partial(getattr(pynvml, getter), handle)) or []
        for proc in listed:
            used = getattr(proc, "usedGpuMemory", None)
            # NVML reports "not available" as a huge sentinel value.
            if used is not None and used >= 2**63:
                used = None
            entry = seen.setdefault(proc.pid, {"pid": proc.pid, "name": _process_name(proc.pid),
                                               "used_memory": used, "kinds": []})
            entry["kinds"].append(kind)
    return list(seen.values())


def _unavailable(reason: str) -> GpuFacts:
    return {"available": False, "reason": reason, "device_count": 0, "devices": [], "pci_gpus": []}


def read_nvml() -> GpuFacts:
    """Driver and devices as NVML reports them; `available: false` with the reason when it cannot."""
    try:
        import pynvml
    except ImportError as exc:
        return _unavailable(f"nvidia-ml-py is not installed ({exc})")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return _unavailable(f"NVML could not start: {_text(exc)}")
    except OSError as exc:  # pragma: no cover - a broken libnvidia-ml
        return _unavailable(f"NVML could not be loaded: {exc}")
    try:
        cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion_v2) or _optional(pynvml.nvmlSystemGetCudaDriverVersion)
        devices: list[GpuDevice] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = _optional(partial(pynvml.nvmlDeviceGetMemoryInfo, handle))
            utilization = _optional(partial(pynvml.nvmlDeviceGetUtilizationRates, handle))
            capability = _optional(partial(pynvml.nvmlDeviceGetCudaComputeCapability, handle))
            uuid = _optional(partial(pynvml.nvmlDeviceGetUUID, handle))
            devices.append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(uuid) if uuid is not None else None,
                "memory_total": memory.total if memory else None,
                "memory_used": memory.used if memory else None,
                "utilization_gpu": utilization.gpu if utilization else None,
                "utilization_memory": utilization.memory if utilization else None,
                "compute_capability": f"{capability[0]}.{capability[1]}" if capability else None,
                "processes": _processes(pynvml, handle),
            })
        nvml_version = _optional(pynvml.nvmlSystemGetNVMLVersion)
        return {
            "available": True,
            "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
            "nvml_version": _text(nvml_version) if nvml_version is not None else None,
            "cuda_driver_version": cuda_version_text(cuda),
            "own_pid": os.getpid(),
            "device_count": len(devices),
            "devices": devices,
            "pci_gpus": [],
        }
    except pynvml.NVMLError as exc:
        return _unavailable(f"NVML failed while reading the devices: {_text(exc)}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


#: Set by launchers (torchrun, Slurm's srun, Open MPI) in every process of one job.
LAUNCHER_ENV = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "SLURM_STEP_ID", "OMPI_COMM_WORLD_LOCAL_RANK")


def job_pids(environ: Mapping[str, str] | None = None) -> list[int]:
    """The other processes of this training job: siblings under the launcher, and our own children.

    Under torchrun or srun every rank is a child of one launcher process and holds its
    own GPU: those are the job, not other jobs holding the GPUs. Siblings count only
    when a launcher's variables are set, since a shell's other children may be anything.
    """
    environ = os.environ if environ is None else environ
    try:
        import psutil

        me = psutil.Process()
        pids = {child.pid for child in me.children(recursive=True)}
        parent = me.parent()
        if parent is not None and parent.pid > 1 and any(name in environ for name in LAUNCHER_ENV):
            pids |= {sibling.pid for sibling in parent.children(recursive=True)}
    except Exception:  # psutil missing, or processes gone while we looked
        return []
    pids.discard(os.getpid())
    return sorted(pids)


def gather_gpu(facts: FactsReader) -> GpuFacts:
    """The gpu section: NVML's view, and the NVIDIA GPUs on the PCI bus."""
    section = read_nvml()
    if section["available"]:
        section["job_pids"] = job_pids()
    section["pci_gpus"] = pci_nvidia_gpus()
    linux = sys.platform.startswith("linux")  # LD_LIBRARY_PATH is the Linux loader's
    section["native_libraries"] = read_target_native_libs(facts["target"]) if linux else None
    if sys.platform == "darwin" and not section["available"]:
        # The GPU rules are NVIDIA's (driver, CUDA build, compute capability): nothing to judge on a Mac.
        section.update(not_applicable("macOS has no NVIDIA GPU or NVML; torch reaches Apple's GPU through "
                                      "MPS (facts.torch.mps)"))
    return section


def gpu_present(gpu: GpuFacts | None) -> bool:
    """True when NVML lists a GPU or one sits on the PCI bus."""
    if not gpu:
        return False
    return bool(gpu.get("device_count")) or bool(gpu.get("pci_gpus"))

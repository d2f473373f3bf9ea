"""GPU rules: an NVIDIA GPU that torch cannot use, a driver too old for torch's CUDA, a busy GPU.

GPU001 cuda-unusable, GPU002 driver-too-old, GPU003 gpu-busy. They read the
`gpu` section (NVML and the PCI bus) and the `torch` section (the build read
from files, and the import probe's CUDA facts when it ran). The driver table
is data: rules/cuda_drivers.toml.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from envdoctor.catalog import load_data
from envdoctor.facts import Facts
from envdoctor.facts.gpu import gpu_present
from envdoctor.model import Severity
from envdoctor.rules import Hit

#: A GPU with more than this share of its memory held by others is busy.
BUSY_MEMORY_SHARE = 0.10
#: … or with at least this utilisation (percent) before training starts.
BUSY_UTILIZATION = 10
WHEEL_INDEX = "https://download.pytorch.org/whl"


def version_tuple(text: str | None) -> tuple[int, ...]:
    """'550.54.14' -> (550, 54, 14); '12.4' -> (12, 4); junk -> ()."""
    if not text:
        return ()
    return tuple(int(part) for part in re.findall(r"\d+", str(text))[:4])


def _os_key(facts: Facts) -> str:
    platform = (facts.get("target") or {}).get("platform") or ""
    return "windows" if platform.startswith("win") else "linux"


def driver_needs(cuda_build: str, os_key: str = "linux") -> dict[str, Any]:
    """The drivers a CUDA X.Y build needs: to start at all, and with no minor-compat caveats."""
    table = load_data("cuda_drivers")
    major_minor = ".".join(str(p) for p in version_tuple(cuda_build)[:2])
    major = major_minor.split(".")[0]
    family = table["family_minimum"].get(major, {}).get(os_key)
    toolkit = table["toolkit_driver"].get(major_minor, {}).get(os_key)
    return {"cuda": major_minor, "family_minimum": family, "toolkit_driver": toolkit}


def best_wheel_cuda(driver_cuda: str | None, driver_version: str | None, os_key: str = "linux") -> str | None:
    """The newest CUDA that PyTorch publishes wheels for and this driver runs."""
    table = load_data("cuda_drivers")
    wheels = sorted(table["pytorch_wheels"]["cuda"], key=version_tuple)
    best = None
    for cuda in wheels:
        fits_cuda = driver_cuda is None or version_tuple(cuda) <= version_tuple(driver_cuda)
        need = table["toolkit_driver"].get(cuda, {}).get(os_key)
        fits_driver = driver_version is None or need is None or version_tuple(driver_version) >= version_tuple(need)
        if fits_cuda and fits_driver:
            best = cuda
    return best


def _plain_version(version: str | None) -> str | None:
    return version.split("+")[0] if version else None


def install_commands(torch: dict[str, Any], cuda: str | None, target_kind: str | None) -> str:
    """pip and conda commands that install this torch version built for `cuda`."""
    if cuda is None:
        return ("no CUDA build of PyTorch supports this driver: upgrade the NVIDIA driver first "
                "(https://www.nvidia.com/drivers)")
    tag = "cu" + cuda.replace(".", "")
    version = _plain_version(torch.get("version") or torch.get("dist_version"))
    # No version pin: PyTorch builds each release for a few CUDA versions only, so
    # "this torch for that CUDA" may not exist, and a fix that cannot resolve is no fix.
    # Unpinned, the index (or conda-forge with cuda-version) gives the newest build that does.
    pip = f"pip install --force-reinstall torch --index-url {WHEEL_INDEX}/{tag}"
    conda = f'conda install -c conda-forge "pytorch=*=cuda*" "cuda-version={cuda}"'
    keep = (f"; to stay on torch {version}, first check that {WHEEL_INDEX}/{tag}/torch/ lists it, and move "
            "torchvision/torchaudio to the same index" if version else "")
    if torch.get("installer") == "conda" or (target_kind in ("conda", "pixi") and torch.get("installer") != "pip"):
        return f"{conda}   (or with pip: {pip}){keep}"
    return f"{pip}   (in a conda env: {conda}){keep}"


def _device_names(gpu: dict[str, Any]) -> list[str]:
    names = [d.get("name") for d in gpu.get("devices") or [] if d.get("name")]
    if not names:
        names = [f"PCI {p['address']} (device {p.get('device_id')})" for p in gpu.get("pci_gpus") or []]
    return names


def find_unusable_cuda(facts: Facts) -> Iterator[Hit]:
    gpu = facts["gpu"]
    if not gpu_present(gpu):
        return
    torch = facts["torch"]
    if not torch or not torch.get("installed"):
        return
    target_kind = (facts.get("target") or {}).get("kind")
    names = _device_names(gpu)
    driver = gpu.get("driver_version")
    driver_cuda = gpu.get("cuda_driver_version")
    os_key = _os_key(facts)
    evidence: dict[str, Any] = {
        "gpus": names, "driver_version": driver, "driver_cuda": driver_cuda,
        "torch_version": torch.get("version"), "torch_build": torch.get("build"),
        "torch_cuda_build": torch.get("cuda_build"), "nvml": gpu.get("available"),
    }
    if not gpu.get("available"):
        in_container = ((facts.get("system") or {}).get("container") or {}).get("in_container")
        fix = ("start the container with the GPU passed in: `docker run --gpus all …` (NVIDIA Container "
               "Toolkit installed on the host), or on Kubernetes request `nvidia.com/gpu`"
               if in_container else
               "install or load the NVIDIA driver (`sudo ubuntu-drivers install` or your distribution's "
               "nvidia-driver package, then reboot); `nvidia-smi` must list the GPU")
        yield Hit(
            message=(f"{len(names)} NVIDIA GPU(s) on the PCI bus but no working driver: "
                     f"{gpu.get('reason') or 'NVML unavailable'}; torch cannot use them"),
            evidence={**evidence, "nvml_reason": gpu.get("reason"), "pci_gpus": gpu.get("pci_gpus")},
            fix=fix,
        )
        return
    if torch.get("build") in ("cpu", "rocm"):
        cuda = best_wheel_cuda(driver_cuda, driver, os_key)
        yield Hit(
            message=(f"{len(names)} NVIDIA GPU(s) ({', '.join(names)}) with driver {driver} (CUDA {driver_cuda}) "
                     f"but torch {torch.get('version')} is a {torch.get('build').upper()}-only build: "
                     "torch.cuda.is_available() is False"),
            evidence={**evidence, "suggested_cuda": cuda},
            fix=install_commands(torch, cuda, target_kind),
        )
        return
    probe = torch.get("probe") or {}
    cuda_facts = probe.get("cuda") or {}
    if not probe.get("ran") or probe.get("timed_out") or probe.get("import_error") or not cuda_facts:
        return  # nothing measured (PKG010 reports a probe that failed)
    if cuda_facts.get("available"):
        return
    error = cuda_facts.get("error") or "torch.cuda.is_available() returned False without an error"
    needs = driver_needs(torch.get("cuda_build") or "", os_key)
    if needs["family_minimum"] and driver and version_tuple(driver) < version_tuple(needs["family_minimum"]):
        cuda = best_wheel_cuda(driver_cuda, driver, os_key)
        fix = (f"upgrade the NVIDIA driver to {needs['toolkit_driver'] or needs['family_minimum']} or newer, "
               f"or install a torch built for CUDA {cuda}: {install_commands(torch, cuda, target_kind)}")
    else:
        fix = ("check that the process sees the devices (CUDA_VISIBLE_DEVICES="
               f"{((facts.get('system') or {}).get('environ') or {}).get('CUDA_VISIBLE_DEVICES', '<unset>')}), "
               "that /dev/nvidia* are accessible, and that `nvidia-smi` works; then reinstall the CUDA build: "
               + install_commands(torch, needs["cuda"] or best_wheel_cuda(driver_cuda, driver, os_key), target_kind))
    yield Hit(
        message=(f"torch {torch.get('version')} (CUDA {torch.get('cuda_build')}) cannot initialise CUDA on "
                 f"{', '.join(names)}: {error}"),
        evidence={**evidence, "cuda_error": error, "probe_device_count": cuda_facts.get("device_count")},
        fix=fix,
    )


def find_old_driver(facts: Facts) -> Iterator[Hit]:
    gpu = facts["gpu"]
    if not gpu or not gpu.get("available"):
        return
    torch = facts["torch"]
    if not torch or not torch.get("installed") or not torch.get("cuda_build"):
        return
    driver = gpu.get("driver_version")
    driver_cuda = gpu.get("cuda_driver_version")
    os_key = _os_key(facts)
    needs = driver_needs(torch["cuda_build"], os_key)
    evidence = {
        "torch_version": torch.get("version"), "torch_cuda_build": torch["cuda_build"],
        "driver_version": driver, "driver_cuda": driver_cuda,
        "family_minimum_driver": needs["family_minimum"], "toolkit_driver": needs["toolkit_driver"],
    }
    build_major = version_tuple(torch["cuda_build"])[:1]
    too_old = bool(needs["family_minimum"]) and version_tuple(driver) < version_tuple(needs["family_minimum"])
    if driver_cuda and build_major and version_tuple(driver_cuda)[:1] < build_major:
        too_old = True
    cuda = best_wheel_cuda(driver_cuda, driver, os_key)
    target_kind = (facts.get("target") or {}).get("kind")
    probe = torch.get("probe") or {}
    initialised = bool(probe.get("ran") and (probe.get("cuda") or {}).get("available"))
    if too_old and initialised:
        # The import probe saw CUDA start: a CUDA forward-compatibility package (cuda-compat,
        # as NGC containers on older hosts use) supplies a newer libcuda than the kernel
        # driver NVML reports. "CUDA will not initialise" would be false; the table's
        # caveat for this gap is the minor-version one below.
        too_old = False
        evidence["cuda_initialised"] = True
    if too_old:
        yield Hit(
            message=(f"torch {torch.get('version')} is built for CUDA {torch['cuda_build']}, which needs NVIDIA driver "
                     f"{needs['family_minimum'] or 'newer'} or newer, but driver {driver} supports CUDA {driver_cuda} "
                     "at most: CUDA will not initialise"),
            evidence=evidence,
            fix=(f"upgrade the driver to {needs['toolkit_driver'] or needs['family_minimum']} or newer, or install "
                 f"the torch build for CUDA {cuda}: {install_commands(torch, cuda, target_kind)}"),
        )
        return
    if needs["toolkit_driver"] and driver and version_tuple(driver) < version_tuple(needs["toolkit_driver"]):
        yield Hit(
            message=(f"driver {driver} is older than the {needs['toolkit_driver']} that CUDA {needs['cuda']} ships "
                     + ("with; CUDA did initialise in the import probe, so a CUDA forward-compatibility package "
                        "(cuda-compat) supplies a newer libcuda than the kernel driver: it runs only on data-centre "
                        "GPUs, and"
                        if evidence.get("cuda_initialised") else
                        "with: torch runs through CUDA minor-version compatibility, but")
                     + " kernels that need PTX JIT compilation (new GPU architectures, some extensions) fail with "
                     "'unsupported toolchain'"),
            evidence=evidence,
            fix=(f"upgrade the driver to {needs['toolkit_driver']} or newer, or use the torch build for CUDA {cuda}: "
                 f"{install_commands(torch, cuda, target_kind)}"),
            severity=Severity.WARNING,
        )


def find_busy_gpus(facts: Facts) -> Iterator[Hit]:
    gpu = facts["gpu"]
    if not gpu or not gpu.get("available"):
        return
    # Our own process and the rest of our job (the other ranks under torchrun or srun)
    # are not "other jobs".
    ours = {gpu.get("own_pid"), *(gpu.get("job_pids") or [])}
    busy = []
    same_job = []
    for device in gpu.get("devices") or []:
        others = [p for p in device.get("processes") or [] if p.get("pid") not in ours]
        same_job += [{"index": device.get("index"), "pid": p.get("pid"), "name": p.get("name")}
                     for p in device.get("processes") or [] if p.get("pid") in ours - {gpu.get("own_pid")}]
        if not others and any(p.get("pid") in ours for p in device.get("processes") or []):
            continue  # what this GPU holds is our job's
        total, used = device.get("memory_total"), device.get("memory_used")
        share = (used / total) if total and used is not None else None
        util = device.get("utilization_gpu")
        if others or (share is not None and share > BUSY_MEMORY_SHARE) or (util is not None and util >= BUSY_UTILIZATION):
            busy.append({
                "index": device.get("index"), "name": device.get("name"),
                "memory_used": used, "memory_total": total,
                "memory_used_share": round(share, 3) if share is not None else None,
                "utilization_gpu": util,
                "processes": [{"pid": p.get("pid"), "name": p.get("name"), "used_memory": p.get("used_memory")}
                              for p in others],
            })
    if not busy:
        return
    parts = []
    for b in busy:
        who = ", ".join(f"{p['name'] or 'pid'} ({p['pid']})" for p in b["processes"]) or "processes not visible here"
        share = f"{b['memory_used_share']:.0%}" if b["memory_used_share"] is not None else "?"
        parts.append(f"GPU {b['index']} ({b['name']}): {share} of memory used, {b['utilization_gpu']}% busy, by {who}")
    free = [d.get("index") for d in gpu.get("devices") or [] if d.get("index") not in {b["index"] for b in busy}]
    fix = ("wait for or stop the other jobs (`nvidia-smi` lists them), or pick free GPUs with "
           f"CUDA_VISIBLE_DEVICES={','.join(map(str, free))}" if free else
           "wait for or stop the other jobs (`nvidia-smi` lists them); every GPU here is in use")
    yield Hit(
        message="other processes already hold GPU memory or compute: " + "; ".join(parts),
        evidence={"busy_gpus": busy, "free_gpus": free, "same_job_processes": same_job},
        fix=fix,
    )


RULES = {
    "GPU001": find_unusable_cuda,
    "GPU002": find_old_driver,
    "GPU003": find_busy_gpus,
}

"""GPU rules: an NVIDIA GPU that torch cannot use, a driver too old for torch's CUDA, a busy GPU,
a GPU whose architecture torch was not compiled for, CUDA libraries loaded from another folder first.

GPU001 cuda-unusable, GPU002 driver-too-old, GPU003 gpu-busy, GPU004
arch-not-in-build, GPU005 foreign-cuda-libraries. They read the `gpu` section (NVML and the PCI bus) and the
`torch` section (the build read from files, and the import probe's CUDA facts
when it ran). The driver and architecture tables are data: catalog/cuda_drivers.toml.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from envdoctor.catalog import load_data
from envdoctor.facts import Facts
from envdoctor.facts.gpu import GpuDevice, gpu_present
from envdoctor.model import Severity
from envdoctor.remedies.install_commands import Fix, advice
from envdoctor.remedies.torch_install import led, torch_for_cuda
from envdoctor.rules import Hit

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.gpu import GpuFacts
    from envdoctor.facts.native_libs import CudaLibrary, NativeLibsFacts
    from envdoctor.facts.system import SystemFacts
    from envdoctor.facts.torch import TorchCuda, TorchFacts

#: A GPU with more than this share of its memory held by others is busy.
BUSY_MEMORY_SHARE = 0.10
#: … or with at least this utilisation (percent) before training starts.
BUSY_UTILIZATION = 10


def version_tuple(text: str | None) -> tuple[int, ...]:
    """'550.54.14' -> (550, 54, 14); '12.4' -> (12, 4); junk -> ()."""
    if not text:
        return ()
    return tuple(int(part) for part in re.findall(r"\d+", str(text))[:4])


def _target_field(facts: Facts, key: str) -> str | None:
    """A text field of the target section (platform, kind), None when the section is missing."""
    target = facts.get("target")
    value = target.get(key) if isinstance(target, dict) else None
    return value if isinstance(value, str) else None


def _os_key(facts: Facts) -> str:
    platform = _target_field(facts, "platform") or ""
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


def torch_fix(facts: Facts, cuda: str | None, lead: str = "", *, upgrade: str = "upgrade the NVIDIA driver",
              keep_hint: bool = True, note: str = "") -> Fix:
    """`lead` then the commands that install torch built for `cuda`, or only `upgrade` when no CUDA build fits.

    The commands are the steps `envdoctor fix` runs; the driver upgrade is the
    user's (no package of the environment holds the kernel driver).
    """
    if cuda is None:
        return advice(f"{upgrade} (https://www.nvidia.com/drivers): no CUDA build of PyTorch runs on this driver")
    return led(lead, torch_for_cuda(facts, cuda, keep_hint=keep_hint, note=note))


def _device_names(gpu: GpuFacts) -> list[str]:
    names = [d["name"] for d in gpu["devices"] if d["name"]]
    if not names:
        names = [f"PCI {p['address']} (device {p['device_id']})" for p in gpu["pci_gpus"]]
    return names


def _probe_cuda(torch: TorchFacts) -> TorchCuda | None:
    """What the import probe saw of CUDA, or None when it did not run, failed or timed out."""
    probe = torch["probe"]
    if not probe.get("ran") or probe.get("timed_out") or probe.get("import_error"):
        return None
    return probe.get("cuda") or None


def find_unusable_cuda(facts: Facts) -> Iterator[Hit]:
    gpu = facts["gpu"]
    if not gpu_present(gpu):
        return
    torch = facts["torch"]
    if not torch["installed"]:
        return
    names = _device_names(gpu)
    driver = gpu.get("driver_version")
    driver_cuda = gpu.get("cuda_driver_version")
    os_key = _os_key(facts)
    evidence: dict[str, object] = {
        "gpus": names, "driver_version": driver, "driver_cuda": driver_cuda,
        "torch_version": torch.get("version"), "torch_build": torch.get("build"),
        "torch_cuda_build": torch.get("cuda_build"), "nvml": gpu.get("available"),
    }
    if not gpu["available"]:
        system: SystemFacts | None = facts.get("system")
        in_container = bool(system and system["container"]["in_container"])
        driver_fix = ("start the container with the GPU passed in: `docker run --gpus all …` (NVIDIA Container "
                      "Toolkit installed on the host), or on Kubernetes request `nvidia.com/gpu`"
                      if in_container else
                      "install or load the NVIDIA driver (`sudo ubuntu-drivers install` or your distribution's "
                      "nvidia-driver package, then reboot); `nvidia-smi` must list the GPU")
        yield Hit(
            message=(f"{len(names)} NVIDIA GPU(s) on the PCI bus but no working driver: "
                     f"{gpu.get('reason') or 'NVML unavailable'}; torch cannot use them"),
            evidence={**evidence, "nvml_reason": gpu.get("reason"), "pci_gpus": gpu.get("pci_gpus")},
            fix=driver_fix,
        )
        return
    build = torch.get("build")
    if build in ("cpu", "rocm"):
        cuda = best_wheel_cuda(driver_cuda, driver, os_key)
        yield Hit(
            message=(f"{len(names)} NVIDIA GPU(s) ({', '.join(names)}) with driver {driver} (CUDA {driver_cuda}) "
                     f"but torch {torch.get('version')} is a {str(build).upper()}-only build: "
                     "torch.cuda.is_available() is False"),
            evidence={**evidence, "suggested_cuda": cuda},
            **torch_fix(facts, cuda).hit(),
        )
        return
    cuda_facts = _probe_cuda(torch)
    if cuda_facts is None:
        return  # nothing measured (PKG010 reports a probe that failed)
    if cuda_facts.get("available"):
        return
    error = cuda_facts.get("error") or "torch.cuda.is_available() returned False without an error"
    needs = driver_needs(torch.get("cuda_build") or "", os_key)
    if needs["family_minimum"] and driver and version_tuple(driver) < version_tuple(needs["family_minimum"]):
        cuda = best_wheel_cuda(driver_cuda, driver, os_key)
        upgrade = f"upgrade the NVIDIA driver to {needs['toolkit_driver'] or needs['family_minimum']} or newer"
        fix = torch_fix(facts, cuda, f"{upgrade}, or install a torch built for CUDA {cuda}: ", upgrade=upgrade)
    else:
        system = facts.get("system")
        visible = system["environ"].get("CUDA_VISIBLE_DEVICES", "<unset>") if system else "<unset>"
        checks = ("check that the process sees the devices (CUDA_VISIBLE_DEVICES="
                  f"{visible}), that /dev/nvidia* are accessible, and that `nvidia-smi` works; then reinstall "
                  "the CUDA build: ")
        # The checks come first and only a person can make them: the reinstall is advice, no step to run.
        fix = advice(torch_fix(facts, needs["cuda"] or best_wheel_cuda(driver_cuda, driver, os_key), checks).text)
    yield Hit(
        message=(f"torch {torch.get('version')} (CUDA {torch.get('cuda_build')}) cannot initialise CUDA on "
                 f"{', '.join(names)}: {error}"),
        evidence={**evidence, "cuda_error": error, "probe_device_count": cuda_facts.get("device_count")},
        **fix.hit(),
    )


def find_old_driver(facts: Facts) -> Iterator[Hit]:
    gpu = facts["gpu"]
    if not gpu["available"]:
        return
    torch = facts["torch"]
    cuda_build = torch.get("cuda_build")
    if not torch["installed"] or not cuda_build:
        return
    driver = gpu.get("driver_version")
    driver_cuda = gpu.get("cuda_driver_version")
    os_key = _os_key(facts)
    needs = driver_needs(cuda_build, os_key)
    evidence: dict[str, object] = {
        "torch_version": torch.get("version"), "torch_cuda_build": cuda_build,
        "driver_version": driver, "driver_cuda": driver_cuda,
        "family_minimum_driver": needs["family_minimum"], "toolkit_driver": needs["toolkit_driver"],
    }
    build_major = version_tuple(cuda_build)[:1]
    too_old = bool(needs["family_minimum"]) and version_tuple(driver) < version_tuple(needs["family_minimum"])
    if driver_cuda and build_major and version_tuple(driver_cuda)[:1] < build_major:
        too_old = True
    cuda = best_wheel_cuda(driver_cuda, driver, os_key)
    probe_cuda = _probe_cuda(torch)
    initialised = bool(probe_cuda and probe_cuda.get("available"))
    if too_old and initialised:
        # The import probe saw CUDA start: a CUDA forward-compatibility package (cuda-compat,
        # as NGC containers on older hosts use) supplies a newer libcuda than the kernel
        # driver NVML reports. "CUDA will not initialise" would be false; the table's
        # caveat for this gap is the minor-version one below.
        too_old = False
        evidence["cuda_initialised"] = True
    if too_old:
        upgrade = f"upgrade the driver to {needs['toolkit_driver'] or needs['family_minimum']} or newer"
        yield Hit(
            message=(f"torch {torch.get('version')} is built for CUDA {cuda_build}, which needs NVIDIA driver "
                     f"{needs['family_minimum'] or 'newer'} or newer, but driver {driver} supports CUDA {driver_cuda} "
                     "at most: CUDA will not initialise"),
            evidence=evidence,
            **torch_fix(facts, cuda, f"{upgrade}, or install the torch build for CUDA {cuda}: ", upgrade=upgrade).hit(),
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
            **torch_fix(facts, cuda, f"upgrade the driver to {needs['toolkit_driver']} or newer, or use the torch "
                        f"build for CUDA {cuda}: ", upgrade=f"upgrade the driver to {needs['toolkit_driver']} or newer").hit(),
            severity=Severity.WARNING,
        )


def find_busy_gpus(facts: Facts) -> Iterator[Hit]:
    gpu = facts["gpu"]
    if not gpu["available"]:
        return
    # Our own process and the rest of our job (the other ranks under torchrun or srun)
    # are not "other jobs".
    own_pid = gpu.get("own_pid")
    ours = {own_pid, *gpu.get("job_pids", [])}
    same_job = [{"index": device["index"], "pid": p["pid"], "name": p["name"]}
                for device in gpu["devices"] for p in device["processes"] if p["pid"] in ours and p["pid"] != own_pid]
    busy = [entry for device in gpu["devices"] if (entry := _busy_entry(device, ours)) is not None]
    if not busy:
        return
    parts = []
    for b in busy:
        who = ", ".join(f"{p['name'] or 'pid'} ({p['pid']})" for p in b["processes"]) or "processes not visible here"
        used_share = f"{b['memory_used_share']:.0%}" if b["memory_used_share"] is not None else "?"
        parts.append(f"GPU {b['index']} ({b['name']}): {used_share} of memory used, {b['utilization_gpu']}% busy, by {who}")
    free = [d["index"] for d in gpu["devices"] if d["index"] not in {b["index"] for b in busy}]
    fix = ("wait for or stop the other jobs (`nvidia-smi` lists them), or pick free GPUs with "
           f"CUDA_VISIBLE_DEVICES={','.join(map(str, free))}" if free else
           "wait for or stop the other jobs (`nvidia-smi` lists them); every GPU here is in use")
    yield Hit(
        message="other processes already hold GPU memory or compute: " + "; ".join(parts),
        evidence={"busy_gpus": busy, "free_gpus": free, "same_job_processes": same_job},
        fix=fix,
    )


def _busy_entry(device: GpuDevice, ours: set[int | None]) -> dict[str, Any] | None:
    """The device as evidence when another job holds it (its processes, its memory or its compute), else None."""
    processes = device["processes"]
    others = [p for p in processes if p["pid"] not in ours]
    if not others and any(p["pid"] in ours for p in processes):
        return None  # what this GPU holds is our job's
    total, used = device["memory_total"], device["memory_used"]
    share = (used / total) if total and used is not None else None
    util = device["utilization_gpu"]
    if not (others or (share is not None and share > BUSY_MEMORY_SHARE) or (util is not None and util >= BUSY_UTILIZATION)):
        return None
    return {
        "index": device["index"], "name": device["name"],
        "memory_used": used, "memory_total": total,
        "memory_used_share": round(share, 3) if share is not None else None,
        "utilization_gpu": util,
        "processes": [{"pid": p["pid"], "name": p["name"], "used_memory": p["used_memory"]} for p in others],
    }


class Arch(NamedTuple):
    """One entry of torch.cuda.get_arch_list(): "sm_86" (machine code) or "compute_90" (PTX)."""

    text: str
    ptx: bool
    major: int
    minor: int
    #: "a" (sm_90a: this exact GPU only), "f" (sm_100f: its family), "" (plain).
    suffix: str

    def runs_on(self, major: int, minor: int) -> bool:
        """Whether this code runs on a GPU of capability major.minor without being rebuilt.

        CUDA's rules: machine code for X.Y runs on X.Z for Z >= Y (same major only);
        arch-specific code ("a") only on exactly X.Y; PTX for X.Y is compiled by the
        driver (JIT) for any X.Y or newer GPU, across majors.
        """
        if self.suffix == "a":
            return (major, minor) == (self.major, self.minor)
        if self.ptx:
            return (major, minor) >= (self.major, self.minor)
        return major == self.major and minor >= self.minor


_ARCH = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def parse_arch(text: str) -> Arch | None:
    """'sm_120' -> Arch(major=12, minor=0); 'compute_90' -> PTX 9.0; anything else (gfx…) -> None."""
    match = _ARCH.match(text.strip())
    if not match or len(match.group(2)) < 2:
        return None
    digits = match.group(2)
    return Arch(text, match.group(1) == "compute", int(digits[:-1]), int(digits[-1]), match.group(3))


def parse_capability(text: str | None) -> tuple[int, int] | None:
    """'8.6' -> (8, 6); None or junk -> None."""
    match = re.match(r"^(\d+)\.(\d+)$", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True)
class GpuArch:
    index: int
    name: str
    capability: str


def _gpu_capabilities(gpu: GpuFacts, cuda: TorchCuda) -> list[GpuArch]:
    """Each GPU's compute capability: NVML's, else what torch read in the import probe."""
    found = [GpuArch(d["index"], d["name"], d["compute_capability"])
             for d in gpu["devices"] if d["compute_capability"]]
    if not found:
        found = [GpuArch(d.get("index", i), d.get("name", "?"), d["capability"])
                 for i, d in enumerate(cuda.get("devices", [])) if "capability" in d]
    return [g for g in found if parse_capability(g.capability)]


def first_cuda_for(capability: str) -> str | None:
    """The first CUDA release that compiles for this capability (catalog/cuda_drivers.toml)."""
    return load_data("cuda_drivers")["arch_first_cuda"].get(capability)


def _torch_warning(cuda: TorchCuda) -> str | None:
    """torch's own words, when it warned at CUDA init that a GPU is not in its build."""
    for warning in cuda.get("init_warnings", []):
        message = warning.get("message") or ""
        if "is not compatible with the current PyTorch installation" in message or "no longer supports" in message:
            return message.strip()[:600]
    return None


# complexity: 27 — newer CUDA for GPUs past the build, older for GPUs below it, and none when no torch build covers
#   both: a decision table in code, one branch per row.
def _arch_fix(gpus: list[dict[str, Any]], arches: list[Arch], facts: Facts, note: str = "") -> Fix:
    """The torch build to install: newer CUDA for GPUs past the build, older for GPUs below it.

    Steps only where installing is the whole fix: a GPU the build dropped needs an
    older release or a source build, and a driver too old for the CUDA the GPU
    needs must be upgraded first (the new build would not start on it).
    """
    gpu = facts["gpu"]
    os_key = _os_key(facts)
    oldest = min(((a.major, a.minor) for a in arches if not a.ptx), default=None)
    too_old = [g for g in gpus if oldest and (parse_capability(g["capability"]) or (0, 0)) < oldest]
    if too_old:
        names = ", ".join(f"{g['name']} (sm_{g['capability'].replace('.', '')})" for g in too_old)
        return advice(f"this torch build dropped {names}: install an older torch release or a build for an older CUDA whose "
                "arch list still has it (PyTorch's release notes list the architectures each release dropped), "
                "or build torch from source with TORCH_CUDA_ARCH_LIST=" + ";".join(g["capability"] for g in too_old)
                      + (f"; {note}" if note else ""))
    wanted = max((first_cuda_for(g["capability"]) or "" for g in gpus), key=version_tuple) or None
    wheels = sorted(load_data("cuda_drivers")["pytorch_wheels"]["cuda"], key=version_tuple)
    best = best_wheel_cuda(gpu.get("cuda_driver_version"), gpu.get("driver_version"), os_key)
    if wanted and best and version_tuple(best) >= version_tuple(wanted):
        cuda: str | None = best
        prefix = ""
    else:
        cuda = next((w for w in wheels if wanted and version_tuple(w) >= version_tuple(wanted)), None)
        prefix = (f"upgrade the NVIDIA driver (it runs CUDA {gpu.get('cuda_driver_version')} at most) "
                  f"to one for CUDA {wanted} or newer, then " if gpu["available"] else "")
    lead = (prefix + f"install a torch built for CUDA {cuda or wanted or 'newer'}, whose arch list includes "
            + ", ".join(sorted({"sm_" + g["capability"].replace(".", "") for g in gpus})) + ": ")
    if cuda is None:
        return advice(lead + "PyTorch publishes no wheel for that CUDA yet: build torch from source with "
                      "TORCH_CUDA_ARCH_LIST=" + ";".join(sorted({g["capability"] for g in gpus})))
    # No "stay on this version" hint: a release older than the GPU has no build for it.
    fix = torch_fix(facts, cuda, lead, keep_hint=False, note=note)
    return advice(fix.text) if prefix else fix


# complexity: 25 — machine code, PTX and arch-specific entries of the build against each GPU's capability: CUDA's
#   compatibility rules, one branch each.
def find_arch_not_in_build(facts: Facts) -> Iterator[Hit]:
    gpu = facts["gpu"]
    torch = facts["torch"]
    if not torch["installed"] or torch.get("build") != "cuda":
        return  # no CUDA build (GPU001), or ROCm (gfx arch names)
    cuda = _probe_cuda(torch)
    if cuda is None:
        return  # the import probe did not run: the arch list is only known by importing torch
    arch_texts = cuda.get("arch_list") or []
    arches = [a for a in (parse_arch(t) for t in arch_texts) if a]
    if not arches:
        return  # an empty list is what torch reports when it cannot tell: nothing to compare
    gpus = _gpu_capabilities(gpu, cuda)
    missing: list[dict[str, Any]] = []
    ptx_only: list[dict[str, Any]] = []
    for g in gpus:
        major, minor = parse_capability(g.capability) or (0, 0)
        machine = [a.text for a in arches if not a.ptx and a.runs_on(major, minor)]
        ptx = [a.text for a in arches if a.ptx and a.runs_on(major, minor)]
        entry = {"index": g.index, "name": g.name, "capability": g.capability,
                 "needs": f"sm_{major}{minor}", "machine_code": machine, "ptx": ptx,
                 "first_cuda": first_cuda_for(g.capability)}
        if not machine and ptx:
            ptx_only.append(entry)
        elif not machine:
            missing.append(entry)
    if not missing and not ptx_only:
        return
    evidence = {"arch_list": arch_texts, "arch_list_source": cuda.get("arch_list_source"),
                "torch_version": torch.get("version"), "torch_cuda_build": torch.get("cuda_build"),
                "gpus_missing": missing, "gpus_ptx_only": ptx_only, "torch_warning": _torch_warning(cuda),
                "driver_version": gpu.get("driver_version"), "driver_cuda": gpu.get("cuda_driver_version")}
    listed = " ".join(arch_texts)
    if missing:
        who = ", ".join(f"GPU {g['index']} {g['name']} (compute capability {g['capability']}, {g['needs']})"
                        for g in missing)
        yield Hit(
            message=(f"torch {torch.get('version')} has no kernels for {who}: its arch list is [{listed}], so "
                     "CUDA work fails with 'no kernel image is available for execution on the device'"),
            evidence=evidence,
            **_arch_fix(missing, arches, facts).hit(),
        )
        return
    who = ", ".join(f"GPU {g['index']} {g['name']} ({g['capability']}, via {'/'.join(g['ptx'])})" for g in ptx_only)
    yield Hit(
        message=(f"torch {torch.get('version')} has machine code for none of {who}, only PTX: the driver "
                 "JIT-compiles every kernel on first use (minutes at start-up, again whenever the JIT cache "
                 "~/.nv/ComputeCache is cold or too small), and a driver older than the PTX's CUDA cannot compile it"),
        evidence=evidence,
        **_arch_fix(ptx_only, arches, facts,
                    note="meanwhile CUDA_CACHE_MAXSIZE=4294967296 keeps the JIT results between runs").hit(),
        severity=Severity.WARNING,
    )


def foreign_cuda_libraries(gpu: GpuFacts | None) -> list[tuple[CudaLibrary, CudaLibrary]]:
    """(the one loaded first, torch's own) for each CUDA library of torch's that a searched-first folder shadows."""
    native = gpu.get("native_libraries") if gpu else None
    if not native:
        return []
    shipped = {lib["name"]: lib for lib in native["shipped"] if lib["resolves_to"]}
    pairs: list[tuple[CudaLibrary, CudaLibrary]] = []
    seen: set[str] = set()
    for lib in native["on_library_path"]:
        own = shipped.get(lib["name"])
        if own is None or lib["name"] in seen or not lib["resolves_to"]:
            continue
        seen.add(lib["name"])  # the loader takes the first folder that has the name
        if lib["resolves_to"] != own["resolves_to"]:
            pairs.append((lib, own))
    return pairs


def find_foreign_cuda_libraries(facts: Facts) -> Iterator[Hit]:
    pairs = foreign_cuda_libraries(facts["gpu"])
    if not pairs:
        return
    native: NativeLibsFacts | dict[str, list[str]] = facts["gpu"].get("native_libraries") or {}
    names = ", ".join(f"{lib['name']} from {lib['folder']} ({lib['via']})" for lib, _ in pairs)
    folders = list(dict.fromkeys(lib["folder"] for lib, _ in pairs if lib["via"] == "LD_LIBRARY_PATH"))
    levers = ([f"without {', '.join(folders)} on LD_LIBRARY_PATH"] if folders else []) + \
        (["without LD_PRELOAD"] if any(lib["via"] == "LD_PRELOAD" for lib, _ in pairs) else [])
    yield Hit(
        message=(f"{len(pairs)} CUDA librar{'y' if len(pairs) == 1 else 'ies'} that torch ships would load from "
                 f"another folder first: {names}; the dynamic loader searches LD_PRELOAD and LD_LIBRARY_PATH "
                 "before torch's own folders, so another version loads (undefined symbols at import, or "
                 "'cuDNN version incompatibility' at run time)"),
        evidence={"libraries": [{"name": lib["name"], "loaded_from": lib["folder"], "via": lib["via"],
                                 "resolves_to": lib["resolves_to"], "torch_ships": own["resolves_to"]}
                                for lib, own in pairs],
                  "ld_library_path": native.get("ld_library_path", []), "ld_preload": native.get("ld_preload", [])},
        fix=(f"start training {' and '.join(levers)} (unload the cluster module that adds them, e.g. "
             "`module unload cudnn nccl`, or drop the folders from LD_LIBRARY_PATH in the job script): torch "
             "finds the libraries it ships without them"),
    )


RULES = {
    "GPU001": find_unusable_cuda,
    "GPU002": find_old_driver,
    "GPU003": find_busy_gpus,
    "GPU004": find_arch_not_in_build,
    "GPU005": find_foreign_cuda_libraries,
}

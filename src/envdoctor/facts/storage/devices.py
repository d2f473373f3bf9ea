"""What a mount rests on: bind mounts, overlay layers, loop files, and the block devices at the bottom.

A block device is read from /sys/block: rotational or not, NVMe, virtual (virtio, Xen, Hyper-V:
their rotational flag is the hypervisor's, not a measurement), a RAM disk, a loop device (and its
file), or a device-mapper / md stack (as fast as its slowest member). Windows has no mountinfo: a
UNC path, or a drive CIM reports as a network drive (facts.windows), is a network mount.
Every reader takes /sys's root as an argument, so tests feed it saved copies.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from envdoctor.facts.kernel_files import read_kernel_file
from envdoctor.facts.storage.mounts import classify_fstype, find_mount

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.windows import WindowsDrive


class BlockDevice(TypedDict, total=False):
    """A disk from /sys/block: medium nvme, ssd, hdd, virtual, ram, loop, stacked, mixed or unknown."""

    name: str
    dev: str
    rotational: bool | None
    rotational_note: str
    sysfs_path: str
    medium: str
    backing_file: str | None
    #: The devices a device-mapper or md device is built on.
    slaves: list[BlockDevice]


class MountChain(TypedDict, total=False):
    """The mount behind a path, and (`backing`) what it rests on: an overlay's layer, a loop's file."""

    path: str
    mount_point: str | None
    fstype: str | None
    source: str
    mount_root: str
    mount_options: str
    #: local, ram, network, fuse (a FUSE daemon not known to be local or remote) or unknown.
    kind: str
    backend: str
    fuse: bool
    device: BlockDevice | None
    bind_of: str
    overlay: dict[str, list[str]]
    backing: MountChain | None
    backing_note: str
    layer: str


class EffectiveMedium(TypedDict):
    """The bottom of the mount chain: what reads of the data really hit."""

    kind: str | None
    fstype: str | None
    mount_point: str | None
    medium: str
    rotational: bool | None
    device: str | None


class FastMount(TypedDict):
    """A local NVMe/SSD mount with room: somewhere to copy the data to."""

    mount_point: str
    device: str
    medium: str
    free_bytes: int


def describe_block_device(dev: str, sys_root: Path = Path("/sys"), depth: int = 0) -> BlockDevice | None:
    """The disk behind a `major:minor`: name, rotational, medium, and what it stacks on.

    A partition is described by its disk; device-mapper and md devices by the
    devices in their `slaves/` folder; a loop device by the file behind it.
    """
    link = sys_root / "dev" / "block" / dev
    try:
        real = Path(os.path.realpath(link)) if link.exists() else None
    except OSError:
        real = None
    if real is None:
        return None
    if (real / "partition").exists():
        real = real.parent
    name = real.name
    rotational = read_kernel_file(real / "queue" / "rotational")
    device_path = str(real)
    info: BlockDevice = {
        "name": name,
        "dev": dev,
        "rotational": None if rotational is None else rotational == "1",
        "sysfs_path": device_path.replace(str(sys_root), "/sys", 1),
    }
    info["medium"] = _medium(name, device_path, info["rotational"])
    if info["medium"] == "loop":
        info["backing_file"] = read_kernel_file(real / "loop" / "backing_file")
    elif info["medium"] == "virtual":
        # virtio-blk and Xen disks report rotational=1 by default: the flag is
        # the hypervisor's, not a measurement of the host's storage.
        info["rotational_note"] = "set by the hypervisor, not measured: the read probe judges this disk"
    slaves_dir = real / "slaves"
    if depth < 4 and slaves_dir.is_dir():
        lower = [described for slave in sorted(slaves_dir.iterdir())
                 if (slave_dev := read_kernel_file(slave / "dev"))
                 and (described := describe_block_device(slave_dev, sys_root, depth + 1))]
        if lower:
            _stacked_on(info, lower)
    return info


#: A device's name prefix -> its medium, before its place in /sys or its rotational flag are asked.
_MEDIUM_BY_NAME = (("nvme", "nvme"), (("zram", "ram", "pmem"), "ram"), ("loop", "loop"))
#: Where a virtual disk sits in /sys (virtio, Xen, Hyper-V's vmbus), or how it is named.
_VIRTUAL_PATHS = ("/virtio", "/xen", "/vmbus")
_VIRTUAL_NAMES = ("vd", "xvd")


def _medium(name: str, device_path: str, rotational: bool | None) -> str:
    """nvme, ram, loop, virtual, stacked (device-mapper, md), hdd, ssd or unknown."""
    medium = next((medium for prefix, medium in _MEDIUM_BY_NAME if name.startswith(prefix)), None)
    if medium is not None:
        return medium
    if any(part in device_path for part in _VIRTUAL_PATHS) or name.startswith(_VIRTUAL_NAMES):
        return "virtual"
    if name.startswith(("dm-", "md")):
        return "stacked"
    if rotational is None:
        return "unknown"
    return "hdd" if rotational else "ssd"


def _stacked_on(info: BlockDevice, lower: list[BlockDevice]) -> None:
    """A device-mapper or md device from its members: LVM or RAID is as fast as its slowest member."""
    info["slaves"] = lower
    info["rotational"] = any(s.get("rotational") for s in lower)
    media = {s.get("medium", "unknown") for s in lower}
    if info["rotational"]:
        info["medium"] = "hdd" if media <= {"hdd", "stacked"} else "mixed"
    elif media <= {"nvme"}:
        info["medium"] = "nvme"
    elif media <= {"nvme", "ssd"}:
        info["medium"] = "ssd"


def _overlay_layers(super_options: str) -> dict[str, list[str]]:
    layers: dict[str, list[str]] = {}
    for option in super_options.split(","):
        key, _, value = option.partition("=")
        if key in ("lowerdir", "upperdir", "workdir") and value:
            layers[key] = [p for p in value.split(":") if p]
    return layers


def resolve_storage(path: str, mounts: list[dict[str, Any]], sys_root: Path = Path("/sys"),
                    depth: int = 0) -> MountChain:
    """The mount behind `path` and what it rests on, followed as far as this namespace sees."""
    mount = find_mount(path, mounts)
    if mount is None:
        return {"path": path, "mount_point": None, "fstype": None, "kind": "unknown"}
    kind = classify_fstype(mount["fstype"], mount["source"])
    info: MountChain = {
        "path": path,
        "mount_point": mount["mount_point"],
        "fstype": mount["fstype"],
        "source": mount["source"],
        "mount_root": mount["root"],
        "mount_options": mount["options"],
        **kind,
        "device": None,
    }
    if mount["root"] not in ("/", ""):
        # A bind mount shows the folder of its file system that it exposes.
        info["bind_of"] = mount["root"]
    if mount["fstype"] == "overlay":
        layers = _overlay_layers(mount["super_options"])
        info["overlay"] = layers
        # New files land in the upper layer, the image's files in the lower ones;
        # the upper layer's file system is the one a dataset copied in uses.
        for key in ("upperdir", "lowerdir"):
            for layer in layers.get(key, []):
                if depth < 3 and os.path.isdir(layer):
                    backing = resolve_storage(layer, mounts, sys_root, depth + 1)
                    backing["layer"] = key
                    info["backing"] = backing
                    break
            if "backing" in info:
                break
        else:
            info["backing"] = None
            info["backing_note"] = "the overlay's layers are not visible from this mount namespace"
    elif kind["kind"] in ("local",) and not mount["dev"].startswith("0:"):
        device = describe_block_device(mount["dev"], sys_root)
        info["device"] = device
        backing_file = device.get("backing_file") if device else None
        if backing_file and depth < 3:
            backing = resolve_storage(backing_file.removesuffix(" (deleted)"), mounts, sys_root, depth + 1)
            backing["layer"] = "loop"
            info["backing"] = backing
    return info


def bottom_of(chain: MountChain) -> MountChain:
    """The last mount of the chain: the one whose file system holds the bytes."""
    node = chain
    while True:
        below = node.get("backing")
        if not below:
            return node
        node = below


def effective_medium(info: MountChain) -> EffectiveMedium:
    """The bottom of the chain: the medium, rotational flag and kind that reads really hit."""
    node = bottom_of(info)
    device: BlockDevice = node.get("device") or {}
    medium = device.get("medium")
    kind = node.get("kind")
    if kind == "ram":
        medium = "ram"
    elif kind in ("network", "fuse"):
        medium = kind
    return {
        "kind": node.get("kind"),
        "fstype": node.get("fstype"),
        "mount_point": node.get("mount_point"),
        "medium": medium or "unknown",
        "rotational": device.get("rotational"),
        "device": device.get("name"),
    }


def fast_local_mounts(mounts: list[dict[str, Any]], sys_root: Path = Path("/sys"),
                      statvfs: Any = None) -> list[FastMount]:
    """Mounts on local NVMe or SSD disks, with free space, most free first: where to copy data to.

    Only block-device mounts are looked at (statvfs on a hung network mount
    would block), and each device once, at its first writable mount point.
    """
    if sys.platform == "win32":
        return []  # no mount table, no statvfs
    statvfs = statvfs or os.statvfs
    found: dict[str, FastMount] = {}
    for mount in mounts:
        if mount["dev"].startswith("0:") or mount["dev"] in found or mount["root"] not in ("/", ""):
            continue
        if mount["mount_point"].startswith(("/boot", "/snap", "/proc", "/sys", "/dev")):
            continue
        if mount["options"].split(",")[0] != "rw":
            continue
        device = describe_block_device(mount["dev"], sys_root)
        medium = device.get("medium") if device else None
        if not device or medium not in ("nvme", "ssd"):
            continue
        try:
            st = statvfs(mount["mount_point"])
        except OSError:
            continue
        found[mount["dev"]] = {"mount_point": mount["mount_point"], "device": device.get("name", "?"),
                               "medium": medium, "free_bytes": st.f_bavail * st.f_frsize}
    return sorted(found.values(), key=lambda m: -m["free_bytes"])


def _unc_share(path: str) -> str | None:
    """`\\\\server\\share` of a UNC path (`\\\\?\\UNC\\server\\share\\...` too), else None."""
    text = path.replace("/", "\\")
    if text.upper().startswith("\\\\?\\UNC\\"):
        text = "\\\\" + text[8:]
    elif text.startswith("\\\\?\\") or text.startswith("\\\\.\\"):
        return None  # a long local path (\\?\\C:\\...) or a device
    if not text.startswith("\\\\"):
        return None
    parts = [p for p in text[2:].split("\\") if p]
    return "\\\\" + "\\".join(parts[:2]) if len(parts) >= 2 else None


def windows_mount(path: str, real: str, drives: list[WindowsDrive]) -> MountChain:
    """The mount behind a Windows path: a UNC share, or the drive and what CIM says it is."""
    for candidate in (path, real):
        share = _unc_share(candidate)
        if share:
            return {"path": path, "mount_point": share, "fstype": "smb", "source": share, "kind": "network",
                    "backend": "smb", "device": None}
    letter = (path[:2] if path[1:2] == ":" else real[:2] if real[1:2] == ":" else "").upper()
    drive = next((d for d in drives if d["device"] == letter), None) if letter else None
    if drive is None:
        return {"path": path, "mount_point": letter or None, "fstype": None, "kind": "unknown", "device": None}
    if drive["kind"] == "network":
        source = drive["provider"] or letter
        return {"path": path, "mount_point": letter, "fstype": "smb", "source": source, "kind": "network",
                "backend": "smb", "device": None}
    return {"path": path, "mount_point": letter, "fstype": drive["filesystem"], "source": letter,
            "kind": "ram" if drive["kind"] == "ram" else "local", "backend": drive["kind"], "device": None}

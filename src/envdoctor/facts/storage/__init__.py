"""Storage facts: where the training data lives and how fast it can be read.

For the data path (`--data`, else the working directory) this finds the mount
in /proc/self/mountinfo, follows bind mounts, overlayfs layers, loop devices
and device-mapper/md stacks down to the block devices behind it, and reads
from /sys/block whether they are rotational, NVMe, virtual (virtio, Xen) or a
RAM disk. Network and FUSE file systems are told by their type. A bounded
walk samples the files (count, median and p90 size), and a short read probe,
bounded in bytes and seconds, measures sequential and random reads on the
user's own files.

The read probe keeps the page cache out of its numbers where it can: it
opens files with O_DIRECT, and where the file system refuses that it drops the
file's cached pages with posix_fadvise(DONTNEED) before and after reading.
The method used is recorded (`cache_bypass`), so a figure served from RAM is
never passed off as a disk's. Every reader takes the paths it reads as
arguments, so tests can feed it saved copies of /proc and /sys.

macOS has no mountinfo: its mounts come from `mount` (facts.macos), judged by
the same file-system types (smbfs, nfs, afpfs, webdav are network). Windows
has neither: a UNC path (`\\\\server\\share\\...`) or a drive that CIM reports
as a network drive (facts.windows) is a network mount, named by its share.
O_DIRECT and posix_fadvise are Linux's, so elsewhere the read probe reads
through the cache and says so (`cache_bypass: none`).

The work is split by job: `mounts` (the mount table and file-system types), `devices` (what a
mount rests on, down to the block devices), `sampling` (the bounded walk over the data's files)
and `read_speed` (the read probe). This module gathers the section from them; its names are the
section's public API.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TypedDict

from envdoctor.facts.applicability import Applicability
from envdoctor.facts.storage.devices import (
    BlockDevice,
    EffectiveMedium,
    FastMount,
    MountChain,
    bottom_of,
    describe_block_device,
    effective_medium,
    fast_local_mounts,
    resolve_storage,
    windows_mount,
)
from envdoctor.facts.storage.mounts import (
    LOCAL_FUSE,
    NETWORK_FSTYPES,
    NETWORK_FUSE,
    RAM_FSTYPES,
    FsKind,
    classify_fstype,
    find_mount,
    mountinfo_text,
    parse_mountinfo,
)
from envdoctor.facts.storage.read_speed import READ_MAX_BYTES, READ_MAX_SECONDS, ReadPass, ReadProbe, read_probe
from envdoctor.facts.storage.sampling import SAMPLE_MAX_FILES, SAMPLE_MAX_SECONDS, FileSample, sample_files

__all__ = [
    "LOCAL_FUSE", "NETWORK_FSTYPES", "NETWORK_FUSE", "RAM_FSTYPES", "READ_MAX_BYTES", "READ_MAX_SECONDS",
    "SAMPLE_MAX_FILES", "SAMPLE_MAX_SECONDS", "BlockDevice", "EffectiveMedium", "FastMount", "FileSample", "FsKind",
    "MountChain", "ReadPass", "ReadProbe", "StorageFacts", "bottom_of", "classify_fstype", "describe_block_device",
    "effective_medium", "fast_local_mounts", "find_mount", "gather_storage", "parse_mountinfo", "read_probe",
    "resolve_storage", "sample_files", "windows_mount",
]


class _StorageRequired(TypedDict):
    path: str
    #: "--data", or "working directory" when no data path was given.
    source: str
    exists: bool


class StorageFacts(_StorageRequired, Applicability, total=False):
    """The `storage` facts section (what `gather_storage` returns; the report's facts.storage)."""

    error: str
    realpath: str
    mount: MountChain | None
    mount_error: str
    effective: EffectiveMedium
    fast_local_mounts: list[FastMount]
    sample: FileSample
    read_probe: ReadProbe


def _gather_mounts(section: StorageFacts, real: str, mountinfo: Path, sys_root: Path) -> None:
    """The mount chain from Linux's mountinfo, or from `mount` on macOS."""
    if sys.platform == "darwin" and mountinfo == Path("/proc/self/mountinfo"):
        from envdoctor.facts.macos import read_mounts

        mounts = read_mounts()
    else:
        mounts = parse_mountinfo(mountinfo_text(mountinfo))
    if not mounts:
        section["mount"] = None
        section["mount_error"] = f"{mountinfo} could not be read (not Linux?)"
        return
    mount = resolve_storage(real, mounts, sys_root)
    section["mount"] = mount
    section["effective"] = effective_medium(mount)
    section["fast_local_mounts"] = fast_local_mounts(mounts, sys_root)


def gather_storage(facts: Any, mountinfo: Path = Path("/proc/self/mountinfo"),
                   sys_root: Path = Path("/sys")) -> StorageFacts:
    """The storage section: the data path's mount, device, file sample and read speed."""
    config = facts.config
    given = config.data
    path = given or os.getcwd()
    section: StorageFacts = {"path": path, "source": "--data" if given else "working directory", "exists": False}
    if not os.path.exists(path):
        section["error"] = f"{path} does not exist"
        return section
    section["exists"] = True
    real = os.path.realpath(path)
    section["realpath"] = real
    if sys.platform == "win32":
        from envdoctor.facts.windows import read_cim

        cim = read_cim()
        mount = windows_mount(path, real, cim["drives"] if cim else [])
        section["mount"] = mount
        section["effective"] = effective_medium(mount)
    else:
        _gather_mounts(section, real, mountinfo, sys_root)
    sample, files = sample_files(real)
    section["sample"] = sample
    if given or config.deep:
        # Bounded like every read here: READ_MAX_BYTES and READ_MAX_SECONDS, --deep or not.
        probe = read_probe(files)
        if section.get("effective", {}).get("medium") == "ram":
            probe["note"] = "RAM-backed: these figures are memory speed, whatever the cache method"
        section["read_probe"] = probe
    else:
        section["read_probe"] = {"skipped": "no --data given: the working directory is not read"}
    return section

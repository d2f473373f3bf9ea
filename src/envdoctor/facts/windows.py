"""What Windows says about memory commit and drives, from one bounded PowerShell CIM query.

Two facts matter for training there and have no POSIX counterpart. The
commit limit (physical memory plus the paging file): every spawned DataLoader
worker imports torch afresh and commits its own copy of torch's DLLs, and
when the sum passes the limit Windows refuses with `[WinError 1455] The
paging file is too small for this operation to complete`. And mapped network
drives: `Z:\\data` looks like a local path, but CIM's Win32_LogicalDisk says
DriveType 4 (network) and names the share behind it.

`parse_cim` reads the JSON `ConvertTo-Json` prints (the fixtures hold such
output), `read_cim` runs the query once per process, bounded; outside
Windows, or when PowerShell cannot run, it answers None.
"""
from __future__ import annotations

import functools
import json
import sys
from typing import TypedDict

from envdoctor.process import run_bounded

#: The PowerShell query: the OS's memory (KiB) and every logical disk, as one JSON object.
CIM_QUERY = (
    "$os = Get-CimInstance Win32_OperatingSystem | Select-Object TotalVisibleMemorySize,FreePhysicalMemory,"
    "TotalVirtualMemorySize,FreeVirtualMemory; "
    "$disks = @(Get-CimInstance Win32_LogicalDisk | Select-Object DeviceID,DriveType,ProviderName,FileSystem,"
    "Size,FreeSpace); "
    "@{os=$os; disks=$disks} | ConvertTo-Json -Depth 3 -Compress"
)
CIM_TIMEOUT_S = 15.0
#: Win32_LogicalDisk.DriveType values.
DRIVE_TYPES = {0: "unknown", 1: "no-root", 2: "removable", 3: "local", 4: "network", 5: "cd", 6: "ram"}


class WindowsDrive(TypedDict):
    """A logical disk: `C:`, or a mapped share (`kind` network, `provider` the `\\\\server\\share`)."""

    device: str
    kind: str
    provider: str | None
    filesystem: str | None


class WindowsCim(TypedDict):
    """Memory in bytes (the commit limit is physical memory plus the paging file) and the drives."""

    commit_limit: int | None
    commit_available: int | None
    drives: list[WindowsDrive]


def _kib(value: object) -> int | None:
    try:
        return int(value) * 1024 if isinstance(value, (int, float, str)) else None
    except (TypeError, ValueError):
        return None


def parse_cim(text: str) -> WindowsCim | None:
    """The query's JSON as facts; None when it is not the object the query prints."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    os_info: dict[str, object] = data["os"] if isinstance(data.get("os"), dict) else {}
    disks = data.get("disks")
    if isinstance(disks, dict):  # ConvertTo-Json writes a one-element array as the element itself
        disks = [disks]
    drives: list[WindowsDrive] = []
    for disk in disks if isinstance(disks, list) else []:
        if not isinstance(disk, dict) or not isinstance(disk.get("DeviceID"), str):
            continue
        drive_type = disk.get("DriveType")
        kind = DRIVE_TYPES.get(drive_type if isinstance(drive_type, int) else 0, "unknown")
        provider, filesystem = disk.get("ProviderName"), disk.get("FileSystem")
        drives.append({"device": disk["DeviceID"].upper(), "kind": kind,
                       "provider": provider if isinstance(provider, str) else None,
                       "filesystem": filesystem if isinstance(filesystem, str) else None})
    facts: WindowsCim = {"commit_limit": _kib(os_info.get("TotalVirtualMemorySize")),
                         "commit_available": _kib(os_info.get("FreeVirtualMemory")), "drives": drives}
    return facts


@functools.lru_cache(maxsize=1)
def read_cim() -> WindowsCim | None:
    """The live query, once per process (system and storage facts both read it); None off Windows."""
    if sys.platform != "win32":
        return None
    run = run_bounded(["powershell", "-NoProfile", "-NonInteractive", "-Command", CIM_QUERY], CIM_TIMEOUT_S)
    return parse_cim(run.stdout.strip()) if run.ok else None

"""What macOS says through sysctl and mount: performance and efficiency cores, mounted volumes.

Apple silicon has two kinds of cores: `hw.perflevel0.logicalcpu` performance
cores and `hw.perflevel1.logicalcpu` efficiency cores. os.cpu_count() counts
both, so num_workers=os.cpu_count() puts half the workers on cores several
times slower, and the step waits for the slowest worker's batch. Intel Macs
have no perflevels (the keys are unknown to sysctl), and then both counts are
None. `mount` lists the volumes with their types (apfs, smbfs, nfs, afpfs,
webdav …), the macOS counterpart of Linux's mountinfo.

Parsers take the commands' text (the fixtures hold captured output); the
readers run the commands bounded, and answer None off macOS.
"""
from __future__ import annotations

import re
import sys

from envdoctor.process import run_bounded

SYSCTL_TIMEOUT_S = 5.0
PERFLEVEL_KEYS = ("hw.perflevel0.logicalcpu", "hw.perflevel1.logicalcpu")
#: `mount` prints: `//user@server/share on /Volumes/share (smbfs, nodev, nosuid, mounted by user)`.
_MOUNT_LINE = re.compile(r"^(?P<source>.+?) on (?P<point>/.*?) \((?P<options>[^()]*)\)$")


def parse_sysctl(text: str) -> dict[str, str]:
    """`sysctl NAME ...` output (`name: value` lines) as {name: value}; unknown names are simply absent."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() and " " not in name.strip():
            values[name.strip()] = value.strip()
    return values


def core_counts(values: dict[str, str]) -> tuple[int | None, int | None]:
    """(performance cores, efficiency cores) from sysctl's perflevel keys; None where absent."""
    counts = []
    for key in PERFLEVEL_KEYS:
        text = values.get(key, "")
        counts.append(int(text) if text.isdigit() else None)
    return counts[0], counts[1]


def read_core_counts() -> tuple[int | None, int | None]:
    if sys.platform != "darwin":
        return None, None
    # Exits non-zero on an Intel Mac (unknown oid) yet still prints any key it knows.
    run = run_bounded(["sysctl", *PERFLEVEL_KEYS], SYSCTL_TIMEOUT_S)
    return core_counts(parse_sysctl(run.stdout))


def parse_mount(text: str) -> list[dict[str, object]]:
    """`mount` output as mounts shaped like storage.parse_mountinfo's (no device numbers, no bind roots)."""
    mounts = []
    for index, line in enumerate(text.splitlines()):
        match = _MOUNT_LINE.match(line.strip())
        if not match:
            continue
        fstype, *options = [part.strip() for part in match.group("options").split(",")]
        mounts.append({"mount_id": index, "parent_id": 0, "dev": "", "root": "/", "mount_point": match.group("point"),
                       "options": ",".join(options), "fstype": fstype, "source": match.group("source"),
                       "super_options": ""})
    return mounts


def read_mounts() -> list[dict[str, object]]:
    if sys.platform != "darwin":
        return []
    run = run_bounded(["/sbin/mount"], SYSCTL_TIMEOUT_S)
    return parse_mount(run.stdout) if run.ok else []

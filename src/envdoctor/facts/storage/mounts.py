"""The mount table: /proc/self/mountinfo parsed, the mount serving a path, what a file-system type is.

mountinfo escapes space, tab, newline and backslash in its paths; a later mount on the same
point hides an earlier one. Network and FUSE file systems are told by their type (and a FUSE
daemon by its subtype or source), from the tables below.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

#: File system types whose data travels over a network.
NETWORK_FSTYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
    "afs", "panfs", "wekafs", "orangefs", "pvfs2", "9p", "davfs", "ncpfs", "coda", "ocfs2", "gfs2",
    "afpfs", "webdav", "smb",  # macOS's names, and what a Windows share is called here
})
#: FUSE file systems known to fetch their data from a network or object store.
NETWORK_FUSE = frozenset({
    "s3fs", "gcsfuse", "rclone", "sshfs", "goofys", "juicefs", "mountpoint-s3", "blobfuse",
    "blobfuse2", "glusterfs", "ceph-fuse", "cvmfs2", "alluxio-fuse", "geesefs", "davfs",
    "oss2fuse", "ossfs", "cosfs", "s3backer", "lizardfs", "moosefs", "mfs", "sfs", "hdfs",
})
#: FUSE file systems that serve local data (not a network concern).
LOCAL_FUSE = frozenset({"lxcfs", "squashfuse", "fuse-overlayfs", "bindfs", "ntfs-3g", "exfat", "gvfsd-fuse"})
#: Memory-backed file systems.
RAM_FSTYPES = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 …)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[dict[str, Any]]:
    """/proc/self/mountinfo as a list of mounts, in the kernel's order (later mounts on top)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        head = left.split()
        tail = right.split()
        if len(head) < 6 or len(tail) < 2:
            continue
        mounts.append({
            "mount_id": int(head[0]),
            "parent_id": int(head[1]),
            "dev": head[2],
            "root": _unescape(head[3]),
            "mount_point": _unescape(head[4]),
            "options": head[5],
            "fstype": tail[0],
            "source": _unescape(tail[1]),
            "super_options": tail[2] if len(tail) > 2 else "",
        })
    return mounts


def _within(path: str, mount_point: str) -> bool:
    if mount_point == "/":
        return True
    return path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def find_mount(path: str, mounts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The mount that serves `path`: the longest mount point above it, the last one stacked there."""
    best = None
    for mount in mounts:
        if _within(path, mount["mount_point"]):
            if best is None or len(mount["mount_point"]) >= len(best["mount_point"]):
                best = mount
    return best


class FsKind(TypedDict, total=False):
    kind: str
    backend: str
    fuse: bool


def classify_fstype(fstype: str, source: str = "") -> FsKind:
    """What kind of file system a type names: local, ram, network, fuse (network or local)."""
    base, _, sub = fstype.partition(".")
    if fstype in NETWORK_FSTYPES:
        return {"kind": "network", "backend": fstype}
    if fstype in RAM_FSTYPES:
        return {"kind": "ram", "backend": fstype}
    if base in ("fuse", "fuseblk"):
        # The subtype names the daemon; some (mountpoint-s3, gcsfuse) show plain "fuse"
        # with the daemon's name as the source.
        backend = sub or source.split("/")[-1].split(":")[0] or "unknown"
        if base == "fuseblk" and not sub:
            return {"kind": "local", "backend": "fuseblk", "fuse": True}
        if backend in LOCAL_FUSE:
            return {"kind": "local", "backend": backend, "fuse": True}
        if backend in NETWORK_FUSE:
            return {"kind": "network", "backend": backend, "fuse": True}
        return {"kind": "fuse", "backend": backend, "fuse": True}
    return {"kind": "local", "backend": fstype}


def mountinfo_text(path: Path) -> str:
    """The mount table's text, or "" when it cannot be read (not Linux, no /proc)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""

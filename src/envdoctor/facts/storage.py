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
"""
from __future__ import annotations

import errno
import mmap
import os
import random
import stat
import statistics
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

from envdoctor.facts.applicability import Applicability
from envdoctor.facts.kernel_files import read_kernel_file
from envdoctor.facts.readfile import open_regular


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


class FileSample(TypedDict):
    """The bounded walk's count of the data's files and their sizes."""

    file_count: int
    directories: int
    truncated: bool
    #: Entries that could not be read or stat-ed (permissions, symlink loops, vanished files).
    unreadable: int
    #: FIFOs, sockets and devices met on the walk: never opened.
    special: int
    total_bytes: int
    median_bytes: int | None
    p90_bytes: int | None
    max_files: int
    seconds: float


class ReadPass(TypedDict, total=False):
    """One pass of the read probe: sequential (largest files, front to back) or random."""

    bytes: int
    files: int
    reads: int
    seconds: float
    mib_per_s: float | None
    reads_per_s: float | None


class ReadProbe(TypedDict, total=False):
    """The read probe's figures, or `skipped` with the reason it did not run."""

    skipped: str
    max_bytes: int
    max_seconds: float
    seconds: float
    timed_out: bool
    sequential: ReadPass | None
    random: ReadPass | None
    bytes_read: int
    #: How the page cache was kept out of the figures: o_direct, fadvise_dontneed, none.
    cache_bypass: str | None
    note: str


class FastMount(TypedDict):
    """A local NVMe/SSD mount with room: somewhere to copy the data to."""

    mount_point: str
    device: str
    medium: str
    free_bytes: int


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


#: File system types whose data travels over a network.
NETWORK_FSTYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
    "afs", "panfs", "wekafs", "orangefs", "pvfs2", "9p", "davfs", "ncpfs", "coda", "ocfs2", "gfs2",
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

#: Bounds of the directory walk.
SAMPLE_MAX_FILES = 2000
SAMPLE_MAX_SECONDS = 1.0
#: Bounds of the read probe: at most this many bytes and seconds, all reads together.
READ_MAX_BYTES = 64 * 1024**2
READ_MAX_SECONDS = 2.0
SEQUENTIAL_CHUNK = 1024**2
RANDOM_BLOCK = 64 * 1024
#: A file below this is read whole by the random-read pass (what a Dataset's __getitem__ does).
SMALL_FILE = 1024**2
#: O_DIRECT reads are aligned to this (the page size covers every common block size).
ALIGN = 4096


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
    if name.startswith("nvme"):
        medium = "nvme"
    elif name.startswith(("zram", "ram", "pmem")):
        medium = "ram"
    elif name.startswith("loop"):
        medium = "loop"
        info["backing_file"] = read_kernel_file(real / "loop" / "backing_file")
    elif "/virtio" in device_path or name.startswith(("vd", "xvd")) or "/xen" in device_path \
            or "/vmbus" in device_path:
        # virtio-blk and Xen disks report rotational=1 by default: the flag is
        # the hypervisor's, not a measurement of the host's storage.
        medium = "virtual"
        info["rotational_note"] = "set by the hypervisor, not measured: the read probe judges this disk"
    elif name.startswith(("dm-", "md")):
        medium = "stacked"
    elif info["rotational"] is True:
        medium = "hdd"
    elif info["rotational"] is False:
        medium = "ssd"
    else:
        medium = "unknown"
    info["medium"] = medium
    slaves_dir = real / "slaves"
    if depth < 4 and slaves_dir.is_dir():
        lower: list[BlockDevice] = []
        for slave in sorted(slaves_dir.iterdir()):
            slave_dev = read_kernel_file(slave / "dev")
            if slave_dev:
                described = describe_block_device(slave_dev, sys_root, depth + 1)
                if described:
                    lower.append(described)
        if lower:
            info["slaves"] = lower
            info["rotational"] = any(s.get("rotational") for s in lower)
            # LVM or RAID is as fast as its slowest member.
            media = {s.get("medium", "unknown") for s in lower}
            if info["rotational"]:
                info["medium"] = "hdd" if media <= {"hdd", "stacked"} else "mixed"
            elif media <= {"nvme"}:
                info["medium"] = "nvme"
            elif media <= {"nvme", "ssd"}:
                info["medium"] = "ssd"
    return info


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


def _quantile(sorted_values: list[int], q: float) -> int:
    index = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[index]


def sample_files(root: str, max_files: int = SAMPLE_MAX_FILES,
                 max_seconds: float = SAMPLE_MAX_SECONDS) -> tuple[FileSample, list[tuple[str, int]]]:
    """A bounded breadth-first walk: how many files, and how big; and the (path, size) list it saw.

    Stops at `max_files` files or `max_seconds`, whichever comes first, and
    says so (`truncated`), so a huge tree never stalls the report. Only regular
    files are counted: FIFOs, sockets and devices are never opened (`special`),
    symlinked folders are not followed (no loops), and an entry that cannot be
    stat-ed (a symlink loop, no permission) is counted as `unreadable`.
    """
    start = time.monotonic()
    files: list[tuple[str, int]] = []
    directories = 0
    unreadable = 0
    special = 0
    truncated = False
    if os.path.isfile(root):
        try:
            files.append((root, os.stat(root).st_size))
        except OSError:
            unreadable += 1
    queue = [root] if os.path.isdir(root) else []
    while queue and not truncated:
        folder = queue.pop(0)
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if len(files) >= max_files or time.monotonic() - start > max_seconds:
                        truncated = True
                        break
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            directories += 1
                            queue.append(entry.path)
                            continue
                        info = entry.stat()  # follows a symlink to a file; a loop raises ELOOP
                    except OSError:
                        unreadable += 1
                        continue
                    if stat.S_ISREG(info.st_mode):
                        files.append((entry.path, info.st_size))
                    elif not stat.S_ISDIR(info.st_mode):
                        special += 1
        except OSError:
            unreadable += 1
    sizes = sorted(size for _, size in files)
    sample: FileSample = {
        "file_count": len(files),
        "directories": directories,
        "truncated": truncated or bool(queue),
        "unreadable": unreadable,
        "special": special,
        "total_bytes": sum(sizes),
        "median_bytes": int(statistics.median(sizes)) if sizes else None,
        "p90_bytes": _quantile(sizes, 0.9) if sizes else None,
        "max_files": max_files,
        "seconds": round(time.monotonic() - start, 4),
    }
    return sample, files


class _Budget:
    """Bytes and seconds left to the read probe; every read asks it first."""

    def __init__(self, max_bytes: int, max_seconds: float) -> None:
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.start = time.monotonic()
        self.read = 0

    def allow(self, wanted: int) -> int:
        if time.monotonic() - self.start >= self.max_seconds:
            return 0
        return max(0, min(wanted, self.max_bytes - self.read))


def _drop_cache(fd: int) -> bool:
    """Evict the file's clean pages from the page cache (a no-op on tmpfs)."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except (AttributeError, OSError):
        return False


class _Reader:
    """Opens files bypassing the page cache if it can, and remembers how it did."""

    def __init__(self) -> None:
        self.methods: set[str] = set()
        self._direct_ok = hasattr(os, "O_DIRECT")
        # O_DIRECT needs an aligned buffer; an anonymous mmap is page-aligned.
        self._buffer = mmap.mmap(-1, SEQUENTIAL_CHUNK)

    def open(self, path: str) -> tuple[int, bool]:
        """A descriptor of the regular file at `path`; OSError for anything else.

        Opened non-blocking and checked with fstat on that very descriptor: a
        file swapped for a FIFO after the walk would otherwise block the probe.
        """
        if self._direct_ok:
            try:
                return open_regular(path, os.O_DIRECT), True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # tmpfs and some FUSE file systems refuse O_DIRECT: read through the cache.
        fd = open_regular(path)
        # Drop pages a previous reader left, so this read reaches the device.
        _drop_cache(fd)
        return fd, False

    def read(self, fd: int, direct: bool, offset: int, allowance: int) -> int:
        """Read at `offset`, never more than `allowance` bytes; the bytes read (0 at the end)."""
        if direct:
            # O_DIRECT wants aligned lengths: round down so the allowance holds.
            length = min(SEQUENTIAL_CHUNK, allowance - allowance % ALIGN)
            if length <= 0:
                return 0
            try:
                got = os.preadv(fd, [memoryview(self._buffer)[:length]], offset)
                self.methods.add("o_direct")
                return got
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._direct_ok = False  # the file system takes the flag but not the reads
                self.methods.add("fadvise_dontneed")
                _drop_cache(fd)
        return len(os.pread(fd, min(allowance, SEQUENTIAL_CHUNK), offset))

    def close(self, fd: int, direct: bool) -> None:
        if not direct:
            # Leave the cache as we found it: our reads must not speed up the next measurement.
            self.methods.add("fadvise_dontneed" if _drop_cache(fd) else "none")
        os.close(fd)


def _sequential(files: list[tuple[str, int]], budget: _Budget, reader: _Reader) -> ReadPass:
    """Largest files first, front to back in 1 MiB reads: the streaming rate."""
    done = 0
    opened = 0
    start = time.monotonic()
    for path, size in sorted(files, key=lambda f: -f[1]):
        if size <= 0:
            continue
        if budget.allow(ALIGN) < ALIGN:
            break
        try:
            fd, direct = reader.open(path)
        except OSError:
            continue
        opened += 1
        try:
            offset = 0
            while offset < size:
                allowance = budget.allow(SEQUENTIAL_CHUNK)
                if allowance <= 0:
                    break
                got = reader.read(fd, direct, offset, allowance)
                if got <= 0:
                    break
                offset += got
                done += got
                budget.read += got
        except OSError:
            pass
        finally:
            reader.close(fd, direct)
    seconds = time.monotonic() - start
    # `files` says what the rate measured: over files smaller than a read it is the
    # cost of opening files, not the streaming rate (the random pass judges those).
    return {"bytes": done, "files": opened, "seconds": round(seconds, 4),
            "mib_per_s": round(done / 1024**2 / seconds, 2) if done and seconds > 0 else None}


def _random(files: list[tuple[str, int]], budget: _Budget, reader: _Reader, rng: random.Random) -> ReadPass:
    """Random reads the way a map-style Dataset does them: whole small files, or blocks of big ones."""
    done = 0
    reads = 0
    start = time.monotonic()
    candidates = [f for f in files if f[1] > 0]
    rng.shuffle(candidates)
    for path, size in candidates:
        if size <= SMALL_FILE:
            offset, want = 0, size + (-size) % ALIGN
        else:
            offset = rng.randrange(0, size - RANDOM_BLOCK) // ALIGN * ALIGN
            want = RANDOM_BLOCK
        allowance = budget.allow(want)
        if allowance < min(want, ALIGN):
            break
        try:
            fd, direct = reader.open(path)
        except OSError:
            continue
        got = 0
        try:
            while got < min(size - offset, allowance):
                step = reader.read(fd, direct, offset + got, allowance - got)
                if step <= 0:
                    break
                got += step
        except OSError:
            pass
        finally:
            reader.close(fd, direct)
        done += got
        budget.read += got
        reads += 1
    seconds = time.monotonic() - start
    return {"bytes": done, "reads": reads, "seconds": round(seconds, 4),
            "mib_per_s": round(done / 1024**2 / seconds, 2) if done and seconds > 0 else None,
            "reads_per_s": round(reads / seconds, 1) if reads and seconds > 0 else None}


def read_probe(files: list[tuple[str, int]], max_bytes: int = READ_MAX_BYTES,
               max_seconds: float = READ_MAX_SECONDS, seed: int = 0) -> ReadProbe:
    """Measure sequential and random reads on real files, within `max_bytes` and `max_seconds`.

    Half of each budget goes to each pass. The reads run in a thread so a
    file system that stops answering (a hung NFS server) cannot hold the
    report past the limit: the probe then says it timed out.
    """
    sequential: list[ReadPass] = []
    random_pass: list[ReadPass] = []
    methods: set[str] = set()

    def work() -> None:
        reader = _Reader()
        seq_budget = _Budget(max_bytes // 2, max_seconds / 2)
        sequential.append(_sequential(files, seq_budget, reader))
        rand_budget = _Budget(max_bytes - seq_budget.read, max_seconds - (time.monotonic() - seq_budget.start))
        random_pass.append(_random(files, rand_budget, reader, random.Random(seed)))
        methods.update(reader.methods)

    thread = threading.Thread(target=work, name="envdoctor-read-probe", daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(max_seconds + 1.0)
    elapsed = time.monotonic() - start
    used = sorted(methods)
    passes = [*sequential, *random_pass]
    return {
        "max_bytes": max_bytes,
        "max_seconds": max_seconds,
        "seconds": round(elapsed, 4),
        "timed_out": thread.is_alive(),
        "sequential": sequential[0] if sequential else None,
        "random": random_pass[0] if random_pass else None,
        "bytes_read": sum(p.get("bytes", 0) for p in passes),
        "cache_bypass": ("o_direct" if used == ["o_direct"] else "+".join(used) or None),
    }


def fast_local_mounts(mounts: list[dict[str, Any]], sys_root: Path = Path("/sys"),
                      statvfs: Any = os.statvfs) -> list[FastMount]:
    """Mounts on local NVMe or SSD disks, with free space, most free first: where to copy data to.

    Only block-device mounts are looked at (statvfs on a hung network mount
    would block), and each device once, at its first writable mount point.
    """
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


def _mountinfo_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


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
    mounts = parse_mountinfo(_mountinfo_text(mountinfo))
    if not mounts:
        section["mount"] = None
        section["mount_error"] = f"{mountinfo} could not be read (not Linux?)"
    else:
        mount = resolve_storage(real, mounts, sys_root)
        section["mount"] = mount
        section["effective"] = effective_medium(mount)
        section["fast_local_mounts"] = fast_local_mounts(mounts, sys_root)
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

"""A real FUSE mount: DSK002 and DSK004 against a user-space file system served by this test.

No FUSE tools or libfuse are installed here, but the kernel has FUSE and
/dev/fuse, so the test speaks the FUSE protocol itself: it opens /dev/fuse,
mounts a read-only file system of the type `fuse.envdoctortest` with mount(2),
and answers the kernel's requests from a thread (INIT, LOOKUP, GETATTR,
OPEN/OPENDIR, READDIR, READ, RELEASE, STATFS). Every READ is delayed by a few
milliseconds, as a network-backed FUSE daemon would be. `envdoctor report`
then runs against it as a separate process.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support import findings, json_report, run_envdoctor

IN_HEADER = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, extlen, padding
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
READ_IN = struct.Struct("<QQII")  # fh, offset, size, read_flags (the rest is not needed)
INIT_OUT = struct.Struct("<IIIIHHIIHHII6I")

LOOKUP, FORGET, GETATTR, OPEN, READ, STATFS, RELEASE = 1, 2, 3, 14, 15, 17, 18
FLUSH, INIT, OPENDIR, READDIR, RELEASEDIR, INTERRUPT, BATCH_FORGET = 25, 26, 27, 28, 29, 36, 42
NO_REPLY = {FORGET, BATCH_FORGET, INTERRUPT}

FILE_COUNT = 30
FILE_SIZE = 64 * 1024
READ_DELAY_S = 0.01


class ToyFuse:
    """A read-only directory of FILE_COUNT files, each FILE_SIZE bytes, served over /dev/fuse."""

    def __init__(self, mount_point: Path) -> None:
        self.mount_point = mount_point
        self.fd = -1
        self.thread: threading.Thread | None = None
        self.reads = 0
        self.names = {f"{i:03d}.bin": i + 2 for i in range(FILE_COUNT)}  # name -> node id

    def mount(self) -> None:
        self.fd = os.open("/dev/fuse", os.O_RDWR)
        libc = ctypes.CDLL(None, use_errno=True)
        options = f"fd={self.fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
        if libc.mount(b"envdoctor-toy", str(self.mount_point).encode(), b"fuse.envdoctortest",
                      ctypes.c_ulong(2 | 4), options) != 0:  # MS_NOSUID | MS_NODEV
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, os.strerror(err))
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.mount_point)], capture_output=True)
        if self.thread:
            self.thread.join(5)
        if self.fd >= 0:
            os.close(self.fd)

    def attr(self, node: int) -> bytes:
        now = int(time.time())
        if node == 1:
            return ATTR.pack(1, 0, 0, now, now, now, 0, 0, 0, stat.S_IFDIR | 0o755, 2, 0, 0, 0, 4096, 0)
        return ATTR.pack(node, FILE_SIZE, FILE_SIZE // 512, now, now, now, 0, 0, 0, stat.S_IFREG | 0o644,
                         1, 0, 0, 0, 4096, 0)

    def reply(self, unique: int, payload: bytes = b"", error: int = 0) -> None:
        os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(payload), -error, unique) + payload)

    def serve(self) -> None:
        while True:
            try:
                request = os.read(self.fd, 1024 * 1024 + 4096)
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                return  # ENODEV: unmounted
            _, opcode, unique, node, *_ = IN_HEADER.unpack_from(request)
            body = request[IN_HEADER.size:]
            if opcode in NO_REPLY:
                continue
            try:
                self.handle(opcode, unique, node, body)
            except OSError:
                return

    def handle(self, opcode: int, unique: int, node: int, body: bytes) -> None:
        if opcode == INIT:
            major, minor, readahead, _ = struct.unpack_from("<IIII", body)
            self.reply(unique, INIT_OUT.pack(7, min(minor, 31), readahead, 0, 16, 12, 128 * 1024, 1, 0, 0, 0,
                                             0, 0, 0, 0, 0, 0, 0))
        elif opcode == LOOKUP:
            name = body.split(b"\0", 1)[0].decode()
            if node != 1 or name not in self.names:
                self.reply(unique, error=errno.ENOENT)
            else:
                child = self.names[name]
                self.reply(unique, struct.pack("<QQQQII", child, 0, 1, 1, 0, 0) + self.attr(child))
        elif opcode == GETATTR:
            self.reply(unique, struct.pack("<QII", 1, 0, 0) + self.attr(node))
        elif opcode in (OPEN, OPENDIR):
            self.reply(unique, struct.pack("<QII", node, 0, 0))
        elif opcode == READDIR:
            _, offset, size, _ = READ_IN.unpack_from(body)
            entries = [(1, ".", 4), (1, "..", 4)] + [(n, name, 8) for name, n in self.names.items()]
            out = b""
            for index, (ino, name, kind) in enumerate(entries[offset:], start=offset + 1):
                raw = name.encode()
                dirent = struct.pack("<QQII", ino, index, len(raw), kind) + raw
                dirent += b"\0" * (-len(dirent) % 8)
                if len(out) + len(dirent) > size:
                    break
                out += dirent
            self.reply(unique, out)
        elif opcode == READ:
            _, offset, size, _ = READ_IN.unpack_from(body)
            time.sleep(READ_DELAY_S)  # a network round trip
            self.reads += 1
            self.reply(unique, bytes([node % 251]) * max(0, min(size, FILE_SIZE - offset)))
        elif opcode == STATFS:
            self.reply(unique, struct.pack("<QQQQQIIII6I", 1000, 0, 0, FILE_COUNT, 0, 4096, 255, 4096, 0,
                                           0, 0, 0, 0, 0, 0))
        elif opcode in (RELEASE, RELEASEDIR, FLUSH):
            self.reply(unique)
        else:
            self.reply(unique, error=errno.ENOSYS)


@pytest.fixture
def toy_fuse(tmp_path: Path):
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("a FUSE mount needs root and /dev/fuse")
    point = tmp_path / "fuse"
    point.mkdir()
    fs = ToyFuse(point)
    try:
        fs.mount()
    except OSError as exc:
        pytest.skip(f"FUSE mount not allowed here: {exc}")
    try:
        yield fs
    finally:
        fs.unmount()


@pytest.mark.slow
def test_real_fuse_mount_fires_dsk002_and_dsk004(toy_fuse: ToyFuse) -> None:
    point = toy_fuse.mount_point
    assert sorted(os.listdir(point))[:2] == ["000.bin", "001.bin"]
    proc = run_envdoctor("report", "--json", "--no-loader", "--data", str(point),
                         "--select", "DSK001", "DSK002", "DSK003", "DSK004", timeout=60)
    report = json_report(proc)
    storage = report["facts"]["storage"]
    assert storage["mount"]["fstype"] == "fuse.envdoctortest"
    assert storage["mount"]["source"] == "envdoctor-toy"
    assert storage["sample"]["file_count"] == FILE_COUNT
    assert storage["sample"]["median_bytes"] == FILE_SIZE
    dsk002 = findings(report, "DSK002")
    assert len(dsk002) == 1
    assert dsk002[0]["evidence"]["fstype"] == "fuse.envdoctortest"
    assert dsk002[0]["evidence"]["backend"] == "envdoctortest" and dsk002[0]["evidence"]["fuse"] is True
    # Every read waited READ_DELAY_S in the daemon: the probe measures it, DSK004 reports it.
    probe = storage["read_probe"]
    assert probe["bytes_read"] > 0 and toy_fuse.reads > 0
    dsk004 = findings(report, "DSK004")
    assert len(dsk004) == 1, probe
    assert dsk004[0]["evidence"]["random_reads_per_s"] < 1 / READ_DELAY_S
    assert findings(report, "DSK001") == [] and findings(report, "DSK003") == []

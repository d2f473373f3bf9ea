"""Storage facts and the DSK rules, on this machine's real mounts and on saved /proc and /sys samples.

Real states first: the root disk, /dev/shm, and mounts the tests make
themselves (tmpfs, a loop-mounted ext4 image, overlayfs, a bind mount, a
blkio-throttled loop device). Rotational disks and network file systems are
not on this machine, so those cases feed the parser mountinfo and /sys trees
saved in fixtures in the kernel's format.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from bounds import static_check_limits, within
from envdoctor.config import Config
from envdoctor.facts import Facts
from envdoctor.facts.storage import (
    READ_MAX_SECONDS,
    SAMPLE_MAX_SECONDS,
    classify_fstype,
    effective_medium,
    fast_local_mounts,
    gather_storage,
    parse_mountinfo,
    read_probe,
    resolve_storage,
    sample_files,
)
from envdoctor.rules.storage import RULES
from support import findings, json_report, run_envdoctor

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def materialize(manifest: Path, root: Path) -> Path:
    """Build a /sys-like tree (files and symlinks) from a saved JSON manifest."""
    data = json.loads(manifest.read_text())
    for rel, text in data["files"].items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    for rel, target in data["links"].items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
    return root


def fixture_storage(name: str, path: str, tmp_path: Path) -> dict:
    mounts = parse_mountinfo((FIXTURES / "mountinfo" / f"{name}.txt").read_text())
    sys_root = materialize(FIXTURES / "sysblock" / f"{name}.json", tmp_path / "sys")
    mount = resolve_storage(path, mounts, sys_root)
    free = {"/": 200 * 1024**3, "/raid": 3 * 1024**4, "/cache": 500 * 1024**3}
    fast = fast_local_mounts(mounts, sys_root, statvfs=lambda p: os.statvfs_result(
        (4096, 4096, 0, 0, free.get(p, 1024**3) // 4096, 0, 0, 0, 0, 255)))
    return {"path": path, "exists": True, "mount": mount, "effective": effective_medium(mount),
            "fast_local_mounts": fast,
            "sample": {"file_count": 10, "median_bytes": 10**6, "p90_bytes": 10**6, "truncated": False},
            "read_probe": {"skipped": "fixture"}}


def run_rule(rule: str, storage: dict, config: Config | None = None, usable: int = 4) -> list:
    facts = Facts.from_dict({"storage": storage, "system": {"cpu": {"usable": usable, "count": usable}}},
                            config or Config(no_loader=True))
    return list(RULES[rule](facts))


def _dev_of(path: str) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


# --- the real machine -------------------------------------------------------------------------


def test_real_root_disk_resolves_to_its_block_device(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(os.urandom(10000))
    section = gather_storage(Facts(Config(data=str(tmp_path))))
    mount = section["mount"]
    root = next(m for m in parse_mountinfo(Path("/proc/self/mountinfo").read_text())
                if m["mount_point"] == mount["mount_point"])
    assert mount["fstype"] == root["fstype"]
    if mount["device"] is not None:  # a real block device (not overlay/tmpfs as in some CI runners)
        assert mount["device"]["dev"] == _dev_of(str(tmp_path))
        sysfs = Path("/sys/block") / mount["device"]["name"] / "queue" / "rotational"
        assert mount["device"]["rotational"] == (sysfs.read_text().strip() == "1")
    assert section["sample"]["file_count"] == 1
    assert section["read_probe"]["bytes_read"] > 0


def test_virtio_disk_is_not_called_rotational(tmp_path: Path) -> None:
    """This VM's root disk is virtio-blk, which says rotational=1; DSK001 must not trust that."""
    section = gather_storage(Facts(Config(data=str(tmp_path))))
    device = section["mount"].get("device") or {}
    if device.get("medium") != "virtual":
        pytest.skip("the working disk here is not a virtual disk")
    assert run_rule("DSK001", section) == []


def test_dev_shm_is_ram(tmp_path: Path) -> None:
    section = gather_storage(Facts(Config(data="/dev/shm")))
    assert section["mount"]["fstype"] == "tmpfs"
    assert section["effective"]["medium"] == "ram"
    assert section["effective"]["kind"] == "ram"
    for rule in ("DSK001", "DSK002"):
        assert run_rule(rule, section) == []


def test_working_directory_is_sampled_but_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "x.txt").write_text("hello")
    monkeypatch.chdir(tmp_path)
    section = gather_storage(Facts(Config()))
    assert section["source"] == "working directory"
    assert section["sample"]["file_count"] == 1
    assert "skipped" in section["read_probe"]


def test_missing_data_path_is_a_fact(tmp_path: Path) -> None:
    section = gather_storage(Facts(Config(data=str(tmp_path / "nope"))))
    assert section["exists"] is False and "does not exist" in section["error"]
    assert run_rule("DSK004", section) == []


@pytest.mark.parametrize("command", [("check", "--no-loader", "--select", "DSK"), ("loader", "--budget", "5")])
def test_a_missing_data_path_is_a_usage_error_not_a_clean_report(tmp_path: Path, command) -> None:
    # Before: `envdoctor check --data /typo` printed "0 errors, 0 warnings" and exited 0.
    proc = run_envdoctor(*command, "--data", str(tmp_path / "typo"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (f"envdoctor: error: the data path {tmp_path / 'typo'} does not exist "
                                   "(--data, or `data` in pyproject.toml)")
    assert "0 errors" not in proc.stdout


@pytest.fixture
def mounted(tmp_path: Path):
    """Mount things for one test and always unmount them."""
    if not IS_ROOT or not shutil.which("mount"):
        pytest.skip("mounting needs root")
    done: list[str] = []
    loops: list[str] = []

    def mount(*args: str) -> None:
        proc = subprocess.run(["mount", *args], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"mount {' '.join(args)} failed here: {proc.stderr.strip()}")
        done.append(args[-1])

    mount.loops = loops  # type: ignore[attr-defined]
    yield mount
    for point in reversed(done):
        subprocess.run(["umount", "-l", point], capture_output=True)
    for loop in loops:
        subprocess.run(["losetup", "-d", loop], capture_output=True)


def test_tmpfs_mounted_in_the_test(tmp_path: Path, mounted) -> None:
    point = tmp_path / "ram"
    point.mkdir()
    mounted("-t", "tmpfs", "-o", "size=8m", "tmpfs", str(point))
    (point / "f").write_bytes(b"x" * 5000)
    section = gather_storage(Facts(Config(data=str(point))))
    assert section["mount"]["mount_point"] == str(point)
    assert section["mount"]["fstype"] == "tmpfs"
    assert section["effective"]["medium"] == "ram"


def test_bind_mount_shows_the_folder_it_exposes(tmp_path: Path, mounted) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    mounted("--bind", str(tmp_path / "src"), str(tmp_path / "dst"))
    section = gather_storage(Facts(Config(data=str(tmp_path / "dst"))))
    mount = section["mount"]
    assert mount["mount_point"] == str(tmp_path / "dst")
    assert mount["bind_of"].endswith(str(tmp_path / "src")) or mount["bind_of"].endswith("src")
    assert section["effective"]["fstype"] == mount["fstype"]


def test_overlay_is_followed_to_its_upper_layer(tmp_path: Path, mounted) -> None:
    for name in ("lower", "upper", "work", "merged"):
        (tmp_path / name).mkdir()
    (tmp_path / "lower" / "a").write_text("x")
    mounted("-t", "overlay", "overlay", "-o",
            f"lowerdir={tmp_path/'lower'},upperdir={tmp_path/'upper'},workdir={tmp_path/'work'}",
            str(tmp_path / "merged"))
    section = gather_storage(Facts(Config(data=str(tmp_path / "merged"))))
    mount = section["mount"]
    assert mount["fstype"] == "overlay"
    assert mount["overlay"]["upperdir"] == [str(tmp_path / "upper")]
    backing = mount["backing"]
    assert backing["layer"] == "upperdir"
    assert backing["path"] == str(tmp_path / "upper")
    assert section["effective"]["fstype"] == backing["fstype"] != "overlay"


@pytest.mark.slow
def test_loop_device_is_followed_to_its_backing_file(tmp_path: Path, mounted) -> None:
    if not shutil.which("mkfs.ext4") or not shutil.which("losetup"):
        pytest.skip("needs mkfs.ext4 and losetup")
    image = tmp_path / "disk.img"
    with open(image, "wb") as fh:
        fh.truncate(16 * 1024**2)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    proc = subprocess.run(["losetup", "--show", "-f", str(image)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"no loop device: {proc.stderr.strip()}")
    loop = proc.stdout.strip()
    mounted.loops.append(loop)
    point = tmp_path / "mnt"
    point.mkdir()
    mounted(loop, str(point))
    (point / "data.bin").write_bytes(os.urandom(100_000))
    section = gather_storage(Facts(Config(data=str(point))))
    mount = section["mount"]
    assert mount["fstype"] == "ext4"
    assert mount["device"]["name"] == os.path.basename(loop)
    assert mount["device"]["medium"] == "loop"
    assert mount["device"]["backing_file"] == str(image)
    assert mount["backing"]["layer"] == "loop"
    assert mount["backing"]["path"] == str(image)
    assert section["read_probe"]["cache_bypass"] == "o_direct"


# --- saved samples: rotational, network, FUSE -------------------------------------------------


def test_mountinfo_parser_reads_the_kernel_format() -> None:
    mounts = parse_mountinfo((FIXTURES / "mountinfo" / "hpc_node.txt").read_text())
    home = next(m for m in mounts if m["mount_point"] == "/home")
    assert home["fstype"] == "nfs4"
    assert home["source"] == "fs01.cluster.local:/export/home"
    assert "rsize=1048576" in home["super_options"]
    assert any(m["mount_point"] == "/mnt/my data" for m in mounts)  # \040 unescaped


def test_hdd_partition_fires_dsk001(tmp_path: Path) -> None:
    storage = fixture_storage("hpc_node", "/data/imagenet/train", tmp_path)
    assert storage["mount"]["device"]["name"] == "sdb"  # the partition sdb1 is described by its disk
    hits = run_rule("DSK001", storage)
    assert len(hits) == 1
    assert hits[0].evidence["device"] == "sdb"
    assert hits[0].evidence["rotational"] is True
    assert hits[0].evidence["mount_point"] == "/data"
    assert "WebDataset" in hits[0].fix
    # The roomiest local NVMe array seen on this node is where the copy should go.
    assert "rsync -a /data/imagenet/train/ /raid/train/ (md127, nvme, 3.0 TiB free)" in hits[0].fix


def test_bind_mount_of_hdd_fires_dsk001(tmp_path: Path) -> None:
    storage = fixture_storage("hpc_node", "/workspace/sets/coco", tmp_path)
    assert storage["mount"]["bind_of"] == "/sets"
    assert run_rule("DSK001", storage)[0].evidence["device"] == "sdb"


def test_lvm_on_hdd_is_rotational_through_its_slaves(tmp_path: Path) -> None:
    storage = fixture_storage("hpc_node", "/archive/x", tmp_path)
    device = storage["mount"]["device"]
    assert device["name"] == "dm-0" and device["slaves"][0]["name"] == "sdc"
    assert device["medium"] == "hdd"  # dm-0 says rotational=0 itself; its disk does not
    hits = run_rule("DSK001", storage)
    assert hits and hits[0].evidence["device"] == "dm-0"


def test_nvme_and_nvme_raid_stay_quiet(tmp_path: Path) -> None:
    for path in ("/opt/x", "/raid/x", "/mnt/my data/x"):
        storage = fixture_storage("hpc_node", path, tmp_path / path.replace("/", "_"))
        assert run_rule("DSK001", storage) == [], path
        assert run_rule("DSK002", storage) == [], path
    assert fixture_storage("hpc_node", "/opt", tmp_path / "o")["effective"]["medium"] == "nvme"
    assert fixture_storage("hpc_node", "/raid/x", tmp_path / "r")["effective"]["medium"] == "nvme"


def test_fix_without_a_fast_local_disk_points_at_local_scratch(tmp_path: Path) -> None:
    storage = fixture_storage("cloud_vm", "/mnt/gcs/train", tmp_path)
    assert storage["fast_local_mounts"] == []  # the only disk is a virtio one
    hits = run_rule("DSK002", storage)
    assert 'rsync -a /mnt/gcs/train/ "${TMPDIR:-/tmp}"/train/ on node-local NVMe or SSD' in hits[0].fix
    # The command is pasted as it stands: a folder with a space is one shell word.
    spaced = run_rule("DSK002", fixture_storage("cloud_vm", "/mnt/gcs/my train", tmp_path / "spaced"))
    assert """rsync -a '/mnt/gcs/my train/' "${TMPDIR:-/tmp}"/'my train/' on""" in spaced[0].fix


@pytest.mark.parametrize("path,fstype,backend,source", [
    ("/home/alice/data", "nfs4", "nfs4", "fs01.cluster.local:/export/home"),
    ("/scratch/run1", "lustre", "lustre", "10.1.0.20@o2ib:/scratch"),
    ("/gpfs/projects/p", "gpfs", "gpfs", "projects"),
    ("/mnt/beegfs/d", "beegfs", "beegfs", "beegfs_nodev"),
    ("/mnt/old-nfs/d", "nfs", "nfs", "nas02:/volume1/datasets"),
])
def test_network_file_systems_fire_dsk002(tmp_path: Path, path, fstype, backend, source) -> None:
    hits = run_rule("DSK002", fixture_storage("hpc_node", path, tmp_path))
    assert len(hits) == 1
    assert hits[0].evidence["fstype"] == fstype
    assert hits[0].evidence["backend"] == backend
    assert hits[0].evidence["source"] == source
    assert "num_workers=8" in hits[0].fix  # 2 × the 4 usable CPUs: network readers mostly wait


@pytest.mark.parametrize("path,backend", [
    ("/mnt/gcs/train", "gcsfuse"), ("/mnt/s3/x", "s3fs"), ("/mnt/remote/x", "rclone"),
    ("/mnt/mps3/x", "mountpoint-s3"), ("/mnt/sshdata/x", "sshfs"), ("/mnt/mystery/x", "mysteryfs"),
    ("/mnt/share/x", "cifs"), ("/mnt/smb/x", "smb3"),
])
def test_fuse_and_smb_fire_dsk002(tmp_path: Path, path, backend) -> None:
    hits = run_rule("DSK002", fixture_storage("cloud_vm", path, tmp_path))
    assert len(hits) == 1 and hits[0].evidence["backend"] == backend
    assert hits[0].evidence["fuse"] == (backend not in ("cifs", "smb3"))


def test_local_fuse_and_virtio_boot_disk_stay_quiet(tmp_path: Path) -> None:
    assert run_rule("DSK002", fixture_storage("cloud_vm", "/var/lib/lxcfs/x", tmp_path / "a")) == []
    boot = fixture_storage("cloud_vm", "/home/u/data", tmp_path / "b")
    assert boot["effective"]["medium"] == "virtual" and boot["effective"]["rotational"] is True
    assert run_rule("DSK001", boot) == []


def test_k8s_pod_host_path_on_hdd_and_nfs_volume(tmp_path: Path) -> None:
    data = fixture_storage("k8s_pod", "/data/train", tmp_path / "a")
    assert data["mount"]["bind_of"] == "/datasets/imagenet"
    assert run_rule("DSK001", data)[0].evidence["device"] == "sdc"
    models = run_rule("DSK002", fixture_storage("k8s_pod", "/models/m", tmp_path / "b"))
    assert models[0].evidence["source"] == "10.96.0.50:/models"
    # The overlay root's layers live in the host's namespace: said, not guessed.
    root = fixture_storage("k8s_pod", "/workspace", tmp_path / "c")
    assert root["mount"]["fstype"] == "overlay" and root["mount"]["backing"] is None
    assert "not visible" in root["mount"]["backing_note"]
    # The stacked /dev/shm: the last mount on a mount point is the one in use.
    assert fixture_storage("k8s_pod", "/dev/shm/x", tmp_path / "d")["mount"]["source"] == "tmpfs"


def test_classify_fstype_names() -> None:
    assert classify_fstype("fuse.gcsfuse")["kind"] == "network"
    assert classify_fstype("fuse", "mountpoint-s3")["backend"] == "mountpoint-s3"
    assert classify_fstype("fuseblk")["kind"] == "local"
    assert classify_fstype("xfs") == {"kind": "local", "backend": "xfs"}


# --- sample and read probe --------------------------------------------------------------------


def test_many_small_files_fire_dsk003(tmp_path: Path) -> None:
    data = tmp_path / "train"
    for shard in range(3):
        (data / f"class{shard}").mkdir(parents=True)
        for i in range(400):
            (data / f"class{shard}" / f"{i}.jpg").write_bytes(b"\xff" * (2000 + i))
    section = gather_storage(Facts(Config(data=str(data))))
    assert section["sample"]["file_count"] == 1200
    hits = run_rule("DSK003", section)
    assert len(hits) == 1
    assert hits[0].evidence["file_count"] == 1200
    assert 2000 <= hits[0].evidence["median_bytes"] <= 2400
    assert hits[0].evidence["truncated"] is False


def test_many_small_files_in_the_working_directory_are_not_data_dsk003(tmp_path: Path, monkeypatch) -> None:
    for i in range(1200):
        (tmp_path / f"module_{i}.py").write_bytes(b"x" * 900)
    monkeypatch.chdir(tmp_path)
    section = gather_storage(Facts(Config()))
    assert section["source"] == "working directory" and section["sample"]["file_count"] == 1200
    assert run_rule("DSK003", section) == []


def test_few_large_files_stay_quiet_dsk003(tmp_path: Path) -> None:
    for i in range(5):
        with open(tmp_path / f"shard-{i}.tar", "wb") as fh:
            fh.truncate(50 * 1024**2)
    section = gather_storage(Facts(Config(data=str(tmp_path))))
    assert run_rule("DSK003", section) == []


def test_sample_walk_is_bounded(tmp_path: Path) -> None:
    for i in range(150):
        (tmp_path / f"{i}").write_bytes(b"x")
    sample, _ = sample_files(str(tmp_path), max_files=100)
    assert sample["file_count"] == 100 and sample["truncated"] is True


def test_read_probe_keeps_its_byte_budget(tmp_path: Path) -> None:
    files = []
    for i in range(8):
        path = tmp_path / f"f{i}"
        path.write_bytes(os.urandom(1024**2 + 777))
        files.append((str(path), path.stat().st_size))
    max_bytes = 3 * 1024**2 + 123
    result = read_probe(files, max_bytes=max_bytes, max_seconds=10.0)
    assert 0 < result["bytes_read"] <= max_bytes
    assert result["sequential"]["bytes"] <= max_bytes // 2
    assert result["timed_out"] is False
    assert result["cache_bypass"] in ("o_direct", "fadvise_dontneed", "fadvise_dontneed+o_direct")


def test_read_probe_keeps_its_time_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A virtual clock that each read advances by 10 ms: a 100 MiB/s device, whatever this machine's load.
    from envdoctor.facts.storage import read_speed

    class Clock:
        now = 1000.0

        def monotonic(self) -> float:
            return self.now

    clock = Clock()
    real_read = read_speed._Reader.read

    def timed_read(self: read_speed._Reader, fd: int, direct: bool, offset: int, allowance: int) -> int:
        clock.now += 0.01
        return real_read(self, fd, direct, offset, allowance)

    monkeypatch.setattr(read_speed, "time", clock)
    monkeypatch.setattr(read_speed._Reader, "read", timed_read)
    # 64 sparse files of 64 MiB: far more than 0.3 s of such a device reads, in either pass (the random
    # pass reads one block a file), without writing anything.
    files = []
    for i in range(64):
        path = tmp_path / f"sparse{i}"
        with open(path, "wb") as fh:
            fh.truncate(64 * 1024**2)
        files.append((str(path), 64 * 1024**2))
    result = read_probe(files, max_bytes=64 * 1024**3, max_seconds=0.3)
    assert result["timed_out"] is False  # it stopped itself, it was not abandoned
    assert result["seconds"] <= 0.3 + 0.01 + 1e-9  # the budget, and at most the one read in flight
    sequential, random_pass = result["sequential"], result["random"]
    assert sequential is not None and random_pass is not None
    # Half the time each: 15 reads of 1 MiB (16 with the one in flight), then the random pass gets its half.
    assert 14 * 1024**2 <= sequential["bytes"] <= 16 * 1024**2, sequential
    assert 14 <= random_pass["reads"] <= 16, random_pass
    assert result["bytes_read"] == sequential["bytes"] + random_pass["bytes"]


def test_dsk004_fires_on_fixture_slow_numbers_and_not_on_fast_ones() -> None:
    slow = {"path": "/mnt/nfs/train", "exists": True, "mount": {"fstype": "nfs4"},
            "sample": {"median_bytes": 110 * 1024},
            "read_probe": {"sequential": {"bytes": 8 * 1024**2, "mib_per_s": 38.5},
                           "random": {"reads": 60, "reads_per_s": 29.5, "mib_per_s": 3.1},
                           "seconds": 2.0, "bytes_read": 9 * 1024**2, "cache_bypass": "o_direct",
                           "timed_out": False, "max_seconds": 2.0}}
    hits = run_rule("DSK004", slow)
    assert len(hits) == 1
    assert hits[0].evidence["sequential_mib_per_s"] == 38.5
    assert hits[0].evidence["random_reads_per_s"] == 29.5
    assert "29.5 a second" in hits[0].message
    fast = json.loads(json.dumps(slow))
    fast["read_probe"]["sequential"]["mib_per_s"] = 900.0
    fast["read_probe"]["random"]["reads_per_s"] = 5000.0
    assert run_rule("DSK004", fast) == []


def test_dsk004_does_not_call_small_files_slow_to_stream() -> None:
    # Measured on this machine's virtio disk: 1500 files of 2000 bytes. The sequential
    # pass opened 1500 files for 3 MB (6.7 MiB/s: the cost of opening files, not of
    # streaming); the random pass read the same files at 13149 a second; the same disk
    # streams a 64 MiB file at ~350 MiB/s. The many files are DSK003's finding, not slow reads.
    small = {"path": "/tmp/dsk/small", "exists": True, "mount": {"fstype": "ext4"},
             "sample": {"median_bytes": 2000},
             "read_probe": {"sequential": {"bytes": 3000000, "files": 1500, "seconds": 0.4268, "mib_per_s": 6.7},
                            "random": {"bytes": 3000000, "reads": 1500, "seconds": 0.1141, "mib_per_s": 25.08,
                                       "reads_per_s": 13149.0},
                            "seconds": 0.55, "bytes_read": 6000000, "cache_bypass": "o_direct",
                            "timed_out": False, "max_seconds": 2.0}}
    assert run_rule("DSK004", small) == []
    # The same small files read slowly one by one are still slow reads.
    slow = json.loads(json.dumps(small))
    slow["read_probe"]["random"].update(reads=60, seconds=0.5, reads_per_s=120.0, mib_per_s=0.23)
    [hit] = run_rule("DSK004", slow)
    assert "random reads manage 120 a second" in hit.message and "sequential" not in hit.message
    # Large files streamed slowly are judged by their sequential rate.
    streamed = json.loads(json.dumps(small))
    streamed["read_probe"]["sequential"].update(bytes=32 * 1024**2, files=2, seconds=1.0, mib_per_s=32.0)
    [hit] = run_rule("DSK004", streamed)
    assert "sequential reads give 32 MiB/s (below 100)" in hit.message


def test_sequential_pass_counts_the_files_it_read(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"{i}.bin").write_bytes(os.urandom(3000))
    result = read_probe(sample_files(str(tmp_path))[1], max_bytes=10**6, max_seconds=2.0)
    assert result["sequential"]["files"] == 5 and result["sequential"]["bytes"] == 15000


def test_dsk004_judges_against_the_needed_rate() -> None:
    storage = {"path": "/d", "exists": True, "mount": {"fstype": "ext4"}, "sample": {"median_bytes": 100 * 1024},
               "read_probe": {"sequential": {"bytes": 8 * 1024**2, "mib_per_s": 500.0},
                              "random": {"reads": 100, "reads_per_s": 400.0, "mib_per_s": 39.0},
                              "seconds": 1.0, "timed_out": False, "max_seconds": 2.0}}
    facts = Facts.from_dict({"storage": storage, "loader": {"batch_size": 256},
                             "system": {"cpu": {"usable": 4, "count": 4}}},
                            Config(step_time=0.25))
    hits = list(RULES["DSK004"](facts))  # 1024 samples/s × 100 KiB = 100 MiB/s needed
    assert hits and hits[0].evidence["needed"]["mib_per_s"] == pytest.approx(100.0)
    quiet = Facts.from_dict({"storage": storage, "loader": {"batch_size": 32},
                             "system": {"cpu": {"usable": 4, "count": 4}}}, Config(step_time=0.25))
    assert list(RULES["DSK004"](quiet)) == []


BLKIO = Path("/sys/fs/cgroup/blkio")


@pytest.mark.slow
def test_throttled_disk_fires_dsk004_end_to_end(tmp_path: Path, mounted) -> None:
    """A real slow disk: a loop device whose reads a blkio cgroup caps at 2 MiB/s."""
    if not (BLKIO / "blkio.throttle.read_bps_device").exists():
        pytest.skip("no cgroup v1 blkio throttling here")
    image = tmp_path / "slow.img"
    with open(image, "wb") as fh:
        fh.truncate(64 * 1024**2)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    proc = subprocess.run(["losetup", "--show", "-f", str(image)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("no loop device")
    loop = proc.stdout.strip()
    mounted.loops.append(loop)
    point = tmp_path / "mnt"
    point.mkdir()
    mounted(loop, str(point))
    for i in range(40):
        (point / f"{i}.bin").write_bytes(os.urandom(256 * 1024))
    subprocess.run(["sync"], check=True)
    group = BLKIO / f"envdoctor-test-{os.getpid()}"
    group.mkdir()
    try:
        # The mounted file system's device is the loop device: cap its reads at 2 MiB/s.
        (group / "blkio.throttle.read_bps_device").write_text(f"{_dev_of(str(point))} 2097152\n")
        proc = run_envdoctor(
            "report", "--json", "--no-loader", "--data", str(point), "--select", "DSK004", "DSK001",
            prefix_cmd=["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh"])
        report = json_report(proc)
    finally:
        group.rmdir()  # the command has exited, so the group is empty
    hits = findings(report, "DSK004")
    assert len(hits) == 1, report["facts"]["storage"]["read_probe"]
    assert hits[0]["evidence"]["sequential_mib_per_s"] < 10
    assert hits[0]["evidence"]["cache_bypass"] == "o_direct"
    assert findings(report, "DSK001") == []  # a loop device is not a rotating disk


# --- hostile data folders: FIFOs, symlink loops, devices, entries that cannot be read ---------


def hostile_folder(root: Path) -> Path:
    """A data folder with every kind of entry a careless or hostile tree holds, and two real files."""
    root.mkdir()
    (root / "real.bin").write_bytes(os.urandom(8192))
    (root / "sub").mkdir()
    (root / "sub" / "also.bin").write_bytes(os.urandom(4096))
    os.mkfifo(root / "pipe.bin")  # nobody ever writes: opening it for reading blocks forever
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")  # a symlink loop: stat raises ELOOP
    (root / "dangling").symlink_to(root / "gone")
    (root / "zero").symlink_to("/dev/zero")  # a device: reading never ends
    (root / "to_pipe").symlink_to("pipe.bin")
    (root / "self").symlink_to(".")  # a folder loop, were links followed
    return root


def test_walk_counts_only_regular_files_and_never_blocks(tmp_path: Path) -> None:
    root = hostile_folder(tmp_path / "data")
    start = time.monotonic()
    sample, files = sample_files(str(root))
    assert time.monotonic() - start < within(SAMPLE_MAX_SECONDS)  # the walk's own deadline, slack derived from it
    assert sorted(Path(p).name for p, _ in files) == ["also.bin", "real.bin"]
    assert sample["file_count"] == 2 and sample["total_bytes"] == 8192 + 4096
    assert sample["special"] == 3  # the FIFO, the link to it, /dev/zero
    assert sample["unreadable"] == 3  # two loop links and the dangling one
    assert sample["directories"] == 1 and sample["truncated"] is False


def test_read_probe_skips_a_file_swapped_for_a_fifo(tmp_path: Path) -> None:
    """A file the walk saw that is a FIFO (or /dev/zero) by the time it is read: skipped, never read or blocked on."""
    root = hostile_folder(tmp_path / "data")
    listed = [(str(root / "pipe.bin"), 10**6), (str(root / "zero"), 10**9), (str(root / "real.bin"), 8192)]
    start = time.monotonic()
    result = read_probe(listed, max_bytes=10**6, max_seconds=3.0)
    assert time.monotonic() - start < within(3.0 + 1.0)  # max_seconds, and the second read_probe waits past it
    assert result["timed_out"] is False
    assert result["bytes_read"] == 8192 * 2  # real.bin once in each pass, nothing from the FIFO or the device
    assert result["sequential"]["files"] == 1


def test_hostile_data_folder_is_reported_bounded_and_checked(tmp_path: Path) -> None:
    """envdoctor report --data on that folder, --deep: finishes, names what it skipped, reads within its bounds."""
    root = hostile_folder(tmp_path / "data")
    start = time.monotonic()
    bound = within(*static_check_limits(deep=True), SAMPLE_MAX_SECONDS, READ_MAX_SECONDS + 1.0)
    proc = run_envdoctor("report", "--json", "--data", str(root), "--deep", "--no-loader", "--select", "DSK",
                         timeout=2 * bound)
    assert time.monotonic() - start < bound  # the limits the code enforces, slack derived from them
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json_report(proc)
    storage = report["facts"]["storage"]
    assert storage["sample"]["file_count"] == 2 and storage["sample"]["special"] == 3
    probe = storage["read_probe"]
    assert probe["bytes_read"] <= probe["max_bytes"] and probe["timed_out"] is False
    assert report["errors"] == []


def test_deep_without_data_reads_the_working_directory_within_the_bounds(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from envdoctor.facts.storage import READ_MAX_BYTES, gather_storage

    for i in range(4):
        with open(tmp_path / f"big{i}.bin", "wb") as fh:
            fh.truncate(64 * 1024**2)  # 256 MiB of sparse files: more than the probe may read
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    section = gather_storage(Facts(Config(deep=True, no_loader=True)))
    assert time.monotonic() - start < within(SAMPLE_MAX_SECONDS, READ_MAX_SECONDS + 1.0)
    probe = section["read_probe"]
    assert probe["max_bytes"] == READ_MAX_BYTES and 0 < probe["bytes_read"] <= READ_MAX_BYTES


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_data_path_that_is_a_fifo_or_device_is_not_read(tmp_path: Path, kind: str) -> None:
    from envdoctor.facts.storage import gather_storage

    if kind == "fifo":
        data = tmp_path / "data.fifo"
        os.mkfifo(data)
    else:
        data = tmp_path / "data.dev"
        data.symlink_to("/dev/zero")
    start = time.monotonic()
    section = gather_storage(Facts(Config(data=str(data), no_loader=True)))
    assert time.monotonic() - start < within(SAMPLE_MAX_SECONDS, READ_MAX_SECONDS + 1.0)
    assert section["exists"] is True and section["sample"]["file_count"] == 0
    assert section["read_probe"]["bytes_read"] == 0

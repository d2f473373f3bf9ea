"""The cgroup and /dev/shm readers on saved cgroup trees (v1, v2, nested) and the live machine."""
from __future__ import annotations

import os
from pathlib import Path

from envdoctor.facts.system import (
    detect_container,
    parse_proc_cgroup,
    read_cpu_quota,
    read_memory_limit,
    read_shm,
    usable_cpus,
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_takes_the_tightest_quota_on_the_path(tmp_path: Path) -> None:
    proc = tmp_path / "proc_cgroup"
    write(proc, "0::/kubepods/pod1/ctr\n")
    root = tmp_path / "cg"
    write(root / "cgroup.controllers", "cpu memory\n")
    write(root / "kubepods/cpu.max", "max 100000\n")
    write(root / "kubepods/pod1/cpu.max", "150000 100000\n")
    write(root / "kubepods/pod1/ctr/cpu.max", "400000 100000\n")
    write(root / "kubepods/pod1/ctr/memory.max", "2147483648\n")
    write(root / "kubepods/pod1/ctr/memory.current", "1073741824\n")
    write(root / "kubepods/pod1/ctr/memory.stat", "anon 1\ninactive_file 268435456\n")
    assert read_cpu_quota(proc, root) == {"cgroup_version": 2, "quota_cpus": 1.5}
    assert read_memory_limit(proc, root) == {"cgroup_limit": 2147483648, "cgroup_usage": 805306368}


def test_cgroup_v1_quota_and_unlimited_memory(tmp_path: Path) -> None:
    proc = tmp_path / "proc_cgroup"
    write(proc, "4:memory:/job\n3:cpu,cpuacct:/job\n")
    root = tmp_path / "cg"
    write(root / "cpu,cpuacct/job/cpu.cfs_quota_us", "250000\n")
    write(root / "cpu,cpuacct/job/cpu.cfs_period_us", "100000\n")
    write(root / "memory/job/memory.limit_in_bytes", "9223372036854771712\n")
    assert read_cpu_quota(proc, root) == {"cgroup_version": 1, "quota_cpus": 2.5}
    assert read_memory_limit(proc, root) == {"cgroup_limit": None, "cgroup_usage": None}


def test_no_cgroup_files_means_no_limits(tmp_path: Path) -> None:
    assert read_cpu_quota(tmp_path / "missing", tmp_path) == {"cgroup_version": None, "quota_cpus": None}
    assert read_memory_limit(tmp_path / "missing", tmp_path) == {"cgroup_limit": None, "cgroup_usage": None}


def test_parse_proc_cgroup_hybrid() -> None:
    paths = parse_proc_cgroup("1:cpu:/a\n2:memory:/b\n0::/c\nbroken line\n")
    assert paths == {"cpu": "/a", "memory": "/b", "": "/c"}


def test_usable_cpus_combines_affinity_and_quota() -> None:
    assert usable_cpus(64, 64, None) == 64
    assert usable_cpus(64, 8, None) == 8
    assert usable_cpus(64, 64, 3.9) == 3
    assert usable_cpus(64, 2, 16.0) == 2
    assert usable_cpus(64, 64, 0.5) == 1


def test_read_shm_on_the_live_machine_and_a_missing_path(tmp_path: Path) -> None:
    shm = read_shm("/dev/shm")
    st = os.statvfs("/dev/shm")
    assert shm == {"path": "/dev/shm", "total": st.f_blocks * st.f_frsize, "free": shm["free"]}
    assert read_shm(str(tmp_path / "nope")) is None


def test_container_detection_from_files(tmp_path: Path) -> None:
    assert detect_container(tmp_path, environ={}) == {"in_container": False, "kind": None, "evidence": []}
    write(tmp_path / ".dockerenv", "")
    found = detect_container(tmp_path, environ={})
    assert found["in_container"] and found["kind"] == "docker"
    write(tmp_path / "proc/1/cgroup", "0::/kubepods/besteffort/pod1\n")
    k8s = detect_container(tmp_path, environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert k8s["kind"] == "kubernetes"
    assert "KUBERNETES_SERVICE_HOST is set" in k8s["evidence"]

"""SYS001, SYS002, SYS003, SYS006 against real limits on real processes.

Each test runs the real `envdoctor report --json` in a child process whose
limits were set from outside (prlimit, taskset, a tmpfs mounted on /dev/shm
in a private mount namespace, a cgroup made for the test) — nothing is
patched inside envdoctor.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import uuid
from pathlib import Path

import pytest

from support import findings, json_report, run_envdoctor

STATIC = ("report", "--json", "--no-loader")
ROOT = os.geteuid() == 0


def needs(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


# SYS001 nofile-limit-low ---------------------------------------------------

def test_sys001_fires_under_a_low_open_file_limit_as_an_error() -> None:
    needs("prlimit")
    proc = run_envdoctor(*STATIC, "--select", "SYS001", prefix_cmd=["prlimit", "--nofile=256:256"])
    report = json_report(proc)
    [finding] = findings(report, "SYS001")
    assert finding["severity"] == "error"  # below 1024 with workers
    assert finding["evidence"]["soft_limit"] == 256
    assert finding["evidence"]["hard_limit"] == 256
    assert finding["evidence"]["needed"] >= 4096
    assert finding["evidence"]["num_workers"] >= 1
    assert "prlimit" in finding["fix"] or "ulimit -n" in finding["fix"]
    assert proc.returncode == 1  # the default --fail-on is error


def test_sys001_exit_code_follows_fail_on() -> None:
    needs("prlimit")
    proc = run_envdoctor(*STATIC, "--select", "SYS001", "--fail-on", "never",
                         prefix_cmd=["prlimit", "--nofile=256:256"])
    assert findings(json_report(proc), "SYS001")
    assert proc.returncode == 0


def _hard_nofile() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 8192:
        pytest.skip(f"the hard open-file limit here is only {hard}")
    return 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)


def test_sys001_is_a_warning_between_1024_and_the_need_and_suggests_the_hard_limit() -> None:
    needs("prlimit")
    hard = _hard_nofile()
    proc = run_envdoctor(*STATIC, "--select", "SYS001", prefix_cmd=["prlimit", f"--nofile=1024:{hard}"])
    [finding] = findings(json_report(proc), "SYS001")
    assert finding["severity"] == "warning"
    assert finding["evidence"]["soft_limit"] == 1024
    assert finding["evidence"]["hard_limit"] == hard
    # Raising the soft limit up to the hard one needs no root: that is the fix given.
    assert finding["fix"].startswith(f"ulimit -n {hard}")
    assert proc.returncode == 0  # a warning does not fail the default --fail-on error


def test_sys001_quiet_with_a_generous_limit() -> None:
    needs("prlimit")
    hard = _hard_nofile()
    proc = run_envdoctor(*STATIC, "--select", "SYS001", prefix_cmd=["prlimit", f"--nofile={hard}:{hard}"])
    assert findings(json_report(proc), "SYS001") == []
    assert proc.returncode == 0


# SYS003 cpu-quota ----------------------------------------------------------

def test_sys003_fires_under_taskset() -> None:
    needs("taskset")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs to restrict to one")
    report = json_report(run_envdoctor(*STATIC, "--select", "SYS003", prefix_cmd=["taskset", "-c", "0"]))
    [finding] = findings(report, "SYS003")
    assert finding["evidence"]["usable_cpus"] == 1
    assert finding["evidence"]["cpu_count"] == os.cpu_count()
    assert finding["evidence"]["affinity"] == 1
    assert "num_workers=1" in finding["fix"]


def test_sys003_quiet_when_every_cpu_is_usable() -> None:
    needs("taskset")
    every = f"0-{(os.cpu_count() or 1) - 1}"
    report = json_report(run_envdoctor(*STATIC, "--select", "SYS003", prefix_cmd=["taskset", "-c", every]))
    assert findings(report, "SYS003") == []
    assert report["facts"]["system"]["cpu"]["usable"] == os.cpu_count()


@pytest.fixture
def cgroup_v1():
    """Make a child cgroup under a v1 controller for one test, and remove it after."""
    made: list[Path] = []

    def make(controller: str, settings: dict[str, str]) -> Path:
        root = Path("/sys/fs/cgroup") / controller
        if not ROOT or not (root / "cgroup.procs").exists():
            pytest.skip(f"needs root and a cgroup v1 {controller} controller")
        path = root / f"envdoctor-test-{uuid.uuid4().hex[:8]}"
        try:
            path.mkdir()
            for name, value in settings.items():
                (path / name).write_text(value)
        except OSError as exc:
            pytest.skip(f"cannot make a cgroup here: {exc}")
        made.append(path)
        return path

    yield make
    for path in made:
        try:
            path.rmdir()
        except OSError:
            pass


def _in_cgroup(path: Path) -> list[str]:
    """A command prefix that moves the child into `path` before exec'ing envdoctor."""
    return ["sh", "-c", f'echo $$ > {path}/cgroup.procs && exec "$@"', "sh"]


def test_sys003_fires_under_a_real_cgroup_cpu_quota(cgroup_v1) -> None:
    group = cgroup_v1("cpu", {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"})
    report = json_report(run_envdoctor(*STATIC, "--select", "SYS003", prefix_cmd=_in_cgroup(group)))
    [finding] = findings(report, "SYS003")
    assert finding["evidence"]["quota_cpus"] == 0.5
    assert finding["evidence"]["usable_cpus"] == 1
    assert finding["evidence"]["cgroup_version"] == 1


# SYS006 memory-headroom ----------------------------------------------------

def test_sys006_fires_under_a_real_cgroup_memory_limit(cgroup_v1) -> None:
    limit = 600 * 1024**2
    group = cgroup_v1("memory", {"memory.limit_in_bytes": str(limit)})
    report = json_report(run_envdoctor(*STATIC, "--select", "SYS006", prefix_cmd=_in_cgroup(group)))
    [finding] = findings(report, "SYS006")
    assert finding["evidence"]["cgroup_limit"] == limit
    assert finding["evidence"]["available_bytes"] <= limit
    assert finding["evidence"]["per_worker_source"] == "assumed"
    assert finding["evidence"]["estimated_need"] > finding["evidence"]["available_bytes"]
    assert "num_workers=" in finding["fix"]


def test_sys006_quiet_with_the_machines_memory() -> None:
    report = json_report(run_envdoctor(*STATIC, "--select", "SYS006"))
    memory = report["facts"]["system"]["memory"]
    assert memory["effective_available"] > 2 * 1024**3, "this test needs a few GiB free"
    assert findings(report, "SYS006") == []


# SYS002 shm-too-small ------------------------------------------------------

def test_sys002_fires_with_a_64m_dev_shm_in_a_private_mount_namespace() -> None:
    needs("unshare")
    if not ROOT:
        pytest.skip("mounting a tmpfs needs root")
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
           'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"', "sh"]
    proc = run_envdoctor(*STATIC, "--select", "SYS002", prefix_cmd=cmd)
    if "mount" in proc.stderr and not proc.stdout:
        pytest.skip(f"cannot mount here: {proc.stderr.strip()}")
    report = json_report(proc)
    [finding] = findings(report, "SYS002")
    assert finding["severity"] == "error"
    assert finding["evidence"]["shm_total"] == 64 * 1024**2
    assert finding["evidence"]["floor"] == 512 * 1024**2
    assert finding["evidence"]["bytes_in_flight"] is None  # --no-loader: no batch measured
    assert "--shm-size=" in finding["fix"] and "--ipc=host" in finding["fix"]
    assert proc.returncode == 1


def test_sys002_quiet_with_the_machines_dev_shm() -> None:
    report = json_report(run_envdoctor(*STATIC, "--select", "SYS002"))
    shm = report["facts"]["system"]["shm"]
    assert shm["total"] >= 512 * 1024**2, "this machine's /dev/shm is small itself"
    assert findings(report, "SYS002") == []


# envdoctor fix leaves these to the user ------------------------------------

def test_fix_dry_run_lists_limit_findings_as_not_automatic_with_their_fix() -> None:
    """SYS001 and SYS003 change the shell, not the environment: no steps, and the plan says what to do."""
    needs("prlimit")
    needs("taskset")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("SYS003 needs a second CPU to leave out")
    limits = ["prlimit", "--nofile=256:256", "taskset", "-c", "0"]
    report = json_report(run_envdoctor(*STATIC, "--select", "SYS001", "SYS003", prefix_cmd=limits))
    assert [(f["rule"], f["fix_steps"]) for f in report["findings"]] == [("SYS001", []), ("SYS003", [])]
    fixes = {f["rule"]: f["fix"] for f in report["findings"]}
    assert "`sudo prlimit --pid $$ --nofile=65536:65536`" in fixes["SYS001"]
    assert "`export OMP_NUM_THREADS=1`" in fixes["SYS003"]

    proc = run_envdoctor("fix", "--dry-run", "--select", "SYS001", "SYS003", prefix_cmd=limits)
    assert proc.returncode == 2, proc.stderr  # nothing envdoctor can run
    lines = proc.stdout.splitlines()
    for rule in ("SYS001", "SYS003"):
        [at] = [i for i, line in enumerate(lines) if line.strip().startswith(rule + " ")]
        assert lines[at + 1].strip() == f"not automatic, left to you: {fixes[rule]}"
    assert lines[-1] == "no finding has a fix envdoctor can run"
    plan = json.loads(run_envdoctor("fix", "--dry-run", "--format", "json", "--select", "SYS001", "SYS003",
                                    prefix_cmd=limits).stdout)
    assert plan["plan"]["steps"] == []
    assert [f["rule"] for f in plan["plan"]["findings_without_steps"]] == ["SYS001", "SYS003"]

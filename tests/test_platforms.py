"""Windows and macOS: the CLI with their APIs only, their facts from their commands' output, their layouts.

No Windows or macOS machine runs these tests. `fixtures/foreign_platform.py`
runs the real CLI in a process that has lost, once the standard library has
loaded, every POSIX-only function, constant and module CPython on Windows
(or macOS) lacks, and says so in sys.platform; the facts' parsers read
command output kept in fixtures/platforms/; the layouts are built as files.
What only a real machine can tell is left to scripts/platform_check.sh.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from envdoctor.config import Config
from envdoctor.facts import Facts
from envdoctor.facts.macos import core_counts, parse_mount, parse_sysctl
from envdoctor.facts.storage import effective_medium, resolve_storage, windows_mount
from envdoctor.facts.system import not_applicable_here
from envdoctor.facts.windows import parse_cim
from envdoctor.rules.packages import RULES as PKG_RULES
from envdoctor.rules.storage import RULES as DSK_RULES
from envdoctor.rules.system import RULES as SYS_RULES
from support import validate_report

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PLATFORMS = FIXTURES / "platforms"
PROJECT = PLATFORMS / "project"
SIMULATOR = FIXTURES / "foreign_platform.py"


def run_as(platform: str, *args: str, cwd: Path = PROJECT, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The real CLI, `envdoctor ARGS`, as it runs on `platform` (win32 or darwin), simulated."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    return subprocess.run([sys.executable, str(SIMULATOR), platform, *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def no_crash(proc: subprocess.CompletedProcess[str]) -> None:
    assert "internal error" not in proc.stderr + proc.stdout, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


# --- the CLI with Windows's (and macOS's) APIs only -----------------------------------------------


@pytest.fixture(scope="module")
def windows_static_report() -> dict[str, Any]:
    proc = run_as("win32", "report", "--json", "--no-loader")
    no_crash(proc)
    assert proc.returncode in (0, 1), proc.stderr
    return dict(validate_report(json.loads(proc.stdout)))


def test_windows_spawn_guard_flags_the_unguarded_script_only() -> None:
    proc = run_as("win32", "check", "--format", "json", "--no-loader", "--platform", "win32", "train.py", "ok.py")
    no_crash(proc)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    spw001 = [f for f in report["findings"] if f["rule"] == "SPW001"]
    assert [(f["location"]["path"], f["severity"]) for f in spw001] == [("train.py", "error")]
    assert spw001[0]["evidence"]["start_method"] == "spawn"


def test_windows_spw001_is_an_error_whatever_platform_is_asked_about() -> None:
    """On Windows itself, asking about Linux does not make the unguarded script safe: there is no fork."""
    proc = run_as("win32", "check", "--format", "json", "--no-loader", "--platform", "linux", "--select", "SPW001",
                  "train.py")
    no_crash(proc)
    [finding] = json.loads(proc.stdout)["findings"]
    assert finding["severity"] == "error" and proc.returncode == 1
    assert "this machine runs Windows" in finding["message"]


def test_windows_report_has_package_facts_and_no_posix_facts(windows_static_report: dict[str, Any]) -> None:
    report = windows_static_report
    assert report["facts"]["packages"]["distributions"], "no distributions read"
    assert report["target"]["platform"].startswith("win") or report["host"]["platform"].startswith("win")
    system = report["facts"]["system"]
    assert set(system["not_applicable"]) == {"nofile", "shm", "cgroups"}
    assert system["limits"]["nofile"]["soft"] is None and system["shm"] is None
    assert system["cpu"]["cgroup_version"] is None
    fired = {f["rule"] for f in report["findings"]}
    assert not fired & {"SYS001", "SYS002", "SYS003"}
    assert not [e for e in report["errors"] if e.get("rule", "").startswith("SYS")], report["errors"]


def test_macos_report_keeps_nofile_and_drops_shm_and_cgroups() -> None:
    proc = run_as("darwin", "report", "--json", "--no-loader")
    no_crash(proc)
    report = validate_report(json.loads(proc.stdout))
    system = report["facts"]["system"]
    assert set(system["not_applicable"]) == {"shm", "cgroups"}
    assert isinstance(system["limits"]["nofile"]["soft"], int)
    assert report["facts"]["packages"]["distributions"]
    assert report["verdict"]["areas"]["gpu"] == "not-applicable"  # no NVML on a Mac: n/a, not ✓


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["win32", "darwin"])
def test_full_check_runs_the_smoke_test_without_fork_or_process_groups(platform: str) -> None:
    """The loader stage supervised as there: on Windows events through a file and the tree ended with psutil."""
    proc = run_as(platform, "report", "--json", "--budget", "8", timeout=300)
    no_crash(proc)
    assert proc.returncode in (0, 1), proc.stderr
    report = validate_report(json.loads(proc.stdout))
    assert not [e for e in report["errors"] if "loader" in json.dumps(e)], report["errors"]
    loader = report["loader"]
    assert loader is not None and loader["failure"] is None, (loader, report["errors"])
    # How far 8 s get is the machine's speed (a busy one may spend them importing torch under spawn): either the
    # sweep measured, or the stage said the budget ran out and ended cleanly; never a crash.
    skipped = " ".join(s["reason"] for s in loader["skipped"])
    assert loader["runs"] or "budget" in skipped, loader


# --- the loader supervisor's Windows paths, on this machine ---------------------------------------


def test_event_file_channel_carries_the_runner_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The events file (Windows's channel) and the psutil tree kill, driven by a runner that hangs."""
    from envdoctor.loader import supervisor

    fake = tmp_path / "fake_runner.py"
    fake.write_text(
        "import json, os, subprocess, sys, time\n"
        "plan = json.load(open(sys.argv[1]))\n"
        "fd = os.open(plan['event_path'], os.O_WRONLY | os.O_APPEND)\n"
        "os.write(fd, (json.dumps({'ev': 'phase', 'name': 'getitem', 'limit_s': 30}) + '\\n').encode())\n"
        "os.write(fd, (json.dumps({'ev': 'index', 'i': 5}) + '\\n').encode())\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(plan['pidfile'], 'w').write(str(child.pid))\n"
        "time.sleep(60)\n")
    pidfile = tmp_path / "child.pid"
    monkeypatch.setattr(supervisor, "RUNNER_PATH", fake)
    monkeypatch.setattr(supervisor, "EVENTS_BY_FILE", True)
    # The kill at the deadline is under test, not the grace's length (3 s): the fake runner is ready in under 0.5 s.
    monkeypatch.setattr(supervisor, "STAGE_GRACE_S", 1.0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the events file goes, watched below
    outcome = supervisor.run_stage({"pidfile": str(pidfile)}, interpreter=sys.executable, budget_s=1.5)
    assert outcome.killed_for == "budget"
    assert outcome.last_index == 5 and outcome.last_phase is not None and outcome.last_phase["name"] == "getitem"
    import psutil

    child = int(pidfile.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert not list(tmp_path.glob("envdoctor-events-*")), "the events file was left behind"


def test_stage_signals_are_the_ones_the_platform_has() -> None:
    import signal

    from envdoctor.loader import supervisor

    assert signal.SIGTERM in supervisor.STAGE_SIGNALS
    assert all(isinstance(s, int) for s in supervisor.STAGE_SIGNALS)


# --- Windows facts from CIM output ----------------------------------------------------------------


def test_cim_output_gives_the_commit_limit_and_the_network_drive() -> None:
    cim = parse_cim((PLATFORMS / "windows" / "cim.json").read_text(encoding="utf-8"))
    assert cim is not None
    assert cim["commit_limit"] == 19162268 * 1024 and cim["commit_available"] == 3145728 * 1024
    drives = {d["device"]: d for d in cim["drives"]}
    assert drives["Z:"] == {"device": "Z:", "kind": "network", "provider": "\\\\nas\\datasets", "filesystem": "NTFS"}
    assert drives["C:"]["kind"] == "local" and drives["D:"]["kind"] == "cd"


def test_cim_output_with_one_disk_is_read_as_a_list() -> None:
    cim = parse_cim((PLATFORMS / "windows" / "cim-one-disk.json").read_text(encoding="utf-8"))
    assert cim is not None and [d["device"] for d in cim["drives"]] == ["C:"]
    assert parse_cim("not json") is None and parse_cim("[1, 2]") is None


def _windows_storage(path: str) -> dict[str, Any]:
    cim = parse_cim((PLATFORMS / "windows" / "cim.json").read_text(encoding="utf-8"))
    assert cim is not None
    mount = windows_mount(path, path, cim["drives"])
    return {"path": path, "exists": True, "mount": mount, "effective": effective_medium(mount),
            "read_probe": {"skipped": "fixture"}}


def _storage_rule(rule: str, storage: dict[str, Any]) -> list[Any]:
    facts = Facts.from_dict({"storage": storage, "system": {"cpu": {"usable": 4, "count": 4}}}, Config(no_loader=True))
    return list(DSK_RULES[rule](facts))


@pytest.mark.parametrize(("path", "source"), [
    ("\\\\nas\\datasets\\imagenet", "\\\\nas\\datasets"),
    ("//nas/datasets/imagenet", "\\\\nas\\datasets"),
    ("\\\\?\\UNC\\nas\\datasets\\imagenet", "\\\\nas\\datasets"),
    ("Z:\\imagenet", "\\\\nas\\datasets"),
])
def test_dsk002_fires_on_unc_paths_and_mapped_network_drives(path: str, source: str) -> None:
    [hit] = _storage_rule("DSK002", _windows_storage(path))
    assert hit.evidence["kind"] == "network" and hit.evidence["source"] == source
    assert hit.evidence["path"] == path


@pytest.mark.parametrize("path", ["C:\\data\\imagenet", "c:\\data", "\\\\?\\C:\\data"])
def test_dsk002_stays_quiet_on_a_local_drive(path: str) -> None:
    assert _storage_rule("DSK002", _windows_storage(path)) == []


# --- macOS facts from sysctl and mount output -----------------------------------------------------


def test_sysctl_gives_performance_and_efficiency_cores() -> None:
    apple = parse_sysctl((PLATFORMS / "macos" / "sysctl-apple-silicon.txt").read_text(encoding="utf-8"))
    assert core_counts(apple) == (8, 2)
    intel = parse_sysctl((PLATFORMS / "macos" / "sysctl-intel.txt").read_text(encoding="utf-8"))
    assert core_counts(intel) == (None, None)


def test_mount_output_finds_smb_and_nfs_volumes_dsk002() -> None:
    mounts = parse_mount((PLATFORMS / "macos" / "mount.txt").read_text(encoding="utf-8"))
    by_point = {m["mount_point"]: m for m in mounts}
    assert by_point["/Volumes/Samsung T7"]["fstype"] == "exfat"
    assert by_point["/"]["fstype"] == "apfs"
    for path, fstype in (("/Volumes/datasets/train", "smbfs"), ("/Volumes/imagenet/val", "nfs")):
        mount = resolve_storage(path, mounts)
        storage = {"path": path, "exists": True, "mount": mount, "effective": effective_medium(mount),
                   "read_probe": {"skipped": "fixture"}}
        [hit] = _storage_rule("DSK002", storage)
        assert hit.evidence["fstype"] == fstype and hit.evidence["kind"] == "network"
    local = resolve_storage("/Users/alice/data", mounts)
    assert local["fstype"] == "apfs" and local["kind"] == "local"
    assert _storage_rule("DSK002", {"path": "/Users/alice/data", "exists": True, "mount": local,
                                    "effective": effective_medium(local), "read_probe": {}}) == []


# --- the system rules on Windows and macOS facts --------------------------------------------------


def _system(platform: str, *, nofile: int | None = None, commit_available: int | None = None) -> dict[str, Any]:
    gib = 1024**3
    return {
        "cpu": {"count": 8, "affinity": None, "cgroup_version": None, "quota_cpus": None, "usable": 8,
                "performance_cores": None, "efficiency_cores": None},
        "memory": {"total": 16 * gib, "available": 12 * gib, "cgroup_limit": None, "cgroup_usage": None,
                   "effective_available": 12 * gib, "commit_limit": 18 * gib if commit_available else None,
                   "commit_available": commit_available},
        "limits": {"nofile": {"soft": nofile, "hard": None, "soft_unlimited": False,
                              "hard_unlimited": nofile is None}},
        "shm": None,
        "not_applicable": not_applicable_here(platform),
    }


def _system_rule(rule: str, system: dict[str, Any], torch: dict[str, Any] | None = None) -> list[Any]:
    facts = Facts.from_dict({"system": system, "torch": torch}, Config(no_loader=True))
    return list(SYS_RULES[rule](facts))


def test_sys001_fires_as_an_error_at_macos_default_of_256() -> None:
    [hit] = _system_rule("SYS001", _system("darwin", nofile=256))
    assert hit.severity is not None and hit.severity.value == "error"
    assert hit.evidence["soft_limit"] == 256 and hit.evidence["num_workers"] == 8


def test_apple_silicon_workers_are_counted_on_performance_cores() -> None:
    """10 CPUs, 8 of them performance cores: the planned workers (SYS001's estimate) are 8, not 10."""
    from envdoctor.facts.system import worker_cpus

    system = _system("darwin", nofile=256)
    system["cpu"].update(count=10, usable=10, performance_cores=8, efficiency_cores=2)
    assert worker_cpus(system["cpu"]) == 8
    [hit] = _system_rule("SYS001", system)
    assert hit.evidence["num_workers"] == 8
    intel = {**system["cpu"], "performance_cores": None, "efficiency_cores": None}
    assert worker_cpus(intel) == 10


def test_sys001_and_sys002_have_nothing_to_judge_on_windows() -> None:
    system = _system("win32")
    assert {"nofile", "shm"} <= set(system["not_applicable"])
    assert _system_rule("SYS001", system) == [] and _system_rule("SYS002", system) == []


def test_sys003_fix_on_windows_names_what_windows_has() -> None:
    """A process affinity narrower than the machine (start /affinity): the fix reads it the Windows way."""
    system = _system("win32")
    system["os"] = "Windows"
    system["cpu"].update(affinity=4, usable=4)
    [hit] = _system_rule("SYS003", system)
    assert hit.evidence["affinity"] == 4 and "psutil.Process().cpu_affinity()" in hit.fix
    assert "sched_getaffinity(0))" not in hit.fix and "set OMP_NUM_THREADS=4" in hit.fix


def test_sys006_commit_limit_against_spawned_cuda_workers() -> None:
    gib = 1024**3
    torch = {"installed": True, "probe": {"ran": False}, "sharing_strategy": None, "build": "cuda"}
    [hit] = _system_rule("SYS006", _system("win32", commit_available=6 * gib), torch)
    assert "WinError 1455" in hit.message
    assert hit.evidence["commit_available_bytes"] == 6 * gib and hit.evidence["num_workers"] == 8
    assert hit.evidence["per_worker_commit_bytes"] == 2 * gib and hit.evidence["torch_cuda"] is True
    assert "num_workers=2" in hit.fix and "paging file" in hit.fix
    assert _system_rule("SYS006", _system("win32", commit_available=40 * gib), torch) == []
    assert _system_rule("SYS006", _system("linux"), torch) == []  # no commit facts: memory alone is judged


# --- layouts: a Windows venv and conda prefix as files ----------------------------------------------


def _mkdir_case_insensitive(path: Path) -> Path:
    """Make a folder as NTFS/APFS would: a name differing only in case is the folder already there."""
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    for existing in parent.iterdir():
        if existing.name.lower() == path.name.lower():
            return existing
    path.mkdir()
    return path


def _dist_info(site: Path, name: str, version: str, installer: str) -> Path:
    folder = _mkdir_case_insensitive(site / f"{name}-{version}.dist-info")
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (folder / "INSTALLER").write_text(installer + "\n")
    (folder / "RECORD").write_text("")
    return folder


def _windows_target(prefix: Path, kind: str) -> dict[str, Any]:
    """The target facts a Windows interpreter reports about itself for this prefix."""
    site = str(prefix / "Lib" / "site-packages")
    return {"prefix": str(prefix), "kind": kind, "name": prefix.name if kind == "conda" else None,
            "is_current": False, "platform": "win-64", "interpreter": str(prefix / "python.exe"),
            "executable": str(prefix / "python.exe"), "python": "3.11.7", "implementation": "cpython",
            "sys_prefix": str(prefix), "base_prefix": str(prefix),
            "sys_path": [str(prefix / "python311.zip"), str(prefix / "DLLs"), str(prefix / "Lib"), str(prefix), site],
            "site_packages": [site], "purelib": site, "user_site": None, "user_site_enabled": False,
            "machine": "AMD64", "stdlib": [str(prefix / "Lib")], "cwd": str(prefix.parent), "pythonpath": [],
            "markers": {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt",
                        "python_version": "3.11", "python_full_version": "3.11.7", "platform_machine": "AMD64",
                        "implementation_name": "cpython", "platform_python_implementation": "CPython"},
            "pyvenv": None, "externally_managed": None, "pth_files": []}


def _windows_conda(prefix: Path, *, pip_over: bool) -> Path:
    """A Windows conda prefix: python.exe at the top, Lib\\site-packages, Library\\bin, conda-meta."""
    site = prefix / "Lib" / "site-packages"
    (prefix / "Library" / "bin").mkdir(parents=True)
    (prefix / "Library" / "bin" / "mkl_rt.2.dll").write_bytes(b"MZ")
    (prefix / "python.exe").write_bytes(b"MZ")
    (site / "numpy").mkdir(parents=True)
    (site / "numpy" / "__init__.py").write_text("")
    dist = _dist_info(site, "numpy", "1.26.4", "conda")
    files = ["Lib/site-packages/numpy/__init__.py", *(f"Lib/site-packages/{dist.name}/{f}" for f in
                                                      ("METADATA", "INSTALLER", "RECORD")),
             "Library/bin/mkl_rt.2.dll"]
    (prefix / "conda-meta").mkdir()
    record = {"name": "numpy", "version": "1.26.4", "build": "py311h0", "channel": "conda-forge",
              "subdir": "win-64", "files": files,
              "paths_data": {"paths_version": 1, "paths": [{"_path": f, "path_type": "hardlink"} for f in files]}}
    (prefix / "conda-meta" / "numpy-1.26.4-py311h0.json").write_text(json.dumps(record))
    if pip_over:  # `pip install numpy==2.1.3` over conda's: its dist-info replaced, the record left
        for name in ("METADATA", "INSTALLER", "RECORD"):
            (dist / name).unlink()
        dist.rmdir()
        _dist_info(site, "numpy", "2.1.3", "pip")
    return prefix


def _windows_venv(prefix: Path, *, doubled: bool) -> Path:
    """A Windows venv: Scripts\\python.exe, Lib\\site-packages, pyvenv.cfg."""
    site = prefix / "Lib" / "site-packages"
    (prefix / "Scripts").mkdir(parents=True)
    (prefix / "Scripts" / "python.exe").write_bytes(b"MZ")
    (prefix / "pyvenv.cfg").write_text("home = C:\\Python311\nversion = 3.11.7\ninclude-system-site-packages = false\n")
    _dist_info(site, "requests", "2.32.3", "pip")
    # Two spellings of one name and version are one folder on a case-insensitive file system.
    _dist_info(site, "Pillow", "10.4.0", "pip")
    _dist_info(site, "pillow", "10.4.0", "pip")
    if doubled:
        _dist_info(site, "requests", "2.31.0", "pip")
    return prefix


def _package_hits(target: dict[str, Any]) -> dict[str, list[Any]]:
    facts = Facts(Config(no_loader=True), preset={"target": target, "system": None})
    return {rule: list(PKG_RULES[rule](facts)) for rule in ("PKG001", "PKG002")}


def test_windows_conda_prefix_pip_over_conda_is_pkg001(tmp_path: Path) -> None:
    broken = _package_hits(_windows_target(_windows_conda(tmp_path / "broken", pip_over=True), "conda"))
    [hit] = broken["PKG001"]
    assert hit.evidence["package"] == "numpy" and hit.evidence["conda_version"] == "1.26.4"
    assert hit.evidence["installed_version"] == "2.1.3"
    assert broken["PKG002"] == []
    healthy = _package_hits(_windows_target(_windows_conda(tmp_path / "healthy", pip_over=False), "conda"))
    assert healthy == {"PKG001": [], "PKG002": []}


def test_windows_venv_two_dist_infos_is_pkg002_and_case_spellings_are_one(tmp_path: Path) -> None:
    doubled = _package_hits(_windows_target(_windows_venv(tmp_path / "doubled", doubled=True), "venv"))
    [hit] = doubled["PKG002"]
    assert hit.evidence["package"] == "requests" and sorted(hit.evidence["versions"]) == ["2.31.0", "2.32.3"]
    healthy = _package_hits(_windows_target(_windows_venv(tmp_path / "healthy", doubled=False), "venv"))
    assert healthy == {"PKG001": [], "PKG002": []}


# --- paths and places -----------------------------------------------------------------------------


@pytest.mark.parametrize(("platform", "env", "expected"), [
    ("win32", {"LOCALAPPDATA": "/users/me/AppData/Local"}, "/users/me/AppData/Local/envdoctor/journal"),
    ("darwin", {}, "~/Library/Caches/envdoctor/journal"),
    ("darwin", {"XDG_CACHE_HOME": "/xdg"}, "/xdg/envdoctor/journal"),
    ("linux", {}, "~/.cache/envdoctor/journal"),
])
def test_journal_lives_in_the_platforms_cache(platform: str, env: dict[str, str], expected: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from envdoctor.fix import journal

    for name in ("LOCALAPPDATA", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(journal.sys, "platform", platform)
    assert journal.journal_root() == Path(os.path.expanduser(expected))


def test_not_applicable_facts_by_platform() -> None:
    assert not_applicable_here("linux") == {}
    assert set(not_applicable_here("win32")) == {"nofile", "shm", "cgroups"}
    assert set(not_applicable_here("darwin")) == {"shm", "cgroups"}
    assert set(not_applicable_here("freebsd14")) == {"cgroups"}


def test_fix_finds_a_windows_prefixs_own_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`envdoctor fix` runs the prefix's own tools: Scripts\\pip.exe in a venv, condabin\\conda.bat in conda."""
    from envdoctor.fix import tools

    venv, conda = tmp_path / "venv", tmp_path / "miniforge3"
    for exe in (venv / "Scripts" / "pip.exe", conda / "condabin" / "conda.bat"):
        exe.parent.mkdir(parents=True)
        exe.write_bytes(b"MZ")
        exe.chmod(0o755)
    monkeypatch.setattr(tools.sys, "platform", "win32")
    monkeypatch.setattr(tools.shutil, "which", lambda *args, **kwargs: None)  # nothing on PATH
    found = tools.find_executable("pip", "pip", tools.Target(venv, "venv", None), {})
    assert found == str(venv / "Scripts" / "pip.exe")
    found = tools.find_executable("conda", "conda", tools.Target(conda, "conda", None), {})
    assert found == str(conda / "condabin" / "conda.bat")


def test_gpu_area_is_not_applicable_on_a_mac(monkeypatch: pytest.MonkeyPatch) -> None:
    """No NVIDIA GPU or NVML on macOS: the GPU section says so, and the checklist shows n/a, not ✓."""
    from envdoctor.facts import gpu

    monkeypatch.setattr(gpu.sys, "platform", "darwin")
    monkeypatch.setattr(gpu, "read_nvml", lambda: {"available": False, "reason": "no NVML", "device_count": 0,
                                                   "devices": []})
    monkeypatch.setattr(gpu, "pci_nvidia_gpus", lambda: [])
    section = gpu.gather_gpu(None)
    assert section["applicable"] is False and "MPS" in section["not_applicable_reason"]


def test_a_probe_that_runs_out_of_time_is_killed_without_sigkill_on_windows() -> None:
    """Windows's `signal` has no SIGKILL: a probe past its limit (and the child it started) is ended with the
    portable kill there, not a crash (`AttributeError: module 'signal' has no attribute 'SIGKILL'`)."""
    code = (f"import sys; sys.path.insert(0, {str(FIXTURES)!r}); import foreign_platform; "
            "foreign_platform.pretend('win32'); import json, signal, psutil\n"
            "from envdoctor.process import run_bounded\n"
            "assert not hasattr(signal, 'SIGKILL')\n"
            "sleeper = 'import subprocess, sys, time; subprocess.Popen([sys.executable, \"-c\", \"import time; "
            "time.sleep(120)\"]); print(\"started\", flush=True); time.sleep(120)'\n"
            "before = {p.pid for p in psutil.Process().children(recursive=True)}\n"
            "run = run_bounded([sys.executable, '-c', sleeper], 3.0)\n"
            "print(json.dumps({'timed_out': run.timed_out, 'described': run.describe_failure(),\n"
            "                  'left': [p.pid for p in psutil.Process().children(recursive=True)\n"
            "                           if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["timed_out"] is True and "did not finish within" in answer["described"]
    assert answer["left"] == [], answer

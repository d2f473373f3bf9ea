"""`envdoctor compare`: real reports from differing environments, lined up.

The reports are made by the real command (`report --json --no-loader`) in
states the test builds: another open-file limit through prlimit, fewer CPUs
through taskset, other venvs. Version drift of torch/CUDA/NCCL/driver, package
and channel drift and stragglers need machines this one is not (one torch, no
GPU, one disk): those tests start from a real report and edit the facts in
question, and say so in their names ("crafted").
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support import findings, json_report, run_cli, run_envdoctor, validate_report

HAS_TWO_CPUS = hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2


def _report(path: Path, *prefix_cmd: str, args: tuple[str, ...] = ()) -> dict[str, Any]:
    proc = run_envdoctor("report", "--json", "--no-loader", "--output", str(path), *args,
                         prefix_cmd=prefix_cmd)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(path.read_text())
    validate_report(report)
    return report


@pytest.fixture(scope="module")
def real_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Four real reports: two from the same state, one under a lower nofile, one on one CPU."""
    folder = tmp_path_factory.mktemp("reports")
    paths = {name: folder / f"{name}.json" for name in ("node-a", "node-b", "node-lownofile", "node-onecpu")}
    _report(paths["node-a"])
    _report(paths["node-b"])
    _report(paths["node-lownofile"], "prlimit", "--nofile=1024:1024")
    if HAS_TWO_CPUS:
        _report(paths["node-onecpu"], "taskset", "-c", "0")
    else:  # pragma: no cover - single-CPU CI runner
        del paths["node-onecpu"]
    return paths


def _compare(*paths: Any, fmt: str = "json", fail_on: str | None = None) -> subprocess.CompletedProcess[str]:
    args = ["compare", *map(str, paths), "--format", fmt]
    if fail_on:
        args += ["--fail-on", fail_on]
    return run_cli(*args)


def _by_what(report: dict[str, Any], rule: str) -> dict[str, dict[str, Any]]:
    return {f["evidence"]["what"]: f for f in findings(report, rule)}


def test_compare_names_exactly_the_limit_differences(real_reports: dict[str, Path]) -> None:
    proc = _compare(*real_reports.values())
    report = json_report(proc)
    assert proc.returncode == 0, proc.stderr  # warnings only, --fail-on error
    expected = {("FLT005", "nofile")} | ({("FLT005", "usable_cpus")} if HAS_TWO_CPUS else set())
    assert {(f["rule"], f["evidence"].get("what")) for f in report["findings"]} == expected
    nofile = _by_what(report, "FLT005")["nofile"]
    assert nofile["severity"] == "warning"
    assert nofile["evidence"]["odd_nodes"] == ["node-lownofile"]
    assert nofile["evidence"]["values"]["node-lownofile"] == 1024
    assert nofile["evidence"]["expected"] == nofile["evidence"]["values"]["node-a"] != 1024
    assert nofile["fix"].startswith("on node-lownofile: ulimit -n ")
    if HAS_TWO_CPUS:
        cpus = _by_what(report, "FLT005")["usable_cpus"]
        assert cpus["evidence"]["odd_nodes"] == ["node-onecpu"]
        assert cpus["evidence"]["values"]["node-onecpu"] == 1
        assert cpus["evidence"]["expected"] >= 2
    fleet = report["facts"]["fleet"]
    assert [n["node"] for n in fleet["nodes"]] == list(real_reports)  # hostnames repeat: file names
    assert fleet["unreadable"] == []
    assert proc.stdout.count('"schema_version"') == 1


def test_compare_fails_on_warning_when_asked(real_reports: dict[str, Path]) -> None:
    proc = _compare(real_reports["node-a"], real_reports["node-lownofile"], fail_on="warning")
    assert proc.returncode == 1
    report = json_report(proc)
    assert [f["evidence"]["what"] for f in findings(report, "FLT005")] == ["nofile"]
    # The node's own finding at or above --fail-on is in the fleet view too, once, with its node.
    (own,) = findings(report, "SYS001")
    assert own["evidence"]["nodes"] == ["node-lownofile"] and own["evidence"]["soft_limit"] == 1024
    assert own["message"].endswith(" (on node-lownofile)")
    assert {f["severity"] for f in report["findings"]} == {"warning"}  # nothing below --fail-on
    # At the default --fail-on error, the warning stays in its node's report only.
    assert findings(json_report(_compare(real_reports["node-a"], real_reports["node-lownofile"])), "SYS001") == []


def test_compare_is_quiet_for_nodes_that_agree(real_reports: dict[str, Path]) -> None:
    proc = _compare(real_reports["node-a"], real_reports["node-b"])
    report = json_report(proc)
    assert proc.returncode == 0
    assert report["findings"] == []
    text = _compare(real_reports["node-a"], real_reports["node-b"], fmt="text").stdout
    assert "no differences across the nodes" in text
    # The text view wraps at 80 columns: read the note whole.
    flat = " ".join(text.split())
    same = flat.split("same on every node: ", 1)[1].split(" not compared: ", 1)[0]
    assert "Python 3." in same and "usable CPUs" in same


def test_compare_reads_a_folder_and_shows_the_side_by_side_table(real_reports: dict[str, Path]) -> None:
    folder = real_reports["node-a"].parent
    text = _compare(folder, fmt="text").stdout
    assert "fleet of" in text and "from saved reports" in text
    row = next(line for line in text.splitlines() if "open files (soft)" in line and "│" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[0] == "open files (soft)"
    assert "1024 *" in cells  # the odd node is marked, the others are not
    assert sum(c.endswith("*") for c in cells) == 1
    markdown = _compare(folder, fmt="markdown").stdout
    assert "| open files (soft) |" in markdown and "**1024**" in markdown
    assert "## Findings" in markdown and "FLT005 `limit-drift`" in markdown


def test_flt_rules_stay_quiet_in_a_normal_check() -> None:
    report = json_report(run_envdoctor("report", "--json", "--no-loader"))
    assert [f for f in report["findings"] if f["rule"].startswith("FLT")] == []
    assert [e for e in report["errors"] if e.get("probe") == "fleet" or str(e.get("rule", "")).startswith("FLT")] == []
    assert "fleet" not in report["facts"]


# --- unreadable input ---------------------------------------------------------------


def test_unreadable_reports_are_named_and_skipped(real_reports: dict[str, Path], tmp_path: Path) -> None:
    good = json.loads(real_reports["node-a"].read_text())
    bad = {
        "truncated.json": real_reports["node-a"].read_text()[:300],
        "future.json": json.dumps({**good, "schema_version": 2}),
        "other-tool.json": json.dumps({"tool": {"name": "something-else"}, "schema_version": 1}),
        "empty.json": "",
    }
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
    shutil.copy(real_reports["node-a"], tmp_path / "node-a.json")
    shutil.copy(real_reports["node-lownofile"], tmp_path / "node-lownofile.json")
    proc = _compare(tmp_path)
    report = json_report(proc)
    skipped = {Path(f["evidence"]["path"]).name: f["evidence"]["reason"] for f in findings(report, "FLT008")}
    assert set(skipped) == set(bad)
    assert skipped["truncated.json"].startswith("not valid JSON (")
    assert skipped["future.json"] == "schema_version 2, but this envdoctor reads schema version 1"
    assert skipped["other-tool.json"].startswith("not an envdoctor report")
    assert skipped["empty.json"] == "empty file"
    assert all(f["severity"] == "warning" for f in findings(report, "FLT008"))
    # the readable ones are still compared
    assert [f["evidence"]["odd_nodes"] for f in findings(report, "FLT005")] == [["node-lownofile"]]
    assert proc.returncode == 0


def test_a_fleet_report_is_not_taken_for_a_node(real_reports: dict[str, Path], tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(_compare(real_reports["node-a"], real_reports["node-b"]).stdout)
    report = json_report(_compare(fleet, real_reports["node-a"], real_reports["node-b"]))
    (skipped,) = findings(report, "FLT008")
    assert skipped["evidence"]["path"] == str(fleet)
    assert "fleet report" in skipped["evidence"]["reason"]
    assert "reports of the single nodes" in skipped["fix"]


def test_compare_usage_errors_exit_2(tmp_path: Path) -> None:
    missing = run_cli("compare", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "no report at" in missing.stderr and "Traceback" not in missing.stderr
    empty_dir = run_cli("compare", str(tmp_path))
    assert empty_dir.returncode == 2 and "without any .json report" in empty_dir.stderr
    (tmp_path / "broken.json").write_text("{")
    none_readable = run_cli("compare", str(tmp_path / "broken.json"))
    assert none_readable.returncode == 2
    assert "none of the files given is a readable envdoctor report" in none_readable.stderr
    assert "broken.json: not valid JSON" in none_readable.stderr


def test_compare_never_reads_its_own_output(real_reports: dict[str, Path], tmp_path: Path) -> None:
    for name in ("node-a", "node-lownofile"):
        shutil.copy(real_reports[name], tmp_path / f"{name}.json")
    out = tmp_path / "fleet.json"
    for _ in range(2):  # the second run finds the first one's fleet.json in the folder
        proc = run_cli("compare", str(tmp_path), "--json", "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        report = validate_report(json.loads(out.read_text()))
        assert findings(report, "FLT008") == []
        assert sorted(n["source"] for n in report["facts"]["fleet"]["nodes"]) == [
            str(tmp_path / "node-a.json"), str(tmp_path / "node-lownofile.json")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.json", "node-a.json", "node-lownofile.json"]
    # Named as an input and as the output: refused before anything is read or written.
    before = out.read_bytes()
    proc = run_cli("compare", str(out), str(tmp_path / "node-a.json"), "-o", str(out))
    assert proc.returncode == 2 and "both a report to compare and the output" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and out.read_bytes() == before


def test_fifos_devices_and_huge_files_are_skipped_without_hanging(real_reports: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    from envdoctor.fleet.compare import MAX_REPORT_BYTES

    for name in ("node-a", "node-b"):
        shutil.copy(real_reports[name], tmp_path / f"{name}.json")
    os.mkfifo(tmp_path / "fifo.json")  # nobody ever writes to it: a blocking open would hang
    (tmp_path / "zero.json").symlink_to("/dev/zero")  # endless
    with open(tmp_path / "huge.json", "wb") as fh:  # sparse: costs no disk
        fh.truncate(MAX_REPORT_BYTES + 1)
    outside_fifo = tmp_path / "given.fifo"
    os.mkfifo(outside_fifo)
    proc = run_envdoctor("compare", str(tmp_path), str(outside_fifo), "/dev/zero", "--json", timeout=60)
    report = json_report(proc)
    skipped = {f["evidence"]["path"]: f["evidence"]["reason"] for f in findings(report, "FLT008")}
    assert skipped == {
        str(tmp_path / "fifo.json"): "cannot be read: is a FIFO, not a regular file",
        str(outside_fifo): "cannot be read: is a FIFO, not a regular file",
        "/dev/zero": "cannot be read: is a character device, not a regular file",
        str(tmp_path / "zero.json"): "cannot be read: is a character device, not a regular file",
        str(tmp_path / "huge.json"): f"cannot be read: is {MAX_REPORT_BYTES + 1} bytes, more than the "
                                     f"{MAX_REPORT_BYTES} read",
    }
    assert len(report["facts"]["fleet"]["nodes"]) == 2  # the readable ones are still compared
    assert proc.returncode == 0


def test_a_single_report_says_there_is_nothing_to_compare(real_reports: dict[str, Path]) -> None:
    proc = _compare(real_reports["node-a"])
    report = json_report(proc)
    # Never a silent pass: one report is FLT010, an error, exit 1.
    (alone,) = report["findings"]
    assert alone["rule"] == "FLT010" and alone["severity"] == "error"
    assert alone["message"] == "1 readable report: comparing needs at least two, so nothing was compared"
    assert alone["evidence"] == {"expected": 2, "reported": 1}
    assert proc.returncode == 1
    assert report["facts"]["fleet"]["not_compared"][0]["reason"] == "1 usable report: comparing needs at least two"


# --- venvs: packages present on some nodes only, at other versions -------------------


def _venv_with(path: Path, packages: dict[str, str]) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
    site = next(path.glob("lib/python*/site-packages"))
    for name, version in packages.items():
        dist = site / f"{name}-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (dist / "INSTALLER").write_text("pip\n")
        (dist / "RECORD").write_text(f"{name}-{version}.dist-info/METADATA,,\n")
    return path


@pytest.mark.slow
def test_compare_real_venvs_names_package_differences(tmp_path: Path) -> None:
    venvs = {
        "node-a": _venv_with(tmp_path / "a", {"tinylib": "1.0", "commonlib": "2.0"}),
        "node-b": _venv_with(tmp_path / "b", {"tinylib": "1.0", "commonlib": "2.0"}),
        "node-c": _venv_with(tmp_path / "c", {"tinylib": "1.1", "commonlib": "2.0", "extralib": "0.3"}),
    }
    paths = [tmp_path / f"{node}.json" for node in venvs]
    reports = [_report(path, args=("--prefix", str(venv))) for path, venv in zip(paths, venvs.values())]
    assert [r["target"]["prefix"] for r in reports] == [str(v) for v in venvs.values()]
    assert all(r["facts"].get("packages") for r in reports)
    report = json_report(_compare(*paths))
    versions = {f["evidence"]["what"]: f for f in findings(report, "FLT002")}
    assert set(versions) == {"tinylib"}
    assert versions["tinylib"]["evidence"]["values"] == {"node-a": "1.0", "node-b": "1.0", "node-c": "1.1"}
    assert versions["tinylib"]["fix"] == "on node-c: pip install tinylib==1.0"
    (extra,) = findings(report, "FLT003")
    assert extra["evidence"]["package"] == "extralib"
    assert extra["evidence"]["present_on"] == {"node-c": "0.3"}
    assert extra["evidence"]["absent_on"] == ["node-a", "node-b"]
    assert extra["fix"].startswith("on node-c: pip uninstall -y extralib")


# --- crafted: facts this machine cannot vary (one torch, no GPU, one disk) ----------


def _crafted(base: dict[str, Any], hostname: str, **sections: Any) -> dict[str, Any]:
    report = copy.deepcopy(base)
    report["host"]["hostname"] = hostname
    loader = sections.pop("loader", None)
    if loader is not None:
        report["loader"] = loader
    report["facts"].update(sections)
    return report


def _write(folder: Path, reports: list[dict[str, Any]]) -> list[Path]:
    paths = []
    for report in reports:
        path = folder / f"{report['host']['hostname']}.json"
        path.write_text(json.dumps(report))
        paths.append(path)
    return paths


def _torch(version: str, cuda: str | None, nccl: str, cudnn: str) -> dict[str, Any]:
    cu = f"cu{cuda.split('.')[0]}" if cuda else "cu12"
    return {"installed": True, "version": version, "cuda_build": cuda,
            "nvidia_wheels": {f"nvidia-nccl-{cu}": nccl, f"nvidia-cudnn-{cu}": cudnn},
            "cudnn_wheel": cudnn}


def _gpu(driver: str, cuda_driver: str) -> dict[str, Any]:
    return {"available": True, "driver_version": driver, "cuda_driver_version": cuda_driver, "devices": []}


def test_crafted_core_version_drift_of_torch_cuda_nccl_and_driver(real_reports: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    base = json.loads(real_reports["node-a"].read_text())
    good = dict(torch=_torch("2.4.0+cu121", "12.1", "2.20.5", "9.1.0.70"), gpu=_gpu("550.54.15", "12.4"))
    reports = [
        _crafted(base, "gpu01", **good),
        _crafted(base, "gpu02", **good),
        _crafted(base, "gpu03", torch=_torch("2.3.1+cu118", "11.8", "2.19.3", "8.7.0.84"),
                 gpu=_gpu("535.104.05", "12.2")),
    ]
    proc = _compare(*_write(tmp_path, reports))
    report = json_report(proc)
    assert proc.returncode == 1  # core drift is an error
    core = _by_what(report, "FLT001")
    assert set(core) == {"torch", "cuda_build", "nccl", "driver", "cuda_driver"}
    assert all(f["severity"] == "error" and f["evidence"]["odd_nodes"] == ["gpu03"] for f in core.values())
    assert core["torch"]["evidence"]["values"] == {"gpu01": "2.4.0+cu121", "gpu02": "2.4.0+cu121",
                                                   "gpu03": "2.3.1+cu118"}
    assert core["torch"]["message"] == "torch differs across nodes: 2.4.0+cu121 on gpu01, gpu02; 2.3.1+cu118 on gpu03"
    assert core["torch"]["fix"] == ("on gpu03: pip install torch==2.4.0+cu121 "
                                    "--index-url https://download.pytorch.org/whl/cu121")
    assert core["cuda_build"]["fix"].startswith(
        "on gpu03: pip install torch==2.4.0+cu121 --index-url https://download.pytorch.org/whl/cu121")
    assert core["nccl"]["evidence"]["expected"] == "2.20.5"
    assert core["nccl"]["fix"].startswith("on gpu03: pip install nvidia-nccl-cu12==2.20.5")
    assert core["driver"]["evidence"]["values"]["gpu03"] == "535.104.05"
    assert "nvidia-driver-550" in core["driver"]["fix"]
    (cudnn,) = findings(report, "FLT002")  # the rest is a warning
    assert cudnn["evidence"]["what"] == "cudnn" and cudnn["severity"] == "warning"
    assert cudnn["evidence"]["values"]["gpu03"] == "8.7.0.84"


def test_crafted_same_torch_everywhere_is_quiet(real_reports: dict[str, Path], tmp_path: Path) -> None:
    base = json.loads(real_reports["node-a"].read_text())
    good = dict(torch=_torch("2.4.0+cu121", "12.1", "2.20.5", "9.1.0.70"), gpu=_gpu("550.54.15", "12.4"))
    report = json_report(_compare(*_write(tmp_path, [_crafted(base, f"gpu0{i}", **good) for i in range(3)])))
    assert report["findings"] == []


def test_crafted_cpu_only_torch_beside_cuda_builds_is_core_drift(real_reports: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    base = json.loads(real_reports["node-a"].read_text())
    cuda = _torch("2.4.0+cu121", "12.1", "2.20.5", "9.1.0.70")
    cpu = {"installed": True, "version": "2.4.0+cpu", "cuda_build": None, "nvidia_wheels": {}}
    report = json_report(_compare(*_write(tmp_path, [
        _crafted(base, "n1", torch=cuda), _crafted(base, "n2", torch=cuda), _crafted(base, "n3", torch=cpu)])))
    core = _by_what(report, "FLT001")
    assert core["cuda_build"]["evidence"]["values"] == {"n1": "12.1", "n2": "12.1", "n3": "cpu"}
    assert core["torch"]["evidence"]["odd_nodes"] == ["n3"]


def _packages(dists: dict[str, str], conda: dict[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    section: dict[str, Any] = {"distributions": [{"name": n, "key": n, "version": v} for n, v in dists.items()]}
    section["conda"] = {"present": conda is not None, "records": [
        {"name": n, "version": v, "channel": c, "build": "0"} for n, (v, c) in (conda or {}).items()]}
    return section


def test_crafted_package_and_channel_drift(real_reports: dict[str, Path], tmp_path: Path) -> None:
    base = json.loads(real_reports["node-a"].read_text())
    forge = "https://conda.anaconda.org/conda-forge"
    main = "https://repo.anaconda.com/pkgs/main"
    reports = [
        _crafted(base, "n1", packages=_packages({"numpy": "1.26.4", "pillow": "10.4.0"},
                                                {"numpy": ("1.26.4", forge), "libnccl": ("2.21.5", forge)})),
        _crafted(base, "n2", packages=_packages({"numpy": "1.26.4", "pillow": "10.4.0"},
                                                {"numpy": ("1.26.4", forge), "libnccl": ("2.21.5", forge)})),
        _crafted(base, "n3", packages=_packages({"numpy": "2.1.3", "pillow": "10.4.0", "pillow-simd": "9.0.0"},
                                                {"numpy": ("2.1.3", main), "libnccl": ("2.20.0", forge)})),
    ]
    report = json_report(_compare(*_write(tmp_path, reports)))
    versions = _by_what(report, "FLT002")
    assert set(versions) == {"numpy", "libnccl"}
    assert versions["numpy"]["evidence"]["values"] == {"n1": "1.26.4", "n2": "1.26.4", "n3": "2.1.3"}
    assert versions["numpy"]["fix"] == "on n3: pip install numpy==1.26.4"
    assert versions["libnccl"]["evidence"]["source"] == "conda"
    assert versions["libnccl"]["fix"] == "on n3: conda install libnccl=2.21.5"
    (extra,) = findings(report, "FLT003")
    assert extra["evidence"] == {"package": "pillow-simd", "source": "pip", "present_on": {"n3": "9.0.0"},
                                 "absent_on": ["n1", "n2"], "odd_nodes": ["n3"]}
    (channel,) = findings(report, "FLT004")
    assert channel["evidence"]["channels"] == {"n1": "conda-forge", "n2": "conda-forge", "n3": "pkgs/main"}
    assert channel["fix"] == "on n3: conda install --override-channels -c conda-forge numpy=1.26.4"


def _loader(samples_per_s: float) -> dict[str, Any]:
    return {"dataset": "synthetic", "bottleneck": "getitem", "skipped": [], "recommendation": None,
            "runs": [{"num_workers": 0, "samples_per_s": samples_per_s / 3, "first_batch_s": 0.1},
                     {"num_workers": 2, "samples_per_s": samples_per_s, "first_batch_s": 0.3}]}


def _storage(mib_per_s: float) -> dict[str, Any]:
    return {"path": "/data", "read_probe": {"sequential": {"bytes": 1, "seconds": 1.0, "mib_per_s": mib_per_s},
                                            "random": {"mib_per_s": mib_per_s / 4}}}


def test_crafted_stragglers_are_flagged(real_reports: dict[str, Path], tmp_path: Path) -> None:
    base = json.loads(real_reports["node-a"].read_text())
    speeds = {"n1": (1000.0, 800.0), "n2": (960.0, 820.0), "n3": (1010.0, 790.0), "n4": (410.0, 805.0),
              "n5": (990.0, 150.0)}
    reports = [_crafted(base, node, loader=_loader(s), storage=_storage(d)) for node, (s, d) in speeds.items()]
    proc = _compare(*_write(tmp_path, reports))
    report = json_report(proc)
    slow = {(f["evidence"]["node"], f["evidence"]["metric"]): f for f in findings(report, "FLT006")}
    assert set(slow) == {("n4", "loader_samples_per_s"), ("n5", "disk_read_bytes_per_s")}
    loader = slow[("n4", "loader_samples_per_s")]
    assert loader["severity"] == "warning"
    assert loader["evidence"]["value"] == 410.0
    assert loader["evidence"]["median_of_others"] == 995.0
    assert loader["message"] == ("n4 is a straggler: loader samples/s 410.0 is 59% below "
                                 "the other nodes' median of 995.0")
    disk = slow[("n5", "disk_read_bytes_per_s")]
    assert disk["evidence"]["value"] == 150.0 * 2**20
    assert "srun --exclude" not in disk["fix"] and "n5" in disk["fix"]
    assert proc.returncode == 0
    text = _compare(*_write(tmp_path, reports), fmt="text").stdout
    assert "410.0 *" in text


def test_crafted_speeds_within_30_percent_are_no_stragglers(real_reports: dict[str, Path],
                                                           tmp_path: Path) -> None:
    base = json.loads(real_reports["node-a"].read_text())
    reports = [_crafted(base, node, loader=_loader(s), storage=_storage(d))
               for node, (s, d) in {"n1": (1000.0, 800.0), "n2": (750.0, 600.0), "n3": (900.0, 700.0)}.items()]
    report = json_report(_compare(*_write(tmp_path, reports)))
    assert findings(report, "FLT006") == []

"""FLT rules on node records built in the test: tolerances, tie-breaks, quiet cases.

Pure tests: the node records are made by `node_record` from report dicts in
the shape envdoctor writes, and the rules run through `fleet_report`, so every
Report here is also checked against the schema (conftest).
"""
from __future__ import annotations

from typing import Any

import pytest

from envdoctor.catalog import load_catalog
from envdoctor.facts.fleet import node_record
from envdoctor.fleet import fleet_report

GIB = 2**30


def _report(*, nofile: int | None = 65536, shm: int = 32 * GIB, cpus: int = 8, memory: int = 256 * GIB,
            cgroup_limit: int | None = None, python: str = "3.11.9", **facts: Any) -> dict[str, Any]:
    system = {
        "python": python,
        "cpu": {"count": 16, "usable": cpus},
        "memory": {"total": memory, "cgroup_limit": cgroup_limit},
        "limits": {"nofile": {"soft": nofile, "hard": nofile, "soft_unlimited": nofile is None}},
        "shm": {"path": "/dev/shm", "total": shm, "free": shm},
    }
    return {"schema_version": 1, "tool": {"name": "envdoctor", "version": "0.1.0"},
            "host": {"hostname": "x", "platform": "linux-64"}, "target": {"python": python},
            "facts": {"system": system, **facts}, "loader": facts.pop("loader", None),
            "findings": [], "errors": [], "summary": {"error": 0, "warning": 0, "info": 0}}


def _fleet(**reports: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "compare", "unreadable": [],
            "nodes": [node_record(name, report, f"{name}.json") for name, report in reports.items()]}


def _rule(fleet: dict[str, Any], rule: str) -> list[Any]:
    return fleet_report(fleet).by_rule(rule)


def test_every_flt_rule_is_in_the_catalog_with_its_severity() -> None:
    catalog = load_catalog()
    severities = {m.id: m.severity.value for m in catalog.rules if m.family == "FLT"}
    assert severities == {"FLT001": "error", "FLT002": "warning", "FLT003": "warning", "FLT004": "warning",
                          "FLT005": "warning", "FLT006": "warning", "FLT007": "error", "FLT008": "warning",
                          "FLT009": "error", "FLT010": "error"}


def test_a_single_machine_check_never_runs_the_flt_rules() -> None:
    from envdoctor.config import Config, ConfigError
    from envdoctor.engine import run_check

    catalog = load_catalog()
    assert {m.id for m in catalog.rules if m.scope == "fleet"} == {f"FLT{i:03d}" for i in range(1, 11)}
    report = run_check(Config(no_loader=True, select=("SYS", "FLT")))
    ran = {f.rule for f in report.findings} | {e.get("rule") for e in report.errors}
    assert not {r for r in ran if r and r.startswith("FLT")}
    assert "fleet" not in report.facts
    with pytest.raises(ConfigError, match="compare several machines: run them with `envdoctor compare"):
        run_check(Config(no_loader=True, select=("FLT001",)))


def test_sizes_within_ten_percent_are_the_same_limit() -> None:
    fleet = _fleet(a=_report(memory=256 * GIB, shm=128 * GIB), b=_report(memory=250 * GIB, shm=125 * GIB),
                   c=_report(memory=240 * GIB, shm=120 * GIB))
    assert _rule(fleet, "FLT005") == []


def test_a_smaller_machine_and_a_memory_limit_are_limit_drift() -> None:
    fleet = _fleet(a=_report(), b=_report(), c=_report(memory=128 * GIB, cgroup_limit=64 * GIB))
    drift = {f.evidence["what"]: f for f in _rule(fleet, "FLT005")}
    assert set(drift) == {"memory_total", "memory_limit"}
    assert drift["memory_total"].evidence["odd_nodes"] == ["c"]
    assert drift["memory_limit"].evidence["values"] == {"a": "unlimited", "b": "unlimited", "c": 64 * GIB}
    assert drift["memory_limit"].message == "cgroup memory limit differs across nodes: unlimited on a, b; 64.0 GiB on c"
    assert "srun --mem" in drift["memory_limit"].fix


def test_a_tie_prefers_the_newer_version_and_the_larger_limit() -> None:
    fleet = _fleet(a=_report(python="3.11.9", nofile=1024), b=_report(python="3.11.10", nofile=65536))
    (python,) = _rule(fleet, "FLT002")
    assert python.evidence["expected"] == "3.11.10" and python.evidence["odd_nodes"] == ["a"]
    assert "Python 3.11.10" in python.fix
    (nofile,) = _rule(fleet, "FLT005")
    assert nofile.evidence["expected"] == 65536 and nofile.evidence["odd_nodes"] == ["a"]
    assert nofile.fix.startswith("on a: ulimit -n 65536")


def test_an_unlimited_nofile_beats_a_number() -> None:
    fleet = _fleet(a=_report(nofile=None), b=_report(nofile=4096))
    (nofile,) = _rule(fleet, "FLT005")
    assert nofile.evidence["values"] == {"a": "unlimited", "b": 4096}
    assert nofile.evidence["odd_nodes"] == ["b"]


def test_a_node_without_a_gpu_beside_gpu_nodes_is_driver_drift() -> None:
    gpu = {"available": True, "driver_version": "550.54.15", "cuda_driver_version": "12.4"}
    fleet = _fleet(a=_report(gpu=gpu), b=_report(gpu=gpu), c=_report(gpu={"available": False, "reason": "no NVML"}))
    drift = {f.evidence["what"]: f for f in _rule(fleet, "FLT001")}
    assert drift["driver"].evidence["values"] == {"a": "550.54.15", "b": "550.54.15", "c": "none"}
    assert drift["driver"].evidence["odd_nodes"] == ["c"]


def test_same_packages_and_channels_everywhere_are_quiet() -> None:
    packages = {"distributions": [{"name": "numpy", "version": "1.26.4"}, {"name": "Pillow", "version": "10.4.0"}],
                "conda": {"present": True, "records": [
                    {"name": "numpy", "version": "1.26.4", "channel": "conda-forge"}]}}
    fleet = _fleet(a=_report(packages=packages), b=_report(packages=packages))
    report = fleet_report(fleet)
    assert [f.rule for f in report.findings] == []


def test_missing_sections_are_not_compared_and_said_so() -> None:
    gpu = {"available": True, "driver_version": "550.54.15"}
    fleet = _fleet(a=_report(gpu=gpu), b=_report())  # b's report has no gpu facts (an older envdoctor)
    report = fleet_report({**fleet, "not_compared": []})
    assert report.by_rule("FLT001") == []
    from envdoctor.rules.fleet.drift import not_compared

    notes = {n["key"]: n for n in not_compared(fleet)}
    assert notes["driver"]["missing_on"] == ["b"]
    assert notes["driver"]["reason"] == "only 1 of 2 reports record it in their gpu facts"


@pytest.mark.parametrize("channel, expected", [
    ("https://conda.anaconda.org/conda-forge/linux-64", "conda-forge"),
    ("https://repo.anaconda.com/pkgs/main", "pkgs/main"),
    ("conda-forge", "conda-forge"),
    ("pytorch", "pytorch"),
])
def test_channel_names_are_normalized(channel: str, expected: str) -> None:
    from envdoctor.facts.fleet import channel_name

    assert channel_name(channel) == expected


def _expecting(fleet: dict[str, Any], names: list[str], source: str) -> dict[str, Any]:
    seen = {n["node"] for n in fleet["nodes"]}
    fleet["expected"] = {"source": source, "nodes": names, "count": len(names),
                         "missing": [n for n in names if n not in seen], "reported": len(fleet["nodes"])}
    return fleet


def test_an_expected_node_without_a_report_is_flt010() -> None:
    fleet = _expecting(_fleet(node01=_report(), node02=_report()), ["node01", "node02", "node03"],
                       "--nodes node[01-03]")
    (missing,) = _rule(fleet, "FLT010")
    assert missing.severity.value == "error"
    assert missing.message == "node03 has no readable report (--nodes node[01-03]; 2 of 3 nodes reported)"
    assert missing.evidence == {"node": "node03", "expected_from": "--nodes node[01-03]", "expected": 3,
                                "reported": 2}
    assert "srun -w node03" in missing.fix


def test_every_expected_node_reported_is_quiet_for_flt010() -> None:
    fleet = _expecting(_fleet(node01=_report(), node02=_report()), ["node01", "node02"], "SLURM_JOB_NODELIST=node[01-02]")
    assert _rule(fleet, "FLT010") == []
    # A count, and no expectation at all: one report is never a silent pass.
    counted = _fleet(a=_report(), b=_report())
    counted["expected"] = {"source": "--expect 3", "nodes": [], "count": 3, "missing": [], "reported": 2}
    assert [f.message for f in _rule(counted, "FLT010")] == ["2 of 3 expected reports (--expect 3)"]
    alone = _fleet(a=_report())
    alone["expected"] = {"source": None, "nodes": [], "count": None, "missing": [], "reported": 1}
    assert [f.evidence for f in _rule(alone, "FLT010")] == [{"expected": 2, "reported": 1}]

"""Fleet reports enter as untyped JSON and are narrowed once (issue 28, typed edges).

`compare` reads saved reports as `Mapping[str, object]`: a section of the wrong shape is left
out of the node record, never a traceback, and never a nested value among the compared ones.
These run the real `compare_paths` on real files written here.
"""
from __future__ import annotations

import json
from pathlib import Path

from envdoctor.fleet.compare import compare_paths
from envdoctor.model import SCHEMA_VERSION


def _report(hostname: object, facts: dict[str, object]) -> dict[str, object]:
    return {"schema_version": SCHEMA_VERSION, "tool": {"name": "envdoctor", "version": "0"},
            "generated_at": "2026-01-01T00:00:00Z", "host": hostname, "target": {"python": "3.11.4"},
            "facts": facts, "findings": [], "errors": [], "summary": {"error": 0, "warning": 0, "info": 0}}


def _write(folder: Path, name: str, report: dict[str, object]) -> str:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    return str(path)


def test_sections_of_the_wrong_shape_are_left_out_not_raised(tmp_path: Path) -> None:
    sound = _report({"hostname": "a"}, {"system": {"cpu": {"usable": 8}, "shm": {"total": 2**33}},
                                        "torch": {"version": "2.4.0"}})
    # host a list, a section a string, nested values where a number or a version belongs
    odd = _report([1, 2], {"system": {"cpu": {"usable": [8]}, "shm": {"total": {"bytes": 1}}, "limits": "x"},
                           "torch": {"version": {"major": 2}, "nvidia_wheels": [1]},
                           "gpu": {"devices": "none", "nvml": 3}, "storage": {"paths": 5, "read_probe": []},
                           "packages": {"distributions": {"torch": "2.4.0"}, "conda": 7}})
    odd["loader"] = {"runs": 3}
    report = compare_paths([_write(tmp_path, "a", sound), _write(tmp_path, "b", odd)])

    assert report.errors == []  # no rule crashed on the odd node's facts
    nodes = {n["source"]: n for n in report.facts["fleet"]["nodes"]}
    values = nodes[str(tmp_path / "b.json")]["values"]
    assert all(isinstance(v, (str, int, float)) for v in values.values()), values
    assert "usable_cpus" not in values and "shm_total" not in values
    assert nodes[str(tmp_path / "b.json")]["hostname"] is None or isinstance(
        nodes[str(tmp_path / "b.json")]["hostname"], str)
    assert sorted(nodes) == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]


def test_a_conda_package_without_a_version_on_some_nodes_only(tmp_path: Path) -> None:
    def node(name: str, records: list[dict[str, object]]) -> str:
        return _write(tmp_path, name, _report({"hostname": name}, {
            "packages": {"distributions": [{"name": "numpy", "version": "1.26.4"}],
                         "conda": {"present": True, "records": records}}}))

    report = compare_paths([node("a", [{"name": "nccl", "channel": "conda-forge"}]), node("b", [])])

    assert report.errors == []
    [found] = [f for f in report.findings if f.rule == "FLT003"]
    assert found.evidence["package"] == "nccl"
    assert found.evidence["present_on"] == {"a": None} and found.evidence["absent_on"] == ["b"]

"""What the Lightning and Hugging Face callback tests both assert of a profiled train loader."""
from __future__ import annotations

import re
from typing import Any


def assert_profiled_once(report: Any, err: str, header: str, dataset: str, length: int, batch_size: int) -> None:
    """The callback profiled this DataLoader once, on the node's one process, and printed that profile
    once: a header line naming the loader and the CPU share, its bottleneck and its measured curve."""
    loader = report.loader
    assert loader["dataset"] == dataset
    assert loader["length"] == length and loader["batch_size"] == batch_size
    assert loader["procs_per_node"] == 1
    assert loader["runs"] and loader["runs"][0]["num_workers"] == 0 and loader["runs"][0]["samples_per_s"] > 0
    assert loader["failure"] is None and report.by_rule("DL006") == []
    assert err.count(header) == 1, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith(header)]
    assert f"{dataset}, {length} samples; " in line
    node_cpus = report.facts["system"]["cpu"]["usable"]
    assert f"1 training process(es) share this node's {node_cpus} usable CPU(s): {node_cpus} each" in line
    # The profile printed is this loader's: its bottleneck and its measured samples/s by num_workers.
    assert f"  loader: bottleneck {loader['bottleneck']}" in err
    curve = re.search(r"\(samples/s by num_workers ([^)]*)\)", err)
    assert curve, err
    printed = [int(point.split(":")[0]) for point in curve.group(1).split(", ")]
    assert printed == sorted(r["num_workers"] for r in loader["runs"] if r.get("samples_per_s"))

"""The live DataLoader smoke test: the `loader` section of the facts.

`gather_loader` chooses what to measure — the user's DataLoader
(`preflight(loader=...)`), a dataset factory (`--dataset MODULE:CALLABLE`),
an image folder (`--data PATH`) or the built-in synthetic dataset — runs the
measurements in the target interpreter under a hard time budget
(`supervisor`), and files what the runner observed into a `LoaderFacts`
(types in `envdoctor.facts.loader`). It judges nothing: the bottleneck
class, the knee and the recommendation are the judge layer's
(`envdoctor.judge.loader`, with the knee itself in
`envdoctor.inside.loader_knee`, which the runner imports too), which the DL rules
read and the engine adds to the report's `loader` object.
"""
from __future__ import annotations

import os
import pickle
import sys
import tempfile
from typing import TYPE_CHECKING, Any, cast

from envdoctor.catalog import loader_reads
from envdoctor.facts.loader import FailureFacts, LoaderFacts
from envdoctor.facts.node_share import cpus_per_process, processes_per_node
from envdoctor.facts.system import worker_cpus
from envdoctor.inside import loader_protocol
from envdoctor.inside.loop_bootstrap.envdoctor_loader_settings import loader_settings
from envdoctor.loader.progress import current_sink
from envdoctor.loader.supervisor import StageRun, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import Config, FactsReader

#: Seconds of the budget kept back for starting the runner and tearing it down.
STAGE_OVERHEAD_S = 0.7
#: Why a check whose every rule reads less than the whole smoke test (catalog.loader_reads: a rule's `loader`
#: key) skips its timed runs, by how far it goes.
UNTIMED_BECAUSE = {
    "checks": "no selected rule reads them (each says `loader = \"checks\"` in the catalog): the num_workers sweep, "
              "the paired windows, and the worker memory, persistent_workers and pin_memory runs after them",
    "memory": "no selected rule reads them (each says `loader = \"checks\"` or `loader = \"memory\"` in the "
              "catalog): the num_workers sweep, the paired windows, and the persistent_workers and pin_memory runs; "
              "the worker memory run follows the checks",
}


def gather_loader(facts: FactsReader) -> LoaderFacts | None:
    """The loader section: None when the stage is switched off (--no-loader)."""
    config = facts.config
    if config.no_loader:
        return None
    system = facts.get("system") or {}
    procs = processes_per_node(config.procs_per_node)
    usable = cpus_per_process(worker_cpus(system.get("cpu") or {}), procs)
    available = (system.get("memory") or {}).get("effective_available")
    source, objects, description = choose_source(config)
    section = empty_section(description)
    # The rules tell the user's own data from the built-in synthetic dataset by this.
    section["source"] = {"kind": source["kind"]}
    section["budget_s"] = config.budget
    section["step_time_s"] = config.step_time
    section["usable_cpus"] = usable
    section["procs_per_node"] = procs
    plan: dict[str, Any] = {
        "budget_s": config.budget,
        "budget_left_s": max(1.0, config.budget - STAGE_OVERHEAD_S),
        "source": source,
        "usable_cpus": usable,
        "step_time_s": config.step_time,
        "torch_probe": True,
        "check_cuda": True,
        # How far the runner goes: "checks", "memory" or "timed" (all), by what the selected rules read.
        "measure": loader_reads(config.select, config.ignore),
    }
    if plan["measure"] in UNTIMED_BECAUSE:
        section["skipped"].append({"what": "timed runs", "reason": UNTIMED_BECAUSE[plan["measure"]]})
    if objects is None:
        target = facts["target"]
        interpreter = target.get("interpreter")
        if not interpreter or target.get("interpreter_error"):
            reason = target.get("interpreter_error") or "the environment has no Python interpreter"
            section["skipped"].append({"what": "smoke test", "reason": reason})
            return section
        if source["kind"] == "invalid":
            section["failure"] = {"kind": "factory", "message": source["error"], "index": None,
                                  "num_workers": None, "where": "factory", "exception": None, "signal": None}
            return section
        if source["kind"] == "pickle" and source.get("error"):
            section["skipped"].append({"what": "smoke test", "reason": source["error"]})
            section["pickle"] = source["pickle"]
            return section
        outcome = run_stage(plan, interpreter=interpreter, budget_s=config.budget, cwd=os.getcwd(),
                            available_bytes=available, progress=current_sink())
        if source["kind"] == "pickle":
            _unlink(source["path"])
    else:
        outcome = run_stage(plan, objects=objects, budget_s=config.budget, available_bytes=available,
                            progress=current_sink())
    assemble(section, outcome)
    return section


def empty_section(description: str) -> LoaderFacts:
    return {"dataset": description, "runs": [], "skipped": [], "batch_bytes": None, "tensors_per_batch": None,
            "worker_rss_bytes": None, "current": None, "failure": None}


def choose_source(config: Config) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """What to measure: (source for the runner's plan, objects for a forked run, a description)."""
    if config.loader_object is not None:
        dataset, kwargs, description = describe_loader(config.loader_object)
        # macOS has fork, but forking a process that has loaded Apple's frameworks (torch does) can crash the
        # child; that is why spawn is its default. There, as on Windows, the loader crosses pickled.
        if hasattr(os, "fork") and sys.platform != "darwin":
            return {"kind": "object"}, {"dataset": dataset, "kwargs": kwargs, "description": description}, description
        return pickled_source(dataset, kwargs, description), None, description
    if config.loader_source is not None:
        return dict(config.loader_source), None, str(config.loader_source.get("description") or "your DataLoader")
    if config.dataset:
        module, sep, attr = config.dataset.partition(":")
        if not (module and sep and attr):
            return ({"kind": "invalid", "error": f"--dataset wants MODULE:CALLABLE (e.g. train:make_dataset), "
                                                 f"not {config.dataset!r}"}, None, config.dataset)
        return {"kind": "factory", "spec": config.dataset, "cwd": os.getcwd()}, None, config.dataset
    if config.data:
        path = os.path.abspath(config.data)
        return {"kind": "folder", "path": path}, None, f"image folder {path}"
    return {"kind": "synthetic"}, None, "synthetic images (built in)"


def describe_loader(loader: object) -> tuple[object, dict[str, Any], str]:
    """The dataset and the DataLoader settings of a live DataLoader, to re-create it in the runner."""
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        raise TypeError(f"preflight(loader=...) wants a torch DataLoader, not {type(loader).__name__}")
    kwargs, description = loader_settings(loader)
    return dataset, kwargs, description


def pickled_source(dataset: object, kwargs: dict[str, Any], description: str) -> dict[str, Any]:
    """Where fork is missing (Windows): the dataset crosses to the runner as a pickle."""
    handle = tempfile.NamedTemporaryFile("wb", suffix=".pkl", prefix="envdoctor-loader-", delete=False)
    try:
        with handle:
            pickle.dump({"dataset": dataset, "kwargs": kwargs, "description": description}, handle)
    except Exception as exc:
        _unlink(handle.name)
        problems = []
        for name, obj in (("dataset", dataset), *kwargs.items()):
            try:
                pickle.dumps(obj)
            except Exception as part:
                problems.append({"object": name, "type": type(obj).__qualname__,
                                 "error": f"{type(part).__name__}: {part}"})
        problems = problems or [{"object": "DataLoader", "type": type(dataset).__qualname__,
                                 "error": f"{type(exc).__name__}: {exc}"}]
        return {"kind": "pickle", "error": f"the DataLoader cannot be pickled to run the smoke test: {exc}",
                "pickle": {"start_method": "spawn", "checked": True, "problems": problems}}
    return {"kind": "pickle", "path": handle.name, "sys_path": [p or os.getcwd() for p in sys.path]}


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def assemble(facts_section: LoaderFacts, outcome: StageRun) -> None:
    """Fill the section from the runner's events and from how the run ended."""
    # The events are the runner's JSON: filed as they came, their shapes are LoaderFacts' parts.
    section = cast(dict[str, Any], facts_section)
    for event in outcome.events:
        kind = event.get("ev")
        if kind == loader_protocol.RESULT:
            _take_result(section, event.get("key"), event.get("value"))
        elif kind == loader_protocol.FAILURE:
            section["failure"] = event.get("value")
        elif kind in (loader_protocol.SETUP_ERROR, loader_protocol.RUNNER_ERROR):
            section["skipped"].append({"what": "smoke test", "reason": event.get("message")})
            if kind == loader_protocol.RUNNER_ERROR:
                section["runner_error"] = event.get("traceback")
    if section["failure"] is None:
        section["failure"] = _failure_from_outcome(outcome, section)
    section["runner"] = {"pid": outcome.pid, "returncode": outcome.returncode, "killed_for": outcome.killed_for,
                         "wall_s": round(outcome.wall_s, 3), "peak_rss_bytes": outcome.peak_rss_bytes or None,
                         "memory_cap_bytes": outcome.memory_cap_bytes, "shm_removed": outcome.shm_removed,
                         "tempdir_removed": outcome.tempdir_removed}
    if section["failure"] is not None and outcome.log_tail.strip():
        section["failure"]["log_tail"] = outcome.log_tail.strip().splitlines()[-12:]
    rss = [r.get("worker_rss_bytes") for r in section["runs"] if r.get("worker_rss_bytes")]
    section["worker_rss_bytes"] = max(rss) if rss else None
    section["wall_s"] = round(outcome.wall_s, 3)


def _take_result(section: dict[str, Any], key: str | None, value: Any) -> None:
    if key == "dataset":
        section["dataset"] = value.get("description") or section["dataset"]
        section["length"] = value.get("length")
        section["iterable"] = value.get("iterable")
        section["start_method"] = value.get("start_method")
        section["batch_size"] = value.get("batch_size")
        section["current"] = value.get("current")
        decoding = value.get("decoding")
        if decoding:
            section["decoding"] = decoding
            if decoding.get("undecoded_images"):
                section["skipped"].append({
                    "what": "decoding",
                    "reason": f"{decoding['undecoded_images']} image file(s) were read but not decoded: the "
                              "environment has no Pillow, so the curve measures reading only (install pillow "
                              "there, or pass --dataset with your own Dataset)"})
    elif key == "batch":
        section["batch_bytes"] = value.get("batch_bytes")
        section["tensors_per_batch"] = value.get("tensors_per_batch")
        section["non_tensor_types"] = value.get("non_tensor_types")
        section["sample_types"] = value.get("sample_types")
    elif key == "run":
        section["runs"].append(value)
    elif key == "skip":
        section["skipped"].append(value)
    elif key == "pin":
        section["pin_memory"] = value
    elif key in ("torch", "torch_probe", "getitem", "pickle", "persistent", "paired", "duplicates", "rng",
                 "hazards", "memory"):
        section[key] = value
    elif key == "opencv":
        section["opencv"] = {**section.get("opencv", {}), **value}
    elif key == "opencv_workers":
        # OpenCV imported only in __getitem__ shows in the workers alone.
        section["opencv"] = {**section.get("opencv", {}), "worker_threads": value.get("threads"),
                             "worker_threads_num_workers": value.get("num_workers")}


def _failure_from_outcome(outcome: StageRun, section: dict[str, Any]) -> FailureFacts | None:
    """A failure the runner could not report itself: killed by us, or died."""
    return cast("FailureFacts | None", _describe_outcome(outcome, section))


def _describe_outcome(outcome: StageRun, section: dict[str, Any]) -> dict[str, Any] | None:
    phase = (outcome.last_phase or {}).get("name")
    index = outcome.last_index if phase in ("getitem", "collate") else None
    workers = (outcome.last_phase or {}).get("num_workers")
    base = {"index": index, "num_workers": workers if phase == "run" else (0 if phase == "getitem" else None),
            "where": "__getitem__" if phase in ("getitem", "run") else phase, "exception": None, "signal": None}
    if outcome.killed_for == "memory":
        from envdoctor.units import human_bytes

        return {**base, "kind": "memory",
                "message": (f"the smoke test's processes grew to {human_bytes(outcome.peak_rss_bytes)}, above "
                            f"the cap of {human_bytes(outcome.memory_cap_bytes)}"
                            + (f", while fetching index {index}" if index is not None else "")
                            + "; they were killed")}
    if outcome.killed_for in ("phase", "budget"):
        if phase is None and not outcome.events:
            started_hung(section, outcome)
            return None
        if phase == "import":
            budget = section.get("budget_s")
            section["skipped"].append({"what": "smoke test", "reason": "importing torch did not finish within "
                                       f"the {budget} s budget"})
            # A slow import is not yet a hung one: the torch probe runs, but within the budget again, not 60 s.
            section["torch_probe"] = {"source": "loader", "timed_out": True, "stage": "import",
                                      "seconds": round(outcome.wall_s, 3)}
            return None
        if phase == "run" and outcome.killed_for == "budget":
            section["skipped"].append({"what": f"num_workers={workers}",
                                       "reason": "stopped at the end of the budget"})
            return None
        what = {"build": "the dataset factory", "getitem": f"__getitem__({index})" if index is not None
                else "__getitem__", "collate": "collate_fn", "pickle": "pickling the dataset",
                "run": f"the run with num_workers={workers}"}.get(phase or "", "the smoke test")
        return {**base, "kind": "factory" if phase == "build" else "hung",
                "message": f"{what} did not finish in time and was killed"}
    if not outcome.finished:
        sig = outcome.signal_name()
        how = f"was killed by {sig}" if sig else f"exited with status {outcome.returncode}"
        where = f" while fetching index {index}" if index is not None else (f" during {phase}" if phase else "")
        return {**base, "kind": "crashed", "signal": sig,
                "message": f"the process running the dataset {how}{where}"}
    return None


#: Waiting this long without a word from the runner is a hung start, not a slow one on a busy machine.
STARTUP_HANG_S = 5.0


def started_hung(section: dict[str, Any], outcome: StageRun) -> None:
    """The target's interpreter never reached the runner's first line: it hung starting (a sitecustomize,
    usercustomize or `.pth` file that blocks).

    The smoke test is skipped with that reason. When the stage waited long enough to tell a hang from a
    slow start, the torch section is handed the same observation (`torch_probe`, see facts.PROBES), so the
    torch probe does not start the interpreter to hang a second time: the user's --budget is what the
    whole check waits for such a target.
    """
    budget = float(section.get("budget_s") or outcome.wall_s)
    what = "the environment's Python did not start"
    section["skipped"].append({"what": "smoke test", "reason": f"{what} within the {budget:g} s budget"})
    if outcome.wall_s < STARTUP_HANG_S:
        return
    section["torch_probe"] = {
        "ran": True, "source": "loader", "timed_out": True, "stage": "start", "timeout_s": budget,
        "seconds": round(outcome.wall_s, 3),
        "error": f"{what} within the loader stage's {budget:g} s (the interpreter was not started again)",
        "stderr_tail": outcome.log_tail[-2000:],
    }


def exhaustive_sweep(source: dict[str, Any], workers: list[int], point_s: float = 1.5, *,
                     interpreter: str | None = None, cwd: str | None = None,
                     budget_s: float | None = None, pair: tuple[int, int] | None = None) -> LoaderFacts:
    """Every worker count in `workers`, each timed for `point_s` seconds: the baseline the smoke test's
    recommendation is judged against (benchmarks/bench_loader.py). With `pair` (two of `workers`), those
    two are then re-measured against each other in interleaved, paired windows (the `paired` facts)."""
    import sys

    budget = budget_s or (8.0 + len(workers) * (point_s + 3.0) + (8.0 if pair else 0.0))
    plan = {"budget_s": budget, "budget_left_s": budget, "source": source, "usable_cpus": max(workers),
            "workers": list(workers), "point_s": point_s, "torch_probe": False, "check_cuda": False,
            "pair": list(pair) if pair else None}
    outcome = run_stage(plan, interpreter=interpreter or sys.executable, budget_s=budget, cwd=cwd or os.getcwd())
    section = empty_section(source.get("spec") or source["kind"])
    section["source"] = {"kind": source["kind"]}
    section["usable_cpus"] = max(workers)
    assemble(section, outcome)
    return section


__all__ = ["LoaderFacts", "cpus_per_process", "exhaustive_sweep", "gather_loader", "processes_per_node"]

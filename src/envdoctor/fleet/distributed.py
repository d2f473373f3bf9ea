"""`check --distributed` / `report --distributed`: every rank's facts, one fleet view on rank 0.

Under torchrun (or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT) every rank runs the normal checks on its own machine, with the
DataLoader stage only where LOCAL_RANK is 0, so a node measures its loader
once rather than once per rank. Each rank's node record (the comparable
facts, see `fleet.nodes`) and findings travel to rank 0 through the
torch.distributed key-value store the launcher set up, each under its own
rank's key, so rank 0 knows exactly which rank is missing; it waits at most
`--distributed-timeout` seconds. When every rank reported, the ranks then form
a gloo process group and run one all_reduce (with the same timeout), since
collectives use other sockets than the store. Rank 0 builds the fleet Report
and puts the job's exit code in the store; the other ranks print nothing and
exit with that code, so every rank ends at once and a launcher's agents all
succeed or all fail together (torchrun's agents otherwise wait up to 300 s in
their exit barrier for the agent of a rank that exited with another code).

This is the one place envdoctor imports torch: the user asked for a torch
launcher, and the import happens inside `run_distributed` only.

A rank that raises is reported with its reason, a rank that says nothing within
the timeout as timed out, and when the launcher stops the job because a rank
exited (torchrun sends SIGTERM to the others) rank 0 still prints what it has
and names the ranks that never reported. Nothing here waits without a limit.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Protocol, TypedDict

from envdoctor.config import Config
from envdoctor.model import Finding, Location, Report, Severity

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.fleet import Collective, FailedRank, NodeRecord

#: Environment variables the torch.distributed `env://` rendezvous needs.
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
#: A test hook, not a feature: "RANK:MODE" makes that rank raise, hang or exit
#: (MODE = raise | hang | exit), so the tests can show how rank 0 reports it.
TEST_FAULT_VARIABLE = "ENVDOCTOR_TEST_RANK_FAULT"
#: How often rank 0 looks for reports that have arrived.
POLL_S = 0.05
#: Under srun without torchrun and without MASTER_PORT: the store's port is this plus the job id modulo the span.
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000
#: The all_reduce check needs seconds, not the whole timeout of a loader stage.
COLLECTIVE_TIMEOUT_CAP_S = 60.0
#: How long another rank waits for rank 0's exit code once the collective is done (rank 0 only
#: assembles the report then), and how long rank 0 waits for them to read it.
EXIT_WAIT_S = 60.0
EXIT_READ_WAIT_S = 10.0
#: A rank's exit code when rank 0 vanished before deciding one: the job did not get its verdict.
EXIT_NO_VERDICT = 1


class _PlacementRequired(TypedDict):
    rank: int
    world_size: int
    local_rank: int
    node_rank: int | None
    run_id: str


class Placement(_PlacementRequired, total=False):
    """Where this rank runs, from the launcher's variables (see launcher_environment)."""

    #: The launcher variables as read (or derived from Slurm's); run_distributed moves them into os.environ.
    environ: dict[str, str]


class RankPayload(TypedDict, total=False):
    """What a rank sends rank 0: its place, and its node record, findings and errors, or why it failed."""

    rank: int
    local_rank: int
    node_rank: int | None
    hostname: str
    loader_stage: bool
    status: str  # "ok" or "failed"
    reason: str
    record: NodeRecord
    findings: list[dict[str, object]]
    errors: list[dict[str, object]]
    target: dict[str, object] | None


class _Store(Protocol):
    """The part of a torch.distributed Store envdoctor uses (keys and values through the launcher's store)."""

    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def add(self, key: str, amount: int) -> int: ...
    def wait(self, keys: list[str], timeout: timedelta) -> None: ...


class _Stop:
    """Set by SIGTERM on rank 0: the launcher is stopping the job, report what we have."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


def launcher_environment(environ: dict[str, str] | None = None) -> Placement:
    """Rank, world size and node placement from the launcher's variables."""
    from envdoctor.errors import UsageError

    environ = dict(os.environ if environ is None else environ)
    missing = [name for name in LAUNCHER_VARIABLES if not environ.get(name)]
    if missing and not environ.get("RANK"):
        derived = slurm_launcher_variables(environ)
        if derived:
            environ.update(derived)
            missing = [name for name in LAUNCHER_VARIABLES if not environ.get(name)]
    if missing:
        raise UsageError(
            f"--distributed needs the torch.distributed variables {', '.join(LAUNCHER_VARIABLES)} "
            f"({', '.join(missing)} not set): start it with torchrun, e.g. `torchrun --standalone "
            "--nproc-per-node 2 -m envdoctor check --distributed`, or with srun inside a Slurm allocation, "
            "or set them in the job script")
    try:
        rank, world_size = int(environ["RANK"]), int(environ["WORLD_SIZE"])
        local_rank = int(environ.get("LOCAL_RANK", "0"))
        node_rank = int(environ["GROUP_RANK"]) if environ.get("GROUP_RANK") else None
    except ValueError as exc:
        raise UsageError(f"--distributed: a launcher variable is not a number ({exc})") from None
    if not 0 <= rank < world_size:
        raise UsageError(f"--distributed: RANK={rank} is outside WORLD_SIZE={world_size}")
    return {"rank": rank, "world_size": world_size, "local_rank": local_rank, "node_rank": node_rank,
            "run_id": environ.get("TORCHELASTIC_RUN_ID") or environ.get("ENVDOCTOR_SLURM_RUN_ID") or "run",
            "environ": {name: environ[name] for name in LAUNCHER_VARIABLES}}


def slurm_launcher_variables(environ: dict[str, str]) -> dict[str, str]:
    """Under `srun` without torchrun: RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK, MASTER_ADDR/PORT from Slurm's.

    Rank 0 is the step's task 0, on the first node of the step's node list (MASTER_ADDR, when set,
    wins: node names that do not resolve); the port is MASTER_PORT, else one derived from the job id,
    the same in every task. Empty outside a Slurm step.
    """
    from envdoctor.fleet.placement import expand_hostlist

    tasks = environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS")
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    if not environ.get("SLURM_PROCID") or not tasks or not environ.get("SLURM_JOB_ID"):
        return {}
    try:
        head = environ.get("MASTER_ADDR") or (expand_hostlist(nodelist)[0] if nodelist else "")
        port = environ.get("MASTER_PORT") or str(SLURM_PORT_BASE + int(environ["SLURM_JOB_ID"]) % SLURM_PORT_SPAN)
    except (ValueError, IndexError):
        return {}
    if not head:
        return {}
    return {"RANK": environ["SLURM_PROCID"], "WORLD_SIZE": tasks, "LOCAL_RANK": environ.get("SLURM_LOCALID", "0"),
            "GROUP_RANK": environ.get("SLURM_NODEID", ""), "MASTER_ADDR": head, "MASTER_PORT": port,
            "ENVDOCTOR_SLURM_RUN_ID": f"slurm-{environ['SLURM_JOB_ID']}.{environ.get('SLURM_STEP_ID', '0')}"}


def _test_fault(rank: int, timeout: float) -> None:
    """The test hook: make this rank raise, hang past the timeout, or exit without reporting."""
    target, _, mode = os.environ.get(TEST_FAULT_VARIABLE, "").partition(":")
    if target != str(rank):
        return
    if mode == "raise":
        raise RuntimeError(f"{TEST_FAULT_VARIABLE} made rank {rank} fail")
    if mode == "hang":
        time.sleep(3 * timeout)  # bounded: long enough for rank 0 to give up on it
    if mode == "exit":
        os._exit(3)


def _own_report(config: Config, placement: Placement) -> RankPayload:
    """What this rank sends rank 0: its node record, findings and errors, or why it failed.

    The node record, not the whole report: rank 0 of a thousand ranks should
    receive a few kilobytes from each, not every rank's full package list.
    """
    from envdoctor.engine import run_check
    from envdoctor.facts.fleet import node_record

    # One loader stage per node: the other local ranks would only measure each other.
    loader_stage = not config.no_loader and placement["local_rank"] == 0
    from envdoctor.fleet.placement import placeholder_values

    # The scheduler's node name where there is one: several slurmd (or containers) may share a host name.
    base: RankPayload = {"rank": placement["rank"], "local_rank": placement["local_rank"],
            "node_rank": placement["node_rank"], "hostname": placeholder_values()["node"],
            "loader_stage": loader_stage}
    try:
        _test_fault(placement["rank"], config.distributed_timeout)
        local = replace(config, distributed=False, no_loader=not loader_stage)
        report = run_check(local)
    except Exception as exc:  # any failure of this rank's checks is rank 0's to report
        return {**base, "status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    data = json.loads(json.dumps(report.to_dict(), default=str))
    record = node_record(f"rank{placement['rank']}@{base['hostname']}", data, f"rank {placement['rank']}",
                         rank=placement["rank"], local_rank=placement["local_rank"],
                         node_rank=placement["node_rank"], loader_stage=loader_stage)
    return {**base, "status": "ok", "record": record, "findings": data["findings"], "errors": data["errors"],
            "target": data["target"] if placement["rank"] == 0 else None}


def _connect(dist: ModuleType, placement: Placement, timeout: float) -> _Store:
    """The launcher's store (torchrun's agent store, or one rank 0 hosts), under envdoctor's own prefix."""
    store, _, _ = next(dist.rendezvous("env://", timeout=timedelta(seconds=timeout)))
    store.set_timeout(timedelta(seconds=timeout))
    return dist.PrefixStore(f"envdoctor/{placement['run_id']}/", store)


def _collect(store: _Store, world_size: int, deadline: float, started: float,
             stop: _Stop) -> tuple[dict[int, RankPayload], list[FailedRank]]:
    """Every other rank's payload, or why it has none: failed, timed out, stopped."""
    arrived: dict[int, RankPayload] = {}
    pending = set(range(1, world_size))
    while pending:
        for rank in sorted(pending):
            if store.check([f"rank/{rank}"]):
                arrived[rank] = _payload(rank, json.loads(store.get(f"rank/{rank}")))
                pending.discard(rank)
        if not pending or stop.requested or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    waited = round(time.monotonic() - started, 1)
    status = "stopped" if stop.requested else "timed-out"
    reason = ("the launcher stopped the job before this rank reported" if stop.requested
              else f"no report within {waited:.0f} s")
    missing: list[FailedRank] = [{"rank": rank, "status": status, "reason": reason, "waited_s": waited}
                                 for rank in sorted(pending)]
    return arrived, missing


def _payload(rank: int, sent: object) -> RankPayload:
    """A rank's payload as rank 0 read it: the JSON object the rank sent (its own _own_report)."""
    if isinstance(sent, dict):
        return RankPayload(**{key: value for key, value in sent.items() if key in RankPayload.__annotations__})
    return {"rank": rank, "status": "failed", "reason": f"sent {type(sent).__name__}, not its report"}


def _collective_check(dist: ModuleType, store: _Store, rank: int, world_size: int, timeout: float) -> Collective:
    """Form a gloo process group over the same store and all_reduce one number."""
    import torch

    started = time.monotonic()
    result: Collective = {"backend": "gloo", "world_size": world_size}
    interface = {k: os.environ[k] for k in ("GLOO_SOCKET_IFNAME",) if os.environ.get(k)}
    if interface:
        result["environ"] = interface
    try:
        dist.init_process_group("gloo", store=dist.PrefixStore("gloo/", store), rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=timeout))
        value = torch.ones(1)
        dist.all_reduce(value)
        ok = int(value.item()) == world_size
        result["ok"], result["error"] = ok, None if ok else f"all_reduce gave {value.item()}, expected {world_size}"
    except Exception as exc:  # the failure is the finding
        first_line = (str(exc).strip().splitlines() or [""])[0]
        result["ok"], result["error"] = False, f"{type(exc).__name__}: {first_line}"[:500]
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # a group that never formed has nothing to tear down
            pass
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def _finding_from_dict(data: Mapping[str, object], ranks: list[int]) -> Finding:
    location, evidence = data.get("location"), data.get("evidence")
    return Finding(
        rule=str(data["rule"]), name=str(data["name"]), severity=Severity.parse(str(data["severity"])),
        message=str(data["message"]), evidence={**(evidence if isinstance(evidence, dict) else {}), "ranks": ranks},
        fix=str(data.get("fix") or ""),
        location=Location(**location) if isinstance(location, dict) else None,
    )


def _merge_node_findings(payloads: dict[int, RankPayload]) -> tuple[list[Finding], list[dict[str, object]]]:
    """Each rank's own findings once, with the ranks that made them; its errors likewise."""
    findings: dict[tuple[str, str, str], tuple[dict[str, object], list[int]]] = {}
    errors: dict[tuple[str, str], tuple[dict[str, object], list[int]]] = {}
    for rank, payload in sorted(payloads.items()):
        for item in payload.get("findings") or []:
            key = (str(item["rule"]), str(item["message"]), str(item.get("fix") or ""))
            findings.setdefault(key, (item, []))[1].append(rank)
        for item in payload.get("errors") or []:
            error_key = (str(item.get("rule") or item.get("probe")), str(item.get("message")))
            errors.setdefault(error_key, (item, []))[1].append(rank)
    merged = [_finding_from_dict(item, ranks) for item, ranks in findings.values()]
    merged_errors: list[dict[str, object]] = []
    for item, ranks in errors.values():
        # A rule skipped for a failed probe keeps both names: the fleet report is "not checked" too.
        who = {name: str(item[name]) for name in ("rule", "probe") if item.get(name)} or {"probe": "?"}
        merged_errors.append({**who, "message": f"{item.get('message')} (ranks {', '.join(map(str, ranks))})"})
    return merged, merged_errors


def _fleet_report(config: Config, placement: Placement, payloads: dict[int, RankPayload],
                  missing: list[FailedRank], collective: Collective | None) -> Report:
    from envdoctor.catalog import load_catalog
    from envdoctor.engine import check_severity_overrides
    from envdoctor.facts.fleet import FleetFacts
    from envdoctor.fleet import fleet_report
    from envdoctor.rules.fleet.drift import not_compared

    nodes: list[NodeRecord] = []
    failed = list(missing)
    for rank, payload in sorted(payloads.items()):
        if payload.get("status") != "ok" or "record" not in payload:
            failed.append({"rank": payload.get("rank", rank), "hostname": payload.get("hostname"),
                           "reason": payload.get("reason"), "status": "failed"})
            continue
        nodes.append(payload["record"])
    fleet: FleetFacts = {"mode": "distributed", "world_size": placement["world_size"],
                             "nodes": nodes, "failed": sorted(failed, key=lambda f: f["rank"]),
                             "collective": collective, "timeout_s": config.distributed_timeout}
    fleet["not_compared"] = not_compared(fleet)
    node_findings, node_errors = _merge_node_findings({r: p for r, p in payloads.items() if p.get("status") == "ok"})
    overrides = check_severity_overrides(load_catalog(), config.severity)
    return fleet_report(fleet, target=payloads.get(0, {}).get("target"), node_findings=node_findings,
                        errors=node_errors, ignore=config.ignore, overrides=overrides)


def _share_exit_code(store: _Store, code: int, waiting: int) -> None:
    """Rank 0: tell every rank the job's exit code, and wait (briefly) until the ranks that wait have read it.

    Every rank then exits with the same code, so a launcher's agents all succeed or all fail together:
    torchrun's agents whose workers exited 0 would otherwise wait up to 300 s in their exit barrier
    for the agent of a rank that exited 1. Rank 0 may host the store, so it stays until they read it.
    """
    try:
        store.set("exit", str(code))
    except Exception:  # the store is gone: the other ranks give up on their own
        return
    deadline = time.monotonic() + EXIT_READ_WAIT_S
    while waiting > 0 and time.monotonic() < deadline:
        try:
            if int(store.add("exit_read", 0)) >= waiting:
                return
        except Exception:
            return
        time.sleep(POLL_S)


def _await_exit_code(store: _Store) -> int:
    """Another rank: the exit code rank 0 decided (EXIT_NO_VERDICT when rank 0 is gone)."""
    try:
        store.wait(["exit"], timedelta(seconds=EXIT_WAIT_S))
        code = int(store.get("exit").decode())
    except Exception:
        return EXIT_NO_VERDICT
    try:
        store.add("exit_read", 1)
    except Exception:  # rank 0 stops waiting on its own
        pass
    return code


def run_distributed(config: Config) -> Report | int:
    """Run the checks on every rank; on rank 0 return the fleet Report, elsewhere rank 0's exit code.

    Every rank exits with the exit code rank 0 decided (see `_share_exit_code`).
    """
    from envdoctor.errors import UsageError

    placement = launcher_environment()
    # Under srun alone the variables were derived from Slurm's: torch's env:// rendezvous reads them here.
    os.environ.update({k: v for k, v in placement.pop("environ").items() if os.environ.get(k) != v})
    rank, world_size, timeout = placement["rank"], placement["world_size"], config.distributed_timeout
    stop = _Stop()
    previous = None
    if rank == 0:
        # Before anything slow (importing torch takes seconds): a rank that dies at once makes
        # the launcher stop rank 0 at once, and rank 0 must still live to report it.
        try:
            previous = signal.signal(signal.SIGTERM, stop)
        except ValueError:  # not the main thread: the launcher's SIGTERM keeps its default
            previous = None
    started = time.monotonic()
    try:
        try:
            import torch.distributed as dist
        except ImportError:
            raise UsageError("--distributed uses torch.distributed, but torch cannot be imported by the "
                             f"interpreter envdoctor runs in ({sys.executable})") from None
        try:
            store = _connect(dist, placement, timeout)
        except Exception as exc:
            if rank != 0:
                raise UsageError(f"rank {rank} could not reach the store at {os.environ['MASTER_ADDR']}:"
                                 f"{os.environ['MASTER_PORT']}: {type(exc).__name__}: {exc}") from None
            own = _own_report(config, placement)
            waited = round(time.monotonic() - started, 1)
            where = ("rank 0 could not reach the launcher's store"
                     if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
                     else "never reached rank 0's store")
            missing: list[FailedRank] = [{"rank": r, "status": "timed-out", "waited_s": waited,
                                          "reason": f"{where} ({type(exc).__name__}: {exc})"}
                                         for r in range(1, world_size)]
            return _fleet_report(config, placement, {0: own}, missing, None)
        payload = _own_report(config, placement)
        if rank != 0:
            try:
                store.set(f"rank/{rank}", json.dumps(payload, default=str))
            except Exception as exc:  # rank 0 names this rank as timed out; say why here
                raise UsageError(f"rank {rank} could not send its report to rank 0: "
                                 f"{type(exc).__name__}: {exc}") from None
            try:  # rank 0 says whether every rank is there for the collective check
                store.wait(["verdict"], timedelta(seconds=timeout + 30))
                verdict = store.get("verdict").decode()
            except Exception:  # rank 0 is gone: it reports (or was stopped); no verdict to share
                return EXIT_NO_VERDICT
            if verdict == "collective":
                _collective_check(dist, store, rank, world_size, min(timeout, COLLECTIVE_TIMEOUT_CAP_S))
            return _await_exit_code(store)
        arrived, missing = _collect(store, world_size, started + timeout, started, stop)
        everyone = not missing and not stop.requested
        store.set("verdict", "collective" if everyone else "skip")
        collective = (_collective_check(dist, store, 0, world_size, min(timeout, COLLECTIVE_TIMEOUT_CAP_S))
                      if everyone else None)
        report = _fleet_report(config, placement, {0: payload, **arrived}, missing, collective)
        _share_exit_code(store, report.exit_code(config.fail_on), world_size - 1 - len(missing))
        return report
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)

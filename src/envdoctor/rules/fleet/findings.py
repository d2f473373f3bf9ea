"""FLT rules: what differs across the nodes of one training job.

They read the `fleet` facts that `envdoctor compare` (from saved reports) and
`check --distributed` (from every rank) assemble; in a normal single-machine
check that section is None and every FLT rule yields nothing.

FLT001 core version drift (torch, CUDA, NCCL, driver), FLT002 other version
drift, FLT003 packages on some nodes only, FLT004 channel drift, FLT005 limit
drift (and environment variables that steer training), FLT006 stragglers, FLT007 ranks that failed or timed out, FLT008
reports that could not be read, FLT009 the gloo collective that failed, FLT010 expected
nodes without a report (or fewer than two reports: nothing compared).
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from envdoctor.facts import Facts
from envdoctor.facts.fleet import NOT_INSTALLED, UNLIMITED, FleetValue, show_value
from envdoctor.model import Severity
from envdoctor.rules import Hit
from envdoctor.rules.fleet.drift import (
    ValueDrift,
    channel_drift,
    environ_drift,
    expected_drift,
    expected_environ_drift,
    missing_nodes,
    package_drift,
    stragglers,
    value_drift,
)
from envdoctor.units import human_bytes

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.fleet import FleetFacts


def _fleet(facts: Facts) -> FleetFacts | None:
    """The fleet facts that `fleet_report` sets; no probe gathers them on one machine."""
    try:
        return facts["fleet"]
    except KeyError:
        return None


def _nodes_text(nodes: list[str], limit: int = 6) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def _grouped(values: Mapping[str, object], kind: str) -> str:
    """'2.4.0 on a, b; 2.3.1 on c', most common value first."""
    groups: dict[str, list[str]] = {}
    for node, value in values.items():
        groups.setdefault(show_value(value, kind), []).append(node)
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    return "; ".join(f"{value} on {_nodes_text(nodes)}" for value, nodes in ordered)


def _on(nodes: list[str]) -> str:
    return f"on {_nodes_text(nodes)}: "


def _torch_index(version: str) -> str:
    """The wheel index a local-version torch (2.4.0+cu121) comes from."""
    local = str(version).partition("+")[2]
    if re.fullmatch(r"(cu\d+|cpu|rocm[\d.]+)", local):
        return f" --index-url https://download.pytorch.org/whl/{local}"
    return ""


def fleet_value(fleet: FleetFacts, nodes: list[str], key: str) -> FleetValue | None:
    """The value of `key` on the first of `nodes` that has it."""
    for node in fleet.get("nodes") or []:
        if node.get("node") in nodes and key in (node.get("values") or {}):
            return node["values"][key]
    return None


def _core_fix(drift: ValueDrift, fleet: FleetFacts) -> str:
    key, want, odd = drift["key"], drift["preferred"], drift["odd_nodes"]
    torch = fleet_value(fleet, drift["preferred_nodes"], "torch")
    if key == "torch" and want == NOT_INSTALLED:
        return _on(odd) + "pip uninstall -y torch   # most nodes have no torch; or install it on all of them"
    if key == "torch":
        return _on(odd) + f"pip install torch=={want}{_torch_index(str(want))}"
    if key == "cuda_build":
        tag = "cu" + str(want).replace(".", "")
        base = str(torch or "<version>").partition("+")[0]
        return (_on(odd) + f"pip install torch=={base}+{tag} --index-url https://download.pytorch.org/whl/{tag}"
                f"   # the torch build for CUDA {want} that the other nodes use")
    if key == "nccl":
        major = str(fleet_value(fleet, drift["preferred_nodes"], "cuda_build") or "12").split(".")[0]
        return (_on(odd) + f"pip install nvidia-nccl-cu{major}=={want}   # or reinstall the torch build "
                "the other nodes use, which pins its NCCL")
    if key == "cuda_driver" and want != "none":
        driver = fleet_value(fleet, drift["preferred_nodes"], "driver")
        return (_on(odd) + f"upgrade the NVIDIA driver to one that supports CUDA {want}"
                + (f" (the other nodes run driver {driver})" if driver and driver != "none" else "")
                + f", then reboot; or keep these nodes out of the job (srun --exclude={','.join(odd)})")
    if want == "none":
        return (f"on {_nodes_text(odd)}: these nodes have a GPU driver the others lack; "
                "run every rank of one job on the same kind of node (e.g. srun --constraint=…)")
    branch = str(want).split(".")[0]
    return (_on(odd) + f"install NVIDIA driver {want} (e.g. `apt-get install -y nvidia-driver-{branch}`, "
            "or the image the other nodes boot), then reboot; or keep these nodes out of the job "
            f"(srun --exclude={','.join(odd)})")


def _drift_hit(drift: ValueDrift, fix: str) -> Hit:
    kind = drift["kind"]
    if "at_least" in drift:  # health --expect: one node against the agreed values
        have = show_value(drift["values"][drift["odd_nodes"][0]], kind)
        want = show_value(drift["preferred"], kind)
        message = f"{drift['label']} is {have}, expected {'at least ' if drift['at_least'] else ''}{want}"
    else:
        message = f"{drift['label']} differs across nodes: {_grouped(drift['values'], kind)}"
    evidence = {"what": drift["key"], "values": dict(drift["values"]), "expected": drift["preferred"],
                "odd_nodes": list(drift["odd_nodes"])}
    if drift["not_known_on"]:
        evidence["not_known_on"] = list(drift["not_known_on"])
    # Against the values the fleet agreed on (health --expect), every difference is an error.
    return Hit(message=message, evidence=evidence, fix=fix, severity=Severity.ERROR if "at_least" in drift else None)


def find_core_version_drift(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    if fleet is None:
        return
    for drift in value_drift(fleet, "core") + expected_drift(fleet, "core"):
        yield _drift_hit(drift, _core_fix(drift, fleet))


def _version_fix(key: str, want: object, odd: list[str], source: str = "pip") -> str:
    if key == "python":
        return (_on(odd) + f"rebuild the environment with Python {want} (conda install python={want}, "
                f"or a venv made by python{'.'.join(str(want).split('.')[:2])}) from the same lock file")
    if key == "cudnn":
        return (_on(odd) + f"pip install nvidia-cudnn-cu12=={want}   # or reinstall the torch build the "
                "other nodes use, which pins its cuDNN")
    if source == "conda":
        return _on(odd) + f"conda install {key}={want}"
    return _on(odd) + f"pip install {key}=={want}"


def find_version_drift(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    if fleet is None:
        return
    for drift in value_drift(fleet, "version") + expected_drift(fleet, "version"):
        yield _drift_hit(drift, _version_fix(drift["key"], drift["preferred"], drift["odd_nodes"]))
    for package in package_drift(fleet)["versions"]:
        yield Hit(
            message=f"{package['package']} differs across nodes: {_grouped(package['values'], 'version')}",
            evidence={"what": package["package"], "source": package["source"], "values": dict(package["values"]),
                      "expected": package["preferred"], "odd_nodes": list(package["odd_nodes"])},
            fix=_version_fix(package["package"], package["preferred"], package["odd_nodes"], package["source"]),
        )


def find_package_set_drift(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    if fleet is None:
        return
    for drift in package_drift(fleet)["presence"]:
        present, absent, name = drift["present_on"], drift["absent_on"], drift["package"]
        versions = sorted({version for version in present.values() if version is not None})
        if drift["majority"] == "present":
            version = max(present.values(), key=list(present.values()).count)
            fix = (_on(absent) + (f"conda install {name}={version}" if drift["source"] == "conda"
                                  else f"pip install {name}=={version}"))
        else:
            fix = _on(list(present)) + (f"conda remove {name}" if drift["source"] == "conda"
                                        else f"pip uninstall -y {name}")
            fix += "   # or install it on the other nodes too, if the job needs it"
        yield Hit(
            message=(f"{name} ({', '.join(versions)}) is installed on {_nodes_text(list(present))} "
                     f"but not on {_nodes_text(absent)}"),
            evidence={"package": name, "source": drift["source"], "present_on": dict(present),
                      "absent_on": list(absent),
                      "odd_nodes": list(absent) if drift["majority"] == "present" else list(present)},
            fix=fix,
        )


def find_channel_drift(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    if fleet is None:
        return
    for drift in channel_drift(fleet):
        name, want, odd = drift["package"], drift["preferred"], drift["odd_nodes"]
        version = next((drift["versions"][n] for n in drift["channels"] if n not in odd), None)
        spec = f"{name}={version}" if version else name
        yield Hit(
            message=f"conda package {name} comes from different channels: {_grouped(drift['channels'], 'channel')}",
            evidence={"package": name, "channels": dict(drift["channels"]), "versions": dict(drift["versions"]),
                      "expected": want, "odd_nodes": list(odd)},
            fix=_on(odd) + f"conda install --override-channels -c {want} {spec}",
        )


def _limit_fix(key: str, want: FleetValue, odd: list[str]) -> str:
    if key == "nofile":
        return (_on(odd) + f"ulimit -n {want if want != UNLIMITED else 65536} in the job script "
                "(as the other nodes have), or raise the hard limit in /etc/security/limits.conf")
    if key == "shm_total":
        size = max(1, round(float(want) / 2**30)) if want != UNLIMITED else 8
        return (_on(odd) + f"mount -o remount,size={size}G /dev/shm (in a container: "
                f"docker run --shm-size={size}g, or --ipc=host)")
    if key == "usable_cpus":
        return (_on(odd) + f"give the job {want} CPUs as on the other nodes (srun --cpus-per-task={want}; "
                "check `taskset -p $$` and the cgroup's cpu.max), or size num_workers per node")
    if key == "memory_limit":
        limit = "no limit" if want == UNLIMITED else human_bytes(float(want))
        return (_on(odd) + f"give the job the same memory limit as the other nodes ({limit}: "
                "srun --mem / docker run --memory), or keep these nodes out of the job")
    return (_on(odd) + f"these nodes have {human_bytes(float(want)) if want != UNLIMITED else want} less; "
            f"size workers per node or keep them out of the job (srun --exclude={','.join(odd)})")


def find_limit_drift(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    if fleet is None:
        return
    for drift in value_drift(fleet, "limit"):
        yield _drift_hit(drift, _limit_fix(drift["key"], drift["preferred"], drift["odd_nodes"]))
    for drift in expected_drift(fleet, "limit"):
        yield _drift_hit(drift, _limit_fix(drift["key"], drift["preferred"], drift["odd_nodes"]))
    for env in environ_drift(fleet) + expected_environ_drift(fleet):
        name, want, odd = env["name"], env["preferred"], env["odd_nodes"]
        fix = (f"unset {name} in the job script" if want == "unset"
               else f"export {name}={want} in the job script (srun passes it to every task)")
        values = env["values"]
        yield Hit(
            message=(f"environment variable {name} is {values[odd[0]]}, expected {want}" if "expected" in values
                     else f"environment variable {name} differs across nodes: {_grouped(values, 'version')}"),
            evidence={"what": name, "source": "environ", "values": dict(values), "expected": want,
                      "odd_nodes": list(odd)},
            fix=_on(odd) + fix + "; set it once for the whole job, not in a node's profile",
            severity=Severity.ERROR if "expected" in values else None,
        )


def find_stragglers(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    if fleet is None:
        return
    for slow in stragglers(fleet):
        node, kind = slow["node"], slow["kind"]
        percent = round(100 * (1 - slow["ratio"]))
        if slow["key"] == "loader_samples_per_s":
            fix = (f"run `envdoctor check` on {node} alone to see why its loader is slower (CPU quota, "
                   f"other jobs, storage); until then keep it out of the job (srun --exclude={node})")
        else:
            fix = (f"check the data path's mount on {node} (`envdoctor check --data PATH` there; "
                   "`findmnt -T PATH`), or stage the data to local disk before training")
        yield Hit(
            message=(f"{node} is a straggler: {slow['label']} {show_value(slow['value'], kind)} is {percent}% "
                     f"below the other nodes' median of {show_value(slow['median_of_others'], kind)}"),
            evidence={"node": node, "metric": slow["key"], "value": slow["value"],
                      "median_of_others": slow["median_of_others"], "ratio": slow["ratio"],
                      "values": dict(slow["values"])},
            fix=fix,
        )


def find_failed_ranks(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    if fleet is None:
        return
    for failed in fleet.get("failed") or []:
        rank, status = failed.get("rank"), failed.get("status")
        host = f" on {failed['hostname']}" if failed.get("hostname") else ""
        if status == "timed-out":
            what = f"did not report within {failed.get('waited_s', 0):.0f} s"
            if failed.get("reason") and not str(failed["reason"]).startswith("no report within"):
                what += f": {failed['reason']}"
            fix = (f"run `envdoctor check` on the node of rank {rank} alone to see what hangs there; "
                   "if its checks are just slow, raise --distributed-timeout")
        elif status == "stopped":
            what = "did not report before the launcher stopped the job (a rank exited with an error)"
            fix = (f"read the launcher's log for rank {rank} (torchrun prints its exit code and traceback), "
                   f"then run `envdoctor check` on that node alone")
        else:
            what = f"failed: {failed.get('reason')}"
            fix = f"run `envdoctor check` on the node of rank {rank} alone; ENVDOCTOR_DEBUG=1 shows the traceback"
        yield Hit(
            message=f"rank {rank}{host} {what}",
            evidence={k: failed.get(k) for k in ("rank", "hostname", "status", "reason", "waited_s")
                      if failed.get(k) is not None},
            fix=fix,
        )


def find_unreadable_reports(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    if fleet is None:
        return
    from envdoctor._version import __version__
    from envdoctor.facts.fleet import FLEET_REPORT_REASON

    for skipped in fleet.get("unreadable") or []:
        if skipped["reason"] == FLEET_REPORT_REASON:
            fix = ("give compare the reports of the single nodes (`envdoctor report --json --output "
                   "reports/NODE.json` on each), not a report that already compares them")
        else:
            fix = (f"regenerate it on that node with envdoctor {__version__}: "
                   f"envdoctor report --json --output {skipped['source']}")
        yield Hit(
            message=f"skipped {skipped['source']}: {skipped['reason']}",
            evidence={"path": skipped["source"], "reason": skipped["reason"]},
            fix=fix,
        )


def find_failed_collective(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    collective = (fleet or {}).get("collective")
    if not isinstance(collective, Mapping) or collective.get("ok") is not False:
        return
    interface = (collective.get("environ") or {}).get("GLOO_SOCKET_IFNAME")
    now = f"GLOO_SOCKET_IFNAME is {interface!r} in this job; " if interface else ""
    yield Hit(
        message=(f"every rank reported, but a {collective.get('backend', 'gloo')} process group across them "
                 f"failed: {collective.get('error')}"),
        evidence={k: collective.get(k) for k in ("backend", "error", "seconds", "world_size", "environ")
                  if collective.get(k) is not None},
        fix=(now + "set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to the interface the nodes reach each "
             "other on, e.g. `export GLOO_SOCKET_IFNAME=eth0` (`ip -brief addr` lists them), and open "
             "MASTER_PORT and the ephemeral ports between the nodes"),
    )


def find_missing_nodes(facts: Facts) -> Iterator[Hit]:
    fleet = _fleet(facts)
    if fleet is None:
        return
    for missing in missing_nodes(fleet):
        node, source, want, got = missing["node"], missing["source"], missing["expected"], missing["reported"]
        if node is not None:
            message = f"{node} has no readable report ({source}; {got} of {want} nodes reported)"
            fix = (f"run the report on {node} too (`srun -w {node} envdoctor report --json --output "
                   "reports/{node}.json`), or find out why it did not write one (its job output, "
                   f"`scontrol show node {node}`); leave it out with --nodes if it is not part of the job")
        elif source is not None:
            message = f"{got} of {want} expected reports ({source})"
            fix = ("run the report on every node of the job (`srun --ntasks-per-node=1 envdoctor report --json "
                   "--output reports/{node}.json` inside the allocation); name the nodes with --nodes to see "
                   "which one is missing")
        else:
            message = (f"{got} readable report{'s' if got != 1 else ''}: comparing needs at least two, so "
                       "nothing was compared")
            fix = ("give compare every node's report, and say how many to expect (--expect N, or --nodes "
                   "node[01-04]; inside a job the job's own node list is the default)")
        yield Hit(message=message,
                  evidence={k: v for k, v in (("node", node), ("expected_from", source), ("expected", want),
                                              ("reported", got)) if v is not None},
                  fix=fix)


RULES = {
    "FLT001": find_core_version_drift,
    "FLT002": find_version_drift,
    "FLT003": find_package_set_drift,
    "FLT004": find_channel_drift,
    "FLT005": find_limit_drift,
    "FLT006": find_stragglers,
    "FLT007": find_failed_ranks,
    "FLT008": find_unreadable_reports,
    "FLT009": find_failed_collective,
    "FLT010": find_missing_nodes,
}

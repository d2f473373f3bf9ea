"""What differs across the nodes of a fleet: pure comparisons of node records.

The FLT rules and the side-by-side view both ask these functions, so the
findings and the table always agree. Each function takes the `fleet` facts
(`{"nodes": [node record, ...], ...}`, see `envdoctor.facts.fleet`) and
returns plain dicts; nothing here prints or gathers.

Which value is "right" is decided the way an operator would: the value most
nodes have; on a tie, the newer version or the larger limit. The other nodes
are the odd ones out, and the fix is written for them.
"""
from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, TypedDict, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.fleet import FleetFacts, NotCompared

from envdoctor.facts.fleet import FIELDS, SIZE_TOLERANCE, UNLIMITED, Field, FleetValue, NodeRecord, nodes_of
from envdoctor.versions import sortable_version

#: How a compared environment variable that a node does not set is shown.
UNSET = "unset"
#: A node is a straggler when its speed is below this fraction of the others' median.
STRAGGLER_RATIO = 0.7

#: Packages compared through their own fields (torch, numpy), or named
#: differently by conda and pip, are left out of the generic package comparison.
_OWN_FIELDS = {"torch", "pytorch", "numpy", "python"}

_V = TypeVar("_V", bound=Hashable)


class _ValueDriftRequired(TypedDict):
    key: str
    label: str
    group: str
    kind: str
    #: node -> its value (health --expect: the node's, "absent" when it has none, and EXPECTED -> the agreed one).
    values: dict[str, FleetValue]
    preferred: FleetValue
    preferred_nodes: list[str]
    odd_nodes: list[str]
    not_known_on: list[str]


class ValueDrift(_ValueDriftRequired, total=False):
    """A field of the node records (see FIELDS) whose value differs across nodes, or from the agreed one."""

    #: health --expect only: whether the agreed value is a minimum (limits) rather than a value to match.
    at_least: bool


class EnvironDrift(TypedDict):
    """A compared environment variable set differently across nodes (or unlike the agreed value)."""

    name: str
    values: dict[str, str]
    preferred: str
    odd_nodes: list[str]


class PackageVersions(TypedDict):
    """A package at different versions across nodes."""

    package: str
    source: str  # "pip" or "conda"
    values: dict[str, str | None]
    preferred: str | None
    odd_nodes: list[str]


class PackagePresence(TypedDict):
    """A package installed on some nodes only."""

    package: str
    source: str
    present_on: dict[str, str | None]
    absent_on: list[str]
    majority: str  # "present" or "absent"


class PackageDrift(TypedDict):
    versions: list[PackageVersions]
    presence: list[PackagePresence]


class ChannelDrift(TypedDict):
    """A conda package installed from different channels."""

    package: str
    channels: dict[str, str | None]
    versions: dict[str, str | None]
    preferred: str | None
    odd_nodes: list[str]


class Straggler(TypedDict):
    """A node measured well below the other nodes' median."""

    key: str
    label: str
    kind: str
    node: str
    value: float
    median_of_others: float
    ratio: float
    values: dict[str, float]


class MissingNode(TypedDict):
    """An expected node without a readable report (node None: too few reports, unnamed)."""

    node: str | None
    source: str | None
    expected: int
    reported: int


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _size_key(value: object) -> float:
    if value == UNLIMITED:
        return float("inf")
    return float(value) if isinstance(value, (int, float, str)) else float("-inf")


def _preferred(values: Iterable[_V], kind: str) -> _V:
    """The value most nodes have; on a tie the newest version or the largest limit."""
    counts = Counter(values)
    top = max(counts.values())
    tied = [v for v, c in counts.items() if c == top]
    if kind == "version":
        return max(tied, key=sortable_version)
    if kind in ("count", "bytes"):
        return max(tied, key=_size_key)
    return min(tied, key=str)


def _same(a: FleetValue, b: FleetValue, kind: str) -> bool:
    if kind == "bytes" and a != UNLIMITED and b != UNLIMITED:
        high = max(float(a), float(b))
        return high == 0 or abs(float(a) - float(b)) / high <= SIZE_TOLERANCE
    return a == b


def _field_drift(nodes: list[NodeRecord], fld: Field) -> ValueDrift | None:
    per_node = {n["node"]: n["values"][fld.key] for n in nodes if fld.key in (n.get("values") or {})}
    if len(per_node) < 2:
        return None
    preferred = _preferred(per_node.values(), fld.kind)
    odd = [node for node, value in per_node.items() if not _same(value, preferred, fld.kind)]
    if not odd:
        return None
    return {
        "key": fld.key,
        "label": fld.label,
        "group": fld.group,
        "kind": fld.kind,
        "values": per_node,
        "preferred": preferred,
        "preferred_nodes": [node for node in per_node if node not in odd],
        "odd_nodes": odd,
        "not_known_on": [n["node"] for n in nodes if n["node"] not in per_node],
    }


def value_drift(fleet: FleetFacts, group: str) -> list[ValueDrift]:
    """Each field of `group` ("core", "version", "limit") whose value differs across nodes."""
    nodes = nodes_of(fleet)
    found: list[ValueDrift] = []
    for fld in FIELDS:
        if fld.group == group and fld.kind != "rate" and fld.kind != "bytes-rate":
            drift = _field_drift(nodes, fld)
            if drift:
                found.append(drift)
    return found


#: The node-record fields an expected value is a minimum for (`envdoctor health --expect`); others must match.
AT_LEAST = ("nofile", "shm_total", "usable_cpus", "memory_total", "memory_limit")
#: The name `envdoctor health` gives the agreed values in evidence and messages.
EXPECTED = "expected"


def _meets(value: FleetValue, want: FleetValue, key: str, kind: str) -> bool:
    if key in AT_LEAST:
        if value == UNLIMITED:
            return True
        if want == UNLIMITED:
            return False
        try:
            return float(value) >= float(want) * (1 - SIZE_TOLERANCE if kind == "bytes" else 1)
        except (TypeError, ValueError):
            return False
    if kind == "version" and isinstance(want, str) and isinstance(value, str) and not want.count("+"):
        # "2.4" expects any 2.4.x; "2.4.0" expects 2.4.0 with any local tag (+cu121)
        base = value.partition("+")[0]
        return base == want or base.startswith(want + ".")
    return str(value) == str(want)


def expected_drift(fleet: FleetFacts, group: str) -> list[ValueDrift]:
    """`envdoctor health --expect FILE`: the fields of `group` where this node is not what the fleet agreed.

    Shaped like value_drift's entries (the node and "expected" as the two values); limits are minimums.
    """
    wanted = fleet.get("expected_values")
    if not isinstance(wanted, Mapping) or fleet.get("mode") != "health":
        return []
    found: list[ValueDrift] = []
    for node in nodes_of(fleet):
        values = node.get("values") or {}
        for fld in FIELDS:
            want = wanted.get(fld.key)
            if fld.group != group or want is None or isinstance(want, Mapping):
                continue
            value = values.get(fld.key)
            if value is not None and _meets(value, want, fld.key, fld.kind):
                continue
            found.append({"key": fld.key, "label": fld.label, "group": group, "kind": fld.kind,
                          "values": {node["node"]: value if value is not None else "absent", EXPECTED: want},
                          "preferred": want, "preferred_nodes": [EXPECTED], "odd_nodes": [node["node"]],
                          "not_known_on": [], "at_least": fld.key in AT_LEAST})
    return found


def expected_environ_drift(fleet: FleetFacts) -> list[EnvironDrift]:
    """`health --expect`: the environment variables the file names that this node sets otherwise."""
    wanted = fleet.get("expected_values")
    environ = wanted.get("environ") if isinstance(wanted, Mapping) else None
    if not isinstance(environ, Mapping) or fleet.get("mode") != "health":
        return []
    found: list[EnvironDrift] = []
    for node in nodes_of(fleet):
        have = node.get("environ") or {}
        for name, want in sorted(environ.items()):
            value = have.get(name, UNSET)
            if str(value) != str(want):
                found.append({"name": name, "values": {node["node"]: str(value), EXPECTED: str(want)},
                              "preferred": str(want), "odd_nodes": [node["node"]]})
    return found


# complexity: 25 — pip and conda tables are compared by the same loop, versions and presence apart, with conda names
#   canonicalised against pip's.
def package_drift(fleet: FleetFacts) -> PackageDrift:
    """Packages at different versions ("versions") and packages on some nodes only ("presence").

    Python distributions are compared first; conda records add the packages
    that have no distribution (libraries such as nccl or cudatoolkit).
    """
    nodes = nodes_of(fleet)
    versions: list[PackageVersions] = []
    presence: list[PackagePresence] = []
    pip: dict[str, dict[str, str | None]] = {
        n["node"]: dict(found) for n in nodes if (found := n.get("packages")) is not None}
    conda: dict[str, dict[str, str | None]] = {
        n["node"]: {name: rec.get("version") for name, rec in records.items()}
        for n in nodes if (records := n.get("conda")) is not None}
    sources = {"pip": pip, "conda": conda}
    # conda spells some names with "_" where the distribution has "-": compare them canonically.
    pip_names = {_canonical(name) for table in sources["pip"].values() for name in table}
    for source, tables in sources.items():
        if len(tables) < 2:
            continue
        names = sorted({name for table in tables.values() for name in table})
        for name in names:
            if name in _OWN_FIELDS or (source == "conda" and _canonical(name) in pip_names):
                continue
            present = {node: table[name] for node, table in tables.items() if name in table}
            absent = [node for node in tables if node not in present]
            if absent:
                presence.append({"package": name, "source": source, "present_on": present,
                                 "absent_on": absent,
                                 "majority": "present" if len(present) >= len(absent) else "absent"})
                continue
            distinct = set(present.values())
            if len(distinct) > 1:
                preferred = _preferred(present.values(), "version")
                versions.append({"package": name, "source": source, "values": present,
                                 "preferred": preferred,
                                 "odd_nodes": [n for n, v in present.items() if v != preferred]})
    return {"versions": versions, "presence": presence}


def environ_drift(fleet: FleetFacts) -> list[EnvironDrift]:
    """The compared environment variables (thread counts, NCCL_*, CUDA_VISIBLE_DEVICES …) that differ."""
    tables = {n["node"]: env for n in nodes_of(fleet) if isinstance(env := n.get("environ"), Mapping)}
    if len(tables) < 2:
        return []
    found: list[EnvironDrift] = []
    for name in sorted({name for table in tables.values() for name in table}):
        values = {node: str(table.get(name, UNSET)) for node, table in tables.items()}
        if len(set(values.values())) < 2:
            continue
        preferred = _preferred(values.values(), "channel")
        found.append({"name": name, "values": values, "preferred": preferred,
                      "odd_nodes": [n for n, v in values.items() if v != preferred]})
    return found


def channel_drift(fleet: FleetFacts) -> list[ChannelDrift]:
    """Conda packages installed from different channels on different nodes."""
    tables = {n["node"]: records for n in nodes_of(fleet) if (records := n.get("conda")) is not None}
    found: list[ChannelDrift] = []
    names = sorted({name for table in tables.values() for name in table})
    for name in names:
        channels = {node: table[name]["channel"] for node, table in tables.items()
                    if name in table and table[name].get("channel")}
        if len(set(channels.values())) < 2:
            continue
        preferred = _preferred(channels.values(), "channel")
        found.append({
            "package": name,
            "channels": channels,
            "versions": {node: tables[node][name].get("version") for node in channels},
            "preferred": preferred,
            "odd_nodes": [n for n, c in channels.items() if c != preferred],
        })
    return found


def stragglers(fleet: FleetFacts) -> list[Straggler]:
    """Nodes whose measured loader or disk speed is well below the other nodes' median."""
    nodes = nodes_of(fleet)
    found: list[Straggler] = []
    for fld in FIELDS:
        if fld.group != "throughput":
            continue
        per_node = {n["node"]: float(n["values"][fld.key]) for n in nodes
                    if isinstance((n.get("values") or {}).get(fld.key), (int, float))}
        if len(per_node) < 2:
            continue
        for node, value in per_node.items():
            # The median of the *other* nodes: with two nodes, the plain median
            # would be half made of the straggler itself.
            others = statistics.median(v for n, v in per_node.items() if n != node)
            if others > 0 and value < STRAGGLER_RATIO * others:
                found.append({"key": fld.key, "label": fld.label, "kind": fld.kind, "node": node,
                              "value": value, "median_of_others": others,
                              "ratio": round(value / others, 3), "values": per_node})
    return found


def missing_nodes(fleet: FleetFacts) -> list[MissingNode]:
    """The nodes compare expected and has no readable report of, or one entry for too few reports.

    Expected: --nodes / the job's SLURM_JOB_NODELIST (names), or --expect N (a count). With no
    expectation, fewer than two readable reports is still an entry: nothing was compared.
    """
    expected = fleet.get("expected")
    if not isinstance(expected, Mapping) or fleet.get("mode") != "compare":
        return []
    reported = len(nodes_of(fleet))
    source = expected.get("source")
    if expected.get("nodes"):
        return [{"node": name, "source": source, "expected": len(expected["nodes"]), "reported": reported}
                for name in expected.get("missing") or []]
    count = expected.get("count")
    if isinstance(count, int) and reported < count:
        return [{"node": None, "source": source, "expected": count, "reported": reported}]
    if count is None and reported < 2:
        return [{"node": None, "source": None, "expected": 2, "reported": reported}]
    return []


def not_compared(fleet: FleetFacts) -> list[NotCompared]:
    """The fields that could not be compared, and on which nodes their facts were missing."""
    nodes = nodes_of(fleet)
    if len(nodes) < 2:
        return [{"key": "everything", "label": "everything", "missing_on": [],
                 "reason": f"{len(nodes)} usable report{'s' if len(nodes) != 1 else ''}: "
                           "comparing needs at least two"}]
    notes: list[NotCompared] = []
    for fld in FIELDS:
        known = [n["node"] for n in nodes if fld.key in (n.get("values") or {})]
        if len(known) == len(nodes):
            continue
        missing = [n["node"] for n in nodes if n["node"] not in known]
        sections = " or ".join(fld.sections)
        # A section can be there without this value (a CPU-only torch has no NCCL).
        reason = (f"no report records it in its {sections} facts" if not known
                  else f"only {len(known)} of {len(nodes)} reports record it in their {sections} facts")
        notes.append({"key": fld.key, "label": fld.label, "missing_on": missing, "reason": reason})
    pip = [n["node"] for n in nodes if isinstance(n.get("packages"), Mapping)]
    if len(pip) < 2:
        notes.append({"key": "packages", "label": "packages",
                      "missing_on": [n["node"] for n in nodes if n["node"] not in pip],
                      "reason": f"{len(pip)} of {len(nodes)} reports list their packages"})
    return notes

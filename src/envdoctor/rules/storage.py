"""DSK rules: is the data on storage that can feed the loader?

DSK001 rotational-disk, DSK002 network-filesystem, DSK003 many-small-files,
DSK004 slow-reads. They read the `storage` section: the mount and device
chain behind the data path, a bounded sample of its files, and the read probe.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple, TypedDict

from envdoctor.facts import Facts
from envdoctor.facts.storage import (
    EffectiveMedium,
    FileSample,
    MountChain,
    ReadPass,
    ReadProbe,
    StorageFacts,
    bottom_of,
)
from envdoctor.remedies.install_commands import shell_quote
from envdoctor.rules import Hit
from envdoctor.rules.system.limits import loader_plan
from envdoctor.units import human_bytes

#: A folder with at least this many files …
MANY_FILES = 1000
#: … whose median file is below this size is "many small files".
SMALL_MEDIAN = 128 * 1024
#: Below these the read probe's figures count as slow, when no needed rate is known:
#: a rotating disk streams ~100-200 MiB/s and manages ~100-200 random reads a second.
SLOW_SEQUENTIAL_MIB_S = 100.0
SLOW_RANDOM_READS_S = 200.0
#: A pass is judged when it read this much, or ran this long (a slow device reads little):
#: a few small files read in a millisecond say nothing about throughput.
MIN_JUDGED_BYTES = 4 * 1024**2
MIN_JUDGED_READS = 20
MIN_JUDGED_SECONDS = 0.25
#: The sequential rate is a streaming rate only when the files it read average at least
#: this much; over small files it measures opening files, which the random pass judges.
MIN_STREAMED_BYTES_PER_FILE = 1024**2


class _Located(NamedTuple):
    """A storage section whose data path was found on a mount: what every DSK rule needs."""

    section: StorageFacts
    mount: MountChain
    bottom: MountChain
    effective: EffectiveMedium | None
    probe: ReadProbe
    sample: FileSample | None


def _storage(facts: Facts) -> _Located | None:
    storage = facts["storage"]
    mount = storage.get("mount")
    if not storage["exists"] or not mount:
        return None
    return _Located(storage, mount, bottom_of(mount), storage.get("effective"), storage.get("read_probe", {}),
                    storage.get("sample"))


def _where(at: _Located) -> dict[str, object]:
    return {"path": at.section["path"], "mount_point": at.mount.get("mount_point"), "fstype": at.mount.get("fstype"),
            "source": at.mount.get("source"), "backing_fstype": at.effective["fstype"] if at.effective else None,
            "backing_mount": at.effective["mount_point"] if at.effective else None}


def _local_copy_hint(at: _Located) -> str:
    """An rsync to the roomiest local NVMe/SSD mount seen here, else to the job's local scratch.

    Paths are shell-quoted: the command is pasted as it stands (a data folder may have spaces)."""
    source = at.section["path"].rstrip("/")
    name = os.path.basename(source) or "data"
    mount_point = at.mount.get("mount_point")
    for candidate in at.section.get("fast_local_mounts", []):
        if candidate["mount_point"] != mount_point:
            destination = os.path.join(candidate["mount_point"], name)
            return (f"rsync -a {shell_quote(source + '/')} {shell_quote(destination + '/')} ({candidate['device']}, {candidate['medium']}, "
                    f"{human_bytes(candidate['free_bytes'])} free) and point --data there")
    return (f"rsync -a {shell_quote(source + '/')} \"${{TMPDIR:-/tmp}}\"/{shell_quote(name + '/')} on node-local "
            "NVMe or SSD, and point --data there")


def _chain(at: _Located) -> str:
    """The mount chain as a phrase: overlay on ext4 on loop0 …"""
    parts = []
    node: MountChain | None = at.mount
    while node:
        device = node.get("device")
        name = device.get("name") if device else None
        parts.append(f"{node.get('fstype')} at {node.get('mount_point')}" + (f" on {name}" if name else ""))
        node = node.get("backing")
    return " -> ".join(parts)


def _rate(read_pass: ReadPass | None, key: str) -> float | None:
    """A figure of one read-probe pass (mib_per_s, reads_per_s), None when the pass did not run."""
    value = read_pass.get(key) if read_pass else None
    return float(value) if isinstance(value, (int, float)) else None


def find_rotational_disk(facts: Facts) -> Iterator[Hit]:
    at = _storage(facts)
    if at is None or at.effective is None:
        return
    effective = at.effective
    # A virtual disk's rotational flag is the hypervisor's default, not the host's hardware.
    if effective["rotational"] is not True or effective["medium"] in ("virtual", "ram"):
        return
    random_reads = _rate(at.probe.get("random"), "reads_per_s")
    yield Hit(
        message=(f"the data at {at.section['path']} is on a rotating disk ({effective['device']}, "
                 f"{_chain(at)}): random reads cost a seek each (~100-200 a second)"
                 + (f"; the probe measured {random_reads:g} reads/s" if random_reads else "")),
        evidence={**_where(at), "device": effective["device"], "medium": effective["medium"],
                  "rotational": True, "random_reads_per_s": random_reads,
                  "sequential_mib_per_s": _rate(at.probe.get("sequential"), "mib_per_s")},
        fix=(f"copy the data to an SSD/NVMe disk ({_local_copy_hint(at)}), or pack it into large "
             "sequentially-read shards (WebDataset .tar shards, LMDB, HDF5) so the disk streams instead of seeking"),
    )


def find_network_filesystem(facts: Facts) -> Iterator[Hit]:
    at = _storage(facts)
    if at is None or at.effective is None or at.effective["kind"] not in ("network", "fuse"):
        return
    node = at.bottom
    backend = node.get("backend") or node.get("fstype")
    known = "network" if at.effective["kind"] == "network" else "FUSE (user-space)"
    usable = facts["system"]["cpu"]["usable"]
    workers = loader_plan(facts)["num_workers"]
    yield Hit(
        message=(f"the data at {at.section['path']} is on a {known} file system: {node.get('fstype')} "
                 f"({backend}) from {node.get('source')} at {node.get('mount_point')}; every read pays a "
                 "round trip, and many small reads stall the loader"),
        evidence={**_where(at), "backend": backend, "kind": at.effective["kind"],
                  "fuse": bool(node.get("fuse")), "mount_options": node.get("mount_options"),
                  "num_workers": workers, "usable_cpus": usable},
        fix=(f"copy the data to local disk before training ({_local_copy_hint(at)}); or stream packed shards "
             "(WebDataset .tar, LMDB, HDF5) so reads are few and large; and use more workers than CPUs, since "
             f"they mostly wait on the network (e.g. num_workers={max(2 * usable, workers)}, "
             "persistent_workers=True, prefetch_factor=4)"),
    )


def find_many_small_files(facts: Facts) -> Iterator[Hit]:
    at = _storage(facts)
    # Only the user's data is judged: a working directory full of source files and
    # a virtual environment is not a dataset, whatever its file sizes.
    if at is None or at.section["source"] != "--data" or at.sample is None:
        return
    sample = at.sample
    count = sample["file_count"]
    median = sample["median_bytes"]
    if count < MANY_FILES or median is None or median >= SMALL_MEDIAN:
        return
    counted = f"at least {count}" if sample["truncated"] else str(count)
    yield Hit(
        message=(f"{at.section['path']} holds {counted} files with a median size of {human_bytes(median)} "
                 f"(p90 {human_bytes(sample['p90_bytes'])}): each sample costs an open, a stat and a small read"),
        evidence={"path": at.section["path"], "file_count": count, "truncated": sample["truncated"],
                  "median_bytes": median, "p90_bytes": sample["p90_bytes"], "threshold_files": MANY_FILES,
                  "threshold_median_bytes": SMALL_MEDIAN, "fstype": at.mount.get("fstype")},
        fix=("pack the files into shards of ~100 MB-1 GB: WebDataset (`tar --sort=name -cf shard-000000.tar ...`, "
             "or webdataset.ShardWriter), LMDB or HDF5, and read them sequentially"),
    )


class _NeededRate(TypedDict):
    samples_per_s: float
    bytes_per_sample: float
    mib_per_s: float


def _needed_rate(facts: Facts, at: _Located) -> _NeededRate | None:
    """Bytes a second the loader must read to keep up, when the step time and batch size are known."""
    step_time = facts.config.step_time
    loader = facts.get("loader") if not facts.config.no_loader else None
    batch_size = (loader or {}).get("batch_size")
    median = at.sample["median_bytes"] if at.sample else None
    if not step_time or not batch_size or not median:
        return None
    samples_per_s = batch_size / step_time
    return {"samples_per_s": samples_per_s, "bytes_per_sample": median,
            "mib_per_s": samples_per_s * median / 1024**2}


# complexity: 25 — the sequential and random passes are each judged only when they read enough, against the loader's
#   needed rate and the probe's timeout; each qualifies one finding.
def find_slow_reads(facts: Facts) -> Iterator[Hit]:
    at = _storage(facts)
    if at is None:
        return
    probe = at.probe
    if probe.get("skipped"):
        return
    sequential: ReadPass = probe.get("sequential") or {}
    random_pass: ReadPass = probe.get("random") or {}
    seq_rate = sequential.get("mib_per_s")
    random_rate, random_reads = random_pass.get("mib_per_s"), random_pass.get("reads_per_s")
    evidence: dict[str, object] = {
        "path": at.section["path"], "fstype": at.mount.get("fstype"),
        "sequential_mib_per_s": seq_rate, "random_mib_per_s": random_rate,
        "random_reads_per_s": random_reads, "bytes_read": probe.get("bytes_read"),
        "probe_seconds": probe.get("seconds"), "cache_bypass": probe.get("cache_bypass"),
        "timed_out": bool(probe.get("timed_out"))}
    reasons = []
    needed = _needed_rate(facts, at)
    if probe.get("timed_out"):
        reasons.append(f"the read probe did not finish within {probe.get('max_seconds', 0):g} s")
    files_read = sequential.get("files")
    streamed = (sequential.get("bytes", 0) / files_read) if files_read else None
    judge_sequential = seq_rate is not None and (
        sequential.get("bytes", 0) >= MIN_JUDGED_BYTES or sequential.get("seconds", 0) >= MIN_JUDGED_SECONDS) and (
        streamed is None or streamed >= MIN_STREAMED_BYTES_PER_FILE)
    judge_random = random_reads is not None and (
        random_pass.get("reads", 0) >= MIN_JUDGED_READS or random_pass.get("seconds", 0) >= MIN_JUDGED_SECONDS)
    if needed and judge_random:
        evidence["needed"] = needed
        if random_rate is not None and random_rate < needed["mib_per_s"]:
            reasons.append(f"random reads give {random_rate:g} MiB/s but {needed['samples_per_s']:.0f} "
                           f"samples/s × {human_bytes(needed['bytes_per_sample'])} need {needed['mib_per_s']:.1f} MiB/s")
    elif not needed:
        if judge_sequential and seq_rate is not None and seq_rate < SLOW_SEQUENTIAL_MIB_S:
            reasons.append(f"sequential reads give {seq_rate:g} MiB/s "
                           f"(below {SLOW_SEQUENTIAL_MIB_S:g})")
        if judge_random and random_reads is not None and random_reads < SLOW_RANDOM_READS_S:
            reasons.append(f"random reads manage {random_reads:g} a second "
                           f"(below {SLOW_RANDOM_READS_S:g})")
    if not reasons:
        return
    usable = facts["system"]["cpu"]["usable"]
    yield Hit(
        message=f"reading {at.section['path']} is slow: " + "; ".join(reasons),
        evidence=evidence,
        fix=(f"copy the data to faster local storage ({_local_copy_hint(at)}); pack small files into "
             "shards (WebDataset, LMDB, HDF5); and read in parallel with more workers "
             f"(num_workers={2 * usable} or more for network storage)"),
    )


RULES = {
    "DSK001": find_rotational_disk,
    "DSK002": find_network_filesystem,
    "DSK003": find_many_small_files,
    "DSK004": find_slow_reads,
}

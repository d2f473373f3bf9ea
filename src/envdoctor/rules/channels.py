"""CHN rules: where the conda packages of the environment came from.

CHN001 mixed-channels (ABI-sensitive packages from incompatible channel
families), CHN002 retired-pytorch-channel, CHN003 mixed-blas. All three read
the conda-meta records in the "packages" facts; the channel families and the
package lists are data in catalog/channels.toml.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from envdoctor.catalog import load_data
from envdoctor.facts import Facts
from envdoctor.facts.conda_meta import CondaRecord
from envdoctor.remedies.install_commands import Fix, conda, fix_of, pip_own
from envdoctor.rules import Hit

#: Platform subdirs that end a channel URL and are not part of the channel's name.
SUBDIRS = {"noarch", "linux-64", "linux-aarch64", "linux-ppc64le", "linux-s390x", "linux-32",
           "osx-64", "osx-arm64", "win-64", "win-32", "win-arm64", "emscripten-wasm32", "wasi-wasm32"}


def channel_name(record: CondaRecord | dict[str, object]) -> str | None:
    """A record's channel as people write it: `conda-forge`, `pkgs/main`, `pytorch`, or a file URL.

    Read from the record's `channel` field (a name or a URL), else from its `url`.
    """
    raw = str(record.get("channel") or "")
    url = record.get("url")
    if not raw and isinstance(url, str) and url:
        raw = url.rsplit("/", 1)[0]
    raw = raw.strip().rstrip("/")
    if not raw:
        return None
    if "://" not in raw:
        return "/".join(_without_subdir(raw.split("/"))) or None
    return _channel_of_url(raw)


def _without_subdir(parts: list[str]) -> list[str]:
    """A channel path's non-empty parts, less a trailing platform subdir (`linux-64`, `noarch` …)."""
    parts = [p for p in parts if p]
    return parts[:-1] if parts and parts[-1] in SUBDIRS else parts


def _channel_of_url(raw: str) -> str:
    """`https://conda.anaconda.org/conda-forge/linux-64` -> `conda-forge`; a file URL as it is."""
    # Split by hand, not with urlparse: a redacted `[redacted]@host` is no IPv6 literal to check.
    scheme, _, rest = raw.partition("://")
    if scheme.lower() == "file":
        return raw
    netloc, _, path = rest.partition("/")
    netloc = netloc.rsplit("@", 1)[-1]
    parts = _without_subdir(path.split("?", 1)[0].split("/"))
    # A label is part of the channel: conda-forge/label/rc, not "rc".
    if len(parts) >= 3 and parts[-2] == "label":
        return "/".join(parts[-3:])
    if not parts:
        return netloc
    if parts[0] == "pkgs" and len(parts) >= 2:
        return "/".join(parts[:2])
    return parts[-1]


def channel_family(name: str | None) -> str | None:
    if not name:
        return None
    name = name.split("/label/")[0]  # conda-forge/label/rc builds are conda-forge's
    for family, members in load_data("channels")["families"].items():
        if name in members:
            return family
    return None


def conda_records(facts: Facts) -> list[CondaRecord]:
    return list(facts["packages"]["conda"]["records"])


def _label(record: CondaRecord) -> str:
    return f"{record['name']} {record['version']}"


def find_mixed_channels(facts: Facts) -> Iterator[Hit]:
    data = load_data("channels")
    sensitive = set(data["abi_sensitive"])
    incompatible = set(data["incompatible"])
    by_family: dict[str, list[CondaRecord]] = {}
    for record in conda_records(facts):
        if record["name"] not in sensitive:
            continue
        family = channel_family(channel_name(record))
        if family is not None and family in incompatible:
            by_family.setdefault(family, []).append(record)
    if len(by_family) < 2:
        return
    # Keep the family most ABI-sensitive packages already come from (conda-forge on a tie).
    counts = Counter({family: len(records) for family, records in by_family.items()})
    keep = max(counts, key=lambda f: (counts[f], f == "conda-forge"))
    movers = [r for family, records in sorted(by_family.items()) if family != keep for r in records]
    packages = facts["packages"]
    channel_arg = "conda-forge" if keep == "conda-forge" else "defaults"
    summary = "; ".join(f"{family}: {', '.join(_label(r) for r in records)}"
                        for family, records in sorted(by_family.items()))
    yield Hit(
        message=(f"ABI-sensitive packages come from incompatible channels ({summary}); binaries "
                 "built with different compilers and runtimes fail at import with undefined symbols"),
        evidence={
            "families": {family: [_label(r) for r in records] for family, records in sorted(by_family.items())},
            "packages": [{"package": r["name"], "version": r["version"], "channel": channel_name(r),
                          "family": family} for family, records in sorted(by_family.items()) for r in records],
            "keep_family": keep,
        },
        **fix_of(conda(packages, "install", "--override-channels", "-c", channel_arg, "--force-reinstall",
                       *sorted({r["name"] for r in movers})),
                 note=(f"then keep one channel family: conda config --file {packages['prefix']}/.condarc "
                       "--set channel_priority strict" if packages["kind"] != "pixi" else "")).hit(),
    )


def find_retired_pytorch_channel(facts: Facts) -> Iterator[Hit]:
    data = load_data("channels")["pytorch"]
    retired, stale = set(data["retired"]), set(data["stale"])
    records = conda_records(facts)
    packages = facts["packages"]
    for record in records:
        if record["name"] not in ("pytorch", "pytorch-cpu", "pytorch-gpu"):
            continue
        channel = channel_name(record)
        if channel not in retired and channel not in stale:
            continue
        companions = [r for r in records if r["name"] in data["companions"] and channel_name(r) == channel]
        names = [record["name"], *(r["name"] for r in companions)]
        why = (f"the `{channel}` channel is retired: it has no pytorch release after {data['last_release']}"
               if channel in retired else
               f"the `{channel}` (defaults) builds of pytorch lag far behind and mix badly with conda-forge")
        installable = [n for n in names if n not in ("pytorch-mutex", "pytorch-cuda")]
        # conda remove takes what depends on pytorch along (lightning, torchmetrics from conda …): reinstall them.
        takes = sorted(r["name"] for r in records if r["name"] not in names
                       and set(names) & set(r["depends"]))
        yield Hit(
            message=f"{record['name']} {record['version']} is installed from the {channel} channel: {why}",
            evidence={"package": record["name"], "version": record["version"], "channel": channel,
                      "build": record["build"],
                      "companions": [{"package": r["name"], "version": r["version"]} for r in companions],
                      "last_release": data["last_release"] if channel in retired else None},
            **fix_of(conda(packages, "remove", *names),
                     conda(packages, "install", "--override-channels", "-c", "conda-forge", *installable, *takes),
                     note=f"or pip: {' && '.join(c.text for c in pip_own(packages, 'install', 'torch'))}").hit(),
        )


def _matches(record: CondaRecord, pattern: str) -> bool:
    name, _, build = pattern.partition("=")
    if record["name"] != name:
        return False
    if not build:
        return True
    suffix = build.lstrip("*")
    return record["build"].endswith(suffix) or record["build"].split("_")[0].endswith(suffix)


#: Packages that only select a BLAS (their build says which): switched by installing the selector.
BLAS_SELECTORS = ("libblas", "blas", "libcblas", "liblapack", "liblapacke")


def _installed_blas(implementations: dict[str, list[str]], records: list[CondaRecord]) -> dict[str, list[CondaRecord]]:
    """Implementation -> its installed records, for each implementation the environment holds."""
    found: dict[str, list[CondaRecord]] = {}
    for impl, patterns in implementations.items():
        hits = [r for r in records if any(_matches(r, p) for p in patterns)]
        # intel-openmp alone is an OpenMP runtime, not a BLAS.
        if hits and not all(r["name"] == "intel-openmp" for r in hits):
            found[impl] = hits
    return found


def _dependents(name_sets: dict[str, set[str]], every: list[CondaRecord], blas_names: set[str]) -> dict[str, list[str]]:
    """Key -> the non-BLAS packages that depend on one of its names (sorted)."""
    return {key: sorted({r["name"] for r in every if r["name"] not in blas_names and names & set(r["depends"])})
            for key, names in name_sets.items()}


def _blas_to_keep(found: dict[str, list[CondaRecord]], selected: str | None, needed_by: dict[str, list[str]]) -> str:
    """The implementation to keep: the selector's, else mkl, else the first; but the only one others link."""
    keep = selected or ("mkl" if "mkl" in found else sorted(found)[0])
    needed = [impl for impl in found if needed_by[impl]]
    if len(needed) == 1 and not needed_by[keep]:
        keep = needed[0]
    return keep


def find_mixed_blas(facts: Facts) -> Iterator[Hit]:
    implementations = load_data("channels")["blas"]
    names = {p.partition("=")[0] for patterns in implementations.values() for p in patterns}
    every = conda_records(facts)
    records = [r for r in every if r["name"] in names]
    found = _installed_blas(implementations, records)
    if len(found) < 2:
        return
    libblas = next((r for r in records if r["name"] in ("libblas", "blas")), None)  # filtered above
    selected = next((impl for impl, hits in found.items() if libblas in hits), None) if libblas else None
    # `conda remove X` also removes every package that depends on X: an implementation
    # another package (scipy, pytorch …) links directly is the one to keep, not to remove.
    own = {impl: {r["name"] for r in hits} - set(BLAS_SELECTORS) for impl, hits in found.items()}
    blas_names = set().union(*own.values()) | set(BLAS_SELECTORS)
    needed_by = _dependents(own, every, blas_names)
    keep = _blas_to_keep(found, selected, needed_by)
    others = sorted({name for impl in found if impl != keep for name in own[impl]})
    held = _dependents({name: {name} for name in others}, every, blas_names)
    yield Hit(
        message=(f"{len(found)} BLAS implementations are installed ({', '.join(sorted(found))}): "
                 "numpy, scipy and torch may each load a different one, with two OpenMP runtimes "
                 "fighting over the threads"),
        evidence=_blas_evidence(found, libblas, selected, keep, needed_by),
        **_one_blas_fix(facts, libblas, keep, others, held).hit(),
    )


def _blas_evidence(found: dict[str, list[CondaRecord]], libblas: CondaRecord | None, selected: str | None,
                   keep: str, needed_by: dict[str, list[str]]) -> dict[str, object]:
    return {"implementations": {impl: [_label(r) for r in hits] for impl, hits in sorted(found.items())},
            "libblas": f"{libblas['name']} {libblas['version']} {libblas['build']}" if libblas else None,
            "libblas_selects": selected, "keep": keep,
            "needed_by": {impl: deps for impl, deps in sorted(needed_by.items()) if deps}}


def _one_blas_fix(facts: Facts, libblas: CondaRecord | None, keep: str, others: list[str],
                  held: dict[str, list[str]]) -> Fix:
    """Select `keep` through the selector package, and remove the other BLAS packages nothing else needs."""
    packages = facts["packages"]
    selector = libblas["name"] if libblas else "libblas"
    commands = [conda(packages, "install", f"{selector}=*=*{keep}")]
    removable = [name for name in others if not held[name]]
    if removable:
        commands.append(conda(packages, "remove", *removable))
    stays = "; ".join(f"{name} stays: {', '.join(held[name])} depend on it" for name in others if held[name])
    return fix_of(*commands, note=f"one BLAS ({keep}) for every package"
                  + (f" ({stays}; rebuild those against {keep})" if stays else ""))


RULES = {
    "CHN001": find_mixed_channels,
    "CHN002": find_retired_pytorch_channel,
    "CHN003": find_mixed_blas,
}

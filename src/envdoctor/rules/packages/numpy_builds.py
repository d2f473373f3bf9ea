"""PKG008's static half: a compiled distribution built for NumPy 1 beside NumPy 2, read from its files.

`packages` records for each compiled dependant of numpy the NumPy major it was built against
(facts/numpy_build.py: an OS package's Depends on `python3-numpy-abi9`, or the module name
NumPy's headers compiled into its extensions). Nothing is imported, so this holds without
`--deep`: Debian's python3-numexpr under pip's NumPy 2 in /usr/local is named by a plain check.
An extension built against NumPy 2 loads under NumPy 1 too (NumPy 2's headers target the older
C API by default), so only the NumPy 1 build under NumPy 2 is reported.
"""
from __future__ import annotations

from collections.abc import Iterator

from envdoctor.facts import Facts
from envdoctor.remedies.install_commands import advice
from envdoctor.rules import Hit
from envdoctor.rules.packages.imports import _fix
from envdoctor.rules.packages.states import owner_text, parsed_version, visible_distributions
from envdoctor.rules.packages.torch_import import find_numpy_abi_mismatch

_SOURCES = {"dpkg": "its Debian package depends on {detail}, which only NumPy 1.x provides",
            "extension": "its extension {detail} names numpy.core._multiarray_umath only, as NumPy 1.x headers "
                         "compile it"}


def find_numpy1_builds_under_numpy2(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    if not packages:
        return
    visible = visible_distributions(packages)
    numpy = visible.get("numpy")
    version = parsed_version(numpy["version"]) if numpy is not None else None
    if numpy is None or version is None or version.release[0] < 2:
        return
    for key, dist in sorted(visible.items()):
        build = dist.get("numpy_build")
        if build is None or build["major"] != 1 or key == "numpy":
            continue
        why = _SOURCES.get(build["source"], "{detail}").format(detail=build["detail"])
        yield Hit(
            message=(f"{dist['name']} {dist['version']} (from {owner_text(dist)}) was built against NumPy 1.x and "
                     f"does not import under numpy {numpy['version']} (from {owner_text(numpy)}): {why}"),
            evidence={"package": dist["name"], "version": dist["version"], "owner": owner_text(dist),
                      "built_for_numpy": build["major"], "source": build["source"], "detail": build["detail"],
                      "numpy_version": numpy["version"], "numpy_owner": owner_text(numpy), "path": dist["path"],
                      "static": True},
            **advice(_fix("numpy-abi", dist, dist["name"], numpy, None, packages)).hit(),
        )


def find_numpy_abi_mismatches(facts: Facts) -> Iterator[Hit]:
    """PKG008: a NumPy 1 build beside NumPy 2 read from the files (no import), then what the probe printed."""
    yield from find_numpy1_builds_under_numpy2(facts)
    yield from find_numpy_abi_mismatch(facts)


RULES = {"PKG008": find_numpy_abi_mismatches}

"""PKG006 shadowed-package and PKG011 pth-executes-code: what the import path does.

PKG006: a copy outside the environment (user site, PYTHONPATH, the working
directory) comes earlier on sys.path than the environment's own. PKG011: a
`.pth` file that `site` would execute (a line starting with `import`) and that
no distribution's RECORD, conda record or OS package ships; the facts read it
as data, never run it.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

from envdoctor.facts import Facts
from envdoctor.facts.distributions import Distribution
from envdoctor.facts.packages import SiteDir
from envdoctor.remedies.install_commands import Move, advice, fix_of, move_aside, pip_own
from envdoctor.rules import Hit
from envdoctor.rules.packages.states import OWN_LOCATIONS, SHADOW_LOCATIONS


# complexity: 24 — each place a shadowing copy sits (the user site, PYTHONPATH, the working directory, another sys.path
#   folder) has its own fix; the branches are the fixes.
def find_shadowed_packages(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    outside = [d for d in packages["site_dirs"] if d["location"] in SHADOW_LOCATIONS and d["modules"]]
    if not outside:
        return
    dists_in: dict[tuple[str, str], Distribution] = {}
    for dist in packages["distributions"]:
        dists_in.setdefault((dist.get("site_dir", ""), dist["key"]), dist)
    reported = set()
    for dist in packages["distributions"]:
        if dist.get("location") not in OWN_LOCATIONS:
            continue
        for name in dist["import_names"]:
            shadow = next((d for d in outside if d["order"] < dist.get("order", 0) and name in d["modules"]
                           and not _is_editable_source(dist, d, name)), None)
            if shadow is None or (dist["key"], shadow["path"]) in reported:
                continue
            reported.add((dist["key"], shadow["path"]))
            copy = dists_in.get((shadow["path"], dist["key"]))
            where = {"user": "the user site", "pythonpath": "a PYTHONPATH entry",
                     "cwd": "the working directory", "other": "a directory earlier on sys.path"}[shadow["location"]]
            shadow_path = os.path.join(shadow["path"], shadow["module_files"].get(name, name))
            if shadow["location"] == "user" and copy is not None:
                # pip uninstall removes the first copy on sys.path: the user site's.
                fix = fix_of(*pip_own(packages, "uninstall", "-y", copy["name"]),
                             note=f"removes the user-site copy first; or export PYTHONNOUSERSITE=1 to ignore "
                                  f"{shadow['path']}")
            elif shadow["location"] == "pythonpath":
                fix = advice(f"remove {shadow['path']} from PYTHONPATH (e.g. `unset PYTHONPATH` in the job script), "
                             f"or rename {shadow_path}")
            elif shadow["location"] == "cwd":
                fix = advice(f"start training from another directory, or rename {shadow_path} "
                             f"(it hides the installed {name})")
            else:
                # Moved aside, not deleted: the stray copy may be someone's source, and a move undoes.
                # It lies outside the prefix, so it is advice, not a step `envdoctor fix` runs.
                moves = [shadow_path] + ([copy["path"]] if copy else [])
                fix = advice(" && ".join(Move(p, p + ".disabled").text for p in moves)
                             + f"   # it hides the installed {name}; delete it once training works"
                             + ("; or export PYTHONNOUSERSITE=1" if shadow["location"] == "user" else ""))
            shown = f" {copy['version']}" if copy else ""
            yield Hit(
                message=(f"`import {name}` loads the copy{shown} in {where} ({shadow['path']}), not the "
                         f"environment's {dist['name']} {dist['version']}"),
                evidence={"package": dist["name"], "version": dist["version"], "import_name": name,
                          "shadow_path": shadow_path, "shadow_location": shadow["location"],
                          "shadow_version": copy["version"] if copy else None, "env_path": dist["path"]},
                **fix.hit(),
            )


def _is_editable_source(dist: Distribution, site_dir: SiteDir, name: str) -> bool:
    """Is `site_dir`/`name` the very code an editable install of `dist` points at?

    `pip install -e .` in a project, then training started from that project
    (or with its src/ on PYTHONPATH), finds the same files twice on sys.path:
    that is one copy, not a shadow. Real paths come from the facts.
    """
    paths = dist.get("editable_paths")
    if not paths:
        return False
    real = site_dir["real_path"]
    return real in paths or any(os.path.join(real, n) in paths for n in (name, name + ".py"))


# ---------------------------------------------------------------- PKG011


def find_pth_code(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    prefix = packages["prefix"]
    for pth in packages["pth_files"]:
        if pth["owner"] is not None or not pth["code_line_count"]:
            continue
        inside = os.path.normpath(pth["path"]).startswith(os.path.normpath(prefix).rstrip(os.sep) + os.sep)
        aside = move_aside(pth["path"])
        note = "site reads it at every interpreter start; check what it does before you keep it"
        yield Hit(
            message=(f"{pth['path']} runs code at every Python start ({pth['code_line_count']} line"
                     f"{'s' if pth['code_line_count'] != 1 else ''} starting with `import`), and no installed "
                     "distribution, conda package or OS package ships it (envdoctor read it, it did not run it)"),
            evidence={"path": pth["path"], "site_dir": pth["site_dir"], "code_lines": pth["code_lines"],
                      "code_line_count": pth["code_line_count"]},
            **(fix_of(aside, note=note) if inside else advice(f"{aside.text}   # {note}")).hit(),
        )


RULES = {
    "PKG006": find_shadowed_packages,
    "PKG011": find_pth_code,
}

"""A fix is verified, not only re-checked: the files on disk and an import in the target.

After the steps, for every distribution the fixed findings name that is still installed:

- every file under its import packages (in each site folder that holds a copy of it) belongs to
  exactly one installed distribution's file list (its RECORD, an egg-info's installed-files.txt,
  or the OS package's list). A file only a removed version listed (the old dist-info a step moved
  aside or pip replaced: its RECORD is read from the before-state the journal kept) is left-over
  code of that version, which `import` still runs (an old `.so` beside the new `.py` shim wins).
  For PKG002 those files are part of the fix: they are moved into the journal, so undo restores them.
- its top-level modules import in the target interpreter: one bounded child, isolated (`-I`),
  writing no bytecode, with a time limit.

What fails is said in one line per problem; the caller rolls the whole fix back.
"""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envdoctor.facts.distributions import dist_name_from_dir, normalize
from envdoctor.fix.journal import Entry, Journal, boundary, describe
from envdoctor.fix.state import object_path

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.fix.plan import Plan
    from envdoctor.model import Finding

#: Seconds the verification import may take (torch's import included).
IMPORT_TIMEOUT_S = 120.0
#: Suffix of a metadata folder a fix moved aside (rules/…/install_commands.move_aside).
ASIDE = ".envdoctor-aside"
#: Rules whose fix may remove left-over files of the version it replaced.
CLEANS_LEFTOVERS = ("PKG002",)
#: Evidence keys that name the distributions a finding is about.
_NAME_KEYS = ("package", "distribution", "dependency")


@dataclass
class Verification:
    problems: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # left-over files moved into the journal
    imported: dict[str, str] = field(default_factory=dict)  # module -> the file it loaded

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "problems": self.problems, "removed": self.removed, "imported": self.imported}


def fixed_names(findings: Iterable[Finding]) -> set[str]:
    names = set()
    for finding in findings:
        for key in _NAME_KEYS:
            value = finding.evidence.get(key)
            if isinstance(value, str) and value:
                names.add(normalize(value))
    return names


def _record_paths(site: str, text: str) -> set[str]:
    paths = set()
    for row in csv.reader(io.StringIO(text)):
        if row and row[0]:
            paths.add(os.path.normpath(os.path.join(site, row[0])))
    return paths


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read()
    except OSError:
        return None


def _dpkg_list(folder: str, target: Mapping[str, object]) -> tuple[str, set[str]] | None:
    """The OS package's own file list for a metadata folder dpkg ships (an egg-info has no RECORD)."""
    from envdoctor.facts.owners import dpkg_database

    found = dpkg_database(os.path.realpath(str(target.get("prefix") or "")))
    if found is None:
        return None
    root, admin = found
    info = os.path.join(admin, "info")
    real = os.path.realpath(folder)
    try:
        names = sorted(n for n in os.listdir(info) if n.endswith(".list"))
    except OSError:
        return None
    for name in names:
        text = _read(os.path.join(info, name)) or ""
        paths = {os.path.realpath(os.path.join(root, line.strip().lstrip("/"))) for line in text.splitlines()
                 if line.strip()}
        if real in paths:
            return f"dpkg:{name[:-len('.list')]}", paths
    return None


def files_of(folder: str, target: Mapping[str, object], os_lists: bool) -> tuple[str, set[str]] | None:
    """(which list, the absolute paths it names) for one installed metadata folder, or None when none lists them.

    A wheel's RECORD, an egg-info's installed-files.txt, else (with `os_lists`) the dpkg list that ships
    the folder: two metadata folders one OS package ships share one list, so they are one owner.
    """
    site = os.path.dirname(folder)
    if folder.endswith(".egg-info"):
        listed = _read(os.path.join(folder, "installed-files.txt"))
        if listed is not None:
            return folder, {os.path.normpath(os.path.join(folder, line.strip()))
                            for line in listed.splitlines() if line.strip()}
    else:
        text = _read(os.path.join(folder, "RECORD"))
        if text is not None:
            return folder, _record_paths(site, text)
    return _dpkg_list(folder, target) if os_lists else None


def _claims(folder: str, top: str) -> bool:
    """Does a folder with no file list say (top_level.txt) that it provides the import name `top`?"""
    text = _read(os.path.join(folder, "top_level.txt")) or ""
    return top in {line.strip().split("/")[0] for line in text.splitlines()}


def _installed(site: str) -> list[str]:
    try:
        return sorted(os.path.join(site, n) for n in os.listdir(site) if n.endswith((".dist-info", ".egg-info")))
    except OSError:
        return []


def _removed_versions(site: str, before: Mapping[str, Entry], journal: Journal) -> dict[str, set[str]]:
    """Metadata folders of `site` before the fix that are no longer installed: folder -> its RECORD's files."""
    removed: dict[str, set[str]] = {}
    for path, entry in before.items():
        if os.path.dirname(os.path.dirname(path)) != site or os.path.basename(path) != "RECORD" \
                or entry["type"] != "file":
            continue
        folder = os.path.dirname(path)
        if os.path.isdir(folder) and not folder.endswith(ASIDE) and os.path.isfile(path) and \
                _same_file(path, entry):
            continue  # still installed, unchanged
        text = _read(str(object_path(journal, entry["sha256"])))
        if text is not None:
            removed[folder] = _record_paths(site, text)
    for name in os.listdir(site) if os.path.isdir(site) else []:
        if name.endswith(ASIDE):
            text = _read(os.path.join(site, name, "RECORD"))
            if text is not None:
                removed[os.path.join(site, name[: -len(ASIDE)])] = _record_paths(site, text)
    return removed


def _same_file(path: str, entry: Entry) -> bool:
    return describe(path) == entry


def _import_names(files: set[str], site: str) -> set[str]:
    names = set()
    for path in files:
        rel = os.path.relpath(path, site)
        first = rel.split(os.sep, 1)[0]
        if first.startswith("..") or first.endswith((".dist-info", ".egg-info", ".data", ".pth")) \
                or first == "__pycache__" or first.endswith(ASIDE):
            continue
        if os.sep in rel:
            if first.isidentifier():  # numpy.libs (auditwheel's vendored libraries) is no import name
                names.add(first)
        elif first.endswith(".py"):
            names.add(first[:-3])
        elif first.endswith((".so", ".pyd")):
            names.add(first.split(".", 1)[0])
    return names


def _package_folders(files: set[str], site: str) -> set[str]:
    """Every top-level folder of `site` a file list puts files in (import packages, and `numpy.libs` too)."""
    tops = set()
    for path in files:
        rel = os.path.relpath(path, site)
        if os.sep not in rel or rel.startswith(".."):
            continue
        first = rel.split(os.sep, 1)[0]
        if not first.endswith((".dist-info", ".egg-info", ".data")) and first != "__pycache__" \
                and not first.endswith(ASIDE):
            tops.add(first)
    return tops


def _site_files(files: set[str], site: str) -> set[str]:
    """The files a list puts directly in `site` (single-module distributions), metadata and .pth left out."""
    return {p for p in files if os.path.dirname(p) == site and not p.endswith(".pth")}


def _walk_files(site: str, tops: set[str]) -> list[str]:
    """Every file under the folders `tops` of `site` (bytecode folders included), no link followed."""
    found = []
    for top in sorted(tops):
        package = os.path.join(site, top)
        if not os.path.isdir(package) or os.path.islink(package):
            continue
        for parent, dirs, files in os.walk(package):
            dirs.sort()
            found += [os.path.join(parent, name) for name in sorted(files)]
    return found


def check_files(names: set[str], sites: Iterable[str], target: Mapping[str, object], before: Mapping[str, Entry],
                journal: Journal, clean: bool) -> tuple[Verification, set[str]]:
    """Every file under the package folders of `names` in `sites` belongs to exactly one installed list.

    The folders walked are those the installed and the removed versions' lists put files in, bytecode
    folders included: a file only a removed version listed (its `.py`, `.so`, `__pycache__/*.pyc`, a
    vendored library in `numpy.libs/`) is left-over. Returns the verification (problems; with `clean`,
    those left-over files, moved into the journal) and the top-level import names of `names` found.
    """
    result = Verification()
    modules: set[str] = set()
    for site in sites:
        folders = [f for f in _installed(site) if not f.endswith(ASIDE)]
        ours = [f for f in folders if normalize(dist_name_from_dir(os.path.basename(f))[0]) in names]
        if not ours:
            continue
        lists = {f: files_of(f, target, os_lists=f in ours) for f in folders}
        unlisted = [f for f, found in lists.items() if found is None]
        owners_of_paths: dict[str, set[str]] = {}
        for found in lists.values():
            if found is not None:
                for path in found[1]:
                    owners_of_paths.setdefault(path, set()).add(found[0])
        removed = _removed_versions(site, before, journal)
        ours_removed = {f: listed for f, listed in removed.items()
                        if normalize(dist_name_from_dir(os.path.basename(f))[0]) in names}
        tops: set[str] = set()
        walked: set[str] = set()
        for folder in ours:
            found = lists[folder]
            tops |= _import_names(found[1], site) if found else set()
            walked |= _package_folders(found[1], site) if found else set()
        for listed in ours_removed.values():
            walked |= _package_folders(listed, site)
        modules |= tops
        loose = sorted(p for listed in ours_removed.values() for p in _site_files(listed, site) if os.path.isfile(p))
        for path in _walk_files(site, walked) + loose:
            owners = owners_of_paths.get(path) or owners_of_paths.get(os.path.realpath(path)) or set()
            problem = _judge(path, owners, unlisted, removed, before, clean)
            if problem == "removed":
                result.removed.append(path)
            elif problem:
                result.problems.append(problem)
    if clean and result.removed:
        # What the fix left is about to change: until it is listed again, undo must not hold it to the old listing.
        journal.manifest.pop("after", None)
        journal.save()
        for number, path in enumerate(result.removed):
            journal.keep(path, "leftovers", str(number))
            boundary(f"left-over {path} moved into the journal")
        _remove_empty_folders(result.removed)
    return result, modules


def _judge(path: str, owners: set[str], unlisted: list[str], removed: Mapping[str, set[str]],
           before: Mapping[str, Entry], clean: bool) -> str | None:
    """What one file under a fixed package is: None (fine), "removed" (a left-over to take away) or a problem."""
    if len(owners) == 1:
        return None
    if len(owners) > 1:
        return (f"{path} is listed by {len(owners)} installed distributions "
                f"({', '.join(sorted(os.path.basename(o) for o in owners))})")
    parts = path.split(os.sep)
    if any(_claims(f, _top_of(path, f)) for f in unlisted):
        return None  # a copy nothing lists (no RECORD, no OS list) provides it: cannot tell
    old = next((os.path.basename(f) for f, listed in removed.items() if path in listed), None)
    if old is not None:
        return "removed" if clean else f"{path} is a file of the removed {old}, and `import` still finds it"
    if "__pycache__" in parts or path.endswith(".pyc"):
        return None  # bytecode nobody lists: Python wrote it on import
    if before.get(path) != describe(path):
        return f"{path} belongs to no installed distribution"
    return None  # there before the fix, as it is, and nobody's then either: not this fix's doing


def _top_of(path: str, folder: str) -> str:
    """The first component of `path` under the site folder that holds `folder`."""
    site = os.path.dirname(folder)
    return os.path.relpath(path, site).split(os.sep, 1)[0]


def _remove_empty_folders(paths: list[str]) -> None:
    for folder in sorted({os.path.dirname(p) for p in paths}, key=lambda p: -p.count(os.sep)):
        while True:
            try:
                os.rmdir(folder)  # only when nothing is left in it
            except OSError:
                break
            folder = os.path.dirname(folder)


_IMPORT_CODE = r"""
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
        out[name] = {"ok": True, "file": getattr(module, "__file__", None) or ""}
    except BaseException as exc:
        out[name] = {"ok": False, "error": ("%s: %s" % (type(exc).__name__, exc))[-600:]}
print(json.dumps(out))
"""


def _run_imports(argv: list[str], names: list[str], timeout: float) -> tuple[dict[str, object] | None, str]:
    """(module -> {"ok", "file"|"error"}, or None when no answer came) and the failure said in words."""
    from envdoctor.process import quiet_python_env, run_bounded

    with tempfile.TemporaryDirectory(prefix="envdoctor-verify-") as cwd:
        run = run_bounded([*argv, "-I", "-B", "-c", _IMPORT_CODE, *names], timeout, env=quiet_python_env(),
                          cwd=cwd if not argv[0].endswith("chroot") else "/")
    try:
        data = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, run.describe_failure()
    return (data if isinstance(data, dict) else None), run.describe_failure()


def _inside(root: str, interpreter: str) -> tuple[list[str] | None, str]:
    """The argv that runs `interpreter` inside the root file system `root` (chroot), or None and why not."""
    import shutil
    import sys

    if sys.platform == "win32" or os.geteuid() != 0:
        return None, "entering it (chroot) needs root"
    chroot = shutil.which("chroot") or shutil.which("chroot", path="/usr/sbin:/sbin")
    if chroot is None:
        return None, "there is no chroot command"
    return [chroot, root, "/" + os.path.relpath(interpreter, root)], ""


def check_imports(interpreter: str, modules: Iterable[str], timeout: float = IMPORT_TIMEOUT_S,
                  root: str | None = None) -> Verification:
    """Import each module in the target interpreter (isolated, no bytecode, bounded); what failed.

    `root`: the root file system the target lies in, seen from outside (`ROOT/usr`): the import runs
    inside it (chroot) where this user may, its libraries and not this machine's; else it runs from
    here, and a failure says plainly that it was not checked inside the root, and how to.
    """
    result = Verification()
    names = sorted(set(modules))
    if not names:
        return result
    data: dict[str, object] | None = None
    failure, outside = "", ""
    if root is not None:
        argv, why_not = _inside(root, interpreter)
        if argv is not None:
            data, failure = _run_imports(argv, names, timeout)
            if data is not None:
                data = {k: {**v, "file": os.path.join(root, str(v.get("file") or "").lstrip("/"))}
                        if isinstance(v, dict) and v.get("ok") else v for k, v in data.items()}
            else:
                why_not = f"chroot {root} failed: {failure}"
        if data is None:
            outside = (f" (run from outside {root} with this machine's libraries, not the root's: {why_not}; to verify "
                       f"inside it, run the fix there: `chroot {root} envdoctor fix --prefix "
                       f"/{os.path.relpath(os.path.dirname(os.path.dirname(interpreter)), root)}`)")
    if data is None:
        data, failure = _run_imports([interpreter], names, timeout)
    if data is None:
        result.problems.append(f"importing {', '.join(names)} in {interpreter} {failure}{outside}")
        return result
    for name in names:
        got = data.get(name)
        if isinstance(got, dict) and got.get("ok"):
            result.imported[name] = str(got.get("file") or "")
        else:
            error = got.get("error") if isinstance(got, dict) else "no answer"
            result.problems.append(f"`import {name}` fails in {interpreter}: {error}{outside}")
    return result


def verify_fix(plan: Plan, journal: Journal) -> Verification:
    """Check the files and imports of every distribution the plan's findings name; record it in the manifest."""
    from envdoctor.fix.state import load_listing

    target = plan.target
    names = fixed_names(plan.planned)
    cleaned = fixed_names(f for f in plan.planned if f.rule in CLEANS_LEFTOVERS)
    # The folders import reads, by real path as the before-state lists them.
    given_sites = target.get("site_packages")
    sites = list(dict.fromkeys(os.path.realpath(str(p)) for p in (given_sites if isinstance(given_sites, list) else [])))
    state = journal.manifest.get("before")
    before = load_listing(journal, state["listing"]) if state else {}
    result = Verification()
    if names:
        found, modules = check_files(names - cleaned, sites, target, before, journal, clean=False)
        tidy, cleaned_modules = check_files(cleaned, sites, target, before, journal, clean=True)
        result.problems += found.problems + tidy.problems
        result.removed += tidy.removed
        interpreter = target.get("interpreter")
        if interpreter and (modules | cleaned_modules):
            from envdoctor.facts.target import enclosing_root

            root = enclosing_root(Path(str(target.get("prefix") or "/")))
            imports = check_imports(str(interpreter), modules | cleaned_modules,
                                    root=str(root) if root is not None else None)
            result.problems += imports.problems
            result.imported = imports.imported
    journal.manifest["verification"] = result.to_dict()
    journal.save()
    return result

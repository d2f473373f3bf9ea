"""`envdoctor fix --undo`: put the last fix back exactly, or refuse before touching anything.

The journal knows, for every path a fix touched, what the fix left there (a
moved tree at its new place, the files a package step created or changed,
hashed) and what was there before (the moved tree, the snapshot copies).
Undo first checks that every such path still holds what the fix left: a path
the user has changed since is a conflict, and undo refuses, naming it,
without changing anything. Then it walks the steps backwards: what a step
created is moved into the journal's `undone/` folder (never deleted), the
snapshot copies go back, moved trees move back; finally every restored path
is compared with the hashes recorded before the fix.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from envdoctor.fix.journal import Entry, Journal, describe, tree
from envdoctor.fix.snapshot import diff_against_listing
from envdoctor.fix.tools import Target

_TOUCHED = ("running", "done", "failed")
_ANY = object()  # an interrupted step: whatever is there now is the fix's doing


@dataclass
class UndoResult:
    journal: str
    restored: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 2 if self.refused else 1 if self.problems else 0

    def to_dict(self) -> dict[str, Any]:
        return {"journal": self.journal, "restored": self.restored, "problems": self.problems,
                "refused": self.refused, "exit_code": self.exit_code}


def _after_state(journal: Journal, target: Target) -> dict[str, Any]:
    """Path → what the fix left there (None: nothing), in step order, later steps winning."""
    state: dict[str, Any] = {}
    for record in journal.manifest["steps"]:
        if record.get("status") not in _TOUCHED:
            continue
        moved = record.get("moved")
        if moved:
            for rel, entry in moved["tree"].items():
                state[os.path.normpath(os.path.join(moved["from"], rel))] = None
                state[os.path.normpath(os.path.join(moved["to"], rel))] = entry
            if record["status"] == "running":  # the move may or may not have happened
                for rel in moved["tree"]:
                    state[os.path.normpath(os.path.join(moved["from"], rel))] = _ANY
                    state[os.path.normpath(os.path.join(moved["to"], rel))] = _ANY
        package = record.get("package")
        if package is not None:
            if "created" not in package:  # interrupted: diff against the listing taken before it
                package.update(diff_against_listing(journal, package, target))
                for path in [*package["created"], *package["changed"], *package["snapshot"]]:
                    state[path] = _ANY
                continue
            for path, entry in {**package["created"], **package["changed"]}.items():
                state[path] = entry
            for path in package["removed"]:
                state[path] = None
    return state


def _same(expected: Entry | None, actual: Entry | None) -> bool:
    if expected is None or actual is None:
        return expected is actual
    if expected["type"] == "dir":  # a folder's own times and mode change with what is put into it
        return actual["type"] == "dir"
    return expected == actual


def find_conflicts(journal: Journal, target: Target) -> list[str]:
    """Paths that no longer hold what the fix left there: the user (or another tool) changed them.

    A folder the fix made (or moved) must also hold nothing it did not put there: undo moves such a
    folder whole, and would carry off a file someone added to it since. Bytecode caches Python wrote
    there on import (`__pycache__`) are no one's work: they go along into the journal.
    """
    state = _after_state(journal, target)
    conflicts = []
    for path, expected in sorted(state.items()):
        if expected is _ANY:
            continue
        actual = describe(path)
        if not _same(expected, actual):
            now = "is gone" if actual is None else "was created since" if expected is None else "was changed since"
            conflicts.append(f"{path} {now}")
        elif expected is not None and expected["type"] == "dir":
            conflicts += [f"{os.path.join(path, rel)} was created since" for rel in sorted(tree(path))
                          if rel != "." and os.path.normpath(os.path.join(path, rel)) not in state
                          and "__pycache__" not in rel.split(os.sep)]
    return conflicts


def undo_last(root: Any = None, prefix: Any = None) -> UndoResult:
    """Undo the newest fix not yet undone (of `prefix`, when given)."""
    journal = Journal.latest(root, prefix)
    if journal is None:
        where = f" of {prefix}" if prefix is not None else ""
        return UndoResult(journal="", refused=[f"there is no fix{where} to undo (no journal under the cache)"])
    return undo(journal)


def undo(journal: Journal) -> UndoResult:
    target = Target.from_report_target(journal.manifest["target"])
    result = UndoResult(journal=str(journal.path))
    conflicts = find_conflicts(journal, target)
    if conflicts:
        result.refused = conflicts
        return result
    for record in reversed(journal.manifest["steps"]):
        if record.get("status") not in _TOUCHED:
            continue
        if record.get("moved"):
            _undo_move(record, result)
        elif record.get("package") is not None:
            _undo_package(journal, record, result)
        elif record.get("conda") is not None:
            _undo_conda(journal, record, target, result)
        else:
            result.problems.append(f"step {record['step']} ran `{' '.join(record.get('argv') or [])}`: envdoctor "
                                   f"keeps no copy of what {record['tool']} changes; reverse it with {record['tool']}")
    _verify(journal, result)
    journal.manifest["status"] = "undone" if not result.problems else "undone-with-problems"
    journal.save()
    return result


def _undo_move(record: dict[str, Any], result: UndoResult) -> None:
    moved = record["moved"]
    if os.path.lexists(moved["to"]) and not os.path.lexists(moved["from"]):
        shutil.move(moved["to"], moved["from"])
        result.restored.append(f"moved {moved['to']} back to {moved['from']}")


def _undo_package(journal: Journal, record: dict[str, Any], result: UndoResult) -> None:
    package, number = record["package"], record["step"]
    created = sorted(package["created"])
    tops = [p for p in created if os.path.dirname(p) not in package["created"]]
    for i, path in enumerate(tops):
        if os.path.lexists(path):
            journal.keep(path, "undone", f"{number}/{i}")
    if tops:
        result.restored.append(f"step {number}: moved {len(tops)} path(s) it created into {journal.path}/undone")
    for path in sorted(package["removed_dirs"]):
        if not os.path.lexists(path):
            os.makedirs(path, mode=package["removed_dirs"][path], exist_ok=True)
    put_back = 0
    for path, stored in sorted(package["snapshot"].items()):
        wanted = package["files_before"][path]
        current = describe(path)
        if current == wanted:
            continue
        if current is not None:
            journal.keep(path, "undone", f"{number}/changed-{put_back}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copy2(journal.stored(stored), path, follow_symlinks=False)
        put_back += 1
    if put_back:
        result.restored.append(f"step {number}: put back {put_back} file(s) of "
                               f"{', '.join(sorted({d['name'] for d in package['distributions']}))}")
    failed = [text for text in (_run_inverse(record["tool"], argv, journal, result, number)
                                for argv in package.get("reinstall") or []) if text]
    if package["not_snapshotted"] and (failed or not package.get("reinstall")):
        result.problems.append(f"step {number} changed {len(package['not_snapshotted'])} path(s) no snapshot holds "
                               f"(e.g. {package['not_snapshotted'][0]}); the recorded inverse: "
                               + " ; ".join(" ".join(c) for c in [*package["inverse"], *package.get("reinstall", [])]))


def _run_inverse(tool: str, argv: list[str], journal: Journal, result: UndoResult, number: int) -> str | None:
    """Run one recorded inverse command with the step's own tool; the command's text when it could not."""
    from envdoctor.fix.execute import STEP_TIMEOUT_S
    from envdoctor.fix.tools import Refused, authorize
    from envdoctor.model import FixStep
    from envdoctor.process import run_bounded

    text = " ".join(argv)
    target = Target.from_report_target(journal.manifest["target"])
    try:
        run_argv = authorize(FixStep.command(tool, *argv), target)
    except Refused as exc:
        result.problems.append(f"step {number}: cannot run `{text}`: {exc}")
        return text
    run = run_bounded(run_argv, STEP_TIMEOUT_S)
    if not run.ok:
        result.problems.append(f"step {number}: `{text}` {run.describe_failure()}")
        return text
    result.restored.append(f"step {number}: ran `{text}`")
    return None


def _undo_conda(journal: Journal, record: dict[str, Any], target: Target, result: UndoResult) -> None:
    """Reverse a conda step with the same tool: reinstall the records it changed, remove what it added."""
    from envdoctor.fix.snapshot import conda_inverse, conda_records

    conda = record["conda"]
    commands = conda.get("inverse")
    if commands is None:  # interrupted: what conda-meta says now against what it said before
        commands = conda_inverse(record["argv"][0], str(target.prefix), conda["before"], conda_records(target.prefix))
    for argv in commands:
        _run_inverse(record["tool"], argv, journal, result, record["step"])


def _without_bytecode(listing: dict[str, Entry]) -> dict[str, Entry]:
    return {rel: entry for rel, entry in listing.items() if "__pycache__" not in rel.split(os.sep)}


def _verify(journal: Journal, result: UndoResult) -> None:
    """Every path the fix touched holds again what the journal recorded before the fix."""
    for record in journal.manifest["steps"]:
        if record.get("status") not in _TOUCHED:
            continue
        moved = record.get("moved")
        if moved and _without_bytecode(tree(moved["from"])) != _without_bytecode(moved["tree"]):
            result.problems.append(f"{moved['from']} differs from what the fix moved away")
        package = record.get("package") or {}
        for path, entry in (package.get("files_before") or {}).items():
            if describe(path) != entry:
                result.problems.append(f"{path} differs from its hash before the fix")

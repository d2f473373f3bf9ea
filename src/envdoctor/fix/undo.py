"""`envdoctor fix --undo`: put the whole before-state back, or refuse before touching anything.

The journal holds the listing of every root the fix's steps could write, taken before the
first step, with every file's bytes (envdoctor.fix.state), and the listing of what the fix
left there. Undo first checks that the roots still hold what the fix left: a path someone
changed since is a conflict, and undo refuses, naming it, without changing anything
(bytecode Python wrote on import since is no one's work, and goes). Then it makes the roots
hold exactly the before-state — what is there and was not is moved into the journal's
`undone/` folder, never deleted — and says "restored" only when the hash of the full trees
equals the hash taken before; otherwise it lists every path that differs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envdoctor.fix.journal import Journal, JournalError
from envdoctor.fix.state import (
    Listing,
    differences,
    is_bytecode,
    known_listings,
    list_roots,
    load_listing,
    restore,
    tree_hash,
)

#: Tools whose steps also write outside the roots (the OS package database, docs): undo cannot vouch for those.
_OUTSIDE_ROOTS = ("apt", "dnf")
_TOUCHED = ("running", "done", "failed")


@dataclass
class UndoResult:
    journal: str
    restored: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    before_hash: str | None = None
    after_hash: str | None = None

    @property
    def exit_code(self) -> int:
        return 2 if self.refused else 1 if self.problems else 0

    def to_dict(self) -> dict[str, Any]:
        return {"journal": self.journal, "restored": self.restored, "problems": self.problems,
                "refused": self.refused, "before_hash": self.before_hash, "after_hash": self.after_hash,
                "exit_code": self.exit_code}


def find_conflicts(left: Listing, now: Listing) -> list[str]:
    """Paths that no longer hold what the fix left there: the user (or another tool) changed them."""
    conflicts = []
    for path in sorted(set(left) | set(now)):
        if is_bytecode(path) or left.get(path) == now.get(path):
            continue
        if path not in left:
            conflicts.append(f"{path} was created since")
        elif path not in now:
            conflicts.append(f"{path} is gone since (removed after the fix)")
        elif left[path]["type"] == "dir" and now[path]["type"] == "dir":
            continue  # a folder's mode alone: put back with the rest
        else:
            conflicts.append(f"{path} was changed since")
    return conflicts


def undo_last(root: Any = None, prefix: Any = None) -> UndoResult:
    """Undo the newest fix not yet undone (of `prefix`, when given)."""
    journal = Journal.latest(root, prefix)
    if journal is None:
        where = f" of {prefix}" if prefix is not None else ""
        return UndoResult(journal="", refused=[f"there is no fix{where} to undo (no journal under the cache)"])
    return undo(journal)


def undo(journal: Journal, check_conflicts: bool = True) -> UndoResult:
    """Restore the before-state `journal` kept; `check_conflicts` False for the fix's own rollback."""
    result = UndoResult(journal=str(journal.path))
    state = journal.manifest.get("before")
    if state is None:  # the fix stopped before its first step (or kept no state, so ran none)
        result.restored.append("the fix stopped before its first step changed anything: nothing to put back")
        journal.manifest["status"] = "undone"
        journal.save()
        return result
    try:
        before = load_listing(journal, state["listing"])
        left = load_listing(journal, journal.manifest["after"]["listing"]) if journal.manifest.get("after") else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise JournalError(f"cannot read the before-state kept in {journal.path}: {exc}") from None
    roots, leave_out = state["roots"], state.get("leave_out", [])
    result.before_hash = state["hash"]
    known = known_listings(journal, journal.manifest.get("after"), state)
    if check_conflicts and left is not None:
        conflicts = find_conflicts(left, list_roots(roots, leave_out, known))
        if conflicts:
            result.refused = conflicts
            return result
    now = restore(journal, before, state, "rollback" if not check_conflicts else "undo", known)
    result.after_hash = tree_hash(now)
    if result.after_hash == state["hash"]:
        result.restored.append(f"restored: {len(roots)} root(s) ({', '.join(roots)}) hold exactly what they held "
                               f"before the fix: {len(before)} path(s), tree hash {state['hash'][:16]} equal")
    else:
        result.problems += differences(before, now)
    for record in journal.manifest["steps"]:
        if record.get("status") in _TOUCHED and record.get("tool") in _OUTSIDE_ROOTS:
            result.problems.append(f"step {record['step']} ran `{' '.join(record.get('argv') or [])}`: {record['tool']} "
                                   "also changed files outside the folders envdoctor keeps (its package database); "
                                   f"reverse it with {record['tool']}")
    journal.manifest["status"] = "undone" if not result.problems else "undone-with-problems"
    journal.save()
    return result

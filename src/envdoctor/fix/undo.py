"""`envdoctor fix --undo`: put the whole before-state back, or refuse before touching anything.

The journal holds the listing of every root the fix's steps could write, taken before the
first step, with every file's bytes (envdoctor.fix.state), and the listing of what the fix
left there. Undo takes the newest journal of the target `fix` would take (the environment
envdoctor runs in, or `--prefix`/`-n`), never another environment's, and checks it before
trusting it: its own hash and its listings' hashes, its folder (the user's, 0700), and that
every root it names is the target's own and every path it lists lies inside those roots. A
journal that fails a check is refused with the reason; one that cannot be read at all is
passed over (it may be another environment's) and named.

Undo first checks that the roots still hold what the fix left: a path someone changed since
is a conflict, and undo refuses, naming it, without changing anything (bytecode Python
wrote on import since is no one's work, and goes). It checks that the file systems have the
room the restore needs and that the file-size limit lets it write every file, saying how
much is needed. Then it records in the journal that it has begun and makes the roots hold
exactly the before-state, one change at a time — what is there and was not is moved into the
journal's `undone/` folder, never deleted; files come back under fresh exclusive names
renamed over their place — and says "restored" only when the hash of the full trees equals
the hash taken before; otherwise it lists every path that differs. An undo stopped anywhere
(killed, a full disk, a file-size limit) is finished by the next `fix --undo`, which says
that it resumes and computes only what is left.
"""
from __future__ import annotations

import datetime as _dt
import errno
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envdoctor.fix.journal import SETTLED, Journal, JournalError, journal_root, private_root
from envdoctor.fix.state import (
    Listing,
    RestorePlan,
    apply_restore,
    bytes_to_write,
    differences,
    is_bytecode,
    known_listings,
    list_roots,
    load_listing,
    plan_restore,
    tree_hash,
    write_roots,
)

#: Tools whose steps also write outside the roots (the OS package database, docs): undo cannot vouch for those.
_OUTSIDE_ROOTS = ("apt", "dnf")
_TOUCHED = ("running", "done", "failed")
#: Bytes kept free beyond what a restore writes (the manifest); each file and folder counts whole blocks.
_SLACK = 1 << 16
_BLOCK = 4096
#: Save the undo's progress in the manifest after this many changes (any listing is recomputed anyway).
_SAVE_EVERY = 256


@dataclass
class UndoResult:
    journal: str
    restored: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    before_hash: str | None = None
    after_hash: str | None = None
    resumed: str | None = None  # what the interrupted undo this one finished had done
    stopped: bool = False  # stopped part-way: the next `fix --undo` finishes it
    notes: list[str] = field(default_factory=list)  # journals passed over

    @property
    def exit_code(self) -> int:
        return 2 if self.refused else 1 if self.problems else 0

    def to_dict(self) -> dict[str, Any]:
        return {"journal": self.journal, "restored": self.restored, "problems": self.problems,
                "refused": self.refused, "before_hash": self.before_hash, "after_hash": self.after_hash,
                "resumed": self.resumed, "stopped": self.stopped, "notes": self.notes,
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


# ---------------------------------------------------------------- which journals

@dataclass
class Candidate:
    """One journal folder as `fix --undo` sees it for a target."""

    path: Path
    prefix: str | None
    status: str | None
    verdict: str  # "undo", "settled", "other environment", "refused: …", "unreadable: …"
    journal: Journal | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"journal": str(self.path), "prefix": self.prefix, "status": self.status, "verdict": self.verdict}


def _peek(path: Path) -> tuple[str | None, str | None]:
    """(target prefix, status) a manifest says, read without trusting it, or (None, None)."""
    import json

    try:
        with open(path / "manifest.json", encoding="utf-8", errors="surrogateescape") as fh:
            data = json.load(fh)
        target = data.get("target") if isinstance(data, dict) else None
        prefix = target.get("prefix") if isinstance(target, dict) else None
        status = data.get("status")
        return (prefix if isinstance(prefix, str) else None), (status if isinstance(status, str) else None)
    except (OSError, ValueError, AttributeError):
        return None, None


def candidates(prefix: Path, root: Path | None = None) -> list[Candidate]:
    """Every journal under the journal root, newest first, with what `fix --undo` of `prefix` makes of it."""
    root = root or journal_root()
    if not os.path.lexists(root):
        return []
    private_root(root)  # a journal folder someone else owns (or a link) is refused before anything in it is read
    try:
        names = sorted((p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise JournalError(f"cannot read the journal folder {root}: {exc.strerror or exc}") from None
    real = os.path.realpath(prefix)
    found = []
    for name in names:
        path = root / name
        said_prefix, status = _peek(path)
        if said_prefix is not None and os.path.realpath(said_prefix) != real:
            found.append(Candidate(path, said_prefix, status, "other environment"))
            continue
        try:
            journal = Journal.load(path)
        except JournalError as exc:
            verdict = (f"refused: {exc}" if said_prefix is not None and status not in SETTLED else
                       "settled" if said_prefix is not None else f"unreadable: {exc}")
            found.append(Candidate(path, said_prefix, status, verdict))
            continue
        verdict = "settled" if journal.manifest.get("status") in SETTLED else "undo"
        found.append(Candidate(path, said_prefix, status, verdict, journal))
    return found


def considered(found: list[Candidate]) -> list[Candidate]:
    """The candidates of this target (and the unreadable ones, which might be), newest first."""
    return [c for c in found if c.verdict != "other environment"]


def latest(prefix: Path, root: Path | None = None) -> Journal | None:
    """The newest readable journal of `prefix` that changed something and is not undone yet, or None."""
    return next((c.journal for c in considered(candidates(prefix, root)) if c.verdict == "undo"), None)


# ---------------------------------------------------------------- checking a journal before trusting it

def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _is_clean_absolute(path: object) -> bool:
    return isinstance(path, str) and os.path.isabs(path) and os.path.normpath(path) == path and "\0" not in path


def _check_entry(path: str, entry: object) -> str | None:
    if not isinstance(entry, dict) or entry.get("type") not in ("file", "link", "dir", "other"):
        return f"{path}: not an entry envdoctor writes"
    if entry["type"] == "file" and not (isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64
                                        and all(c in "0123456789abcdef" for c in entry["sha256"])):
        return f"{path}: no sha256"
    if entry["type"] in ("file", "dir") and not (isinstance(entry.get("mode"), int) and 0 <= entry["mode"] <= 0o7777):
        return f"{path}: no mode"
    if entry["type"] == "link" and not isinstance(entry.get("target"), str):
        return f"{path}: no link target"
    return None


def check_listing(listing: Mapping[str, object], roots: list[str], what: str) -> str | None:
    """Every path of a listing lies inside the roots, and a folder holds each one that is not a root."""
    for path, entry in listing.items():
        if not _is_clean_absolute(path) or not any(_under(path, r) for r in roots):
            return f"{what} names {path!r}, outside the roots the fix recorded ({', '.join(roots)})"
        wrong = _check_entry(path, entry)
        if wrong:
            return f"{what}: {wrong}"
        if path not in roots:
            parent = listing.get(os.path.dirname(path))
            if not isinstance(parent, dict) or parent.get("type") != "dir":
                return f"{what} names {path} but not a folder holding it"
    return None


def own_roots_of(prefix: Path) -> list[str]:
    """The roots a fix of `prefix` keeps, from fresh facts (its interpreter says its site folders)."""
    from envdoctor.config import Config
    from envdoctor.facts import Facts

    return write_roots(dict(Facts(Config(prefix=str(prefix)))["target"]))


def check_journal(journal: Journal, prefix: Path, own_roots: Callable[[], list[str]] | None = None) -> str | None:
    """Why `journal` must not be trusted to change `prefix`, or None. Its manifest hash was checked by load."""
    manifest = journal.manifest
    target: dict[str, Any] = manifest["target"] if isinstance(manifest.get("target"), dict) else {}
    if os.path.realpath(str(target.get("prefix"))) != os.path.realpath(prefix):
        return f"it is a fix of {target.get('prefix')}, not of {prefix}"
    try:
        journal.check_files()
    except JournalError as exc:
        return str(exc)
    state = manifest.get("before")
    if state is None:
        return None
    if not isinstance(state, dict) or not isinstance(state.get("roots"), list) or \
            not all(_is_clean_absolute(r) for r in state["roots"]):
        return "its before-state names no roots"
    roots: list[str] = state["roots"]
    return (_stray_roots(roots, prefix, own_roots) or _check_before_state(journal, state, roots)
            or _check_listings(journal, state, roots) or _check_recorded_paths(manifest, roots))


def _stray_roots(roots: list[str], prefix: Path, own_roots: Callable[[], list[str]] | None) -> str | None:
    """Why the roots outside `prefix` are not the environment's own (its site folders, user site), or None."""
    real = os.path.realpath(prefix)
    outside = [r for r in roots if not _under(r, real)]
    if not outside:
        return None
    try:
        own = own_roots() if own_roots is not None else own_roots_of(prefix)
    except Exception as exc:  # the interpreter cannot answer: the roots outside the prefix cannot be vouched for
        return (f"it names roots outside {prefix} ({', '.join(outside)}) and the environment's own cannot be "
                f"read now ({exc})")
    stray = [r for r in outside if not any(_under(r, o) for o in own)]
    if stray:
        return (f"it names roots that are not {prefix}'s own (its prefix, site folders, user site): "
                f"{', '.join(stray)}")
    return None


def _check_before_state(journal: Journal, state: dict[str, Any], roots: list[str]) -> str | None:
    """Why the before-state's folders left out and folders to remove cannot be trusted, or None."""
    if state.get("leave_out") not in (None, [str(journal.path.parent)]):
        return "its before-state leaves out other folders than the journal's"
    anchors = state.get("absent_anchors") or {}
    if not isinstance(anchors, dict) or any(r not in roots or not isinstance(a, str) or not _under(r, a)
                                            for r, a in anchors.items()):
        return "its before-state names folders to remove that are not above its roots"
    return None


def _check_listings(journal: Journal, state: dict[str, Any], roots: list[str]) -> str | None:
    """Why the before- or after-state's listing cannot be read or names paths outside the roots, or None."""
    for part, what in ((state, "its before-state"), (journal.manifest.get("after"), "its after-state")):
        if not part:
            continue
        try:
            listing = load_listing(journal, part["listing"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"cannot read {what}: {exc}"
        wrong = check_listing(listing, roots, what)
        if wrong:
            return wrong
    return None


def _check_recorded_paths(manifest: dict[str, Any], roots: list[str]) -> str | None:
    """Why a step's move or a removed file the verification records lies outside the roots, or None."""
    for record in manifest.get("steps") or []:
        moved = record.get("moved") if isinstance(record, dict) else None
        if isinstance(moved, dict) and not all(_is_clean_absolute(moved.get(k)) and
                                               any(_under(moved[k], r) for r in roots) for k in ("from", "to")):
            return f"step {record.get('step')} records a move outside the roots"
    removed = (manifest.get("verification") or {}).get("removed") or []
    if not all(_is_clean_absolute(p) and any(_under(p, r) for r in roots) for p in removed):
        return "its verification records a removed file outside the roots"
    return None


# ---------------------------------------------------------------- undoing

def undo_last(prefix: Path, root: Path | None = None, own_roots: Callable[[], list[str]] | None = None) -> UndoResult:
    """Undo the newest fix of `prefix` not yet undone, after checking its journal."""
    try:
        found = considered(candidates(prefix, root))
    except JournalError as exc:
        return UndoResult(journal="", refused=[str(exc)])
    notes = [f"passed over {c.path}: {c.verdict[len('unreadable: '):]}" for c in found
             if c.verdict.startswith("unreadable")]
    chosen = next((c for c in found if c.verdict == "undo" or c.verdict.startswith("refused")), None)
    if chosen is None:
        return UndoResult(journal="", notes=notes,
                          refused=[f"there is no fix of {prefix} to undo (no journal under the cache)"])
    if chosen.journal is None:
        return UndoResult(journal=str(chosen.path), notes=notes,
                          refused=[f"the journal of the last fix of {prefix} is not trusted: "
                                   f"{chosen.verdict[len('refused: '):]}"])
    wrong = check_journal(chosen.journal, prefix, own_roots)
    if wrong:
        return UndoResult(journal=str(chosen.path), notes=notes,
                          refused=[f"the journal of the last fix of {prefix} is not trusted: {wrong}"])
    result = undo(chosen.journal)
    result.notes = notes + result.notes
    return result


def _room(journal: Journal, plan: RestorePlan, roots: list[str]) -> list[str]:
    """Why the restore cannot fit (the space and the file-size limit it needs), or nothing."""
    from envdoctor.fix.safeio import device_of, entry_bytes, file_size_limit, free_bytes

    writes = bytes_to_write(journal, plan)
    journal_device = device_of(str(journal.path))
    need: dict[int, int] = {}
    where: dict[int, str] = {journal_device: str(journal.path)}
    largest = max(writes, key=lambda w: w[1], default=("", 0))
    for path, size in writes + [(p, 0) for p, e in plan.make if e["type"] == "dir"]:
        device = device_of(os.path.dirname(path))
        need[device] = need.get(device, 0) + -(-size // _BLOCK) * _BLOCK + (_BLOCK if size == 0 else 0)
        where.setdefault(device, os.path.dirname(path))
    for path in plan.move_out:
        device = device_of(path)
        if device != journal_device:  # copied into the journal, then removed here
            size = entry_bytes(path)
            need[journal_device] = need.get(journal_device, 0) + size
            need[device] = need.get(device, 0) - size
            largest = max(largest, (path, size), key=lambda w: w[1])
    problems = []
    for device, bytes_needed in need.items():
        if bytes_needed <= 0:
            continue
        free = free_bytes(where[device])
        if free is not None and free < bytes_needed + _SLACK:
            problems.append(f"the undo needs {_size(bytes_needed + _SLACK)} on the file system of {where[device]} and "
                            f"{_size(free)} is free: free at least {_size(bytes_needed + _SLACK - free)} there and run "
                            "`envdoctor fix --undo` again")
    limit = file_size_limit()
    if limit is not None and largest[1] > limit:
        problems.append(f"the undo writes {largest[0]} ({_size(largest[1])}) and this shell's file-size limit is "
                        f"{_size(limit)}: raise it (`ulimit -f unlimited`) and run `envdoctor fix --undo` again")
    return problems


def _size(count: int) -> str:
    return f"{count} bytes" if count < 1 << 20 else f"{count / (1 << 20):.1f} MiB ({count} bytes)"


def _stopped_hint(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "free some space there"
    if exc.errno == errno.EFBIG:
        return "raise the file-size limit (`ulimit -f unlimited`)"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "run it as a user who may write there"
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return "a folder on the way is a link or a file now (moved there since): remove it"
    return "see the error"


def _resuming_note(journal: Journal, progress: dict[str, Any]) -> str:
    """What the undo resumes: when the stopped one began, how far it got and why it stopped."""
    done = max(int(progress.get("done") or 0), _noted_progress(journal, progress.get("attempt")))
    return (f"resuming the undo begun {progress.get('started')}, which stopped after "
            f"{done} of {progress.get('total', '?')} changes"
            + (f" ({progress['reason']})" if progress.get("reason") else " (interrupted)"))


def _note_stopped(result: UndoResult, journal: Journal, record: dict[str, Any], plan: RestorePlan,
                  exc: OSError | JournalError) -> None:
    """Keep where the restore stopped (for the next undo to resume) and tell the user what to do."""
    where = getattr(exc, "filename", None)
    reason = f"{str(where) + ': ' if where else ''}{getattr(exc, 'strerror', None) or exc}"
    record.update(status="stopped", reason=reason)
    try:
        journal.save()
    except JournalError:
        pass  # the manifest on disk says "running": the next undo resumes all the same
    result.stopped = True
    hint = _stopped_hint(exc) if isinstance(exc, OSError) else "free some space for the journal"
    result.problems.append(f"the undo stopped after {record['done']} of {plan.changes} changes: {reason}; "
                           f"{hint}, then run `envdoctor fix --undo` again: it finishes from where this one stopped")


def _verify_restored(result: UndoResult, journal: Journal, state: dict[str, Any], before: Listing, now: Listing) -> None:
    """Compare the roots now with the before-state, and name the steps whose tool changed files outside them."""
    roots = state["roots"]
    result.after_hash = tree_hash(now)
    if result.after_hash == state["hash"]:
        result.restored.append(f"restored: {len(roots)} root(s) ({', '.join(roots)}) hold exactly what they held "
                               f"before the fix: {len(before)} path(s), tree hash {state['hash'][:16]} equal")
    else:
        result.problems += differences(before, now)
    for step in journal.manifest["steps"]:
        if step.get("status") in _TOUCHED and step.get("tool") in _OUTSIDE_ROOTS:
            result.problems.append(f"step {step['step']} ran `{' '.join(step.get('argv') or [])}`: {step['tool']} "
                                   "also changed files outside the folders envdoctor keeps (its package database); "
                                   f"reverse it with {step['tool']}")


def _refusals(journal: Journal, plan: RestorePlan, roots: list[str], left: Listing | None, resuming: bool) -> list[str]:
    """Why the restore must not start: files changed since the fix (`left`, what it left; None to not compare),
    or no room for it; nothing when it may."""
    if left is not None and not resuming:
        # A half-restored tree differs from what the fix left by design: only a fresh undo compares.
        conflicts = find_conflicts(left, plan.now)
        if conflicts:
            return conflicts
    short = _room(journal, plan, roots)
    if short:
        return [*short, "nothing " + ("more " if resuming else "") + "was changed"]
    return []


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
    progress = journal.manifest.get("undo") if isinstance(journal.manifest.get("undo"), dict) else None
    resuming = progress is not None and progress.get("status") in ("running", "stopped")
    if resuming:
        assert progress is not None
        result.resumed = _resuming_note(journal, progress)
    plan = plan_restore(journal, before, state, known)
    refused = _refusals(journal, plan, roots, left if check_conflicts else None, resuming)
    if refused:
        result.refused = refused
        return result
    attempt = int((progress or {}).get("attempt", 0)) + 1
    record: dict[str, Any] = {"status": "running", "started": (progress or {}).get("started") or _now(),
                              "attempt": attempt, "by": "undo" if check_conflicts else "rollback",
                              "done": 0, "total": plan.changes}
    journal.manifest["undo"] = record
    try:
        journal.save()  # from here on, an undo stopped anywhere is resumed by the next one
    except JournalError as exc:
        result.refused = [f"{exc}: nothing was changed"]
        return result

    def progressed(done: int) -> None:
        record["done"] = done
        _note_progress(journal, attempt, done)
        if done % _SAVE_EVERY == 0:
            journal.save()

    label = f"{record['by']}-{record['attempt']}"
    try:
        apply_restore(journal, plan, roots, label, progressed)
        from envdoctor.fix.state import _remove_empty_parents

        for root, anchor in (state.get("absent_anchors") or {}).items():
            _remove_empty_parents(root, anchor)
    except (OSError, JournalError) as exc:
        _note_stopped(result, journal, record, plan, exc)
        return result
    _verify_restored(result, journal, state, before, list_roots(roots, leave_out, known))
    record["status"] = "done"
    journal.manifest["status"] = "undone" if not result.problems else "undone-with-problems"
    journal.save()
    return result


_PROGRESS = "undo-progress.json"


def _note_progress(journal: Journal, attempt: int, done: int) -> None:
    """After each change: how far this attempt got, in a small file beside the manifest (said on resuming).

    Not fsync'd and not trusted for anything but that sentence: a resumed undo computes what is left from
    a fresh listing, never from this count.
    """
    import json

    from envdoctor.fix.safeio import O_CLOEXEC, O_NOFOLLOW, temp_name

    tmp = journal.path / temp_name(_PROGRESS)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        try:
            os.write(fd, json.dumps({"attempt": attempt, "done": done}).encode())
        finally:
            os.close(fd)
        os.replace(tmp, journal.path / _PROGRESS)
    except OSError:  # a full disk: the manifest's count (saved every few hundred changes) is said instead
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _noted_progress(journal: Journal, attempt: object) -> int:
    import json

    try:
        with open(journal.path / _PROGRESS, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return 0
    if not isinstance(data, dict) or data.get("attempt") != attempt or not isinstance(data.get("done"), int):
        return 0
    return int(data["done"])


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

"""The before-state of a fix: every folder its steps' tools may write, listed and kept whole.

Before the first step, each root a step may write for this interpreter (`write_roots`: the
environment's prefix or site folders, the user site and its scripts folder, the base site of a
`--system-site-packages` venv, `/usr/local` for a system Python, conda-meta) is listed path by
path (type, mode, sha256 or link target) and every file's bytes are kept in the journal's
`objects/`, once per content (a hard link where the journal shares the file system — pip, uv
and conda replace a file by unlinking it, never by writing into it — else a copy). Undo puts
that whole listing back and says "restored" only when the hash of the full trees equals the
one taken before; the inverse of every step is this state, never another tool's metadata.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envdoctor.fix.journal import Entry, Journal, boundary, describe

#: Path -> what it is (journal.describe), for every path under the roots, the roots included.
Listing = dict[str, Entry]


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _scripts_of_user_site(user_site: str) -> str | None:
    """The folder `pip install --user` puts scripts in: `<userbase>/bin` (Windows: `…\\PythonXY\\Scripts`)."""
    path = Path(user_site)
    for parent in path.parents:
        if parent.name == "lib":
            return str(parent.parent / "bin")
    return str(path.parent / "Scripts") if path.name.lower() == "site-packages" else None


def write_roots(target: Mapping[str, Any]) -> list[str]:
    """Every folder a pip, uv or conda step may write for the target's interpreter, outermost only.

    A venv, conda or pixi prefix is one root (site folders, scripts, conda-meta and all); a system
    interpreter's roots are its site folders and scripts folder, with `/usr/local`'s for a
    `<root>/usr` prefix (where Debian's and Fedora's pip install). The user site and its scripts
    are roots when the interpreter reads the user site, and so is the base interpreter's site of
    a `--system-site-packages` venv. A root that does not exist yet is one a step may create.
    """
    prefix = os.path.realpath(str(target.get("prefix") or "/"))
    kind = str(target.get("kind") or "system")
    roots: list[str] = []
    if kind in ("venv", "conda", "pixi"):
        roots.append(prefix)
    else:
        python = str(target.get("python") or "")
        short = "python" + ".".join(python.split(".")[:2]) if python.count(".") >= 1 else None
        if os.path.basename(prefix) == "usr":
            roots.append(os.path.join(prefix, "local", "bin"))
            if short:
                roots.append(os.path.join(prefix, "local", "lib", short))
        else:
            roots.append(os.path.join(prefix, "bin"))
        if target.get("purelib"):
            roots.append(str(target["purelib"]))
    roots += [str(p) for p in target.get("site_packages") or []]
    user_site = target.get("user_site")
    if user_site and target.get("user_site_enabled"):
        roots.append(str(user_site))
        scripts = _scripts_of_user_site(str(user_site))
        if scripts:
            roots.append(scripts)
    # Every root by its real path (a root that is a link, `/usr/local/bin -> /opt/bin`, is kept where its
    # files are), so the listings, the verification and undo all name one path the same way.
    absolute = [os.path.realpath(r) for r in roots]
    outermost: list[str] = []
    for root in sorted(dict.fromkeys(absolute), key=len):
        if not any(_under(root, other) for other in outermost):
            outermost.append(root)
    return sorted(outermost)


def _skipped(root: str) -> set[str]:
    """Folders under a root no step of this environment writes: a conda base's other envs and package cache."""
    if os.path.isdir(os.path.join(root, "conda-meta")):
        return {os.path.join(root, "envs"), os.path.join(root, "pkgs")}
    return set()


def walk(root: str, leave_out: Iterable[str] = ()) -> Iterator[str]:
    """The root and every path under it (not following links), folders before what they hold."""
    if not os.path.lexists(root):
        return
    yield root
    if not os.path.isdir(root) or os.path.islink(root):
        return
    skip = _skipped(root) | set(leave_out)
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if os.path.join(folder, d) not in skip)
        for name in sorted(dirs + files):
            yield os.path.join(folder, name)


#: Path -> [inode, size, mtime_ns, mode] when it was listed: a file whose key is unchanged keeps its hash.
Keys = dict[str, list[int]]
#: Listings already hashed, with the keys they were taken at (the before-state, what the fix left).
Known = Sequence[tuple[Mapping[str, Entry], Mapping[str, list[int]]]]


def list_roots(roots: Iterable[str], leave_out: Iterable[str] = (), known: Known = (),
               keys: Keys | None = None) -> Listing:
    """Every path under `roots` with its type, mode and content hash (or link target).

    A regular file whose inode, size, mtime and mode equal those of a listing in `known` keeps
    that listing's hash instead of being read again (as git's index does): pip, uv and conda
    write a changed file as a new inode, and every file undo puts back is a new one. `keys`
    receives each path's key, for the next listing to use.
    """
    listing: Listing = {}
    leave = list(leave_out)
    for root in roots:
        for path in walk(root, leave):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            key = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode]
            if keys is not None:
                keys[path] = key
            entry = None
            if stat.S_ISREG(st.st_mode):
                entry = next((hashed[path] for hashed, at in known if at.get(path) == key and path in hashed), None)
            entry = entry or describe(path)
            if entry is not None:
                listing[path] = entry
    return listing


def tree_hash(listing: Mapping[str, Entry]) -> str:
    """One hash of a whole listing: equal exactly when every path, type, mode and content is."""
    digest = hashlib.sha256()
    for path in sorted(listing):
        digest.update(os.fsencode(path) + b"\0" + json.dumps(listing[path], sort_keys=True).encode() + b"\n")
    return digest.hexdigest()


def differences(want: Mapping[str, Entry], have: Mapping[str, Entry],
                ignore: Callable[[str], bool] | None = None) -> list[str]:
    """Each path whose state differs between two listings, said in one line (sorted by path)."""
    lines = []
    for path in sorted(set(want) | set(have)):
        if ignore is not None and ignore(path):
            continue
        a, b = want.get(path), have.get(path)
        if a == b:
            continue
        if b is None:
            lines.append(f"{path} is gone")
        elif a is None:
            lines.append(f"{path} was created")
        else:
            lines.append(f"{path} differs ({_what_differs(a, b)})")
    return lines


def _what_differs(a: Entry, b: Entry) -> str:
    if a["type"] != b["type"]:
        return f"a {a['type']} before, a {b['type']} now"
    if a["type"] == "link":
        return f"link to {a['target']} before, to {b['target']} now"
    if a.get("sha256") != b.get("sha256"):
        return "other content"
    return f"mode {a.get('mode', 0):o} before, {b.get('mode', 0):o} now"


def object_path(journal: Journal, sha256: str) -> Path:
    return journal.path / "objects" / sha256[:2] / sha256


def keep_contents(journal: Journal, listing: Mapping[str, Entry]) -> int:
    """Put every file's bytes of `listing` into the journal's objects (once per content); the files kept.

    A hard link where the journal shares the file system (the same inode: its mode and owner), else a
    copy created 0600 exclusively, then given the original's mode and (where this user may) owner; two
    files of one content and different modes leave the object with only the permissions both have.
    """
    from envdoctor.fix.safeio import copy_path_private

    kept = 0
    for path, entry in listing.items():
        if entry["type"] != "file":
            continue
        where = object_path(journal, entry["sha256"])
        if where.exists():
            if stat.S_IMODE(os.lstat(where).st_mode) & ~entry["mode"] and os.lstat(where).st_nlink == 1:
                os.chmod(where, stat.S_IMODE(os.lstat(where).st_mode) & entry["mode"])
            continue
        journal.slot("objects", os.path.join(entry["sha256"][:2], entry["sha256"]))
        try:
            os.link(path, where, follow_symlinks=False)
        except OSError:  # another file system, or a file this user may not link: copy it
            tmp = where.with_name(where.name + ".part")
            try:
                os.unlink(tmp)  # what an interrupted copy left
            except FileNotFoundError:
                pass
            copy_path_private(path, str(tmp))
            os.replace(tmp, where)
        kept += 1
    return kept


def take_before(journal: Journal, roots: list[str]) -> dict[str, Any]:
    """List the roots, keep their contents, save the listing durably: the manifest's "before"."""
    leave_out = [str(journal.path.parent)]
    keys: Keys = {}
    listing = list_roots(roots, leave_out, keys=keys)
    keep_contents(journal, listing)
    journal.write_listing("before.json", listing)
    journal.write_listing("before-keys.json", keys)
    anchors = {root: _existing_ancestor(root) for root in roots if not os.path.lexists(root)}
    return {"roots": roots, "listing": "before.json", "keys": "before-keys.json", "hash": tree_hash(listing),
            "absent_anchors": anchors, "leave_out": leave_out}


def take_after(journal: Journal, state: Mapping[str, Any]) -> dict[str, Any]:
    """List what the fix left in the roots (the manifest's "after"), reusing the before-state's hashes."""
    keys: Keys = {}
    listing = list_roots(state["roots"], state.get("leave_out", []), known_listings(journal, state), keys)
    journal.write_listing("after.json", listing)
    journal.write_listing("after-keys.json", keys)
    return {"listing": "after.json", "keys": "after-keys.json", "hash": tree_hash(listing)}


def known_listings(journal: Journal, *parts: Mapping[str, Any] | None) -> list[tuple[Listing, Keys]]:
    """The listings (and their keys) of the manifest's "before" / "after", for list_roots to reuse."""
    known = []
    for part in parts:
        if not part:
            continue
        try:
            known.append((load_listing(journal, part["listing"]), load_listing(journal, part["keys"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a listing without keys (or unreadable): everything is hashed again, which is only slower
    return known  # type: ignore[return-value]  # keys files hold lists of ints


def _existing_ancestor(path: str) -> str:
    parent = os.path.dirname(path)
    while parent and not os.path.isdir(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)
    return parent


def load_listing(journal: Journal, relative: str) -> Listing:
    with open(journal.stored(relative), encoding="utf-8", errors="surrogateescape") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{relative} is not a listing")
    return data


def is_bytecode(path: str) -> bool:
    return "__pycache__" in path.split(os.sep)


def _has_ancestor_in(path: str, paths: set[str]) -> bool:
    parent = os.path.dirname(path)
    while parent != path:
        if parent in paths:
            return True
        path, parent = parent, os.path.dirname(parent)
    return False


@dataclass
class RestorePlan:
    """What makes the roots hold the before-state again: computed from a fresh listing, so an undo stopped
    anywhere computes, the next time, only what is left to do."""

    now: Listing
    move_out: list[str]  # outermost paths that are there and were not, or hold something else: into the journal
    make: list[tuple[str, Entry]]  # folders, files and links to put back, folders first, outermost first
    modes: list[tuple[str, int]]  # folders whose mode is set once what they hold is back, innermost first

    @property
    def changes(self) -> int:
        return len(self.move_out) + len(self.make) + len(self.modes)


def plan_restore(journal: Journal, before: Mapping[str, Entry], state: Mapping[str, Any],
                 known: Known = ()) -> RestorePlan:
    """Compare the roots as they are now with `before`: what has to go, what has to come back."""
    now = list_roots(state["roots"], state.get("leave_out", []), known)
    extra = {p for p in now if p not in before or before[p]["type"] != now[p]["type"]}
    replaced = {p for p, e in before.items() if e["type"] in ("file", "link") and p in now and p not in extra
                and now[p] != e}
    going = extra | replaced
    tops = sorted(p for p in going if not _has_ancestor_in(p, going))  # a new folder goes whole, once
    gone = set(tops)

    def there_after_moves(path: str) -> Entry | None:
        if path in gone or _has_ancestor_in(path, gone):
            return None
        return now.get(path)

    make = [(p, before[p]) for p in sorted(before, key=lambda p: (p.count(os.sep), p))
            if before[p]["type"] in ("dir", "file", "link") and there_after_moves(p) is None]
    modes = [(p, before[p]["mode"]) for p in sorted((p for p, e in before.items() if e["type"] == "dir"),
                                                    key=lambda p: (-p.count(os.sep), p))
             if (there_after_moves(p) or {}).get("mode") != before[p]["mode"]]
    return RestorePlan(now, tops, make, modes)


def bytes_to_write(journal: Journal, plan: RestorePlan) -> list[tuple[str, int]]:
    """(path, size) of every file the restore writes from the journal's objects."""
    sizes = []
    for path, entry in plan.make:
        if entry["type"] == "file":
            try:
                sizes.append((path, os.stat(object_path(journal, entry["sha256"])).st_size))
            except OSError:
                sizes.append((path, 0))  # a missing object is said when it is written
    return sizes


def apply_restore(journal: Journal, plan: RestorePlan, roots: list[str], label: str,
                  progress: Callable[[int], object] | None = None) -> None:
    """Make the changes of `plan`, one at a time, each complete before the next (OSError stops it).

    What goes is moved into the journal's `undone/<label>/`; a file comes back under a fresh
    exclusive name renamed over its place, from an object whose hash is checked on the way; no
    link is followed in any folder below a root. `progress(done)` is called after each change.
    """
    from envdoctor.fix.safeio import folders

    done = 0

    def step(what: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done)
        boundary(what)

    with folders(roots) as opened:
        for number, path in enumerate(plan.move_out):
            folder, name = opened.parent_of(path)
            if not folder.exists(name):
                continue
            where = journal.slot("undone", f"{label}/{number}")
            folder.move_out(name, str(where))
            opened.forget(path)
            step(f"moved {path} into the journal")
        for path, entry in plan.make:
            folder, name = opened.parent_of(path)
            if entry["type"] == "dir":
                if not folder.exists(name):
                    folder.mkdir(name, 0o700)  # its mode is set once what it holds is back
            elif entry["type"] == "link":
                folder.symlink(name, entry["target"])
            else:
                folder.write_file(name, str(object_path(journal, entry["sha256"])), entry["mode"], entry["sha256"])
            step(f"put back {path}")
        for path, mode in plan.modes:
            if path in opened.roots:
                opened.get(path).chmod_self(mode)
            else:
                folder, name = opened.parent_of(path)
                folder.chmod_folder(name, mode)
            step(f"set the mode of {path}")


def restore(journal: Journal, before: Mapping[str, Entry], state: Mapping[str, Any], label: str,
            known: Known = ()) -> Listing:
    """Make the roots hold exactly `before`; what is there and was not is moved into the journal. Now's listing."""
    roots, leave_out = state["roots"], state.get("leave_out", [])
    apply_restore(journal, plan_restore(journal, before, state, known), roots, label)
    for root, anchor in (state.get("absent_anchors") or {}).items():
        _remove_empty_parents(root, anchor)
    return list_roots(roots, leave_out, known)


def _remove_empty_parents(root: str, anchor: str) -> None:
    """Folders a step created above a root that did not exist (pip --user makes `<userbase>/lib/pythonX.Y`)."""
    folder = os.path.dirname(root)
    while _under(folder, anchor) and folder != anchor:
        try:
            os.rmdir(folder)  # only an empty one: nothing anyone put there is removed
        except OSError:
            return
        folder = os.path.dirname(folder)

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
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from envdoctor.fix.journal import Entry, Journal, describe, write_json_durably

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
                ignore: Any = None) -> list[str]:
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
    """Put every file's bytes of `listing` into the journal's objects (once per content); the bytes kept."""
    kept = 0
    for path, entry in listing.items():
        if entry["type"] != "file":
            continue
        where = object_path(journal, entry["sha256"])
        if where.exists():
            continue
        where.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, where)
        except OSError:  # another file system, or a file this user may not link: copy it
            tmp = where.with_name(where.name + ".part")
            shutil.copyfile(path, tmp, follow_symlinks=False)
            os.replace(tmp, where)
        kept += entry.get("size", 0) or 0
    return kept


def take_before(journal: Journal, roots: list[str]) -> dict[str, Any]:
    """List the roots, keep their contents, save the listing durably: the manifest's "before"."""
    leave_out = [str(journal.path.parent)]
    keys: Keys = {}
    listing = list_roots(roots, leave_out, keys=keys)
    keep_contents(journal, listing)
    write_json_durably(journal.path / "before.json", listing)
    write_json_durably(journal.path / "before-keys.json", keys)
    anchors = {root: _existing_ancestor(root) for root in roots if not os.path.lexists(root)}
    return {"roots": roots, "listing": "before.json", "keys": "before-keys.json", "hash": tree_hash(listing),
            "absent_anchors": anchors, "leave_out": leave_out}


def take_after(journal: Journal, state: Mapping[str, Any]) -> dict[str, Any]:
    """List what the fix left in the roots (the manifest's "after"), reusing the before-state's hashes."""
    keys: Keys = {}
    listing = list_roots(state["roots"], state.get("leave_out", []), known_listings(journal, state), keys)
    write_json_durably(journal.path / "after.json", listing)
    write_json_durably(journal.path / "after-keys.json", keys)
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


def restore(journal: Journal, before: Mapping[str, Entry], state: Mapping[str, Any], label: str,
            known: Known = ()) -> Listing:
    """Make the roots hold exactly `before`; what is there and was not is moved into the journal. Now's listing."""
    roots, leave_out = state["roots"], state.get("leave_out", [])
    now = list_roots(roots, leave_out, known)
    extra = {p for p in now if p not in before or before[p]["type"] != now[p]["type"]}
    tops = sorted(p for p in extra if not _has_ancestor_in(p, extra))  # a new folder goes whole, once
    for number, path in enumerate(tops):
        journal.keep(path, "undone", f"{label}/{number}")
    put_aside = len(tops)
    moved = set(tops)

    def current(path: str) -> Entry | None:
        """What is at `path` now, from the listing just taken (nothing, if it went with a moved folder)."""
        folder = path
        while folder and folder not in moved:
            parent = os.path.dirname(folder)
            if parent == folder:
                return now.get(path)
            folder = parent
        return None if folder else now.get(path)

    for path in sorted(before, key=lambda p: (p.count(os.sep), p)):
        want, have = before[path], current(path)
        if want["type"] == "dir":
            if have is None:
                os.makedirs(path, exist_ok=True)
            continue  # its mode is set once everything it holds is back
        if have == want:
            continue
        if have is not None:
            journal.keep(path, "undone", f"{label}/{put_aside}")
            put_aside += 1
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if want["type"] == "link":
            os.symlink(want["target"], path)
        elif want["type"] == "file":
            source = object_path(journal, want["sha256"])
            tmp = path + ".envdoctor-restoring"
            shutil.copyfile(source, tmp)
            os.chmod(tmp, want["mode"])
            os.replace(tmp, path)
    for path in sorted((p for p, e in before.items() if e["type"] == "dir"), key=lambda p: -p.count(os.sep)):
        if stat.S_IMODE(os.lstat(path).st_mode) != before[path]["mode"]:
            os.chmod(path, before[path]["mode"])
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

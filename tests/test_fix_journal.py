"""The journal and undo on real files: file moves out and back, refusals, which journal undo takes.

Fast tests on a plain venv-shaped folder (no interpreter needed for file
moves); the package-step round trips are in test_fix_roundtrip.py.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from envdoctor.fix.execute import Executor
from envdoctor.fix.journal import Journal, tree
from envdoctor.fix.plan import make_plan
from envdoctor.fix.undo import latest, undo_last
from envdoctor.model import Finding, FixStep, Report, Severity
from fixenvs import tree_digest


@pytest.fixture()
def journal_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "envdoctor" / "journal"


def venv_folder(root: Path) -> tuple[Path, Path]:
    prefix = root / "env"
    site = prefix / "lib" / "python3.11" / "site-packages"
    stray = site / "numpy-1.26.4.dist-info"
    stray.mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (stray / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 1.26.4\n")
    (stray / "RECORD").write_text("numpy/__init__.py,,\n")
    (stray / "INSTALLER").write_bytes(b"pip\n")
    (stray / "INSTALLER").chmod(0o600)
    (stray / "link").symlink_to("METADATA")
    return prefix, stray


def run_moves(prefix: Path, *moves: tuple[str, str]) -> Journal:
    finding = Finding(rule="PKG002", name="duplicate-distribution", severity=Severity.ERROR, message="doubled",
                      fix_steps=tuple(FixStep.file_move(a, b) for a, b in moves))
    report = Report(tool={}, generated_at="", host={}, target={"prefix": str(prefix), "kind": "venv"}, facts={},
                    findings=[finding])
    journal = Journal.create({"prefix": str(prefix), "kind": "venv"})
    results = Executor(make_plan(report, {}), journal).run()
    assert [r.status for r in results] == ["done"] * len(moves), results
    return journal


def test_a_move_is_journalled_with_hashes_and_undone_exactly(tmp_path: Path, journal_root: Path) -> None:
    prefix, stray = venv_folder(tmp_path)
    pristine = tree_digest(prefix)
    journal = run_moves(prefix, (str(stray), str(stray) + ".envdoctor-aside"))
    assert not stray.exists()
    manifest = json.loads((journal.path / "manifest.json").read_text())
    assert journal.path.parent == journal_root and manifest["status"] == "finished"
    moved = manifest["steps"][0]["moved"]
    assert moved["tree"]["INSTALLER"] == {"type": "file", "mode": 0o600,
                                          "sha256": hashlib.sha256(b"pip\n").hexdigest()}
    assert moved["tree"]["link"] == {"type": "link", "target": "METADATA"}
    undone = undo_last(prefix)
    assert undone.exit_code == 0, undone
    assert tree_digest(prefix) == pristine
    assert json.loads((journal.path / "manifest.json").read_text())["status"] == "undone"
    assert undo_last(prefix).refused == [f"there is no fix of {prefix} to undo (no journal under the cache)"]


def test_undo_refuses_to_overwrite_what_the_user_put_there_since(tmp_path: Path, journal_root: Path) -> None:
    prefix, stray = venv_folder(tmp_path)
    run_moves(prefix, (str(stray), str(stray) + ".envdoctor-aside"))
    stray.mkdir()
    (stray / "METADATA").write_text("Name: numpy\nVersion: 9\n")  # the user reinstalled something there
    before = tree_digest(prefix)
    undone = undo_last(prefix)
    assert undone.exit_code == 2
    assert f"{stray} was created since" in undone.refused
    assert tree_digest(prefix) == before  # refused before changing anything


def test_undo_takes_the_newest_fix_that_changed_something(tmp_path: Path, journal_root: Path) -> None:
    prefix, stray = venv_folder(tmp_path)
    first = run_moves(prefix, (str(stray), str(stray) + ".envdoctor-aside"))
    nothing = Journal.create({"prefix": str(prefix), "kind": "venv"})
    report = Report(tool={}, generated_at="", host={}, target={"prefix": str(prefix), "kind": "venv"}, facts={},
                    findings=[Finding(rule="PKG002", name="d", severity=Severity.ERROR, message="m",
                                      fix_steps=(FixStep.file_move(str(prefix / "absent"), str(prefix / "x")),))])
    assert [r.status for r in Executor(make_plan(report, {}), nothing).run()] == ["skipped"]
    assert nothing.manifest["status"] == "nothing-changed"
    found = latest(prefix)
    assert found is not None and found.path == first.path


def test_a_half_written_manifest_never_replaces_the_saved_one(tmp_path: Path, journal_root: Path) -> None:
    journal = Journal.create({"prefix": str(tmp_path), "kind": "venv"})
    journal.manifest["steps"] = [{"step": 1, "status": "planned"}]
    journal.save()
    assert not list(journal.path.glob("*.tmp"))
    assert json.loads((journal.path / "manifest.json").read_text())["steps"] == [{"step": 1, "status": "planned"}]


def test_tree_lists_files_links_and_folders(tmp_path: Path) -> None:
    prefix, stray = venv_folder(tmp_path)
    listing = tree(stray)
    assert listing["."]["type"] == "dir" and listing["link"] == {"type": "link", "target": "METADATA"}
    assert set(listing) == {".", "METADATA", "RECORD", "INSTALLER", "link"}
    assert tree(tmp_path / "absent") == {}


def test_undo_refuses_when_a_file_was_added_inside_a_folder_the_fix_moved(tmp_path: Path, journal_root: Path) -> None:
    prefix, stray = venv_folder(tmp_path)
    aside = Path(str(stray) + ".envdoctor-aside")
    run_moves(prefix, (str(stray), str(aside)))
    (aside / "notes.txt").write_text("mine\n")  # moving the folder back would carry this off
    before = tree_digest(prefix)
    undone = undo_last(prefix)
    assert undone.refused == [f"{aside}/notes.txt was created since"]
    assert tree_digest(prefix) == before


def test_bytecode_written_on_import_since_the_fix_is_no_conflict(tmp_path: Path, journal_root: Path) -> None:
    prefix, stray = venv_folder(tmp_path)
    pristine = tree_digest(prefix)
    aside = Path(str(stray) + ".envdoctor-aside")
    journal = run_moves(prefix, (str(stray), str(aside)))
    (aside / "__pycache__").mkdir()
    (aside / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\x00")
    undone = undo_last(prefix)
    assert undone.exit_code == 0, undone
    assert tree_digest(prefix) == pristine  # byte for byte: the bytecode goes into the journal, not back
    assert list((journal.path / "undone").rglob("x.cpython-311.pyc"))


def test_undo_of_one_prefix_leaves_another_prefixs_newer_fix_alone(tmp_path: Path, journal_root: Path) -> None:
    prefix_a, stray_a = venv_folder(tmp_path / "a")
    prefix_b, stray_b = venv_folder(tmp_path / "b")
    run_moves(prefix_a, (str(stray_a), str(stray_a) + ".envdoctor-aside"))
    run_moves(prefix_b, (str(stray_b), str(stray_b) + ".envdoctor-aside"))
    assert undo_last(prefix=prefix_a).exit_code == 0
    assert stray_a.is_dir() and not stray_b.exists()
    assert undo_last(prefix=prefix_a).refused == [f"there is no fix of {prefix_a} to undo (no journal under the cache)"]
    assert undo_last(prefix_b).exit_code == 0 and stray_b.is_dir()


def test_a_corrupt_or_older_journal_never_blocks_another_environments_undo(
        tmp_path: Path, journal_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A newer journal that cannot be read, and one of an older journal_version of another environment: the undo
    of this prefix goes on, names the unreadable one it passed over, and prints no traceback."""
    import argparse

    from envdoctor.fix import command

    prefix, stray = venv_folder(tmp_path)
    pristine = tree_digest(prefix)
    run_moves(prefix, (str(stray), str(stray) + ".envdoctor-aside"))
    (journal_root / "20990101T000000.000000Z").mkdir(parents=True)
    (journal_root / "20990101T000000.000000Z" / "manifest.json").write_text('{"journal_version": 1, "steps": [')
    (journal_root / "20990102T000000.000000Z").mkdir(parents=True)
    (journal_root / "20990102T000000.000000Z" / "manifest.json").write_text(json.dumps(
        {"journal_version": 1, "status": "finished", "target": {"prefix": str(tmp_path / "other")}}))
    unreadable = journal_root / "20990103T000000.000000Z"
    unreadable.mkdir()
    (unreadable / "manifest.json").write_text("{}")
    (unreadable / "manifest.json").chmod(0)  # root reads it all the same: then it is just not a journal
    args = argparse.Namespace(undo=True, prefix=str(prefix), env_name=None, format="text", list_journals=True)
    assert command.run(args) == 0
    listed = capsys.readouterr().out
    assert "20990102T000000.000000Z" not in listed  # another environment's is not considered
    assert "20990101T000000.000000Z  ?  unreadable: cannot read the fix journal" in listed, listed
    assert f"would take {journal_root}" in listed
    assert command.run(argparse.Namespace(**{**vars(args), "list_journals": False})) == 0
    out = capsys.readouterr().out
    assert "note: passed over" in out and "20990101T000000.000000Z" in out and "restored:" in out, out
    assert tree_digest(prefix) == pristine


def test_plan_text_escapes_control_characters_from_metadata(tmp_path: Path) -> None:
    from envdoctor.fix.render import plan_text

    prefix, stray = venv_folder(tmp_path)
    evil = "numpy\x1b]0;owned\x07\x1b[2J is installed 2 times"
    finding = Finding(rule="PKG002", name="d", severity=Severity.ERROR, message=evil,
                      fix_steps=(FixStep.file_move(str(stray), str(stray) + "\x1b[31m"),))
    report = Report(tool={}, generated_at="", host={}, target={"prefix": str(prefix), "kind": "venv"}, facts={},
                    findings=[finding])
    text = "\n".join(plan_text(make_plan(report, {})))
    assert "\x1b" not in text and "\x07" not in text
    assert "numpy?]0;owned??[2J is installed 2 times" in text


def test_the_listing_of_a_conda_base_leaves_out_other_envs_and_the_package_cache(tmp_path: Path) -> None:
    from envdoctor.fix.state import list_roots

    base = tmp_path / "miniforge"
    for folder in ("conda-meta", "envs/train/lib", "pkgs/numpy-1.26.4", "lib/python3.11/site-packages"):
        (base / folder).mkdir(parents=True)
    listed = {os.path.relpath(p, base) for p in list_roots([str(base)])}
    assert listed == {".", "conda-meta", "lib", "lib/python3.11", "lib/python3.11/site-packages"}
    listed_env = {os.path.relpath(p, base / "envs" / "train") for p in list_roots([str(base / "envs" / "train")])}
    assert listed_env == {".", "lib"}


def test_a_disk_that_fills_while_the_before_state_is_kept_changes_nothing(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal on a real 256 kB tmpfs (another file system: every kept file is a copy) and a prefix holding
    more than that: keeping the before-state runs out of space, and no step runs."""
    from envdoctor.fix.journal import JournalError
    from fixenvs import small_tmpfs

    prefix, stray = venv_folder(tmp_path)
    (prefix / "big.bin").write_bytes(os.urandom(600_000))
    pristine = tree_digest(prefix)
    with small_tmpfs(tmp_path / "small", 256 << 10) as small:
        monkeypatch.setenv("XDG_CACHE_HOME", str(small))
        finding = Finding(rule="PKG002", name="duplicate-distribution", severity=Severity.ERROR, message="doubled",
                          fix_steps=(FixStep.file_move(str(stray), str(stray) + ".envdoctor-aside"),))
        report = Report(tool={}, generated_at="", host={}, target={"prefix": str(prefix), "kind": "venv"}, facts={},
                        findings=[finding])
        journal = Journal.create({"prefix": str(prefix), "kind": "venv"})
        with pytest.raises(JournalError, match="No space left on device; nothing was changed"):
            Executor(make_plan(report, {}), journal).run()
        assert tree_digest(prefix) == pristine
        assert list((journal.path / "objects").rglob("*"))  # it failed part-way through keeping the copies
        assert latest(prefix) is None  # a fix that changed nothing is not undone


def test_a_disk_that_fills_after_a_step_ran_is_still_undone_exactly(tmp_path: Path, journal_root: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from envdoctor.fix.journal import JournalError

    prefix, stray = venv_folder(tmp_path)
    pristine = tree_digest(prefix)
    real_save = Journal.save

    def full_after_a_step(self: Journal) -> None:
        if any(s.get("status") == "done" for s in self.manifest.get("steps") or []):
            raise JournalError(f"cannot write {self.path}/manifest.json: No space left on device")
        real_save(self)

    monkeypatch.setattr(Journal, "save", full_after_a_step)
    finding = Finding(rule="PKG002", name="duplicate-distribution", severity=Severity.ERROR, message="doubled",
                      fix_steps=(FixStep.file_move(str(stray), str(stray) + ".envdoctor-aside"),))
    report = Report(tool={}, generated_at="", host={}, target={"prefix": str(prefix), "kind": "venv"}, facts={},
                    findings=[finding])
    with pytest.raises(JournalError):
        Executor(make_plan(report, {}), Journal.create({"prefix": str(prefix), "kind": "venv"})).run()
    assert not stray.exists()  # the move happened; the manifest on disk still says it was running
    monkeypatch.setattr(Journal, "save", real_save)
    undone = undo_last(prefix)
    assert undone.exit_code == 0, undone
    assert tree_digest(prefix) == pristine


def test_the_roots_a_fix_keeps_for_each_kind_of_target(tmp_path: Path) -> None:
    from envdoctor.fix.state import write_roots

    venv = tmp_path / "venv"
    user_site = tmp_path / "home" / ".local" / "lib" / "python3.11" / "site-packages"
    base = tmp_path / "root" / "usr" / "lib" / "python3" / "dist-packages"
    assert write_roots({"prefix": str(venv), "kind": "venv", "site_packages": [str(venv / "lib/python3.11/site-packages")],
                        "user_site": str(user_site), "user_site_enabled": False}) == [str(venv)]
    # A --system-site-packages venv reads its base's site (and the user site): those are roots too.
    assert write_roots({"prefix": str(venv), "kind": "venv", "user_site": str(user_site), "user_site_enabled": True,
                        "site_packages": [str(venv / "lib/python3.11/site-packages"), str(user_site), str(base)]}) == \
        sorted([str(venv), str(user_site), str(tmp_path / "home" / ".local" / "bin"), str(base)])
    usr = tmp_path / "root" / "usr"
    local = usr / "local"
    (tmp_path / "opt-bin").mkdir()
    local.mkdir(parents=True)
    (local / "bin").symlink_to(tmp_path / "opt-bin")  # a root that is a link is kept where its files are
    assert write_roots({"prefix": str(usr), "kind": "system", "python": "3.11.2",
                        "purelib": str(local / "lib/python3.11/dist-packages"),
                        "site_packages": [str(local / "lib/python3.11/dist-packages"), str(base)],
                        "user_site": str(user_site), "user_site_enabled": False}) == \
        sorted([str(tmp_path / "opt-bin"), str(local / "lib" / "python3.11"), str(base)])


# ---------------------------------------------------------------- attacks on undo and the journal, for real

def undo_args(prefix: Path | None, **more: object) -> object:
    import argparse

    return argparse.Namespace(**{"undo": True, "prefix": str(prefix) if prefix else None, "env_name": None,
                                 "format": "text", "list_journals": False, **more})


def test_a_planted_restoring_link_is_never_written_through(tmp_path: Path, journal_root: Path) -> None:
    """`<file>.envdoctor-restoring` -> a 0600 file outside the prefix, there before the fix: the undo and the
    rollback write beside each file under a fresh exclusive name, so the outside file keeps its bytes and mode."""
    from envdoctor.fix.undo import undo

    prefix, stray = venv_folder(tmp_path)
    outside = tmp_path / "outside-secret"
    outside.write_bytes(b"the user's own\n")
    outside.chmod(0o600)
    (stray / "METADATA.envdoctor-restoring").symlink_to(outside)
    (stray / "RECORD.envdoctor-restoring").symlink_to(outside)
    pristine = tree_digest(prefix)
    for how in ("undo", "rollback"):
        journal = run_moves(prefix, (str(stray), str(stray) + ".envdoctor-aside"))
        done = undo_last(prefix) if how == "undo" else undo(journal, check_conflicts=False)
        assert done.exit_code == 0, done
        assert outside.read_bytes() == b"the user's own\n" and oct(outside.stat().st_mode & 0o777) == "0o600", how
        assert tree_digest(prefix) == pristine, how  # the planted links are part of the before-state: back as links


def test_a_planted_lock_link_is_refused_and_its_target_untouched(tmp_path: Path, journal_root: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from envdoctor.fix import command

    prefix, stray = venv_folder(tmp_path)
    run_moves(prefix, (str(stray), str(stray) + ".envdoctor-aside"))
    target = tmp_path / "precious"
    target.write_text("root's data\n")
    (journal_root / "fix.lock").unlink(missing_ok=True)
    (journal_root / "fix.lock").symlink_to(target)
    assert command.run(undo_args(prefix)) == 2
    err = capsys.readouterr().err
    assert "cannot open the fix lock" in err and "symbolic link" in err, err
    assert target.read_text() == "root's data\n" and not stray.exists()  # nothing undone, nothing truncated
    (journal_root / "fix.lock").unlink()
    os.link(target, journal_root / "fix.lock")  # a second name for someone's file
    assert command.run(undo_args(prefix)) == 2
    assert "not a plain file of yours with one name" in capsys.readouterr().err
    assert target.read_text() == "root's data\n"


def test_the_journal_folders_are_private_and_another_users_is_refused(tmp_path: Path, journal_root: Path) -> None:
    import stat

    from envdoctor.fix.journal import JournalError

    prefix, stray = venv_folder(tmp_path)
    journal = run_moves(prefix, (str(stray), str(stray) + ".envdoctor-aside"))
    for folder in (journal_root.parent, journal_root, journal.path, journal.path / "objects"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    if os.geteuid() != 0:
        pytest.skip("handing the folder to another user needs root")
    os.chown(journal_root, 4321, 4321)
    with pytest.raises(JournalError, match="belongs to uid 4321, not to you"):
        Journal.create({"prefix": str(prefix), "kind": "venv"})
    assert undo_last(prefix).refused  # neither undone from it nor written into


def test_undo_without_prefix_is_the_running_environments_never_another_ones(
        tmp_path: Path, journal_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from envdoctor.fix import command

    prefix, stray = venv_folder(tmp_path)
    run_moves(prefix, (str(stray), str(stray) + ".envdoctor-aside"))
    assert command.run(undo_args(None)) == 2
    assert f"there is no fix of {sys.prefix} to undo" in capsys.readouterr().out
    assert not stray.exists()  # the other environment's fix stays
    assert command.run(undo_args(None, list_journals=True)) == 0
    listed = capsys.readouterr().out
    assert f"journals of {sys.prefix}" in listed and "would find nothing to undo" in listed and str(prefix) not in listed
    assert command.run(undo_args(prefix)) == 0 and stray.is_dir()


def _edit(journal: Journal, change: object, *, rehash: bool) -> None:
    """Change a journal as someone with access to it would: the manifest (and its hash, if `rehash`)."""
    from envdoctor.fix.journal import manifest_hash

    manifest = json.loads((journal.path / "manifest.json").read_text())
    change(manifest)  # type: ignore[operator]
    if rehash:
        manifest["manifest_sha256"] = manifest_hash(manifest)
    (journal.path / "manifest.json").write_text(json.dumps(manifest))


def _edit_listing(journal: Journal, change: object) -> None:
    """Change before.json and record its new sha256 in a manifest whose own hash is recomputed too."""
    listing = json.loads((journal.path / "before.json").read_text())
    change(listing)  # type: ignore[operator]
    (journal.path / "before.json").write_text(json.dumps(listing))
    digest = hashlib.sha256((journal.path / "before.json").read_bytes()).hexdigest()
    _edit(journal, lambda m: m["files"].__setitem__("before.json", digest), rehash=True)


@pytest.mark.parametrize("case", ["manifest", "listing-unrecorded", "outside-path", "dangling-path", "foreign-root",
                                  "move-outside"])
def test_an_edited_journal_is_refused_with_the_reason_and_nothing_changes(tmp_path: Path, journal_root: Path,
                                                                          case: str) -> None:
    prefix, stray = venv_folder(tmp_path)
    journal = run_moves(prefix, (str(stray), str(stray) + ".envdoctor-aside"))
    outside = str(tmp_path / "elsewhere" / "planted.txt")
    file_entry = {"type": "file", "mode": 0o644, "sha256": hashlib.sha256(b"pip\n").hexdigest()}
    if case == "manifest":
        _edit(journal, lambda m: m["before"].__setitem__("roots", ["/"]), rehash=False)
        reason = "manifest.json was changed since envdoctor wrote it"
    elif case == "listing-unrecorded":
        listing = json.loads((journal.path / "before.json").read_text())
        listing[str(prefix / "planted.txt")] = file_entry
        (journal.path / "before.json").write_text(json.dumps(listing))
        reason = "before.json was changed since envdoctor wrote it"
    elif case == "outside-path":
        _edit_listing(journal, lambda li: li.__setitem__(outside, file_entry))
        reason = f"its before-state names '{outside}', outside the roots the fix recorded"
    elif case == "dangling-path":
        _edit_listing(journal, lambda li: li.__setitem__(str(prefix / "nowhere" / "x"), file_entry))
        reason = f"its before-state names {prefix}/nowhere/x but not a folder holding it"
    elif case == "foreign-root":
        (tmp_path / "elsewhere").mkdir()
        _edit(journal, lambda m: m["before"].__setitem__("roots", [str(prefix), str(tmp_path / "elsewhere")]),
              rehash=True)
        reason = f"it names roots that are not {prefix}'s own"
    else:
        _edit(journal, lambda m: m["steps"][0]["moved"].__setitem__("to", outside), rehash=True)
        reason = "step 1 records a move outside the roots"
    state = tree_digest(tmp_path)
    undone = undo_last(prefix, own_roots=lambda: [str(prefix)])
    assert undone.exit_code == 2 and len(undone.refused) == 1, undone
    assert "is not trusted" in undone.refused[0] and reason in undone.refused[0], undone.refused
    assert tree_digest(tmp_path) == state and not os.path.exists(outside)

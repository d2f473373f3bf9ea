"""Hostile inputs to the spawn guard: nothing blocks, nothing blinds the other scripts, nothing crashes.

Every read is bounded by type (regular files only), size and time: a FIFO
given as a script or named *.py inside a folder, /dev/zero or /dev/urandom,
a file over the size limit, a coding cookie naming a codec that is no text
encoding — each becomes SPW004 for that one file, while SPW001 in every other
script still fires and the exit code reflects it. File names that are not
UTF-8 and symbolic-link loops inside a folder are read or skipped, never a
traceback. Each case runs the real command line in a subprocess with a time
limit, so a hang fails the test instead of hanging it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

UNGUARDED = ("from torch.utils.data import DataLoader\n"
             "for batch in DataLoader(range(8), num_workers=2):\n"
             "    pass\n")
LIMIT_S = 60


def report(*args: str | bytes, cwd: Path) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "envdoctor", "report", "--no-loader",
                           "--select", "SPW001,SPW004", "--", *args],
                          capture_output=True, timeout=LIMIT_S, cwd=cwd)
    stderr = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr, stderr
    return proc.returncode, json.loads(proc.stdout), stderr


def by_file(data: dict) -> dict[str, list[tuple[str, str]]]:
    found: dict[str, list[tuple[str, str]]] = {}
    for finding in data["findings"]:
        name = os.path.basename(finding["location"]["path"])
        found.setdefault(name, []).append((finding["rule"], finding["evidence"].get("error", "")))
    return found


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(UNGUARDED, encoding="utf-8")
    return path


def test_a_fifo_given_as_a_script_and_one_named_py_in_a_folder_are_spw004_not_a_hang(tmp_path: Path, good: Path):
    os.mkfifo(tmp_path / "given.py")
    folder = tmp_path / "project"
    folder.mkdir()
    os.mkfifo(folder / "pipe.py")
    (folder / "loop.py").write_text(UNGUARDED, encoding="utf-8")
    code, data, _ = report(str(tmp_path / "given.py"), str(folder), str(good), cwd=tmp_path)
    found = by_file(data)
    assert code == 1
    assert found["given.py"] == [("SPW004", "not a regular file (a FIFO); only regular files are read")]
    assert found["pipe.py"] == [("SPW004", "not a regular file (a FIFO); only regular files are read")]
    assert [r for r, _ in found["loop.py"]] == ["SPW001"] and [r for r, _ in found["train.py"]] == ["SPW001"]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_as_a_script_is_spw004_and_read_not_at_all(device: str, tmp_path: Path, good: Path):
    code, data, _ = report(device, str(good), cwd=tmp_path)
    found = by_file(data)
    assert found[os.path.basename(device)] == [("SPW004", "not a regular file (a device); only regular files are read")]
    assert [r for r, _ in found["train.py"]] == ["SPW001"] and code == 1


@pytest.mark.parametrize("codec", ["rot13", "base64", "punycode", "no-such-codec", "hex", "zlib"])
def test_a_foreign_coding_cookie_is_spw004_for_that_file_and_spw001_elsewhere_still_fires(codec: str, tmp_path: Path,
                                                                                         good: Path):
    odd = tmp_path / "odd.py"
    odd.write_text(f"# -*- coding: {codec} -*-\nvzcbeg bf\n", encoding="ascii")
    code, data, _ = report(str(odd), str(good), cwd=tmp_path)
    found = by_file(data)
    assert [r for r, _ in found["odd.py"]] == ["SPW004"]
    assert [r for r, _ in found["train.py"]] == ["SPW001"]
    assert code == 1  # the pre-commit hook still fails on the unguarded script
    assert data["errors"] == []


def test_a_file_over_the_size_limit_is_spw004_without_being_read(tmp_path: Path, good: Path):
    big = tmp_path / "big.py"
    with open(big, "wb") as fh:  # sparse: costs no disk
        fh.truncate(17 * 1024 * 1024)
    code, data, _ = report(str(big), str(good), cwd=tmp_path)
    [(rule, error)] = by_file(data)["big.py"]
    assert rule == "SPW004" and "more than the 16777216 bytes" in error and code == 1


def test_a_file_name_that_is_not_utf8_and_symlink_loops_in_a_folder(tmp_path: Path):
    folder = tmp_path / "src"
    folder.mkdir()
    odd_name = os.path.join(os.fsencode(folder), b"tr\xffin.py")
    with open(odd_name, "wb") as fh:
        fh.write(UNGUARDED.encode())
    os.symlink(".", folder / "again")          # a folder loop: not followed
    os.symlink("self.py", folder / "self.py")  # a file loop: unreadable
    code, data, _ = report(str(folder), cwd=tmp_path)
    rules = sorted((f["rule"], os.path.basename(f["location"]["path"])) for f in data["findings"])
    assert rules == [("SPW001", "tr\udcffin.py"), ("SPW004", "self.py")]
    assert code == 1


def test_a_project_module_that_is_a_fifo_is_spw004_for_it_and_the_script_is_still_read(tmp_path: Path):
    os.mkfifo(tmp_path / "helpers.py")
    script = tmp_path / "run.py"
    script.write_text("import helpers\n" + UNGUARDED, encoding="utf-8")
    code, data, _ = report(str(script), cwd=tmp_path)
    found = by_file(data)
    assert [r for r, _ in found["run.py"]] == ["SPW001"]
    assert found["helpers.py"][0][0] == "SPW004" and "FIFO" in data["findings"][-1]["evidence"]["error"]
    assert code == 1

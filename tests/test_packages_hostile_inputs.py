"""Hostile inputs to the package checks: each is bounded, named, and blinds nothing else.

One test per input. Each asserts: the run ends within the limits the code enforces
on what it waits for, with slack derived from them (tests/bounds.py), exit code 0
or 1 (2 only for a refused argument, with one line), the bad input named in
the report, the other findings still present, and no file of the target
changed. Every input is built here from real files (a venv, a bare prefix,
conda-meta records written as the hostile data they are).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bounds import static_check_s
from hostile.build import conda_record, dist_info, metadata
from support import findings, json_report, run_cli, run_envdoctor

SITE = "lib/python3.11/site-packages"


def digest(root: Path) -> dict[str, str]:
    """Every file, link and folder under `root` with its content hash (FIFOs by name only)."""
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if os.path.islink(path):
                out[path] = "link:" + os.readlink(path)
            elif os.path.isfile(path) and st.st_size < (64 << 20):
                out[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            else:
                out[path] = f"mode:{st.st_mode:o} size:{st.st_size}"
    return out


def run(prefix: Path, tmp: Path, *args: str) -> tuple[dict[str, Any], float]:
    before = digest(prefix)
    env = {**os.environ, "PYTHONUSERBASE": str(tmp / "no-user-base"), "PYTHONPATH": ""}
    bound = static_check_s(deep="--deep" in args)
    start = time.monotonic()
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "PKG", "CHN", "--prefix", str(prefix),
                         *args, env=env, cwd=str(tmp), timeout=2 * bound)
    elapsed = time.monotonic() - start
    assert elapsed < bound, f"took {elapsed:.1f} s, more than the {bound:.0f} s the enforced limits allow"
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert digest(prefix) == before  # nothing in the target changed
    return json_report(proc), elapsed


def bare_prefix(tmp: Path) -> Path:
    """A prefix without an interpreter (its lib/python3.11/site-packages is read) with one known problem."""
    prefix = tmp / "env"
    site = prefix / SITE
    dist_info(site, "needy", {"METADATA": metadata("needy", "1.0", "Requires-Dist: absent-dep")})
    return prefix


def still_checked(report: dict[str, Any]) -> None:
    """The rest of the environment was still checked: the known PKG003 is there."""
    assert [f["evidence"]["dependency"] for f in findings(report, "PKG003")] == ["absent-dep"]


def test_direct_url_with_wrong_types_is_pkg009_for_that_file(tmp_path: Path) -> None:
    prefix = bare_prefix(tmp_path)
    site = prefix / SITE
    listy = dist_info(site, "listy", {"direct_url.json": json.dumps({"url": "file:///src", "dir_info": [1]}).encode()})
    nested: Any = "file:///deep"
    for _ in range(900):
        nested = {"url": nested}
    deep = dist_info(site, "deepurl", {"direct_url.json": json.dumps({"url": nested}).encode()})
    report, _ = run(prefix, tmp_path)
    bad = {f["evidence"]["path"]: f["evidence"]["reason"] for f in findings(report, "PKG009")}
    assert bad == {str(listy / "direct_url.json"): "field 'dir_info' is list, expected an object",
                   str(deep / "direct_url.json"): "field 'url' is dict, expected a string"}
    names = {d["name"] for d in report["facts"]["packages"]["distributions"]}
    assert {"listy", "deepurl", "needy"} <= names  # the distributions themselves still count
    still_checked(report)


def test_interpreter_with_a_wrong_self_report_is_refused_in_one_line(tmp_path: Path) -> None:
    prefix = bare_prefix(tmp_path)
    python = prefix / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho \'{"python": 3, "sys_path": "not a list"}\'\n')
    python.chmod(0o755)
    before = digest(prefix)
    env = {**os.environ, "PYTHONUSERBASE": str(tmp_path / "no-user-base")}
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "PKG", "--prefix", str(prefix),
                         env=env, cwd=str(tmp_path), timeout=static_check_s())
    # No false all-clear: the run stops with one line naming the interpreter and what is wrong.
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert str(python) in line and "field 'python' is int, expected str" in line
    assert digest(prefix) == before


def test_records_that_point_outside_the_prefix_are_never_read(tmp_path: Path) -> None:
    prefix = bare_prefix(tmp_path)
    (prefix / "lib" / "ok.txt").write_bytes(b"ok")
    secret = tmp_path / "outside-secret"
    secret.write_bytes(b"secret")
    record = conda_record(prefix, "sneaky", [
        {"_path": "../../etc/shadow", "path_type": "hardlink", "sha256": "0" * 64, "size_in_bytes": 1},
        {"_path": "/etc/passwd", "path_type": "hardlink", "sha256": "0" * 64, "size_in_bytes": 1},
        {"_path": os.path.relpath(secret, prefix), "path_type": "hardlink", "sha256": "0" * 64, "size_in_bytes": 6},
        {"_path": "lib/ok.txt", "path_type": "hardlink", "sha256": hashlib.sha256(b"ok").hexdigest(),
         "size_in_bytes": 2}])
    report, _ = run(prefix, tmp_path, "--deep")
    [bad] = [f for f in findings(report, "PKG009") if f["evidence"]["kind"] == "conda-meta-paths"]
    assert bad["evidence"]["path"] == str(record) and "'../../etc/shadow'" in bad["evidence"]["reason"]
    [facts] = report["facts"]["packages"]["conda"]["records"]
    assert facts["outside"] == ["../../etc/shadow", "/etc/passwd", os.path.relpath(secret, prefix)]
    # Nothing about those files is told: not missing, not changed, no hash.
    assert (facts["missing_count"], facts["changed_count"], facts["checked_files"]) == (0, 0, 1)
    assert findings(report, "PKG005") == []
    assert "secret" not in json.dumps(report["findings"]).replace("outside-secret", "")
    still_checked(report)


def test_deep_hashing_of_a_huge_sparse_file_is_bounded(tmp_path: Path) -> None:
    prefix = bare_prefix(tmp_path)
    huge = prefix / "lib" / "huge.bin"
    huge.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(huge, "wb") as handle:
            handle.truncate(1 << 40)  # 1 TiB, sparse
    except OSError as exc:
        pytest.skip(f"this file system cannot hold a 1 TiB sparse file: {exc}")
    conda_record(prefix, "hugepkg", [{"_path": "lib/huge.bin", "path_type": "hardlink", "sha256": "ab" * 32,
                                      "size_in_bytes": 1 << 40}])
    report, elapsed = run(prefix, tmp_path, "--deep")
    [record] = report["facts"]["packages"]["conda"]["records"]
    [skipped] = record["not_hashed"]
    assert skipped["path"] == "lib/huge.bin" and skipped["reason"].startswith(f"{1 << 40} bytes, more than the")
    still_checked(report)


def _editable(site: Path, finder_source: bytes) -> Path:
    finder = "__editable___big_1_0_finder.py"
    (site / finder).write_bytes(finder_source)
    (site / "__editable__.big-1.0.pth").write_bytes(b"import __editable___big_1_0_finder\n")
    return dist_info(site, "big", {
        "direct_url.json": json.dumps({"url": "file:///src/big", "dir_info": {"editable": True}}).encode(),
        "RECORD": f"{finder},,\n__editable__.big-1.0.pth,,\nbig-1.0.dist-info/METADATA,,\n".encode()})


def test_a_420_kb_editable_finder_is_parsed_in_bounded_time(tmp_path: Path) -> None:
    prefix = bare_prefix(tmp_path)
    # The shape that made a lazy `MAPPING = {.*?}` regex quadratic: many openings, no ending.
    source = b"".join(b"MAPPING = {'k%d': '/p' " % i + b"}" * 3 + b"x\n" for i in range(15000))
    assert len(source) > 420_000
    _editable(prefix / SITE, source)
    report, elapsed = run(prefix, tmp_path)
    big = [d for d in report["facts"]["packages"]["distributions"] if d["name"] == "big"]
    assert big and big[0]["direct_url"] == {"url": "file:///src/big", "editable": True}
    still_checked(report)


def test_requirements_that_include_themselves_are_read_once(tmp_path: Path) -> None:
    prefix = bare_prefix(tmp_path)
    bomb = tmp_path / "bomb.txt"
    bomb.write_text("\n".join(["-r bomb.txt"] * 50 + ["wantedpkg==1.0"]) + "\n")
    report, elapsed = run(prefix, tmp_path, "--against", str(bomb))
    [drift] = findings(report, "PKG007")
    assert drift["evidence"]["package"] == "wantedpkg" and drift["evidence"]["problem"] == "missing"
    assert drift["evidence"]["file"] == str(bomb)
    still_checked(report)


def test_a_fifo_as_the_against_file_never_blocks(tmp_path: Path) -> None:
    prefix = bare_prefix(tmp_path)
    fifo = tmp_path / "requirements.txt"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONUSERBASE": str(tmp_path / "no-user-base")}
    start = time.monotonic()
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "PKG", "--prefix", str(prefix),
                         "--against", str(fifo), env=env, cwd=str(tmp_path), timeout=2 * static_check_s())
    assert time.monotonic() - start < static_check_s()  # a blocking open of the FIFO would outlast any limit
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 1, 2)
    named = proc.stdout + proc.stderr
    assert str(fifo) in named and "not a regular file" in named
    if proc.returncode != 2:
        still_checked(json_report(proc))


def test_channel_credentials_never_reach_the_report(tmp_path: Path) -> None:
    prefix = bare_prefix(tmp_path)
    secret_url = "https://alice:hunter2pw@conda.example.com/t/tok-SECRET-123/conda-forge"
    conda_record(prefix, "python", [], channel=secret_url, url=f"{secret_url}/linux-64/python-1.0-0.conda")
    conda_record(prefix, "numpy", [], channel="https://repo.anaconda.com/pkgs/main",
                 url="https://bob:pw2@repo.anaconda.com/pkgs/main/linux-64/numpy-1.0-0.conda")
    for fmt in ("json", "text", "markdown", "sarif"):  # what each format prints: the command in this process
        env = {**os.environ, "PYTHONUSERBASE": str(tmp_path / "no-user-base")}
        proc = run_cli("check", "--format", fmt, "--no-loader", "--select", "PKG", "CHN",
                       "--prefix", str(prefix), env=env, cwd=str(tmp_path))
        assert proc.returncode in (0, 1), proc.stderr
        for secret in ("hunter2pw", "tok-SECRET-123", "alice:", "pw2"):
            assert secret not in proc.stdout, (fmt, secret)
    report, _ = run(prefix, tmp_path)
    [mixed] = findings(report, "CHN001")  # the channel is still known: conda-forge against pkgs/main
    assert mixed["evidence"]["keep_family"] in ("conda-forge", "defaults")
    channels = {p["package"]: p["channel"] for p in mixed["evidence"]["packages"]}
    assert channels == {"python": "conda-forge", "numpy": "pkgs/main"}
    still_checked(report)


def test_pth_code_is_reported_and_never_run(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    site = next(venv.glob("lib/python3*/site-packages"))
    ran = tmp_path / "system-ran"
    (site / "evil.pth").write_text(f"import os; os.system('touch {ran}')\n")
    (site / "writer.pth").write_text(f"import pathlib; pathlib.Path({str(venv / 'written')!r}).write_text('x')\n")
    (site / "paths.pth").write_text("# only a path, no code\n../elsewhere\n")
    # The quiet one: an editable hook its own distribution's RECORD lists.
    _editable(site, b"MAPPING = {'big': '/src/big/big'}\n")
    dist_info(site, "needy", {"METADATA": metadata("needy", "1.0", "Requires-Dist: absent-dep")})
    report, _ = run(venv, tmp_path)
    assert not ran.exists() and not (venv / "written").exists()  # read as data, never executed
    reported = {f["evidence"]["path"]: f for f in findings(report, "PKG011")}
    assert set(reported) == {str(site / "evil.pth"), str(site / "writer.pth")}
    assert reported[str(site / "evil.pth")]["evidence"]["code_lines"] == [f"import os; os.system('touch {ran}')"]
    pths = {p["path"]: p["owner"] for p in report["facts"]["packages"]["pth_files"]}
    assert pths[str(site / "__editable__.big-1.0.pth")] == {"tool": "unknown", "package": "big", "source": "RECORD",
                                                           "editable": True}
    still_checked(report)

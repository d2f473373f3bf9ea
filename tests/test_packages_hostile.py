"""Hostile metadata on disk: FIFOs, loops, huge and non-UTF-8 files give PKG009, never a hang or a crash.

Every state here is made of real files in a bare prefix (no interpreter, so
the prefix's own `lib/python3*/site-packages` is read), and the real
`envdoctor report` runs under a timeout: a FIFO opened for reading blocks for
ever, so a run that finishes at all is half the assertion.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from support import findings, json_report, run_envdoctor, validate_report

SITE = "lib/python3.11/site-packages"


def metadata(name: str, *extra: str) -> bytes:
    return ("\n".join(["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0", *extra]) + "\n").encode()


def dist_info(site: Path, folder: str | bytes, files: dict[str, bytes]) -> Path:
    path = site / (os.fsdecode(folder) if isinstance(folder, bytes) else folder)
    path.mkdir()
    for name, data in files.items():
        (path / name).write_bytes(data)
    return path


def report(prefix: Path, tmp: Path, *args: str) -> tuple[dict[str, Any], str]:
    env = {**os.environ, "PYTHONUSERBASE": str(tmp / "no-user-base")}
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "PKG", "CHN", "--prefix", str(prefix),
                         *args, env=env, timeout=60)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    return (json_report(proc) if "--output" not in args else {}), proc.stdout


def pkg009_by_name(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {os.path.basename(f["evidence"]["path"]): f for f in findings(rep, "PKG009")}


def test_fifos_where_metadata_should_be_do_not_block(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    site = prefix / SITE
    site.mkdir(parents=True)
    os.mkfifo(dist_info(site, "fifometa-1.0.dist-info", {}) / "METADATA")
    os.mkfifo(site / "fifofolder-1.0.dist-info")
    side = dist_info(site, "fifoside-1.0.dist-info", {"METADATA": metadata("fifoside")})
    for name in ("RECORD", "INSTALLER", "direct_url.json"):
        os.mkfifo(side / name)
    dist_info(site, "good-1.0.dist-info", {"METADATA": metadata("good", "Requires-Dist: absent-dep")})
    meta = prefix / "conda-meta"
    meta.mkdir()
    os.mkfifo(meta / "fifo-1.0-0.json")
    (meta / "folder-1.0-0.json").mkdir()
    os.symlink("loop-1.0-0.json", meta / "loop-1.0-0.json")
    (meta / "deep-1.0-0.json").write_text("[" * 100000 + "]" * 100000)  # beyond the JSON parser's recursion
    dist_info(site, "deepurl-1.0.dist-info", {"METADATA": metadata("deepurl"),
                                              "direct_url.json": b"[" * 100000 + b"]" * 100000})

    rep, _ = report(prefix, tmp_path)
    by_name = pkg009_by_name(rep)
    assert set(by_name) == {"fifometa-1.0.dist-info", "fifofolder-1.0.dist-info", "fifo-1.0-0.json",
                            "folder-1.0-0.json", "loop-1.0-0.json", "deep-1.0-0.json", "direct_url.json"}
    # A bad direct_url.json is a finding about that file; its distribution is still counted.
    bad_urls = {f["evidence"]["path"]: f["evidence"]["reason"] for f in findings(rep, "PKG009")
                if f["evidence"]["kind"] == "direct_url"}
    assert bad_urls == {str(side / "direct_url.json"): "is a FIFO, not a regular file",
                        str(site / "deepurl-1.0.dist-info" / "direct_url.json"):
                        bad_urls.get(str(site / "deepurl-1.0.dist-info" / "direct_url.json"), "")}
    assert bad_urls[str(site / "deepurl-1.0.dist-info" / "direct_url.json")].startswith("not valid JSON: maximum recursion")
    assert by_name["deep-1.0-0.json"]["evidence"]["reason"].startswith("not valid JSON: maximum recursion depth")
    assert by_name["fifometa-1.0.dist-info"]["evidence"]["reason"] == "METADATA is a FIFO, not a regular file"
    assert by_name["fifofolder-1.0.dist-info"]["evidence"]["reason"] == "the dist-info is a FIFO, not a directory"
    assert by_name["fifo-1.0-0.json"]["evidence"]["reason"] == "is a FIFO, not a regular file"
    assert by_name["folder-1.0-0.json"]["evidence"]["reason"] == "is a directory, not a regular file"
    assert by_name["loop-1.0-0.json"]["evidence"]["reason"] == "Too many levels of symbolic links"
    # The rest is still read: the distribution beside the FIFOs, and its broken requirement.
    names = {d["name"]: d for d in rep["facts"]["packages"]["distributions"]}
    assert names["fifoside"]["installer"] is None and names["fifoside"]["import_names"] == []
    assert "direct_url" not in names["deepurl"]
    assert [f["evidence"]["dependency"] for f in findings(rep, "PKG003")] == ["absent-dep"]


def test_conda_meta_that_is_no_folder_is_pkg009_not_a_plain_prefix(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    (prefix / SITE).mkdir(parents=True)
    os.symlink("conda-meta", prefix / "conda-meta")  # a loop: is_dir() says False, as for "no conda-meta"
    rep, _ = report(prefix, tmp_path)
    (hit,) = findings(rep, "PKG009")
    assert hit["evidence"]["kind"] == "conda-meta-dir"
    assert hit["evidence"]["reason"] == "Too many levels of symbolic links"
    assert hit["message"].startswith(f"cannot read the conda-meta folder {prefix}/conda-meta")
    assert hit["fix"].startswith(f"ls -ld {prefix}/conda-meta")


def test_huge_metadata_is_read_to_its_headers_only(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    site = prefix / SITE
    site.mkdir(parents=True)
    body = b"x" * (20 << 20)
    dist_info(site, "bigreadme-1.0.dist-info",
              {"METADATA": metadata("bigreadme", "Requires-Dist: absent-dep") + b"\n" + body + b"\n"})
    dist_info(site, "bighead-1.0.dist-info", {"METADATA": metadata("bighead") + b"Summary: " + body + b"\n"})
    rep, _ = report(prefix, tmp_path)
    assert [d["name"] for d in rep["facts"]["packages"]["distributions"]] == ["bigreadme"]
    assert [f["evidence"]["dependency"] for f in findings(rep, "PKG003")] == ["absent-dep"]
    by_name = pkg009_by_name(rep)
    assert set(by_name) == {"bighead-1.0.dist-info"}
    assert by_name["bighead-1.0.dist-info"]["evidence"]["reason"] == \
        f"METADATA headers do not end within its first {16 << 20} bytes"


def test_non_utf8_file_names_and_garbage_record(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    site = prefix / SITE
    site.mkdir(parents=True)
    broken = dist_info(site, b"caf\xe9-1.0.dist-info", {"METADATA": b"Name: cafe\nVersion: 1.0\nSummary: caf\xe9\n"})
    dist_info(site, b"ok\xe9-1.0.dist-info", {"METADATA": metadata("okname")})
    dist_info(site, "garbage-1.0.dist-info", {
        "METADATA": metadata("garbage"),
        "RECORD": b"\x00\xff\xfe noise\n\"unterminated,quote\n,,,,\n/abs/x.py,,\n" + b"z" * 100000
                  + b"\ngarbage/__init__.py,,\n"})
    out = tmp_path / "report.json"
    rep, stdout = report(prefix, tmp_path, "--output", str(out))
    assert stdout == ""
    raw = out.read_bytes()
    raw.decode("utf-8")  # valid UTF-8: the JSON contract holds with any file name
    rep = validate_report(json.loads(raw))
    (hit,) = findings(rep, "PKG009")
    # Lossless: the path in the report is the file's exact name.
    assert os.fsencode(hit["evidence"]["path"]) == os.fsencode(str(broken))
    assert hit["evidence"]["reason"] == "METADATA is not UTF-8 (invalid continuation byte at byte 36)"
    # The fix names the folder in a form bash reads back to the same bytes, and asks pip for no made-up name.
    assert hit["fix"] == (f"mv $'{site}/caf\\xe9-1.0.dist-info' $'{site}/caf\\xe9-1.0.dist-info.broken'"
                          "   # then reinstall the package it belonged to")
    assert hit["fix_steps"] == [{"tool": "file", "move": hit["evidence"]["path"], "to": hit["evidence"]["path"] + ".broken"}]
    names = {d["name"]: d for d in rep["facts"]["packages"]["distributions"]}
    assert names["garbage"]["import_names"] == ["garbage"]
    assert os.fsencode(names["okname"]["path"]).endswith(b"ok\xe9-1.0.dist-info")
    stdout_rep, _ = report(prefix, tmp_path)  # and on standard output, whatever the locale's error handler
    assert findings(stdout_rep, "PKG009")[0]["evidence"]["path"] == hit["evidence"]["path"]


def test_one_site_dir_reached_through_a_symlink_is_read_once(tmp_path: Path) -> None:
    # Fedora/RHEL Pythons (platlibdir lib64) put venv/lib64/... and venv/lib/... on sys.path, and
    # venv makes lib64 -> lib: one folder, two entries. Here a .pth adds the second entry.
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    [site] = venv.glob("lib/python3*/site-packages")
    if not (venv / "lib64").exists():
        (venv / "lib64").symlink_to("lib")
    (site / "zz-lib64.pth").write_text(str(venv / "lib64" / site.relative_to(venv / "lib")) + "\n")
    dist_info(site, "solo-1.0.dist-info", {"METADATA": metadata("solo")})
    rep, _ = report(venv, tmp_path)
    assert findings(rep, "PKG002") == []
    assert [d["path"] for d in rep["facts"]["packages"]["distributions"]] == [str(site / "solo-1.0.dist-info")]


def test_fifo_metadata_of_torch_does_not_block_the_torch_facts(tmp_path: Path) -> None:
    # The torch section reads torch's dist-info on its own (no import): it must not block either.
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    [site] = venv.glob("lib/python3*/site-packages")
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text('__version__ = "2.5.1"\ncuda = None\n')
    os.mkfifo(dist_info(site, "torch-2.5.1.dist-info", {}) / "METADATA")
    env = {**os.environ, "PYTHONUSERBASE": str(tmp_path / "no-user-base")}
    proc = run_envdoctor("report", "--json", "--no-loader", "--prefix", str(venv), env=env, timeout=60)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    rep = json_report(proc)
    assert rep["facts"]["torch"]["version"] == "2.5.1" and rep["facts"]["torch"]["installer"] is None
    assert [f["evidence"]["reason"] for f in findings(rep, "PKG009")] == ["METADATA is a FIFO, not a regular file"]


def test_nul_bytes_in_recorded_paths(tmp_path: Path) -> None:
    # JSON may spell a NUL (\u0000); no file name can hold one, and os.stat raises ValueError on it.
    prefix = tmp_path / "env"
    site = prefix / SITE
    site.mkdir(parents=True)
    (prefix / "conda-meta").mkdir()
    (prefix / "conda-meta" / "nul-1.0-0.json").write_text(json.dumps(
        {"name": "nul", "version": "1.0", "build": "0", "files": ["lib/a\u0000b.so"],
         "paths_data": {"paths": [{"_path": "lib/a\u0000b.so", "path_type": "hardlink", "size_in_bytes": 3}]}}))
    edit = dist_info(site, "edit-1.0.dist-info", {
        "METADATA": metadata("edit"), "direct_url.json": b'{"url": "file:///src", "dir_info": {"editable": true}}',
        "RECORD": b"__editable__.edit-1.0.pth,,\nbad\x00name.pth,,\nedit-1.0.dist-info/METADATA,,\n"})
    (site / "__editable__.edit-1.0.pth").write_bytes(b"/src/a\x00b\n/src/ok\n")
    rep, _ = report(prefix, tmp_path)
    (hit,) = findings(rep, "PKG009")
    assert hit["evidence"]["reason"] == "a recorded path holds a NUL byte ('lib/a\\x00b.so')"
    [dist] = [d for d in rep["facts"]["packages"]["distributions"] if d["path"] == str(edit)]
    assert dist["editable_paths"] == [os.path.realpath("/src/ok")]

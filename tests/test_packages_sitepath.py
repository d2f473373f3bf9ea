"""The import path worked out from files: `.pth` files read by site's rules, never run; dpkg lists read as data."""
from __future__ import annotations

from pathlib import Path

from envdoctor.facts.owners import dpkg_database, owner_of, read_dpkg_owned
from envdoctor.facts.sitepath import expand_site_dirs, import_path, user_site_enabled


def test_pth_lines_follow_site_rules_and_code_is_only_recorded(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "extra").mkdir(parents=True)
    marker = tmp_path / "ran"
    (site / "a.pth").write_text(f"# a comment\n\nextra\nmissing-folder\nimport os; open({str(marker)!r}, 'w')\n"
                                f"import\tsys\n  import not-code-indented\n")
    (site / "b.pth").write_text("extra\n")  # the same folder again is added once
    added, pths = expand_site_dirs([str(site)], [], (3, 11))
    assert added == [str(site), str(site / "extra")]
    [a, b] = pths
    assert a["code_lines"] == [f"import os; open({str(marker)!r}, 'w')", "import\tsys"]
    assert a["code_line_count"] == 2 and a["paths"] == [str(site / "extra")]
    assert b["code_line_count"] == 0
    assert not marker.exists()


def test_hidden_pth_files_are_skipped_from_python_3_13(tmp_path: Path) -> None:
    (tmp_path / ".hidden.pth").write_text("import os\n")
    assert [p["path"] for p in expand_site_dirs([str(tmp_path)], [], (3, 11))[1]] == [str(tmp_path / ".hidden.pth")]
    assert expand_site_dirs([str(tmp_path)], [], (3, 13))[1] == []


def test_import_path_order_and_user_site(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    path, _ = import_path(["/std/lib"], [str(tmp_path / "absent"), str(site)], "/work", ["/pp"], (3, 11))
    assert path == ["/work", "/pp", "/std/lib", str(site)]
    assert user_site_enabled({}, None) and not user_site_enabled({"PYTHONNOUSERSITE": "1"}, None)
    assert not user_site_enabled({}, False) and user_site_enabled({}, True)


def test_dpkg_lists_are_read_relative_to_the_root_of_the_prefix(tmp_path: Path) -> None:
    root = tmp_path / "root"
    info = root / "var" / "lib" / "dpkg" / "info"
    info.mkdir(parents=True)
    dist = root / "usr" / "lib" / "python3" / "dist-packages"
    (dist / "PyYAML-6.0.dist-info").mkdir(parents=True)
    (info / "python3-yaml:amd64.list").write_text(
        "/.\n/usr\n/usr/lib/python3/dist-packages\n/usr/lib/python3/dist-packages/PyYAML-6.0.dist-info\n"
        "/usr/lib/python3/dist-packages/PyYAML-6.0.dist-info/METADATA\n/usr/lib/python3/dist-packages/yaml\n")
    (info / "libc6.list").write_text("/usr/lib/libc.so.6\n")
    assert dpkg_database(str(root / "usr")) == (str(root), str(root / "var" / "lib" / "dpkg"))
    assert dpkg_database(str(tmp_path / "venv")) is None
    owned = read_dpkg_owned(str(root), str(root / "var" / "lib" / "dpkg"))
    real = str((dist / "PyYAML-6.0.dist-info").resolve())
    assert owned == {real: "python3-yaml"}
    os_db = {"manager": "dpkg", "database": "x", "owned": owned}
    assert owner_of(real, "pip", None, "system", os_db)["tool"] == "dpkg"  # the list wins over INSTALLER
    assert owner_of("/elsewhere", "uv-pixi", None, "system", os_db)["tool"] == "pixi"
    assert owner_of("/elsewhere", None, "numpy", "conda", None) == {
        "tool": "conda", "package": "numpy", "source": "conda-meta", "editable": False}

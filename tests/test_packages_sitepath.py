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


# `rpm -qa --queryformat '[%{NAME}\t%{FILENAMES}\n]'` as Fedora 40 prints it (trimmed).
RPM_OUTPUT = """\
python3-pyyaml\t/usr/lib64/python3.12/site-packages/PyYAML-6.0.1.dist-info
python3-pyyaml\t/usr/lib64/python3.12/site-packages/PyYAML-6.0.1.dist-info/METADATA
python3-pyyaml\t/usr/lib64/python3.12/site-packages/yaml/__init__.py
python3-setuptools\t/usr/lib/python3.12/site-packages/distutils-precedence.pth
python3-six\t/usr/lib/python3.12/site-packages/six-1.16.0-py3.12.egg-info
glibc\t/usr/lib64/libc.so.6
"""


def test_rpm_file_listing_gives_owners_of_python_metadata(tmp_path: Path) -> None:
    from envdoctor.facts.owners import parse_rpm_files

    owned = parse_rpm_files(RPM_OUTPUT, str(tmp_path))
    site64, site = tmp_path / "usr/lib64/python3.12/site-packages", tmp_path / "usr/lib/python3.12/site-packages"
    assert owned == {str(site64 / "PyYAML-6.0.1.dist-info"): "python3-pyyaml",
                     str(site / "distutils-precedence.pth"): "python3-setuptools",
                     str(site / "six-1.16.0-py3.12.egg-info"): "python3-six"}
    os_db = {"manager": "rpm", "database": "/var/lib/rpm", "owned": owned}
    assert owner_of(str(site64 / "PyYAML-6.0.1.dist-info"), None, None, "system", os_db) == {
        "tool": "rpm", "package": "python3-pyyaml", "source": "rpm", "editable": False}


def test_pip_over_an_rpm_package_in_one_folder_is_reinstalled_with_dnf() -> None:
    from envdoctor.config import Config
    from envdoctor.facts import Facts
    from envdoctor.rules.packages.doubles import find_duplicate_distributions

    site = "/usr/lib64/python3.12/site-packages"

    def dist(version: str, owner: dict[str, object], installer: str | None) -> dict[str, object]:
        return {"name": "PyYAML", "key": "pyyaml", "version": version, "path": f"{site}/PyYAML-{version}.dist-info",
                "installer": installer, "requires": [], "import_names": ["yaml"], "site_dir": site,
                "location": "env", "order": 3, "owner": owner}

    rpm = {"tool": "rpm", "package": "python3-pyyaml", "source": "rpm", "editable": False}
    pip = {"tool": "pip", "package": None, "source": "INSTALLER", "editable": False}
    packages = {"prefix": "/usr", "kind": "system", "interpreter": "/usr/bin/python3", "python": "3.12.3",
                "markers": None, "conda": {"present": False, "records": [], "checked_by": "size"},
                "site_dirs": [{"path": site, "location": "env", "order": 3, "real_path": site, "modules": ["yaml"],
                               "module_files": {"yaml": "yaml"}}],
                "distributions": [dist("6.0.1", rpm, None), dist("6.0.2", pip, "pip")], "unreadable": [],
                "pth_files": [], "installer": {"externally_managed": None, "uv_venv": None, "has_pip": True},
                "os_database": "/var/lib/rpm"}
    [hit] = find_duplicate_distributions(Facts.from_dict({"packages": packages}, Config()))
    assert [step.to_dict() for step in hit.fix_steps] == [
        {"tool": "file", "move": f"{site}/PyYAML-6.0.2.dist-info", "to": f"{site}/PyYAML-6.0.2.dist-info.envdoctor-aside"},
        {"tool": "dnf", "argv": ["dnf", "reinstall", "-y", "python3-pyyaml"]}]
    assert "6.0.1 from the OS package python3-pyyaml (rpm)" in hit.message
    # One rpm package shipping both folders at one version is one install.
    packages["distributions"] = [dist("6.0.1", rpm, None), {**dist("6.0.1", rpm, None),
                                                            "path": f"{site}/PyYAML-6.0.1-py3.12.egg-info"}]
    assert list(find_duplicate_distributions(Facts.from_dict({"packages": packages}, Config()))) == []

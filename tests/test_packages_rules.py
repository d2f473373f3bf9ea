"""PKG rules and the package/spec readers on small, exact inputs (no prefix build needed).

Facts are written in the exact format gather_packages emits; the readers are
run on dist-info and egg-info folders written here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envdoctor.config import Config
from envdoctor.facts import Facts
from envdoctor.facts.conda_meta import conda_distribution
from envdoctor.facts.packages import read_distribution
from envdoctor.facts.spec import parse_conda_spec, parse_environment_yml
from envdoctor.facts.target import current_markers, detect_kind
from envdoctor.rules.packages.clashes import find_conflicting_distributions
from envdoctor.rules.packages.doubles import find_broken_requirements, find_conda_pip_doubles
from envdoctor.rules.packages.paths import find_shadowed_packages
from envdoctor.rules.packages.spec import conda_version_matches, find_spec_drift

PREFIX = "/opt/envs/train"
SITE = f"{PREFIX}/lib/python3.11/site-packages"


def dist(name: str, version: str, requires: tuple[str, ...] = (), installer: str | None = "pip",
         location: str = "env", order: int = 3, conda_record: str | None = None,
         site_dir: str = SITE, import_names: tuple[str, ...] | None = None) -> dict[str, Any]:
    out = {"name": name, "key": name.lower().replace("_", "-"), "version": version,
           "path": f"{site_dir}/{name}-{version}.dist-info", "installer": installer, "requires": list(requires),
           "import_names": list(import_names if import_names is not None else [name.replace("-", "_")]),
           "site_dir": site_dir, "location": location, "order": order}
    if conda_record:
        out["conda_record"] = conda_record
    out["owner"] = ({"tool": "conda", "package": conda_record, "source": "conda-meta", "editable": False}
                    if conda_record else
                    {"tool": installer or "unknown", "package": None, "source": "INSTALLER" if installer else "none",
                    "editable": False})
    return out


def record(name: str, version: str, dist_names: tuple[str, ...] = (), channel: str = "conda-forge") -> dict[str, Any]:
    return {"name": name, "version": version, "build": "0", "channel": channel, "url": None, "subdir": "linux-64",
            "file": f"{PREFIX}/conda-meta/{name}-{version}-0.json", "files_count": 3,
            "dist_names": list(dist_names), "checked_files": 3, "missing_count": 0, "changed_count": 0,
            "distribution": conda_distribution(name, {n: n for n in dist_names})[0],
            "distribution_from": "files" if dist_names else "table", "depends": []}


def facts_of(dists: list[dict[str, Any]], records: list[dict[str, Any]] = (), markers: dict[str, str] | None = None,
             site_dirs: list[dict[str, Any]] | None = None, spec: dict[str, Any] | None = None,
             kind: str = "conda") -> Facts:
    packages = {"prefix": PREFIX, "kind": kind, "interpreter": f"{PREFIX}/bin/python3", "python": "3.11.7",
                "markers": markers if markers is not None else current_markers(),
                "conda": {"present": bool(records), "checked_by": "size", "records": list(records)},
                "site_dirs": [{"real_path": d["path"], "modules": [], "module_files": {}, **d}
                              for d in site_dirs or [{"path": SITE, "location": "env", "order": 3}]],
                "distributions": dists, "unreadable": [], "pth_files": [],
                "installer": {"externally_managed": None, "uv_venv": None, "has_pip": True}, "os_database": None}
    config = Config(against="environment.yml") if spec else Config()
    return Facts.from_dict({"packages": packages, "spec": spec}, config)


def test_markers_are_evaluated_for_the_target_interpreter_not_envdoctors() -> None:
    markers = {**current_markers(), "python_version": "3.8", "python_full_version": "3.8.18"}
    dists = [dist("oldlib", "1.0", requires=('backport>=1; python_version < "3.9"',))]
    [hit] = find_broken_requirements(facts_of(dists, markers=markers))
    assert hit.evidence == {"package": "oldlib", "version": "1.0", "requirement": 'backport>=1; python_version < "3.9"',
                            "dependency": "backport", "installed_version": None, "problem": "missing",
                            "owner": "pip", "dependency_owner": None}
    assert hit.fix == f"{PREFIX}/bin/python3 -m pip install 'backport>=1'"
    # The same distribution on a 3.11 target needs nothing.
    markers311 = {**current_markers(), "python_version": "3.11", "python_full_version": "3.11.7"}
    assert list(find_broken_requirements(facts_of(dists, markers=markers311))) == []


def test_broken_requirement_on_a_conda_dependency_is_fixed_with_conda() -> None:
    dists = [dist("numpy", "1.26.4", installer="conda", conda_record="numpy"),
             dist("trainkit", "1.0", requires=("numpy>=2", "numpy<3", 'gpu; extra == "gpu"'))]
    [hit] = find_broken_requirements(facts_of(dists, [record("numpy", "1.26.4", ("numpy",))]))
    assert hit.evidence["problem"] == "out-of-range" and hit.evidence["installed_version"] == "1.26.4"
    assert hit.fix == f"conda install -p {PREFIX} 'numpy>=2'"


def test_first_copy_on_the_path_is_the_one_judged() -> None:
    """pip check semantics: the user-site copy (earlier on sys.path) is what is installed."""
    user = "/root/.local/lib/python3.11/site-packages"
    dists = [dist("numpy", "2.1.3", location="user", order=1, site_dir=user),
             dist("numpy", "1.26.4", installer="conda", order=3),
             dist("trainkit", "1.0", requires=("numpy<2",))]
    [hit] = find_broken_requirements(facts_of(dists))
    assert hit.evidence["installed_version"] == "2.1.3"


def test_pkg001_same_version_reinstalled_by_pip() -> None:
    dists = [dist("numpy", "1.26.4", installer="pip")]
    [hit] = find_conda_pip_doubles(facts_of(dists, [record("numpy", "1.26.4", ("numpy",))]))
    assert hit.evidence["installer"] == "pip" and hit.evidence["installed_version"] == "1.26.4"
    assert "reinstalled it over conda's copy at the same version" in hit.message
    # conda's own copy (owned dist-info, INSTALLER conda) is quiet, and so is a local version label.
    quiet = [dist("torch", "2.5.1+cu121", installer="conda", conda_record="pytorch")]
    assert list(find_conda_pip_doubles(facts_of(quiet, [record("pytorch", "2.5.1", ("torch",))]))) == []


def test_conda_name_table_maps_records_without_dist_info() -> None:
    """py-opencv owns no dist-info here; the table in catalog/conda_names.toml names its distribution."""
    dists = [dist("opencv-python", "4.10.0", installer="pip")]
    [hit] = find_conda_pip_doubles(facts_of(dists, [record("py-opencv", "4.9.0")]))
    assert (hit.evidence["package"], hit.evidence["distribution"]) == ("py-opencv", "opencv-python")
    assert hit.fix.endswith(f"conda install -p {PREFIX} --force-reinstall py-opencv=4.9.0")


@pytest.mark.parametrize("pynvml, fires", [("11.5.0", True), ("12.0.0", False)])
def test_pynvml_clash_depends_on_its_version(pynvml: str, fires: bool) -> None:
    dists = [dist("pynvml", pynvml), dist("nvidia-ml-py", "12.560.30")]
    hits = list(find_conflicting_distributions(facts_of(dists)))
    assert bool(hits) is fires
    if fires:
        assert hits[0].evidence["clash"] == "pynvml" and hits[0].evidence["keep"] == "nvidia-ml-py"
        assert hits[0].fix == (f"{PREFIX}/bin/python3 -m pip uninstall -y pynvml && {PREFIX}/bin/python3 -m pip "
                               "install --force-reinstall --no-deps nvidia-ml-py==12.560.30")


def test_shadow_must_come_earlier_on_the_path() -> None:
    later = {"path": "/srv/extra", "location": "other", "order": 9, "modules": ["numpy"]}
    env = {"path": SITE, "location": "env", "order": 3}
    dists = [dist("numpy", "1.26.4", installer="conda")]
    assert list(find_shadowed_packages(facts_of(dists, site_dirs=[env, later]))) == []
    earlier = {**later, "order": 1}
    [hit] = find_shadowed_packages(facts_of(dists, site_dirs=[earlier, env]))
    assert hit.evidence["shadow_path"] == "/srv/extra/numpy" and hit.evidence["shadow_version"] is None
    assert hit.fix == ("mv /srv/extra/numpy /srv/extra/numpy.disabled   "
                       "# it hides the installed numpy; delete it once training works")


def test_spec_drift_on_a_venv_compares_distributions() -> None:
    spec = {"path": "/work/environment.yml", "format": "environment.yml", "name": "train", "channels": ["conda-forge"],
            "conda": [parse_conda_spec("python=3.10"), parse_conda_spec("numpy>=1.26,<2"),
                      parse_conda_spec("pytorch=2.5")], "pip": [], "skipped": []}
    dists = [dist("numpy", "1.26.4"), dist("torch", "2.5.1")]
    hits = list(find_spec_drift(facts_of(dists, spec=spec, kind="venv")))
    assert [(h.evidence["package"], h.evidence["problem"]) for h in hits] == [("python", "version")]
    assert hits[0].fix == f"python3.10 -m venv --clear {PREFIX}   # then reinstall its packages"


@pytest.mark.parametrize("text, expected", [
    ("numpy=1.26.4", {"name": "numpy", "channel": None, "version": "=1.26.4", "build": None}),
    ("conda-forge::pytorch=2.5.1=py3.11_cpu_0", {"name": "pytorch", "channel": "conda-forge", "version": "=2.5.1",
                                                 "build": "py3.11_cpu_0"}),
    ("numpy==1.26.4", {"name": "numpy", "channel": None, "version": "==1.26.4", "build": None}),
    ("numpy >=1.26,<2", {"name": "numpy", "channel": None, "version": ">=1.26,<2", "build": None}),
    ("numpy 1.26.4 py311_0", {"name": "numpy", "channel": None, "version": "==1.26.4", "build": "py311_0"}),
    ("pip", {"name": "pip", "channel": None, "version": None, "build": None}),
])
def test_conda_specs(text: str, expected: dict[str, Any]) -> None:
    parsed = parse_conda_spec(text)
    assert {k: parsed[k] for k in expected} == expected


@pytest.mark.parametrize("wanted, installed, ok", [
    ("=3.11", "3.11.7", True), ("=3.1", "3.11.7", False), ("==1.26.4", "1.26.4", True),
    ("1.26.*", "1.26.4", True), (">=1.26,<2", "2.1.3", False), ("=1.26|=2.1", "2.1.3", True), (None, "9", True),
])
def test_conda_version_matching(wanted: str | None, installed: str, ok: bool) -> None:
    assert conda_version_matches(wanted, installed) is ok


def test_environment_yml_subset_with_flow_lists_and_comments() -> None:
    parsed = parse_environment_yml(
        "name: train  # comment\nchannels: [conda-forge, 'nvidia']\ndependencies:\n"
        "  - python=3.11  # pinned\n  - \"numpy>=1.26\"\n  - pip:\n      - torch==2.5.1\n      - --extra-index-url https://x\n"
        "      - not a requirement!!\n  - scipy\nvariables:\n  OMP_NUM_THREADS: 1\n")
    assert parsed["name"] == "train" and parsed["channels"] == ["conda-forge", "nvidia"]
    assert [c["name"] for c in parsed["conda"]] == ["python", "numpy", "scipy"]
    assert [p["spec"] for p in parsed["pip"]] == ["torch==2.5.1"]
    assert [s["reason"] for s in parsed["skipped"]] == ["a pip option, not a package", "not a valid requirement"]


def test_dist_info_readers(tmp_path: Path) -> None:
    good = tmp_path / "Foo_Bar-1.0.dist-info"
    good.mkdir()
    (good / "METADATA").write_text("Metadata-Version: 2.1\nName: Foo_Bar\nVersion: 1.0\nRequires-Dist: six\n\nbody\n")
    (good / "RECORD").write_text("foo_bar/__init__.py,,\nfoo_bar_ext.cpython-311-x86_64-linux-gnu.so,,\n"
                                 "Foo_Bar-1.0.dist-info/METADATA,,\n../../../bin/foo,,\n")
    (good / "INSTALLER").write_text("uv\n")
    facts, problem = read_distribution(good)
    assert problem is None
    assert (facts["key"], facts["installer"], facts["requires"]) == ("foo-bar", "uv", ["six"])
    assert facts["import_names"] == ["foo_bar", "foo_bar_ext"]

    egg = tmp_path / "legacy-2.0-py3.11.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy\nVersion: 2.0\n")
    (egg / "requires.txt").write_text("six\n\n[gpu]\ncupy\n\n[:sys_platform == \"win32\"]\npywin32\n")
    facts, _ = read_distribution(egg)
    assert facts["requires"] == ["six", 'pywin32; sys_platform == "win32"']

    latin = tmp_path / "latin-1.0.dist-info"
    latin.mkdir()
    (latin / "METADATA").write_bytes(b"Name: latin\nVersion: 1.0\nSummary: caf\xe9\n")
    assert read_distribution(latin)[1]["reason"].startswith("METADATA is not UTF-8")
    noversion = tmp_path / "nov-1.0.dist-info"
    noversion.mkdir()
    (noversion / "METADATA").write_text("Name: nov\n")
    assert read_distribution(noversion)[1]["reason"] == "METADATA has no Version field"


def test_pixi_kind_from_the_folder_layout(tmp_path: Path) -> None:
    env = tmp_path / "proj" / ".pixi" / "envs" / "cuda"
    (env / "conda-meta").mkdir(parents=True)
    assert detect_kind(env) == "pixi"
    plain = tmp_path / "envs" / "train"
    (plain / "conda-meta").mkdir(parents=True)
    assert detect_kind(plain) == "conda"


def test_broken_requirement_fix_installs_what_was_asked_for() -> None:
    # A direct URL is not the index's package of that name; extras are part of the requirement.
    dists = [dist("trainer", "1.0", requires=("urlpkg @ https://example.com/urlpkg-1.0.tar.gz",
                                             "Beta.Pkg[fast,io]>=0.5"))]
    hits = {h.evidence["dependency"]: h for h in find_broken_requirements(facts_of(dists, kind="venv"))}
    assert hits["urlpkg"].fix == f"{PREFIX}/bin/python3 -m pip install 'urlpkg @ https://example.com/urlpkg-1.0.tar.gz'"
    assert hits["Beta.Pkg"].fix == f"{PREFIX}/bin/python3 -m pip install 'Beta.Pkg[fast,io]>=0.5'"


def test_missing_dependency_of_a_conda_package_is_installed_under_its_conda_name() -> None:
    dists = [dist("lightning", "2.4.0", requires=("torch>=2.1",), installer="conda", conda_record="lightning")]
    [hit] = find_broken_requirements(facts_of(dists, [record("lightning", "2.4.0", ("lightning",))]))
    assert hit.evidence["problem"] == "missing"
    assert hit.fix == f"conda install -p {PREFIX} 'pytorch>=2.1'"


def test_without_an_interpreter_pip_fixes_name_the_prefix_python_not_the_path_one() -> None:
    facts = facts_of([dist("trainer", "1.0", requires=("absent-dep",))], kind="conda")
    facts["packages"]["interpreter"] = None
    [hit] = find_broken_requirements(facts)
    assert hit.fix == f"{PREFIX}/bin/python -m pip install absent-dep"


def test_hash_pinned_requirements_are_still_pins(tmp_path: Path) -> None:
    # pip-compile --generate-hashes output: every pin carries --hash options, often on continuation lines.
    from envdoctor.facts.spec import parse_requirements

    path = tmp_path / "requirements.txt"
    path.write_text("# generated\nnumpy==2.1.3 \\\n    --hash=sha256:aaaa \\\n    --hash=sha256:bbbb\n"
                    "torch==2.5.1 --hash=sha256:cccc\n")
    parsed = parse_requirements(path)
    assert [(p["spec"], p["line"]) for p in parsed["pip"]] == [("numpy==2.1.3", 2), ("torch==2.5.1", 5)]
    assert parsed["skipped"] == []
    spec = {"path": str(path), "format": "requirements", **parsed}
    hits = list(find_spec_drift(facts_of([dist("numpy", "1.26.4"), dist("torch", "2.5.1")], spec=spec, kind="venv")))
    assert [(h.evidence["package"], h.evidence["problem"], h.evidence["line"]) for h in hits] == \
        [("numpy", "version", 2)]
    assert hits[0].fix == f"{PREFIX}/bin/python3 -m pip install numpy==2.1.3"


def test_environment_yml_pip_section_follows_its_requirements_include(tmp_path: Path) -> None:
    # `conda env create` hands `-r requirements.txt` in the pip section to pip, relative to the file.
    from envdoctor.facts.spec import parse_environment_yml

    (tmp_path / "requirements.txt").write_text("urllib3==2.2.1\n")
    path = tmp_path / "environment.yml"
    path.write_text("name: train\ndependencies:\n  - pip\n  - pip:\n    - -r requirements.txt\n    - requests>=2\n")
    parsed = parse_environment_yml(path.read_text(), path)
    assert parsed["skipped"] == []
    assert [(p["spec"], p["line"], p.get("file")) for p in parsed["pip"]] == \
        [("urllib3==2.2.1", 1, str(tmp_path / "requirements.txt")), ("requests>=2", 6, None)]
    spec = {"path": str(path), "format": "environment.yml", **parsed}
    dists = [dist("urllib3", "1.26.18"), dist("requests", "2.31.0"), dist("pip", "24.0")]
    [hit] = find_spec_drift(facts_of(dists, spec=spec, kind="venv"))
    assert hit.message == "requirements.txt asks for urllib3==2.2.1 but urllib3 1.26.18 is installed"
    assert (hit.evidence["file"], hit.evidence["line"]) == (str(tmp_path / "requirements.txt"), 1)


def test_a_wrapper_wheel_and_the_build_it_requires_are_no_clash() -> None:
    # tensorflow 2.15 on Windows is a thin wheel requiring tensorflow-intel, which holds the code.
    windows = {**current_markers(), "platform_system": "Windows", "sys_platform": "win32", "os_name": "nt"}
    linux = {**current_markers(), "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix"}
    dists = [dist("tensorflow", "2.15.0", requires=('tensorflow-intel==2.15.0; platform_system == "Windows"',)),
             dist("tensorflow-intel", "2.15.0")]
    assert list(find_conflicting_distributions(facts_of(dists, markers=windows, kind="venv"))) == []
    [hit] = find_conflicting_distributions(facts_of(dists, markers=linux, kind="venv"))
    assert hit.evidence["clash"] == "tensorflow"


def test_removing_conda_cuda_names_what_conda_removes_with_it() -> None:
    cudatoolkit = {**record("cudatoolkit", "11.8.0"), "distribution": None}
    cupy = {**record("cupy", "13.0.0", ("cupy",)), "distribution": "cupy", "depends": ["cudatoolkit", "python"]}
    dists = [dist("torch", "2.5.1"), dist("nvidia-cudnn-cu12", "9.1.0.70", import_names=("nvidia",)),
             dist("cupy", "13.0.0", installer="conda", conda_record="cupy")]
    [hit] = find_conflicting_distributions(facts_of(dists, [cudatoolkit, cupy]))
    assert hit.evidence["clash"] == "cuda"
    assert hit.fix == (f"conda remove -p {PREFIX} cudatoolkit   # torch comes from pip and uses the nvidia wheels; "
                       "conda also removes what depends on cudatoolkit: cupy")

"""PKG and CHN rules on real prefixes: built by py-rattler from a local channel, broken by pip.

Each scenario prefix is built once per session (condafixtures.World.scenario)
and `envdoctor report --json --no-loader --select PKG CHN --prefix P` must give
exactly the expected rule ids with the expected evidence, and nothing else
from these families. The command runs in this process (support.run_cli): the
facts are the prefix's, read with its own interpreter, never pytest's; the
tests about the process itself (its own interpreter, the bytecode it must not
write) start a real one.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from condafixtures import CONDA_FORGE, PKGS_MAIN, PY, PY_FULL, PYTORCH, SITE, World
from fixenvs import run_bundled_pip
from support import findings, json_report, run_cli, run_envdoctor

pytestmark = pytest.mark.slow

BASE = [f"python =={PY_FULL}", "pip >=1", "numpy ==1.26.4"]
FAMILIES = ("PKG", "CHN")


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment for an envdoctor run: no user site or conda settings from this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONDA_", "PIXI_", "MAMBA_"))}
    env["PYTHONUSERBASE"] = str(tmp / "no-user-base")
    env.update(extra)
    return env


def report_for(prefix: Path, tmp: Path, *args: str, env: dict[str, str] | None = None,
               cwd: str | None = None) -> dict[str, Any]:
    proc = run_cli("report", "--json", "--no-loader", "--select", *FAMILIES, "--prefix", str(prefix),
                   *args, env=env or clean_env(tmp), cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    report = json_report(proc)
    assert report["errors"] == [], report["errors"]
    return report


def rule_ids(report: dict[str, Any]) -> list[str]:
    return sorted(f["rule"] for f in report["findings"] if f["rule"].startswith(FAMILIES))


def only(report: dict[str, Any], rule: str) -> dict[str, Any]:
    hits = findings(report, rule)
    assert len(hits) == 1, hits
    return hits[0]


# ---------------------------------------------------------------- scenarios


@pytest.fixture(scope="session")
def healthy(conda_world: World) -> Path:
    return conda_world.scenario("healthy", lambda p: conda_world.make_prefix(
        p, BASE + ["pillow >=1", "requests >=1", "urllib3 >=1", "hooky >=1", "py-opencv >=1", "pytorch >=1"]))


@pytest.fixture(scope="session")
def pip_over_conda(conda_world: World) -> Path:
    def build(p: Path) -> None:
        conda_world.make_prefix(p, BASE)
        conda_world.pip(p, "install", str(conda_world.wheel("numpy", "2.1.3")))
    return conda_world.scenario("pip-over-conda", build)


@pytest.fixture(scope="session")
def ignore_installed(conda_world: World) -> Path:
    def build(p: Path) -> None:
        conda_world.make_prefix(p, BASE)
        conda_world.pip(p, "install", "--ignore-installed", str(conda_world.wheel("numpy", "2.1.3")))
    return conda_world.scenario("ignore-installed", build)


def test_healthy_prefix_has_no_package_or_channel_finding(healthy: Path, tmp_path: Path) -> None:
    report = report_for(healthy, tmp_path)
    assert rule_ids(report) == []
    assert report["target"]["kind"] == "conda"
    packages = report["facts"]["packages"]
    names = {r["name"]: r for r in packages["conda"]["records"]}
    assert names["pytorch"]["dist_names"] == ["torch"]
    assert (names["pytorch"]["distribution"], names["pytorch"]["distribution_from"]) == ("torch", "files")
    assert names["py-opencv"]["dist_names"] == ["opencv-python"]
    assert names["numpy"]["channel"].rstrip("/") == CONDA_FORGE.rstrip("/")
    dists = {d["key"]: d for d in packages["distributions"]}
    assert dists["numpy"]["installer"] == "conda" and dists["numpy"]["location"] == "env"
    assert dists["numpy"]["conda_record"] == "numpy"


def test_healthy_prefix_spelled_through_a_symlink_from_its_own_python(healthy: Path, tmp_path: Path) -> None:
    """envdoctor inside the env, --prefix spelled through a link (/home -> /gpfs/home on clusters).

    The interpreter's sys.path keeps the link, the prefix is resolved: conda's own dist-infos must
    still be recognised as conda's, or every conda package reads as reinstalled by pip (PKG001).
    """
    import packaging

    import envdoctor

    link = tmp_path / "link"
    link.symlink_to(healthy)
    # The env's python runs envdoctor itself: its code and its one dependency come on PYTHONPATH.
    path = os.pathsep.join(dict.fromkeys(str(Path(m.__file__).parent.parent) for m in (envdoctor, packaging)))
    env = clean_env(tmp_path, PYTHONPATH=path)
    proc = subprocess.run([str(link / "bin" / "python"), "-m", "envdoctor", "report", "--json", "--no-loader",
                           "--select", "PKG001", "PKG002", "PKG005", "--prefix", str(link)],
                          capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    report = json_report(proc)
    assert report["target"]["is_current"] is True
    assert report["findings"] == []
    dists = {d["key"]: d for d in report["facts"]["packages"]["distributions"] if d["location"] == "env"}
    assert dists["numpy"]["conda_record"] == "numpy" and dists["torch"]["conda_record"] == "pytorch"


def test_pip_over_conda_is_pkg001_with_both_versions(pip_over_conda: Path, tmp_path: Path) -> None:
    report = report_for(pip_over_conda, tmp_path)
    assert rule_ids(report) == ["PKG001"]
    hit = only(report, "PKG001")
    ev = hit["evidence"]
    assert (ev["package"], ev["conda_version"], ev["installed_version"], ev["installer"]) == \
        ("numpy", "1.26.4", "2.1.3", "pip")
    assert ev["channel"] == "conda-forge"
    assert hit["severity"] == "error"
    assert hit["fix"] == (f"{pip_over_conda}/bin/python3 -m pip uninstall -y numpy && "
                          f"conda install -p {pip_over_conda} --force-reinstall numpy=1.26.4")


def test_own_site_packages_on_pythonpath_is_still_the_environment(pip_over_conda: Path, tmp_path: Path) -> None:
    # `export PYTHONPATH=$CONDA_PREFIX/lib/python3.X/site-packages`, common in job scripts: the env's
    # own packages are not "copies outside the environment", and pip over conda is still PKG001.
    own = str(pip_over_conda / SITE)
    env = clean_env(tmp_path, PYTHONPATH=os.pathsep.join(p for p in (own, os.environ.get("PYTHONPATH")) if p))
    report = report_for(pip_over_conda, tmp_path, env=env)
    sites = {d["path"]: d["location"] for d in report["facts"]["packages"]["site_dirs"]}
    assert sites[own] == "env"
    assert rule_ids(report) == ["PKG001"]
    assert only(report, "PKG001")["evidence"]["installed_version"] == "2.1.3"


def test_ignore_installed_leaves_two_dist_infos_pkg002(ignore_installed: Path, tmp_path: Path) -> None:
    report = report_for(ignore_installed, tmp_path)
    assert rule_ids(report) == ["PKG002"]
    ev = only(report, "PKG002")["evidence"]
    assert ev["package"] == "numpy" and sorted(ev["versions"]) == ["1.26.4", "2.1.3"]
    assert sorted(ev["installers"]) == ["conda", "pip"]
    assert ev["conda_version"] == "1.26.4"
    assert ev["owners"] == [{"tool": "conda", "package": "numpy", "source": "conda-meta", "editable": False},
                            {"tool": "pip", "package": None, "source": "INSTALLER", "editable": False}] or \
        ev["owners"] == [{"tool": "pip", "package": None, "source": "INSTALLER", "editable": False},
                         {"tool": "conda", "package": "numpy", "source": "conda-meta", "editable": False}]
    # One folder, two versions: the files are mixed, whatever `import` finds.
    assert only(report, "PKG002")["severity"] == "error" and ev["same_folder"] is True
    finding = only(report, "PKG002")
    stray = f"{ignore_installed}/{SITE}/numpy-2.1.3.dist-info"
    assert finding["fix"] == (f"mv {stray} {stray}.envdoctor-aside && conda install -p {ignore_installed} "
                              "--force-reinstall numpy=1.26.4   # keeps conda's 1.26.4")
    assert finding["fix_steps"] == [
        {"tool": "file", "move": stray, "to": stray + ".envdoctor-aside"},
        {"tool": "conda", "argv": ["conda", "install", "-p", str(ignore_installed), "--force-reinstall", "numpy=1.26.4"]}]


def test_user_site_shadows_the_prefix_pkg006(conda_world: World, tmp_path_factory: pytest.TempPathFactory,
                                             tmp_path: Path) -> None:
    prefix = conda_world.scenario("user-site", lambda p: conda_world.make_prefix(p, BASE))
    user_base = tmp_path_factory.mktemp("userbase")
    conda_world.pip(prefix, "install", "--user", str(conda_world.wheel("numpy", "2.1.3")),
                    env={"PYTHONUSERBASE": str(user_base)})
    report = report_for(prefix, tmp_path, env=clean_env(tmp_path, PYTHONUSERBASE=str(user_base)))
    assert rule_ids(report) == ["PKG006"]
    ev = only(report, "PKG006")["evidence"]
    user_site = user_base / "lib" / f"python{PY}" / "site-packages"
    assert ev == {"package": "numpy", "version": "1.26.4", "import_name": "numpy",
                  "shadow_path": str(user_site / "numpy"), "shadow_location": "user",
                  "shadow_version": "2.1.3", "env_path": f"{prefix}/{SITE}/numpy-1.26.4.dist-info"}
    # Without the user base the same prefix is clean: the finding is about the shadow, not the env.
    assert rule_ids(report_for(prefix, tmp_path)) == []


def test_pythonpath_and_working_directory_shadow_pkg006(healthy: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "PIL").mkdir(parents=True)
    (checkout / "PIL" / "__init__.py").write_text("")
    (tmp_path / "namespace_only" / "numpy").mkdir(parents=True)  # no __init__: cannot shadow
    pythonpath = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(checkout),
                                               str(tmp_path / "namespace_only")]))
    report = report_for(healthy, tmp_path, env=clean_env(tmp_path, PYTHONPATH=pythonpath))
    assert rule_ids(report) == ["PKG006"]
    ev = only(report, "PKG006")["evidence"]
    assert (ev["package"], ev["shadow_location"], ev["shadow_path"]) == ("pillow", "pythonpath", str(checkout / "PIL"))

    workdir = tmp_path / "work"
    (workdir / "cv2").mkdir(parents=True)
    (workdir / "cv2" / "__init__.py").write_text("")
    report = report_for(healthy, tmp_path, cwd=str(workdir))
    assert rule_ids(report) == ["PKG006"]
    ev = only(report, "PKG006")["evidence"]
    assert (ev["package"], ev["shadow_location"], ev["import_name"]) == ("opencv-python", "cwd", "cv2")


def test_mixed_channels_chn001(conda_world: World, tmp_path: Path) -> None:
    prefix = conda_world.scenario("mixed-channels", lambda p: conda_world.make_prefix(
        p, BASE + ["pillow >=1"], channels={"python": PKGS_MAIN}))
    report = report_for(prefix, tmp_path)
    assert rule_ids(report) == ["CHN001"]
    hit = only(report, "CHN001")
    assert hit["evidence"]["families"] == {"conda-forge": ["numpy 1.26.4", "pillow 10.2.0"],
                                           "defaults": [f"python {PY_FULL}"]}
    assert hit["evidence"]["keep_family"] == "conda-forge"
    assert hit["fix"].startswith(f"conda install -p {prefix} --override-channels -c conda-forge --force-reinstall python")


def test_pytorch_from_retired_channel_chn002(conda_world: World, tmp_path: Path) -> None:
    prefix = conda_world.scenario("pytorch-channel", lambda p: conda_world.make_prefix(
        p, BASE + ["pytorch >=1"], channels={"pytorch": PYTORCH}))
    report = report_for(prefix, tmp_path)
    assert rule_ids(report) == ["CHN002"]
    ev = only(report, "CHN002")["evidence"]
    assert (ev["package"], ev["version"], ev["channel"], ev["last_release"]) == ("pytorch", "2.5.1", "pytorch", "2.5.1")
    assert "-c conda-forge pytorch" in only(report, "CHN002")["fix"]


def test_mkl_beside_openblas_chn003(conda_world: World, tmp_path: Path) -> None:
    prefix = conda_world.scenario("mixed-blas", lambda p: conda_world.make_prefix(
        p, BASE + ["mkl >=1", "libopenblas >=0"]))
    report = report_for(prefix, tmp_path)
    assert rule_ids(report) == ["CHN003"]
    ev = only(report, "CHN003")["evidence"]
    assert ev["implementations"] == {"mkl": ["mkl 2023.1.0"], "openblas": ["libopenblas 0.3.21"]}
    assert ev["keep"] == "mkl"
    assert only(report, "CHN003")["fix"].startswith(f"conda install -p {prefix} 'libblas=*=*mkl' && conda remove -p {prefix} libopenblas")


def test_mixed_blas_keeps_the_implementation_other_packages_link_chn003(conda_world: World, tmp_path: Path) -> None:
    # Removing libopenblas would make conda remove sparselib with it: mkl is the one to go.
    prefix = conda_world.scenario("mixed-blas-linked", lambda p: conda_world.make_prefix(
        p, BASE + ["mkl >=1", "libopenblas >=0", "sparselib >=1"]))
    report = report_for(prefix, tmp_path)
    assert rule_ids(report) == ["CHN003"]
    hit = only(report, "CHN003")
    assert hit["evidence"]["keep"] == "openblas"
    assert hit["evidence"]["needed_by"] == {"openblas": ["sparselib"]}
    assert hit["fix"] == (f"conda install -p {prefix} 'libblas=*=*openblas' && conda remove -p {prefix} mkl"
                          "   # one BLAS (openblas) for every package")


def _replace(path: Path, data: bytes) -> None:
    # Prefix files are hard links into the package cache: never write through them.
    path.unlink()
    path.write_bytes(data)


def test_deleted_and_rewritten_files_pkg005(conda_world: World, tmp_path: Path) -> None:
    def build(p: Path) -> None:
        conda_world.make_prefix(p, BASE)
        site = p / SITE / "numpy"
        (site / "linalg.py").unlink()
        _replace(site / "core.py", b"# edited by hand\n")
        original = (site / "__init__.py").read_bytes()
        _replace(site / "__init__.py", original.replace(b"1.26.4", b"9.99.9"))  # same size, other bytes
    prefix = conda_world.scenario("altered-files", build)
    report = report_for(prefix, tmp_path)
    assert rule_ids(report) == ["PKG005"]
    ev = only(report, "PKG005")["evidence"]
    assert ev["package"] == "numpy" and ev["version"] == "1.26.4" and ev["checked_by"] == "size"
    assert ev["missing"] == [f"{SITE}/numpy/linalg.py"]
    assert ev["changed"] == [f"{SITE}/numpy/core.py"]
    assert only(report, "PKG005")["fix"] == f"conda install -p {prefix} --force-reinstall numpy=1.26.4=py311_0"

    deep = report_for(prefix, tmp_path, "--deep")
    ev = only(deep, "PKG005")["evidence"]
    assert ev["checked_by"] == "sha256"
    assert sorted(ev["changed"]) == [f"{SITE}/numpy/__init__.py", f"{SITE}/numpy/core.py"]


def test_corrupt_metadata_pkg009_and_the_rest_still_runs(conda_world: World, tmp_path: Path) -> None:
    def build(p: Path) -> None:
        conda_world.make_prefix(p, BASE + ["pillow >=1", "requests >=1", "urllib3 >=1"])
        conda_world.pip(p, "install", str(conda_world.wheel("numpy", "2.1.3")),
                        str(conda_world.wheel("trainkit", "1.0")))
        meta = p / "conda-meta"
        pillow = next(meta.glob("pillow-*.json"))
        pillow.write_text(pillow.read_text()[:200])                        # truncated
        next(meta.glob("urllib3-*.json")).write_bytes(b"\x00\xffnot json")  # not JSON at all
        requests = next(meta.glob("requests-*.json"))
        data = json.loads(requests.read_text())
        data["files"] = 5                                                  # wrong type
        requests.write_text(json.dumps(data))
        (p / "conda-meta" / "broken-list-1.0-0.json").write_text("[1, 2]")   # not an object
        (p / SITE / "trainkit-1.0.dist-info" / "METADATA").unlink()         # dist-info without METADATA
    prefix = conda_world.scenario("corrupt-metadata", build)
    proc = run_cli("report", "--json", "--no-loader", "--select", *FAMILIES, "--prefix", str(prefix),
                   env=clean_env(tmp_path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    report = json_report(proc)
    assert report["errors"] == []
    assert rule_ids(report) == ["PKG001", "PKG009", "PKG009", "PKG009", "PKG009", "PKG009"]
    by_path = {Path(f["evidence"]["path"]).name: f["evidence"] for f in findings(report, "PKG009")}
    assert set(by_path) == {"pillow-10.2.0-py0.json", "urllib3-2.2.1-py0.json", "requests-2.31.0-py0.json",
                            "broken-list-1.0-0.json", "trainkit-1.0.dist-info"}
    assert by_path["pillow-10.2.0-py0.json"]["reason"].startswith("not valid JSON")
    assert by_path["urllib3-2.2.1-py0.json"]["reason"].startswith("not valid JSON")
    assert by_path["requests-2.31.0-py0.json"]["reason"] == "field 'files' is int, expected a list of paths"
    assert by_path["broken-list-1.0-0.json"]["reason"] == "the record is a JSON list, not an object"
    assert by_path["trainkit-1.0.dist-info"]["reason"] == "METADATA is missing"
    fixes = {Path(f["evidence"]["path"]).name: f["fix"] for f in findings(report, "PKG009")}
    assert fixes["pillow-10.2.0-py0.json"].endswith(f"conda install -p {prefix} --force-reinstall pillow=10.2.0=py0")
    assert fixes["trainkit-1.0.dist-info"].endswith("-m pip install --force-reinstall --no-deps trainkit==1.0")
    assert only(report, "PKG001")["evidence"]["installed_version"] == "2.1.3"


def test_clashing_distributions_pkg004(conda_world: World, tmp_path: Path) -> None:
    def build(p: Path) -> None:
        conda_world.make_prefix(p, BASE + ["pytorch >=1", "cudatoolkit >=1", "pillow >=1"])
        conda_world.pip(p, "install", str(conda_world.wheel("torch", "2.6.0")),
                        str(conda_world.wheel("nvidia-cublas-cu12", "12.4.5.8", modules=["nvidia_cublas"])),
                        str(conda_world.wheel("pillow-simd", "9.0.0.post1", modules=["PIL"])))
    prefix = conda_world.scenario("clashes", build)
    report = report_for(prefix, tmp_path)
    assert rule_ids(report) == ["PKG004", "PKG004", "PKG004"]
    by_clash = {f["evidence"]["clash"]: f for f in findings(report, "PKG004")}
    pillow = by_clash["pillow"]["evidence"]
    assert sorted((d["package"], d["version"], d["installer"]) for d in pillow["installed"]) == \
        [("pillow", "10.2.0", "conda"), ("pillow-simd", "9.0.0.post1", "pip")]
    assert pillow["keep"] == "pillow-simd"
    # conda's pillow is removed by conda (only it), pip's twin is then reinstalled whole.
    assert by_clash["pillow"]["fix"] == (f"conda remove -p {prefix} --force pillow && {prefix}/bin/python3 -m pip "
                                         "install --force-reinstall --no-deps pillow-simd==9.0.0.post1")
    torch = by_clash["torch"]["evidence"]
    assert (torch["conda_package"], torch["conda_version"], torch["installed"][0]["version"]) == ("pytorch", "2.5.1", "2.6.0")
    assert by_clash["torch"]["fix"].endswith(f"-m pip uninstall -y torch && conda install -p {prefix} --force-reinstall pytorch=2.5.1")
    cuda = by_clash["cuda"]["evidence"]
    assert cuda["conda_package"] == "cudatoolkit" and cuda["installed"][0]["package"] == "nvidia-cublas-cu12"
    # torch now comes from pip, so the conda runtime is the one to drop.
    assert by_clash["cuda"]["fix"].startswith(f"conda remove -p {prefix} cudatoolkit")


def _make_venv(pip: Path, path: Path, *wheels: Path) -> Path:
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    if wheels:
        # pip from ensurepip's wheel (bundled_pip), run by the venv's own interpreter: no pip needed anywhere else.
        run_bundled_pip(pip, path, "install", "--no-index", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
                        *map(str, wheels), env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return path


def test_venv_without_conda_meta(conda_world: World, bundled_pip: Path, tmp_path: Path) -> None:
    w = conda_world
    healthy_venv = w.scenario("venv-healthy", lambda p: _make_venv(bundled_pip, p, w.wheel("numpy", "1.26.4")))
    report = report_for(healthy_venv, tmp_path)
    assert report["target"]["kind"] == "venv"
    assert rule_ids(report) == []
    assert report["facts"]["packages"]["conda"] == {"present": False, "records": [], "checked_by": "size"}

    broken = w.scenario("venv-broken", lambda p: _make_venv(
        bundled_pip, p, w.wheel("numpy", "1.26.4"), w.wheel("trainkit", "1.0", requires=(
            "numpy>=2", "missingdep>=1", 'winonly; sys_platform == "win32"', 'py2only; python_version < "3"',
            'gpu-extra; extra == "gpu"')),
        w.wheel("opencv-python", "4.9.0.80", modules=["cv2"]),
        w.wheel("opencv-python-headless", "4.9.0.80", modules=["cv2"])))
    report = report_for(broken, tmp_path)
    assert rule_ids(report) == ["PKG003", "PKG003", "PKG004"]
    pkg003 = {f["evidence"]["dependency"]: f for f in findings(report, "PKG003")}
    assert pkg003["numpy"]["evidence"] == {"package": "trainkit", "version": "1.0", "requirement": "numpy>=2",
                                           "dependency": "numpy", "installed_version": "1.26.4",
                                           "problem": "out-of-range", "owner": "pip", "dependency_owner": "pip"}
    # The venv has no pip (made --without-pip): ensurepip first, never a bare `-m pip` that cannot run.
    python = f"{broken}/bin/python3"
    assert pkg003["numpy"]["fix"] == f"{python} -m ensurepip && {python} -m pip install 'numpy>=2'"
    assert pkg003["numpy"]["fix_steps"] == [{"tool": "pip", "argv": [python, "-m", "ensurepip"]},
                                            {"tool": "pip", "argv": [python, "-m", "pip", "install", "numpy>=2"]}]
    assert pkg003["missingdep"]["evidence"]["problem"] == "missing"
    ev = only(report, "PKG004")["evidence"]
    assert ev["clash"] == "opencv" and ev["keep"] == "opencv-python-headless"
    assert only(report, "PKG004")["fix"] == (
        f"{python} -m ensurepip && {python} -m pip uninstall -y opencv-python && "
        f"{python} -m pip install --force-reinstall --no-deps opencv-python-headless==4.9.0.80")


def test_pixi_style_prefix(conda_world: World, tmp_path: Path) -> None:
    def build(p: Path) -> None:
        conda_world.make_prefix(p, BASE + ["pillow >=1"])
        (p / "conda-meta" / "pixi").write_text(json.dumps({"environment_name": "default"}))
        conda_world.pip(p, "install", str(conda_world.wheel("trainkit", "1.0")))
        conda_world.pip(p, "install", str(conda_world.wheel("numpy", "2.1.3")))
    prefix = conda_world.scenario("pixi/.pixi/envs/default", build)
    report = report_for(prefix, tmp_path)
    assert report["target"]["kind"] == "pixi"
    assert rule_ids(report) == ["PKG001"]
    hit = only(report, "PKG001")
    workspace = prefix.parent.parent.parent
    assert hit["fix"] == (f"{prefix}/bin/python3 -m pip uninstall -y numpy && "
                          f"pixi reinstall --manifest-path {workspace} -e default numpy")


def test_named_environment_from_environments_txt(healthy: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".conda").mkdir(parents=True)
    (home / ".conda" / "environments.txt").write_text(f"/nonexistent/envs/other\n{healthy}\n")
    proc = run_cli("report", "--json", "--no-loader", "--select", *FAMILIES, "-n", healthy.name,
                   env=clean_env(tmp_path, HOME=str(home)))
    report = json_report(proc)
    assert report["target"]["prefix"] == str(healthy)
    assert rule_ids(report) == []
    proc = run_cli("report", "--json", "--no-loader", "-n", "no-such-env", env=clean_env(tmp_path, HOME=str(home)))
    assert proc.returncode == 2 and "no conda environment named 'no-such-env'" in proc.stderr


def test_spec_drift_against_environment_yml(healthy: Path, tmp_path: Path) -> None:
    spec = tmp_path / "environment.yml"
    spec.write_text(
        "name: train\n"
        "channels:\n  - pkgs/main   # the file wants defaults\n"
        "dependencies:\n"
        f"  - python={PY}\n"
        "  - numpy=1.25.0\n"
        "  - conda-forge::pillow=10.2\n"
        "  - scipy>=1.11\n"
        "  - pip\n"
        "  - pip:\n"
        "    - trainkit==1.0\n"
        "    - 'urllib3>=2'\n")
    report = report_for(healthy, tmp_path, "--against", str(spec))
    drift = {(f["evidence"]["package"], f["evidence"]["problem"]): f for f in findings(report, "PKG007")}
    assert set(drift) == {("python", "channel"), ("numpy", "version"), ("scipy", "missing"),
                          ("pip", "channel"), ("trainkit", "missing")}
    assert rule_ids(report) == ["PKG007"] * 5
    numpy = drift[("numpy", "version")]
    assert numpy["evidence"]["wanted"] == "numpy=1.25.0" and numpy["evidence"]["installed_version"] == "1.26.4"
    assert numpy["fix"] == f"conda install -p {healthy} numpy=1.25.0"
    channel = drift[("python", "channel")]["evidence"]
    assert channel["installed_channel"] == "conda-forge" and channel["wanted_channel"] == ["pkgs/main"]
    assert drift[("trainkit", "missing")]["fix"] == f"{healthy}/bin/python3 -m pip install trainkit==1.0"

    reqs = tmp_path / "requirements.txt"
    (tmp_path / "base.txt").write_text("numpy==1.26.4\n")
    reqs.write_text("-r base.txt\n--index-url https://example.invalid/simple\npillow>=11 ; python_version >= '3'\n"
                    "oldpkg==1.0 ; python_version < '3'\n")
    report = report_for(healthy, tmp_path, "--against", str(reqs))
    assert rule_ids(report) == ["PKG007"]
    ev = only(report, "PKG007")["evidence"]
    assert (ev["package"], ev["problem"], ev["installed_version"]) == ("pillow", "version", "10.2.0")


def test_missing_against_file_is_a_clear_error_not_a_crash(healthy: Path, tmp_path: Path) -> None:
    proc = run_cli("report", "--json", "--no-loader", "--select", "PKG007", "--prefix", str(healthy),
                   "--against", str(tmp_path / "nope.yml"), env=clean_env(tmp_path))
    # Refused up front in one line: a check without its --against file would skip PKG007 silently.
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert "nope.yml" in line and "does not exist" in line


def _tree_digest(root: Path) -> dict[str, str]:
    digest = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                digest[rel] = "link:" + os.readlink(path)
            elif path.is_file():
                st = path.stat()
                digest[rel] = f"{st.st_size}:{st.st_mtime_ns}:" + hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                digest[rel] = "dir"
    return digest


def test_envdoctor_never_writes_into_the_inspected_prefix(conda_world: World, tmp_path: Path) -> None:
    prefix = conda_world.make_prefix(tmp_path / "untouched", BASE + ["hooky >=1", "pytorch >=1"])
    conda_world.pip(prefix, "install", str(conda_world.wheel("trainkit", "1.0")))
    # The .pth imports a module at interpreter start-up: without -B its bytecode would land here.
    assert (prefix / SITE / "hooky.pth").exists()
    before = _tree_digest(prefix)
    env = clean_env(tmp_path)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # this machine sets it globally, which would hide the defect
    proc = run_envdoctor("report", "--json", "--no-loader", "--deep", "--prefix", str(prefix), env=env)
    assert proc.returncode in (0, 1), proc.stderr
    json_report(proc)
    after = _tree_digest(prefix)
    assert after == before
    assert not list(prefix.rglob("__pycache__/hooky_init*.pyc"))


def test_the_pth_hook_would_leave_bytecode_without_b(conda_world: World, tmp_path: Path) -> None:
    """The write test above is meaningful: the same prefix, started without -B, gains __pycache__."""
    prefix = conda_world.make_prefix(tmp_path / "control", BASE + ["hooky >=1"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([str(prefix / "bin" / "python"), "-c", "pass"], check=True, env=env, timeout=60)
    assert list(prefix.rglob("__pycache__/hooky_init*.pyc"))


def test_prefix_without_an_interpreter_is_still_read(conda_world: World, tmp_path: Path) -> None:
    """A conda prefix with no python (a broken env, a library-only env): records are still judged."""
    prefix = conda_world.scenario("no-python", lambda p: conda_world.make_prefix(p, ["mkl >=1", "libopenblas >=0"]))
    report = report_for(prefix, tmp_path)
    assert report["target"]["python"] is None
    assert rule_ids(report) == ["CHN003"]
    assert report["facts"]["packages"]["distributions"] == []


def test_a_chroots_venv_whose_python_resolves_to_the_host_is_refused_in_one_line(tmp_path: Path) -> None:
    """Read from the host, a chroot venv's `bin/python -> /usr/bin/python3` is the host's interpreter."""
    chroot = tmp_path / "chroot"
    (chroot / "etc").mkdir(parents=True)
    (chroot / "etc" / "os-release").write_text('ID=debian\n')
    (chroot / "usr" / "bin").mkdir(parents=True)
    venv = chroot / "opt" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    os.symlink(os.path.realpath(sys.executable), venv / "bin" / "python3")
    proc = run_cli("check", "--prefix", str(venv), "--no-loader")
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert f"outside the root file system {chroot}" in line and "chroot" in line
    # Inside its own root it is fine: the Debian-style roots of the system tests keep their interpreter inside.
    from envdoctor.facts.target import interpreter_outside_root

    (chroot / "usr" / "bin" / "python3").write_bytes(b"")
    assert interpreter_outside_root(venv, chroot / "usr" / "bin" / "python3") is None

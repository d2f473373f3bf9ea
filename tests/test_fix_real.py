"""`envdoctor fix` proven on real broken environments built here, offline, with the real tools.

A `pip install --user` numpy shadowing Debian's (a Debian-style root with a real dpkg
database, the user site through PYTHONUSERBASE), a venv doubled by `pip install
--ignore-installed` whose old version left a binary behind, a fix whose verification
fails, two fixes at once and a fix killed with SIGKILL at every boundary between its
steps. Each time the fix runs for real (`python -m envdoctor fix`, stdin not a terminal),
its verification imports in the target, and undo's full-tree listing equals the one
taken before — compared here with an independent sha256 listing of the same trees.
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from condafixtures import module, write_wheel
from envs.systemroot import SystemRoot, quiet_env, system_python_version
from fixenvs import EXT, copy_venv, doubled_pip_venv, run_ok, stale_binary_numpy_wheels, tree_digest
from support import run_cli

pytestmark = pytest.mark.slow

needs_debian = pytest.mark.skipif(system_python_version() is None,
                                  reason="needs the machine's Debian python3 with python3-pip")


def envdoctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "envdoctor", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def ignore_installed_venv(tmp_path_factory: pytest.TempPathFactory, pip_venv_template: Path) -> Path:
    """numpy 1.26.4, then `pip install --ignore-installed` numpy 2.2.6 over it: two dist-infos, mixed files."""
    root = tmp_path_factory.mktemp("ignore-installed")
    return doubled_pip_venv(pip_venv_template, root, *stale_binary_numpy_wheels(root / "wheels"), "--no-compile")


def multiarray(python: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-B", "-c", "import numpy.core._multiarray_umath as m; print(m.__file__)"],
                          capture_output=True, text=True, env=env, timeout=60)


def test_ignore_installed_fix_leaves_no_file_of_the_old_version_and_undo_is_exact(
        ignore_installed_venv: Path, tmp_path: Path, offline: dict[str, str]) -> None:
    venv = copy_venv(ignore_installed_venv, tmp_path)
    stale_binary_numpy_wheels(Path(offline["PIP_FIND_LINKS"]))
    python = str(venv / "bin" / "python")
    [site] = venv.glob("lib/python*/site-packages")
    stale = site / "numpy" / "core" / f"_multiarray_umath{EXT}"
    assert stale.is_file() and multiarray(python, offline).returncode != 0  # the old binary wins the import
    pristine = tree_digest(venv)

    done = envdoctor(offline, "fix", "--prefix", str(venv), "--select", "PKG002", "--yes", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert [f["rule"] for f in result["outcome"]["fixed"]] == ["PKG002"]
    verification = result["verification"]
    assert verification["ok"] and verification["removed"] == [str(stale)]
    assert verification["imported"] == {"numpy": str(site / "numpy" / "__init__.py")}
    # No file that only 1.26.4's RECORD lists is left under numpy/, and the import loads NumPy 2's file.
    record = (site / "numpy-1.26.4.dist-info.envdoctor-aside" / "RECORD").read_text()
    new_record = (site / "numpy-2.2.6.dist-info" / "RECORD").read_text()
    only_old = {line.split(",")[0] for line in record.splitlines()} - {line.split(",")[0] for line in new_record.splitlines()}
    assert f"numpy/core/_multiarray_umath{EXT}" in only_old
    assert not [p for p in only_old if p.startswith("numpy/") and (site / p).exists()]
    loaded = multiarray(python, offline)
    assert loaded.returncode == 0 and loaded.stdout.strip() == str(site / "numpy" / "core" / "_multiarray_umath.py")
    journal = Path(result["journal"])
    assert list((journal / "leftovers").iterdir())

    undone = envdoctor(offline, "fix", "--undo", "--prefix", str(venv), "--format", "json")
    said = json.loads(undone.stdout)
    assert undone.returncode == 0 and said["before_hash"] == said["after_hash"], undone.stdout
    assert tree_digest(venv) == pristine


def test_a_fix_that_fails_verification_is_rolled_back(ignore_installed_venv: Path, tmp_path: Path,
                                                       offline: dict[str, str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A reinstall that leaves `import numpy` broken: the fix says why and puts everything back."""
    from envdoctor.fix import command
    from envdoctor.model import FixStep
    from test_fix_roundtrip import fix_args, replacing_steps

    venv = copy_venv(ignore_installed_venv, tmp_path)
    broken = write_wheel(Path(offline["PIP_FIND_LINKS"]), "numpy", "2.2.7",
                         {"numpy/__init__.py": b"raise ImportError('this numpy build is broken')\n"})
    python = str(venv / "bin" / "python")
    # A link planted where the old rollback wrote `numpy/__init__.py` before renaming it: never written through.
    outside = tmp_path / "outside-secret"
    outside.write_bytes(b"not the environment's\n")
    outside.chmod(0o600)
    [init] = venv.glob("lib/python*/site-packages/numpy/__init__.py")
    Path(str(init) + ".envdoctor-restoring").symlink_to(outside)
    pristine = tree_digest(venv)
    steps = (FixStep.command("pip", python, "-m", "pip", "install", "--no-deps", str(broken)),)
    code = command.run(fix_args(venv, "PKG002", yes=True, format="text"), replacing_steps("PKG002", lambda f: steps))
    assert code == 1
    said = capsys.readouterr().out
    assert "verification failed: `import numpy` fails" in said and "this numpy build is broken" in said, said
    assert "the fix failed its verification, so it was undone" in said and "rolled back: restored:" in said
    assert tree_digest(venv) == pristine
    assert outside.read_bytes() == b"not the environment's\n" and outside.stat().st_mode & 0o777 == 0o600
    from envdoctor.fix.undo import latest

    assert latest(venv) is None  # the rollback settled the journal: nothing left to undo


@needs_debian
def test_undo_of_a_user_site_uninstall_puts_the_user_site_back(tmp_path: Path, offline: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """PKG006: pip's user-site numpy 2.2.6 hides Debian's 1.24.2. The fix uninstalls the user copy; undo must
    bring back the user site's files (not Debian's egg-info, and not by reinstalling anyone's version)."""
    root = SystemRoot(tmp_path / "root")
    root.apt_install("python3-numpy", "numpy", "1.24.2", {"numpy/__init__.py": b'__version__ = "1.24.2"\n'},
                     egg_info=True)
    userbase = tmp_path / "userbase"
    monkeypatch.setenv("PYTHONUSERBASE", str(userbase))
    env = {**offline, "PYTHONUSERBASE": str(userbase)}
    wheel = write_wheel(tmp_path / "wheels", "numpy", "2.2.6", module("numpy", "2.2.6"))
    run_ok([str(root.python), "-m", "pip", "install", "--user", "--break-system-packages", "--no-index", str(wheel)],
           quiet_env(env, PYTHONUSERBASE=str(userbase)))
    user_site = next(userbase.glob("lib/python*/site-packages"))
    assert (user_site / "numpy" / "__init__.py").is_file()
    pristine = (tree_digest(root.root), tree_digest(userbase))

    done = envdoctor(env, "fix", "--prefix", str(root.usr), "--select", "PKG006", "--yes", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert not (user_site / "numpy").exists()
    assert result["verification"]["imported"]["numpy"] == str(root.dist_packages / "numpy" / "__init__.py")
    manifest = json.loads((Path(result["journal"]) / "manifest.json").read_text())
    assert str(user_site) in manifest["before"]["roots"]

    undone = envdoctor(env, "fix", "--undo", "--prefix", str(root.usr), "--format", "json")
    said = json.loads(undone.stdout)
    assert undone.returncode == 0 and said["problems"] == [], undone.stdout
    assert (tree_digest(root.root), tree_digest(userbase)) == pristine


# A real `envdoctor fix`, made to stop at its N-th boundary between two changes (envdoctor.fix.journal.boundary:
# the before-state kept, each step ended, the after-state recorded, each left-over file moved into the journal).
# "kill": SIGKILL itself there; "pause": say so and wait for stdin (a fix in progress, for the lock test).
_DRIVER = r"""
import os, signal, sys
from envdoctor.fix import journal
seen = [0]
def stop(what):
    seen[0] += 1
    if seen[0] == int(os.environ["STOP_AT"]):
        if os.environ["STOP_HOW"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        print("paused", file=sys.stderr, flush=True)
        sys.stdin.readline()
journal.BOUNDARY_HOOKS.append(stop)
from envdoctor.cli import main
sys.exit(main(sys.argv[1:]))
"""


def stopped_fix(env: dict[str, str], venv: Path, at: int, how: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _DRIVER, "fix", "--prefix", str(venv), "--select", "PKG002",
                             "--yes"], env={**env, "STOP_AT": str(at), "STOP_HOW": how}, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_sigkill_at_every_step_boundary_then_undo_restores_the_tree(ignore_installed_venv: Path, tmp_path: Path,
                                                                    offline: dict[str, str]) -> None:
    venv = copy_venv(ignore_installed_venv, tmp_path)
    stale_binary_numpy_wheels(Path(offline["PIP_FIND_LINKS"]))
    pristine = tree_digest(venv)
    killed_at = []
    for at in range(1, 10):
        proc = stopped_fix(offline, venv, at, "kill")
        proc.communicate(timeout=600)
        if proc.returncode != -signal.SIGKILL:
            assert proc.returncode == 0  # ran to the end: every boundary was tried
            break
        killed_at.append(at)
        # The fix is killed for real (a child); the undo that follows is the command run in this process.
        undone = run_cli("fix", "--undo", "--prefix", str(venv))
        assert undone.returncode == 0 and "Traceback" not in undone.stderr, undone.stdout + undone.stderr
        assert tree_digest(venv) == pristine, f"killed at boundary {at}"
    # before step 1, between the move and the pip step, after the steps, after the left-over binary is moved
    assert len(killed_at) >= 5, killed_at
    assert run_cli("fix", "--undo", "--prefix", str(venv)).returncode == 0 and tree_digest(venv) == pristine


def test_a_second_fix_while_one_runs_exits_2_naming_the_lock(ignore_installed_venv: Path, tmp_path: Path,
                                                             offline: dict[str, str]) -> None:
    venv = copy_venv(ignore_installed_venv, tmp_path)
    stale_binary_numpy_wheels(Path(offline["PIP_FIND_LINKS"]))
    first = stopped_fix(offline, venv, 2, "pause")  # stopped between its two steps
    try:
        assert first.stderr is not None and first.stderr.readline().strip() == "paused"
        during = tree_digest(venv)
        second = envdoctor(offline, "fix", "--prefix", str(venv), "--select", "PKG002", "--yes")
        lock = tmp_path / "cache" / "envdoctor" / "journal" / "fix.lock"
        assert second.returncode == 2 and str(lock) in second.stderr and f"pid {first.pid}" in second.stderr, \
            second.stderr
        assert envdoctor(offline, "fix", "--undo", "--prefix", str(venv)).returncode == 2  # undo waits its turn too
        assert tree_digest(venv) == during
    finally:
        out, err = first.communicate("\n", timeout=600)
    assert first.returncode == 0, out + err


@needs_debian
def test_a_system_site_venv_reads_its_base_pth_owners_and_its_fix_roots_hold_the_base_site(
        tmp_path: Path) -> None:
    """The base's distutils-precedence.pth is python3-setuptools' (dpkg), so PKG011 is quiet about it, as it is
    with /usr as the target; an unowned .pth beside it still fires. The base site is a root a fix keeps."""
    from envdoctor.config import Config
    from envdoctor.engine import run_check
    from envdoctor.fix.state import write_roots

    root = SystemRoot(tmp_path / "root")
    hook = b"import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'\n"
    root.apt_install("python3-setuptools", "setuptools", "66.1.1",
                     {"setuptools/__init__.py": b"", "distutils-precedence.pth": hook})
    (root.dist_packages / "stray.pth").write_bytes(b"import os\n")
    venv = tmp_path / "venv"
    run_ok([str(root.python), "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], quiet_env())
    report = run_check(Config(prefix=str(venv), no_loader=True, select=("PKG011",)))
    assert [f.evidence["path"] for f in report.by_rule("PKG011")] == [str(root.dist_packages / "stray.pth")]
    system = run_check(Config(prefix=str(root.usr), no_loader=True, select=("PKG011",)))
    assert [f.evidence["path"] for f in system.by_rule("PKG011")] == [str(root.dist_packages / "stray.pth")]
    roots = write_roots(report.target)
    assert str(venv) in roots and str(root.dist_packages) in roots


def test_pkg002_names_the_copy_whose_files_import_runs(tmp_path: Path, offline: dict[str, str]) -> None:
    """A uv venv with PyYAML 6.0.1's files and a stray 6.0.2 dist-info beside its own: `import yaml` runs 6.0.1.
    The fix (with uv: the venv has no pip) is verified by import and undone byte for byte."""
    from envdoctor.config import Config
    from envdoctor.engine import run_check
    from fixenvs import make_uv_venv, uv_executable

    wheels = Path(offline["UV_FIND_LINKS"])
    for version in ("6.0.1", "6.0.2"):
        write_wheel(wheels, "PyYAML", version, {**module("yaml", version), "_yaml/__init__.py": f"# {version}\n".encode()})
    venv, other = make_uv_venv(tmp_path / "uvenv", offline), make_uv_venv(tmp_path / "other", offline)
    run_ok([uv_executable(), "pip", "install", "--python", str(venv), "PyYAML==6.0.1"], offline)
    run_ok([uv_executable(), "pip", "install", "--python", str(other), "PyYAML==6.0.2"], offline)
    [site] = venv.glob("lib/python*/site-packages")
    shutil.copytree(next(other.glob("lib/python*/site-packages/PyYAML-6.0.2.dist-info")), site / "PyYAML-6.0.2.dist-info")
    [finding] = run_check(Config(prefix=str(venv), no_loader=True, select=("PKG002",))).by_rule("PKG002")
    assert "`import yaml` runs 6.0.1's files" in finding.message and "a mix" not in finding.message, finding.message
    # The fix keeps 6.0.2 and reinstalls it with uv; verified by import; undone byte for byte.
    assert [s.tool for s in finding.fix_steps] == ["file", "uv"]
    pristine = tree_digest(venv)
    done = envdoctor(offline, "fix", "--prefix", str(venv), "--select", "PKG002", "--yes", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["verification"]["ok"] and set(result["verification"]["imported"]) == {"yaml", "_yaml"}
    assert run_ok([str(venv / "bin" / "python"), "-c", "import yaml; print(yaml.__version__)"], offline).strip() == "6.0.2"
    assert envdoctor(offline, "fix", "--undo", "--prefix", str(venv)).returncode == 0
    assert tree_digest(venv) == pristine


@needs_debian
def test_pips_numpy_in_usr_local_over_dpkgs_is_removed_verified_and_undone(tmp_path: Path,
                                                                          offline: dict[str, str]) -> None:
    """NVIDIA's containers' layout: `pip install --break-system-packages numpy` put 2.2.6 in /usr/local over
    dpkg's 1.24.2. The fix removes pip's copy (pip uninstall takes the first on sys.path), the import then
    loads dpkg's files (their owner is dpkg's file list: an egg-info has no RECORD), and undo gives back
    /usr/local byte for byte."""
    root = SystemRoot(tmp_path / "root")
    root.apt_install("python3-numpy", "numpy", "1.24.2", {"numpy/__init__.py": b'__version__ = "1.24.2"\n'},
                     egg_info=True)
    wheel = write_wheel(tmp_path / "wheels", "numpy", "2.2.6", module("numpy", "2.2.6"))
    root.pip("install", "--break-system-packages", "--ignore-installed", "--no-index", "--no-compile", str(wheel))
    pristine = tree_digest(root.root)
    done = envdoctor(offline, "fix", "--prefix", str(root.usr), "--select", "PKG002", "--yes", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert [s["argv"][1:] for s in result["plan"]["steps"]] == [["-m", "pip", "uninstall", "--break-system-packages",
                                                                 "-y", "numpy"]]
    assert result["verification"] == {"ok": True, "problems": [], "removed": [],
                                      "imported": {"numpy": str(root.dist_packages / "numpy" / "__init__.py")}}
    assert not (root.local_dist_packages / "numpy").exists()
    manifest = json.loads((Path(result["journal"]) / "manifest.json").read_text())
    assert str(root.local_dist_packages.parent) in manifest["before"]["roots"]  # /usr/local/lib/python3.X
    undone = envdoctor(offline, "fix", "--undo", "--prefix", str(root.usr))
    assert undone.returncode == 0, undone.stdout
    assert tree_digest(root.root) == pristine


@needs_debian
def test_a_root_fixed_from_outside_says_it_could_not_verify_inside_and_how(tmp_path: Path,
                                                                          offline: dict[str, str]) -> None:
    """dpkg's numpy needs a library of the root (here its import fails as a missing libblas makes it fail): the
    import is tried inside the root first (chroot: this root cannot run its interpreter there), then from
    outside, and the failure says that it was not checked inside the root, and how to do that."""
    root = SystemRoot(tmp_path / "root")
    root.apt_install("python3-numpy", "numpy", "1.24.2", {
        "numpy/__init__.py": b"raise ImportError('libblas.so.3: cannot open shared object file: No such file')\n"},
        egg_info=True)
    wheel = write_wheel(tmp_path / "wheels", "numpy", "2.2.6", module("numpy", "2.2.6"))
    root.pip("install", "--break-system-packages", "--ignore-installed", "--no-index", "--no-compile", str(wheel))
    pristine = tree_digest(root.root)
    done = envdoctor(offline, "fix", "--prefix", str(root.usr), "--select", "PKG002", "--yes")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"run from outside {root.root} with this machine's libraries" in done.stdout, done.stdout
    assert f"`chroot {root.root} envdoctor fix --prefix /usr`" in done.stdout
    assert "rolled back: restored:" in done.stdout
    assert tree_digest(root.root) == pristine

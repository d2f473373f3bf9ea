"""PKG012's cxx-runtime-too-old: a libstdc++ older than the one an extension was built with loads first.

Everything here is real: a C++ runtime is built by the C compiler as `libstdc++.so.6` with a
version script defining a `GLIBCXX_` version no system libstdc++ has, into a real venv's
`lib/` (where a conda environment keeps its own runtime); a real extension module built
against it is installed with its RECORD into that venv's site-packages. Without a RUNPATH
the dynamic loader takes the system's libstdc++ and `import` fails with its own "version
`GLIBCXX_…' not found" message, which `envdoctor check --deep` classifies and explains.
With `$ORIGIN` leading to the environment's runtime the same module imports: quiet.
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from envdoctor.facts.cxx_runtime import newest_versions, read_runtime
from support import findings, json_report, run_envdoctor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("cc") is None,
                                reason="needs Linux and a C compiler")

WANTED = "GLIBCXX_3.4.90"  # newer than any libstdc++ released
EXT_SOURCE = """
#include <Python.h>
extern int envdoctor_runtime_probe(void);
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "glibcxxdemo", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_glibcxxdemo(void) {
    PyObject *m = PyModule_Create(&def);
    if (m) PyModule_AddIntConstant(m, "probe", envdoctor_runtime_probe());
    return m;
}
"""


def _record_line(root: Path, path: Path) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(root)},sha256={digest},{path.stat().st_size}"


def make_env(tmp: Path, runpath: bool) -> Path:
    venv = tmp / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    lib = venv / "lib"
    (tmp / "rt.c").write_text("int envdoctor_runtime_probe(void) { return 90; }\n")
    versions = "".join(f"GLIBCXX_3.4.{n} {{ }};\n" for n in (29, 30, 31, 32))
    (tmp / "rt.map").write_text(versions + f"{WANTED} {{ global: envdoctor_runtime_probe; local: *; }};\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libstdc++.so.6", f"-Wl,--version-script={tmp / 'rt.map'}",
                    "-o", str(lib / "libstdc++.so.6.0.99"), str(tmp / "rt.c")], check=True)
    (lib / "libstdc++.so.6").symlink_to("libstdc++.so.6.0.99")
    site = lib / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    ext = site / f"glibcxxdemo{sysconfig.get_config_var('EXT_SUFFIX')}"
    (tmp / "ext.c").write_text(EXT_SOURCE)
    flags = ["-Wl,-rpath,$ORIGIN/../..", "-Wl,--enable-new-dtags"] if runpath else []
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", "-o", str(ext),
                    str(tmp / "ext.c"), f"-L{lib}", "-l:libstdc++.so.6", *flags], check=True)
    info = site / "glibcxxdemo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: glibcxxdemo\nVersion: 1.0\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "top_level.txt").write_text("glibcxxdemo\n")
    (info / "RECORD").write_text("\n".join([_record_line(site, ext), _record_line(site, info / "METADATA"),
                                            "glibcxxdemo-1.0.dist-info/RECORD,,"]) + "\n")
    return venv


def deep(venv: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    proc = run_envdoctor("report", "--json", "--no-loader", "--deep", "--select", "PKG012", "--prefix", str(venv),
                         env=env)
    return json_report(proc)


def test_the_loader_itself_refuses_the_system_runtime(tmp_path: Path) -> None:
    venv = make_env(tmp_path, runpath=False)
    python = venv / "bin" / "python"
    proc = subprocess.run([str(python), "-c", "import glibcxxdemo"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
    assert f"version `{WANTED}' not found" in proc.stderr


def test_pkg012_names_the_runtime_loaded_and_the_environments_own(tmp_path: Path) -> None:
    venv = make_env(tmp_path, runpath=False)
    [finding] = [f for f in findings(deep(venv), "PKG012") if f["evidence"]["package"] == "glibcxxdemo"]
    evidence = finding["evidence"]
    assert evidence["kind"] == "cxx-runtime-too-old"
    assert evidence["named"] == WANTED and evidence["needs"] == WANTED
    system = evidence["loaded_runtime"]
    assert system and "libstdc++.so.6" in system and not system.startswith(str(venv))
    assert evidence["loaded_newest"] and evidence["loaded_newest"].startswith("GLIBCXX_3.4.")
    [own] = evidence["environment_runtimes"]
    assert own["path"].startswith(str(venv / "lib" / "libstdc++.so.6"))
    assert own["newest_glibcxx"] == WANTED
    assert "LD_PRELOAD=" in finding["fix"] and str(venv / "lib") in finding["fix"]


def test_pkg012_quiet_when_the_extension_finds_the_environments_runtime(tmp_path: Path) -> None:
    venv = make_env(tmp_path, runpath=True)
    report = deep(venv)
    assert [f for f in findings(report, "PKG012") if f["evidence"]["package"] == "glibcxxdemo"] == []
    [trial] = [t for t in report["facts"]["imports"]["trials"] if t["distribution"] == "glibcxxdemo"]
    assert trial["result"] == "passed"
    assert report["facts"]["imports"]["cxx_runtimes"] == []


def test_newest_versions_of_the_real_system_runtime() -> None:
    system = next((p for p in ("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib64/libstdc++.so.6",
                               "/usr/lib/aarch64-linux-gnu/libstdc++.so.6") if os.path.exists(p)), None)
    if system is None:
        pytest.skip("no system libstdc++ at the usual paths")
    runtime = read_runtime(system, "loaded")
    assert runtime["newest_glibcxx"] and runtime["newest_glibcxx"].startswith("GLIBCXX_3.4.")
    assert runtime["newest_cxxabi"] and runtime["newest_cxxabi"].startswith("CXXABI_1.3")
    assert newest_versions(b"GLIBCXX_3.4.9\0GLIBCXX_3.4.30\0CXXABI_1.3.13\0") == ("GLIBCXX_3.4.30", "CXXABI_1.3.13")

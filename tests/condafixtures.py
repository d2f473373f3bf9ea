"""Real conda prefixes for the package and channel tests, built offline.

The test suite writes its own tiny conda packages (conda-package-handling),
puts them in a local `file://` channel (indexed by py-rattler), solves and
installs prefixes with py-rattler, and then runs pip inside those prefixes to
make the genuinely broken states: pip over conda, two dist-infos for one
name, a user site shadowing the prefix, deleted and rewritten files.

The "python" package holds a copy of the running interpreter's binary and
symlinks to its standard library, so `prefix/bin/python` is a real
interpreter whose `sys.prefix` is the prefix; "pip" is the standard
library's bundled pip wheel, unpacked as conda-build would (INSTALLER =
conda, listed in RECORD).

Everything that can be shared is built once per test session: the channel
(`conda_world` fixture) and each scenario's prefix (`World.scenario`).
"""
from __future__ import annotations

import asyncio
import base64
import csv
import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

import pytest

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
PY_FULL = "%d.%d.%d" % sys.version_info[:3]
SITE = f"lib/python{PY}/site-packages"

CONDA_FORGE = "https://conda.anaconda.org/conda-forge/"
PKGS_MAIN = "https://repo.anaconda.com/pkgs/main/"
PYTORCH = "https://conda.anaconda.org/pytorch/"


def subdir() -> str:
    from envdoctor.facts.target import conda_platform

    return conda_platform()


@dataclass(frozen=True)
class Symlink:
    """A symbolic link inside a conda package."""

    target: str


@dataclass
class CondaPackage:
    """One tiny conda package the suite writes itself."""

    name: str
    version: str
    build: str = "0"
    files: dict[str, bytes | Symlink] = field(default_factory=dict)
    depends: tuple[str, ...] = ()
    #: Make `<dist>-<version>.dist-info` in site-packages, as conda-build does.
    dist: str | None = None
    requires_dist: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.build}.conda"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def dist_info_files(dist: str, version: str, payload: Mapping[str, bytes], installer: str,
                    requires: Iterable[str] = (), site: str = "") -> dict[str, bytes]:
    """A dist-info for `payload` (paths relative to site-packages), with a RECORD listing all."""
    folder = f"{dist.replace('-', '_')}-{version}.dist-info"
    meta = [f"Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    out = {f"{folder}/METADATA": ("\n".join(meta) + "\n").encode(),
           f"{folder}/WHEEL": b"Wheel-Version: 1.0\nGenerator: envdoctor-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    tops = sorted({p.split("/")[0].removesuffix(".py") for p in payload if not p.endswith(".pth")})
    out[f"{folder}/top_level.txt"] = ("\n".join(tops) + "\n").encode()
    if installer:
        out[f"{folder}/INSTALLER"] = f"{installer}\n".encode()
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for path, data in {**payload, **out}.items():
        writer.writerow([site + path, _record_hash(data), len(data)])
    writer.writerow([f"{site}{folder}/RECORD", "", ""])
    out[f"{folder}/RECORD"] = rows.getvalue().encode()
    return out


def write_conda_package(pkg: CondaPackage, out_dir: Path, platform: str, stage_root: Path) -> Path:
    """Stage `pkg` (payload + info/) and pack it as a .conda file in out_dir."""
    from conda_package_handling import api

    stage = stage_root / pkg.filename.removesuffix(".conda")
    if stage.exists():
        shutil.rmtree(stage)
    files: dict[str, bytes | Symlink] = dict(pkg.files)
    if pkg.dist:
        payload = {p[len(SITE) + 1:]: d for p, d in pkg.files.items()
                   if p.startswith(SITE + "/") and isinstance(d, bytes)}
        for rel, data in dist_info_files(pkg.dist, pkg.version, payload, "conda", pkg.requires_dist).items():
            files[f"{SITE}/{rel}"] = data
    paths = []
    for rel, data in sorted(files.items()):
        dest = stage / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, Symlink):
            os.symlink(data.target, dest)
            paths.append({"_path": rel, "path_type": "softlink"})
        else:
            dest.write_bytes(data)
            if rel.startswith("bin/"):
                dest.chmod(0o755)
            paths.append({"_path": rel, "path_type": "hardlink", "sha256": _sha256(data),
                          "size_in_bytes": len(data)})
    info = stage / "info"
    info.mkdir()
    index = {"name": pkg.name, "version": pkg.version, "build": pkg.build, "build_number": 0,
             "depends": list(pkg.depends), "subdir": platform, "license": "MIT",
             "timestamp": 1700000000000}
    if platform != "noarch":
        index["platform"], index["arch"] = platform.split("-")[0], "x86_64"
    (info / "index.json").write_text(json.dumps(index))
    (info / "paths.json").write_text(json.dumps({"paths": paths, "paths_version": 1}))
    (info / "files").write_text("".join(f"{p['_path']}\n" for p in paths))
    out_dir.mkdir(parents=True, exist_ok=True)
    api.create(str(stage), None, pkg.filename, out_folder=str(out_dir), compression_level=3)
    shutil.rmtree(stage)
    return out_dir / pkg.filename


def write_wheel(out_dir: Path, dist: str, version: str, payload: Mapping[str, bytes],
                requires: Iterable[str] = ()) -> Path:
    """A pure-Python wheel made with zipfile (no build backend, no network)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    meta = dist_info_files(dist, version, payload, installer="", requires=requires)
    with zipfile.ZipFile(path, "w") as zf:
        for rel, data in {**payload, **meta}.items():
            zf.writestr(rel, data)
    return path


def module(name: str, version: str) -> dict[str, bytes]:
    """A one-file importable package `name` that knows its version."""
    return {f"{name}/__init__.py": f'__version__ = "{version}"\n'.encode()}


def _python_package(version: str) -> CondaPackage:
    """A "python" package: the running interpreter's binary plus links to its stdlib."""
    real = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    platstdlib = Path(sysconfig.get_paths()["platstdlib"]).resolve()
    files: dict[str, bytes | Symlink] = {f"bin/python{PY}": real.read_bytes(),
                                         "bin/python3": Symlink(f"python{PY}"),
                                         "bin/python": Symlink(f"python{PY}")}
    for entry in sorted(os.listdir(stdlib)):
        if entry in ("site-packages", "__pycache__", "dist-packages"):
            continue
        files[f"lib/python{PY}/{entry}"] = Symlink(str(stdlib / entry))
    dynload = platstdlib / "lib-dynload"
    if dynload.is_dir():
        files[f"lib/python{PY}/lib-dynload"] = Symlink(str(dynload))
    # A shared-library build needs libpython beside the prefix too ($ORIGIN/../lib RUNPATHs).
    libname = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libname and libdir and Path(libdir, libname).exists():
        files[f"lib/{libname}"] = Symlink(str(Path(libdir, libname).resolve()))
    files[f"{SITE}/README.txt"] = b"site-packages of a test prefix\n"
    return CondaPackage("python", version, build="h0_cpython", files=files)


def _pip_package() -> CondaPackage:
    """pip from the standard library's bundled wheel, unpacked as conda-build would."""
    import ensurepip

    wheels = sorted(glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl")))
    if not wheels:
        pytest.skip("this Python has no bundled pip wheel (ensurepip)")
    wheel = wheels[-1]
    version = Path(wheel).name.split("-")[1]
    files: dict[str, bytes | Symlink] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.endswith("/") or ".dist-info/" in name:
                continue
            files[f"{SITE}/{name}"] = zf.read(name)
    return CondaPackage("pip", version, build="pyh0", files=files, depends=("python",), dist="pip")


def _pure(name: str, version: str, dist: str | None = None, depends: tuple[str, ...] = ("python",),
          modules: Iterable[str] | None = None, requires: tuple[str, ...] = (), build: str = "py0",
          extra: Mapping[str, bytes] | None = None) -> CondaPackage:
    files: dict[str, bytes | Symlink] = {}
    for mod in modules if modules is not None else [(dist or name).replace("-", "_").lower()]:
        files.update({f"{SITE}/{k}": v for k, v in module(mod, version).items()})
    files.update(extra or {})
    return CondaPackage(name, version, build=build, files=files, depends=depends,
                        dist=dist or name, requires_dist=requires)


def channel_packages() -> list[CondaPackage]:
    """Every package of the local channel."""
    big_module = {f"{SITE}/numpy/core.py": b"# the numerical core\n" + b"x = 1\n" * 200,
                  f"{SITE}/numpy/linalg.py": b"def solve():\n    return 0\n"}
    # A .pth that imports a module at start-up: without -B, the prefix would gain __pycache__.
    hook = {f"{SITE}/hooky.pth": b"import hooky_init\n", f"{SITE}/hooky_init.py": b"STARTED = True\n"}
    return [
        _python_package(PY_FULL),
        _pip_package(),
        _pure("numpy", "1.26.4", extra=big_module, build="py311_0"),
        _pure("pillow", "10.2.0", modules=["PIL"]),
        _pure("py-opencv", "4.9.0", dist="opencv-python", modules=["cv2"]),
        _pure("pytorch", "2.5.1", dist="torch", modules=["torch"], depends=("python", "numpy"),
              requires=("numpy",), build="py3.11_cpu_0"),
        _pure("requests", "2.31.0", requires=("urllib3>=1.21.1,<3", 'chardet>=3; python_version < "3"',
                                            'win-inet-pton; sys_platform == "win32"')),
        _pure("urllib3", "2.2.1"),
        _pure("hooky", "1.0", extra=hook),
        CondaPackage("mkl", "2023.1.0", build="h0", files={"lib/libmkl_rt.so.2": b"\x7fELF mkl\n"}),
        CondaPackage("libopenblas", "0.3.21", build="h0",
                     files={"lib/libopenblas.so.0": b"\x7fELF openblas\n"}),
        # A compiled package linked straight to OpenBLAS: `conda remove libopenblas` would take it along.
        CondaPackage("sparselib", "1.0", build="h0", files={"lib/libsparse.so.1": b"\x7fELF sparse\n"},
                     depends=("libopenblas",)),
        CondaPackage("cudatoolkit", "11.8.0", build="h0", files={"lib/libcudart.so.11.0": b"\x7fELF cudart\n"}),
    ]


def _index_channel(channel: Path) -> None:
    # index_fs can crash its process at interpreter exit: run it alone and leave with os._exit.
    code = ("import asyncio, os, sys\n"
            "from rattler.index import index_fs\n"
            "asyncio.run(index_fs(sys.argv[1], write_zst=False, write_shards=False, force=True))\n"
            "sys.stdout.flush(); os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(channel)], check=True, timeout=120)


@dataclass
class World:
    """The session's channel, caches and wheels, and the prefixes built from them."""

    root: Path
    channel: Path
    cache: Path
    wheels: Path
    _scenarios: dict[str, Path] = field(default_factory=dict)

    @property
    def channel_url(self) -> str:
        return self.channel.as_uri()

    def make_prefix(self, prefix: Path, specs: Iterable[str],
                    channels: Mapping[str, str] | None = None, default_channel: str | None = CONDA_FORGE) -> Path:
        """Solve `specs` against the local channel and install them into `prefix`.

        `channels` gives a record's channel by package name (default_channel for
        the rest), written into the records as if they came from there.
        """
        import rattler
        from rattler import Channel, Gateway, MatchSpec

        specs = list(specs)
        channels = dict(channels or {})

        async def go() -> None:
            records = await rattler.solve(
                sources=[Channel(self.channel_url)], specs=specs,
                gateway=Gateway(cache_dir=self.cache / "gateway"), platforms=[subdir(), "noarch"])
            for record in records:
                chosen = channels.get(record.name.normalized, default_channel)
                if chosen:
                    record.channel = chosen.rstrip("/")
                    record.url = f"{chosen.rstrip('/')}/{record.subdir}/{record.file_name}"
            await rattler.install(records, target_prefix=prefix, cache_dir=self.cache / "pkgs",
                                  show_progress=False,
                                  requested_specs=[MatchSpec(s)._match_spec for s in specs])

        asyncio.run(go())
        return prefix

    def python(self, prefix: Path) -> Path:
        return prefix / "bin" / "python"

    def pip(self, prefix: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
        """Run the prefix's own pip offline; fail the test with pip's output if it fails."""
        full_env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                    "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
        full_env.pop("PYTHONPATH", None)
        proc = subprocess.run([str(self.python(prefix)), "-m", "pip", *args, "--no-cache-dir"],
                              capture_output=True, text=True, env=full_env, timeout=180)
        assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def wheel(self, dist: str, version: str, requires: Iterable[str] = (),
              modules: Iterable[str] | None = None, extra: Mapping[str, bytes] | None = None) -> Path:
        payload: dict[str, bytes] = {}
        for mod in modules if modules is not None else [dist.replace("-", "_").lower()]:
            payload.update(module(mod, version))
        payload.update(extra or {})
        requires = tuple(requires)
        # One folder per distinct wheel: two tests may build `trainkit 1.0` with other requirements.
        key = hashlib.sha256(repr((dist, version, requires, sorted(payload.items()))).encode()).hexdigest()[:12]
        return write_wheel(self.wheels / key, dist, version, payload, requires)

    def scenario(self, name: str, build: Callable[[Path], None]) -> Path:
        """A prefix built once per session by `build(prefix)`, then shared read-only."""
        if name not in self._scenarios:
            prefix = self.root / "prefixes" / name
            build(prefix)
            self._scenarios[name] = prefix
        return self._scenarios[name]


_WORLD: World | None = None


def build_world(root: Path) -> World:
    start = time.monotonic()
    channel = root / "channel"
    platform = subdir()
    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    stage = root / "stage"
    packages = channel_packages()
    for pkg in packages:
        write_conda_package(pkg, channel / platform, platform, stage)
    _index_channel(channel)
    world = World(root=root, channel=channel, cache=root / "cache", wheels=root / "wheels")
    # Installing every package once fills the package cache, so later prefixes can
    # carry records that name conda-forge or pkgs/main without any download.
    world.make_prefix(root / "warm-cache", [f"{p.name} >=0" for p in packages], default_channel=None)
    world.build_seconds = time.monotonic() - start  # type: ignore[attr-defined]
    return world


@pytest.fixture(scope="session")
def conda_world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The local channel, built once per session however many modules use it."""
    global _WORLD
    pytest.importorskip("rattler")
    pytest.importorskip("conda_package_handling")
    if _WORLD is None:
        _WORLD = build_world(tmp_path_factory.mktemp("conda-world"))
    return _WORLD

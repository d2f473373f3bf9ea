"""The fix GPU001, GPU002 and GPU004 share: torch built for a given CUDA, put there by the tool that owns torch.

The commands come from the package rules' builder (rules/install_commands.py),
so a uv venv gets `uv pip … --python PREFIX`, a venv without pip gets
`ensurepip` first, a conda or pixi environment gets conda's (pixi's) own
command naming the prefix, and an EXTERNALLY-MANAGED interpreter gets no bare
pip install. Which tool owns torch is read from the packages facts (conda-meta,
the OS package database, INSTALLER); without them, from torch's INSTALLER and
the kind of environment.

The pip command is not pinned to the installed version: PyTorch builds each
release for a few CUDA versions only, so "this torch for that CUDA" may not
exist, and a fix that cannot resolve is no fix. Unpinned, the index gives the
newest build for that CUDA; torchvision/torchaudio installed beside torch go in
the same command, so the resolver picks builds that match it.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from envdoctor.remedies.install_commands import Fix, advice, conda, fix_of, managed_advice, os_reinstall, pip, pip_own

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts import Facts
    from envdoctor.facts.torch import TorchFacts

WHEEL_INDEX = "https://download.pytorch.org/whl"
#: Distributions built against one torch release: reinstalled with it, from the same index.
COMPANIONS = ("torchvision", "torchaudio")


def wheel_index(cuda: str) -> str:
    """'12.4' -> https://download.pytorch.org/whl/cu124"""
    return f"{WHEEL_INDEX}/cu{cuda.replace('.', '')}"


def build_index(version: str) -> str | None:
    """The index a torch build comes from, by its local version: 2.5.1+cu124 -> …/cu124, +cpu -> …/cpu, else PyPI."""
    local = version.partition("+")[2]
    if local == "cpu" or re.fullmatch(r"cu\d+|rocm[\d.]+", local):
        return f"{WHEEL_INDEX}/{local}"
    return None


def target_environment(facts: Facts) -> Mapping[str, Any]:
    """What the command builder reads of the target: the packages section, else the target section's own fields."""
    packages = facts.get("packages")
    if isinstance(packages, Mapping) and packages.get("prefix"):
        return packages
    target = facts.get("target")
    target = target if isinstance(target, Mapping) else {}
    return {"prefix": target.get("prefix"), "kind": target.get("kind"), "interpreter": target.get("interpreter"),
            "installer": {"externally_managed": target.get("externally_managed"),
                          "uv_venv": (target.get("pyvenv") or {}).get("uv"), "has_pip": True}}


def _installed(env: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """The copy of `key` the environment's own site dirs hold first (the one `import` finds)."""
    copies = [d for d in env.get("distributions") or () if d.get("key") == key and d.get("location") == "env"]
    return min(copies, key=lambda d: d.get("order", 0)) if copies else None


def torch_owner(env: Mapping[str, Any], torch: TorchFacts) -> tuple[str, str | None]:
    """(tool, OS or conda package) that put torch here: conda, pixi, dpkg, rpm, uv, pip …"""
    dist = _installed(env, "torch")
    if dist and dist.get("owner"):
        return str(dist["owner"]["tool"]), dist["owner"].get("package")
    installer = torch.get("installer")
    if installer == "conda" or (env.get("kind") in ("conda", "pixi") and installer != "pip"):
        return str(env.get("kind") if env.get("kind") == "pixi" else "conda"), None
    return installer or "pip", None


def torch_for_cuda(facts: Facts, cuda: str, *, keep_hint: bool = True, note: str = "") -> Fix:
    """Install torch built for CUDA `cuda` with the tool that owns torch in the target (text and steps)."""
    torch = facts["torch"]
    env = target_environment(facts)
    url = wheel_index(cuda)
    version = (torch.get("version") or torch.get("dist_version") or "").split("+")[0]
    keep = version and keep_hint
    tool, package = torch_owner(env, torch)
    if tool in ("conda", "pixi"):
        hint = f"to stay on torch {version}, ask for 'pytorch={version}=cuda*' if conda-forge has that build"
        return fix_of(conda(env, "install", "-c", "conda-forge", "pytorch=*=cuda*", f"cuda-version={cuda}"),
                      note="; ".join(n for n in (hint if keep else "", note) if n))
    hint = f"to stay on torch {version}, first check that {url}/torch/ lists it, then pin torch=={version}"
    note = "; ".join(n for n in (hint if keep else "", note) if n)
    python = env.get("interpreter") or "python"
    if tool in ("dpkg", "rpm"):
        return advice(f"torch here is {package or 'a system package'} ({tool}), which has no build for CUDA {cuda}: "
                      f"create a venv (`{python} -m venv --system-site-packages ~/venvs/train`) and install torch "
                      f"there with `~/venvs/train/bin/python -m pip install torch --index-url {url}`")
    # Only companions the same tool put there: another tool's copy is that tool's to move.
    names = ["torch", *(name for name in COMPANIONS if (dist := _installed(env, name))
                        and (dist.get("owner") or {}).get("tool", tool) == tool)]
    args = ("install", "--force-reinstall", *names, "--index-url", url)
    # A copy pip itself put into an EXTERNALLY-MANAGED interpreter (NVIDIA's containers) is pip's to replace.
    commands = pip_own(env, *args) if tool == "pip" else pip(env, *args)
    if commands is None:
        return advice(managed_advice(env, f"install torch built for CUDA {cuda} ({url})"))
    return fix_of(*commands, note=note)


def reinstall_torch(facts: Facts, index: str | None = None, note: str = "") -> Fix | None:
    """Put the installed torch release back as it was built (damaged files, a dependency missing), by its owner.

    pip gets `torch==VERSION` from the index of its build (`index`, else the one its
    local version names: +cu124, +cpu); None when the version is unknown.
    """
    torch = facts["torch"]
    full = torch.get("version") or torch.get("dist_version") or ""
    version = full.split("+")[0]
    if not version:
        return None
    env = target_environment(facts)
    tool, package = torch_owner(env, torch)
    if tool in ("conda", "pixi"):
        return fix_of(conda(env, "install", "--force-reinstall", f"pytorch={version}"), note=note)
    if tool in ("dpkg", "rpm"):
        return fix_of(os_reinstall(tool, package), note=note) if package else None
    index = index or build_index(full)
    args = ("install", "--force-reinstall", f"torch=={version}", *(("--index-url", index) if index else ()))
    commands = pip_own(env, *args) if tool == "pip" else pip(env, *args)
    if commands is None:
        return advice(managed_advice(env, f"reinstall torch {version}"))
    return fix_of(*commands, note=note)


def install_text(facts: Facts, name: str, *specs: str, upgrade: bool = False) -> str:
    """The command that installs `specs` with the tool that owns the distribution `name` here, as text.

    For advice (no steps): a fix that offers alternatives, where choosing is the user's.
    """
    env = target_environment(facts)
    dist = _installed(env, name.lower().replace("_", "-"))
    tool = dist["owner"]["tool"] if dist and dist.get("owner") else (
        "conda" if env.get("kind") in ("conda", "pixi") else "pip")
    if tool in ("conda", "pixi"):
        # conda has no `install --upgrade`: `conda update` moves a package to its newest build.
        return conda(env, "update" if upgrade else "install", *specs).text
    args = ("install", *(("--upgrade",) if upgrade else ()), *specs)
    commands = pip_own(env, *args) if tool == "pip" else pip(env, *args)
    if commands is None:
        return managed_advice(env, " ".join(specs))
    return " && ".join(c.text for c in commands)


def led(lead: str, fix: Fix) -> Fix:
    """`fix` after a sentence that says what the commands do (the steps stay the same)."""
    return Fix(lead + fix.text, fix.steps)

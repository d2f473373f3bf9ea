"""PKG013 notebook-kernel-elsewhere: a notebook given to check runs on another interpreter.

Reads each notebook's kernel as the scripts section resolved it through Jupyter's kernel
search path (facts.kernels) and the checked environment's interpreter folders.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from envdoctor.facts import Facts
from envdoctor.facts.kernels import NATIVE_KERNEL
from envdoctor.model import Location
from envdoctor.rules import Hit

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.kernels import NotebookKernel, NotebookTarget


def _install_kernel(target: NotebookTarget, name: str) -> str:
    python = target["interpreter"] or os.path.join(target["prefix"], "bin", "python")
    return f"`{python} -m pip install ipykernel && {python} -m ipykernel install --user --name {name}`"


def _elsewhere(path: str, kernel: NotebookKernel, target: NotebookTarget) -> Hit | None:
    """The kernel's interpreter lies outside the checked environment."""
    folder = kernel["interpreter_dir"]
    if not folder or folder in target["bin_dirs"]:
        return None
    other = os.path.dirname(folder) if os.path.basename(folder) in ("bin", "Scripts") else folder
    return Hit(
        message=(f"{path} runs on kernel {kernel['name']!r}, whose interpreter {kernel['interpreter']} is not the "
                 f"checked environment's ({target['prefix']}): what this check found is not what the notebook "
                 "imports — torch, numpy and CUDA there may differ or be missing"),
        evidence={"notebook": path, "kernel": kernel["name"], "kernel_spec": kernel["spec"],
                  "kernel_interpreter": kernel["interpreter"], "checked_prefix": target["prefix"]},
        fix=(f"check the environment the notebook runs in: `envdoctor check --prefix {other} {path}`; or give the "
             f"notebook a kernel of this environment: {_install_kernel(target, kernel['name'] or 'train')} and pick "
             "it in the notebook (Kernel > Change kernel)"),
        location=Location(path=path, line=1),
    )


def _no_ipykernel(path: str, kernel: NotebookKernel, target: NotebookTarget) -> Hit | None:
    """The kernel would run in the checked environment (or is Jupyter's own), which has no ipykernel."""
    if target["has_ipykernel"] or kernel["problem"]:
        return None
    name = kernel["name"] or NATIVE_KERNEL
    if kernel["spec"] is None and name != NATIVE_KERNEL:
        return None  # a named kernel found nowhere: reported as such below
    return Hit(
        message=(f"{path} asks for kernel {name!r} but the checked environment ({target['prefix']}) has no "
                 "ipykernel: Jupyter cannot start a kernel there, so the notebook runs somewhere else or not at all"),
        evidence={"notebook": path, "kernel": name, "kernel_spec": kernel["spec"], "has_ipykernel": False,
                  "checked_prefix": target["prefix"]},
        fix=f"install a kernel for this environment: {_install_kernel(target, name)}",
        location=Location(path=path, line=1),
    )


def _missing(path: str, kernel: NotebookKernel, target: NotebookTarget) -> Hit | None:
    if kernel["spec"] is not None or not kernel["name"] or kernel["name"] == NATIVE_KERNEL:
        return None
    return Hit(
        message=(f"{path} asks for kernel {kernel['name']!r}, which is installed nowhere Jupyter looks: it will "
                 "ask for another kernel, which may run another environment"),
        evidence={"notebook": path, "kernel": kernel["name"], "searched": kernel["searched"],
                  "checked_prefix": target["prefix"]},
        fix=f"install the kernel from the environment it should run: {_install_kernel(target, kernel['name'])}",
        location=Location(path=path, line=1),
    )


def find_notebook_kernel_elsewhere(facts: Facts) -> Iterator[Hit]:
    if not facts.config.scripts:
        return  # nothing given to check: the scripts section (and the spawn analysis it imports) is not needed
    scripts = facts["scripts"]
    target = scripts.get("notebook_target") if scripts else None
    if not scripts or not target:
        return
    for info in scripts["files"]:
        kernel = info.get("kernel")
        if not kernel:
            continue
        for judge in (_elsewhere, _missing, _no_ipykernel):
            hit = judge(info["path"], kernel, target)
            if hit is not None:
                yield hit
                break


RULES = {"PKG013": find_notebook_kernel_elsewhere}

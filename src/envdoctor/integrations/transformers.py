"""`PreflightCallback` for the Hugging Face Trainer: preflight on the Trainer's own train DataLoader.

    from envdoctor.integrations.transformers import PreflightCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[PreflightCallback()])

At `on_train_begin` the Trainer passes the train DataLoader it built (as
Accelerate prepared it: sharded across processes) and no step has run yet.
The node's local process 0 runs the checks and profiles that loader; the
node's usable CPUs are shared by its processes (`LOCAL_WORLD_SIZE`, set by
torchrun and `accelerate launch`) when num_workers is recommended. Every
process then learns whether any node failed, so all of them stop together.

Importing this module imports transformers; `import envdoctor` does not.
"""
from __future__ import annotations

import importlib
import os
from typing import Any

from envdoctor.integrations.node import NodePreflight, first_dataloader
from envdoctor.model import Report


def _callback_base() -> Any:
    try:
        return importlib.import_module("transformers").TrainerCallback
    except ImportError:
        raise ImportError("envdoctor.integrations.transformers needs transformers: "
                          "pip install 'envdoctor-pytorch[transformers]'") from None


# Typed Any on purpose: the same code type-checks whether or not transformers is installed.
TrainerCallback: Any = _callback_base()


class PreflightCallback(TrainerCallback):
    """Run envdoctor's checks and profile the train DataLoader once per node, before the first step.

    `fail_on` ("error", "warning", "info" or "never") decides what stops
    training with `envdoctor.PreflightError`; findings below it are printed
    and raised as a `PreflightWarning`. After the run, `report` holds the
    Report on each node's local process 0 (None elsewhere).
    """

    def __init__(self, fail_on: str = "error", budget_s: float = 15.0, step_time_s: float | None = None,
                 select: tuple[str, ...] | list[str] = (), ignore: tuple[str, ...] | list[str] = ()) -> None:
        self.preflight = NodePreflight(fail_on=fail_on, budget_s=budget_s, step_time_s=step_time_s,
                                       select=tuple(select), ignore=tuple(ignore))

    @property
    def report(self) -> Report | None:
        """This node's Report, on its local rank 0 once the hook has run; None elsewhere."""
        return self.preflight.report

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.preflight.done:
            return
        loader = first_dataloader(kwargs.get("train_dataloader"))
        self.preflight.run_on_every_rank(
            loader, framework="transformers", local_rank=0 if state.is_local_process_zero else 1,
            procs_per_node=processes_on_this_node(args), any_rank=lambda flag: _any_process(flag, args))


def processes_on_this_node(args: Any) -> int:
    """Training processes on this node: LOCAL_WORLD_SIZE (torchrun, accelerate launch), else the world size."""
    from envdoctor.facts.node_share import LOCAL_WORLD_SIZE_ENV, processes_per_node

    if os.environ.get(LOCAL_WORLD_SIZE_ENV):
        return processes_per_node(None)
    return max(1, int(getattr(args, "world_size", 1) or 1))


def _any_process(flag: bool, args: Any) -> bool:
    """True on every process when `flag` is True on any (a collective, when torch.distributed is running)."""
    import torch.distributed as dist

    import torch

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    # NCCL reduces tensors on the process's GPU; gloo on the CPU. args.device is the one the Trainer uses.
    tensor = torch.tensor([int(flag)], device=args.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())

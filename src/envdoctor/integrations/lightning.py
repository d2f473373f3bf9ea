"""`PreflightCallback` for Lightning: preflight on the trainer's own train DataLoader.

    from envdoctor.integrations.lightning import PreflightCallback
    trainer = L.Trainer(callbacks=[PreflightCallback(fail_on="error")])

At `on_train_start` (after Lightning has built the train DataLoader, with its
DistributedSampler under DDP, and before the first step) the node's local
rank 0 runs the checks and profiles that loader; the node's usable CPUs are
shared by its `trainer.num_devices` processes when num_workers is
recommended. Every rank then learns whether any node failed, so all of them
stop together instead of waiting on a collective for a rank that is gone.

Importing this module imports Lightning (`lightning.pytorch`, else the older
`pytorch_lightning`); `import envdoctor` does not.
"""
from __future__ import annotations

import importlib
from typing import Any

from envdoctor.integrations.node import NodePreflight, first_dataloader
from envdoctor.model import Report


def _callback_base() -> Any:
    """Lightning's Callback: `lightning.pytorch`, else the standalone `pytorch_lightning`."""
    for module in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(module).Callback
        except ImportError:
            continue
    raise ImportError("envdoctor.integrations.lightning needs Lightning: pip install 'envdoctor-pytorch[lightning]'")


# Typed Any on purpose: the same code type-checks whether or not Lightning is installed.
Callback: Any = _callback_base()


class PreflightCallback(Callback):
    """Run envdoctor's checks and profile the train DataLoader once per node, before the first step.

    `fail_on` ("error", "warning", "info" or "never") decides what stops
    training with `envdoctor.PreflightError`; findings below it are printed
    and raised as a `PreflightWarning`. After the run, `report` holds the
    Report on each node's local rank 0 (None elsewhere).
    """

    def __init__(self, fail_on: str = "error", budget_s: float = 15.0, step_time_s: float | None = None,
                 select: tuple[str, ...] | list[str] = (), ignore: tuple[str, ...] | list[str] = ()) -> None:
        super().__init__()
        self.preflight = NodePreflight(fail_on=fail_on, budget_s=budget_s, step_time_s=step_time_s,
                                       select=tuple(select), ignore=tuple(ignore))

    @property
    def report(self) -> Report | None:
        """This node's Report, on its local rank 0 once the hook has run; None elsewhere."""
        return self.preflight.report

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.preflight.done:
            return
        loader = first_dataloader(trainer.train_dataloader)
        self.preflight.run_on_every_rank(
            loader, framework="lightning", local_rank=trainer.local_rank, procs_per_node=trainer.num_devices,
            any_rank=lambda flag: bool(trainer.strategy.reduce_boolean_decision(flag, all=False)))

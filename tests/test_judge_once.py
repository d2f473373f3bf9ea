"""The judge layer decides once per check: every DL and SYS rule, the engine and DL009 read one loader judgement
and one loop judgement (ARCHITECTURE.md, "Things decided in exactly one place").

A whole check runs here on a saved report's facts (fixtures/reports/loader-ok.json: a smoke test's loader
section and the machine's system section; fixtures/torch/: a torch section) with a loop that
`envdoctor run --tune` measured beside it, every DL and SYS rule selected; the judge's two decisions are
counted where they are computed.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import envdoctor.judge.loader as judge_loader_module
import envdoctor.judge.loop as judge_loop_module
from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.facts import Facts
from loadersupport import measured_loop

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPORT = json.loads((FIXTURES / "reports" / "loader-ok.json").read_text(encoding="utf-8"))
#: A torch section the probe gathered (a CPU build), for the SYS rules that read torch's settings.
TORCH = json.loads((FIXTURES / "torch" / "cpu_build_section.json").read_text(encoding="utf-8"))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each judgement was computed (the real functions, counted)."""
    calls = {"loader": 0, "loop": 0}
    real_loader, real_loop = judge_loader_module.judge_loader, judge_loop_module.judge_loop

    def loader(*args: Any, **kwargs: Any) -> Any:
        calls["loader"] += 1
        return real_loader(*args, **kwargs)

    def loop(*args: Any, **kwargs: Any) -> Any:
        calls["loop"] += 1
        return real_loop(*args, **kwargs)

    monkeypatch.setattr(judge_loader_module, "judge_loader", loader)
    monkeypatch.setattr(judge_loop_module, "judge_loop", loop)
    return calls


def _check(select: tuple[str, ...]) -> tuple[Any, Facts]:
    step = 0.02
    config = Config(select=select, step_time=step, no_loader=False,
                    loader_source={"kind": "pickle", "path": "loader.pickle", "sys_path": [], "main_path": None,
                                   "description": "your DataLoader in train.py"})
    sections = {"system": copy.deepcopy(REPORT["facts"]["system"]), "target": copy.deepcopy(REPORT["target"]),
                "loader": copy.deepcopy(REPORT["loader"]),
                "loop": measured_loop(REPORT["loader"]["batch_size"], 0.012, step, dataset="Synthetic",
                                      intra_op_threads=2),
                "torch": copy.deepcopy(TORCH)}
    facts = Facts.from_dict(sections, config)
    return run_check(config, facts=facts), facts


def test_a_whole_check_judges_the_loader_and_the_loop_once(counted: dict[str, int]) -> None:
    report, facts = _check(("DL", "SYS"))
    ran = set(report.checked or [])
    assert {"DL001", "DL003", "DL004", "DL005", "DL009", "SYS001", "SYS002", "SYS005"} <= ran, ran
    assert not [e for e in report.errors if str(e.get("rule", "")).startswith(("DL", "SYS"))], report.errors
    # Every rule above read the judgements; each was computed once.
    assert counted == {"loader": 1, "loop": 1}
    # ... and what the report carries is that one result, not another computed beside it.
    judged = facts.judgements["loader"]
    assert report.loader is not None and report.loader["recommendation"] == judged.rec
    assert report.loop is not None and report.loop["recommendation"] == facts.judgements["loop"]["recommendation"]
    (dl009,) = report.by_rule("DL009")
    assert dl009.evidence["recommendation"]["num_workers"] == judged.rec["num_workers"]


def test_without_a_rule_that_reads_it_the_engine_judges_once(counted: dict[str, int]) -> None:
    report, _ = _check(("PKG001",))
    assert report.loader is not None and report.loop is not None
    assert counted == {"loader": 1, "loop": 1}

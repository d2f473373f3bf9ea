"""`envdoctor run -- CMD`: the user's own loop measured (DL009), the command's output, signals and exit code kept.

The fast tests judge fixed loop sections (the model, the verdict, the rule's evidence); the slow ones run real
commands under the observer: the plain script of fixtures/loop/ (it times its own `next()`), torchrun with two
ranks, Lightning and the Hugging Face Trainer, commands that fail or never iterate a DataLoader.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from support import findings, leftover_children, run_envdoctor, validate_report

LOOP_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "loop"
WARMUP, WINDOW = 5, 40


def _section(wait_s: float, step_s: float, workers: int = 0, steps: int = 40, ranks: tuple[int | None, ...] = (None,),
             usable: int = 2) -> dict[str, Any]:
    loaders = [{"pid": 100 + i, "rank": rank, "local_rank": rank, "steps": steps, "complete": True,
                "settings": {"num_workers": workers, "batch_size": 8, "prefetch_factor": None, "pin_memory": False,
                             "persistent_workers": False, "start_method": None, "dataset": "CostlySamples"},
                "wait_total_s": wait_s * steps, "step_total_s": step_s * steps,
                "data_wait_share": round(wait_s / (wait_s + step_s), 4),
                "batches_per_s": round(1 / (wait_s + step_s), 3), "first_batch_s": [0.05], "interrupted": 0,
                "window_start": 1.0, "window_end": 2.0} for i, rank in enumerate(ranks)]
    return {"command": ["python", "train.py"], "returncode": 0, "start_error": None, "stopped": False,
            "outcome": "measured", "plan": {"steps": steps, "seconds": None, "warmup_steps": 5},
            "python_processes": len(ranks), "loaders": loaders,
            "cpu": {"cpu_s": 0.3, "window_s": 1.0, "usable_cpus": usable, "busy_share": 0.15, "processes": 1},
            "cuda": None, "environment": {}, "wall_s": 3.0, "proof": None}


def _report(section: dict[str, Any]) -> Any:
    from envdoctor.config import Config
    from envdoctor.loop.command import build_report

    return build_report(section, Config(select=("DL009",)))


def test_the_loop_model_overlaps_loading_with_the_step() -> None:
    from envdoctor.rules.loader.loop import recommend

    # 8 ms of loading a batch at num_workers=0 and a 20 ms step: one worker hides the loading.
    rec = recommend({"num_workers": 0}, wait_s=0.008, step_s=0.020, usable_cpus=2, cuda=False)
    assert rec is not None and rec["num_workers"] == 1 and rec["trust"] == "unpaired"
    assert rec["gain"] == pytest.approx(28 / 20, rel=0.01)
    # Two workers that cannot keep up with a 10 ms step: each batch costs 2 × (10 + 30) ms; with 7 CPUs left
    # for workers, 8 load a batch in 10 ms.
    more = recommend({"num_workers": 2}, wait_s=0.030, step_s=0.010, usable_cpus=8, cuda=True)
    assert more is not None and more["num_workers"] == 7 and more["pin_memory"] is True
    # One usable CPU: no worker can run beside the main process, nothing to recommend beyond what it has.
    assert recommend({"num_workers": 1}, wait_s=0.030, step_s=0.010, usable_cpus=1, cuda=False) is None


def test_dl009_fires_with_its_evidence_and_the_settings_to_use() -> None:
    report = _report(_section(wait_s=0.008, step_s=0.020))
    (hit,) = [f for f in report.findings if f.rule == "DL009"]
    assert hit.severity.value == "warning"
    assert hit.evidence["data_wait_share"] == pytest.approx(0.2857, abs=1e-3)
    assert hit.evidence["wait_s_per_step"] == pytest.approx(0.008)
    assert hit.evidence["step_s_per_step"] == pytest.approx(0.020)
    assert hit.evidence["settings"]["num_workers"] == 0
    assert hit.evidence["recommendation"]["num_workers"] == 1
    assert "29% of each step" in hit.message and "1.40× the steps per second" in hit.message
    assert "num_workers=1" in hit.fix and "--prove" in hit.fix
    loop = report.to_dict()["loop"]
    assert loop["data_wait_share"] == pytest.approx(0.2857, abs=1e-3) and loop["recommendation"]["gain"] == 1.4
    validate_report(report.to_dict())


def test_dl009_stays_quiet_when_the_loop_keeps_up() -> None:
    report = _report(_section(wait_s=0.0004, step_s=0.050))
    assert not report.by_rule("DL009")
    assert report.to_dict()["loop"]["waits_for_data"] is False
    assert report.exit_code("warning") == 0


def test_a_row_per_rank_and_rank_0_speaks() -> None:
    section = _section(wait_s=0.008, step_s=0.020, ranks=(1, 0))
    section["loaders"][0]["data_wait_share"] = 0.9
    loop = _report(section).to_dict()["loop"]
    assert [row["rank"] for row in loop["processes"]] == [0, 1]
    assert loop["rank"] == 0 and loop["data_wait_share"] == pytest.approx(0.2857, abs=1e-3)


def test_a_proof_that_cannot_tell_says_so() -> None:
    section = _section(wait_s=0.008, step_s=0.020)
    section["proof"] = {"current": 0, "candidate": 1, "cut": None, "windows": [
        {"order": "candidate-first", "current_samples_per_s": 30.0, "candidate_samples_per_s": 45.0},
        {"order": "current-first", "current_samples_per_s": 40.0, "candidate_samples_per_s": 31.0}]}
    (hit,) = _report(section).by_rule("DL009")
    assert hit.evidence["recommendation"]["trust"] == "too-noisy"
    assert "too noisy to tell" in hit.fix
    section["proof"]["windows"][1] = {"order": "current-first", "current_samples_per_s": 30.0,
                                      "candidate_samples_per_s": 44.0}
    (proved,) = _report(section).by_rule("DL009")
    rec = proved.evidence["recommendation"]
    assert rec["trust"] == "gain" and rec["gain_interval"][0] > 1.0 and "measured in your loop" in proved.fix


def test_the_command_line_shown_is_redacted() -> None:
    from envdoctor.facts.loop import redacted_command

    shown = redacted_command(["python", "train.py", "--hf-token", "hf_abcdefghijklmnopqrstuvwx", "--api-key=s3cret",
                              "--lr", "3e-4", "WANDB_API_KEY=abc"])
    assert shown == ["python", "train.py", "--hf-token", "[redacted]", "--api-key=[redacted]", "--lr", "3e-4",
                     "WANDB_API_KEY=[redacted]"]


# -- real commands -----------------------------------------------------------------------------------

def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240) -> tuple[Any, dict[str, Any] | None]:
    """`envdoctor run --format json --output FILE ARGS`, its temporary files kept in tmp_path/tmp."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    out = tmp_path / "r.json"
    full = {**os.environ, "TMPDIR": str(tmp), **(env or {})}
    proc = run_envdoctor("run", "--warmup", str(WARMUP), "--steps", str(WINDOW), "--format", "json",
                         "--output", str(out), *args, env=full, cwd=str(tmp_path), timeout=timeout)
    ours = [p.name for p in tmp.iterdir() if p.name.startswith("envdoctor-")]  # torch keeps its own caches there
    assert not ours, f"left behind: {ours}"
    report = json.loads(out.read_text()) if out.exists() else None
    if report is not None:
        validate_report(report)
    return proc, report


def _own(proc: Any) -> dict[str, Any]:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the script printed nothing\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """The plain loop that waits for data, run once under `envdoctor run` (exit code 3 of its own)."""
    proc, report = _run(tmp_path_factory.mktemp("plain"), "--", sys.executable, str(LOOP_FIXTURES / "train_loop.py"),
                        env={"EXIT": "3", "WARMUP": str(WARMUP), "WINDOW": str(WINDOW)})
    assert report is not None, proc.stderr
    return proc, report


@pytest.mark.slow
def test_plain_loop_waits_for_data_and_keeps_its_output_and_exit_code(plain_run: tuple[Any, dict[str, Any]]) -> None:
    proc, report = plain_run
    assert proc.returncode == 3, proc.stderr
    own = _own(proc)  # the script's own output reached the terminal (here: the pipe)
    loop = report["loop"]
    assert loop["outcome"] == "measured" and loop["steps"] == WINDOW and loop["returncode"] == 3
    assert abs(loop["data_wait_share"] - own["own_share"]) <= 0.05, (loop["data_wait_share"], own)
    (hit,) = findings(report, "DL009")
    assert hit["evidence"]["settings"]["num_workers"] == 0 and hit["evidence"]["settings"]["batch_size"] == 8
    assert hit["evidence"]["wait_s_per_step"] > 0 and hit["evidence"]["step_s_per_step"] >= 0.02
    assert loop["recommendation"]["num_workers"] >= 1
    assert "status 3" in proc.stderr
    assert not leftover_children()


@pytest.mark.slow
def test_the_recommendation_reaches_the_knee_of_the_real_loop(plain_run: tuple[Any, dict[str, Any]]) -> None:
    """Re-measured without envdoctor, num_workers 0..3: the pick reaches 0.9 of the best steps/s."""
    import subprocess

    picked = plain_run[1]["loop"]["recommendation"]["num_workers"]
    rates = {}
    for workers in (0, 1, 2, 3):
        done = subprocess.run([sys.executable, str(LOOP_FIXTURES / "train_loop.py")], capture_output=True, text=True,
                              env={**os.environ, "WORKERS": str(workers), "WARMUP": str(WARMUP),
                                   "WINDOW": str(WINDOW)}, timeout=240)
        assert done.returncode == 0, done.stderr
        rates[workers] = _own(done)["batches_per_s"]
    assert rates[min(picked, 3)] >= 0.9 * max(rates.values()), (picked, rates)


@pytest.mark.slow
def test_prove_injects_the_candidate_into_the_users_loader(tmp_path: Path) -> None:
    from envdoctor.facts.loop import loop_facts
    from envdoctor.loop.supervisor import run_command

    plan = {"steps": 10, "seconds": None, "warmup_steps": 2,
            "inject": {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True,
                       "dataset": "CostlySamples", "batch_size": 8}}
    run = run_command([sys.executable, str(LOOP_FIXTURES / "train_loop.py")], plan, stop=True,
                      environ={**os.environ, "STEPS": "100000"})
    (row,) = loop_facts(run, plan)["loaders"]
    assert row["complete"] and row["settings"]["injected"] is True
    assert row["settings"]["num_workers"] == 1 and row["settings"]["persistent_workers"] is True
    assert run.stopped and not leftover_children()


@pytest.mark.slow
def test_plain_loop_that_keeps_up_stays_quiet(tmp_path: Path) -> None:
    proc, report = _run(tmp_path, "--", sys.executable, str(LOOP_FIXTURES / "train_loop.py"),
                        env={"SAMPLE_S": "0", "STEP_S": "0.05", "WARMUP": str(WARMUP), "WINDOW": str(WINDOW)})
    assert proc.returncode == 0, proc.stderr
    assert report is not None and report["loop"]["outcome"] == "measured"
    assert report["loop"]["waits_for_data"] is False and not findings(report, "DL009")


@pytest.mark.slow
def test_torchrun_gives_a_row_per_rank(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun, "torchrun is installed with torch"
    proc, report = _run(tmp_path, "--steps", "20", "--", torchrun, "--standalone", "--nproc-per-node", "2",
                        str(LOOP_FIXTURES / "ddp_loop.py"))
    assert proc.returncode == 0, proc.stderr
    assert "rank 0 done" in proc.stdout and "rank 1 done" in proc.stdout
    assert report is not None
    rows = report["loop"]["processes"]
    assert sorted(row["rank"] for row in rows) == [0, 1] and all(row["complete"] for row in rows)
    assert report["loop"]["rank"] == 0
    assert not leftover_children()


@pytest.mark.slow
def test_stop_ends_the_command_after_the_window(tmp_path: Path) -> None:
    proc, report = _run(tmp_path, "--stop", "--", sys.executable, str(LOOP_FIXTURES / "train_loop.py"),
                        env={"STEPS": "100000"})
    assert report is not None and report["loop"]["stopped"] is True and report["loop"]["outcome"] == "measured"
    assert proc.returncode == 0, proc.stderr  # the report's exit code: DL009 is a warning, --fail-on error
    assert not leftover_children()


@pytest.mark.slow
def test_a_failing_command_keeps_its_exit_code_in_one_line(tmp_path: Path) -> None:
    proc, report = _run(tmp_path, "--", sys.executable, "-c", "import sys; print('hello'); sys.exit(7)",
                        "--hf-token", "hf_abcdefghijklmnopqrstuvwx")
    assert proc.returncode == 7 and proc.stdout == "hello\n"
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("envdoctor run:")]
    assert "status 7" in line and "without iterating a torch DataLoader" in line
    assert report is not None and report["loop"]["outcome"] == "no-loader"
    assert "hf_abcdefghijklmnopqrstuvwx" not in json.dumps(report)


@pytest.mark.slow
def test_a_missing_command_is_127(tmp_path: Path) -> None:
    proc, _ = _run(tmp_path, "--", str(tmp_path / "no-such-command"))
    assert proc.returncode == 127 and "could not start the command" in proc.stderr


@pytest.mark.slow
def test_the_users_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    user_site = LOOP_FIXTURES / "user_site"
    proc, _ = _run(tmp_path, "--", sys.executable, "-c",
                   "import os, sitecustomize; print(sitecustomize.MARK, os.environ['USER_SITECUSTOMIZE_RAN'])",
                   env={"PYTHONPATH": str(user_site)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "the user's sitecustomize yes\n"


@pytest.mark.slow
def test_lightning_loop_fires(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    proc, report = _run(tmp_path, "--", sys.executable, str(LOOP_FIXTURES / "lightning_loop.py"),
                        env={"ROOT_DIR": str(tmp_path / "lightning")})
    assert proc.returncode == 0, proc.stderr
    assert report is not None and findings(report, "DL009"), report["loop"]
    assert report["loop"]["settings"]["num_workers"] == 0


@pytest.mark.slow
def test_hf_trainer_loop_that_keeps_up_stays_quiet(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    proc, report = _run(tmp_path, "--", sys.executable, str(LOOP_FIXTURES / "hf_trainer_loop.py"),
                        env={"SAMPLE_S": "0", "STEP_S": "0.05", "OUTPUT_DIR": str(tmp_path / "hf")})
    assert proc.returncode == 0, proc.stderr
    assert report is not None and report["loop"]["outcome"] == "measured", report and report["loop"]
    assert not findings(report, "DL009")


def test_the_verdict_judges_the_loop_in_the_loader_area() -> None:
    # `envdoctor run` measured the user's loop, not the smoke test: the loader area is checked by DL009.
    waits = _report(_section(wait_s=0.008, step_s=0.020)).verdict
    keeps_up = _report(_section(wait_s=0.0004, step_s=0.050)).verdict
    assert waits is not None and keeps_up is not None
    assert (waits["result"], waits["areas"]["loader"], waits["details"]["loader"]["rules"]) == (
        "problems", "problem", ["DL009"])
    assert (keeps_up["result"], keeps_up["areas"]["loader"]) == ("ok", "ok")

"""`report --distributed` under a real `torchrun --standalone --nproc-per-node 2`.

Every test starts the real launcher with two ranks on this machine. Faults are
made through the ENVDOCTOR_TEST_RANK_FAULT test hook ("RANK:raise|hang|exit")
or through a real misconfiguration (GLOO_SOCKET_IFNAME naming no interface).
Each run is bounded by the test's own timeout, far above what rank 0 needs.
"""
from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bounds import static_check_limits, within
from support import findings, run_envdoctor, validate_report

# Looked up, not imported: importing torch here would put it in this test process's
# sys.modules, where other tests check that envdoctor itself never imports it.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]


def _torchrun() -> list[str]:
    script = Path(sys.executable).with_name("torchrun")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "torch.distributed.run"]


#: The wait for ranks that are to report: envdoctor's default (a rank slowed by a busy machine still reports; a
#: run where all ranks report ends as soon as they did, so the long limit costs nothing).
REPORTING_TIMEOUT_S = 120


def torchrun_report(*args: str, env: dict[str, str] | None = None, timeout: float = 2 * REPORTING_TIMEOUT_S,
                    cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], float]:
    """Run envdoctor under torchrun with two ranks; the one JSON report rank 0 printed."""
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    started = time.monotonic()
    proc = subprocess.run([*_torchrun(), "--standalone", "--nproc-per-node", "2", "-m", "envdoctor",
                           "report", "--json", "--distributed", *args],
                          capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd)
    elapsed = time.monotonic() - started
    assert proc.stdout.strip(), f"rank 0 printed nothing; stderr:\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout)  # exactly one JSON document: the other rank stays quiet
    validate_report(report)
    return proc, report, elapsed


def test_two_ranks_give_one_fleet_report_on_rank_0(tmp_path: Path) -> None:
    proc, report, _ = torchrun_report("--budget", "3", cwd=tmp_path)
    fleet = report["facts"]["fleet"]
    assert fleet["mode"] == "distributed" and fleet["world_size"] == 2
    assert [(n["rank"], n["local_rank"]) for n in fleet["nodes"]] == [(0, 0), (1, 1)]
    assert fleet["failed"] == []
    assert fleet["collective"]["ok"] is True and fleet["collective"]["backend"] == "gloo"
    assert findings(report, "FLT007") == [] and findings(report, "FLT009") == []
    # The loader stage runs once per node, on local rank 0 only.
    rank0, rank1 = fleet["nodes"]
    assert (rank0["loader_stage"], rank1["loader_stage"]) == (True, False)
    assert "loader" in rank1["missing_sections"]
    loader_errors = [e for e in report["errors"] if e.get("probe") == "loader"]
    assert all(e["message"].endswith("(ranks 0)") for e in loader_errors)
    # On a busy machine `import torch` alone can outlast a 3 s budget; then compare says
    # the speed was not measured rather than showing a number.
    notes = {n["key"]: n for n in fleet["not_compared"]}
    if "loader_samples_per_s" not in rank0["values"]:
        assert notes["loader_samples_per_s"]["missing_on"] == [rank0["node"], rank1["node"]]
    else:
        assert notes["loader_samples_per_s"]["missing_on"] == [rank1["node"]]
    # Both ranks ran on one machine with one environment: nothing drifts.
    assert [f for f in report["findings"] if f["rule"] in ("FLT001", "FLT002", "FLT003", "FLT005")] == []
    assert proc.returncode == (1 if report["summary"]["error"] else 0)


@pytest.fixture(scope="module")
def raising_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """One launch with two faults: rank 1's checks raise, and GLOO_SOCKET_IFNAME names no interface.

    Rank 1 still reports (its failure), so the gloo check runs and fails on its own:
    the two findings are independent, and one launch saves ten seconds.
    """
    proc, report, _ = torchrun_report(
        "--no-loader", "--distributed-timeout", str(REPORTING_TIMEOUT_S),
        env={"ENVDOCTOR_TEST_RANK_FAULT": "1:raise", "GLOO_SOCKET_IFNAME": "envdoctor-none0"},
        cwd=tmp_path_factory.mktemp("raising"))
    return proc, report


def test_a_rank_that_raises_is_reported_by_rank(raising_run: tuple[Any, dict[str, Any]]) -> None:
    proc, report = raising_run
    (failed,) = findings(report, "FLT007")
    assert failed["severity"] == "error"
    assert failed["evidence"]["rank"] == 1 and failed["evidence"]["status"] == "failed"
    assert failed["evidence"]["reason"] == "RuntimeError: ENVDOCTOR_TEST_RANK_FAULT made rank 1 fail"
    assert failed["message"].startswith("rank 1 on ")
    assert [n["rank"] for n in report["facts"]["fleet"]["nodes"]] == [0]
    assert proc.returncode == 1


def test_a_gloo_group_that_cannot_form_is_reported(raising_run: tuple[Any, dict[str, Any]]) -> None:
    proc, report = raising_run
    (failed,) = findings(report, "FLT009")
    assert failed["severity"] == "error"
    assert failed["evidence"]["backend"] == "gloo"
    assert failed["evidence"]["environ"] == {"GLOO_SOCKET_IFNAME": "envdoctor-none0"}
    assert "envdoctor-none0" in failed["evidence"]["error"]
    assert failed["fix"].startswith("GLOO_SOCKET_IFNAME is 'envdoctor-none0' in this job; ")


def test_the_text_view_of_a_distributed_run(raising_run: tuple[Any, dict[str, Any]]) -> None:
    from rich.console import Console

    from envdoctor.model import Finding, Report, Severity
    from envdoctor.report.fleet_view import fleet_markdown, fleet_renderables

    saved = raising_run[1]
    report = Report(tool=saved["tool"], generated_at=saved["generated_at"], host=saved["host"],
                    target=saved["target"], facts=saved["facts"], errors=saved["errors"],
                    findings=[Finding(rule=f["rule"], name=f["name"], severity=Severity.parse(f["severity"]),
                                      message=f["message"], evidence=f["evidence"]) for f in saved["findings"]])
    buffer = io.StringIO()
    console = Console(file=buffer, width=100, no_color=True, force_terminal=False)
    for item in fleet_renderables(report):
        console.print(item)
    text = buffer.getvalue()
    assert text.startswith("Fleet: 1 of 2 ranks reported")
    assert "comparing needs at least two" in text
    assert fleet_markdown(report).startswith("## Fleet: 1 of 2 ranks reported")


def test_a_rank_that_hangs_is_reported_as_timed_out_within_the_timeout(tmp_path: Path) -> None:
    proc, report, elapsed = torchrun_report("--no-loader", "--distributed-timeout", "4",
                                            env={"ENVDOCTOR_TEST_RANK_FAULT": "1:hang"}, cwd=tmp_path)
    (failed,) = findings(report, "FLT007")
    assert failed["evidence"]["rank"] == 1 and failed["evidence"]["status"] == "timed-out"
    # Rank 0 waits the timeout after its own checks, which take longer on a busy machine:
    # never less than the timeout, and never the hung rank's 12 s sleep plus the launcher's wait.
    assert 4.0 <= failed["evidence"]["waited_s"] < elapsed
    assert failed["message"] == f"rank 1 did not report within {failed['evidence']['waited_s']:.0f} s"
    assert report["facts"]["fleet"]["collective"] is None  # no collective with a rank missing
    assert proc.returncode == 1
    # Rank 0 stopped waiting at its timeout (slack derived from it), not when the hung rank's 12 s sleep ended.
    assert failed["evidence"]["waited_s"] < 2.5 * 4.0 < 12


def test_a_rank_that_exits_is_named_when_the_launcher_stops_the_job(tmp_path: Path) -> None:
    proc, report, elapsed = torchrun_report("--no-loader", "--distributed-timeout", str(REPORTING_TIMEOUT_S),
                                            env={"ENVDOCTOR_TEST_RANK_FAULT": "1:exit"}, cwd=tmp_path)
    (failed,) = findings(report, "FLT007")
    assert failed["evidence"]["rank"] == 1 and failed["evidence"]["status"] == "stopped"
    assert "launcher stopped the job" in failed["message"]
    assert failed["evidence"]["waited_s"] < REPORTING_TIMEOUT_S  # named when it stopped, not timed out
    assert proc.returncode != 0


def test_distributed_without_a_launcher_is_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = run_envdoctor("check", "--no-loader", "--distributed", env=env, cwd=str(tmp_path))
    assert proc.returncode == 2
    assert "--distributed needs the torch.distributed variables" in proc.stderr
    assert "torchrun" in proc.stderr and "Traceback" not in proc.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC")}
    return {**env, "NO_COLOR": "1", "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def test_any_launcher_that_sets_the_variables_works_without_torchrun(tmp_path: Path) -> None:
    port = _free_port()
    argv = [sys.executable, "-m", "envdoctor", "report", "--json", "--no-loader", "--distributed",
            "--distributed-timeout", str(REPORTING_TIMEOUT_S)]
    ranks = [subprocess.Popen(argv, env=_rank_env(rank, 2, port), cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for rank in (0, 1)]
    try:
        (out0, err0), (out1, _) = (rank.communicate(timeout=2 * REPORTING_TIMEOUT_S) for rank in ranks)
    finally:
        for rank in ranks:
            rank.kill()
    assert out1 == "" and ranks[1].returncode == 0  # rank 1 stays quiet
    report = json.loads(out0)
    validate_report(report)
    fleet = report["facts"]["fleet"]
    assert [n["node"].split("@")[0] for n in fleet["nodes"]] == ["rank0", "rank1"]
    assert fleet["failed"] == [] and fleet["collective"]["ok"] is True


def test_rank_0_alone_reports_the_ranks_that_never_connected(tmp_path: Path) -> None:
    from envdoctor.fleet.distributed import EXIT_READ_WAIT_S

    timeout = 2
    # What rank 0 may wait for: its own checks' limits, the ranks' timeout, and its wait for them to read the exit
    # code; slack derived from those (tests/bounds.py), never a time measured here.
    bound = within(*static_check_limits(), timeout, EXIT_READ_WAIT_S)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envdoctor", "report", "--json", "--no-loader", "--distributed",
                           "--distributed-timeout", str(timeout)], env=_rank_env(0, 3, _free_port()), cwd=tmp_path,
                          capture_output=True, text=True, timeout=2 * bound)
    report = json.loads(proc.stdout)
    validate_report(report)
    missing = findings(report, "FLT007")
    assert [f["evidence"]["rank"] for f in missing] == [1, 2]
    assert all(f["evidence"]["status"] == "timed-out" for f in missing)
    assert "never reached rank 0's store" in missing[0]["message"]
    assert "1/3 clients joined" in missing[0]["evidence"]["reason"]
    assert proc.returncode == 1
    assert time.monotonic() - started < bound


def test_every_rank_exits_with_rank_0s_exit_code(tmp_path: Path) -> None:
    """An ordinary finding (SYS001 at --fail-on warning, a real 1024 open-file limit) makes every rank exit 1.

    Ranks that exited 0 beside a rank 0 that exited 1 kept torchrun's other agents in their exit barrier
    for up to 300 s; with one code for all, every agent ends at once.
    """
    import resource

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    port = _free_port()
    argv = [sys.executable, "-m", "envdoctor", "report", "--json", "--no-loader", "--distributed",
            "--distributed-timeout", "30", "--fail-on", "warning"]
    ranks = [subprocess.Popen(argv, env=_rank_env(rank, 2, port), cwd=tmp_path, text=True, preexec_fn=low_limit,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for rank in (0, 1)]
    try:
        (out0, err0), (out1, err1) = (rank.communicate(timeout=90) for rank in ranks)
    finally:
        for rank in ranks:
            rank.kill()
    report = json.loads(out0)
    (low,) = [f for f in findings(report, "SYS001")]
    assert low["evidence"]["soft_limit"] == 1024 and low["evidence"]["ranks"] == [0, 1]
    assert (ranks[0].returncode, ranks[1].returncode) == (1, 1), (err0[-2000:], err1[-2000:])
    assert out1 == "" and "Traceback" not in err0 + err1


def test_under_srun_alone_the_ranks_come_from_slurm() -> None:
    from envdoctor.fleet.distributed import launcher_environment

    slurm = {"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "2", "SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "6",
             "SLURM_LOCALID": "1", "SLURM_NODEID": "2", "SLURM_STEP_NODELIST": "gpu[07-09]"}
    placement = launcher_environment(slurm)
    assert (placement["rank"], placement["world_size"], placement["local_rank"], placement["node_rank"]) == \
        (5, 6, 1, 2)
    assert placement["run_id"] == "slurm-1234.2"
    assert placement["environ"] == {"RANK": "5", "WORLD_SIZE": "6", "MASTER_ADDR": "gpu07", "MASTER_PORT": "21234"}
    # MASTER_ADDR and MASTER_PORT given in the job script win; torchrun's RANK is never overridden.
    given = launcher_environment({**slurm, "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29501"})
    assert given["environ"]["MASTER_ADDR"] == "10.0.0.7" and given["environ"]["MASTER_PORT"] == "29501"
    torchrun = launcher_environment({**slurm, "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    assert (torchrun["rank"], torchrun["world_size"]) == (0, 2)

"""docs/clusters.md's Slurm lines, run as written on a real Slurm cluster on this host.

Debian's slurm-wlm and munge (.ci/run installs them where missing): munged, slurmctld and three
`slurmd -N nodeNN` started by this module and stopped by their PIDs (tests/slurm_cluster.py).
node03's slurmd runs with a soft and hard open-file limit of 1024, and the cluster propagates every
limit but NOFILE, so node03's tasks see 1024 and the others the test's own limit (at least 4096).

The blocks the docs mark `<!-- slurm-test: NAME -->` are taken from the docs and run unchanged,
except the pre-flight's training line (`srun python train.py`), which becomes an `echo`, and the
health-check script's path to the expected values.
"""
from __future__ import annotations

import json
import os
import re
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envdoctor.loop.supervisor import become_subreaper
from slurm_cluster import Cluster, free_ports, missing_programs

DOCS = Path(__file__).resolve().parent.parent / "docs" / "clusters.md"
NODES = ("node01", "node02", "node03")
LOW_NOFILE = 1024

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="Slurm runs on Linux only"),
    pytest.mark.skipif(bool(missing_programs()),
                       reason=f"Slurm is not installed here (missing: {', '.join(missing_programs())}); "
                              "`apt-get install slurm-wlm munge` (.ci/run does it where apt-get is available)"),
]


def doc_block(name: str) -> str:
    """The fenced block right after `<!-- slurm-test: NAME -->` in docs/clusters.md."""
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(rf"<!-- slurm-test: {re.escape(name)} -->\n```\w*\n(.*?)```", text, re.DOTALL)
    assert match, f"docs/clusters.md has no block marked slurm-test: {name}"
    return match[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 4096:
        pytest.skip("this test's own open-file limit is below 4096, so no node would differ from node03")
    # The daemons are this process's children: were it a subreaper (an in-process `envdoctor run` of another
    # test module on this worker), a job step's orphans would be adopted here and never reaped, and slurmstepd
    # would wait on their process group until it drains the node ("Kill task failed").
    become_subreaper(on=False)
    root = tmp_path_factory.mktemp("slurm")
    made = Cluster(root, NODES, low_nofile={"node03": LOW_NOFILE})
    # envdoctor and torchrun from this interpreter's environment; one thread count on every node.
    bin_dir = str(Path(sys.executable).parent)
    made.env.update(PATH=f"{bin_dir}:{made.env.get('PATH', '')}", NO_COLOR="1", OMP_NUM_THREADS="1",
                    COLUMNS="200")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        made.env.pop(name, None)
    try:
        made.start(timeout=60)
        yield made
    finally:
        made.stop()
    assert all(proc.poll() is not None for proc in made.procs.values())


@pytest.fixture(scope="module")
def work(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("jobs")
    (folder / "expected.toml").write_text(doc_block("expected.toml"))
    return folder


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


def test_per_node_reports_then_compare_names_the_odd_node(cluster: Cluster, work: Path) -> None:
    proc = cluster.shell(doc_block("reports"), cwd=work, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr + cluster.logs()
    files = sorted(p.name for p in (work / "reports").glob("*.json"))
    assert files == ["node01.json", "node02.json", "node03.json"]
    for node in NODES:
        scheduler = _report(work / "reports" / f"{node}.json")["host"]["scheduler"]
        assert scheduler["node"] == node and scheduler["kind"] == "slurm"
        assert scheduler["job_id"] and scheduler["step_id"] == "0" and scheduler["nodelist"] == "node[01-03]"
    # compare, inside the allocation, expected the job's three nodes and names node03's limit.
    assert "Fleet: 3 reports compared" in proc.stdout
    assert re.search(r"open files \(soft\) differs across nodes: \d+ on node01, node02; 1024 on node03",
                     proc.stdout), proc.stdout
    assert "FLT010" not in proc.stdout

    # node03's own SYS001 (a warning) counts at --fail-on warning, once, with its node.
    fleet = cluster.run(["envdoctor", "compare", "reports/", "--fail-on", "warning", "--format", "json"],
                        cwd=work)
    assert fleet.returncode == 1
    data = json.loads(fleet.stdout)
    (own,) = [f for f in data["findings"] if f["rule"] == "SYS001"]
    assert own["evidence"]["nodes"] == ["node03"] and own["message"].endswith("(on node03)")
    assert own["evidence"]["soft_limit"] == LOW_NOFILE
    (limit,) = [f for f in data["findings"] if f["rule"] == "FLT005" and f["evidence"]["what"] == "nofile"]
    assert limit["evidence"]["odd_nodes"] == ["node03"]

    # A node whose report is missing fails compare: FLT010 names it.
    (work / "reports" / "node02.json").rename(work / "node02.json.away")
    try:
        missing = cluster.run(["envdoctor", "compare", "reports/", "--nodes", "node[01-03]"], cwd=work)
        assert missing.returncode == 1, missing.stdout + missing.stderr
        assert "FLT010 node-missing" in missing.stdout
        assert "node02 has no readable report (--nodes node[01-03]; 2 of 3 nodes reported)" in missing.stdout
        alone = cluster.run(["envdoctor", "compare", "reports/node01.json"], cwd=work)
        assert alone.returncode == 1 and "comparing needs at least two" in alone.stdout
    finally:
        (work / "node02.json.away").rename(work / "reports" / "node02.json")


def test_percent_placeholders_and_no_two_tasks_on_one_file(cluster: Cluster, work: Path) -> None:
    (work / "pct").mkdir()
    proc = cluster.shell("salloc -N3 srun --ntasks-per-node=1 envdoctor report --json --no-loader "
                         "--select SYS003 --output 'pct/%N-%n.json'", cwd=work, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (work / "pct").iterdir()) == ["node01-0.json", "node02-1.json", "node03-2.json"]
    # One name for three tasks: every task refuses before its checks, nothing is written.
    same = cluster.shell("salloc -N3 srun --ntasks-per-node=1 envdoctor report --json --no-loader "
                         "--output pct/one.json", cwd=work, timeout=180)
    assert same.returncode == 2
    assert same.stderr.count("3 tasks of this job step would write the same file pct/one.json") == 3
    assert not (work / "pct" / "one.json").exists()


def test_preflight_job_fails_on_a_bad_node_and_passes_on_good_ones(cluster: Cluster, work: Path) -> None:
    script = doc_block("preflight.sbatch")
    assert "srun python train.py" in script
    (work / "preflight.sbatch").write_text(script.replace("srun python train.py",
                                                          "srun bash -c 'echo training on $SLURMD_NODENAME'"))
    bad = cluster.run(["sbatch", "--wait", "preflight.sbatch"], cwd=work, timeout=240)
    assert bad.returncode != 0
    job = re.search(r"Submitted batch job (\d+)", bad.stdout)[1]  # type: ignore[index]
    out = (work / f"preflight-{job}.out").read_text()
    assert "node03: FLT005 limit-drift: open files (soft) is 1024, expected at least 4096" in out
    assert "healthy: node01" in out and "healthy: node02" in out and "training" not in out

    good = cluster.run(["sbatch", "--wait", "--nodes=2", "--nodelist=node[01-02]", "preflight.sbatch"],
                       cwd=work, timeout=240)
    job = re.search(r"Submitted batch job (\d+)", good.stdout)[1]  # type: ignore[index]
    out = (work / f"preflight-{job}.out").read_text()
    assert good.returncode == 0, out
    assert "Fleet: 2 reports compared" in out
    assert "training on node01" in out and "training on node02" in out


def test_health_on_each_node_and_the_documented_drain(cluster: Cluster, work: Path) -> None:
    timings = []
    for node, code in (("node01", 0), ("node03", 1)):
        started = time.monotonic()
        proc = cluster.run(["srun", "-w", node, "envdoctor", "health", "--expect", "expected.toml"], cwd=work)
        timings.append(time.monotonic() - started)
        assert proc.returncode == code, proc.stdout + proc.stderr
        lines = proc.stdout.splitlines()
        if code == 0:
            assert len(lines) == 1 and lines[0].startswith(f"healthy: {node} (")
        else:
            assert lines == [f"{node}: FLT005 limit-drift: open files (soft) is 1024, expected at least 4096"]
    # The same answer on every run: nothing measured decides it.
    again = cluster.run(["srun", "-w", "node03", "envdoctor", "health", "--expect", "expected.toml"], cwd=work)
    assert again.returncode == 1 and again.stdout.splitlines() == lines

    script = doc_block("envdoctor-health.sh").replace("/etc/slurm/envdoctor-expected.toml",
                                                     str(work / "expected.toml"))
    (work / "envdoctor-health.sh").write_text(script)
    try:
        drained = cluster.run(["srun", "-w", "node03", "bash", "envdoctor-health.sh"], cwd=work)
        assert drained.returncode == 0, drained.stdout + drained.stderr
        reason = cluster.run(["sinfo", "-h", "-R", "-n", "node03", "-o", "%E"]).stdout.strip()
        assert reason == "envdoctor: node03: FLT005 limit-drift: open files (soft) is 1024, expected at least 4096"
        healthy = cluster.run(["srun", "-w", "node01", "bash", "envdoctor-health.sh"], cwd=work)
        assert healthy.returncode == 0
        assert cluster.run(["sinfo", "-h", "-R", "-n", "node01", "-o", "%E"]).stdout.strip() == ""
    finally:
        cluster.run(["scontrol", "update", "nodename=node03", "state=resume"])
    print(f"health wall times (srun included): {', '.join(f'{t:.2f} s' for t in timings)}")


def test_torchrun_distributed_across_three_nodes_ends_within_its_timeout(cluster: Cluster, work: Path) -> None:
    (port,) = free_ports(1)
    started = time.monotonic()
    # Every name resolves to this host here: MASTER_ADDR, as the docs say for that case.
    proc = cluster.shell(doc_block("torchrun"), cwd=work, timeout=240,
                         env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    elapsed = time.monotonic() - started
    assert "Fleet: 3 of 3 ranks reported" in proc.stdout, proc.stdout + proc.stderr[-4000:]
    # The c10d rendezvous gives out ranks in arrival order: node03 holds one of them.
    assert re.search(r"open files \(soft\) differs across nodes: \d+ on rank\d@node0[12], rank\d@node0[12]; "
                     r"1024 on rank\d@node03", proc.stdout), proc.stdout
    # --fail-on warning: rank 0 exits 1, and so does every other rank, so every torchrun ends at once
    # (ranks exiting 0 kept the other agents in torchrun's 300 s exit barrier).
    assert proc.returncode == 1, proc.stderr[-4000:]
    # (torchrun's own teardown may add its store's connection errors once the store's host has left.)
    assert len(re.findall(r"srun: error: node0\d: task \d: Exited with exit code 1", proc.stderr)) == 3, \
        proc.stderr[-4000:]
    print(f"srun … torchrun … --distributed across 3 nodes: {elapsed:.1f} s")


def test_srun_alone_runs_distributed_with_slurms_ranks_and_no_traceback(cluster: Cluster, work: Path) -> None:
    (port,) = free_ports(1)
    proc = cluster.shell(doc_block("srun-distributed"), cwd=work, timeout=240,
                         env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    assert "Fleet: 3 of 3 ranks reported" in proc.stdout, proc.stdout + proc.stderr[-4000:]
    assert "gloo all_reduce across 3 ranks: ok" in proc.stdout
    # Slurm's task ids are the ranks: task 2 runs on node03.
    assert re.search(r"1024 on rank2@node03", proc.stdout), proc.stdout
    assert proc.returncode == 1
    for task, node in enumerate(NODES):  # every task exits with rank 0's code, and nothing else is said
        assert f"srun: error: {node}: task {task}: Exited with exit code 1" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout.count("Fleet: ") == 1


def test_every_daemon_is_ours_and_alive(cluster: Cluster) -> None:
    assert sorted(cluster.procs) == ["munged", "slurmctld", "slurmd-node01", "slurmd-node02", "slurmd-node03"]
    assert all(proc.poll() is None for proc in cluster.procs.values()), cluster.logs()
    assert os.getpid() not in [proc.pid for proc in cluster.procs.values()]

"""Which nodes `compare` expects, where each task's report goes, `envdoctor health`, and numbers JSON cannot hold.

Reports are made by the real command with the variables Slurm sets in a task (SLURMD_NODENAME,
SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID, SLURM_STEP_NUM_TASKS …) and under a real lower open-file
limit (prlimit); tests/test_slurm.py runs the same on a real Slurm cluster.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from support import findings, json_report, run_cli, run_envdoctor, validate_report

NO_SLURM = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RANK", "WORLD_SIZE", "TORCHELASTIC"))}


def _task_env(node: str, *, job: str = "77", step: str = "0", procid: str = "0", tasks: int = 1,
              nodes: int = 1, **extra: str) -> dict[str, str]:
    return {**NO_SLURM, "SLURMD_NODENAME": node, "SLURM_JOB_ID": job, "SLURM_STEP_ID": step,
            "SLURM_PROCID": procid, "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_STEP_NUM_NODES": str(nodes),
            "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NODEID": procid, **extra}


def _task_report(cwd: Path, output: str, env: dict[str, str], *prefix: str) -> Any:
    return run_envdoctor("report", "--json", "--no-loader", "--select", "SYS001", "--output", output,
                         env=env, cwd=str(cwd), prefix_cmd=prefix)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """reports/node01.json and node02.json, as two tasks of one step write them (node02 differs in OMP threads)."""
    folder = tmp_path_factory.mktemp("nodes")
    (folder / "reports").mkdir()
    for index, (node, threads) in enumerate((("node01", "4"), ("node02", "8"))):
        env = _task_env(node, procid=str(index), tasks=2, nodes=2, OMP_NUM_THREADS=threads,
                        NCCL_DEBUG="INFO", NCCL_SECRET_TOKEN=f"hunter{index}-do-not-show")
        proc = _task_report(folder, "reports/{node}.json", env)
        assert proc.returncode in (0, 1), proc.stderr
    return folder


# --- --output placeholders and one file per task --------------------------------------------------

def test_output_placeholders_and_the_scheduler_record(tmp_path: Path) -> None:
    env = _task_env("node07", job="4242", step="3", procid="5", SLURM_NODEID="2")
    proc = _task_report(tmp_path, "{node}-{rank}-{job}.json", env)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads((tmp_path / "node07-5-4242.json").read_text())
    validate_report(report)
    assert report["host"]["scheduler"] == {"kind": "slurm", "node": "node07", "job_id": "4242", "step_id": "3",
                                           "procid": "5", "ntasks": "1", "nodelist": "node[01-02]"}
    # As Slurm users write them: %N the node, %n its index in the job, %j the job, %t the task, %% a %.
    proc = _task_report(tmp_path, "%N_%n_%j_%t_%%.json", env)
    assert proc.returncode in (0, 1), proc.stderr
    assert (tmp_path / "node07_2_4242_5_%.json").is_file()
    # torchrun's RANK comes before SLURM_PROCID; outside any job {node} is the host name.
    proc = _task_report(tmp_path, "r{rank}.json", {**NO_SLURM, "RANK": "3", "WORLD_SIZE": "1"})
    assert (tmp_path / "r3.json").is_file()
    outside = json.loads((tmp_path / "r3.json").read_text())
    assert "scheduler" not in outside["host"]


def test_tasks_that_would_share_one_file_stop_before_their_checks(tmp_path: Path) -> None:
    for output, tasks, nodes in (("same.json", 3, 3), ("{node}.json", 6, 3), ("{host}.json", 2, 1)):
        proc = _task_report(tmp_path, output, _task_env("node01", tasks=tasks, nodes=nodes))
        assert proc.returncode == 2, (output, proc.stderr)
        assert "tasks of this job step would write the same file" in proc.stderr
        assert "{node}" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
    for job, (output, tasks, nodes) in enumerate((("{node}.json", 3, 3), ("{node}-{rank}.json", 6, 3),
                                                   ("%N-%t.json", 6, 3))):
        proc = _task_report(tmp_path, output, _task_env("node01", job=str(job), tasks=tasks, nodes=nodes))
        assert proc.returncode in (0, 1), (output, proc.stderr)


def test_a_file_another_task_of_the_step_wrote_is_never_replaced(tmp_path: Path) -> None:
    # Two tasks whose names collide anyway (two slurmd given one NodeName): the second is refused.
    first = _task_report(tmp_path, "{node}.json", _task_env("node01", procid="0", tasks=2, nodes=2))
    assert first.returncode in (0, 1), first.stderr
    before = (tmp_path / "node01.json").read_bytes()
    second = _task_report(tmp_path, "{node}.json", _task_env("node01", procid="1", tasks=2, nodes=2))
    assert second.returncode == 2
    assert "node01.json was already written by another task of this job step (node node01, task 0)" in second.stderr
    assert (tmp_path / "node01.json").read_bytes() == before
    # The next job's task replaces the earlier job's file; no temporary file is left.
    later = _task_report(tmp_path, "{node}.json", _task_env("node01", job="78", procid="1", tasks=2, nodes=2))
    assert later.returncode in (0, 1), later.stderr
    assert json.loads((tmp_path / "node01.json").read_text())["host"]["scheduler"]["job_id"] == "78"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node01.json"]


# --- Slurm host lists ------------------------------------------------------------------------------

def test_slurm_hostlists_expand_as_slurm_expands_them() -> None:
    from envdoctor.fleet.placement import expand_hostlist

    assert expand_hostlist("node[01-03]") == ["node01", "node02", "node03"]
    assert expand_hostlist("node[01-02,07],gpu1") == ["node01", "node02", "node07", "gpu1"]
    assert expand_hostlist("rack[1-2]-n[8-9]") == ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]
    assert expand_hostlist("n[9-11]") == ["n9", "n10", "n11"]
    assert expand_hostlist("a,a,b") == ["a", "b"]
    for bad in ("node[01-", "node[a-b]", "node[3-1]", "node]1["):
        with pytest.raises(ValueError):
            expand_hostlist(bad)


# --- compare: the nodes it expects, each node's findings, environment variables ---------------------

def test_compare_expects_the_nodes_it_is_told_and_names_the_missing_one(two_nodes: Path) -> None:
    def compare(*args: str, env: dict[str, str] | None = None) -> Any:
        return run_cli("compare", "reports/", "--format", "json", *args, env=env or NO_SLURM, cwd=str(two_nodes))

    proc = compare("--nodes", "node[01-03]")
    report = json_report(proc)
    assert proc.returncode == 1
    (missing,) = findings(report, "FLT010")
    assert missing["severity"] == "error"
    assert missing["message"] == "node03 has no readable report (--nodes node[01-03]; 2 of 3 nodes reported)"
    assert missing["evidence"] == {"node": "node03", "expected_from": "--nodes node[01-03]", "expected": 3,
                                   "reported": 2}
    # Labelled by the scheduler's node name, not the (repeated) host name.
    assert [n["node"] for n in report["facts"]["fleet"]["nodes"]] == ["node01", "node02"]
    assert [n["scheduler_node"] for n in report["facts"]["fleet"]["nodes"]] == ["node01", "node02"]

    (short,) = findings(json_report(compare("--expect", "3")), "FLT010")
    assert short["message"] == "2 of 3 expected reports (--expect 3)"
    assert findings(json_report(compare("--expect", "2")), "FLT010") == []
    # Inside a job the job's own node list is expected.
    in_job = compare(env={**NO_SLURM, "SLURM_JOB_NODELIST": "node[01-02]"})
    assert findings(json_report(in_job), "FLT010") == [] and in_job.returncode == 0
    in_bigger_job = json_report(compare(env={**NO_SLURM, "SLURM_JOB_NODELIST": "node[01-02],node05"}))
    assert [f["evidence"]["node"] for f in findings(in_bigger_job, "FLT010")] == ["node05"]
    for args, message in ((("--nodes", "node[01-"), "--nodes node[01-: not a Slurm host list"),
                          (("--expect", "0"), "--expect 0"),
                          (("--expect", "2", "--nodes", "node[01-03]"), "--expect 2 but --nodes names 3")):
        bad = compare(*args)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr


def test_compare_names_environment_variables_that_differ_and_keeps_secrets_out(two_nodes: Path) -> None:
    for fmt in ("json", "text", "markdown", "sarif"):
        proc = run_cli("compare", "reports/", "--format", fmt, env=NO_SLURM, cwd=str(two_nodes))
        assert "hunter0" not in proc.stdout and "hunter1" not in proc.stdout, fmt
        if fmt == "json":
            report = json_report(proc)
            drift = {f["evidence"]["what"]: f for f in findings(report, "FLT005")}
            assert set(drift) == {"OMP_NUM_THREADS"}  # NCCL_DEBUG agrees; the secret is redacted on both
            assert drift["OMP_NUM_THREADS"]["evidence"]["values"] == {"node01": "4", "node02": "8"}
            assert drift["OMP_NUM_THREADS"]["message"] == \
                "environment variable OMP_NUM_THREADS differs across nodes: 4 on node01; 8 on node02"
            assert "export OMP_NUM_THREADS=" in drift["OMP_NUM_THREADS"]["fix"]
            envs = [n["environ"] for n in report["facts"]["fleet"]["nodes"]]
            assert all(e["NCCL_DEBUG"] == "INFO" and "SLURM_JOB_ID" not in e for e in envs)
        if fmt == "text":
            assert "OMP_NUM_THREADS" in proc.stdout


def test_a_doubled_package_shows_the_version_import_loads() -> None:
    from envdoctor.facts.fleet import read_distributions

    def dist(version: str, site: str, order: int, matching: int | None = None) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": "numpy", "version": version, "site_dir": site, "order": order}
        if matching is not None:
            entry["files_on_disk"] = {"listed": 10, "matching": matching}
        return entry

    # One folder, two dist-infos (pip --ignore-installed): the copy whose files are on disk.
    report = {"facts": {"packages": {"distributions": [dist("1.26.4", "/s", 0, 0), dist("2.2.6", "/s", 1, 10)]}}}
    assert read_distributions(report) == {"numpy": "2.2.6"}
    # Two folders: the first on the import path.
    report = {"facts": {"packages": {"distributions": [dist("2.2.6", "/user", 5), dist("1.26.4", "/site", 2)]}}}
    assert read_distributions(report) == {"numpy": "1.26.4"}


# --- numbers JSON cannot hold (issue 33) ----------------------------------------------------------

def test_compare_reads_integers_of_any_length_and_never_writes_nan(two_nodes: Path, tmp_path: Path) -> None:
    for name in ("node01", "node02"):
        shutil.copy(two_nodes / "reports" / f"{name}.json", tmp_path / f"{name}.json")
    text = (tmp_path / "node02.json").read_text()
    data = json.loads(text)
    data["facts"]["system"]["limits"]["nofile"]["soft"] = 0  # placeholder, replaced by raw text below
    data["facts"]["system"]["shm"]["total"] = 0.5
    raw = json.dumps(data, indent=1)
    raw = raw.replace('"soft": 0,', '"soft": ' + "9" * 5000 + ",", 1)
    raw = raw.replace('"total": 0.5', '"total": NaN', 1)
    raw = raw.replace('"facts": {', '"facts": {"extra": [Infinity, -Infinity, 1e999],', 1)
    (tmp_path / "node02.json").write_text(raw)

    def strict(text: str) -> Any:
        def refuse(name: str) -> Any:
            raise AssertionError(f"non-JSON constant {name} in the output")
        return json.loads(text, parse_constant=refuse)

    for fmt in ("json", "sarif", "text", "markdown"):
        proc = run_cli("compare", str(tmp_path), "--format", fmt, env=NO_SLURM)
        assert proc.returncode in (0, 1), (fmt, proc.stderr)
        assert "internal error" not in proc.stderr
        if fmt in ("json", "sarif"):
            strict(proc.stdout)  # no NaN, Infinity or -Infinity outside strings
        if fmt == "json":
            report = json_report(proc)
            (note,) = [n for n in report["facts"]["fleet"]["not_compared"] if n["key"] == "non-json"]
            assert note["missing_on"] == ["node02"]
            assert "an integer of 5000 digits" in note["reason"] and "NaN" in note["reason"]
            assert note["reason"].endswith("read as null")
            assert [n["node"] for n in report["facts"]["fleet"]["nodes"]] == ["node01", "node02"]
        if fmt == "text":
            assert "read as null" in " ".join(proc.stdout.split())


# --- envdoctor health ------------------------------------------------------------------------------

def test_health_is_one_line_per_problem_with_exit_codes(tmp_path: Path) -> None:
    expected = tmp_path / "expected.toml"
    expected.write_text('[expect]\npython = "3"\nnofile = 4096\nshm = "1M"\n[expect.environ]\nOMP_NUM_THREADS = "2"\n')
    env = {**NO_SLURM, "SLURMD_NODENAME": "node09", "OMP_NUM_THREADS": "2"}
    healthy = run_envdoctor("health", "--expect", str(expected), env=env, cwd=str(tmp_path))
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.startswith("healthy: node09 (") and healthy.stdout.count("\n") == 1

    low = ("prlimit", "--nofile=1024:1024")
    runs = [run_envdoctor("health", "--expect", str(expected), env={**env, "OMP_NUM_THREADS": "3"},
                          cwd=str(tmp_path), prefix_cmd=low) for _ in range(2)]
    assert [r.returncode for r in runs] == [1, 1]
    assert runs[0].stdout == runs[1].stdout  # nothing measured: the same answer every run
    assert runs[0].stdout.splitlines() == [
        "node09: FLT005 limit-drift: open files (soft) is 1024, expected at least 4096",
        "node09: FLT005 limit-drift: environment variable OMP_NUM_THREADS is 3, expected 2",
    ]
    assert all(len(line) <= 160 and "'" not in line for line in runs[0].stdout.splitlines())
    # Without the file, a 1024 limit is SYS001's warning: below the default --fail-on error.
    plain = run_envdoctor("health", env=env, cwd=str(tmp_path), prefix_cmd=low)
    assert plain.returncode == 0
    strict = run_envdoctor("health", "--fail-on", "warning", env=env, cwd=str(tmp_path), prefix_cmd=low)
    assert strict.returncode == 1 and strict.stdout.startswith("node09: SYS001 nofile-limit-low: ")

    as_json = run_envdoctor("health", "--format", "json", env=env, cwd=str(tmp_path), prefix_cmd=low)
    report = json_report(as_json)
    assert set(report["checked"]) == {"SYS001", "SYS002", "SYS003", "GPU002", "PKG001", "PKG002", "PKG008"}
    assert report["facts"]["torch"] is None or report["facts"]["torch"]["probe"]["ran"] is False
    assert "loader" not in report["facts"] and report["loader"] is None


def test_health_refuses_a_bad_expected_values_file(tmp_path: Path) -> None:
    for text, message in (("[expect]\ntorch = \n", "is not a TOML file"),
                          ("[expect]\nflux = 3\n", "unknown key 'flux'"),
                          ("[expect]\nnofile = \"many\"\n", "is not a whole number"),
                          ("[expect]\nshm = \"lots\"\n", "is not a size")):
        path = tmp_path / "expected.toml"
        path.write_text(text)
        proc = run_envdoctor("health", "--expect", str(path), env=NO_SLURM, cwd=str(tmp_path))
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    missing = run_envdoctor("health", "--expect", str(tmp_path / "none.toml"), env=NO_SLURM)
    assert missing.returncode == 2 and "cannot read the expected values" in missing.stderr


def test_health_output_takes_the_placeholders_and_one_file_per_task(tmp_path: Path) -> None:
    env = _task_env("node04", procid="0", tasks=2, nodes=2)
    first = run_envdoctor("health", "--output", "{node}.json", env=env, cwd=str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert json_report(subprocess_like((tmp_path / "node04.json").read_text()))["host"]["scheduler"]["node"] == "node04"
    again = run_envdoctor("health", "--output", "{node}.json", env={**env, "SLURM_PROCID": "1"}, cwd=str(tmp_path))
    assert again.returncode == 2 and "already written by another task of this job step" in again.stderr


def subprocess_like(stdout: str) -> Any:
    import subprocess

    return subprocess.CompletedProcess([], 0, stdout, "")

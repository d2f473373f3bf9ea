"""`envdoctor mcp`, driven by the official MCP SDK's own stdio client, as an agent would.

The server is started as `envdoctor mcp` in a subprocess whose open-file limit is 256, so the
SYS checks it runs have something real to find: SYS001 with the limit in its evidence.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

anyio = pytest.importorskip("anyio", reason="the mcp extra is not installed (pip install -e '.[test]')")
mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[test]')")
from mcp.client.stdio import StdioServerParameters  # noqa: E402  (part of the mcp extra: after the skip)

pytestmark = pytest.mark.slow

TOOLS = {"check", "loader", "explain", "list_rules", "compare"}


def _server(cwd: Path, nofile: int | None = 256) -> StdioServerParameters:
    # `exec` keeps envdoctor mcp itself as the child the client talks to and stops.
    lower = f"ulimit -n {nofile} && " if nofile else ""
    return StdioServerParameters(command="bash", args=["-c", f'{lower}exec "$0" -m envdoctor mcp', sys.executable],
                                 cwd=str(cwd))


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def _session(cwd: Path, calls: list[tuple[str, dict[str, Any]]], nofile: int | None = 256) -> tuple[Any, list[Any]]:
    """List the tools, then make `calls` in order, in one session with the server."""
    async def run() -> tuple[Any, list[Any]]:
        async with mcp.Client(_server(cwd, nofile), read_timeout_seconds=300) as client:
            listing = await client.list_tools()
            results = [await client.call_tool(name, args) for name, args in calls]
            return listing, results

    return anyio.run(run)


def test_an_agent_lists_the_tools_explains_a_rule_and_runs_the_sys_checks(tmp_path: Path) -> None:
    listing, (explained, unknown, checked) = _session(tmp_path, [
        ("explain", {"rule": "SYS001"}),
        ("explain", {"rule": "NOPE999"}),
        ("check", {"no_loader": True, "select": ["SYS"]}),
    ])
    tools = {tool.name: tool for tool in listing.tools}
    assert set(tools) == TOOLS
    assert {"no_loader", "select", "ignore", "scripts", "prefix"} <= set(tools["check"].input_schema["properties"])
    assert tools["explain"].input_schema["required"] == ["rule"]
    assert all(tool.annotations.read_only_hint and not tool.annotations.destructive_hint for tool in tools.values())

    assert not explained.is_error
    text = _text(explained)
    assert text.startswith("SYS001 nofile-limit-low (default severity: warning)")
    assert "What it checks" in text and "Fix" in text

    assert unknown.is_error and "unknown rule 'NOPE999'" in _text(unknown)

    assert not checked.is_error
    report = checked.structured_content
    assert report == json.loads(_text(checked))
    assert report["schema_version"] == 1 and "facts" not in report
    assert report["loader"] is None
    assert report["findings"] and {f["rule"][:3] for f in report["findings"]} == {"SYS"}
    (sys001,) = [f for f in report["findings"] if f["rule"] == "SYS001"]
    assert sys001["evidence"]["soft_limit"] == 256
    assert "Too many open files" in sys001["message"]
    assert report["exit_code"] == (1 if report["summary"]["error"] else 0)


def test_compare_finds_the_node_whose_open_file_limit_differs(tmp_path: Path) -> None:
    """Two real reports of this machine, one written under `ulimit -n 256`: compare names that node."""
    for name, limit in (("node-a", "unlimited"), ("node-b", "256")):
        lower = "" if limit == "unlimited" else f"ulimit -n {limit} && "
        subprocess.run(["bash", "-c", f'{lower}exec "$0" -m envdoctor report --no-loader --select SYS --output "$1"',
                        sys.executable, str(tmp_path / f"{name}.json")], cwd=tmp_path, timeout=300, check=False)
    compared, missing = _session(tmp_path, [
        ("compare", {"reports": [str(tmp_path / "node-a.json"), str(tmp_path / "node-b.json")]}),
        ("compare", {"reports": [str(tmp_path / "absent.json")]}),
    ])[1]
    assert not compared.is_error
    report = compared.structured_content
    assert report["schema_version"] == 1
    (drift,) = [f for f in report["findings"] if f["evidence"].get("what") == "nofile"]
    assert drift["rule"] == "FLT005"
    assert drift["evidence"]["values"]["node-b"] == 256 and drift["evidence"]["odd_nodes"] == ["node-b"]
    assert missing.is_error and "absent.json" in _text(missing)


def test_the_loader_tool_profiles_the_projects_own_dataset(tmp_path: Path) -> None:
    """`dataset` names a factory in the project (the server's working directory), as on the command line."""
    (tmp_path / "shapes.py").write_text(
        "import torch\n"
        "from torch.utils.data import Dataset\n\n\n"
        "class Shapes(Dataset):\n"
        "    def __len__(self):\n"
        "        return 300\n\n"
        "    def __getitem__(self, index):\n"
        "        return torch.full((3, 8, 8), float(index))\n\n\n"
        "def make():\n"
        "    return Shapes(), {'batch_size': 10}\n")
    (profiled, broken) = _session(tmp_path, [
        ("loader", {"dataset": "shapes:make", "budget_s": 6}),
        ("loader", {"dataset": "not-a-spec", "budget_s": 6}),
    ], nofile=None)[1]
    assert not profiled.is_error
    report = profiled.structured_content
    section = report["loader"]
    assert section["dataset"] == "shapes:make (Shapes)" and section["source"] == {"kind": "factory"}
    assert section["length"] == 300 and section["batch_size"] == 10
    assert section["runs"] and section["runs"][0]["num_workers"] == 0 and section["runs"][0]["samples_per_s"] > 0
    assert {f["rule"][:2] for f in report["findings"]} <= {"DL", "SP"}
    assert not broken.is_error  # a bad spec is a finding about the dataset, not a failed call
    (dl006,) = [f for f in broken.structured_content["findings"] if f["rule"] == "DL006"]
    assert "MODULE:CALLABLE" in dl006["message"]


def _marked(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("ENVDOCTOR_MCP_TEST_MARK") == mark:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("how", ["the client leaves", "SIGTERM to the server alone"])
def test_a_server_stopped_mid_check_leaves_no_process_behind(tmp_path: Path, how: str) -> None:
    """The agent gives up on a long smoke test, or the server is stopped: the check stops, workers and all."""
    (tmp_path / "slow_records.py").write_text(
        "import time\n"
        "import torch\n"
        "from torch.utils.data import Dataset\n\n\n"
        "class SlowRecords(Dataset):\n"
        "    def __len__(self):\n"
        "        return 100000\n\n"
        "    def __getitem__(self, index):\n"
        "        time.sleep(0.05)\n"
        "        return torch.zeros(4)\n\n\n"
        "def make():\n"
        "    return SlowRecords(), {'batch_size': 4}\n")
    mark = uuid.uuid4().hex
    server = _server(tmp_path, nofile=None)
    server.env = {"ENVDOCTOR_MCP_TEST_MARK": mark}
    seen: list[psutil.Process] = []

    async def run() -> None:
        async with mcp.Client(server, read_timeout_seconds=300) as client:
            await client.list_tools()
            with anyio.move_on_after(180):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(client.call_tool, "loader", {"dataset": "slow_records:make", "budget_s": 120})
                    # Wait until the server's child runs the smoke test's runner, then stop.
                    while not seen:
                        await anyio.sleep(0.5)
                        procs = _marked(mark)
                        if any("loader_runner" in " ".join(p.cmdline()) for p in procs):
                            seen.extend(procs)
                    await anyio.sleep(2)  # its workers start
                    if how == "SIGTERM to the server alone":
                        (mcp_server,) = [p for p in seen if p.cmdline()[-2:] == ["envdoctor", "mcp"]]
                        mcp_server.terminate()
                        await anyio.sleep(3)
                    tasks.cancel_scope.cancel()

    with contextlib.suppress(Exception):  # a server stopped mid-call may break the session: that is the point
        anyio.run(run)
    assert len(seen) >= 3, "the smoke test never started"  # the server, envdoctor loader, its runner
    left = _marked(mark)
    for _ in range(100):
        if not left:
            break
        time.sleep(0.1)
        left = _marked(mark)
    assert left == [], [(p.pid, p.cmdline()) for p in left]

"""`envdoctor mcp`, driven by the official MCP SDK's own stdio client, as an agent would — and as a hostile
prompt would (docs/mcp.md: arguments are data, paths stay inside the roots, code runs only where a tool says so).

The server is started as `envdoctor mcp` in a subprocess whose open-file limit is 256, so the
SYS checks it runs have something real to find: SYS001 with the limit in its evidence.

The tests that only list and call tools share a server (one per module and set of start options: each start
costs a second of CPU), and make their calls one after another in its session, as an agent would; the tests
about the server's own start, stop and options start their own.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from loadersupport import skip_if_torch_outlasted_the_budget

anyio = pytest.importorskip("anyio", reason="the mcp extra is not installed (pip install -e '.[test]')")
if TYPE_CHECKING:
    from mcp.client.stdio import StdioServerParameters

# The SDK itself (mcp, mcp_types) is imported where it is used, when a test runs: imported here it would cost
# every pytest-xdist worker most of a second at collection, whether or not it runs these tests.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("mcp") is None,
                       reason="the mcp extra is not installed (pip install -e '.[test]')"),
]

READS = {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True, "open_world_hint": False}
RUNS_CODE = {"read_only_hint": False, "destructive_hint": True, "idempotent_hint": False, "open_world_hint": True}
TOOLS = {"check": READS, "check_environment": RUNS_CODE, "loader": RUNS_CODE, "explain": READS,
         "list_rules": READS, "compare": READS}


def _server(cwd: Path, nofile: int | None = 256, args: tuple[str, ...] = ()) -> StdioServerParameters:
    from mcp.client.stdio import StdioServerParameters

    # `exec` keeps envdoctor mcp itself as the child the client talks to and stops.
    lower = f"ulimit -n {nofile} && " if nofile else ""
    return StdioServerParameters(command="bash", args=["-c", f'{lower}exec "$0" -m envdoctor mcp "$@"',
                                                       sys.executable, *args], cwd=str(cwd))


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


class LiveSession:
    """A session with a running server, driven from the test's own thread: `call` waits for each answer."""

    def __init__(self, cwd: Path, portal: Any, client: Any) -> None:
        self.cwd = cwd
        self._portal = portal
        self._client = client
        self.listing = portal.call(client.list_tools)

    def call(self, name: str, args: dict[str, Any]) -> Any:
        return self._portal.call(self._client.call_tool, name, args)

    def calls(self, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        """`calls` in order, each once the one before it has been answered."""
        return [self.call(name, args) for name, args in calls]


@contextlib.contextmanager
def _live_session(cwd: Path, nofile: int | None = 256, roots: list[Path] | None = None,
                  args: tuple[str, ...] = ()) -> Iterator[LiveSession]:
    """Start the server, open a session with it and list its tools; close both on leaving.

    `roots`: the folders the client declares (roots/list); None declares no roots capability.
    The session runs in anyio's event loop on a thread of its own (a blocking portal).
    """
    import mcp
    from mcp_types import ListRootsResult, Root

    async def list_roots(_context: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=folder.as_uri()) for folder in roots or []])

    client = mcp.Client(_server(cwd, nofile, args), read_timeout_seconds=300,
                        list_roots_callback=list_roots if roots is not None else None)
    with anyio.from_thread.start_blocking_portal() as portal, portal.wrap_async_context_manager(client) as entered:
        yield LiveSession(cwd, portal, entered)


def _session(cwd: Path, calls: list[tuple[str, dict[str, Any]]], nofile: int | None = 256,
             roots: list[Path] | None = None, args: tuple[str, ...] = ()) -> tuple[Any, list[Any]]:
    """A server of its own: list the tools, then make `calls` in order, in one session with it."""
    with _live_session(cwd, nofile, roots, args) as session:
        return session.listing, session.calls(calls)


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSession]:
    """One server under `ulimit -n 256`, in a folder of its own, shared by the tests that list and call tools."""
    with _live_session(tmp_path_factory.mktemp("limited")) as session:
        yield session


def test_an_agent_lists_the_tools_explains_a_rule_and_runs_the_sys_checks(limited_server: LiveSession) -> None:
    explained, unknown, checked = limited_server.calls([
        ("explain", {"rule": "SYS001"}),
        ("explain", {"rule": "NOPE999"}),
        ("check", {"select": ["SYS"]}),
    ])
    tools = {tool.name: tool for tool in limited_server.listing.tools}
    assert set(tools) == set(TOOLS)
    assert {"select", "ignore", "scripts", "data"} <= set(tools["check"].input_schema["properties"])
    assert "prefix" not in tools["check"].input_schema["properties"]
    assert tools["check_environment"].input_schema["required"] == ["prefix"]
    assert tools["explain"].input_schema["required"] == ["rule"]
    assert not any("client_roots" in tool.input_schema["properties"] for tool in tools.values())

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


def test_every_tool_says_what_it_runs_in_its_annotations_and_description(limited_server: LiveSession) -> None:
    """Read-only only where nothing but envdoctor runs; the tools that start code say so in words too."""
    tools = {tool.name: tool for tool in limited_server.listing.tools}
    assert set(tools) == set(TOOLS)
    for name, expected in TOOLS.items():
        hints = tools[name].annotations
        assert {key: getattr(hints, key) for key in expected} == expected, name
        description = tools[name].description or ""
        if expected is READS:
                assert "Read-only" in description, name
    said = {name: " ".join((tool.description or "").split()) for name, tool in tools.items()}
    assert "This runs the environment's Python" in said["check_environment"]
    assert "this runs your dataset code" in said["loader"]
    assert "runs no interpreter but envdoctor's own and none of your code" in said["check"]


def test_compare_finds_the_node_whose_open_file_limit_differs(limited_server: LiveSession) -> None:
    """Two real reports of this machine, one written under `ulimit -n 256`: compare names that node."""
    folder = limited_server.cwd  # the server's working directory: "node-b.json" is found there
    for name, limit in (("node-a", "unlimited"), ("node-b", "256")):
        lower = "" if limit == "unlimited" else f"ulimit -n {limit} && "
        subprocess.run(["bash", "-c", f'{lower}exec "$0" -m envdoctor report --no-loader --select SYS --output "$1"',
                        sys.executable, str(folder / f"{name}.json")], cwd=folder, timeout=300, check=False)
    compared, missing = limited_server.calls([
        ("compare", {"reports": [str(folder / "node-a.json"), "node-b.json"]}),
        ("compare", {"reports": [str(folder / "absent.json")]}),
    ])
    assert not compared.is_error
    report = compared.structured_content
    assert report["schema_version"] == 1
    (drift,) = [f for f in report["findings"] if f["evidence"].get("what") == "nofile"]
    assert drift["rule"] == "FLT005"
    assert drift["evidence"]["values"]["node-b"] == 256 and drift["evidence"]["odd_nodes"] == ["node-b"]
    assert missing.is_error and "absent.json" in _text(missing)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder (the server's root), with a secret outside it and links that lead there.

    Shared by this module's tests, as the root of `project_server`: each test adds files of its own names.
    """
    top = tmp_path_factory.mktemp("mcp-project")
    root = top / "project"
    root.mkdir()
    outside = top / "elsewhere"
    outside.mkdir()
    (outside / "credentials").write_text("machine api.example.com login alice password outside-hunter2\n")
    (root / "to_credentials.py").symlink_to(outside / "credentials")
    (root / "to_elsewhere").symlink_to(outside)
    (root / "victim.txt").write_text("keep me\n")
    return root


@pytest.fixture(scope="module")
def project_server(project: Path) -> Iterator[LiveSession]:
    """One server whose working directory (its root) is `project`, with no roots declared by the client."""
    with _live_session(project, nofile=None) as session:
        yield session


def test_paths_outside_the_roots_are_refused_before_anything_runs(project: Path, project_server: LiveSession) -> None:
    refused = [
        ("check", {"scripts": ["/etc/passwd"]}),
        ("check", {"scripts": ["../../../../../../../../etc/passwd"]}),
        ("check", {"scripts": ["../elsewhere/credentials"]}),
        ("check", {"scripts": ["to_credentials.py"]}),  # a link in the root to a file outside it
        ("check", {"scripts": ["to_elsewhere/credentials"]}),  # through a linked folder
        ("check", {"scripts": ["."]}),  # a folder holding a link to a file outside the root
        ("check", {"data": "/etc"}),
        ("check", {"against": "/etc/passwd"}),
        ("compare", {"reports": ["/etc/passwd"]}),
        ("loader", {"data": "/etc", "budget_s": 1}),
        ("check_environment", {"prefix": "/usr"}),
    ]
    results = project_server.calls(refused)
    for (name, args), result in zip(refused, results):
        text = _text(result)
        assert result.is_error, (name, args, text)
        assert "outside the folders this server may read" in text and str(project) in text, (name, args, text)
        assert "hunter2" not in text and "root:" not in text


def test_the_clients_declared_roots_bound_the_paths(project: Path) -> None:
    """A client that declares roots narrows the server to them: a file of the working directory outside
    the declared folder is refused, one inside it is checked."""
    inner = project / "src"
    inner.mkdir()
    (inner / "train.py").write_text("print('hello')\n")
    (project / "other.py").write_text("print('other')\n")
    inside, outside = _session(project, [
        ("check", {"scripts": [str(inner / "train.py")], "select": ["SPW"]}),
        ("check", {"scripts": [str(project / "other.py")], "select": ["SPW"]}),
    ], nofile=None, roots=[inner])[1]
    assert not inside.is_error, _text(inside)
    assert outside.is_error and "the roots the MCP client declared" in _text(outside)


def test_the_servers_root_option_names_the_folders_when_the_client_declares_none(project: Path) -> None:
    data = project.parent / "datasets"
    data.mkdir()
    (project / "train.py").write_text("print('hello')\n")
    elsewhere, here = _session(project, [
        ("check", {"data": str(data), "select": ["SYS001"]}),
        ("check", {"scripts": [str(project / "train.py")], "select": ["SPW"]}),
    ], nofile=None, args=("--root", str(data)))[1]
    assert not elsewhere.is_error, _text(elsewhere)
    assert here.is_error and "the --root folders the server was started with" in _text(here)


def test_arguments_are_data_never_options(project: Path, project_server: LiveSession) -> None:
    """`--output=…` is a file name like any other (inside the root, and absent), never an option of envdoctor's."""
    victim = project / "victim.txt"
    results = project_server.calls([
        ("check", {"scripts": [f"--output={victim}"], "select": ["SPW"]}),
        ("check", {"scripts": [f"--svg={victim}"], "select": ["SPW"]}),
        ("compare", {"reports": [f"--output={victim}"]}),
        ("explain", {"rule": "--help"}),
        ("check", {"select": ["--output=x"]}),
        ("loader", {"dataset": "--help", "budget_s": 1}),
        ("check", {"scripts": ["a\x00b"]}),
        ("explain", {"rule": "S" * 10_000_000}),
        ("check", {"select": ["SYS"] * 1000}),
        ("loader", {"budget_s": -1}),
    ])
    assert victim.read_text() == "keep me\n"
    output, svg, compared, helped, selected, dataset, nul, huge, many, budget = results
    for result in (output, svg):
        assert not result.is_error, _text(result)
        (spw004,) = result.structured_content["findings"]
        assert spw004["rule"] == "SPW004" and spw004["evidence"]["error"] == "no such file or directory"
        assert spw004["evidence"]["path"].endswith(f"--{'output' if result is output else 'svg'}={victim}")
    assert compared.is_error and "--output=" in _text(compared)
    assert helped.is_error and "argument rule is not a rule id" in _text(helped) and "usage:" not in _text(helped)
    assert selected.is_error and "argument select[0] is not a rule id" in _text(selected)
    assert dataset.is_error and "argument dataset must be MODULE:CALLABLE" in _text(dataset)
    assert nul.is_error and "argument scripts[0] contains a NUL byte" in _text(nul)
    assert huge.is_error and "argument rule is 10000000 characters long" in _text(huge)
    assert many.is_error and "argument select has 1000 items" in _text(many)
    assert budget.is_error and "argument budget_s must be more than 0" in _text(budget)


def test_no_line_of_a_file_that_is_not_python_is_quoted(project: Path, project_server: LiveSession) -> None:
    """A credentials file is not Python: named as a script it is said to be so, and not quoted; a .py file
    that does not parse gets SPW004 with the position and the parser's message, not its line."""
    (project / "pgpass").write_text("db.example.com:5432:train:alice:pg-hunter2\n")
    (project / "broken.py").write_text("import os\n\nmachine api.example.com login alice password py-hunter2\n")
    checked = project_server.call("check", {"scripts": ["pgpass", "broken.py"], "select": ["SPW"]})
    assert not checked.is_error
    assert "hunter2" not in _text(checked)
    by_path = {Path(f["evidence"]["path"]).name: f for f in checked.structured_content["findings"]}
    assert by_path["pgpass"]["rule"] == "SPW004" and by_path["pgpass"]["evidence"]["status"] == "not-python"
    broken = by_path["broken.py"]["evidence"]
    assert broken["status"] == "unparsable" and broken["line"] == 3 and broken["error"].startswith("SyntaxError")
    assert "code" not in broken


def _fake_prefix(folder: Path, marker: Path) -> Path:
    """An "environment" whose Python is a program that writes `marker`: what a cloned repository may carry."""
    (folder / "bin").mkdir(parents=True)
    for name in ("python", "python3"):
        program = folder / "bin" / name
        program.write_text(f"#!/bin/sh\necho ran > '{marker}'\nexit 1\n")
        program.chmod(0o755)
    (folder / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return folder


def test_another_environments_python_runs_only_through_the_tool_that_says_so(project: Path, project_server: LiveSession,
                                                                            tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    inside = _fake_prefix(project / ".venv", marker)
    outside = _fake_prefix(tmp_path / "elsewhere-env", marker)
    plain, refused = project_server.calls([
        ("check", {"prefix": str(inside), "select": ["SYS001"]}),  # check takes no prefix: ignored, not run
        ("check_environment", {"prefix": str(outside), "select": ["SYS001"]}),
    ])
    assert not plain.is_error and plain.structured_content["target"]["prefix"] == os.path.realpath(sys.prefix)
    assert refused.is_error and "outside the folders" in _text(refused)
    assert not marker.exists()
    # The capability that says "this runs the environment's Python" does run it.
    asked = project_server.call("check_environment", {"prefix": ".venv", "select": ["SYS001"]})
    assert marker.read_text() == "ran\n", _text(asked)


def test_the_loader_tool_profiles_the_projects_own_dataset(project: Path, project_server: LiveSession) -> None:
    """`dataset` names a factory in the project (the server's working directory), as on the command line."""
    (project / "shapes.py").write_text(
        "import torch\n"
        "from torch.utils.data import Dataset\n\n\n"
        "class Shapes(Dataset):\n"
        "    def __len__(self):\n"
        "        return 300\n\n"
        "    def __getitem__(self, index):\n"
        "        return torch.full((3, 8, 8), float(index))\n\n\n"
        "def make():\n"
        "    return Shapes(), {'batch_size': 10}\n")
    profiled, missing = project_server.calls([
        ("loader", {"dataset": "shapes:make", "budget_s": 6}),
        ("loader", {"dataset": "shapes:nothing_here", "budget_s": 6}),
    ])
    assert not profiled.is_error
    report = profiled.structured_content
    section = report["loader"]
    skip_if_torch_outlasted_the_budget(section, 0.0)  # a machine too busy to import torch in 6 s: its speed
    assert section["dataset"] == "shapes:make (Shapes)" and section["source"] == {"kind": "factory"}
    assert section["length"] == 300 and section["batch_size"] == 10
    assert section["runs"] and section["runs"][0]["num_workers"] == 0 and section["runs"][0]["samples_per_s"] > 0
    assert {f["rule"][:2] for f in report["findings"]} <= {"DL", "SP"}
    assert not missing.is_error  # a factory that is not there is a finding about the dataset, not a failed call
    (dl006,) = [f for f in missing.structured_content["findings"] if f["rule"] == "DL006"]
    assert "nothing_here" in dl006["message"]


def _marked(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("ENVDOCTOR_MCP_TEST_MARK") == mark:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _slow_dataset(folder: Path) -> None:
    (folder / "slow_records.py").write_text(
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


def _wait_for_runner(mark: str, deadline_s: float = 180.0) -> list[psutil.Process]:
    """The marked processes once the smoke test's runner is among them."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        procs = _marked(mark)
        with contextlib.suppress(psutil.Error):
            if any("loader_runner" in " ".join(p.cmdline()) for p in procs):
                return procs
        time.sleep(0.3)
    return []


def test_a_client_that_leaves_mid_check_leaves_no_process_behind(tmp_path: Path) -> None:
    """The agent gives up on a long smoke test: the check stops, workers and all."""
    import mcp

    _slow_dataset(tmp_path)
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
                    seen.extend(await anyio.to_thread.run_sync(_wait_for_runner, mark))
                    await anyio.sleep(2)  # its workers start
                    tasks.cancel_scope.cancel()

    with contextlib.suppress(Exception):  # a session cut mid-call may end with an error: that is the point
        anyio.run(run)
    assert len(seen) >= 3, "the smoke test never started"  # the server, envdoctor loader, its runner
    left = _marked(mark)
    for _ in range(100):
        if not left:
            break
        time.sleep(0.1)
        left = _marked(mark)
    assert left == [], [(p.pid, p.cmdline()) for p in left]


def test_sigterm_during_a_slow_loader_call_ends_the_server_and_its_children(tmp_path: Path) -> None:
    """SIGTERM to the server alone, the client still connected: within 5 s nothing of it is left."""
    _slow_dataset(tmp_path)
    mark = uuid.uuid4().hex
    server = subprocess.Popen([sys.executable, "-m", "envdoctor", "mcp"], cwd=tmp_path, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env={**os.environ, "ENVDOCTOR_MCP_TEST_MARK": mark})
    try:
        for message in _handshake() + [_call(2, "loader", {"dataset": "slow_records:make", "budget_s": 120})]:
            _send(server, message)
        assert json.loads(server.stdout.readline())["id"] == 1
        seen = _wait_for_runner(mark)
        assert len(seen) >= 3, "the smoke test never started"
        server.send_signal(signal.SIGTERM)
        gone, alive = psutil.wait_procs(seen, timeout=5)  # psutil reaps the server: its code is on `gone`
        assert alive == [], [(p.pid, p.cmdline()) for p in alive]
        assert {p.pid: p.returncode for p in gone}[server.pid] == 128 + signal.SIGTERM
    finally:
        server.kill()
        server.communicate()


def _handshake() -> list[dict[str, Any]]:
    return [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "raw", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"}]


def _call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


def _send(server: subprocess.Popen[bytes], message: dict[str, Any] | str) -> None:
    assert server.stdin is not None
    line = message if isinstance(message, str) else json.dumps(message)
    server.stdin.write(line.encode() + b"\n")
    server.stdin.flush()


def test_malformed_json_rpc_gets_an_error_not_silence(tmp_path: Path) -> None:
    """Raw lines, as a broken or hostile client writes them: each is answered, and the server goes on."""
    server = subprocess.Popen([sys.executable, "-m", "envdoctor", "mcp"], cwd=tmp_path, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    try:
        for line in ("{not json", '[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]',
                     '{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}',
                     '{"jsonrpc": "2.0", "id": 7, "method": 5}', '"just a string"'):
            _send(server, line)
        answers = [json.loads(server.stdout.readline()) for _ in range(5)]
        assert [(a["id"], a["error"]["code"]) for a in answers] == [
            (None, -32700), (None, -32600), (None, -32600), (7, -32600), (None, -32600)]
        assert "batches are not supported" in answers[1]["error"]["message"]
        for message in _handshake():
            _send(server, message)
        assert json.loads(server.stdout.readline())["id"] == 1
        _send(server, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert json.loads(server.stdout.readline()) == {"jsonrpc": "2.0", "id": 2, "result": {}}
    finally:
        server.stdin.close()
        assert server.wait(timeout=60) == 0

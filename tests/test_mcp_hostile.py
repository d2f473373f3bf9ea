"""`envdoctor mcp` against the attacks of issue 33 and the pipelined client of issue 32, for real.

* `compare` given a folder inside the roots that holds a link to a report outside them: refused, and nothing
  of the outside report comes back (before: the folder was checked, its files were not, and the outside
  report was read and returned).
* `loader` given `MODULE:CALLABLE` whose module is not a file inside the roots — on the server's import path
  outside them, a link in the root to code elsewhere, the standard library — is refused before anything
  runs (before: anything importable was imported and called).
* a client that writes every request at once and then closes its input gets every answer, in the order of
  its requests (before: only `initialize`).

The first two drive the server with the official SDK's client (mcp 2.3.0, the test extra), the last one
through a raw pipe, as `printf … | envdoctor mcp` would.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from test_mcp import _call, _handshake, _server, _text

anyio = pytest.importorskip("anyio", reason="the mcp extra is not installed (pip install -e '.[test]')")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("mcp") is None,
                       reason="the mcp extra is not installed (pip install -e '.[test]')"),
]


OUTSIDE_NODE = "outside-secret-node-7f3a"


def _a_report(path: Path, cwd: Path) -> None:
    subprocess.run([sys.executable, "-m", "envdoctor", "report", "--no-loader", "--select", "SYS001",
                    "--output", str(path)], cwd=cwd, timeout=300, check=True, capture_output=True)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project (the server's root) with a folder of reports, one of them a link to a report outside it,
    and dataset code outside it that leaves a mark when imported."""
    top = tmp_path_factory.mktemp("mcp-hostile")
    root, outside = top / "project", top / "elsewhere"
    (root / "reports").mkdir(parents=True)
    (root / "clean").mkdir()
    outside.mkdir()
    _a_report(root / "reports" / "node-a.json", top)
    report = json.loads((root / "reports" / "node-a.json").read_text())
    (root / "clean" / "node-a.json").write_text(json.dumps(report))
    report["facts"]["system"]["hostname"] = OUTSIDE_NODE
    (outside / "secret.json").write_text(json.dumps(report))
    (root / "reports" / "node-b.json").symlink_to(outside / "secret.json")
    (root / "clean" / "node-b.json").write_text(json.dumps({**report, "facts": {
        **report["facts"], "system": {**report["facts"]["system"], "hostname": "node-b"}}}))
    for name in ("evil_ds", "linked_target"):
        (outside / f"{name}.py").write_text(
            f"open({str(top / ('imported-' + name))!r}, 'w').write('ran')\n"
            "def make():\n    return list(range(10)), {}\n")
    (root / "linked_ds.py").symlink_to(outside / "linked_target.py")
    return root


def _session(cwd: Path, calls: list[tuple[str, dict[str, Any]]], env: dict[str, str] | None = None) -> list[Any]:
    """A server of its own in `cwd` (its root; the client declares no roots), `calls` made in order."""
    import mcp

    server = _server(cwd, nofile=None)
    server.env = env

    async def run() -> list[Any]:
        async with mcp.Client(server, read_timeout_seconds=300) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(run)


def test_compare_refuses_a_link_in_a_folder_to_a_report_outside_the_roots(project: Path) -> None:
    refused, clean = _session(project, [("compare", {"reports": ["reports"]}), ("compare", {"reports": ["clean"]})])
    text = _text(refused)
    assert refused.is_error, text
    assert "outside the folders this server may read" in text and "node-b.json" in text
    assert OUTSIDE_NODE not in text and OUTSIDE_NODE not in json.dumps(refused.structured_content or {})
    assert not clean.is_error, _text(clean)  # a folder whose reports are all inside: compared as before
    assert clean.structured_content["schema_version"] == 1


def test_the_loader_imports_only_modules_found_under_the_roots(project: Path) -> None:
    outside = project.parent / "elsewhere"
    env = {"PYTHONPATH": str(outside)}  # evil_ds is importable by the server and its children, from outside
    calls = [("loader", {"dataset": "evil_ds:make", "budget_s": 5}),
             ("loader", {"dataset": "linked_ds:make", "budget_s": 5}),
             ("loader", {"dataset": "os:getcwd", "budget_s": 5}),
             ("loader", {"dataset": "antigravity:geohash", "budget_s": 5})]
    results = _session(project, calls, env=env)
    for (_, args), result in zip(calls, results):
        assert result.is_error, (args, _text(result))
        assert "argument dataset" in _text(result), _text(result)
    assert "no module 'evil_ds' inside the folders" in _text(results[0])
    assert "outside the folders this server may read" in _text(results[1])
    assert "standard library" in _text(results[2]) and "standard library" in _text(results[3])
    assert not (project.parent / "imported-evil_ds").exists()
    assert not (project.parent / "imported-linked_target").exists()


def _pipelined(cwd: Path, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every message written at once, then end of input: the answers the server wrote before it ended."""
    data = "".join(json.dumps(message) + "\n" for message in messages).encode()
    proc = subprocess.run([sys.executable, "-m", "envdoctor", "mcp"], input=data, capture_output=True, cwd=cwd,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def test_requests_written_at_once_before_end_of_input_are_all_answered_in_order(tmp_path: Path) -> None:
    messages = [*_handshake(),
                _call(2, "list_rules", {}),
                _call(3, "explain", {"rule": "SYS001"}),
                {"jsonrpc": "2.0", "id": 4, "method": "ping"},
                {"jsonrpc": "2.0", "id": "five", "method": "tools/list"},
                _call(6, "check", {"select": ["SYS001"]}),
                {"jsonrpc": "2.0", "id": 7, "method": "ping"}]
    answers = _pipelined(tmp_path, messages)
    assert [a["id"] for a in answers] == [1, 2, 3, 4, "five", 6, 7]
    assert all("result" in a for a in answers), [a for a in answers if "result" not in a]
    assert "SYS001" in answers[1]["result"]["content"][0]["text"] and answers[3]["result"] == {}
    assert {tool["name"] for tool in answers[4]["result"]["tools"]} >= {"check", "compare", "loader"}
    assert answers[5]["result"]["structuredContent"]["schema_version"] == 1


def test_a_question_to_a_client_that_has_gone_fails_its_call_with_the_reason(tmp_path: Path) -> None:
    """A client that declared roots and closed its input cannot answer `roots/list`: the call that needs
    the roots gets an error saying so, the others their answers, and the server ends."""
    handshake = _handshake()
    handshake[0]["params"]["capabilities"] = {"roots": {}}
    answers = _pipelined(tmp_path, [*handshake, _call(2, "check", {"select": ["SYS001"]}),
                                    {"jsonrpc": "2.0", "id": 3, "method": "ping"}])
    asked = [a for a in answers if a.get("method") == "roots/list"]
    replies = [a for a in answers if "method" not in a]
    assert asked and [a["id"] for a in replies] == [1, 2, 3]
    assert replies[1].get("error") or replies[1]["result"].get("isError"), replies[1]
    assert "the client closed its input before answering" in json.dumps(replies[1])
    assert replies[2]["result"] == {}


def test_a_request_the_client_cancels_holds_no_later_answer_back(tmp_path: Path) -> None:
    """Answers leave in request order, but a cancelled request (never answered, as the protocol says) does not
    hold back the ones after it: the ping gets its answer and the server ends at the end of input."""
    answers = _pipelined(tmp_path, [*_handshake(), _call(2, "check", {"select": ["SYS001"]}),
                                    {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                     "params": {"requestId": 2, "reason": "changed my mind"}},
                                    {"jsonrpc": "2.0", "id": 3, "method": "ping"}])
    assert [a["id"] for a in answers if a["id"] != 2] == [1, 3] and answers[-1]["result"] == {}

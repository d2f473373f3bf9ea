"""The MCP server's arguments as data: shapes, bounds and roots (envdoctor.integrations.mcp_arguments),
and its stdio line check (envdoctor.integrations.mcp_wire), without starting a server."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envdoctor.integrations.mcp_arguments import (
    MAX_CHARS,
    ArgumentProblem,
    Roots,
    dataset_spec,
    rule_id,
    rule_ids,
    seconds,
    server_roots,
)


@pytest.mark.parametrize("value", ["SYS001", "SPW", "shm-too-small", "DL009", "pkg_doubled"])
def test_rule_ids_that_look_like_rule_ids_pass(value: str) -> None:
    assert rule_id("rule", value) == value


@pytest.mark.parametrize(("value", "said"), [
    ("--help", "argument rule is not a rule id"),
    ("-v", "argument rule is not a rule id"),
    ("SYS001,SYS002", "argument rule is not a rule id"),
    ("../SYS001", "argument rule is not a rule id"),
    ("SYS\x00001", "argument rule contains a NUL byte"),
    ("SYS\n001", "argument rule contains a control character"),
    ("", "argument rule is empty"),
    ("S" * (MAX_CHARS + 1), f"argument rule is {MAX_CHARS + 1} characters long"),
])
def test_anything_else_is_refused_by_name(value: str, said: str) -> None:
    with pytest.raises(ArgumentProblem, match="^" + said):
        rule_id("rule", value)


def test_lists_are_bounded_and_each_item_is_named() -> None:
    assert rule_ids("select", None) == []
    with pytest.raises(ArgumentProblem, match=r"argument select\[1\] is not a rule id"):
        rule_ids("select", ["SYS", "--output=x"])
    with pytest.raises(ArgumentProblem, match="argument select has 300 items; at most 256"):
        rule_ids("select", ["SYS"] * 300)
    with pytest.raises(ArgumentProblem, match="argument select must be a list"):
        rule_ids("select", "SYS")


@pytest.mark.parametrize("value", ["train:make_dataset", "pkg.data:Factory.build", "_x:_y"])
def test_dataset_specs(value: str) -> None:
    assert dataset_spec("dataset", value) == value


@pytest.mark.parametrize("value", ["not-a-spec", "--help", "src/train:make", "os:system;rm", "a:", ":b", "a:b:c"])
def test_dataset_specs_refused(value: str) -> None:
    with pytest.raises(ArgumentProblem, match="argument dataset must be MODULE:CALLABLE"):
        dataset_spec("dataset", value)


def test_seconds_are_positive_finite_and_bounded() -> None:
    assert seconds("budget_s", None) is None
    assert seconds("budget_s", 6) == 6.0
    for bad in (0, -1, float("inf"), float("nan"), 10_000, True):
        with pytest.raises(ArgumentProblem, match="argument budget_s must be"):
            seconds("budget_s", bad)


def test_paths_resolve_inside_the_roots_through_links(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("")
    outside = tmp_path / "secret.txt"
    outside.write_text("")
    (root / "leak.py").symlink_to(outside)
    (root / "up").symlink_to(tmp_path)
    roots = Roots([root], "the test's root")
    assert roots.path("scripts[0]", "src/train.py") == str((root / "src" / "train.py").resolve())
    assert roots.path("scripts[0]", str(root)) == str(root.resolve())
    assert roots.path("scripts[0]", "src/../src/absent.py") == str(root.resolve() / "src" / "absent.py")
    for value in ("/etc/passwd", "../secret.txt", "src/../../secret.txt", "leak.py", "up/secret.txt", str(outside)):
        with pytest.raises(ArgumentProblem, match=r"^argument scripts\[0\]: .* outside the folders this server "
                                                  r"may read: .*project \(the test's root\); refused$"):
            roots.path("scripts[0]", value)
    # A sibling whose name starts like the root's is not inside it.
    (tmp_path / "project-evil").mkdir()
    with pytest.raises(ArgumentProblem, match="outside the folders"):
        roots.path("data", str(tmp_path / "project-evil"))


def test_the_clients_file_roots_win_and_other_schemes_are_ignored(tmp_path: Path) -> None:
    fallback = Roots([tmp_path], "the server's")
    declared = Roots.from_client([(tmp_path / "a").as_uri(), "https://example.com/repo", "file://otherhost/x"],
                                 fallback)
    assert declared.folders == (Path(os.path.realpath(tmp_path / "a")),)
    assert declared.source == "the roots the MCP client declared"
    assert Roots.from_client(["https://example.com/repo"], fallback) is fallback
    assert Roots.from_client([], fallback) is fallback


def test_server_roots_default_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert server_roots([]).folders == (Path(os.path.realpath(tmp_path)),)
    with pytest.raises(ArgumentProblem, match="--root .*: not a folder"):
        server_roots([str(tmp_path / "absent")])


@pytest.mark.parametrize(("line", "answer"), [
    (b"{not json\n", (None, -32700)),
    (b"\xff\xfe{\n", (None, -32700)),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]\n', (None, -32600)),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}\n', (None, -32600)),
    (b'{"jsonrpc": "2.0", "id": [1], "method": "tools/list"}\n', (None, -32600)),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}\n', (None, -32600)),
    (b'{"jsonrpc": "2.0", "id": 3, "method": 5}\n', (3, -32600)),
    (b'{"jsonrpc": "1.0", "id": "a", "method": "ping"}\n', ("a", -32600)),
    (b'"ping"\n', (None, -32600)),
    (b"", (None, -32600)),  # what the reader hands on for a line that is too long
])
def test_malformed_lines_are_answered(line: bytes, answer: tuple[object, int]) -> None:
    pytest.importorskip("mcp_types", reason="the mcp extra is not installed")
    from envdoctor.integrations.mcp_wire import check_line

    passed, error = check_line(line)
    assert passed is None
    assert (error.id, error.error.code) == answer


def test_well_formed_lines_pass_and_blank_ones_are_skipped() -> None:
    pytest.importorskip("mcp_types", reason="the mcp extra is not installed")
    from envdoctor.integrations.mcp_wire import check_line

    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}) + "\n"
    assert check_line(ping.encode()) == (ping, None)
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"
    assert check_line(note.encode()) == (note, None)
    assert check_line(b"  \n") == (None, None)


def test_the_reader_splits_lines_and_drops_the_ones_too_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envdoctor.integrations import mcp_wire

    monkeypatch.setattr(mcp_wire, "MAX_LINE_BYTES", 10)
    read, write = os.pipe()
    os.write(write, b'{"a": 1}\n' + b"x" * 25 + b"\nshort\nlast")
    os.close(write)
    got: list[bytes | None] = []
    mcp_wire._read_lines(read, got.append)
    os.close(read)
    assert got == [b'{"a": 1}\n', mcp_wire._TOO_LONG, b"short\n", b"last", None]

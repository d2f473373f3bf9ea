"""Run every line of the README's "Commands most people need" against a venv, as a new user would.

    python scripts/readme_commands.py VENV [--clean]

VENV is a venv with envdoctor installed (CI: the one the README's install command made, on a
fresh clone; tests/test_readme.py: the test suite's own). Each line of the README's block is read
from README.md (so the two cannot drift apart: a line this script does not know how to run is a
failure) and run with its placeholders made real in a scratch folder: `train.py` is a small
guarded training script with a `make_dataset` factory (320 steps), `/data/train` a folder of small sample
files, `~/envs/train` the venv itself, `reports/` two reports of this machine, `expected.toml` the
values `envdoctor health` checks a node against (the venv's own Python). Each command must
end with an exit code its docs allow (0, or 1 for findings; `fix --undo` with no fix to undo is
refused with 2 and says so) and print no traceback.

With `--clean` (the README's fresh venv) the environment checks must find nothing in the
environment itself: no PKG or CHN finding from `check` and `check --deep` (the rest depends on
the machine: its limits, disks and GPU).

Exit 0 when every line ran as it should; 1 otherwise, each failure on a line of its own.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TIMEOUT_S = 600

TRAIN = '''\
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, index):
        return torch.full((8,), float(index))


def make_dataset():
    return Squares()


def main():
    loader = DataLoader(make_dataset(), batch_size=8, num_workers=0)
    for _epoch in range(10):
        for batch in loader:
            (batch * 2).sum()


if __name__ == "__main__":
    main()
'''

#: The mcp line: a client that initializes, lists the tools, and closes its input.
MCP_SESSION = "".join(json.dumps(message) + "\n" for message in (
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "readme", "version": "1"}}},
))


#: What `envdoctor mcp` says where the mcp extra is not installed (the README's venv has only torch beside it).
MCP_EXTRA = "pip install 'envdoctor-pytorch[mcp]'"


def words_of(command: str) -> list[str]:
    return shlex.split(command)


def readme_commands(text: str | None = None) -> list[str]:
    """The commands of the README's "Commands most people need" block, comments dropped."""
    text = README.read_text(encoding="utf-8") if text is None else text
    section = text.split("\n## Commands most people need\n", 1)[1]
    block = re.search(r"^```\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert block, "README.md: no block under \"Commands most people need\""
    return [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def concrete(command: str, venv: Path, work: Path) -> tuple[list[str], str | None, tuple[int, ...]]:
    """(argv, standard input, allowed exit codes) for one README line, its placeholders made real."""
    bin_dir = venv / "bin"
    words = shlex.split(command)
    assert words[0] == "envdoctor", command
    argv = [str(bin_dir / "envdoctor")]
    for word in words[1:]:
        word = {"train.py": str(work / "train.py"), "~/envs/train": str(venv), "/data/train": str(work / "data"),
                "reports/": str(work / "reports"), "python": str(bin_dir / "python"),
                "expected.toml": str(work / "expected.toml")}.get(word, word)
        argv.append(word)
    if ">" in argv:  # `report --json > report.json`: the shell's redirection, done by the caller
        argv = argv[:argv.index(">")]
    allowed: tuple[int, ...] = (0, 1)
    if words[1:3] == ["fix", "--undo"]:
        allowed = (0, 2)  # nothing to undo on a fresh venv: refused, and said so
    if words[1] == "run":
        allowed = (0,)  # the command's own exit code
    return argv, MCP_SESSION if words[1:] == ["mcp"] else None, allowed


def prepare(work: Path, venv: Path) -> None:
    (work / "train.py").write_text(TRAIN)
    data = work / "data"
    data.mkdir()
    for index in range(64):
        (data / f"sample{index:03d}.bin").write_bytes(bytes([index]) * 4096)
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (work / "expected.toml").write_text(f'[expect]\npython = "{version}"\n')
    (work / "reports").mkdir()
    for name in ("node1", "node2"):
        subprocess.run([str(venv / "bin" / "envdoctor"), "report", "--json", "--no-loader", "--output",
                        str(work / "reports" / f"{name}.json")], cwd=work, timeout=TIMEOUT_S, check=False,
                       capture_output=True)


def environment_findings(stdout: str) -> list[str]:
    """The PKG and CHN findings of a JSON report: the environment's own, which a fresh venv must not have."""
    report = json.loads(stdout)
    return [f"{f['rule']}: {f['message']}" for f in report["findings"] if f["rule"][:3] in ("PKG", "CHN")]


def run_all(venv: Path, clean: bool, commands: list[str] | None = None) -> list[str]:
    """Every README line run against `venv`: the failures, each as one line (none: all ran as they should)."""
    failures = []
    with tempfile.TemporaryDirectory(prefix="envdoctor-readme-") as scratch:
        work = Path(scratch)
        prepare(work, venv)
        env = {**os.environ, "NO_COLOR": "1"}
        for command in commands or readme_commands():
            argv, stdin, allowed = concrete(command, venv, work)
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=work, env=env,
                                  timeout=TIMEOUT_S)
            # A JSON report may hold a traceback as data (the torch probe's failed `import numpy`): only what
            # envdoctor says about itself, on standard error, or a text report's own lines, count.
            said = done.stderr + ("" if "--json" in argv else done.stdout)
            if words_of(command)[1:] == ["mcp"] and done.returncode == 2 and MCP_EXTRA in said:
                continue  # the README's venv has no mcp extra: refused, saying which to install
            if done.returncode not in allowed or "Traceback" in said:
                failures.append(f"{command}: exit {done.returncode} (allowed {allowed}): "
                                f"{(done.stderr or done.stdout).strip()[-600:]}")
            if command.startswith("envdoctor fix --undo") and done.returncode == 2 and "journal" not in done.stdout + done.stderr:
                failures.append(f"{command}: refused without saying there is no fix to undo: {done.stderr.strip()}")
        if clean:
            for extra in ((), ("--deep",)):
                done = subprocess.run([str(venv / "bin" / "envdoctor"), "report", "--json", "--no-loader", *extra],
                                      capture_output=True, text=True, cwd=work, env=env, timeout=TIMEOUT_S)
                found = environment_findings(done.stdout) if done.stdout.strip() else [done.stderr.strip()]
                failures += [f"envdoctor check {' '.join(extra)}: a fresh venv has {f}" for f in found]
    return failures


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    failures = run_all(Path(argv[0]).absolute(), clean="--clean" in argv[1:])
    for failure in failures:
        print(failure)
    print(f"{len(readme_commands())} README commands run: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

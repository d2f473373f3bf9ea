"""Where a run sits in a cluster job: the scheduler's node, job and step, and the task's rank.

Used by `--output` (its placeholders, and the refusal to let two tasks of one step write one
file), by the report's `host.scheduler` record, and by `compare`'s expected nodes (Slurm's
hostlist syntax, `node[01-03,07]`). Everything is read from the environment the scheduler or
launcher sets; nothing here runs a scheduler command.

Placeholders in `--output` (envdoctor fills them itself: `srun` expands `%N` only in its own
`--output/--error/--input` options, never in the program's arguments):

    {node}  the scheduler's node name (SLURMD_NODENAME), else the host name   (also %N)
    {rank}  the task's rank: torchrun's RANK, else SLURM_PROCID, else 0       (also %t)
    {host}  the host name                                                     (also %n: Slurm's
            node-relative id, SLURM_NODEID, when set)
    {job}   the job id (SLURM_JOB_ID), else "nojob"                           (also %j)
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

#: The variables a report records under host.scheduler, by the key it records them as.
SLURM_VARIABLES = {
    "node": "SLURMD_NODENAME",
    "job_id": "SLURM_JOB_ID",
    "step_id": "SLURM_STEP_ID",
    "procid": "SLURM_PROCID",
    "ntasks": "SLURM_STEP_NUM_TASKS",
    "nodelist": "SLURM_JOB_NODELIST",
    "cluster": "SLURM_CLUSTER_NAME",
}
_BRACED = re.compile(r"\{(node|rank|host|job)\}")
_PERCENT = re.compile(r"%([Nntj%])")
_PERCENT_NAMES = {"N": "node", "t": "rank", "j": "job"}


def scheduler_record(environ: Mapping[str, str] | None = None) -> dict[str, object] | None:
    """{"kind": "slurm", "node", "job_id", "step_id", …} inside a Slurm job, else None."""
    env = os.environ if environ is None else environ
    if not env.get("SLURM_JOB_ID") and not env.get("SLURMD_NODENAME"):
        return None
    record: dict[str, object] = {"kind": "slurm"}
    for key, name in SLURM_VARIABLES.items():
        if env.get(name):
            record[key] = env[name]
    return record


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def placeholder_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What each placeholder stands for in this task."""
    env = os.environ if environ is None else environ
    host = socket.gethostname()
    rank = env.get("RANK") or env.get("SLURM_PROCID") or "0"
    return {"node": env.get("SLURMD_NODENAME") or host, "rank": rank, "host": host,
            "job": env.get("SLURM_JOB_ID") or "nojob", "nodeid": env.get("SLURM_NODEID") or host}


def has_placeholder(template: str) -> bool:
    return bool(_BRACED.search(template) or _PERCENT.search(template.replace("%%", "")))


def expand_output(template: str, environ: Mapping[str, str] | None = None) -> str:
    """`template` with {node} {rank} {host} {job} and %N %n %t %j filled in (%% is a %)."""
    values = placeholder_values(environ)
    text = _BRACED.sub(lambda m: _safe(values[m[1]]), template)

    def percent(match: re.Match[str]) -> str:
        letter = match[1]
        if letter == "%":
            return "%"
        return _safe(values["nodeid"] if letter == "n" else values[_PERCENT_NAMES[letter]])

    return _PERCENT.sub(percent, text)


def _safe(value: str) -> str:
    """A value fit for a file name: no folder separators, no leading dot."""
    return re.sub(r"[/\\\0]", "_", value).lstrip(".") or "_"


def tasks_sharing(template: str, environ: Mapping[str, str] | None = None) -> int:
    """How many tasks of this step would write the file `template` names (1 when each has its own)."""
    env = os.environ if environ is None else environ
    tasks = _int(env.get("SLURM_STEP_NUM_TASKS")) or _int(env.get("SLURM_NTASKS")) or 1
    if env.get("RANK") and not env.get("TORCHELASTIC_RUN_ID"):
        tasks = max(tasks, _int(env.get("WORLD_SIZE")) or 1)
    if tasks <= 1:
        return 1
    names = {m[1] for m in _BRACED.finditer(template)}
    names |= {_PERCENT_NAMES.get(m[1], "nodeid" if m[1] == "n" else "") for m in _PERCENT.finditer(template)}
    if "rank" in names:
        return 1
    nodes = _int(env.get("SLURM_STEP_NUM_NODES")) or _int(env.get("SLURM_JOB_NUM_NODES")) or 1
    if names & {"node", "nodeid"}:
        return -(-tasks // nodes)  # tasks per node, rounded up
    if "host" in names:
        return tasks if nodes <= 1 else -(-tasks // nodes)
    return tasks


class OutputClaim:
    """The output file of one task among several: created exclusively, never over another task's.

    The report is written beside the destination and hard-linked into place, which fails when
    the name exists; an existing file from an earlier job (or step) is replaced, one written by
    another task of this same step is not, and the error says which task wrote it.
    """

    def __init__(self, path: str, scheduler: dict[str, object] | None) -> None:
        self.path = path
        self.scheduler = scheduler or {}

    def _owner(self) -> dict[str, object] | None:
        """The scheduler record of the report at the path, when it is a report of this very step."""
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.loads(handle.read(64 * 2**20))
            theirs = (data.get("host") or {}).get("scheduler") or {}
        except (OSError, ValueError, AttributeError):
            return None
        mine = self.scheduler
        if mine.get("job_id") and theirs.get("job_id") == mine.get("job_id") \
                and theirs.get("step_id") == mine.get("step_id"):
            return dict(theirs)
        return None

    def write(self, text: str) -> None:
        import tempfile

        from envdoctor.errors import UsageError

        where = Path(self.path)
        fd, tmp = tempfile.mkstemp(dir=where.parent if str(where.parent) else ".", prefix=f".{where.name}.",
                                   suffix=".envdoctor-tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(text.encode("utf-8", errors="backslashreplace"))
                handle.flush()
                os.fsync(handle.fileno())
            for _attempt in range(3):
                try:
                    os.link(tmp, where)  # exclusive: fails when the name exists
                    return
                except FileExistsError:
                    owner = self._owner()
                    if owner is not None:
                        who = f"node {owner.get('node', '?')}, task {owner.get('procid', '?')}"
                        raise UsageError(
                            f"{self.path} was already written by another task of this job step ({who}): "
                            "give each task its own file, e.g. --output reports/{node}.json "
                            "(or {rank} with several tasks a node)") from None
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(where)  # an earlier job's report: replaced
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP, errno.EMLINK):
                        raise UsageError(f"cannot write the report to {self.path}: {exc.strerror or exc}") from None
                    # No hard links here: an exclusive create of the name, then a rename over it.
                    try:
                        os.close(os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                    except FileExistsError:
                        continue
                    os.replace(tmp, where)
                    return
            raise UsageError(f"cannot write the report to {self.path}: other tasks keep writing it")
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


# -- Slurm hostlists --------------------------------------------------------------------------------
def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist syntax, expanded: "node[01-03,07],gpu1" -> node01 node02 node03 node07 gpu1.

    Zero padding follows the range's first number; several bracket groups in one name multiply
    (rack[1-2]-n[1-2]). A malformed list raises ValueError with the reason.
    """
    names: list[str] = []
    for item in _split_top(text.strip()):
        if item:
            names += _expand_one(item)
    return list(dict.fromkeys(names))


def _split_top(text: str) -> list[str]:
    """Split at the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in {text!r}")
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if depth:
        raise ValueError(f"unbalanced '[' in {text!r}")
    parts.append(current.strip())
    return parts


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\[\]]*)\]", item)
    if match is None:
        if "[" in item or "]" in item:
            raise ValueError(f"unbalanced brackets in {item!r}")
        return [item]
    head, tail = item[:match.start()], item[match.end():]
    out: list[str] = []
    for part in match[1].split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"{part!r} in {item!r} is not a number or a range of numbers")
        start, stop = int(low), int(high) if dash else int(low)
        if stop < start:
            raise ValueError(f"the range {part!r} in {item!r} goes backwards")
        if stop - start > 100_000:
            raise ValueError(f"the range {part!r} in {item!r} names more than 100000 nodes")
        width = len(low)
        out += [f"{head}{n:0{width}d}{rest}" for n in range(start, stop + 1) for rest in _expand_one(tail)]
    return out


def output_for_task(template: str, environ: Mapping[str, str] | None = None,
                    single_writer: bool = False) -> tuple[str, OutputClaim | None]:
    """The expanded `--output` path, and the claim that writes it when several tasks of one step run.

    Refused (a usage error, before any check runs) when the tasks of this step would all write the
    one file the template names. `single_writer`: only one task writes (rank 0 under --distributed).
    """
    from envdoctor.errors import UsageError

    env = os.environ if environ is None else environ
    path = expand_output(template, env)
    sharing = tasks_sharing(template, env)
    if sharing > 1 and not single_writer:
        raise UsageError(
            f"--output {template}: {sharing} tasks of this job step would write the same file {path}, "
            "and all but one report would be lost: put {node} in the name (one task a node), or {rank} "
            "with several tasks a node, e.g. --output reports/{node}.json")
    tasks = _int(env.get("SLURM_STEP_NUM_TASKS")) or _int(env.get("SLURM_NTASKS")) or 1
    several = tasks > 1 or (_int(env.get("WORLD_SIZE")) or 1) > 1
    if single_writer or not several or path.startswith("/dev/") or (os.path.exists(path) and not os.path.isfile(path)):
        return path, None
    return path, OutputClaim(path, scheduler_record(env))

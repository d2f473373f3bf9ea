"""Running other programs with a hard time limit and no leftovers.

Every probe that starts an interpreter (the target environment's Python, the
torch probe, the loader stage) goes through `run_bounded`: the child gets a
session (and so a process group) of its own, and when it overstays its limit
the whole group is killed, workers and grandchildren included. Windows has no
process groups to kill: there the child's process tree, as psutil sees it, is
killed instead.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    import psutil

    #: What `signal.signal` hands back and takes: a handler, SIG_DFL / SIG_IGN, or None (set outside Python).
    SignalHandler: TypeAlias = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


def handle_signals(handler: Callable[[int, FrameType | None], object], signals: Sequence[int]
                   ) -> dict[int, SignalHandler]:
    """Install `handler` for each of `signals` that is not ignored; {signal: the handler it replaced}.

    A signal ignored when envdoctor started stays ignored: `nohup` ignores SIGHUP (and a non-interactive
    shell's background job SIGINT) so that closing the terminal does not end the job, and envdoctor, like the
    processes it starts (which inherit the setting), honours that. Main thread only, as `signal.signal` is.
    """
    previous: dict[int, SignalHandler] = {}
    for signum in signals:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, handler)
    return previous


@dataclass(frozen=True)
class Completed:
    """What a bounded run produced."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.returncode == 0

    def describe_failure(self) -> str:
        """One line saying how the run ended, for messages and errors."""
        if self.timed_out:
            return f"did not finish within {self.seconds:.1f} s and was killed"
        if self.returncode is not None and self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"was killed by {name}"
        tail = self.stderr.strip().splitlines()[-1:] or self.stdout.strip().splitlines()[-1:]
        detail = f": {tail[0].strip()}" if tail else ""
        return f"exited with status {self.returncode}{detail}"


def kill_group(pgid: int) -> None:
    """Kill a whole process group, ignoring one that is already gone (on Windows: the leader's tree)."""
    if sys.platform == "win32":
        kill_tree(pgid)
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs. Zombies do not count: they hold nothing but their pid
    until their parent, or for orphans init, reaps them, and an init that reaps late (a container's shell,
    a sandbox's own) would otherwise keep a killed group "alive" for seconds. Windows has no groups (False);
    where there is no /proc (macOS), a zombie still counts."""
    if sys.platform == "win32":
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not sys.platform.startswith("linux"):
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid pgrp …: comm may hold spaces and parentheses, so split after the last ")".
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            return True
    return False


def kill_tree(pid: int) -> None:
    """Kill a process and every descendant psutil finds, children first; gone ones are skipped.

    Where there are no process groups (Windows), this is how a child's workers
    are ended: they are found by their parent links while the child still runs.
    """
    import psutil

    try:
        root = psutil.Process(pid)
        family = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in family:
        hard_kill(proc)


def hard_kill(proc: psutil.Process) -> None:
    """End `proc` at once, whatever it does; one that is gone (or never ours) is skipped.

    psutil's `kill()` sends `signal.SIGKILL`, which Windows's `signal` does not have: there `os.kill` with a
    signal that is no console event is TerminateProcess, the hard kill. The process is checked to still be
    the one psutil saw (same start time) before it is signalled, so a reused pid is never hit."""
    import psutil

    try:
        if sys.platform == "win32":
            if proc.is_running():
                os.kill(proc.pid, signal.SIGTERM)
        else:
            proc.kill()
    except (psutil.Error, ProcessLookupError, PermissionError):
        pass


def end_processes(procs: Sequence[psutil.Process], grace_s: float) -> None:
    """SIGTERM to each process (each may clean up), SIGKILL to those still there after `grace_s`, then
    wait for those as long again; gone ones are skipped. The multiprocessing folders their sockets were in
    are removed after them (held_multiprocessing_folders)."""
    import psutil

    pids = [proc.pid for proc in procs]
    folders = held_multiprocessing_folders(pids)
    mapped = mapped_shm(pids)
    since = min((_started(proc) for proc in procs), default=None)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        hard_kill(proc)
    psutil.wait_procs(alive, timeout=grace_s)
    for folder in folders:
        remove_multiprocessing_folder(folder)
    remove_shm_left(mapped, since)


def _started(proc: psutil.Process) -> float:
    import psutil

    try:
        return float(proc.create_time())
    except psutil.Error:
        return time.time()


#: Where POSIX named semaphores (`sem.mp-*`) and shared memory segments (torch's tensors) live on Linux.
SHM_DIR = "/dev/shm"


def mapped_shm(pids: Sequence[int] | set[int]) -> set[int]:
    """Inodes of the /dev/shm files (named semaphores, shared memory segments) these processes have mapped
    (Linux; elsewhere none). Read before the processes are ended: a semaphore of a spawn or forkserver
    queue is unlinked by multiprocessing's resource tracker, which a kill of the whole tree ends too.

    Inodes, not names: sem_open creates a semaphore under a temporary name, maps it, then links it to its
    real name, so the mapping shows the temporary name (deleted) while the file left in /dev/shm has the
    real one.
    """
    inodes: set[int] = set()
    if not sys.platform.startswith("linux"):
        return inodes
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if " /dev/shm/" in line:
                        fields = line.split()
                        if len(fields) >= 6 and fields[4].isdigit():
                            inodes.add(int(fields[4]))
        except OSError:
            continue
    return inodes


def shm_inode(name: str) -> int | None:
    """The inode of /dev/shm/`name`, or None when it is gone."""
    try:
        return os.stat(os.path.join(SHM_DIR, name)).st_ino
    except OSError:
        return None


def remove_shm_left(inodes: set[int], since: float | None) -> list[str]:
    """Remove the /dev/shm files with these inodes (mapped by processes now ended: mapped_shm) that are still
    there: only plain files of this user, made since `since` (the first of those processes started)."""
    removed: list[str] = []
    if not inodes:
        return removed
    try:
        names = sorted(os.listdir(SHM_DIR))
    except OSError:
        return removed
    for name in names:
        path = os.path.join(SHM_DIR, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if info.st_ino not in inodes or not stat.S_ISREG(info.st_mode) or not _left_by_this_user(info, since):
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed.append(name)
    return removed


def _left_by_this_user(info: os.stat_result, since: float | None) -> bool:
    """Whether a file a process left (the lstat of it) is this user's and was made since `since` (a second's
    slack for the file system's clock): what may be removed after that user's processes are ended."""
    getuid = getattr(os, "getuid", None)
    return (since is None or info.st_ctime >= since - 1) and (getuid is None or info.st_uid == getuid())


#: How multiprocessing names its temporary folders (tempfile.mkdtemp(prefix="pymp-")).
_PYMP_NAME = re.compile(r"pymp-[A-Za-z0-9_]+")


def held_multiprocessing_folders(pids: Sequence[int]) -> set[str]:
    """The `pymp-*` folders of the unix sockets these processes hold (Linux; elsewhere none): where a
    DataLoader worker sharing tensors, forkserver or a Manager listens. Only a normal exit of the process
    that made one removes it, so a process that is killed leaves it."""
    if not sys.platform.startswith("linux"):
        return set()
    inodes: set[int] = set()
    for pid in pids:
        with contextlib.suppress(OSError), os.scandir(f"/proc/{pid}/fd") as entries:
            for entry in entries:
                with contextlib.suppress(OSError, ValueError):
                    target = os.readlink(entry.path)
                    if target.startswith("socket:["):
                        inodes.add(int(target[8:-1]))
    folders: set[str] = set()
    if not inodes:
        return folders
    with contextlib.suppress(OSError, ValueError), open("/proc/net/unix", encoding="utf-8", errors="replace") as fh:
        next(fh, None)  # Num RefCount Protocol Flags Type St Inode Path
        for line in fh:
            fields = line.split()
            if len(fields) >= 8 and fields[6].isdigit() and int(fields[6]) in inodes:
                folder = os.path.dirname(fields[7])
                if _PYMP_NAME.fullmatch(os.path.basename(folder)):
                    folders.add(folder)
    return folders


def remove_multiprocessing_folder(path: str | None, since: float | None = None) -> bool:
    """Remove a multiprocessing folder its process could not (killed, or ended by os._exit): only what such a
    folder can be, a whole path to a `pymp-*` folder, not a link, of this user (and made since `since`)."""
    if path is None or not os.path.isabs(path) or not _PYMP_NAME.fullmatch(os.path.basename(path)):
        return False
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return False  # gone: its process removed it
    if not stat.S_ISDIR(info.st_mode) or not _left_by_this_user(info, since):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


def run_bounded(
    argv: Sequence[str],
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    input: str | None = None,
) -> Completed:
    """Run `argv` for at most `timeout` seconds; never raises for the child's failures.

    The child runs in a new session. On timeout the whole process group is
    killed; after a normal exit, any stragglers left in the group (workers
    the child forgot) are killed as well.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        return Completed(tuple(argv), None, "", f"could not start: {exc}", False, 0.0)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc.pid)
        stdout, stderr = proc.communicate()
    finally:
        kill_group(proc.pid)
    return Completed(
        tuple(argv), proc.returncode, stdout or "", stderr or "", timed_out, time.monotonic() - start
    )


def quiet_python_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a target interpreter that must leave nothing behind.

    `-B` on the command line already stops bytecode; the variable covers any
    interpreter the child starts in turn (workers, pip). It is set even where
    the caller's environment lacks it, so the inspected environment stays as
    it was.
    """
    env = dict(os.environ if base is None else base)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return env

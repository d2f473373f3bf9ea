"""A real Slurm cluster on one host, for tests/test_slurm.py: munged, slurmctld and one `slurmd -N` a node.

Debian's slurm-wlm and munge (installed by .ci/run where missing). Everything lives in one temporary
folder: the config, the munge key and socket, the spool and state folders, the logs. Each daemon runs
in the foreground (`-D` / `--foreground`) as a child of the test, and `stop()` ends each one by its PID.
One node can be started with a lower open-file limit (`nofile`): `PropagateResourceLimitsExcept=NOFILE`
makes a task see its own node's limit rather than the submitting shell's.
"""
from __future__ import annotations

import contextlib
import getpass
import os
import resource
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scontrol")


def missing_programs() -> list[str]:
    """The Slurm/munge programs not installed here (empty when a cluster can be started)."""
    found = {name: shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)), None) for name in DAEMONS}
    return [name for name, path in found.items() if path is None]


def program(name: str) -> str:
    return shutil.which(name) or next(p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p))


def free_ports(count: int) -> list[int]:
    """`count` TCP ports nobody listens on now (bound together, so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Cluster:
    """munged + slurmctld + one slurmd per node name, all on this host."""

    def __init__(self, root: Path, nodes: Sequence[str], low_nofile: dict[str, int] | None = None,
                 cpus: int = 2) -> None:
        self.root = root
        self.nodes = list(nodes)
        self.low_nofile = dict(low_nofile or {})
        self.cpus = cpus
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.conf = root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        for name in [n for n in self.env if n.startswith(("SLURM_", "SLURMD_"))]:
            if name != "SLURM_CONF":
                del self.env[name]

    # -- setup -----------------------------------------------------------------------------------
    def _write_config(self) -> None:
        root = self.root
        for sub in ("munge", "state", "spool", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(root / "munge", 0o700)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        os.chmod(key, 0o600)
        ctld_port, *node_ports = free_ports(1 + len(self.nodes))
        self.ctld_port = ctld_port
        lines = [
            "ClusterName=envdoctor-test",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld_port}",
            f"SlurmUser={getpass.getuser()}",
            f"SlurmdUser={getpass.getuser()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}/%n",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd'}-%n.pid",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "PropagateResourceLimitsExcept=NOFILE",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=5",
            "SlurmctldParameters=enable_configless",
        ]
        for node, port in zip(self.nodes, node_ports):
            lines.append(f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                         f"CPUs={self.cpus} RealMemory=1000 State=UNKNOWN")
        lines.append(f"PartitionName=test Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        for node in self.nodes:
            (root / "spool" / node).mkdir(exist_ok=True)

    def _start(self, name: str, argv: list[str], nofile: int | None = None) -> None:
        def limits() -> None:  # in the child, before exec: this node's own open-file limit
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        log = open(self.root / "log" / f"{name}.out", "wb")  # the daemon holds its own copy
        try:
            self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, preexec_fn=limits)
        finally:
            log.close()

    def start(self, timeout: float = 60.0) -> None:
        self._write_config()
        munge = self.root / "munge"
        self._start("munged", [program("munged"), "--foreground", "--force", f"--key-file={munge / 'munge.key'}",
                               f"--socket={munge / 'munge.socket'}", f"--pid-file={munge / 'munged.pid'}",
                               f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"])
        self._wait(lambda: (munge / "munge.socket").exists(), 10, "munged's socket")
        self._start("slurmctld", [program("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        for node in self.nodes:
            self._start(f"slurmd-{node}", [program("slurmd"), "-D", "-N", node, "-f", str(self.conf)],
                        nofile=self.low_nofile.get(node))
        self._wait(self._all_idle, timeout, "every node idle in sinfo")

    def _all_idle(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.logs()}")
        out = self.run([program("sinfo"), "-h", "-N", "-o", "%N %t"], check=False, timeout=10)
        states = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
        return all(states.get(node) == "idle" for node in self.nodes)

    def _wait(self, ready: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.3)
        raise RuntimeError(f"the test cluster did not come up within {timeout:.0f} s ({what}): {self.logs()}")

    # -- use ---------------------------------------------------------------------------------------
    def run(self, argv: list[str], *, check: bool = False, timeout: float = 120, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env={**self.env, **(env or {})}, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, check=check)

    def shell(self, script: str, *, timeout: float = 120, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(["bash", "-c", script], timeout=timeout, cwd=cwd, env=env)

    def logs(self) -> str:
        texts = []
        for path in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.log"]:
            with contextlib.suppress(OSError):
                texts.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-1500:])
        return "\n".join(texts)

    def stop(self) -> None:
        """End every daemon this cluster started, by its PID: slurmds first, munged last."""
        for name in sorted(self.procs, key=lambda n: (n == "munged", n == "slurmctld")):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)

"""Session facts: whether the login manager removes this user's shared memory at logout, and WSL.

systemd-logind's `RemoveIPC=` (default `yes` since systemd 230) deletes every System V and
POSIX IPC object a user owns — `/dev/shm` segments (torch's `torch_*` files) and named
semaphores — when that user's last login session ends, unless the user is a system user
(UID at or below SYS_UID_MAX) or lingers (`loginctl enable-linger`). A run started over ssh
under `nohup` or `tmux` then loses its shared memory at logout, mid-epoch.

`read_logind` reads the configuration the way logind does (systemd.unit(5)'s search path for
`logind.conf` and its `logind.conf.d/` drop-ins, the later drop-in winning), the user's UID
against the system range, the linger flag and whether this process sits in a login session.
`read_wsl` tells WSL 1 and 2 apart from the kernel's release string and the environment.

Every reader takes the root of the file system it reads, so tests point them at fixture trees
of real configuration files as well as at the live machine.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from envdoctor.facts.kernel_files import read_kernel_file

#: Where logind looks for its main file, first found wins (systemd's config search path).
MAIN_FILES = ("etc/systemd/logind.conf", "run/systemd/logind.conf",
              "usr/local/lib/systemd/logind.conf", "usr/lib/systemd/logind.conf")
#: Drop-in folders, highest priority first: a file name in an earlier folder masks the same name later.
DROPIN_DIRS = ("etc/systemd/logind.conf.d", "run/systemd/logind.conf.d",
               "usr/local/lib/systemd/logind.conf.d", "usr/lib/systemd/logind.conf.d")
#: systemd's compiled-in default for RemoveIPC= (logind.conf(5)).
REMOVE_IPC_DEFAULT = True
#: The compiled-in top of the system UID range; /etc/login.defs' SYS_UID_MAX where it says otherwise.
SYSTEM_UID_MAX = 999

_TRUE = {"1", "yes", "y", "true", "t", "on"}
_FALSE = {"0", "no", "n", "false", "f", "off"}


class LogindFacts(TypedDict):
    """What decides whether logind deletes this user's /dev/shm segments and semaphores at logout."""

    #: systemd-logind runs on this machine (its runtime folders exist under /run/systemd).
    running: bool
    #: The effective RemoveIPC= and the file that set it ("default" when none did).
    remove_ipc: bool
    remove_ipc_source: str
    #: The configuration files read, in the order applied.
    files: list[str]
    uid: int | None
    user: str | None
    system_uid_max: int
    system_user: bool
    #: /var/lib/systemd/linger/USER exists: the user's manager outlives their sessions.
    lingering: bool
    #: The login session this process runs in (/proc/self/sessionid, or the cgroup's session-N.scope).
    session: str | None


class WslFacts(TypedDict):
    #: 1 or 2 under WSL, else None.
    version: int | None
    evidence: list[str]


def parse_bool(text: str) -> bool | None:
    """A systemd boolean (`yes`, `on`, `1`, `true` …), or None when it is not one."""
    value = text.strip().lower()
    return True if value in _TRUE else False if value in _FALSE else None


def remove_ipc_in(text: str) -> bool | None:
    """The last valid `RemoveIPC=` of the `[Login]` section of one file, or None when it sets none."""
    section, found = None, None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        key, sep, value = line.partition("=")
        if sep and section == "Login" and key.strip() == "RemoveIPC":
            parsed = parse_bool(value)
            found = parsed if parsed is not None else found
    return found


def config_files(root: Path) -> list[Path]:
    """logind.conf and its drop-ins in the order systemd applies them (later wins)."""
    files = [root / name for name in MAIN_FILES if (root / name).is_file()][:1]
    dropins: dict[str, Path] = {}
    for folder in DROPIN_DIRS:
        try:
            names = sorted(p.name for p in (root / folder).iterdir() if p.name.endswith(".conf"))
        except OSError:
            continue
        for name in names:
            dropins.setdefault(name, root / folder / name)
    return files + [dropins[name] for name in sorted(dropins)]


def system_uid_max(root: Path) -> int:
    """SYS_UID_MAX from login.defs, else systemd's compiled-in 999."""
    for line in (read_kernel_file(root / "etc/login.defs") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "SYS_UID_MAX" and parts[1].isdigit():
            return int(parts[1])
    return SYSTEM_UID_MAX


_SESSION_SCOPE = re.compile(r"/session-([^/]+)\.scope(?:/|$)")


def login_session(proc_self: Path) -> str | None:
    """The audit session id the kernel gives a login (4294967295: none), else the session scope of the cgroup."""
    sessionid = read_kernel_file(proc_self / "sessionid")
    if sessionid and sessionid.isdigit() and int(sessionid) != 2**32 - 1:
        return sessionid
    match = _SESSION_SCOPE.search(read_kernel_file(proc_self / "cgroup") or "")
    return match[1] if match else None


def read_logind(root: Path = Path("/"), uid: int | None = None, user: str | None = None,
                proc_self: Path | None = None) -> LogindFacts:
    """logind's RemoveIPC as it applies to `uid`/`user` (this process's by default) under `root`."""
    running = (root / "run/systemd/seats").is_dir() or (root / "run/systemd/users").is_dir()
    remove_ipc, source = REMOVE_IPC_DEFAULT, "default"
    files = config_files(root)
    for path in files:
        value = remove_ipc_in(read_kernel_file(path) or "")
        if value is not None:
            remove_ipc, source = value, "/" + str(path.relative_to(root))
    top = system_uid_max(root)
    linger = root / "var/lib/systemd/linger"
    return {
        "running": running,
        "remove_ipc": remove_ipc,
        "remove_ipc_source": source,
        "files": ["/" + str(p.relative_to(root)) for p in files],
        "uid": uid,
        "user": user,
        "system_uid_max": top,
        "system_user": uid is not None and uid <= top,
        "lingering": bool(user) and (linger / str(user)).exists(),
        "session": login_session(proc_self or root / "proc/self"),
    }


def read_wsl(kernel_release: str, environ: Mapping[str, str], root: Path = Path("/")) -> WslFacts:
    """WSL 2 says `microsoft-standard-WSL2` in its kernel release, WSL 1 `Microsoft`; the variables agree."""
    evidence: list[str] = []
    version: int | None = None
    lowered = kernel_release.lower()
    if "microsoft" in lowered:
        version = 2 if ("wsl2" in lowered or "microsoft-standard" in lowered) else 1
        evidence.append(f"kernel release {kernel_release}")
    for name in ("WSL_DISTRO_NAME", "WSL_INTEROP"):
        if environ.get(name):
            evidence.append(f"{name} is set")
            version = version or 2
    if (root / "proc/sys/fs/binfmt_misc/WSLInterop").exists():
        evidence.append("/proc/sys/fs/binfmt_misc/WSLInterop exists")
        version = version or 2
    return {"version": version, "evidence": evidence}

"""SYS rules on the session a run lives in: shared memory removed at logout (SYS008) and WSL (SYS009).

Both read the `system` section's `logind` and `wsl` facts (facts.session); a report saved
before those facts existed has neither, and both rules then stay quiet.
"""
from __future__ import annotations

from collections.abc import Iterator

from envdoctor.facts import Facts
from envdoctor.rules import Hit


def find_shm_removed_at_logout(facts: Facts) -> Iterator[Hit]:
    logind = facts["system"].get("logind")
    if not logind or not logind["running"] or not logind["remove_ipc"]:
        return
    if logind["system_user"] or logind["lingering"] or logind["uid"] is None:
        return
    user = logind["user"] or str(logind["uid"])
    in_session = logind["session"] is not None
    where = (f"this process runs in login session {logind['session']}, so logging out of it"
             if in_session else "logging in and out of this machine (ssh) while a run goes on")
    yield Hit(
        message=(f"systemd-logind removes every shared-memory segment and semaphore of user {user} when their "
                 f"last login session ends (RemoveIPC=yes, from {logind['remove_ipc_source']}), and {user} "
                 f"(UID {logind['uid']}) is neither a system user nor lingering: {where} deletes the "
                 "DataLoader's /dev/shm/torch_* files mid-run"),
        evidence={"remove_ipc": True, "remove_ipc_source": logind["remove_ipc_source"],
                  "config_files": logind["files"], "uid": logind["uid"], "user": logind["user"],
                  "system_uid_max": logind["system_uid_max"], "lingering": False,
                  "login_session": logind["session"]},
        fix=(f"`loginctl enable-linger {user}` (the user's manager then outlives their sessions), or as root "
             "set `RemoveIPC=no` in a drop-in /etc/systemd/logind.conf.d/10-keep-ipc.conf under [Login] and "
             "`systemctl restart systemd-logind`, or start the run through the scheduler (sbatch, a systemd "
             "user service) rather than from an interactive login"),
    )


def find_wsl(facts: Facts) -> Iterator[Hit]:
    wsl = facts["system"].get("wsl")
    if not wsl or not wsl["version"]:
        return
    yield Hit(
        message=(f"running under WSL {wsl['version']}: pinned (page-locked) host memory is capped there, so "
                 "`pin_memory=True` can fail ('pin memory thread exited unexpectedly', CUDA out-of-memory on "
                 "cudaHostAlloc) or be slower than unpinned copies"
                 + ("; WSL 1 has no CUDA at all" if wsl["version"] == 1 else "")),
        evidence={"wsl_version": wsl["version"], "evidence": wsl["evidence"]},
        fix=("keep `pin_memory=False` unless a run with it is measured faster under WSL; raise the VM's memory in "
             "%UserProfile%\\.wslconfig ([wsl2] memory=…) if you pin, and keep datasets on the Linux file system "
             "(not /mnt/c), which WSL reads many times faster"),
    )


RULES = {
    "SYS008": find_shm_removed_at_logout,
    "SYS009": find_wsl,
}

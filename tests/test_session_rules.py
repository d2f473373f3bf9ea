"""SYS008 shm-removed-at-logout and SYS009 wsl: the session a run lives in.

logind's configuration is read from fixture trees of real configuration files
(fixtures/logind/: Debian's own logind.conf and login.defs, with drop-ins and a linger
flag beside them), the way logind reads them; the live machine is read too, where
logind does not run (quiet). WSL is told from real kernel release strings and from the
variables WSL sets, in a real `envdoctor` process.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import pytest

from envdoctor.config import Config
from envdoctor.facts import Facts
from envdoctor.facts.session import read_logind, read_wsl, remove_ipc_in
from envdoctor.rules.system.session import RULES
from support import findings, json_report, run_envdoctor

TREES = Path(__file__).resolve().parent.parent / "fixtures" / "logind"


def logind_of(tree: str, uid: int = 1000, user: str = "alice") -> Any:
    root = TREES / tree
    return read_logind(root, uid=uid, user=user, proc_self=root / "proc" / "self")


def hits(rule: str, system: dict[str, Any]) -> list[Any]:
    return list(RULES[rule](Facts.from_dict({"system": system}, Config(no_loader=True))))


def test_sys008_fires_for_a_user_in_a_login_session_under_the_default() -> None:
    logind = logind_of("removes")
    assert logind["running"] and logind["remove_ipc"] and logind["remove_ipc_source"] == "default"
    assert logind["files"] == ["/etc/systemd/logind.conf"]  # read, and it sets nothing: all commented
    [hit] = hits("SYS008", {"logind": logind})
    assert hit.evidence["remove_ipc_source"] == "default"
    assert hit.evidence["uid"] == 1000 and hit.evidence["user"] == "alice"
    assert hit.evidence["login_session"] == "12"
    assert hit.evidence["system_uid_max"] == 999  # Debian's login.defs leaves SYS_UID_MAX commented
    assert "loginctl enable-linger alice" in hit.fix and "RemoveIPC=no" in hit.fix
    assert "login session 12" in hit.message


def test_sys008_the_admins_drop_in_turns_it_off_after_the_vendor_one() -> None:
    logind = logind_of("dropin-keeps")
    # Drop-ins apply in file-name order across all folders: 05-vendor.conf (yes), then 10-keep-ipc.conf (no).
    assert logind["files"] == ["/etc/systemd/logind.conf", "/usr/lib/systemd/logind.conf.d/05-vendor.conf",
                               "/etc/systemd/logind.conf.d/10-keep-ipc.conf"]
    assert logind["remove_ipc"] is False
    assert logind["remove_ipc_source"] == "/etc/systemd/logind.conf.d/10-keep-ipc.conf"
    assert hits("SYS008", {"logind": logind}) == []


def test_sys008_a_same_named_drop_in_in_etc_masks_the_vendor_one() -> None:
    logind = logind_of("masked-removes")
    assert logind["files"] == ["/etc/systemd/logind.conf", "/etc/systemd/logind.conf.d/20-ipc.conf"]
    assert logind["remove_ipc"] is True
    [hit] = hits("SYS008", {"logind": logind})
    assert hit.evidence["remove_ipc_source"] == "/etc/systemd/logind.conf.d/20-ipc.conf"


@pytest.mark.parametrize(("tree", "uid", "why"), [
    ("lingers", 1000, "lingering"),
    ("removes", 998, "system user"),
    ("removes", 0, "root"),
    ("no-logind", 1000, "logind not running"),
])
def test_sys008_quiet(tree: str, uid: int, why: str) -> None:
    logind = logind_of(tree, uid=uid)
    assert hits("SYS008", {"logind": logind}) == [], why


def test_remove_ipc_parsing_takes_the_login_section_and_systemd_booleans() -> None:
    assert remove_ipc_in("[Login]\nRemoveIPC=off\n") is False
    assert remove_ipc_in("[Login]\n#RemoveIPC=no\n") is None
    assert remove_ipc_in("[Other]\nRemoveIPC=no\n") is None
    assert remove_ipc_in("[Login]\nRemoveIPC=no\nRemoveIPC=1\n") is True
    assert remove_ipc_in("[Login]\nRemoveIPC=maybe\n") is None  # logind ignores a bad value


def test_sys008_on_this_machine_reads_the_live_configuration() -> None:
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "SYS008,SYS009")
    report = json_report(proc)
    logind = report["facts"]["system"]["logind"]
    live = read_logind(uid=logind["uid"], user=logind["user"])
    assert logind == live
    if not live["running"] or live["system_user"] or live["lingering"] or not live["remove_ipc"]:
        assert findings(report, "SYS008") == []
    else:
        assert findings(report, "SYS008")


WSL2 = "5.15.153.1-microsoft-standard-WSL2"
WSL1 = "4.4.0-19041-Microsoft"


def test_wsl_versions_from_real_release_strings() -> None:
    assert read_wsl(WSL2, {})["version"] == 2
    assert read_wsl("4.19.128-microsoft-standard", {})["version"] == 2
    assert read_wsl(WSL1, {"WSL_DISTRO_NAME": "Ubuntu"})["version"] == 1
    assert read_wsl("6.8.0-45-generic", {}, Path("/nonexistent"))["version"] is None


def test_sys009_fires_in_a_real_process_that_wsl_variables_mark() -> None:
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "SYS009",
                         env={**os.environ, "WSL_DISTRO_NAME": "Ubuntu", "WSL_INTEROP": "/run/WSL/1_interop"})
    [finding] = findings(json_report(proc), "SYS009")
    assert finding["severity"] == "info"
    assert finding["evidence"]["wsl_version"] == 2
    assert "WSL_DISTRO_NAME is set" in finding["evidence"]["evidence"]
    assert "pin_memory" in finding["fix"]


def test_sys009_quiet_on_this_machine() -> None:
    if "microsoft" in platform.release().lower():
        pytest.skip("this machine is WSL")
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "SYS009")
    report = json_report(proc)
    assert report["facts"]["system"]["wsl"]["version"] is None
    assert findings(report, "SYS009") == []

#!/usr/bin/env bash
# What only a real Windows or macOS machine can show, in one bounded script (as gpu_check.sh is for GPUs).
#
#   scripts/platform_check.sh                 # from the repository root: macOS Terminal, or Git Bash on Windows
#   PYTHON=py scripts/platform_check.sh       # choose the interpreter (default: python3, else python)
#   TORCH="torch==2.13.0" scripts/platform_check.sh   # what to install as torch ("" skips torch and the smoke test)
#
# It makes a fresh venv in a temporary folder, installs envdoctor from this checkout (and torch, from the
# package index), then runs, each bounded and under a heading: the static check, the spawn guard on
# fixtures/platforms/project (train.py must be SPW001, ok.py not), the full check with the DataLoader smoke
# test, and the JSON report's platform facts; then the raw output of the platform's own commands (sysctl and
# mount on macOS, the CIM query on Windows) that fixtures/platforms/ holds parsed copies of. It ends with a
# block to paste into an issue. Nothing outside the temporary folder (removed at the end) is changed; it exits 0 when every step
# gave what it should, 1 otherwise. (Windows without Git Bash: scripts/platform_check.ps1 does the same.)
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-$(command -v python3 >/dev/null 2>&1 && echo python3 || echo python)}"
TORCH="${TORCH-torch==2.13.0}"
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"
work="$(mktemp -d 2>/dev/null || mktemp -d -t envdoctor)"
summary=()
failed=0
[ -n "${KEEP_VENV:-}" ] || trap 'rm -rf "$work"' EXIT  # KEEP_VENV=1 keeps the venv to look into

section() { printf '\n=== %s ===\n' "$1"; }
bounded() {  # bounded CMD...: at most STEP_TIMEOUT seconds (macOS has no `timeout`); prints and returns its status
    "$PYTHON" -c '
import subprocess, sys
try:
    sys.exit(subprocess.run(sys.argv[2:], timeout=float(sys.argv[1])).returncode)
except subprocess.TimeoutExpired:
    print(f"timed out after {sys.argv[1]} s"); sys.exit(124)
except OSError as exc:
    print(f"could not start: {exc}"); sys.exit(127)
' "$STEP_TIMEOUT" "$@"
}
expect() {  # expect NAME "ALLOWED CODES" CMD...: run bounded, note in the summary whether the code was allowed
    local name="$1" allowed="$2"; shift 2
    bounded "$@"
    local rc=$?
    if [[ " $allowed " == *" $rc "* ]]; then summary+=("ok    $name (exit $rc)"); else
        summary+=("FAIL  $name (exit $rc, expected one of: $allowed)"); failed=1; fi
    return 0
}

section "machine"
"$PYTHON" -c 'import platform, sys; print(platform.platform(), platform.machine(), "Python", sys.version.split()[0])' \
    || { echo "no Python interpreter '$PYTHON': set PYTHON=..."; exit 1; }

section "fresh venv and install ($work/venv)"
bounded "$PYTHON" -m venv "$work/venv" || { echo "python -m venv failed"; exit 1; }
if [ -x "$work/venv/Scripts/python.exe" ]; then VPY="$work/venv/Scripts/python.exe"; else VPY="$work/venv/bin/python"; fi
bounded "$VPY" -m pip install --quiet --upgrade pip
expect "pip install envdoctor ${TORCH}" "0" "$VPY" -m pip install --quiet . ${TORCH:+"$TORCH"}
ENVDOCTOR=("$VPY" -m envdoctor)
export NO_COLOR=1

section "static check: envdoctor check --no-loader"
expect "static check" "0 1" "${ENVDOCTOR[@]}" check --no-loader

section "spawn guard: fixtures/platforms/project (train.py is SPW001, ok.py is not)"
project=fixtures/platforms/project
bounded "${ENVDOCTOR[@]}" check --no-loader --select SPW001 --format json --output "$work/spawn.json" \
    "$project/train.py" "$project/ok.py"
spawn_rc=$?
"$VPY" - "$work/spawn.json" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1], encoding="utf-8"))
except (OSError, ValueError) as exc:
    print(f"no report: {exc}"); sys.exit(1)
flagged = []
for finding in report["findings"]:
    where = finding["location"] or {}
    print(finding["rule"], finding["severity"], where.get("path"), where.get("line"))
    flagged.append((finding["rule"], finding["severity"], (where.get("path") or "").replace("\\", "/").split("/")[-1]))
sys.exit(0 if flagged == [("SPW001", "error", "train.py")] else 1)
PY
if [ $? -eq 0 ] && [ "$spawn_rc" -eq 1 ]; then
    summary+=("ok    spawn guard (SPW001, an error, on train.py only)")
else summary+=("FAIL  spawn guard (exit $spawn_rc; see above)"); failed=1; fi

if [ -n "$TORCH" ]; then
    section "full check with the DataLoader smoke test (spawn workers here)"
    expect "check with smoke test" "0 1" "${ENVDOCTOR[@]}" check --budget 20
else
    summary+=("skip  smoke test (TORCH is empty)")
fi

section "platform facts (envdoctor report --json --no-loader)"
bounded "${ENVDOCTOR[@]}" report --json --no-loader --output "$work/report.json"
"$VPY" - "$work/report.json" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1], encoding="utf-8"))
except (OSError, ValueError) as exc:
    print(f"no report: {exc}"); sys.exit(0)
facts = report["facts"]
system, storage, torch = facts.get("system") or {}, facts.get("storage") or {}, facts.get("torch") or {}
print("target:", report["target"].get("kind"), report["target"].get("platform"), report["target"].get("prefix"))
print("not applicable:", json.dumps(system.get("not_applicable")))
print("cpu:", json.dumps(system.get("cpu")))
print("memory:", json.dumps(system.get("memory")))
print("nofile:", json.dumps((system.get("limits") or {}).get("nofile")), "shm:", json.dumps(system.get("shm")))
print("storage mount:", json.dumps(storage.get("mount")), "effective:", json.dumps(storage.get("effective")))
print("torch mps:", json.dumps(torch.get("mps")), "build:", torch.get("build"))
print("findings:", sorted({f["rule"] for f in report["findings"]}), "errors:", report["errors"])
PY

section "the platform's own commands (compare with fixtures/platforms/)"
case "$("$PYTHON" -c 'import sys; print(sys.platform)')" in
    darwin)
        bounded sysctl hw.perflevel0.logicalcpu hw.perflevel1.logicalcpu
        bounded /sbin/mount ;;
    win32|cygwin|msys)
        query=$("$VPY" -c 'from envdoctor.facts.windows import CIM_QUERY; print(CIM_QUERY)')
        bounded powershell -NoProfile -NonInteractive -Command "$query" ;;
    *) echo "not Windows or macOS: nothing platform-specific to show" ;;
esac

section "paste this into the issue"
echo '```'
"$PYTHON" -c 'import platform, sys; print(platform.platform(), platform.machine(), "Python", sys.version.split()[0])'
echo "envdoctor $(git rev-parse --short HEAD 2>/dev/null || echo '?'), torch: ${TORCH:-none}"
printf '%s\n' "${summary[@]}"
echo '```'
echo "(the sections above hold the details; KEEP_VENV=1 keeps the temporary venv)"
exit "$failed"

#!/usr/bin/env bash
# The GPU checks envdoctor cannot run without a GPU, in one short script for a lent GPU machine.
#
#   scripts/gpu_check.sh            # from the repository root; PYTHON=/path/to/python to choose the interpreter
#   WHEELS=/dir scripts/gpu_check.sh  # first install envdoctor's dependencies from local wheels (no index)
#
# It installs nothing from the network. It prints, each under a heading: nvidia-smi's view, the
# NVML facts envdoctor gathers (driver, CUDA, each GPU's compute capability), what the torch import
# probe sees (torch.cuda.get_arch_list(), each device's capability, CUDA init warnings), a pinned-
# memory probe (pin_memory=True allocation and host-to-device copy against pageable memory), and the
# GPU/SYS findings of `envdoctor report --json --select GPU SYS --no-loader`. Every step has a time
# limit; on a machine without a GPU, NVML or torch it says so and goes on; it exits 0 when every
# step that could run ran, 1 when one failed.
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
STEP_TIMEOUT="${STEP_TIMEOUT:-120}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
failed=0

section() { printf '\n=== %s ===\n' "$1"; }
run_step() {  # run_step NAME CMD...: bounded, and a failure is reported, not fatal
    local name="$1"; shift
    timeout --kill-after=5 "$STEP_TIMEOUT" "$@"
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "[$name] exited with $rc$([ "$rc" -eq 124 ] && echo " (timed out after ${STEP_TIMEOUT}s)")"
        failed=1
    fi
}

section "interpreter"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "no Python interpreter '$PYTHON' here: set PYTHON=/path/to/python"
    exit 1
fi
"$PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])'
if [ -n "${WHEELS:-}" ]; then
    "$PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" rich packaging psutil nvidia-ml-py threadpoolctl \
        || echo "could not install the dependencies from $WHEELS"
fi
missing=$("$PYTHON" - <<'EOF'
import importlib.util
names = {"rich": "rich", "packaging": "packaging", "psutil": "psutil", "pynvml": "nvidia-ml-py",
         "threadpoolctl": "threadpoolctl"}
print(" ".join(dist for module, dist in names.items() if importlib.util.find_spec(module) is None))
EOF
)
[ -n "$missing" ] && echo "envdoctor's dependencies missing here: $missing (give WHEELS=/dir with their wheels)"

section "nvidia-smi"
if command -v nvidia-smi >/dev/null 2>&1; then
    run_step nvidia-smi nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total,memory.used \
        --format=csv
else
    echo "nvidia-smi is not on PATH (no NVIDIA driver here?)"
fi

section "NVML facts (envdoctor.facts.gpu.gather_gpu)"
run_step nvml "$PYTHON" - <<'EOF'
import json
from envdoctor.facts.gpu import gather_gpu
section = gather_gpu(None)
print(json.dumps({k: v for k, v in section.items() if k != "job_pids"}, indent=1, default=str))
if not section["available"]:
    print("NVML unavailable:", section.get("reason"))
EOF

section "torch import probe (inside/torch_probe.py, run as envdoctor runs it)"
run_step torch-probe "$PYTHON" - <<'EOF'
import json, subprocess, sys
out = subprocess.run([sys.executable, "-B", "src/envdoctor/inside/torch_probe.py"], capture_output=True, text=True,
                     timeout=110)
line = next((l for l in reversed(out.stdout.splitlines()) if l.startswith("{")), None)
if line is None:
    print("the probe printed no result; stderr:", out.stderr[-2000:])
    sys.exit(1)
probe = json.loads(line)
if probe.get("import_error"):
    print("import torch failed:", probe["import_error"])
    sys.exit(0)
cuda = probe.get("cuda") or {}
print("torch", probe.get("version"), "CUDA build", cuda.get("built"), "available", cuda.get("available"))
print("arch list:", cuda.get("arch_list"), "from", cuda.get("arch_list_source"))
print("devices:", json.dumps(cuda.get("devices"), indent=1))
print("CUDA error:", cuda.get("error"))
for warning in cuda.get("init_warnings") or []:
    print("CUDA init warning:", warning.get("category"), warning.get("message", "").strip()[:600])
EOF

section "pin_memory probe"
run_step pin-memory "$PYTHON" - <<'EOF'
import time
try:
    import torch
except Exception as exc:
    print("torch cannot be imported here:", type(exc).__name__, exc)
    raise SystemExit(0)
if not torch.cuda.is_available():
    print("CUDA is not available to torch", torch.__version__, "- no pinned-memory probe")
    raise SystemExit(0)
size = 256 * 1024**2
device = torch.device("cuda", 0)
pageable = torch.empty(size, dtype=torch.uint8)
start = time.perf_counter()
pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
pin_alloc = time.perf_counter() - start
print(f"pinned allocation of {size >> 20} MiB: {pin_alloc * 1000:.1f} ms; is_pinned={pinned.is_pinned()}")
target = torch.empty(size, dtype=torch.uint8, device=device)
for name, host in (("pageable", pageable), ("pinned", pinned)):
    target.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    rates = []
    for _ in range(5):
        start = time.perf_counter()
        target.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        rates.append(size / (time.perf_counter() - start) / 1e9)
    rates.sort()
    print(f"host-to-device copy from {name} memory: median {rates[2]:.1f} GB/s (min {rates[0]:.1f}, max {rates[-1]:.1f})")
EOF

section "envdoctor report --json --select GPU SYS --no-loader"
report_file=$(mktemp)
timeout --kill-after=5 "$STEP_TIMEOUT" "$PYTHON" -m envdoctor report --json --select GPU SYS --no-loader \
    --fail-on never > "$report_file"
rc=$?
if [ "$rc" -ne 0 ]; then
    echo "[report] exited with $rc"
    failed=1
fi
"$PYTHON" - "$report_file" <<'EOF'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except ValueError as exc:
    print("no JSON report:", exc)
    raise SystemExit(1)
torch = report["facts"].get("torch") or {}
probe = torch.get("probe") or {}
print("torch", torch.get("version"), "build", torch.get("build"), "probe ran:", probe.get("ran"), probe.get("reason"))
print("probe invalid fields:", probe.get("invalid_fields"))
for finding in report["findings"]:
    print(f"{finding['rule']} {finding['name']} ({finding['severity']}): {finding['message']}")
    print("   evidence:", json.dumps(finding["evidence"], default=str)[:1500])
    print("   fix:", finding["fix"][:600])
if not report["findings"]:
    print("no GPU or SYS findings")
for error in report.get("errors") or []:
    print("error:", error.get("rule") or error.get("probe"), error.get("message"))
EOF
rm -f "$report_file"
exit "$failed"

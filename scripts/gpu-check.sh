#!/usr/bin/env bash
# One-command GPU verification kit. Run from anywhere on a CUDA machine holding Python 3.12 with
# CUDA torch, CuPy (cuda13 or cuda12), NumPy, SciPy, scikit-image, tifffile and pytest -- no
# napari, no dask, no network, nothing installed:
#
#     bash scripts/gpu-check.sh [REPORT_DIR]      # default: $OUT, else ./gpu-report
#
# Writes REPORT_DIR/report.md (summary) and report.json (everything), plus the logs of each step:
# pytest.log (the `gpu`-marked tests of tests/gpu and tests/compute), bench.log, sanitizer.log (compute-sanitizer memcheck and
# racecheck on a small fused solve, when compute-sanitizer is on PATH) and ncu.log (Nsight Compute
# on the main kernels, when ncu is on PATH). Takes 1-2 minutes on one H100. Exit status: 0 when
# the test suite and the sanitizers pass.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-gpu-report}}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PYTHON="${PYTHON:-python3}"
STATUS="$OUT_DIR/status.txt"
: >"$STATUS"
failed=0

step() {  # step NAME COMMAND...: run, log the outcome
    local name="$1"
    shift
    local start=$SECONDS
    "$@"
    local rc=$?
    echo "$name	rc=$rc	$((SECONDS - start)) s" >>"$STATUS"
    echo "== $name: rc=$rc ($((SECONDS - start)) s)"
    return $rc
}

echo "== GPU check: report in $OUT_DIR"
nvidia-smi >"$OUT_DIR/nvidia-smi.log" 2>&1 || echo "nvidia-smi not available" >>"$OUT_DIR/nvidia-smi.log"

# 1. The `gpu` tests (correctness): the suite in tests/gpu and the gpu-marked tests beside the
# CPU tests in tests/compute. -p no:cacheprovider: the tree may be read-only.
GPUSCOPE_KIT_RECORDS="$OUT_DIR/records.json" step pytest timeout 300 \
    "$PYTHON" -m pytest tests/gpu tests/compute -m gpu -q -ra -p no:cacheprovider -o addopts="" \
    --strict-markers >"$OUT_DIR/pytest.log" 2>&1 || failed=1
tail -n 25 "$OUT_DIR/pytest.log"

# 2. Sanitizers on a small fused solve (one cudaMalloc per tensor so memcheck sees every bound).
if command -v compute-sanitizer >/dev/null 2>&1; then
    : >"$OUT_DIR/sanitizer.log"
    for tool in memcheck racecheck; do
        echo "---- $tool" >>"$OUT_DIR/sanitizer.log"
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 step "sanitizer-$tool" timeout 300 \
            compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
            "$PYTHON" benchmarks/gpu_kit.py solve >>"$OUT_DIR/sanitizer.log" 2>&1 || failed=1
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|paths:" "$OUT_DIR/sanitizer.log" | tail -n 3
    done
else
    echo "sanitizer	skipped (compute-sanitizer not on PATH)" >>"$STATUS"
fi

# 3. Measurements (never fail the check; errors are reported in the JSON).
step bench timeout 480 "$PYTHON" benchmarks/gpu_kit.py bench --out "$OUT_DIR" \
    >"$OUT_DIR/bench.log" 2>&1
tail -n 12 "$OUT_DIR/bench.log"

# 4. Nsight Compute on one launch of each main kernel, 3d 64x1024x1024 (optional).
if command -v ncu >/dev/null 2>&1; then
    step ncu timeout 240 ncu --clock-control none --target-processes all \
        -k "regex:fgp_step_3d|fgp_primal_3d|tv_gap_partials_3d" --launch-skip 2 -c 3 \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        "$PYTHON" benchmarks/gpu_kit.py profile >"$OUT_DIR/ncu.log" 2>&1
else
    echo "ncu	skipped (ncu not on PATH)" >>"$STATUS"
fi

# 5. The report.
"$PYTHON" - "$STATUS" "$OUT_DIR/status.json" <<'PY'
import json, sys
rows = [line.rstrip("\n").split("\t", 1) for line in open(sys.argv[1]) if line.strip()]
json.dump({k: v for k, v in rows}, open(sys.argv[2], "w"), indent=2)
PY
"$PYTHON" benchmarks/gpu_kit.py report --out "$OUT_DIR" >/dev/null
echo "== report: $OUT_DIR/report.md (failed=$failed)"
exit $failed

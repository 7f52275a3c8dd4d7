#!/usr/bin/env bash
# The GPU verification kit: every fused kernel of every method on a CUDA machine, in one short
# window. Needs Python 3.12 with CUDA torch, CuPy (cuda13 or cuda12, with NVRTC), NumPy, SciPy,
# scikit-image, tifffile and pytest; compute-sanitizer and ncu when on PATH. No napari, no
# network, nothing installed: the parameter models need pydantic, so where it is missing the kit
# first installs it from the carried wheels (.kit-wheels, made by scripts/kit-wheels.sh) into a
# temporary folder put first on PYTHONPATH, and fails naming that script without them; the batch
# step installs the rest of the carried wheels the same way (KIT_WHEELS: another folder).
#
#     bash scripts/gpu-check.sh [OPTIONS] [REPORT_DIR]     # default REPORT_DIR: $OUT, else ./gpu-report
#
#     --plan              print the plan (JSON) and exit; needs no GPU
#     --only A[,B]        run only the steps whose name, kind or method is listed
#                         (e.g. --only esrrf,flatfield  --only twin  --only ncu-phase)
#     --skip A[,B]        leave those steps out
#     --budget SECONDS    stop starting steps when this much step time is spent (default 570,
#                         so a full run ends within a 10-minute device window; 0: no budget);
#                         a step gets at most what is left, the rest are reported "not run"
#     --bundle            end with REPORT_DIR holding only report.md and gpu-report.tgz (all
#                         of the above): the device tool brings back at most 8 files
#     GPU_KIT_LIMIT_SCALE=F   multiplies every step's limit (diagnosis runs; default 1)
#
# The steps come from `benchmarks/gpu_kit.py plan`, generated from the registered fused ops:
# first what has never run on a GPU (the "fresh" steps: drift/registration/decorrelation tests,
# the interactive latency, live and automatic-regularization benchmarks), then
# per method (eSRRF, flat-field, phase first, then batch, then TV, then the forced OOM) a twin
# step (its GPU tests), compute-sanitizer memcheck, racecheck and initcheck steps, an Nsight
# Compute step and a bench step. Each runs under `timeout` with its own limit, so a slow step
# cannot starve the others. Writes REPORT_DIR/report.md and report.json (rebuilt after every
# step, so even an interrupted run leaves a report), plan.json, status.tsv, steps/NAME.log,
# bench-*.json, records-*.json, batch.json, nvidia-smi.log. Exit status 0 when no step failed
# or timed out.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    # A development checkout: its venv when the system Python has no torch.
    if ! python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)" \
        2>/dev/null && [ -x .venv/bin/python ]; then
        PYTHON=.venv/bin/python
    fi
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }

plan_only=0
bundle="${GPU_KIT_BUNDLE:-0}"
budget="${GPU_KIT_BUDGET:-570}"
out_dir=""
plan_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --plan) plan_only=1 ;;
        --only | --skip)
            [ $# -ge 2 ] || { echo "$1 needs a value" >&2; exit 2; }
            plan_args+=("$1" "$2")
            shift
            ;;
        --only=* | --skip=*) plan_args+=("${1%%=*}" "${1#*=}") ;;
        --budget)
            [ $# -ge 2 ] || { echo "--budget needs a value" >&2; exit 2; }
            budget="$2"
            shift
            ;;
        --budget=*) budget="${1#*=}" ;;
        --bundle) bundle=1 ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
        *) out_dir="$1" ;;
    esac
    shift
done

# The compute layer's parameter models are pydantic models: install it where it is missing.
if ! "$PYTHON" -c "import pydantic" >/dev/null 2>&1; then
    kit_site="$(mktemp -d "${TMPDIR:-/tmp}/kit-site-XXXXXX")"
    "$PYTHON" benchmarks/gpu_kit.py site --wheels "${KIT_WHEELS:-.kit-wheels}" \
        --target "$kit_site" >&2 || exit 2
    export PYTHONPATH="$kit_site:$PYTHONPATH"
fi

if [ "$plan_only" = 1 ]; then
    exec "$PYTHON" benchmarks/gpu_kit.py plan "${plan_args[@]}"
fi

out_dir="${out_dir:-${OUT:-gpu-report}}"
mkdir -p "$out_dir/steps" || exit 2
out_dir="$(cd "$out_dir" && pwd)"
export KIT_OUT="$out_dir" KIT_PYTHON="$PYTHON"
"$PYTHON" benchmarks/gpu_kit.py plan "${plan_args[@]}" >"$out_dir/plan.json" || exit 2
"$PYTHON" benchmarks/gpu_kit.py plan "${plan_args[@]}" --format tsv >"$out_dir/plan.tsv" || exit 2
printf 'name\tkind\tmethod\tstatus\trc\tseconds\tlimit_s\n' >"$out_dir/status.tsv"
timeout 30 nvidia-smi >"$out_dir/nvidia-smi.log" 2>&1 || echo "nvidia-smi not available" >>"$out_dir/nvidia-smi.log"

echo "== GPU check: $(grep -c . "$out_dir/plan.tsv") steps, report in $out_dir (budget ${budget} s)"
failed=0
spent=0
while IFS=$'\t' read -r name kind method limit requires log command; do
    status=""
    rc=""
    seconds=0
    if [ "$budget" -gt 0 ] && [ $((budget - spent)) -lt 10 ]; then
        status="not-run (budget)"
    elif [ "$budget" -gt 0 ] && [ $((budget - spent)) -lt "$limit" ]; then
        limit=$((budget - spent))
    fi
    if [ -z "$status" ] && [ "$requires" != "-" ] && ! command -v "$requires" >/dev/null 2>&1; then
        status="skipped ($requires not on PATH)"
        echo "skipped: $requires is not on PATH" >"$out_dir/steps/$log"
    fi
    if [ -z "$status" ]; then
        start=$SECONDS
        # timeout kills the step's whole process group (sanitizer, Python and Dask workers).
        KIT_STEP_LIMIT="$limit" timeout --kill-after=10 "$limit" bash -c "$command" \
            >"$out_dir/steps/$log" 2>&1 </dev/null
        rc=$?
        seconds=$((SECONDS - start))
        spent=$((spent + seconds))
        case "$rc" in
            0) status="passed" ;;
            77) status="skipped" ;;
            124 | 137) status="timeout"; failed=1 ;;
            *) status="failed"; failed=1 ;;
        esac
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$kind" "$method" "$status" "$rc" \
        "$seconds" "$limit" >>"$out_dir/status.tsv"
    echo "== $name: $status${rc:+ (rc=$rc)} ${seconds} s of ${limit}"
    if [ "$status" = "failed" ] || [ "$status" = "timeout" ]; then
        tail -n 8 "$out_dir/steps/$log" | sed 's/^/   | /'
    fi
    "$PYTHON" benchmarks/gpu_kit.py report --out "$out_dir" >/dev/null 2>"$out_dir/report.err" ||
        echo "   (report failed: see $out_dir/report.err)"
done <"$out_dir/plan.tsv"

echo "== report: $out_dir/report.md (steps took ${spent} s; failed=$failed)"
left=$(awk -F'\t' '$4 ~ /^not-run/ {print $1}' "$out_dir/status.tsv" | paste -sd, -)
if [ -n "$left" ]; then
    echo "== not run (budget): $left"
    echo "   run them in another window: bash scripts/gpu-check.sh --only $left OTHER_REPORT_DIR"
fi
if [ "$bundle" = 1 ]; then
    # The device tool brings back at most 8 files: everything goes into one archive, with
    # report.md beside it.
    archive="$(mktemp -d)/gpu-report.tgz"
    tar czf "$archive" -C "$out_dir" .
    find "$out_dir" -mindepth 1 ! -name report.md -delete
    mv "$archive" "$out_dir/gpu-report.tgz"
    echo "== bundled: $out_dir/gpu-report.tgz and $out_dir/report.md"
fi
exit $failed

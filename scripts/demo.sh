#!/usr/bin/env bash
# The main job. With a display: napari with the plugin's docks and sample data.
# Without one: the headless demo under Xvfb, writing results (TIFF) and screenshots to
# ./demo-output. Without a CUDA GPU the headless run uses the CPU reference path, which this
# script asks for by name (--device cpu); the plugin itself never falls back silently.
# The CPU run's time depends on the machine's load (the README says what was measured, with the
# machine and its load); the phase samples' tilt estimates and the flat-field fits are most of
# it, and they slow down most when other jobs share the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
unset QT_QPA_PLATFORM
if [[ -n ${DISPLAY:-}${WAYLAND_DISPLAY:-} && -z ${GPUSCOPE_HEADLESS:-} ]]; then
  exec .venv/bin/napari-gpuscope demo "$@"
fi
device=${GPUSCOPE_DEVICE:-}
if [[ -z $device ]]; then
  if .venv/bin/python -c "from napari_gpuscope.compute.devices import list_gpus; raise SystemExit(not list_gpus())"; then
    device=cuda:0
  else
    echo "demo: no CUDA GPU on this machine -> running the CPU reference path (--device cpu)."
    device=cpu
  fi
fi
exec xvfb-run -a -s "-screen 0 1280x1024x24" \
  .venv/bin/napari-gpuscope demo --headless --out demo-output --device "$device" "$@"

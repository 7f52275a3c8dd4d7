#!/usr/bin/env bash
# Runs everything CI runs: set-up, lint, manifest validation and the whole test suite under a
# virtual X server (pytest-xvfb starts Xvfb; napari needs real OpenGL, so Qt must not be
# "offscreen"). Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/compute -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
unset QT_QPA_PLATFORM
echo "== ruff"
.venv/bin/ruff check src tests benchmarks examples
echo "== import contracts (compute never imports Qt, napari or the docks)"
.venv/bin/lint-imports
echo "== npe2 validate"
.venv/bin/npe2 validate napari-gpuscope
echo "== GPU kit: the gpu tests are collected (they run on a GPU machine: scripts/gpu-check.sh)"
.venv/bin/python -m pytest --collect-only -q -m gpu tests/gpu tests/compute -p no:cacheprovider \
  | tail -n 1
echo "== pytest (${GPUSCOPE_TEST_WORKERS:-2} worker processes; GPUSCOPE_TEST_WORKERS=0 runs in one)"
# Two processes (pytest-xdist), each with torch on one thread (tests/conftest.py): the tests are
# single-threaded, so two use CI's two cores (see docs/testing.md for what was measured). Each
# worker starts its own Xvfb and has its own napari and dock settings (tests/conftest.py).
workers=${GPUSCOPE_TEST_WORKERS:-2}
if [[ $workers == 0 ]]; then
  exec .venv/bin/python -m pytest "$@"
fi
exec .venv/bin/python -m pytest -n "$workers" "$@"

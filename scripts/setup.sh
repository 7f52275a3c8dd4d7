#!/usr/bin/env bash
# One-time (idempotent) set-up on a Debian-like machine with Python 3.11:
#   - the X server and OpenGL libraries napari needs to draw without a screen (Xvfb + Mesa),
#   - a virtual environment in .venv with napari-gpuscope (editable) and its test tools.
# torch is pinned to the local CPU build through constraints/ci.txt; GPU users install a CUDA
# build of torch and the matching cupy extra instead (see README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  xvfb libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libxcb-image0 libxcb-randr0
  libxcb-render-util0 libxcb-shape0 libxcb-xfixes0 libxcb-xkb1 libxkbcommon-x11-0 libegl1
  libgl1 libgl1-mesa-dri libglx-mesa0 libdbus-1-3 libfontconfig1
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else SUDO="none"; fi
  if [[ $SUDO == none ]]; then
    echo "setup: cannot install ${missing[*]} (not root, no sudo); install them by hand." >&2
  else
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# The stamp skips the (slow) resolver when nothing that affects the install changed.
stamp=.venv/.gpuscope-installed
want=$(cat pyproject.toml constraints/ci.txt | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  .venv/bin/python -m pip install -q -c constraints/ci.txt -e ".[test]" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
  .venv/bin/python -c "import napari_gpuscope, torch, napari" # fail loudly if the install broke
  echo "$want" >"$stamp"
fi
echo "setup: ready (.venv, torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))"

#!/usr/bin/env bash
# Download, where PyPI is reachable, the wheels the GPU kit's batch step needs on the GPU
# machine, which has no network and no dask, distributed, zarr, ome-zarr, pydantic or PyYAML:
#
#     bash scripts/kit-wheels.sh [DEST]          # default DEST: .kit-wheels (git-ignored)
#
# Every dependency is resolved for the GPU machine's interpreter (CPython 3.12, manylinux
# x86_64; KIT_PYTHON_VERSION and KIT_PLATFORMS override), binary wheels only. What the GPU
# machine already has is left out (numpy, scipy, scikit-image and its own dependencies,
# tifffile, torch, cupy, NVIDIA's libraries), and so are optional extras, to keep the folder
# small: the device tool carries at most 64 MiB. The top-level packages are pinned to the
# versions of this checkout's .venv when there is one (what the CPU tests ran), else to the
# pyproject minimums; KIT_REQUIREMENTS replaces them (e.g. to test the install on Python 3.11:
# KIT_PYTHON_VERSION=3.11 KIT_REQUIREMENTS="dask distributed zarr ome-zarr pydantic PyYAML"). Carry the folder to the GPU machine with the tree; the kit's batch step
# (`benchmarks/gpu_kit.py batch`) installs it with
#     pip install --no-index --no-deps --target TMPDIR .kit-wheels/*.whl
# (or unpacks the wheels when that Python has no pip) and puts TMPDIR first on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-.kit-wheels}"
version="${KIT_PYTHON_VERSION:-3.12}"
platforms="${KIT_PLATFORMS:-manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64}"
python="${PYTHON:-python3}"
if [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ]; then
    python=.venv/bin/python
fi
abi="cp${version/./}"

# Top-level requirements (KIT_REQUIREMENTS overrides): pinned to the dev venv's versions when
# it has them.
requirements="${KIT_REQUIREMENTS:-}"
[ -n "$requirements" ] || requirements=$("$python" - <<'PY'
from importlib import metadata
wanted = {"dask": ">=2024.8", "distributed": ">=2024.8", "zarr": ">=3", "ome-zarr": ">=0.18",
          "pydantic": ">=2.6", "PyYAML": ">=6"}
for name, minimum in wanted.items():
    try:
        print(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        print(f"{name}{minimum}")
PY
)
# The GPU machine's own packages (and what scikit-image and torch bring there); and the S3
# stack ome-zarr pulls in through fsspec[s3] (17 MiB, only for s3:// stores, which the kit
# never opens: fsspec imports it only for such a URL).
exclude='^(numpy|scipy|scikit-image|tifffile|torch|triton|sympy|mpmath|networkx|pillow|imageio|lazy-loader|filelock|cupy.*|nvidia-.*|fastrlock|cuda-.*|s3fs|aiobotocore|botocore|jmespath|aioitertools)$'

platform_args=()
for p in $platforms; do platform_args+=(--platform "$p"); done
target_args=(--only-binary=:all: --python-version "$version" --implementation cp --abi "$abi"
    --abi abi3 --abi none "${platform_args[@]}")

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "resolving for CPython $version: $(echo $requirements)"
# shellcheck disable=SC2086
"$python" -m pip install --dry-run --ignore-installed --quiet --disable-pip-version-check \
    --report "$work/report.json" --target "$work/unused" "${target_args[@]}" $requirements
"$python" - "$work/report.json" "$exclude" >"$work/pins.txt" <<'PY'
import json, re, sys
report, exclude = json.load(open(sys.argv[1])), re.compile(sys.argv[2], re.IGNORECASE)
for item in report["install"]:
    name = item["metadata"]["name"]
    if not exclude.match(re.sub(r"[-_.]+", "-", name)):
        print(f"{name}=={item['metadata']['version']}")
PY
mkdir -p "$dest"
rm -f "$dest"/*.whl
"$python" -m pip download --no-deps --quiet --disable-pip-version-check -d "$dest" \
    "${target_args[@]}" -r "$work/pins.txt"
cp "$work/pins.txt" "$dest/requirements.txt"
count=$(ls "$dest"/*.whl | wc -l)
size=$(du -sm "$dest" | cut -f1)
echo "$count wheels, ${size} MiB in $dest (left out: what the GPU machine has, and ome-zarr's S3 extra)"
if [ "$size" -gt 60 ]; then
    echo "warning: ${size} MiB leaves little of the device tool's 64 MiB carry limit" >&2
fi

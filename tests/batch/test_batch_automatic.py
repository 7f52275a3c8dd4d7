"""The batch report names every automatic choice per position, and their range (issue 27).

A tiny TV run through the real CLI on the CPU: the default strength is a multiple of each
position's measured noise, so each position chooses its own weight. The oracle is the weight
the TV method resolves for the same file when called directly (``tv.resolve_weight``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import tifffile
import zarr
from batch_helpers import write_positions

from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.recipes import load_recipe
from napari_gpuscope.compute import tv

CLI = [sys.executable, "-m", "napari_gpuscope.cli"]


def test_the_report_lists_each_positions_automatic_choices_and_their_range(tmp_path):
    paths = write_positions(tmp_path / "in", 3, shape=(64, 64))
    recipe_path = tmp_path / "tv.yaml"
    subprocess.run([*CLI, "recipe", "tv", "-o", str(recipe_path)], check=True)
    out, report_path = tmp_path / "out.zarr", tmp_path / "report.json"
    run = subprocess.run(
        [
            *CLI, "run", str(recipe_path), str(tmp_path / "in" / "*.tif"), "--out", str(out),
            "--report", str(report_path), "--device", "cpu", "--workers", "1", "--no-progress",
            "--dashboard", "",
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(report_path.read_text())
    params = load_recipe(recipe_path).params_model()
    assert params.weight is None  # a strength: the weight is chosen from each position's noise
    weights = {}
    for path in paths:
        resolved = tv.resolve_weight(tifffile.imread(path), params)
        weights[path.stem] = resolved.weight
        choice = report["automatic"][path.stem]["TV weight"]
        assert choice.startswith(f"{resolved.weight:.4g} = strength {params.strength:g} × noise σ")
        # The store's provenance says the same.
        record = zarr.open_group(str(out / path.stem), mode="r").attrs[ATTRIBUTE]["provenance"]
        assert record["automatic"] == report["automatic"][path.stem]
    low = min(weights, key=weights.get)
    high = max(weights, key=weights.get)
    summary = report["automatic_summary"]["TV weight"]
    assert summary["positions"] == 3
    assert summary["lowest"].startswith(f"{weights[low]:.4g} ") and summary["lowest"].endswith(
        f"({low})"
    )
    assert summary["highest"].startswith(f"{weights[high]:.4g} ")
    assert summary["highest"].endswith(f"({high})")
    assert "automatic TV weight: " in run.stdout + run.stderr

"""What the dock -> recipe -> ``napari-gpuscope run`` equality tests share (issue 25 item 2):
running a saved recipe with the real command line, reading a written position back, and
comparing it with the dock's layers and provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import zarr

from napari_gpuscope.cli import main

ATTRIBUTE = "napari_gpuscope"  # the position group's attribute (docs/batch.md, Output)
RUN_FACTS = ("chunks", "kernel_paths")
"""How a run went, not what it measured: eSRRF's frame chunks are the dock's smaller ones
(the image streams as it builds up; the result does not depend on them)."""


def run_recipe(recipe: Path, source: Path | str, out: Path, client: Any) -> None:
    """``napari-gpuscope run RECIPE SOURCE --out OUT`` on the CPU, on ``client``'s cluster."""
    argv = ["run", str(recipe), str(source), "--out", str(out), "--device", "cpu"]
    argv += ["--no-progress", "--cluster", client.scheduler.address]
    assert main(argv) == 0


def position(out: Path, name: str) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, Any]]:
    """The written image, the extra layers by name, and the group attribute."""
    group = zarr.open_group(str(out / name), mode="r")
    extra = {}
    if (out / name / "extra").is_dir():
        for child in sorted(p for p in (out / name / "extra").iterdir() if p.is_dir()):
            sub = zarr.open_group(str(child), mode="r")
            extra[sub.attrs["ome"]["multiscales"][0]["name"]] = np.asarray(sub["0"][...])
    return np.asarray(group["0"][...]), extra, dict(group.attrs[ATTRIBUTE])


def measured(facts: dict[str, Any]) -> dict[str, Any]:
    """A result's provenance facts without how the run went (:data:`RUN_FACTS`)."""
    return {key: value for key, value in facts.items() if key not in RUN_FACTS}


def same_bytes(written: np.ndarray, shown: Any) -> None:
    """Same dtype, shape and bytes."""
    shown = np.asarray(shown)
    assert written.dtype == shown.dtype and written.shape == shown.shape
    assert written.tobytes() == shown.tobytes()

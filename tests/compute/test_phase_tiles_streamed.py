"""Tiles with fixed values are solved as their systems are built (one tile's normal equations in
memory at a time); only an automatic choice, which needs every tile's statistics for one value
over the blended image, keeps them all first."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import phase
from napari_gpuscope.compute.phase._optics import OpticsCache
from napari_gpuscope.compute.phase._reconstruct import Reconstructor
from napari_gpuscope.compute.phase._tiles import TileGrid, TiltMap
from napari_gpuscope.sample_data.phase import OPTICS

SHAPE = (64, 64)


def _order(params: phase.PhaseParams) -> list[str]:
    """The order of system builds and tile solves over a 2 x 2 tile map."""
    rng = np.random.default_rng(0)
    data = torch.from_numpy(rng.normal(1.0, 0.01, (5, *SHAPE)).astype(np.float32))
    recon = Reconstructor(data, params, OpticsCache())
    events = []
    built = recon.system

    def system(*args, **kwargs):
        events.append("build")
        return built(*args, **kwargs)

    recon.system = system
    grid = TileGrid.covering(SHAPE, (2, 2))
    zeros = np.zeros((2, 2))
    for index, _ in recon.tiles(TiltMap(grid, zeros + 0.1, zeros, zeros, zeros)):
        events.append("solve" if index >= 0 else "blend")
    return events


@pytest.mark.parametrize(
    "fixed",
    [
        {"regularization": 1e-3},  # Tikhonov: tv_strength's None (its default) means nothing
        {"regularization": 1e-3, "regularizer": "tv", "tv_strength": 1e-3, "tv_iterations": 2},
    ],
    ids=["tikhonov", "tv"],
)
def test_fixed_values_stream_one_tile_at_a_time(fixed):
    events = _order(phase.PhaseParams(**OPTICS, **fixed))
    assert events == ["build", "solve"] * 4 + ["blend"]


def test_an_automatic_value_builds_every_tile_first():
    events = _order(phase.PhaseParams(**OPTICS))  # regularization="auto"
    assert events == ["build"] * 4 + ["solve"] * 4 + ["blend"]

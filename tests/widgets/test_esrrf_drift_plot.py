"""The drift plot tells measured blocks from interpolated ones (issue 26: a block without
structure is interpolated, and the plot must not show it as a measurement)."""

from __future__ import annotations

import numpy as np

from napari_gpuscope.compute.esrrf import DriftParams, DriftResult
from napari_gpuscope.widgets.esrrf.drift_plot import DriftPlot


def _markers(plot: DriftPlot) -> list[tuple[np.ndarray, str]]:
    """(x data, face colour) of every marker-only line on the plot."""
    axes = plot.figure.axes[0]
    return [
        (np.asarray(line.get_xdata(), float), str(line.get_markerfacecolor()))
        for line in axes.get_lines()
        if line.get_linestyle() in ("None", "") and len(line.get_xdata())
    ]


def test_interpolated_blocks_are_hollow_and_named_in_the_legend(qtbot):
    plot = DriftPlot()
    qtbot.addWidget(plot)
    frames = 40
    blocks = [(start, start + 10) for start in range(0, frames, 10)]
    measured = np.array([True, False, True, True])
    shifts = np.linspace(0, 3, frames)[:, None] * np.array([1.0, -0.5])
    block_shifts = np.array([shifts[a:b].mean(axis=0) for a, b in blocks])
    uncertainty = np.where(measured[:, None], 0.05, np.nan) * np.ones((4, 2))
    trace = DriftResult(
        shifts=shifts,
        block_shifts=block_shifts,
        uncertainty=uncertainty,
        block_frames=blocks,
        params=DriftParams(time_averaging=10),
        measured=measured,
    )
    plot.show_trace(trace, "drift")

    centres = np.array([(a + b - 1) / 2 for a, b in blocks])
    hollow = [x for x, face in _markers(plot) if face == "none"]
    filled = [x for x, face in _markers(plot) if face != "none"]
    assert all(np.array_equal(x, centres[~measured]) for x in hollow) and len(hollow) == 2
    assert all(np.array_equal(x, centres[measured]) for x in filled) and len(filled) == 2
    labels = [text.get_text() for text in plot.figure.axes[0].get_legend().get_texts()]
    assert "not measured (interpolated)" in labels


def test_a_trace_without_a_measured_mask_plots_every_block_as_measured(qtbot):
    plot = DriftPlot()
    qtbot.addWidget(plot)
    blocks = [(0, 10), (10, 20)]
    shifts = np.zeros((20, 2))
    trace = DriftResult(
        shifts=shifts,
        block_shifts=np.zeros((2, 2)),
        uncertainty=np.full((2, 2), 0.05),
        block_frames=blocks,
        params=DriftParams(time_averaging=10),
    )
    plot.show_trace(trace, "drift")
    assert [face for _, face in _markers(plot)] and all(
        face != "none" for _, face in _markers(plot)
    )

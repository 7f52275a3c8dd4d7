"""The reusable controls: generated form rows, layer picker, spacing row, metrics plot,
saved settings and the displayed-plane helper."""

from __future__ import annotations

import json

import numpy as np
import pytest

from napari_gpuscope.compute.preview import PlaneView
from napari_gpuscope.compute.tv import TVParams
from napari_gpuscope.dock.settings import DockSettings
from napari_gpuscope.widgets._controls import (
    FieldStyle,
    LayerPicker,
    MetricsPlot,
    ParamForm,
    SpacingRow,
    is_log_metric,
)


def test_form_rows_come_from_the_params_model(qtbot):
    form = ParamForm(
        TVParams,
        [n for n in TVParams.names() if n not in ("weight", "channel_axis", "spacing")],
        styles={"gain": FieldStyle(auto_text="auto")},
    )
    qtbot.addWidget(form)
    for info in TVParams.param_info():
        if info.name not in form.widgets:
            continue
        widget = form.widgets[info.name]
        assert info.help[1:20] in widget.tooltip  # the model's help, not a second copy
        if info.kind in ("float", "int") and info.maximum is not None:
            assert widget.max == pytest.approx(min(info.maximum, 1e9))
        if info.choices:
            assert sorted(widget.choices) == sorted(info.choices)
        # advanced fields are in the collapsed section, the others in the main rows
        rows = form.advanced_rows if info.advanced else form.main
        assert widget.native in rows.order
    assert "ADU/photon" in form.widgets["gain"].native.suffix()  # unit from the model
    assert form.value("gain") is None  # "auto" at the minimum means None
    assert form.widgets["gain"].native.text() == "auto"
    params = TVParams(**{**form.values(), "offset": None, "read_noise": None})
    assert params == TVParams()  # the form's defaults are the model's defaults
    form.set_values({"tolerance": 1e-4, "method": "chambolle", "gain": 2.0})
    assert (form.value("tolerance"), form.value("method"), form.value("gain")) == (
        1e-4,
        "chambolle",
        2.0,
    )


def test_an_automatic_integer_shows_its_word_and_gives_an_int(qtbot):
    """magicgui's integer box (superqt's) has no special value text: eSRRF's "Frames per drift
    block" read "0" where it meant automatic, flat-field's batch axis "-1" for none."""
    from napari_gpuscope.compute.esrrf import EsrrfParams

    form = ParamForm(
        EsrrfParams,
        ["drift_time_averaging"],
        styles={"drift_time_averaging": FieldStyle(minimum=0, auto_text="auto")},
    )
    qtbot.addWidget(form)
    widget = form.widgets["drift_time_averaging"]
    assert widget.native.text() == "auto" and form.value("drift_time_averaging") is None
    form.set_values({"drift_time_averaging": 24})
    value = form.value("drift_time_averaging")
    assert value == 24 and type(value) is int and widget.native.text() == "24"
    assert EsrrfParams(drift_time_averaging=value).drift_time_averaging == 24
    form.set_values({"drift_time_averaging": None})
    assert widget.native.text() == "auto" and form.value("drift_time_averaging") is None


def test_collapsed_advanced_section_is_skipped_by_tab(qtbot):
    form = ParamForm(TVParams, ["strength", "tolerance", "max_iterations"])
    qtbot.addWidget(form)
    assert not form.advanced.isExpanded()
    assert not form.advanced_rows.isEnabled()  # Tab skips disabled widgets
    form.advanced.expand(animate=False)
    assert form.advanced_rows.isEnabled()


def test_layer_picker_follows_selection_and_new_layers(make_napari_viewer_proxy, qtbot):
    viewer = make_napari_viewer_proxy()  # layers come as proxies: compare with ==
    first = viewer.add_image(np.zeros((4, 4)), name="first")
    picker = LayerPicker(viewer, follow=lambda layer: not layer.name.startswith("result"))
    assert picker.layer == first
    second = viewer.add_image(np.zeros((4, 4)), name="second")
    assert picker.layer == second  # a newly added layer becomes the input
    viewer.layers.selection.active = first
    assert picker.layer == first  # so does the selected one
    viewer.add_image(np.zeros((4, 4)), name="result of first")
    assert picker.layer == first  # but not what the follow rule excludes
    viewer.add_labels(np.zeros((4, 4), np.uint8), name="labels")
    assert picker.layer == first  # nor a layer of another type
    first.name = "renamed"
    assert picker.combo.native.currentText() == "renamed"
    viewer.layers.remove(first)
    assert picker.layer != first and picker.layer in viewer.layers
    picker.stop_following()
    third = viewer.add_image(np.zeros((4, 4)), name="third")
    assert picker.layer != third


def test_spacing_row_follows_scale_and_dimensionality(make_napari_viewer_proxy, qtbot):
    # Issue 7, 2.6: the boxes must not go stale when the layer changes after selection.
    viewer = make_napari_viewer_proxy()
    layer = viewer.add_image(np.zeros((4, 8, 8)), scale=(0.5, 0.1, 0.1))
    row = SpacingRow()
    qtbot.addWidget(row)
    changes = []
    row.changed.connect(lambda: changes.append(1))
    row.set_layer(layer)
    assert row.value() == pytest.approx((0.2, 1.0, 1.0))
    assert row.names == ["z", "y", "x"]
    changes.clear()
    layer.scale = (0.3, 0.1, 0.1)
    assert row.value() == pytest.approx((1 / 3, 1.0, 1.0), abs=1e-3)
    assert changes
    layer.data = np.zeros((2, 4, 8, 8))  # now 4D: a box per axis again
    layer.axis_labels = ("t", "z", "y", "x")
    assert row.names == ["t", "z", "y", "x"]
    assert len(row.value()) == 4
    assert row.value()[0] == 0.0  # time: frames processed independently
    layer.units = ("s", "um", "um", "um")
    assert len(row.boxes) == 4
    # Issue 18: beside a 0.1 µm layer the weights say what they are (and the x pixel size);
    # issue 30: in plain words, from this layer's own steps.
    layer.scale = (2.0, 0.5, 0.1, 0.1)
    caption = row.caption.text()
    assert caption.startswith("How much each axis is smoothed, x = 1 (pixels 0.1 µm)"), caption
    assert "z 0.2, its steps (0.5 µm) are 5 × longer" in caption  # 0.1 / 0.5, written out
    assert "0 = each frame on its own" in caption  # time: the 0 of its box explained
    assert "÷" not in caption and "without unit" not in caption
    row.set_layer(None)
    assert row.value() == () and row.caption.text() == ""


def test_metrics_plot_uses_a_log_axis_for_gaps_and_breaks_at_chunks(qtbot):
    plot = MetricsPlot()
    qtbot.addWidget(plot)
    assert is_log_metric("relative_gap") and is_log_metric("loss") and not is_log_metric("tilt")
    plot.reset("", {"relative_gap": 1e-3}, "iteration")
    for step, gap in [(10, 0.1), (20, 0.01), (10, 0.2), (20, 0.02)]:  # two chunks
        plot.add(step, {"iteration": step, "relative_gap": gap})
    plot.redraw()
    assert "iteration" not in plot.series  # equal to the step: not plotted
    values = plot.values("relative_gap")
    assert values[:2] == [0.1, 0.01] and np.isnan(values[2]) and values[3:] == [0.2, 0.02]
    assert plot.log_scale and plot.axes.get_yscale() == "log"
    assert any(line.get_linestyle() == "--" for line in plot.axes.get_lines())  # the target
    assert plot.axes.get_legend() is None  # one line: the title names it
    plot.reset()
    plot.add(1, {"tilt": 0.5})
    plot.redraw()
    assert plot.axes.get_yscale() == "linear"
    plot.add(2, {"tilt": 0.4, "shift": 0.1})  # two lines: a legend says which is which
    plot.redraw()
    legend = plot.axes.get_legend()
    assert [text.get_text() for text in legend.get_texts()] == ["tilt", "shift"]
    assert [handle.get_color() for handle in legend.legend_handles] == [
        line.get_color() for line in plot.axes.get_lines()
    ]


def test_settings_round_trip_and_survive_garbage(tmp_path, monkeypatch):
    monkeypatch.setenv("NAPARI_GPUSCOPE_CONFIG_DIR", str(tmp_path))
    from napari_gpuscope.compute.tv import TVParams

    settings = DockSettings("tv")
    assert settings.load(TVParams) == (None, {})
    params = TVParams(strength=2.5, spacing=(0.2, 1.0, 1.0))
    settings.save(params, {"replace_last": True})
    assert settings.path == tmp_path / "docks" / "tv.json"
    record = json.loads(settings.path.read_text())
    assert TVParams.from_json(json.dumps(record["params"])) == params  # the params' own JSON
    assert set(record) == {"version", "params", "options"}
    assert settings.load(TVParams) == (params, {"replace_last": True})
    settings.path.write_text("{not json")
    assert settings.load(TVParams) == (None, {})
    record["params"]["strength"] = "strong"  # not a valid parameter: the options still load
    settings.path.write_text(json.dumps(record))
    assert settings.load(TVParams) == (None, {"replace_last": True})
    settings.clear()
    assert not settings.path.exists()


def test_plane_view_slab_and_embedding():
    # A z-x view of a (z, y, x) volume: the slab runs along y, the plane is (z, x).
    view = PlaneView(shape=(6, 20, 9), axes=(0, 2), index=(3, 1, 4))
    slab = view.slab((0.25, 1.0, 1.0), half=3)
    assert slab.selection == (slice(None), slice(0, 5), slice(None))  # clipped at y = 0
    assert slab.centre == (slice(None), 1, slice(None))
    assert slab.spacing == (0.25, 1.0, 1.0)
    volume = np.arange(6 * 20 * 9).reshape(6, 20, 9)
    np.testing.assert_array_equal(volume[slab.selection][slab.centre], volume[:, 1, :])
    assert view.embed(volume[:, 1, :]).shape == (6, 1, 9)
    # an uncoupled hidden axis (time) takes the current frame only
    movie = PlaneView(shape=(3, 5, 8, 8), axes=(2, 3), index=(2, 4, 0, 0))
    slab = movie.slab((0.0, 1.0, 1.0, 1.0), half=3)
    assert slab.selection == (2, slice(1, 5), slice(None), slice(None))
    assert slab.centre == (3, slice(None), slice(None))
    assert slab.spacing == (1.0, 1.0, 1.0)


def test_a_log_metrics_axis_labels_no_minor_ticks(qtbot):
    """Issue 18: labelled minor ticks ("6x10^-3 ... 2x10^-3") overlapped in the plot."""
    from matplotlib.ticker import NullFormatter

    plot = MetricsPlot()
    qtbot.addWidget(plot)
    plot.reset("Run: ", {"relative_gap": 1e-3}, "iteration")
    for k in range(1, 30):
        plot.add(k, {"relative_gap": 0.02 / k})
    plot.redraw()
    assert plot.axes.get_yscale() == "log"
    assert isinstance(plot.axes.yaxis.get_minor_formatter(), NullFormatter)


def test_counted_steps_get_whole_number_ticks(qtbot):
    """Three reweighting passes showed ticks at 2.25, 2.5 ... between passes."""
    plot = MetricsPlot()
    qtbot.addWidget(plot)
    plot.reset("Run: ", {"reweighting_residual": 1e-3}, "reweighting pass")
    for k in (1, 2, 3):
        plot.add(k, {"reweighting_residual": 0.1 / k})
    plot.redraw()
    plot.figure.canvas.draw()
    ticks = [t for t in plot.axes.get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)

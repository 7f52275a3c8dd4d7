"""The TV denoise dock on the CPU test device, checked against independent references."""

from __future__ import annotations

import numpy as np
import pytest
from dock_helpers import open_dock, select_input
from skimage.restoration import denoise_tv_chambolle

from napari_gpuscope.compute.tv import TVParams, _preview
from napari_gpuscope.dock.layers import spacing_from_layer
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.widgets.tv.dock import TVDenoiseDock

pytest.importorskip("napari_gpuscope.compute.tv")


def _noisy(shape, sigma=0.1, seed=0):
    rng = np.random.default_rng(seed)
    clean = np.zeros(shape, np.float32)
    clean[..., shape[-2] // 4 : 3 * shape[-2] // 4, shape[-1] // 4 : 3 * shape[-1] // 4] = 1.0
    return (clean + rng.normal(0, sigma, shape)).astype(np.float32)


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    return open_dock(TVDenoiseDock, viewer, qtbot)


def _field(dock, name):
    return dock.form.widgets[name]


def _spacing(dock):
    return [box.value for box in dock.spacing_row.boxes]


def test_spacing_from_layer_scale(viewer, dock):
    viewer.add_image(np.zeros((4, 8, 8), np.float32), name="vol", scale=(0.5, 0.1, 0.1))
    select_input(dock, "vol")
    assert _spacing(dock) == pytest.approx([0.2, 1.0, 1.0])
    movie = viewer.add_image(
        _noisy((3, 4, 8, 8)),
        name="movie",
        scale=(2.0, 0.3, 0.1, 0.1),
        axis_labels=("t", "z", "y", "x"),
    )
    assert spacing_from_layer(movie) == pytest.approx((0.0, 1 / 3, 1.0, 1.0))
    select_input(dock, "movie")
    assert _spacing(dock) == pytest.approx([0.0, 1 / 3, 1.0, 1.0], abs=1e-3)
    dock.spacing_row.boxes[1].value = 0.5  # editable
    assert dock.params().spacing == pytest.approx((0.0, 0.5, 1.0, 1.0))


def _true_sigma(noisy):
    """The standard deviation of the noise actually added (the oracle of the estimate)."""
    return float(np.std(noisy - _noisy(noisy.shape, sigma=0.0)))


@pytest.fixture
def resolutions(monkeypatch):
    """Every ``tv.resolve_weight`` call: (thread, noise model); the noise estimators too."""
    import threading

    from napari_gpuscope.compute import noise, tv

    calls = []
    real = tv.resolve_weight

    def spy(image, params):
        calls.append((threading.get_ident(), params.noise_model))
        return real(image, params)

    monkeypatch.setattr(_preview, "resolve_weight", spy)  # what the preview calls
    for name in ("estimate_noise_sigma", "estimate_poisson_gaussian"):
        real_estimate = getattr(noise, name)

        def estimate(*args, real_estimate=real_estimate, **kwargs):
            calls.append((threading.get_ident(), "estimate"))
            return real_estimate(*args, **kwargs)

        monkeypatch.setattr(noise, name, estimate)
    return calls


def test_noise_level_is_estimated_when_the_input_is_chosen_never_on_the_gui(
    viewer, qtbot, dock, resolutions
):
    import threading

    data = _noisy((128, 128), sigma=0.1)
    viewer.add_image(data, name="img")
    other = _noisy((64, 64), sigma=0.3, seed=1)
    viewer.add_image(other, name="other")
    _field(dock, "strength").value = 2.0
    select_input(dock, "other")
    # Issue 30: said before any run (it stayed "not estimated yet" until one), off the GUI.
    qtbot.waitUntil(lambda: "≈" in dock.weight_label.value, timeout=10_000)
    assert f"noise σ ≈ {_true_sigma(other):.2g}" in dock.weight_label.value
    said_for_other = dock.weight_label.value
    select_input(dock, "img")
    qtbot.waitUntil(
        lambda: "≈" in dock.weight_label.value and dock.weight_label.value != said_for_other,
        timeout=10_000,
    )
    assert resolutions and all(t != threading.get_ident() for t, _ in resolutions)
    params = dock.params()
    assert params.weight is None and params.strength == 2.0  # the job derives the weight
    shown = float(dock.weight_label.value.split("≈ ")[1].split(" ")[0])
    assert shown == pytest.approx(_true_sigma(data), rel=0.05)

    estimated = len(resolutions)
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "TV preview · img" in viewer.layers, timeout=10_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    assert all(t != threading.get_ident() for t, _ in resolutions)
    assert [r for r in resolutions[estimated:] if r[1] == "estimate"] == []  # remembered
    record = viewer.layers["TV preview · img"].metadata[PROVENANCE_KEY]["result"]
    sigma = record["noise_sigma"]  # of the whole image, as a run would use it
    assert sigma == pytest.approx(shown, rel=5e-3)  # the same estimator as the label's
    assert record["weight"] == pytest.approx(2.0 * sigma, rel=1e-12)
    assert dock.weight_label.value == f"noise σ ≈ {sigma:.3g} → weight {2.0 * sigma:.3g}"

    calls = len(resolutions)
    _field(dock, "strength").value = 3.0  # the strength scales the weight: no new estimate
    qtbot.waitUntil(
        lambda: (
            viewer.layers["TV preview · img"].metadata[PROVENANCE_KEY]["result"]["weight"]
            == pytest.approx(3.0 * sigma)
        ),
        timeout=10_000,
    )
    assert resolutions[calls:] == []  # remembered for this array: nothing estimated again
    assert f"weight {3.0 * sigma:.3g}" in dock.weight_label.value

    assert not _field(dock, "gain").native.isVisibleTo(dock)  # camera only for Poisson noise
    _field(dock, "noise_model").value = "poisson"  # Anscombe units: the noise std is 1
    assert "weight 3" in dock.weight_label.value
    assert _field(dock, "gain").native.isVisibleTo(dock)


def test_an_array_edited_in_place_is_estimated_again(viewer, qtbot, dock, resolutions):
    # The whole-image noise level is cached per array; painting into the same array (same
    # object, new content) must not keep the old estimate.
    data = _noisy((128, 128), sigma=0.05)
    layer = viewer.add_image(data, name="img")
    select_input(dock, "img")
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "TV preview · img" in viewer.layers, timeout=10_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    first = viewer.layers["TV preview · img"].metadata[PROVENANCE_KEY]["result"]["noise_sigma"]
    assert first == pytest.approx(_true_sigma(data), rel=0.05)

    calls = len(resolutions)
    data[:] = _noisy(data.shape, sigma=0.2, seed=3)  # in place: layer.data is still `data`
    layer.refresh()
    assert layer.data is data
    _field(dock, "strength").value = 1.5
    assert "estimat" in dock.weight_label.value or "0.2" in dock.weight_label.value
    qtbot.waitUntil(lambda: len(resolutions) > calls, timeout=10_000)
    qtbot.waitUntil(
        lambda: (
            viewer.layers["TV preview · img"].metadata[PROVENANCE_KEY]["result"]["noise_sigma"]
            != first
        ),
        timeout=10_000,
    )
    second = viewer.layers["TV preview · img"].metadata[PROVENANCE_KEY]["result"]["noise_sigma"]
    assert second == pytest.approx(_true_sigma(data), rel=0.05)
    assert dock.weight_label.value == f"noise σ ≈ {second:.3g} → weight {1.5 * second:.3g}"


def test_a_typed_gain_previews_without_estimating(viewer, qtbot, dock, resolutions):
    viewer.add_image(_noisy((64, 64)) * 50 + 100, name="img")
    select_input(dock, "img")
    qtbot.waitUntil(lambda: dock.noise.running is None)  # the Gaussian σ, said on choosing
    resolutions.clear()
    _field(dock, "noise_model").value = "poisson"
    _field(dock, "gain").value = 2.0
    _field(dock, "offset").value = 100.0
    messages = []
    dock.runner.progressed.connect(lambda update: messages.append(update.message))
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "TV preview · img" in viewer.layers, timeout=10_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    assert not any("estimat" in message for message in messages)
    assert [kind for _, kind in resolutions] == ["poisson"]  # checked, nothing estimated
    camera = viewer.layers["TV preview · img"].metadata[PROVENANCE_KEY]["result"]["camera"]
    assert (camera["gain"], camera["offset"], camera["read_noise"]) == (2.0, 100.0, 0.0)
    assert dock.camera.row.isHidden()  # a typed camera is not an estimate to offer


def test_preview_matches_the_run_within_its_tolerance(viewer, qtbot, dock):
    # ROF's energy P is 1-strongly convex, so P(u) - P(u*) >= |u - u*|^2 / 2, and a relative
    # duality gap g bounds P(u) - P(u*) by g * P(u): |u - u*| <= sqrt(2 g P(u)). The preview
    # (at most 50 iterations, tolerance 1e-2) and the run (tolerance 1e-4) are both within
    # that distance of the one exact solution; P is recomputed here in NumPy.
    data = _noisy((96, 96))
    viewer.add_image(data, name="img")
    select_input(dock, "img")
    _field(dock, "tolerance").value = 1e-4
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "TV preview · img" in viewer.layers, timeout=10_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    preview = viewer.layers["TV preview · img"]
    preview_record = preview.metadata[PROVENANCE_KEY]["result"]
    assert preview_record["converged"] and preview_record["iterations"] <= 50
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    run = viewer.layers["TV denoised · img [s=1]"]
    run_record = run.metadata[PROVENANCE_KEY]["result"]
    assert run_record["converged"]
    weight = run_record["weight"]
    assert preview_record["weight"] == weight  # the whole image's weight, as the run's

    def energy(u):
        u, f = np.asarray(u, np.float64), data.astype(np.float64)
        dy, dx = np.zeros_like(u), np.zeros_like(u)
        dy[:-1], dx[:, :-1] = np.diff(u, axis=0), np.diff(u, axis=1)
        return 0.5 * np.sum((u - f) ** 2) + weight * np.sum(np.hypot(dy, dx))

    u_preview, u_run = np.asarray(preview.data, np.float64), np.asarray(run.data, np.float64)
    bound = np.sqrt(2 * 1e-2 * energy(u_preview)) + np.sqrt(2 * 1e-4 * energy(u_run))
    assert np.linalg.norm(u_preview - u_run) <= bound
    assert bound < 0.2 * np.linalg.norm(data - u_run)  # a bound that says something


def test_full_run_matches_scikit_image_and_has_provenance(viewer, qtbot, dock):
    data = _noisy((48, 48))
    layer = viewer.add_image(data.copy(), name="img", scale=(0.2, 0.2), units=("um", "um"))
    select_input(dock, "img")
    _field(dock, "method").value = "chambolle"
    _field(dock, "tolerance").value = 2e-4
    _field(dock, "max_iterations").value = 200  # scikit-image's default
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)

    result = viewer.layers["TV denoised · img [s=1]"]
    weight = result.metadata[PROVENANCE_KEY]["result"]["weight"]
    assert weight == pytest.approx(_true_sigma(data), rel=0.1)  # strength 1 x noise level
    expected = denoise_tv_chambolle(data, weight=weight, eps=2e-4, max_num_iter=200)
    np.testing.assert_allclose(result.data, expected, atol=2e-3)
    np.testing.assert_array_equal(layer.data, data)  # input untouched
    record = result.metadata[PROVENANCE_KEY]
    assert record["method"] == "tv" and record["input"] == "img"
    assert record["result"]["iterations"] >= 1
    assert tuple(result.scale) == pytest.approx((0.2, 0.2))
    status = dock.panel.status.text()
    assert "iterations" in status and "relative gap" in status


def test_sigma_is_said_in_the_layers_intensity_unit(viewer, qtbot, dock):
    """The status, the automatic choice in the provenance (which the figure's caption reads)
    and the label under the strength say σ with the unit the layer states."""
    viewer.add_image(_noisy((48, 48)), name="img", metadata={"intensity_unit": "ADU"})
    select_input(dock, "img")
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    record = dock.last_result_layer.metadata[PROVENANCE_KEY]
    sigma = record["result"]["noise_sigma"]
    assert f"noise σ {sigma:.4g} ADU" in dock.panel.status.text()
    assert record["automatic"]["TV weight"].endswith(f"noise σ {sigma:.4g} ADU")
    assert dock.weight_label.native.wordWrap()  # a long σ and weight wrap, never cut


def test_live_preview_of_a_volume_shows_the_current_plane(viewer, qtbot, dock):
    viewer.add_image(_noisy((12, 32, 32)), name="vol")
    select_input(dock, "vol")
    viewer.dims.set_current_step(0, 5)
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "TV preview · vol" in viewer.layers, timeout=10_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    preview = viewer.layers["TV preview · vol"]
    assert preview.data.shape == (1, 32, 32)  # one plane, placed at z = 5
    assert tuple(preview.translate) == (5.0, 0.0, 0.0)
    assert preview.metadata[PROVENANCE_KEY]["result"]["preview"] is True
    # the preview plane is much closer to the clean plane than the noisy plane is
    clean = _noisy((12, 32, 32), sigma=0.0)[5]
    noisy_plane = viewer.layers["vol"].data[5]
    rmse = lambda a: float(np.sqrt(np.mean((a - clean) ** 2)))  # noqa: E731
    assert rmse(preview.data[0]) < 0.5 * rmse(noisy_plane)


TV_TAKES = "(Y, X), (Z, Y, X), (T, Y, X) or (T, Z, Y, X)"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda v: v.add_image(np.zeros((8, 8, 3), np.uint8), name="bad", rgb=True), "RGB"),
        (lambda v: v.add_image(np.zeros((2,) * 5, np.float32), name="bad"), "(2, 2, 2, 2, 2)"),
        (
            lambda v: v.add_image(np.where(np.eye(8) > 0, np.nan, 1.0), name="bad"),
            "NaN",
        ),
    ],
)
def test_bad_inputs_are_reported_once_in_the_dock(viewer, dock, errors, make, expected):
    make(viewer)
    select_input(dock, "bad")
    assert dock.run() is False
    assert errors == []  # said in the dock only, not notified on top
    status = dock.panel.status.text()
    assert "'bad'" in status and expected in status and TV_TAKES in status, status
    assert [ly.name for ly in viewer.layers] == ["bad"]


def test_non_image_input_is_reported(viewer, dock, errors, monkeypatch):
    labels = viewer.add_labels(np.zeros((8, 8), np.uint8), name="bad")
    monkeypatch.setattr(type(dock.input), "layer", labels)  # napari 0.9 has no 1D images
    assert dock.run() is False
    assert errors == []
    status = dock.panel.status.text()
    assert "'bad' is a Labels layer" in status and TV_TAKES in status


def test_preview_of_a_time_lapse_volume_solves_one_frame(viewer, qtbot, dock, monkeypatch):
    from napari_gpuscope.compute import tv

    viewer.add_image(_noisy((3, 10, 16, 16)), name="movie", axis_labels=("t", "z", "y", "x"))
    select_input(dock, "movie")
    viewer.dims.set_current_step(0, 2)
    viewer.dims.set_current_step(1, 9)
    solved = []
    real = tv.iter_denoise

    def spy(image, *args, params, **kwargs):
        solved.append((image.shape, params.spacing, params.max_iterations))
        return real(image, *args, params=params, **kwargs)

    monkeypatch.setattr(_preview, "iter_denoise", spy)
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "TV preview · movie" in viewer.layers, timeout=10_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    # frame t=2 only (time is uncoupled), z slab clipped at the last plane: z 6..9
    assert solved == [((4, 16, 16), (1.0, 1.0, 1.0), 50)]
    preview = viewer.layers["TV preview · movie"]
    assert preview.data.shape == (1, 1, 16, 16)
    assert tuple(preview.translate[:2]) == (2.0, 9.0)


def test_cancelling_a_real_tv_run_keeps_the_previous_result(viewer, qtbot, dock):
    data = _noisy((192, 192))
    layer = viewer.add_image(data.copy(), name="img")
    select_input(dock, "img")
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    result = viewer.layers["TV denoised · img [s=1]"]
    previous_data, previous_record = result.data, result.metadata[PROVENANCE_KEY]

    # A run that cannot converge on its own (tolerance ~0, huge budget) must be stopped by Cancel.
    dock.panel.replace_last.setChecked(True)  # it streams into the previous result
    _field(dock, "tolerance").value = 1e-6
    _field(dock, "max_iterations").value = 100_000
    _field(dock, "strength").value = 3.0
    assert dock.run()
    qtbot.waitUntil(lambda: result.data is not previous_data, timeout=30_000)  # it streams
    dock.cancel()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    qtbot.wait(200)  # late updates of the cancelled job, if any, must be dropped
    assert result.data is previous_data
    assert result.metadata[PROVENANCE_KEY] == previous_record
    assert [ly.name for ly in viewer.layers] == ["img", "TV denoised · img [s=1]"]
    np.testing.assert_array_equal(layer.data, data)


def _spacing_axis_names(dock):
    row = dock.spacing_row._row
    widgets = [row.itemAt(i).widget() for i in range(row.count())]
    return [w.text() for w in widgets if hasattr(w, "text") and not hasattr(w, "value")]


def test_spacing_boxes_are_labelled_with_their_axes(viewer, dock):
    viewer.add_image(np.zeros((4, 8, 8), np.float32), name="vol")  # napari's default labels
    select_input(dock, "vol")
    assert _spacing_axis_names(dock) == ["z", "y", "x"]
    viewer.add_image(
        np.zeros((2, 4, 8, 8), np.float32), name="movie", axis_labels=("t", "z", "y", "x")
    )
    select_input(dock, "movie")
    assert _spacing_axis_names(dock) == ["t", "z", "y", "x"]
    assert "independently" in dock.spacing_row.boxes[0].tooltip  # t defaults to 0


def test_every_control_explains_itself(viewer, dock):
    viewer.add_image(np.zeros((4, 8, 8), np.float32), name="vol")
    select_input(dock, "vol")
    controls = [dock.input.combo, *dock.form.widgets.values(), *dock.spacing_row.boxes]
    assert all(len(control.tooltip or "") > 20 for control in controls)
    assert "noise" in _field(dock, "strength").tooltip
    assert "duality gap" in _field(dock, "tolerance").tooltip
    assert "scikit-image" in _field(dock, "method").tooltip
    assert "ADU" in _field(dock, "offset").tooltip  # the unit, from the params model


def test_poisson_camera_fields_say_what_is_estimated(viewer, dock):
    viewer.add_image(_noisy((32, 32)) + 2.0, name="img")
    select_input(dock, "img")
    _field(dock, "noise_model").value = "poisson"
    gain, offset, read_noise = (_field(dock, n) for n in ("gain", "offset", "read_noise"))
    assert gain.native.text() == offset.native.text() == read_noise.native.text() == "auto"
    assert not offset.enabled and not read_noise.enabled  # estimated with the gain
    params = dock.params()
    assert params.gain is params.offset is params.read_noise is None
    gain.value = 2.0
    offset.value = 100.0
    assert offset.enabled and read_noise.enabled
    assert read_noise.native.text() != "auto"  # 0 is a read noise now, not "estimate it"
    params = dock.params()
    assert (params.gain, params.offset, params.read_noise) == (2.0, 100.0, 0.0)
    gain.value = gain.min  # back to "auto": the whole model is estimated again
    assert dock.params().offset is dock.params().read_noise is None


def test_status_line_says_whether_the_run_converged(viewer, qtbot, dock):
    viewer.add_image(_noisy((48, 48)), name="img")
    select_input(dock, "img")
    _field(dock, "max_iterations").value = 3  # far too few for 1e-3 on any solver
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    status = dock.panel.status.text()
    assert "Stopped at the iteration limit (3)" in status and "tolerance 1e-03" in status
    assert "Took" in status and status.rstrip().endswith("s.")

    _field(dock, "max_iterations").value = 5000
    _field(dock, "tolerance").value = 1e-2
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=30_000)
    record = dock.last_result_layer.metadata[PROVENANCE_KEY]["result"]
    status = dock.panel.status.text()
    assert record["converged"] is True
    assert f"Converged in {record['iterations']} iterations" in status


def test_live_preview_follows_the_displayed_axes(viewer, qtbot, dock, monkeypatch):
    # Issue 7, 2.7: viewing z-x planes must preview a z-x plane (solved in 3D along y).
    from napari_gpuscope.compute import tv

    rng = np.random.default_rng(3)
    z, y, x = np.mgrid[0:10, 0:24, 0:16]
    clean = ((z - 5) ** 2 + (x - 8) ** 2 < 12).astype(np.float32) * (1 + (y > 12))
    noisy = (clean + rng.normal(0, 0.1, clean.shape)).astype(np.float32)
    viewer.add_image(noisy, name="vol", scale=(0.5, 0.1, 0.1))
    select_input(dock, "vol")
    solved = []
    real = tv.iter_denoise

    def spy(image, *args, params, **kwargs):
        solved.append((image.shape, params.spacing))
        return real(image, *args, params=params, **kwargs)

    monkeypatch.setattr(_preview, "iter_denoise", spy)
    viewer.dims.order = (1, 0, 2)  # show z-x planes
    viewer.dims.set_current_step(1, 15)
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "TV preview · vol" in viewer.layers, timeout=10_000)
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
    assert solved[-1] == ((10, 7, 16), (0.2, 1.0, 1.0))  # y 12..18 around y = 15
    preview = viewer.layers["TV preview · vol"]
    assert preview.data.shape == (10, 1, 16)  # the z-x plane at y = 15
    assert tuple(preview.translate) == pytest.approx((0.0, 1.5, 0.0))
    rmse = lambda a: float(np.sqrt(np.mean((a - clean[:, 15, :]) ** 2)))  # noqa: E731
    assert rmse(preview.data[:, 0, :]) < 0.5 * rmse(noisy[:, 15, :])
    viewer.dims.order = (0, 1, 2)  # back to y-x planes: the preview follows
    qtbot.waitUntil(lambda: preview.data.shape == (1, 24, 16), timeout=10_000)
    assert solved[-1][0] == (7, 24, 16)


def test_estimated_camera_is_shown_and_can_be_kept(viewer, qtbot, dock):
    from napari_gpuscope.sample_data import tv as samples

    data = samples.noisy_cells_2d()[0][0]
    viewer.add_image(data[:256, :256], name="cells")
    select_input(dock, "cells")
    _field(dock, "noise_model").value = "poisson"
    assert dock.camera.row.isHidden()  # nothing estimated yet
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=60_000)
    camera = dock.last_result_layer.metadata[PROVENANCE_KEY]["result"]["camera"]
    shown = dock.camera.estimate.text()
    assert not dock.camera.row.isHidden()
    assert f"gain {camera['gain']:.3g} ADU/photon" in shown
    assert f"offset {camera['offset']:.4g} ADU" in shown
    dock.camera.use_button.click()  # keep this camera model for later runs
    params = dock.params()
    assert params.gain == pytest.approx(camera["gain"], rel=1e-4)
    assert params.offset == pytest.approx(camera["offset"], rel=1e-4, abs=1e-3)
    assert dock.camera.row.isHidden()


def test_settings_persist_between_sessions_and_reset(viewer, qtbot, cpu_device):
    import json

    viewer.add_image(np.zeros((4, 16, 16), np.float32), name="vol", scale=(0.5, 0.1, 0.1))
    first = TVDenoiseDock(viewer)
    qtbot.addWidget(first)
    changes = {"strength": 2.5, "noise_model": "poisson", "gain": 3.0, "tolerance": 1e-4}
    for name, value in changes.items():
        _field(first, name).value = value
    first.spacing_row.boxes[0].value = 0.9  # saved with the parameters, but it follows the layer
    first.panel.replace_last.setChecked(True)
    # written at once (nothing waits for a timer that a closing napari would never fire)
    record = json.loads(first.model.settings.path.read_text())
    assert TVParams.from_dict(record["params"]) == first.params()  # a TVParams recipe
    assert first.params().spacing == pytest.approx((0.9, 1.0, 1.0))
    assert record["options"]["replace_last"] is True

    second = TVDenoiseDock(viewer)  # a new napari session
    qtbot.addWidget(second)
    params = second.params()
    assert (params.strength, params.noise_model, params.gain, params.tolerance) == (
        2.5,
        "poisson",
        3.0,
        1e-4,
    )
    assert params.spacing == pytest.approx((0.2, 1.0, 1.0))  # from the layer again
    assert second.panel.replace_last.isChecked()
    second.form.advanced.expand(animate=False)  # "Reset to defaults" is in Advanced
    second.panel.reset_button.click()
    defaults = TVParams(spacing=params.spacing)
    assert second.params() == defaults
    qtbot.wait(600)  # longer than any quiet time a save could wait for
    assert not second.model.settings.path.exists()

    record["params"]["tolerance"] = -1.0  # written by another version: not valid parameters
    record["options"]["replace_last"] = "yes"
    second.model.settings.path.write_text(json.dumps(record))
    third = TVDenoiseDock(viewer)  # invalid saved values: defaults, no error
    qtbot.addWidget(third)
    assert third.params() == defaults and not third.panel.replace_last.isChecked()

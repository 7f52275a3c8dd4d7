"""The TV denoise dock on the CPU test device, checked against independent references."""

from __future__ import annotations

import numpy as np
import pytest
from skimage.restoration import denoise_tv_chambolle

from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.widgets._layers import spacing_from_layer
from napari_gpuscope.widgets.tv_dock import TVDenoiseDock

pytest.importorskip("napari_gpuscope.compute.tv")


def _noisy(shape, sigma=0.1, seed=0):
    rng = np.random.default_rng(seed)
    clean = np.zeros(shape, np.float32)
    clean[..., shape[-2] // 4 : 3 * shape[-2] // 4, shape[-1] // 4 : 3 * shape[-1] // 4] = 1.0
    return (clean + rng.normal(0, sigma, shape)).astype(np.float32)


@pytest.fixture
def dock(viewer, qtbot, cpu_device):
    widget = TVDenoiseDock(viewer)
    qtbot.addWidget(widget)
    return widget


def _select(dock, layer_name):
    dock.reset_choices()
    dock.image_combo.value = next(c for c in dock.image_combo.choices if c.name == layer_name)


def test_spacing_from_layer_scale(viewer, dock):
    viewer.add_image(np.zeros((4, 8, 8), np.float32), name="vol", scale=(0.5, 0.1, 0.1))
    _select(dock, "vol")
    assert [w.value for w in dock.spacing] == pytest.approx([0.2, 1.0, 1.0])
    movie = viewer.add_image(
        _noisy((3, 4, 8, 8)),
        name="movie",
        scale=(2.0, 0.3, 0.1, 0.1),
        axis_labels=("t", "z", "y", "x"),
    )
    assert spacing_from_layer(movie) == pytest.approx((0.0, 1 / 3, 1.0, 1.0))
    _select(dock, "movie")
    assert [w.value for w in dock.spacing] == pytest.approx([0.0, 1 / 3, 1.0, 1.0], abs=1e-4)
    dock.spacing[1].value = 0.5  # editable
    assert dock.collect_parameters()["spacing"] == pytest.approx((0.0, 0.5, 1.0, 1.0))


def test_weight_is_strength_times_estimated_sigma(viewer, dock):
    viewer.add_image(_noisy((128, 128), sigma=0.1), name="img")
    _select(dock, "img")
    dock.strength.value = 2.0
    params = dock.collect_parameters()
    assert params["sigma_hat"] == pytest.approx(0.1, rel=0.1)
    assert params["weight"] == pytest.approx(2.0 * params["sigma_hat"])
    assert f"{params['weight']:.4g}" in dock.weight_label.value
    assert not dock.gain.native.isVisibleTo(dock)  # camera fields only for Poisson noise
    dock.noise_model.value = "poisson"  # Anscombe units: the noise std is 1
    assert dock.collect_parameters()["weight"] == pytest.approx(2.0)
    assert dock.gain.native.isVisibleTo(dock)


def test_full_run_matches_scikit_image_and_has_provenance(viewer, qtbot, dock):
    data = _noisy((48, 48))
    layer = viewer.add_image(data.copy(), name="img", scale=(0.2, 0.2), units=("um", "um"))
    _select(dock, "img")
    dock.method.value = "chambolle"
    dock.tolerance.value = 2e-4
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.runner.running, timeout=30_000)

    result = viewer.layers["img [TV denoise]"]
    params = result.metadata[PROVENANCE_KEY]["parameters"]
    expected = denoise_tv_chambolle(data, weight=params["weight"], eps=2e-4, max_num_iter=200)
    np.testing.assert_allclose(result.data, expected, atol=2e-3)
    np.testing.assert_array_equal(layer.data, data)  # input untouched
    record = result.metadata[PROVENANCE_KEY]
    assert record["method"] == "tv" and record["input"] == "img"
    assert record["result"]["iterations"] >= 1
    assert tuple(result.scale) == pytest.approx((0.2, 0.2))
    status = dock.status_label.text()
    assert "iterations" in status and "relative gap" in status


def test_live_preview_of_a_volume_shows_the_current_plane(viewer, qtbot, dock):
    viewer.add_image(_noisy((12, 32, 32)), name="vol")
    _select(dock, "vol")
    viewer.dims.set_current_step(0, 5)
    dock.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "vol [TV denoise preview]" in viewer.layers, timeout=10_000)
    qtbot.waitUntil(lambda: not dock.runner.running, timeout=10_000)
    preview = viewer.layers["vol [TV denoise preview]"]
    assert preview.data.shape == (32, 32)
    assert preview.metadata[PROVENANCE_KEY]["result"]["preview"] is True
    # the preview plane is much closer to the clean plane than the noisy plane is
    clean = _noisy((12, 32, 32), sigma=0.0)[5]
    noisy_plane = viewer.layers["vol"].data[5]
    rmse = lambda a: float(np.sqrt(np.mean((a - clean) ** 2)))  # noqa: E731
    assert rmse(preview.data) < 0.5 * rmse(noisy_plane)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda v: v.add_image(np.zeros((8, 8, 3), np.uint8), name="bad", rgb=True), "RGB"),
        (lambda v: v.add_image(np.zeros((2,) * 5, np.float32), name="bad"), "5 dimension"),
        (
            lambda v: v.add_image(np.where(np.eye(8) > 0, np.nan, 1.0), name="bad"),
            "NaN",
        ),
    ],
)
def test_bad_inputs_are_reported_not_raised(viewer, dock, errors, make, expected):
    make(viewer)
    _select(dock, "bad")
    assert dock.run() is False
    assert len(errors) == 1
    assert "'bad'" in errors[0] and expected in errors[0] and "Image layer with 2 to 4" in errors[0]
    assert [ly.name for ly in viewer.layers] == ["bad"]


def test_non_image_input_is_reported(viewer, dock, errors, monkeypatch):
    labels = viewer.add_labels(np.zeros((8, 8), np.uint8), name="bad")
    monkeypatch.setattr(dock, "input_layer", lambda: labels)  # napari 0.9 has no 1D images
    assert dock.run() is False
    assert len(errors) == 1
    assert "'bad' is a Labels layer" in errors[0] and "Image layer with 2 to 4" in errors[0]


def test_preview_of_a_time_lapse_volume_solves_one_frame(viewer, qtbot, dock, monkeypatch):
    from napari_gpuscope.compute import tv

    viewer.add_image(_noisy((3, 10, 16, 16)), name="movie", axis_labels=("t", "z", "y", "x"))
    _select(dock, "movie")
    viewer.dims.set_current_step(0, 2)
    viewer.dims.set_current_step(1, 9)
    solved = []
    real = tv.iter_denoise

    def spy(image, weight, **kwargs):
        solved.append((image.shape, kwargs["spacing"], kwargs["max_iterations"]))
        return real(image, weight, **kwargs)

    monkeypatch.setattr(tv, "iter_denoise", spy)
    dock.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "movie [TV denoise preview]" in viewer.layers, timeout=10_000)
    qtbot.waitUntil(lambda: not dock.runner.running, timeout=10_000)
    # frame t=2 only (time is uncoupled), z slab clipped at the last plane: z 6..9
    assert solved == [((4, 16, 16), (1.0, 1.0, 1.0), 50)]
    assert viewer.layers["movie [TV denoise preview]"].data.shape == (16, 16)


def test_cancelling_a_real_tv_run_keeps_the_previous_result(viewer, qtbot, dock):
    data = _noisy((192, 192))
    layer = viewer.add_image(data.copy(), name="img")
    _select(dock, "img")
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.runner.running, timeout=30_000)
    result = viewer.layers["img [TV denoise]"]
    previous_data, previous_record = result.data, result.metadata[PROVENANCE_KEY]

    # A run that cannot converge on its own (tolerance ~0, huge budget) must be stopped by Cancel.
    dock.tolerance.value = 1e-6
    dock.max_iterations.value = 100_000
    dock.strength.value = 3.0
    assert dock.run()
    qtbot.waitUntil(lambda: result.data is not previous_data, timeout=30_000)  # it streams
    dock.cancel()
    qtbot.waitUntil(lambda: not dock.runner.running, timeout=30_000)
    qtbot.wait(200)  # late updates of the cancelled job, if any, must be dropped
    assert result.data is previous_data
    assert result.metadata[PROVENANCE_KEY] == previous_record
    assert [ly.name for ly in viewer.layers] == ["img", "img [TV denoise]"]
    np.testing.assert_array_equal(layer.data, data)


def _spacing_axis_names(dock):
    row = dock.spacing_row.layout()
    widgets = [row.itemAt(i).widget() for i in range(row.count())]
    return [w.text() for w in widgets if hasattr(w, "text") and not hasattr(w, "value")]


def test_spacing_boxes_are_labelled_with_their_axes(viewer, dock):
    viewer.add_image(np.zeros((4, 8, 8), np.float32), name="vol")  # napari's default labels
    _select(dock, "vol")
    assert _spacing_axis_names(dock) == ["z", "y", "x"]
    viewer.add_image(
        np.zeros((2, 4, 8, 8), np.float32), name="movie", axis_labels=("t", "z", "y", "x")
    )
    _select(dock, "movie")
    assert _spacing_axis_names(dock) == ["t", "z", "y", "x"]
    assert "independently" in dock.spacing[0].tooltip  # t defaults to 0: frames apart


def test_every_control_explains_itself(viewer, dock):
    viewer.add_image(np.zeros((4, 8, 8), np.float32), name="vol")
    _select(dock, "vol")
    controls = [
        dock.image_combo,
        dock.strength,
        dock.noise_model,
        dock.gain,
        dock.offset,
        dock.read_noise,
        dock.method,
        dock.tolerance,
        dock.max_iterations,
        dock.nonnegative,
        *dock.spacing,
    ]
    assert all(len(control.tooltip or "") > 20 for control in controls)
    assert "noise" in dock.strength.tooltip and "duality gap" in dock.tolerance.tooltip
    assert "scikit-image" in dock.method.tooltip


def test_poisson_camera_fields_say_what_is_estimated(viewer, dock):
    viewer.add_image(_noisy((32, 32)) + 2.0, name="img")
    _select(dock, "img")
    dock.noise_model.value = "poisson"
    assert dock.gain.native.text() == "auto"
    assert not dock.offset.enabled and not dock.read_noise.enabled  # estimated with the gain
    params = dock.collect_parameters()
    assert params["gain"] is params["offset"] is params["read_noise"] is None
    dock.gain.value = 2.0
    dock.offset.value = 100.0
    assert dock.offset.enabled and dock.read_noise.enabled
    params = dock.collect_parameters()
    assert (params["gain"], params["offset"], params["read_noise"]) == (2.0, 100.0, 0.0)


def test_status_line_says_whether_the_run_converged(viewer, qtbot, dock):
    viewer.add_image(_noisy((48, 48)), name="img")
    _select(dock, "img")
    dock.max_iterations.value = 3  # far too few for 1e-3 on any solver
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.runner.running, timeout=30_000)
    status = dock.status_label.text()
    assert "Stopped at the iteration limit (3)" in status and "tolerance 1e-03" in status
    assert "Took" in status and status.rstrip().endswith("s.")

    dock.max_iterations.value = 5000
    dock.tolerance.value = 1e-2
    assert dock.run()
    qtbot.waitUntil(lambda: not dock.runner.running, timeout=30_000)
    record = viewer.layers["img [TV denoise]"].metadata[PROVENANCE_KEY]["result"]
    status = dock.status_label.text()
    assert record["converged"] is True
    assert f"Converged in {record['iterations']} iterations" in status

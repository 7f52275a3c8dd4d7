"""The demo figure (issue 30 item 10): no black frame around the eSRRF panel (its border of
zeros is cropped from every panel, on one field of view), and a result the demo explains in
words (flat-field's darkfield below the truth) is explained in the figure's caption."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from napari_gpuscope.demos import NOTE_KEY, trim_zero_frame
from napari_gpuscope.export._caption import NOTE_KEY as CAPTION_NOTE_KEY
from napari_gpuscope.export._caption import result_sentence
from napari_gpuscope.provenance import PROVENANCE_KEY


def _extent(layer):
    data, kwargs, _ = layer
    scale = np.asarray(kwargs["scale"][-2:])
    translate = np.asarray(kwargs.get("translate", (0.0, 0.0))[-2:])
    shape = np.asarray(np.shape(data)[-2:])
    return translate - 0.5 * scale, translate + (shape - 0.5) * scale


def test_an_esrrf_like_border_of_zeros_is_cropped_from_every_panel_on_one_field():
    rng = np.random.default_rng(0)
    frames = rng.uniform(100, 200, (10, 64, 64))  # input: (T, Y, X) at 0.1 µm
    result = np.zeros((256, 256))  # magnification 4, pixel-centred grid, 6-pixel ring of 0
    result[6:250, 6:250] = rng.uniform(0.5, 3.0, (244, 244))
    mean = frames.mean(axis=0)
    layers = [
        (frames, {"scale": (1.0, 0.1, 0.1)}, "image"),
        (result, {"scale": (0.025, 0.025), "translate": (-0.0375, -0.0375)}, "image"),
        (mean, {"scale": (0.1, 0.1)}, "image"),
    ]
    shown = trim_zero_frame(layers)
    assert not (shown[1][0] == 0).any(0).any() and not (shown[1][0] == 0).all(1).any()
    lows, highs = zip(*(_extent(layer) for layer in shown), strict=True)
    for low, high in zip(lows, highs, strict=True):  # one field of view in every panel
        np.testing.assert_allclose(low, lows[0], atol=1e-9)
        np.testing.assert_allclose(high, highs[0], atol=1e-9)
    # 6 output pixels = 1.5 input pixels: 2 whole input pixels go, and 8 output pixels.
    assert shown[0][0].shape == (10, 60, 60) and shown[1][0].shape == (240, 240)
    np.testing.assert_array_equal(shown[0][0], frames[:, 2:62, 2:62])
    np.testing.assert_array_equal(shown[1][0], result[8:248, 8:248])
    np.testing.assert_array_equal(shown[2][0], mean[2:62, 2:62])


def test_results_without_a_border_are_shown_whole():
    image = np.ones((16, 16))
    layers = [(image, {"scale": (1.0, 1.0)}, "image"), (2 * image, {"scale": (1.0, 1.0)}, "image")]
    shown = trim_zero_frame(layers)
    assert all(a[0] is b[0] for a, b in zip(shown, layers, strict=True))


def test_a_note_in_the_provenance_is_said_in_the_caption():
    assert NOTE_KEY == CAPTION_NOTE_KEY
    record = {"method": "flatfield", "input": "tiles", NOTE_KEY: "The darkfield is low."}
    layer = SimpleNamespace(
        name="darkfield · tiles [auto, dark]", ndim=2, metadata={PROVENANCE_KEY: record}
    )
    sentence = result_sentence(layer, [layer])
    assert sentence == "darkfield (auto, dark). The darkfield is low"

"""The autotune takes the fit's background mask (issue 25 item 2): every candidate and the
final fit use it, so the profile it returns is the one a run with that mask fits (a dock's Run
after Autotune fits the autotune's profile)."""

from __future__ import annotations

import numpy as np

from napari_gpuscope.compute.flatfield import BasicParams, autotune, fit_basic
from napari_gpuscope.sample_data._shading import shaded_tiles


def _with_object(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A bright disc at the same place in every tile, and the mask: 1 = background, 0 = disc."""
    _, y, x = images.shape
    yy, xx = np.mgrid[:y, :x]
    disc = (yy - y // 3) ** 2 + (xx - 2 * x // 3) ** 2 < (y // 5) ** 2
    painted = images.astype(np.float32)
    painted[:, disc] += 0.5 * images.mean()
    return painted, (~disc).astype(np.uint8)


def test_the_autotunes_profile_is_the_masked_fit_with_its_choice():
    truth = shaded_tiles(16, (64, 64), seed=31)
    painted, mask = _with_object(truth.images)
    params = BasicParams(working_size=64)
    candidates = (0.5, 2.0, 8.0)
    masked = autotune(painted, params, candidates=candidates, fitting_weight=mask, device="cpu")
    # Oracle: the fit itself, with the mask and the chosen smoothness.
    chosen = params.replace(smoothness_flatfield=masked.smoothness_flatfield)
    direct = fit_basic(painted, chosen, fitting_weight=mask, device="cpu")
    assert masked.profile.flatfield.tobytes() == direct.flatfield.tobytes()
    # The mask is used: the candidates' fits see other pixels, so the profile is another one.
    plain = autotune(painted, params, candidates=candidates, device="cpu")
    assert masked.profile.flatfield.tobytes() != plain.profile.flatfield.tobytes()


def test_a_mask_without_background_is_refused_in_words():
    truth = shaded_tiles(8, (32, 32), seed=32)
    try:
        autotune(truth.images, candidates=(1.0,), fitting_weight=np.zeros((32, 32)), device="cpu")
    except ValueError as error:
        assert "fitting_weight has no pixel > 0" in str(error)
    else:
        raise AssertionError("an all-zero mask was accepted")

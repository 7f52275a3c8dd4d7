"""Decorrelation resolution against NanoPyx 2.1.5's values and against analytic expectations.

The fixtures (``tests/fixtures/esrrf/nanopyx_decorr.npz``) hold images and NanoPyx's
``calculate_decorr_analysis`` resolution for each, made by ``make_decorr_fixtures.py`` in its
own venv; this module never imports NanoPyx.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.esrrf._decorr import (
    DecorrelationResult,
    analysed_region,
    decorrelation_resolution,
)
from napari_gpuscope.compute.esrrf._decorr_blur import _gaussian_blur
from napari_gpuscope.compute.params import ParameterError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "esrrf" / "nanopyx_decorr.npz"


def _cases() -> tuple[dict, dict]:
    with np.load(FIXTURES) as data:
        meta = json.loads(str(data["meta"]))
        arrays = {key: data[key] for key in data.files if key != "meta"}
    return meta, arrays


META, ARRAYS = _cases()
NAMES = sorted(META["cases"])


def test_the_fixtures_cover_esrrf_widefield_and_noise_levels():
    assert META["nanopyx"] == "2.1.5"
    assert {"esrrf_avg_m2", "esrrf_var_m3", "esrrf_widefield_mean"} <= set(NAMES)
    assert sum(name.startswith("filaments_") for name in NAMES) == 3


@pytest.mark.parametrize("name", NAMES)
def test_matches_nanopyx_within_10_percent(name, cpu_device):
    image = ARRAYS[f"{name}/image"].astype(np.float32)
    expected = float(ARRAYS[f"{name}/resolution"])
    result = decorrelation_resolution(image, device=cpu_device)
    assert np.isfinite(expected)
    assert result.resolution == pytest.approx(expected, rel=0.10), name
    # The same algorithm, not just a close value: float rounding aside, the two agree.
    assert result.resolution == pytest.approx(expected, rel=1e-3), name


def test_other_parameters_match_nanopyx(cpu_device):
    name = "filaments_200_photons"
    kwargs = META["cases"][name]["other_kwargs"]
    image = ARRAYS[f"{name}/image"].astype(np.float32)
    result = decorrelation_resolution(
        image,
        rmin=kwargs["rmin"],
        rmax=kwargs["rmax"],
        n_radii=kwargs["n_r"],
        n_filters=kwargs["n_g"],
        device=cpu_device,
    )
    assert result.resolution == pytest.approx(float(ARRAYS[f"{name}/resolution_other"]), rel=0.1)
    assert result.curves.shape == (2, 15, 30)


def test_the_noisiest_filaments_resolve_worst(cpu_device):
    """At 20 photons noise hides detail; at 200 and 2000 the PSF (sigma 1.6 px) limits both."""
    values = [
        decorrelation_resolution(
            ARRAYS[f"filaments_{n}_photons/image"].astype(np.float32), device=cpu_device
        ).resolution
        for n in (20, 200, 2000)
    ]
    assert values[0] > 1.2 * max(values[1:])
    assert all(3.0 < v < 5.0 for v in values[1:])


def test_blurrier_images_resolve_worse_in_proportion(cpu_device):
    """Smoothed noise of correlation length s: the resolution grows with s."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=(192, 192))
    values = []
    for sigma in (1.5, 3.0):
        image = ndimage.gaussian_filter(base, sigma)
        image = image / image.std() + 0.02 * rng.normal(size=image.shape)
        values.append(decorrelation_resolution(image, device=cpu_device).resolution)
    assert 1.5 < values[1] / values[0] < 2.5


def test_pixel_size_scales_the_physical_value_only(cpu_device):
    image = ARRAYS["smooth_noise_s1.5/image"].astype(np.float32)
    plain = decorrelation_resolution(image, device=cpu_device)
    scaled = decorrelation_resolution(image, pixel_size=0.065, device=cpu_device)
    assert scaled.resolution == plain.resolution
    assert scaled.resolution_physical == pytest.approx(plain.resolution * 0.065)
    assert plain.resolution_physical is None
    facts = scaled.summary()
    json.dumps(facts)
    assert facts["resolution_px"] == pytest.approx(plain.resolution)
    assert "0.065" in scaled.describe()


def test_curves_and_peaks_are_consistent(cpu_device):
    image = ARRAYS["esrrf_avg_m2/image"].astype(np.float32)
    result = decorrelation_resolution(image, device=cpu_device)
    assert isinstance(result, DecorrelationResult)
    assert result.d0.shape == result.radii.shape == (50,)
    assert result.curves.shape == (2, 10, 50) and result.sigmas.shape == (2, 10)
    assert result.kc_max == pytest.approx(np.nanmax(result.peaks[1]))
    assert result.resolution == pytest.approx(2.0 / result.kc_max)
    # d(r) of the raw image is a correlation coefficient: within [-1, 1].
    assert np.all(np.abs(result.d0) <= 1.0 + 1e-5)
    assert result.padded_size == 128  # 96 x 96 -> the next power of two


def test_input_is_not_modified(cpu_device):
    image = ARRAYS["smooth_noise_s1.5/image"].astype(np.float32)
    before = image.copy()
    decorrelation_resolution(image, device=cpu_device)
    np.testing.assert_array_equal(image, before)


@pytest.mark.parametrize("sigma", [0.14, 0.9, 3.0, 4.2, 40.0, 700.0])
@pytest.mark.parametrize("shape", [(64, 64), (40, 72)])
def test_gaussian_blur_is_scipys(sigma, shape):
    """Kernels up to radius 16 are summed in SciPy's order (the same float32 values); longer
    ones (4.2 and up) go through the FFT: float64 rounding may then move a value by one ulp."""
    import torch

    rng = np.random.default_rng(0)
    image = rng.normal(size=shape).astype(np.float32)
    image[10:20] = 0  # a flat band: the high-pass there is only the blur's rounding
    ours = _gaussian_blur(torch.from_numpy(image), sigma).numpy()
    expected = ndimage.gaussian_filter(image, sigma)
    if int(4 * sigma + 0.5) <= 16:
        np.testing.assert_array_equal(ours, expected)
    else:
        np.testing.assert_array_max_ulp(ours, expected, maxulp=1)


def test_constant_image_has_no_resolution(cpu_device):
    result = decorrelation_resolution(np.full((64, 64), 7.0), device=cpu_device)
    assert np.isnan(result.resolution) and result.resolution_physical is None
    assert "none" in result.describe()
    assert result.summary()["resolution_px"] is None


@pytest.mark.parametrize(
    ("image", "match"),
    [
        (np.zeros((0, 32)), "empty"),
        (np.zeros((8, 64)), "16 x 16"),
        (np.zeros((4, 32, 32)), "dimension"),
        (np.where(np.eye(32) > 0, np.nan, 1.0), "non-finite"),
    ],
)
def test_bad_images_are_refused(image, match, cpu_device):
    with pytest.raises(InvalidInputError, match=match):
        decorrelation_resolution(image, device=cpu_device)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rmin": 0.6, "rmax": 0.5}, "rmin must be below rmax"),
        ({"rmax": 1.5}, "rmax must lie within"),
        ({"n_radii": 5}, "n_radii must lie within"),
        ({"n_filters": 2.5}, "n_filters must be an integer"),
        ({"pixel_size": -1.0}, "pixel_size must be a positive"),
    ],
)
def test_bad_parameters_are_refused(kwargs, match, cpu_device):
    with pytest.raises(ParameterError, match=match):
        decorrelation_resolution(np.ones((32, 32)), device=cpu_device, **kwargs)


@pytest.mark.parametrize("scale", [2.0**-100, 3e-30, 1e30, 3e37])
def test_the_value_does_not_depend_on_the_image_scale(scale, cpu_device):
    """Decorrelation is scale-free; values near float32's limits must not overflow."""
    image = ARRAYS["filaments_200_photons/image"].astype(np.float64)
    expected = float(ARRAYS["filaments_200_photons/resolution"])
    result = decorrelation_resolution(image * scale, device=cpu_device)
    assert result.resolution == pytest.approx(expected, rel=1e-3)


_MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, sys, time
    import numpy as np, torch
    torch.set_num_threads(1)
    from napari_gpuscope.compute.esrrf._decorr import decorrelation_resolution

    side = int(sys.argv[1])
    # White noise: its raw curve has no peak (kc0 = 0), so the high-pass sigmas reach side / 2,
    # the longest kernels there are (the old conv1d blur unfolded them: 34 GB at 1024 x 1024).
    image = np.random.default_rng(0).normal(size=(side, side)).astype(np.float32)
    decorrelation_resolution(image[:32, :32], device="cpu")  # warm-up: libraries, threads
    # A safety net: a regression fails within seconds instead of swapping the machine.
    with open("/proc/self/status") as status:
        size = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
    limit = size * 1024 + (2 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    decorrelation_resolution(image, device="cpu")
    seconds = time.perf_counter() - start
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, seconds)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and ru_maxrss")
def test_a_1024_image_needs_a_few_hundred_megabytes_at_most():
    """Peak resident memory added by the analysis of a 1024 x 1024 image (a fresh process).

    Live data: ten 1024^2 float32 high-passes are 40 MB, their complex spectra 80 MB, so one
    batch of four with its copies stays near 150 MB (measured 170 MB). Large allocations are
    mmapped (``MALLOC_MMAP_THRESHOLD_``) so that freed blocks leave the resident set and the
    peak measures what the analysis holds at once, not the allocator's fragmentation.
    """
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    done = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, "1024"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    kib, seconds = done.stdout.split()[-2:]
    assert int(kib) * 1024 < 300e6, (int(kib) / 1024, "MiB", float(seconds), "s")


def _smoothed_noise(shape, sigma=2.0, seed=0):
    """Gaussian-smoothed white noise: structure down to ~sigma pixels everywhere, so every
    region has the same resolution (the oracle for a crop of it)."""
    rng = np.random.default_rng(seed)
    image = ndimage.gaussian_filter(rng.normal(size=shape), sigma)
    return (image + 0.01 * rng.normal(size=shape)).astype(np.float32)


@pytest.mark.parametrize("shape", [(16, 5000), (5000, 16), (64, 3000)])
def test_a_thin_strip_is_analysed_on_a_bounded_central_region(shape, cpu_device):
    """Issue 26 item 3: a 16 x 5,000 strip was padded to a 8,192^2 square (456 s, 6.1 GB).
    Now the long side analysed is at most twice the short one, centred, and the answer is the
    analysis of that region: within the range the square doc example gives for sigma 2."""
    image = _smoothed_noise(shape)
    result = decorrelation_resolution(image, device=cpu_device)
    short = min(shape)
    assert sorted(result.analysed_shape) == [short, 2 * short]
    assert result.padded_size <= 4 * short and result.cropped
    rows, cols = analysed_region(shape)
    alone = decorrelation_resolution(image[rows, cols], device=cpu_device)
    assert result.resolution == alone.resolution
    assert not alone.cropped and "central" in result.describe()
    if short >= 64:  # a 16-px strip is too small to say much; 64 px behaves as a square
        assert 4 < result.resolution < 12


def test_a_large_image_is_analysed_on_its_central_region(cpu_device):
    image = _smoothed_noise((1100, 300))
    result = decorrelation_resolution(image, device=cpu_device)
    assert result.analysed_shape == (600, 300) and result.image_shape == (1100, 300)
    assert result.summary()["analysed_shape"] == [600, 300]
    np.testing.assert_equal(
        result.resolution, decorrelation_resolution(image[250:850], device=cpu_device).resolution
    )

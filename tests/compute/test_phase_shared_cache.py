"""The optics cache lives in compute: a job given no cache uses its process's cache of the
device, keyed by the optics, so the dock, its live preview and a batch worker reuse the optics
an earlier job built with the same optics, and a changed optic builds its own (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute import phase
from napari_gpuscope.compute.phase import _optics
from napari_gpuscope.sample_data.phase import OPTICS


@pytest.fixture
def counted(monkeypatch):
    """Count the grid constructions and the transfer-function builds, from a cleared cache."""
    calls = {"grid": 0, "build": 0}
    for name, counter in (("_Grid", "grid"), ("_build", "build")):
        original = getattr(_optics, name)

        def count(*args, _original=original, _counter=counter, **kwargs):
            calls[_counter] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(_optics, name, count)
    phase.clear_shared_caches()
    yield calls
    phase.clear_shared_caches()


def _stack(seed: int, shape=(7, 48, 48)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (1 + 0.05 * rng.standard_normal(shape)).astype(np.float32)


def test_a_second_solve_with_the_same_optics_reuses_them(counted):
    params = phase.PhaseParams(**OPTICS, tilt_mode="manual", tilt_zenith=0.2, tilt_azimuth=1.0)
    first = phase.reconstruct(_stack(1), params=params, device="cpu")
    assert counted == {"grid": 1, "build": 1}
    cache = phase.shared_cache("cpu")
    builds = dict(cache.builds)
    # another stack, another regularization, the preview's solver: nothing built again
    second = phase.reconstruct(_stack(2), params=params, device="cpu")
    phase.reconstruct(_stack(2), params=params.replace(regularization=1e-2), device="cpu")
    phase.PhaseSolver(_stack(2), params, device="cpu").solve(3e-3)
    assert counted == {"grid": 1, "build": 1}
    assert cache.builds == builds
    # the same as a reconstruction with optics of its own
    own = phase.reconstruct(
        _stack(2), params=params, optics_cache=phase.OpticsCache(), device="cpu"
    )
    np.testing.assert_array_equal(second.phase, own.phase)
    assert not np.array_equal(first.phase, second.phase)


@pytest.mark.parametrize(
    ("change", "grids"),
    [
        pytest.param({"wavelength": 0.5}, 1, id="wavelength"),
        pytest.param({"na_detection": 0.5}, 1, id="NA"),
        pytest.param({"yx_pixel_size": 0.3}, 1, id="pixel size"),
        pytest.param({"z_pixel_size": 1.5}, 0, id="z step"),  # the grid stands; z rebuilds
        pytest.param({"tilt_zenith": 0.3}, 0, id="tilt"),  # the grid stands; the angle rebuilds
    ],
)
def test_a_changed_optic_builds_its_own(counted, change, grids):
    params = phase.PhaseParams(**OPTICS, tilt_mode="manual", tilt_zenith=0.2, tilt_azimuth=1.0)
    phase.reconstruct(_stack(1), params=params, device="cpu")
    assert counted == {"grid": 1, "build": 1}
    changed = phase.reconstruct(_stack(1), params=params.replace(**change), device="cpu")
    assert counted == {"grid": 1 + grids, "build": 2}
    fresh = phase.reconstruct(
        _stack(1), params=params.replace(**change), optics_cache=phase.OpticsCache(), device="cpu"
    )
    np.testing.assert_array_equal(changed.phase, fresh.phase)


def test_another_shape_builds_its_own(counted):
    params = phase.PhaseParams(**OPTICS, tilt_mode="manual", tilt_zenith=0.2, tilt_azimuth=1.0)
    phase.reconstruct(_stack(1), params=params, device="cpu")
    phase.reconstruct(_stack(1, (7, 40, 48)), params=params, device="cpu")
    assert counted == {"grid": 2, "build": 2}


def test_the_cache_is_per_device_and_clears():
    assert phase.shared_cache("cpu") is phase.shared_cache("cpu")
    phase.reconstruct(_stack(1), params=phase.PhaseParams(**OPTICS), device="cpu")
    assert phase.shared_cache("cpu").nbytes > 0
    phase.clear_shared_caches()
    assert phase.shared_cache("cpu").nbytes == 0

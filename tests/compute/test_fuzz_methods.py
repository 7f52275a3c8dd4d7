"""Every method against a table of hostile inputs (issue 17): each gives a clear typed error
(a ``ValueError``: ``InvalidInputError`` or ``ParameterError``, with a message) or a result
whose every value is finite. Never a crash of another kind, never a silent NaN."""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope.compute import esrrf, flatfield, phase, tv
from napari_gpuscope.sample_data.phase import OPTICS

_RNG = np.random.default_rng(17)


def _stack(shape) -> np.ndarray:
    """Positive, noisy, float32 data of ``shape`` (the well-formed input the cases damage)."""
    return (100.0 + 20.0 * _RNG.random(shape)).astype(np.float32)


def _with(value: float):
    """One pixel of the data set to ``value``."""

    def damage(good: np.ndarray) -> np.ndarray:
        bad = good.copy()
        bad.flat[bad.size // 3] = value
        return bad

    return damage


CASES = {
    "one NaN": _with(np.nan),
    "one infinity": _with(np.inf),
    "float32 near its maximum": lambda g: (g / g.max() * np.float32(3e38)).astype(np.float32),
    "float64 beyond float32": lambda g: g.astype(np.float64) * 1e300,
    "float64 below float32's smallest": lambda g: g.astype(np.float64) * 1e-300,
    "all negative": lambda g: -g,
    "all zero": lambda g: np.zeros_like(g),
    "constant": lambda g: np.full_like(g, 100.0),
    "masked values": lambda g: np.ma.masked_greater(g, np.percentile(g, 90)),
    "nested list": lambda g: g.tolist(),
    "boolean": lambda g: g > 110,
    "complex": lambda g: g.astype(np.complex64),
    "empty": lambda g: g[:, :0] if g.ndim > 1 else g[:0],
    "one dimension": lambda g: g.ravel(),
    "int64 beyond 2**60": lambda g: np.full(g.shape, 2**61, np.int64),
}

METHODS = {
    "tv": ((32, 32), lambda x: tv.denoise(x, strength=1.0, device="cpu")),
    "esrrf": ((8, 24, 24), lambda x: esrrf.esrrf(x, magnification=2, device="cpu")),
    "flatfield": (
        (12, 32, 32),
        lambda x: flatfield.fit_basic(x, working_size=32, max_reweight_iterations=3, device="cpu"),
    ),
    "phase": ((5, 24, 24), lambda x: phase.reconstruct(x, **OPTICS, device="cpu")),
}


def _finite(result) -> bool:
    if isinstance(result, np.ndarray):
        return bool(np.isfinite(result).all())
    if isinstance(result, flatfield.ShadingProfile):
        return bool(np.isfinite(result.flatfield).all() and np.isfinite(result.darkfield).all())
    if isinstance(result, phase.PhaseResult):
        return bool(np.isfinite(result.phase).all() and np.isfinite(result.absorption).all())
    raise AssertionError(f"unexpected result type {type(result).__name__}")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method_id", list(METHODS))
def test_a_hostile_input_gives_a_clear_error_or_a_finite_result(method_id, case):
    shape, run = METHODS[method_id]
    data = CASES[case](_stack(shape))
    try:
        result = run(data)
    except ValueError as exc:  # InvalidInputError, ParameterError
        assert str(exc).strip(), f"{method_id} on {case}: an error without a message"
        return
    assert _finite(result), f"{method_id} on {case}: non-finite values returned silently"

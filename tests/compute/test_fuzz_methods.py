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


# ------------------------------------------------------------------- blank data (issue 26)
def _scan(steps_px: int, blocks: int, seed: int, per_block: int = 4) -> np.ndarray:
    """A 48 x 48 px view moving ``steps_px`` along x each block over a larger textured
    sample, with Poisson noise (the content moves by -steps_px a block)."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    texture = gaussian_filter(rng.normal(size=(64, 48 + steps_px * blocks + 8)), 2.0)
    texture = np.clip(400 + 4000 * texture / texture.std(), 0, None)
    frames = [
        rng.poisson(texture[8:56, k * steps_px : k * steps_px + 48])
        for k in range(blocks)
        for _ in range(per_block)
    ]
    return np.asarray(frames, np.uint16)


def _drifting(blocks: int, seed: int, per_block: int = 4) -> np.ndarray:
    """A smooth textured sample (48 x 48 px, Poisson noise) whose content moves by +0.5 px
    along x each block (scipy's cubic shift): a drift every reference measures (test
    below: within 0.1 px a block)."""
    from scipy.ndimage import gaussian_filter, shift

    rng = np.random.default_rng(seed)
    texture = gaussian_filter(rng.normal(size=(80, 80)), 2.0)
    texture = np.clip(400 + 4000 * texture / texture.std(), 0, None)
    frames = []
    for k in range(blocks):
        view = np.clip(shift(texture, (0, 0.5 * k), order=3, mode="nearest"), 0, None)
        frames += [rng.poisson(view[16:64, 16:64]) for _ in range(per_block)]
    return np.asarray(frames, np.uint16)


@pytest.mark.parametrize("seed", range(8))
def test_drift_with_random_blank_blocks_is_marked_or_refused(seed):
    """Random blocks of a drifting stack replaced by camera background or a constant, any
    reference: the blanked blocks are exactly the ones marked unmeasured, the trace is finite
    and within the frame, and the measured blocks follow the known 0.5 px steps; with fewer
    than two blocks left (or a blank first block as the 'first' reference) a ValueError
    names the blocks without structure. Never a trace invented from blank frames."""
    rng = np.random.default_rng(100 + seed)
    blocks = 8
    stack = _drifting(blocks, seed=seed)
    blank = sorted(rng.choice(blocks, size=int(rng.integers(1, blocks + 1)), replace=False))
    for k in blank:
        frames = slice(4 * k, 4 * k + 4)
        if rng.random() < 0.5:
            stack[frames] = 100 + rng.poisson(20.0, stack[frames].shape)
        else:
            stack[frames] = 500
    reference = str(rng.choice(["first", "previous", "mean"]))
    kept = [k for k in range(blocks) if k not in blank]
    refused = len(kept) < 2 or (reference == "first" and 0 in blank)
    try:
        result = esrrf.estimate_drift(stack, time_averaging=4, reference=reference, device="cpu")
    except ValueError as exc:
        assert refused, (blank, reference, str(exc))
        assert "no structure in common" in str(exc)
        return
    assert not refused, (blank, reference)
    assert result.unmeasured_blocks == blank, (blank, reference)
    assert np.isfinite(result.shifts).all() and np.isfinite(result.aligned_mean).all()
    assert (np.abs(result.shifts) < 48).all()
    steps = np.diff(result.block_shifts[kept, 1]) / np.diff(kept)
    np.testing.assert_allclose(steps, 0.5, atol=0.1)
    assert f"{len(blank)} of {blocks} blocks not measured" in result.describe()


@pytest.mark.parametrize(
    ("case", "stack", "says"),
    [
        ("constant", np.full((24, 48, 48), 700, np.uint16), "no structure in common"),
        (
            "background",
            (100 + np.random.default_rng(3).poisson(20.0, (24, 48, 48))).astype(np.uint16),
            "no structure in common",
        ),
        ("steps beyond the frame", _scan(5, 12, seed=9), "has drifted by"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_drift_without_anything_to_measure_is_a_clear_error(case, stack, says):
    with pytest.raises(ValueError, match=says):
        esrrf.estimate_drift(stack, time_averaging=4, reference="previous", device="cpu")


@pytest.mark.parametrize(
    "kind", ["poisson-20", "poisson-5000", "read-noise", "correlated", "constant", "zeros"]
)
def test_a_tilt_stack_without_structure_is_not_measurable(kind):
    """Noise-only and constant stacks (128 x 128 x 7) hold no tilt: not_measurable_reason
    says so (the estimate's rule for its result; issue 26 items 1, 12)."""
    import torch
    from scipy.ndimage import gaussian_filter

    from napari_gpuscope.compute.phase._tilt import not_measurable_reason

    rng = np.random.default_rng(12)
    shape = (7, 128, 128)
    stack = {
        "poisson-20": lambda: rng.poisson(20.0, shape),
        "poisson-5000": lambda: rng.poisson(5000.0, shape),
        "read-noise": lambda: 300 + rng.normal(0, 5, shape),
        "correlated": lambda: 300 + gaussian_filter(rng.normal(0, 5, shape), (0, 2, 2)),
        "constant": lambda: np.full(shape, 900.0),
        "zeros": lambda: np.zeros(shape),
    }[kind]()
    params = phase.PhaseParams(**OPTICS)
    reason = not_measurable_reason(torch.from_numpy(stack.astype(np.float32)), params)
    assert "constant" in reason or "share no structure above the noise" in reason, kind

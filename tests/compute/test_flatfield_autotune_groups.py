"""A CPU fits the autotune's candidates a few at a time (issue 30 item 5): the schedule changes,
the arithmetic does not. Each problem's ALM is independent of the others', so the grouped loop
must give, per candidate and per reweighting pass, the bits the whole batch at once gives (the
path every GPU takes and every CPU took before), and the autotune the same costs, choice and
profile.

On the machines measured the grouped loop gives the same bits; the tests allow float32
rounding (a few ulps amplified over three reweighting passes), because the kernels a CPU picks
for a batch of 2 and one of 7 may sum in another order on another instruction set. The choice
itself must not change.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_gpuscope.compute.flatfield import BasicParams, _autotune, iter_autotune
from napari_gpuscope.compute.flatfield._alm import AlmTick, FitState, reweighting_steps
from napari_gpuscope.sample_data._shading import shaded_tiles

_FIELDS = tuple(FitState.__dataclass_fields__)


def _same_to_rounding(mine, theirs, what) -> None:
    """Equal to float32 rounding: within 1e-4 of the field's own scale (its largest value)."""
    if not torch.is_floating_point(theirs):
        assert torch.equal(mine, theirs), what
        return
    scale = float(theirs.abs().max()) if theirs.numel() else 0.0
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4 * scale + 1e-12, msg=str(what))


def _steps(stack, lambdas, group_size, get_darkfield, mask=None):
    p = len(lambdas)
    return list(
        reweighting_steps(
            stack.expand(p, -1, -1, -1),
            lam_flat=lambdas,
            lam_dark=0.1 * lambdas,
            get_darkfield=get_darkfield,
            max_iterations=500,
            optimization_tol=1e-4,
            max_reweight_iterations=3,
            reweighting_tol=1e-3,
            epsilon=0.1,
            fitting_mask=None if mask is None else mask.expand(p, -1, -1, -1),
            group_size=group_size,
        )
    )


@pytest.mark.parametrize("get_darkfield", [False, True], ids=["no-dark", "dark"])
def test_grouped_passes_equal_the_whole_batch_within_float32_rounding(get_darkfield):
    """Seven problems (the reference and six candidates) on 16 tiles of 64 x 64 with an offset:
    groups of 2 (the last of three) and of 3 against all at once, every field of the first
    three passes."""
    truth = shaded_tiles(16, (64, 64), seed=7, dark_offset=100.0)
    stack = torch.from_numpy(truth.images.astype(np.float32))[None]
    lambdas = torch.tensor((3.6, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0))
    mask = None if get_darkfield else stack > float(np.quantile(truth.images, 0.05))
    whole = _steps(stack, lambdas, None, get_darkfield, mask)
    whole_states = [s for s in whole if isinstance(s, FitState)]
    for size in (2, 3):
        grouped = _steps(stack, lambdas, size, get_darkfield, mask)
        states = [s for s in grouped if isinstance(s, FitState)]
        assert len(states) == len(whole_states)
        for k, (mine, theirs) in enumerate(zip(states, whole_states, strict=True)):
            for name in _FIELDS:
                _same_to_rounding(getattr(mine, name), getattr(theirs, name), (size, k, name))
        ticks = [s for s in grouped if isinstance(s, AlmTick)]
        # Groups of at least two problems (a lone last problem joins the group before), in
        # ascending order, covering the problems still reweighting.
        first = [t for t in ticks if t.pass_number == 1]
        groups = {t.group: tuple(t.problems.tolist()) for t in first}
        assert all(len(g) >= 2 for g in groups.values()), groups
        assert sum(groups.values(), ()) == tuple(range(len(lambdas)))


def test_the_autotune_in_groups_chooses_and_fits_what_all_at_once_does(monkeypatch):
    """End to end: the same choice, and costs and final profile equal to rounding, with the
    default CPU groups (forced small here: these tiles are small) and every candidate at once."""
    truth = shaded_tiles(16, (48, 48), seed=11)
    params = BasicParams(working_size=48)
    candidates = (0.5, 1.0, 2.0, 4.0, 8.0)

    def run():
        return iter_autotune(truth.images, params, candidates=candidates, device="cpu")

    monkeypatch.setattr(_autotune, "_group_size", lambda shape, device: None)
    at_once = _drain(run())
    monkeypatch.setattr(_autotune, "_group_size", lambda shape, device: 2)
    grouped = _drain(run())
    assert grouped.smoothness_flatfield == at_once.smoothness_flatfield
    np.testing.assert_allclose(grouped.costs, at_once.costs, rtol=1e-5)
    for field in ("flatfield", "darkfield"):
        theirs = getattr(at_once.profile, field)
        atol = 1e-4 * float(np.abs(theirs).max()) + 1e-12
        np.testing.assert_allclose(getattr(grouped.profile, field), theirs, rtol=1e-4, atol=atol)


def test_a_cpu_group_is_small_and_a_gpu_runs_all_at_once():
    """Two problems at the default working size (48 frames of 128 x 128: 3 MiB each), more for
    small stacks, never fewer than two; a GPU fits every candidate at once."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert _autotune._group_size(torch.Size((1, 48, 128, 128)), cpu) == 2
    assert _autotune._group_size(torch.Size((1, 99, 128, 128)), cpu) == 2
    assert _autotune._group_size(torch.Size((1, 16, 32, 32)), cpu) == 128
    assert _autotune._group_size(torch.Size((1, 48, 128, 128)), gpu) is None


def _drain(job):
    while True:
        try:
            next(job)
        except StopIteration as done:
            return done.value

"""The autotune's progress is real (issue 30 item 5): after every reweighting pass it counts the
candidates scored so far (a candidate whose fit has stopped reweighting never changes again, so
it is scored then) and names the best so far, which ends as the autotune's choice."""

from __future__ import annotations

import math
import re

import numpy as np

from napari_gpuscope.compute.flatfield import BasicParams, fit_basic, iter_autotune
from napari_gpuscope.compute.flatfield._autotune import autotune_cost
from napari_gpuscope.sample_data._shading import shaded_tiles

SCORED = re.compile(r"(\d+) of (\d+) candidates scored(?:, best so far smoothness (\S+))?")


def _run(job):
    updates = []
    try:
        while True:
            updates.append(next(job))
    except StopIteration as stop:
        return updates, stop.value


def test_progress_counts_the_candidates_scored_and_ends_with_the_choice():
    truth = shaded_tiles(12, (32, 32), seed=41)
    candidates = (0.5, 1.0, 2.0, 4.0, 8.0)
    params = BasicParams(working_size=32)
    updates, result = _run(iter_autotune(truth.images, params, candidates=candidates, device="cpu"))
    counted = [SCORED.search(u.message) for u in updates]
    search = [m for m in counted if m is not None]
    assert search, [u.message for u in updates]
    scored = [int(m.group(1)) for m in search]
    assert all(int(m.group(2)) == len(candidates) for m in search)
    assert scored == sorted(scored) and scored[-1] == len(candidates)
    assert search[-1].group(3) is not None
    assert float(search[-1].group(3)) == result.smoothness_flatfield
    fractions = [u.fraction for u in updates if u.fraction is not None]
    assert fractions == sorted(fractions) and fractions[0] > 0 and fractions[-1] <= 1
    # The choice is the cheapest candidate (BaSiCPy's argmin, first of equals).
    finite = [c for c in result.costs if math.isfinite(c)]
    assert result.smoothness_flatfield == candidates[result.costs.index(min(finite))]


def test_a_candidates_cost_is_that_of_its_own_fit():
    """Independent oracle: the candidate fitted alone (fit_basic on the same images), its cost
    computed with the histogram span the mean-smoothness fit fixes, as BaSiCPy's autotune."""
    import torch

    truth = shaded_tiles(12, (32, 32), seed=43)
    images = truth.images.astype(np.float32)
    params = BasicParams(working_size=32)
    pool_mean = sum((0.01, 0.1, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 7, 8, 10)) / 17
    result = _run(iter_autotune(images, params, candidates=(2.0,), device="cpu"))[1]
    reference = fit_basic(images, params.replace(smoothness_flatfield=pool_mean), device="cpu")
    alone = fit_basic(images, params.replace(smoothness_flatfield=2.0), device="cpu")

    def corrected(profile):
        return torch.as_tensor((images - profile.darkfield) / profile.flatfield)

    low, high = np.quantile(corrected(reference).numpy(), (0.01, 0.99))
    span = float((high - 0.6 * low) * 1.5)
    expected = autotune_cost(corrected(alone), torch.as_tensor(alone.flatfield), span)
    assert math.isclose(result.costs[0], expected, rel_tol=0.05)

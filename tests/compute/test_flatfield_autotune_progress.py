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


INSIDE = re.compile(r"reweighting pass (\d+), (.+?), ALM iteration (\d+); ")


def _small_search(monkeypatch):
    """Every ALM iteration reported (no time between updates), candidates two at a time."""
    from napari_gpuscope.compute.flatfield import _autotune

    monkeypatch.setattr(_autotune, "PROGRESS_INTERVAL", 0.0)
    monkeypatch.setattr(_autotune, "_group_size", lambda shape, device: 2)
    truth = shaded_tiles(12, (32, 32), seed=41)
    params = BasicParams(working_size=32)
    return lambda: iter_autotune(
        truth.images, params, candidates=(0.5, 1.0, 2.0, 4.0, 8.0), device="cpu"
    )


def _counting_iterations(monkeypatch):
    """How many ALM iterations ran (each ends by swapping its problems' flags once)."""
    from napari_gpuscope.compute.flatfield._alm_state import AlmState

    count = [0]
    swap = AlmState.swap_flags

    def counted(self):
        count[0] += 1
        swap(self)

    monkeypatch.setattr(AlmState, "swap_flags", counted)
    return count


def test_progress_moves_inside_a_reweighting_pass(monkeypatch):
    """Between passes the progress names the pass, the candidates fitting now (the words the
    progress uses elsewhere: candidate k of n, the reference fit) and the ALM iteration, which
    counts up one by one; the bar never goes back, and the result is the one without them."""
    make = _small_search(monkeypatch)
    updates, result = _run(make())
    inside = [(u, INSIDE.search(u.message)) for u in updates]
    inside = [(u, m) for u, m in inside if m is not None]
    assert inside
    first_pass = [m.group(2) for _, m in inside if m.group(1) == "1"]
    assert list(dict.fromkeys(first_pass)) == [
        "the reference fit and candidate 1 of 5",
        "candidates 2-3 of 5",
        "candidates 4-5 of 5",
    ]
    runs: dict[tuple[str, str], list[int]] = {}
    for _, m in inside:
        runs.setdefault((m.group(1), m.group(2)), []).append(int(m.group(3)))
    assert all(its == list(range(1, len(its) + 1)) for its in runs.values()), runs
    assert all(SCORED.search(u.message) for u, _ in inside)  # and the candidates scored
    fractions = [u.fraction for u in updates if u.fraction is not None]
    assert fractions == sorted(fractions)
    from napari_gpuscope.compute.flatfield import _autotune

    monkeypatch.setattr(_autotune, "PROGRESS_INTERVAL", math.inf)  # only the first
    quiet_updates, quiet = _run(make())
    assert sum(bool(INSIDE.search(u.message)) for u in quiet_updates) == 1
    assert quiet.costs == result.costs
    assert quiet.profile.flatfield.tobytes() == result.profile.flatfield.tobytes()


def test_cancel_inside_a_pass_runs_no_further_iteration(monkeypatch):
    """Closing the job (the dock's cancel) at an update inside the second reweighting pass runs
    no ALM iteration after it; updates come at most two iterations apart (the last iteration
    of a group's pass ends it without an update of its own)."""
    make = _small_search(monkeypatch)
    count = _counting_iterations(monkeypatch)
    _run(make())
    complete = count[0]
    count[0] = 0
    job = make()
    apart, seen = [], 0
    for update in job:
        apart.append(count[0] - seen)
        seen = count[0]
        found = INSIDE.search(update.message)
        if found and found.group(1) == "2" and found.group(3) == "5":
            break
    else:
        raise AssertionError("no update at iteration 5 of the second pass")
    job.close()
    assert count[0] == seen < complete
    assert max(apart) <= 2, apart

"""A stack through a live eSRRF session, and where the truth and each stop rule stop on its
track (``benchmarks/live_good_enough.py``, issue 28 item 5).

:func:`track_stack` feeds one simulated stack (``tests/live/quality_sim.py``) through a real
live session (M 2, ``FRAMES`` frames of ``SIZE``²) and keeps each reconstruction the track
measured, what the split halves were given and the true errors; :func:`judge` gives the
truth's frame (where the error against the truth improved < 5 % over the look-back), each
rule's of :data:`RULES` and whether it agrees (within 10 %). Importing this module puts
``src/`` and ``tests/live/`` on ``sys.path``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "live"))

from quality_sim import simulate, true_error  # noqa: E402

from napari_gpuscope import live  # noqa: E402
from napari_gpuscope.compute import esrrf  # noqa: E402
from napari_gpuscope.live import _live_esrrf, _split_half  # noqa: E402

TRUTH_CHANGE = 0.05
FRAMES, SIZE, M = 150, 64, 2


def looked_back(values: list[float], frames: list[int], change: float, lookback: int) -> bool:
    """Whether the newest of ``values`` (measured at ``frames``) improved by less than
    ``change`` since the newest value measured at least ``lookback`` frames before it."""
    now = frames[-1]
    before = [i for i, n in enumerate(frames) if n <= now - lookback]
    if not before:
        return False
    first, last = values[before[-1]], values[-1]
    if not (np.isfinite(first) and np.isfinite(last)) or first <= 0:
        return False
    return (first - last) / first < change


def first_firing(
    rule: live.PlateauRule, points: list[live.QualityPoint], lookback: int
) -> int | None:
    """The frames at which ``rule`` (its measure and change) fires first on ``points`` looking
    back ``lookback`` frames, as the session's track applies it (each measurement with what was
    measured until then)."""
    frames = [p.frames for p in points]
    for i in range(len(points)):
        if looked_back(rule.values(points[: i + 1]), frames[: i + 1], rule.change, lookback):
            return points[i].frames
    return None


def truth_firing(errors: list[float], points: list[live.QualityPoint], lookback: int) -> int | None:
    """Where the errors against the truth improved by < 5 % over ``lookback`` frames."""
    frames = [p.frames for p in points]
    for i in range(len(points)):
        if looked_back(errors[: i + 1], frames[: i + 1], TRUTH_CHANGE, lookback):
            return points[i].frames
    return None


def track_stack(
    params: dict[str, float], measure_every: int, grid: int = 0, blink_seed: int | None = None
) -> dict[str, object]:
    """Feed one simulated stack through a live session; the track and the true errors.

    ``grid`` > 0: only the reconstructions at multiples of ``grid`` frames are measured (the
    track holds those); at the other measurements the reconstruction is only kept (for
    :func:`gap_noise_parts`). ``blink_seed``: another acquisition of the same sample
    (``simulate``'s)."""
    stack, emitters = simulate(FRAMES, size=SIZE, **params, blink_seed=blink_seed)
    images: dict[int, np.ndarray] = {}
    widefields: dict[int, np.ndarray] = {}
    halves: list[tuple[np.ndarray, int, float, int]] = []
    compared: dict[int, _split_half.Halves] = {}
    measure, add = _live_esrrf.measure_quality, _split_half.SplitHalves.add

    def keep_image(image, *args, **kwargs):  # the very reconstructions the track measured
        images[kwargs["frames"]] = np.array(image)
        widefields[kwargs["frames"]] = np.array(args[0], np.float64)
        if grid and kwargs["frames"] % grid:
            nan = math.nan
            return live.QualityPoint(kwargs["frames"], kwargs["timepoint"], nan, "kept", nan, 0.0)
        return measure(image, *args, **kwargs)

    def keep_halves(self, image, frames, sigma, device=None):  # what the halves were given
        halves.append((np.array(image, np.float64), frames, sigma, self.border))
        compared[frames] = add(self, image, frames, sigma, device)
        return compared[frames]

    _live_esrrf.measure_quality, _split_half.SplitHalves.add = keep_image, keep_halves
    try:
        feed = live.FrameFeed()
        session = live.attach(
            feed,
            "esrrf",
            esrrf.EsrrfParams(magnification=M),
            device="cpu",
            capacity=FRAMES,
            measure_every=measure_every,
        )
        session.quality.max_share = None  # every measurement due
        for frame in stack:
            feed.push(frame)
        feed.end()
        if not session.wait(600):
            raise RuntimeError("the live session did not finish")
    finally:
        _live_esrrf.measure_quality, _split_half.SplitHalves.add = measure, add
    points = [p for p in session.track() if not grid or p.frames % grid == 0]
    errors = [true_error(images[p.frames], emitters, M) for p in points]
    # With every reconstruction kept (grid), the true error at each of them: the truth's own
    # frame on a finer grid than the rules' (fine_truth_firing).
    fine = {n: true_error(image, emitters, M) for n, image in sorted(images.items())}
    fine = fine if grid else {}
    sigmas = {frames: sigma for _, frames, sigma, _ in halves}
    extra = [recorded(p, images, widefields, sigmas, compared) for p in points]
    tracked = {"points": points, "errors": errors, "halves": halves, "images": images}
    return tracked | {"fine": fine, "extra": extra}


def recorded(point, images, widefields, sigmas, compared) -> dict[str, object]:
    """What else a session has at ``point`` (for exploring the floor, not used by the rules):
    the RSP's fitted blur (output px), the split halves' correlation and frames, and image
    statistics of the reconstruction and of the widefield mean."""
    n, nan = point.frames, math.nan
    image, wide, halves = images.get(n), widefields.get(n), compared.get(n)
    sigma = sigmas.get(n, nan) / _split_half.SPLIT_SIGMA_PER_RSP
    return {
        "rsp_sigma": sigma,
        "halves_r": halves.r if halves is not None else nan,
        "halves_frames": list(halves.frames) if halves is not None else None,
        "resolution_px": point.resolution_px,
        "sr_mean": float(image.mean()) if image is not None else nan,
        "sr_std": float(image.std()) if image is not None else nan,
        "wide_mean": float(wide.mean()) if wide is not None else nan,
        "wide_std": float(wide.std()) if wide is not None else nan,
        "wide_p5": float(np.percentile(wide, 5)) if wide is not None else nan,
    }


def fine_truth_firing(fine: dict[int, float], lookback: int) -> int | None:
    """Where the error against the truth, known at every kept reconstruction (``{frames:
    error}``), first improved by < 5 % over ``lookback`` frames: the truth's frame without the
    rules' measurement grid (a description of the test, not a rule)."""
    frames = sorted(fine)
    for i in range(len(frames)):
        if looked_back([fine[n] for n in frames[: i + 1]], frames[: i + 1], TRUTH_CHANGE, lookback):
            return frames[i]
    return None


RULES = {"RSP rule": live.PlateauRule.rsp(), "estimated-error rule": live.PlateauRule()}


def judge(points: list[live.QualityPoint], errors: list[float], lookback: int, extra=None) -> dict:
    """The truth's frame, each rule's and whether it agrees (within 10 %), and the track
    (each point with ``extra``'s entries, :func:`recorded`)."""
    truth = truth_firing(errors, points, lookback)
    row: dict[str, object] = {"truth": truth}
    for label, rule in RULES.items():
        frames = first_firing(rule, points, lookback)
        row[label] = frames
        row[f"{label} agrees"] = (
            truth is not None and frames is not None and abs(frames - truth) <= 0.1 * truth
        )
    row["track"] = [
        {"frames": p.frames, "true_error": e, "rsp_error": p.rsp_error, "noise": p.noise} | more
        for p, e, more in zip(points, errors, extra or [{}] * len(points), strict=True)
    ]
    return row

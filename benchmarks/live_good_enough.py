"""Acquire until good enough (issue 28 item 5): where each rule says more frames stop helping,
against the frame where the error against the truth stops improving, on simulated stacks.

Each stack (blinking filaments, ``tests/live/quality_sim.py``) is fed through a real live eSRRF
session (M 2, a measurement every ``--measure-every`` frames, 10 by default, every measurement
due); the reconstruction of each measurement is kept, and its error against the truth computed.
Then, at the same measurements, each rule looks back ``--lookback`` frames (30 by default: the
newest measurement at least that many frames before the newest; at a measurement every 10
frames the one 3 measurements back):

- the truth's frame: where the errors against the truth improved by < 5 % over the look-back;
- the RSP rule's (``PlateauRule.rsp()``'s 8 % on the RSP error: the default before);
- the estimated-error rule's (``PlateauRule()``'s 5 % on the estimated error, the split halves'
  noise part on a floor of ``FLOOR_PER_RSP`` x the RSP error).

``--halves-block F`` gives each point the noise part of split halves made again (from what the
session's halves were given) with each block of frames between two measurements going to half
``start // F % 2``: at a measurement every 5 frames and ``F`` 10, the halves of every
measurement at a multiple of 10 frames are those of a measurement every 10 (the session's
halves take one block a measurement, and blinking that lasts across a block's end makes the
halves of shorter blocks agree more).

A rule "agrees" when its frame is within 10 % of the truth's. ``--set dev`` holds the stacks the
constants were chosen on (the test's two and eight more); ``--set fresh`` and ``--set fresh2``
eight each, never looked at while choosing (``docs/live.md`` tells the order). Writes a
Markdown table (stdout) and ``--json``.

    python benchmarks/live_good_enough.py --set fresh --json runs/live_good_enough_fresh.json
    python benchmarks/live_good_enough.py --set fresh --measure-every 5
    python benchmarks/live_good_enough.py --set fresh --measure-every 5 --halves-block 10
    python benchmarks/live_good_enough.py --set dev --measure-every 1 --halves-gap 0 1 2 3

``--halves-gap G ...`` (with ``--measure-every`` dividing each ``G``): the halves of 10-frame
blocks made again without the first ``G`` frames of each block (a guard gap: a blinking event
across a border is no longer in both halves; the reconstruction keeps all frames), judged on
the 10-frame grid; only the reconstructions at multiples of 10 are measured, the rest are kept.
``--set fresh3``: eight stacks more, drawn (below) for judging the guard gap; ``--set fresh4``:
sixteen more, drawn alike for judging the floor's candidates. Each point of the ``--json`` track
also records what else a session has (:func:`recorded`: the RSP's blur, the halves' correlation,
image statistics).

``--realizations R``: R acquisitions of each stack's sample (``simulate``'s ``blink_seed``
``100 x seed + r``: the same emitters, other blinking and shot noise), a live session each; each
rule's frame is judged against the truth's frame of the EXPECTED curve (the mean true error over
the R at each measured frame) as well as the realization's own
(``runs/2026-11-30-cpu-live-expected-truth.md``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
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

SETS: dict[str, dict[str, dict[str, float]]] = {
    "dev": {
        "sparse, bright": {"density": 2.0, "on": 0.1, "photons": 300, "background": 50, "seed": 1},
        "dense, dim": {"density": 4.0, "on": 0.05, "photons": 150, "background": 80, "seed": 2},
        "d1": {"density": 2.0, "on": 0.1, "photons": 300, "background": 50, "seed": 11},
        "d2": {"density": 4.0, "on": 0.05, "photons": 150, "background": 80, "seed": 12},
        "d3": {"density": 3.0, "on": 0.08, "photons": 200, "background": 60, "seed": 13},
        "d4": {"density": 1.5, "on": 0.15, "photons": 500, "background": 30, "seed": 14},
        "d5": {"density": 5.0, "on": 0.1, "photons": 100, "background": 100, "seed": 15},
        "d6": {"density": 2.5, "on": 0.03, "photons": 250, "background": 40, "seed": 16},
        "d7": {"density": 3.5, "on": 0.12, "photons": 120, "background": 120, "seed": 17},
        "d8": {"density": 1.0, "on": 0.06, "photons": 400, "background": 70, "seed": 18},
    },
    "fresh": {
        "f1": {"density": 2.2, "on": 0.07, "photons": 280, "background": 55, "seed": 101},
        "f2": {"density": 3.8, "on": 0.06, "photons": 170, "background": 90, "seed": 102},
        "f3": {"density": 1.2, "on": 0.12, "photons": 450, "background": 40, "seed": 103},
        "f4": {"density": 4.5, "on": 0.04, "photons": 130, "background": 70, "seed": 104},
        "f5": {"density": 2.8, "on": 0.1, "photons": 220, "background": 100, "seed": 105},
        "f6": {"density": 1.8, "on": 0.2, "photons": 350, "background": 60, "seed": 106},
        "f7": {"density": 3.2, "on": 0.04, "photons": 300, "background": 50, "seed": 107},
        "f8": {"density": 2.0, "on": 0.09, "photons": 110, "background": 110, "seed": 108},
    },
    "fresh2": {
        "g1": {"density": 2.6, "on": 0.08, "photons": 240, "background": 65, "seed": 201},
        "g2": {"density": 4.2, "on": 0.05, "photons": 160, "background": 85, "seed": 202},
        "g3": {"density": 1.4, "on": 0.14, "photons": 420, "background": 45, "seed": 203},
        "g4": {"density": 3.0, "on": 0.035, "photons": 200, "background": 60, "seed": 204},
        "g5": {"density": 2.0, "on": 0.11, "photons": 150, "background": 95, "seed": 205},
        "g6": {"density": 1.6, "on": 0.18, "photons": 320, "background": 50, "seed": 206},
        "g7": {"density": 3.6, "on": 0.07, "photons": 260, "background": 75, "seed": 207},
        "g8": {"density": 2.4, "on": 0.06, "photons": 130, "background": 105, "seed": 208},
    },
    # Drawn with np.random.default_rng(20261130): density U(1, 5) to 0.1, on log-U(0.03, 0.2)
    # to 0.001, photons U(100, 500) to 10, background U(30, 120) to 5; written before any run.
    "fresh3": {
        "h1": {"density": 3.6, "on": 0.055, "photons": 290, "background": 30, "seed": 301},
        "h2": {"density": 2.7, "on": 0.072, "photons": 300, "background": 90, "seed": 302},
        "h3": {"density": 4.2, "on": 0.169, "photons": 460, "background": 85, "seed": 303},
        "h4": {"density": 4.0, "on": 0.062, "photons": 370, "background": 95, "seed": 304},
        "h5": {"density": 2.4, "on": 0.114, "photons": 140, "background": 65, "seed": 305},
        "h6": {"density": 1.2, "on": 0.152, "photons": 330, "background": 50, "seed": 306},
        "h7": {"density": 1.3, "on": 0.041, "photons": 260, "background": 95, "seed": 307},
        "h8": {"density": 4.4, "on": 0.082, "photons": 420, "background": 105, "seed": 308},
    },
    # As fresh3, with np.random.default_rng(20261201): for each stack, in this order,
    # round(rng.uniform(1, 5), 1), round(exp(rng.uniform(log 0.03, log 0.2)), 3),
    # round(rng.uniform(100, 500) / 10) * 10, round(rng.uniform(30, 120) / 5) * 5 (with
    # 20261130 these give fresh3); written before any run, after the candidate floors were
    # declared (benchmarks/runs/2026-11-30-cpu-live-floor.md).
    "fresh4": {
        f"k{i + 1}": dict(zip(("density", "on", "photons", "background", "seed"), row, strict=True))
        for i, row in enumerate(
            [
                (3.7, 0.033, 260, 60, 401),
                (3.5, 0.04, 240, 75, 402),
                (1.8, 0.078, 130, 50, 403),
                (2.2, 0.175, 310, 50, 404),
                (3.1, 0.083, 370, 70, 405),
                (3.9, 0.082, 220, 60, 406),
                (2.7, 0.135, 430, 90, 407),
                (2.9, 0.05, 200, 110, 408),
                (4.5, 0.157, 110, 40, 409),
                (1.7, 0.038, 140, 110, 410),
                (2.6, 0.1, 470, 35, 411),
                (2.8, 0.049, 230, 60, 412),
                (2.7, 0.058, 240, 105, 413),
                (4.2, 0.032, 160, 100, 414),
                (2.7, 0.032, 250, 35, 415),
                (3.1, 0.184, 490, 40, 416),
            ]
        )
    },
}


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


def noise_parts(halves: list[tuple[np.ndarray, int, float, int]], block: int) -> list[float]:
    """The noise parts of the split halves made again from what the session's halves were
    given, each block of frames between two measurements going to half ``start // block % 2``
    (``block`` 0: to the half with fewer frames, as :class:`SplitHalves` does)."""
    from scipy import ndimage

    sums: list[np.ndarray] = []
    counts, previous, before, parts = [0, 0], None, 0, []
    for image, frames, sigma, border in halves:
        added = frames * image - (before * previous if previous is not None else 0)
        side = before // block % 2 if block else int(counts[0] > counts[1])
        sums = sums or [np.zeros_like(image), np.zeros_like(image)]
        sums[side] = sums[side] + added
        counts[side] += frames - before
        previous, before = image, frames
        if min(counts) == 0 or not (math.isfinite(sigma) and sigma >= 0):
            parts.append(math.nan)
            continue
        inner = (slice(border, image.shape[0] - border), slice(border, image.shape[1] - border))
        a, b = (ndimage.gaussian_filter(half, sigma)[inner] for half in sums)
        r = float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
        parts.append(_split_half.noise_part(r, counts[0], counts[1], sum(counts)))
    return parts


def with_halves_block(tracked: dict[str, object], block: int) -> list[live.QualityPoint]:
    """The track's points with their noise parts from halves of ``block``-frame blocks (the
    halves made again as the session makes them must give the session's noise parts)."""
    points, halves = tracked["points"], tracked["halves"]
    again = noise_parts(halves, 0)
    if not np.allclose(again, [p.noise for p in points], rtol=1e-9, equal_nan=True):
        raise RuntimeError("the split halves made again differ from the session's")
    return [
        dataclasses.replace(p, noise=n)
        for p, n in zip(points, noise_parts(halves, block), strict=True)
    ]


def gap_noise_parts(tracked: dict[str, object], gap: int, block: int = 10) -> list[float]:
    """The noise parts at the track's points (multiples of ``block`` frames) of split halves of
    ``block``-frame blocks (block ``j`` to half ``j % 2``) that leave out the first ``gap``
    frames of every block (a guard gap: blinking across a block's border no longer shared);
    the full reconstruction still has all ``n`` frames (Spearman-Brown to ``n``)."""
    from scipy import ndimage

    images, parts = tracked["images"], []
    for image, frames, sigma, border in tracked["halves"]:  # as the session's halves were given
        if image.shape != images[frames].shape or frames % block:
            raise RuntimeError("the halves' crop is not the whole image, or off the grid")
        sums, counts = [np.zeros_like(image), np.zeros_like(image)], [0, 0]
        for j in range(frames // block):
            first, end = j * block + gap, (j + 1) * block
            before = first * np.asarray(images[first], np.float64) if first else 0.0
            sums[j % 2] += end * np.asarray(images[end], np.float64) - before
            counts[j % 2] += end - first
        if min(counts) == 0 or not (math.isfinite(sigma) and sigma >= 0):
            parts.append(math.nan)
            continue
        inner = (slice(border, image.shape[0] - border), slice(border, image.shape[1] - border))
        a, b = (ndimage.gaussian_filter(half, sigma)[inner] for half in sums)
        r = float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
        parts.append(_split_half.noise_part(r, counts[0], counts[1], frames))
    return parts


def with_halves_gap(tracked: dict[str, object], gap: int) -> list[live.QualityPoint]:
    """The track's points with their noise parts from halves with a guard gap of ``gap``
    frames (with 0 they must be the session's, measured every 10 frames)."""
    points = tracked["points"]
    if not np.allclose(
        gap_noise_parts(tracked, 0), [p.noise for p in points], rtol=1e-9, equal_nan=True
    ):
        raise RuntimeError("the split halves made again differ from the session's")
    return [
        dataclasses.replace(p, noise=n)
        for p, n in zip(points, gap_noise_parts(tracked, gap), strict=True)
    ]


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


def report(rows: list[dict[str, object]], how: str) -> None:
    """Print the table of ``rows`` and its summary (``how``: the variant in words)."""
    print(
        "| stack | density /px | on | photons | background | seed | truth | RSP rule | "
        "estimated-error rule |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        p = row["params"]
        cells = [f"{row[label]}{' ✓' if row[f'{label} agrees'] else ''}" for label in RULES]
        print(
            f"| {row['stack']} | {p['density']:g} | {p['on']:g} | {p['photons']:g} | "
            f"{p['background']:g} | {p['seed']:g} | {row['truth']} | " + " | ".join(cells) + " |"
        )
    counts = {label: sum(bool(row[f"{label} agrees"]) for row in rows) for label in RULES}
    print(
        f"\n{how}; within 10 % of the truth: "
        + ", ".join(f"{label} {n}/{len(rows)}" for label, n in counts.items())
    )
    for label in RULES:
        fired = [row for row in rows if row[label] is not None and row["truth"] is not None]
        off = [abs(row[label] - row["truth"]) for row in fired]
        missed = [row for row in fired if not row[f"{label} agrees"]]
        early = sum(row[label] < row["truth"] for row in missed)
        text = f"{len(fired)}/{len(rows)} fired with a truth"
        if off:
            text = f"frames off, mean {np.mean(off):.1f} (max {max(off)}); {text}"
        print(f"{label}: {text}; misses {early} early, {len(missed) - early} late")


FIXED = 60  # a fixed stop at 60 frames: a comparator (a description, not a rule)


def curve_firing(values: list[float], frames: list[int], lookback: int) -> int | None:
    """Where ``values`` (measured at ``frames``) first improved by < 5 % over ``lookback``
    frames: the truth's rule on any error curve."""
    for i in range(len(frames)):
        if looked_back(values[: i + 1], frames[: i + 1], TRUTH_CHANGE, lookback):
            return frames[i]
    return None


def expected_truths(rows: list[dict[str, object]], lookback: int) -> dict[str, object]:
    """A stack's realizations (``rows``, each with its ``frames`` and true ``errors``): the
    expected curve (the mean true error at each measured frame), its truth frame and those of
    the first and second half of the realizations' means. Each row gets the expected truth and
    that of the other realizations' mean (``expected truth, others``)."""
    frames = rows[0]["frames"]
    if any(row["frames"] != frames for row in rows):
        raise RuntimeError("the realizations were measured at different frames")
    errors = np.array([row["errors"] for row in rows])
    mean = [float(e) for e in errors.mean(axis=0)]
    expected = curve_firing(mean, frames, lookback)
    for i, row in enumerate(rows):
        others = list(np.delete(errors, i, axis=0).mean(axis=0)) if len(rows) > 1 else []
        row["expected truth"] = expected
        row["expected truth, others"] = curve_firing(others, frames, lookback) if others else None
    half = len(rows) // 2
    halves = [errors[:half], errors[half:]] if half else []
    return {
        "frames": frames,
        "expected error": mean,
        "expected truth": expected,
        "expected truth, halves": [curve_firing(list(e.mean(0)), frames, lookback) for e in halves],
    }


def tally(pairs: list[tuple[int | None, int | None]]) -> list[str]:
    """Cells for (stop frame, reference frame) pairs: within 10 % out of all, frames off mean
    (max) where both exist, how many have both, and the misses early / late."""
    both = [(f, t) for f, t in pairs if f is not None and t is not None]
    agree = sum(abs(f - t) <= 0.1 * t for f, t in both)
    early = sum(f < t and t - f > 0.1 * t for f, t in both)
    off = [abs(f - t) for f, t in both]
    return [
        f"{agree}/{len(pairs)}",
        f"{np.mean(off):.1f} ({max(off)})" if off else "-",
        f"{len(both)}/{len(pairs)}",
        f"{early} / {len(both) - agree - early}",
    ]


COMPARED = {  # (stop, reference): what the realizations' report compares
    "(a) estimated-error rule vs expected": ("estimated-error rule", "expected truth"),
    "(a) RSP rule vs expected": ("RSP rule", "expected truth"),
    "(b) own truth vs expected": ("truth", "expected truth"),
    "(c) estimated-error rule vs own truth": ("estimated-error rule", "truth"),
    "(c) RSP rule vs own truth": ("RSP rule", "truth"),
    "(d) estimated-error rule vs the others' expected": (
        "estimated-error rule",
        "expected truth, others",
    ),
    "(d) RSP rule vs the others' expected": ("RSP rule", "expected truth, others"),
    "(d) own truth vs the others' expected": ("truth", "expected truth, others"),
    "(f) fixed 60 vs expected": ("fixed", "expected truth"),
    "(f) fixed 60 vs own truth": ("fixed", "truth"),
}


def report_realizations(rows: list[dict[str, object]], stacks: list[dict[str, object]]) -> None:
    """Print the realizations' per-stack table and the summary of :data:`COMPARED` (the
    letters are the declaration's, ``benchmarks/runs/2026-11-30-cpu-live-expected-truth.md``)."""

    def within(rows, stop, ref):
        return sum(
            r[stop] is not None and r[ref] is not None and abs(r[stop] - r[ref]) <= 0.1 * r[ref]
            for r in rows
        )

    def span(values):
        fired = [v for v in values if v is not None]
        text = f"{min(fired)}-{max(fired)}" if fired else "-"
        return text + (f", {len(values) - len(fired)} none" if len(fired) < len(values) else "")

    print(
        "| stack | seed | expected truth | halves' (r 0-3, 4-7) | own truths | estimated-error "
        "rule | RSP rule | (b) own truth vs expected | (a) est. vs expected | (c) est. vs own | "
        "(a) RSP vs expected | (c) RSP vs own |"
    )
    print("|---" * 12 + "|")
    for stack in stacks:
        mine = [r for r in rows if r["stack"] == stack["stack"]]
        n = len(mine)
        cells = [
            f"{within(mine, stop, ref)}/{n}"
            for stop, ref in [
                ("truth", "expected truth"),
                ("estimated-error rule", "expected truth"),
                ("estimated-error rule", "truth"),
                ("RSP rule", "expected truth"),
                ("RSP rule", "truth"),
            ]
        ]
        halves = " / ".join(str(t) for t in stack["expected truth, halves"])
        print(
            f"| {stack['stack']} | {stack['params']['seed']:g} | {stack['expected truth']} | "
            f"{halves} | {span([r['truth'] for r in mine])} | "
            f"{span([r['estimated-error rule'] for r in mine])} | "
            f"{span([r['RSP rule'] for r in mine])} | " + " | ".join(cells) + " |"
        )
    pairs = [s["expected truth, halves"] for s in stacks]
    equal = sum(len(set(h)) == 1 for h in pairs)
    close = sum(None not in h and abs(h[0] - h[1]) <= 0.1 * min(h) for h in pairs)
    print(f"\nthe halves' expected truths: equal on {equal}/{len(stacks)} stacks, ", end="")
    print(f"within 10 % (of the smaller) on {close}/{len(stacks)}")
    print("\n| comparison | within 10 % | frames off, mean (max) | both fired | ", end="")
    print("misses early / late |")
    print("|---|---|---|---|---|")
    for label, (stop, ref) in COMPARED.items():
        pairs = [(r[stop] if stop != "fixed" else FIXED, r[ref]) for r in rows]
        print(f"| {label} | " + " | ".join(tally(pairs)) + " |")
    # (g): the expected error left on the table, E(stop) - E(150), over realizations that fired
    curves = {s["stack"]: dict(zip(s["frames"], s["expected error"], strict=True)) for s in stacks}
    left = []
    for stop in ("estimated-error rule", "RSP rule", "truth", "expected truth", "fixed"):
        gaps = [
            curves[r["stack"]][frames] - curves[r["stack"]][max(curves[r["stack"]])]
            for r in rows
            if (frames := r[stop] if stop != "fixed" else FIXED) is not None
        ]
        left.append(f"{stop} {np.mean(gaps):.4f} ({len(gaps)})")
    final = np.mean([s["expected error"][-1] for s in stacks])
    print(f"\n(g) E(stop) - E(150), mean (realizations): {', '.join(left)}; E(150) {final:.4f}")


def realizations(args: argparse.Namespace) -> None:
    """``--realizations R``: R acquisitions of each stack of ``--set`` (blink seeds
    ``100 x seed + r``), a live session each; the report and ``--json``."""
    rows: list[dict[str, object]] = []
    stacks: list[dict[str, object]] = []
    for name, params in SETS[args.set].items():
        mine = []
        for r in range(args.realizations):
            started = time.perf_counter()
            blink = 100 * int(params["seed"]) + r
            tracked = track_stack(params, args.measure_every, blink_seed=blink)
            row: dict[str, object] = {"stack": name, "params": params, "realization": r}
            row |= {"blink_seed": blink, "measure_every": args.measure_every}
            row |= {"lookback": args.lookback}
            row |= judge(tracked["points"], tracked["errors"], args.lookback, tracked["extra"])
            row |= {"frames": [p.frames for p in tracked["points"]], "errors": tracked["errors"]}
            mine.append(row)
            seconds = round(time.perf_counter() - started, 1)
            print(f"# {name} r{r} (blink seed {blink}): {seconds} s", file=sys.stderr)
        stacks.append({"stack": name, "params": params} | expected_truths(mine, args.lookback))
        rows += mine
    print(
        f"{args.realizations} realizations a stack, a measurement every {args.measure_every} "
        f"frames, looking back {args.lookback}\n"
    )
    report_realizations(rows, stacks)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"realizations": rows, "stacks": stacks}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(SETS), default="fresh")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--measure-every", type=int, default=10, help="frames between measurements")
    parser.add_argument("--lookback", type=int, default=30, help="frames the rules look back")
    parser.add_argument(
        "--halves-block",
        type=int,
        default=0,
        help="split halves of this many frames a block (0: the session's, a block a measurement)",
    )
    parser.add_argument(
        "--halves-gap",
        type=int,
        nargs="+",
        default=None,
        help="guard gaps G (frames left out of both halves after each 10-frame block's start), "
        "judged on the 10-frame grid; needs --measure-every dividing each G",
    )
    parser.add_argument(
        "--realizations",
        type=int,
        default=0,
        help="R > 0: R acquisitions of each stack (blink_seed 100 x seed + r), each rule judged "
        "against the expected (mean) true error's frame too",
    )
    args = parser.parse_args()
    if args.realizations:
        if args.halves_gap or args.halves_block:
            parser.error("--realizations takes the session's own split halves")
        realizations(args)
        return
    gaps = args.halves_gap
    if gaps and (args.halves_block or any(g % args.measure_every or not 0 <= g < 10 for g in gaps)):
        parser.error("--halves-gap needs 0 <= G < 10, G a multiple of --measure-every, no block")
    variants: dict[object, list[dict[str, object]]] = {g: [] for g in gaps or [None]}
    for name, params in SETS[args.set].items():
        started = time.perf_counter()
        tracked = track_stack(params, args.measure_every, grid=10 if gaps else 0)
        for variant, rows in variants.items():
            points = tracked["points"]
            if variant is not None:
                points = with_halves_gap(tracked, variant)
            elif args.halves_block:
                points = with_halves_block(tracked, args.halves_block)
            row: dict[str, object] = {"stack": name, "params": params}
            row |= {"measure_every": args.measure_every, "lookback": args.lookback}
            row["halves_block"] = 10 if gaps else args.halves_block or args.measure_every
            row["halves_gap"] = variant
            row |= judge(points, tracked["errors"], args.lookback, tracked["extra"])
            if tracked["fine"]:
                fine = fine_truth_firing(tracked["fine"], args.lookback)
                row["truth every frame"] = fine
                for label in RULES:
                    frames = row[label]
                    row[f"{label} agrees every frame"] = (
                        fine is not None and frames is not None and abs(frames - fine) <= 0.1 * fine
                    )
            rows.append(row)
        seconds = round(time.perf_counter() - started, 1)
        print(f"# {name}: {seconds} s", file=sys.stderr)
    for variant, rows in variants.items():
        if variant is None:
            how = (
                f"a measurement every {args.measure_every} frames, looking back {args.lookback}, "
                f"split halves of {args.halves_block or args.measure_every}-frame blocks"
            )
        else:
            print(f"\n## split halves of 10-frame blocks, guard gap {variant}\n")
            how = (
                f"judged every 10 frames, looking back {args.lookback}, split halves of "
                f"10-frame blocks less their first {variant} frames"
            )
        report(rows, how)
        if rows and "truth every frame" in rows[0]:
            print(
                "the truth's frame with its error known at every frame (a description): "
                + ", ".join(f"{row['stack']} {row['truth every frame']}" for row in rows)
            )
            print(
                "within 10 % of it: "
                + ", ".join(
                    f"{label} {sum(bool(row[f'{label} agrees every frame']) for row in rows)}"
                    f"/{len(rows)}"
                    for label in RULES
                )
            )
        if variant:  # the noise parts against the gapless halves', from 20 frames
            ratios = [
                a["noise"] / b["noise"]
                for row, base in zip(rows, variants.get(0, []), strict=False)
                for a, b in zip(row["track"], base["track"], strict=True)
                if a["frames"] >= 20 and b["noise"] > 0 and math.isfinite(a["noise"])
            ]
            if ratios:
                print(f"noise part / gap 0's (from 20 frames): median {np.median(ratios):.3f}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([r for rows in variants.values() for r in rows], indent=1))


if __name__ == "__main__":
    main()

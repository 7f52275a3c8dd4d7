"""Drift trace ends and block uncertainties: a study on simulated blinking stacks (issue 19).

``estimate_drift`` measures the shift of blocks of ``time_averaging`` frames, places it at each
block's centre frame and interpolates; the frames before the first centre and after the last
are extrapolated with a slope chosen at each end. This script compares end rules on the same
block measurements (the rule only changes what is done with them), and checks the blocks'
reported uncertainty against their actual errors.

Cases (seeds fixed): drift shapes linear, quadratic, exponential settling and the drift tests'
oscillation plus trend (``tests/compute/esrrf_drift_sim.py``), each ~3 px over the stack plus
0.03 px per-frame jitter, in 3, 8 and 24 blocks of 40 frames; 96 x 96 px, 170 emitters (the
simulator's density), its blinking (an on emitter switches off with p 0.5 a frame, an off one
on with 0.15); references first, previous and mean; and the workflow figure's simulation
(``examples/esrrf_workflow.py``, channel 0, blocks of 30, seeds 0-11). Errors are against
the true drift (jitter included, as the tests measure), relative to frame 0 as the trace is:
"ends" are the frames outside the first and last block centres, "whole" every frame.

End rules (the slope at the end centre, the trace then straight; inside, a cubic spline):

- ``old``: the last two blocks' secant (before 9b75a97; with linear interpolation inside for
  fewer than 4 blocks);
- ``cur``: a least-squares parabola's slope through the nearest k = clip(B // 2, 3, 5)
  blocks where its curvature exceeds twice its standard error, else the line's (9b75a97), on
  the even/odd-frame uncertainties it shipped with;
- ``cur+u``: the same on the calibrated uncertainties;
- ``line``: always the least-squares line through the k blocks;
- ``parab``: always the parabola's slope;
- ``shrink``: the line's slope plus the parabola's correction scaled by max(0, 1 - (se/c)^2)
  (positive-part James-Stein shrinkage of the curvature c towards 0);
- ``cv``: line or parabola, whichever predicts the end block better from the k blocks after it
  (leave-the-end-block-out);
- ``parab3``: always the slope of the parabola through the nearest 3 blocks;
- ``cvk``: of the secant, the line, the 3-block and the k-block parabola, the one that best
  extrapolates one block back from the blocks after it, over 3 such shifts of the end;
- ``lepski``: Lepski's choice along line (k), parabola (k), parabola (k - 1) ... parabola (3):
  the steadiest estimate that agrees with every more local one within 2 standard errors.

``shipped`` checks that the package's own ``_interpolate`` gives ``cur+u``'s trace.

Run (CPU, one thread, 1-3 minutes)::

    python benchmarks/drift_ends.py              # 6 seeds a case, 12 for the workflow
    python benchmarks/drift_ends.py --seeds 3    # quicker

Recorded 2026-11-26, and what it shows: benchmarks/README.md, "drift_ends.py". In short, no end
rule is better on every case (the shipped one is within 5-7 % of each case's best on average),
the old secant is 2-5 times worse on curved drifts in 3 blocks, and the calibrated block
uncertainties hold 64-83 % of the blocks' errors within 1 sigma with ``reference="first"``
(even/odd halves: 30-50 %).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.interpolate import CubicSpline

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "compute"))
sys.path.insert(0, str(ROOT / "examples"))

import esrrf_workflow  # noqa: E402
from esrrf_drift_sim import blinking_drifting_stack  # noqa: E402

from napari_gpuscope.compute.esrrf import estimate_drift  # noqa: E402
from napari_gpuscope.compute.esrrf._drift_correlate import _Correlator  # noqa: E402
from napari_gpuscope.compute.esrrf._drift_trace import _interpolate  # noqa: E402

BLOCK = 40
JITTER = 0.03
SHAPES = {
    "linear": lambda u: np.column_stack([2.5 * u, -1.5 * u]),
    "quadratic": lambda u: np.column_stack([3.0 * u**2, -2.0 * u**2 + 0.8 * u]),
    "settling": lambda u: 3.0 * (1 - np.exp(-u / 0.3))[:, None] * np.array([1.0, -0.6]),
    "oscillating": lambda u: np.column_stack(
        [2.0 * np.sin(2 * np.pi * 0.6 * u) + 1.2 * u, -3.5 * u + u**2]
    ),
}
REFERENCES = ("first", "previous", "mean")


# ------------------------------------------------------------------------------- end rules
def _fits(offsets, values, errors, k=None):
    """Parabola and line through the nearest k blocks (default clip(B // 2, 3, 5)):
    (slope_parabola, slope_line, curvature, its standard error, k), per axis."""
    k = int(np.clip(len(values) // 2, 3, 5)) if k is None else min(k, len(values))
    scale = float(abs(offsets[k - 1]))
    x = offsets[:k] / scale
    design = np.column_stack([x**2, x, np.ones(k)])
    (curvature, slope, _), *_ = np.linalg.lstsq(design, values[:k], rcond=None)
    line = np.linalg.lstsq(design[:, 1:], values[:k], rcond=None)[0][0]
    sigma = np.sqrt(np.nanmean(errors[:k] ** 2, axis=0))
    spread = sigma * math.sqrt(np.linalg.inv(design.T @ design)[0, 0])
    return slope / scale, line / scale, curvature, spread, k


def rule_old(offsets, values, errors):
    return (values[1] - values[0]) / (offsets[1] - offsets[0])


def rule_significant(offsets, values, errors, z=2.0):
    if len(values) < 3:
        return rule_old(offsets, values, errors)
    parabola, line, curvature, spread, _ = _fits(offsets, values, errors)
    curved = ~(np.abs(curvature) <= z * spread)
    return np.where(curved, parabola, line)


def rule_line(offsets, values, errors):
    if len(values) < 3:
        return rule_old(offsets, values, errors)
    return _fits(offsets, values, errors)[1]


def rule_parabola(offsets, values, errors):
    if len(values) < 3:
        return rule_old(offsets, values, errors)
    return _fits(offsets, values, errors)[0]


def rule_shrink(offsets, values, errors):
    if len(values) < 3:
        return rule_old(offsets, values, errors)
    parabola, line, curvature, spread, _ = _fits(offsets, values, errors)
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.clip(1 - (spread / curvature) ** 2, 0, 1)
    keep = np.where(np.isfinite(keep), keep, 1.0)
    return line + keep * (parabola - line)


def rule_cv(offsets, values, errors):
    """Whichever of line and parabola, fitted to the k blocks after the end block, predicts
    the end block better."""
    if len(values) < 4:
        return rule_significant(offsets, values, errors)
    k = int(np.clip(len(values) // 2, 3, 5))
    x, y = offsets[1 : k + 1], values[1 : k + 1]
    miss = []
    for degree in (1, 2):
        if len(x) <= degree:
            miss.append(np.full(2, np.inf))
            continue
        miss.append(np.abs(np.polyval(np.polyfit(x, y, degree), 0.0) - values[0]))
    parabola, line, *_ = _fits(offsets, values, errors)
    return np.where(miss[1] < miss[0], parabola, line)


def rule_parabola3(offsets, values, errors):
    """The slope at the end of the parabola through the 3 nearest blocks."""
    if len(values) < 3:
        return rule_old(offsets, values, errors)
    return _fits(offsets, values, errors, 3)[0]


def _slope_weights(offsets, k, degree):
    """Weights w with slope at 0 = w @ values[:k] of the least-squares polynomial."""
    x = offsets[:k]
    design = np.column_stack([x**p for p in range(degree + 1)])
    return np.linalg.pinv(design)[1]


def rule_lepski(offsets, values, errors, z=2.0):
    """Lepski's choice: estimators from the steadiest (the line through the nearest k) to
    the most local (the parabola through the nearest 3); the first that agrees with every
    more local one within z standard errors of their difference."""
    if len(values) < 3:
        return rule_old(offsets, values, errors)
    k = int(np.clip(len(values) // 2, 3, 5))
    chain = [(k, 1), (k, 2)] + [(m, 2) for m in range(k - 1, 2, -1)]
    weights = []
    for m, degree in chain:
        w = np.zeros(len(values))
        w[:m] = _slope_weights(offsets, m, degree)
        weights.append(w)
    sigma = np.where(np.isfinite(errors), errors, np.nanmean(errors, axis=0))
    out = np.empty(2)
    for axis in range(2):
        slopes = [w @ values[:, axis] for w in weights]
        chosen = slopes[-1]
        for i in range(len(chain)):
            agree = all(
                abs(slopes[i] - slopes[j])
                <= z * math.sqrt(np.sum((weights[i] - weights[j]) ** 2 * sigma[:, axis] ** 2))
                for j in range(i + 1, len(chain))
            )
            if agree:
                chosen = slopes[i]
                break
        out[axis] = chosen
    return out


def _candidates(offsets, values, errors):
    """End slopes of the secant, the line through the nearest k, the parabola through the
    nearest 3 and through the nearest k blocks."""
    slopes = [rule_old(offsets, values, errors)]
    if len(values) >= 3:
        parabola, line, *_ = _fits(offsets, values, errors)
        slopes += [line, _fits(offsets, values, errors, 3)[0], parabola]
    return slopes


def rule_cv_folds(offsets, values, errors, folds=3):
    """Of the candidates, the one that best extrapolates one block back from the blocks
    after it, over up to ``folds`` such shifts of the end (the squared misses summed)."""
    if len(values) < 5:
        return rule_significant(offsets, values, errors)
    count = len(_candidates(offsets, values, errors))
    score = np.zeros((count, 2))
    for j in range(1, min(folds, len(values) - 4) + 1):
        sub = offsets[j:] - offsets[j]
        for c, slope in enumerate(_candidates(sub, values[j:], errors[j:])):
            guess = values[j] + slope * (offsets[j - 1] - offsets[j])
            score[c] += (guess - values[j - 1]) ** 2
    best = np.argmin(score, axis=0)
    slopes = np.array(_candidates(offsets, values, errors))
    return slopes[best, [0, 1]]


RULES = {
    "old": rule_old,
    "cur": rule_significant,
    "cur+u": rule_significant,
    "line": rule_line,
    "parab": rule_parabola,
    "shrink": rule_shrink,
    "cv": rule_cv,
    "parab3": rule_parabola3,
    "cvk": rule_cv_folds,
    "lepski": rule_lepski,
}


def trace(rule, centres, values, errors, n_frames, inside_old=False):
    """Per-frame shifts relative to frame 0 (the estimator's interpolation, with ``rule`` at
    the ends)."""
    frames = np.arange(n_frames, dtype=np.float64)
    out = np.empty((n_frames, 2))
    inside = (frames >= centres[0]) & (frames <= centres[-1])
    if len(centres) >= (4 if inside_old else 3):
        out[inside] = CubicSpline(centres, values, axis=0)(frames[inside])
    else:
        for axis in range(2):
            out[inside, axis] = np.interp(frames[inside], centres, values[:, axis])
    for mask, order in (
        (frames < centres[0], slice(None)),
        (frames > centres[-1], slice(None, None, -1)),
    ):
        if mask.any():
            ends, at_end = centres[order], values[order]
            slope = rule(ends - ends[0], at_end, errors[order])
            out[mask] = at_end[0] + (frames[mask, None] - ends[0]) * slope
    return out - out[0]


# ------------------------------------------------------------------------------ simulation
def simulated(shape: str, blocks: int, seed: int):
    n = blocks * BLOCK
    u = np.arange(n) / (n - 1)
    smooth = SHAPES[shape](u)
    rng = np.random.default_rng(1000 * seed + blocks)
    drawn = smooth + rng.normal(0.0, JITTER, smooth.shape)
    truth = drawn - drawn[0]
    stack, _ = blinking_drifting_stack(truth, shape=(96, 96), n_emitters=170, seed=seed + 7)
    return stack, truth, smooth, BLOCK


def workflow(seed: int):
    channels, _, truth = esrrf_workflow.simulate(seed)
    u = np.arange(len(truth)) / len(truth)  # the example's smooth drift, without its jitter
    smooth = 1.5 * np.column_stack([2.0 * np.sin(2 * np.pi * 0.6 * u) + 1.2 * u, -3.5 * u + u**2])
    return channels[0], truth, smooth, 30


def even_odd_uncertainty(stack, blocks):
    """The shipped (9b75a97) estimate: |shift(even frames) - shift(odd frames)| / 2."""
    correlator = _Correlator(*stack.shape[1:], torch.device("cpu"))
    out = np.full((len(blocks), 2), np.nan)
    for k, (a, b) in enumerate(blocks):
        frames = torch.from_numpy(stack[a:b].astype(np.float64))
        even, odd = frames[0::2].mean(0), frames[1::2].mean(0)
        between, _ = correlator.measure(even, correlator.spectrum(odd), None)
        out[k] = np.abs(between) / 2
    return out


# ------------------------------------------------------------------------------ measuring
def propagated(centres, values, errors, n_frames):
    """Per-frame standard error of the shipped trace relative to frame 0 from the blocks'
    uncertainties, through the interpolation (linear in the block values for a given choice
    of end slopes: its Jacobian by finite differences)."""
    base = _interpolate(centres, values, n_frames, 0.0, errors)
    variance = np.zeros((n_frames, 2))
    for k in range(len(values)):
        moved = values.copy()
        moved[k] += 1e-6
        column = (_interpolate(centres, moved, n_frames, 0.0, errors) - base) / 1e-6
        variance += ((column - column[0]) * errors[k]) ** 2
    return np.sqrt(variance)


def measure(stack, truth, averaging, reference, old_errors, smooth):
    result = estimate_drift(stack, reference=reference, time_averaging=averaging, device="cpu")
    blocks = result.block_frames
    centres = np.array([(a + b - 1) / 2 for a, b in blocks])
    values = result.block_shifts
    n = len(truth)
    ends = (np.arange(n) < centres[0]) | (np.arange(n) > centres[-1])
    row = {}
    for name, rule in RULES.items():
        errors = old_errors if name == "cur" else result.uncertainty
        shifts = trace(rule, centres, values, errors, n, inside_old=name == "old")
        error = np.hypot(*(shifts - truth).T)
        row[name] = (
            float(np.sqrt(np.mean(error**2))),
            float(np.sqrt(np.mean(error[ends] ** 2))),
            float(error[ends].max()),
        )
    inner = ~ends
    for name in ("old", "cur+u"):
        errors = result.uncertainty
        shifts = trace(RULES[name], centres, values, errors, n, inside_old=name == "old")
        row[f"offset {name}"] = (shifts - truth)[inner].mean(0)
    # Per frame: the propagated block uncertainty against the error from the smooth drift
    # (the jitter, which no block trace follows, left out; frame 0's too).
    sigma = propagated(centres, values, result.uncertainty, n)[1:]
    off = (result.shifts - (smooth - smooth[0]))[1:]
    row["frames"] = (float(np.mean(np.abs(off) <= sigma)), off, sigma)
    shipped = _interpolate(centres, values, n, 0.0, result.uncertainty)
    row["shipped"] = float(np.abs(shipped - shipped[0] - result.shifts).max())
    # Block errors with their common offset removed (that offset is frame 0's, not theirs).
    block_truth = np.array([truth[a:b].mean(0) for a, b in blocks])
    scatter = values - block_truth
    scatter = (scatter - scatter.mean(0)) * math.sqrt(len(blocks) / (len(blocks) - 1))
    row["blocks"] = (scatter, result.uncertainty, old_errors)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--workflow-seeds", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    results: dict[tuple[str, str, str], list[dict]] = {}
    cases = [(s, b) for s in SHAPES for b in (3, 8, 24)]
    for (shape, blocks), seed in ((c, s) for c in cases for s in range(args.seeds)):
        stack, truth, smooth, averaging = simulated(shape, blocks, seed)
        count = len(stack) // averaging
        old = even_odd_uncertainty(
            stack, [(k * averaging, (k + 1) * averaging) for k in range(count)]
        )
        for reference in REFERENCES:
            key = (f"{shape} {blocks}", reference)
            results.setdefault(key, []).append(
                measure(stack, truth, averaging, reference, old, smooth)
            )
    for seed in range(args.workflow_seeds):
        stack, truth, smooth, averaging = workflow(seed)
        count = len(stack) // averaging
        old = even_odd_uncertainty(
            stack, [(k * averaging, (k + 1) * averaging) for k in range(count)]
        )
        for reference in REFERENCES:
            key = ("workflow 10", reference)
            results.setdefault(key, []).append(
                measure(stack, truth, averaging, reference, old, smooth)
            )
    report(results)
    print(f"\n{time.perf_counter() - start:.0f} s")


def report(results) -> None:
    names = list(RULES)
    print("Ends RMS error (px, mean over seeds) [whole-trace RMS in the second table]")
    for column, title in ((1, "ends RMS"), (0, "whole RMS"), (2, "ends max")):
        print(f"\n{title}: case / reference | " + " | ".join(names))
        for (case, reference), rows in results.items():
            table = np.array([[r[name][column] for name in names] for r in rows])
            mean = table.mean(0)
            print(f"{case:14s} {reference:8s} | " + " | ".join(f"{m:.3f}" for m in mean))
    for column, title in ((1, "ends RMS"), (0, "whole RMS")):
        ratios = []
        for rows in results.values():
            mean = np.array([[r[name][column] for name in names] for r in rows]).mean(0)
            ratios.append(mean / mean.min())
        ratios = np.array(ratios)
        print(f"\n{title} / the case's best: mean | worst")
        for name, column_ratios in zip(names, ratios.T, strict=True):
            print(f"  {name:8s} {column_ratios.mean():.3f} | {column_ratios.max():.3f}")
    print("\nWhole-trace RMS, paired with cur+u over seeds: mean difference (px) / its standard")
    print("error; * where beyond 2 standard errors (the rule differs by more than noise)")
    others = [name for name in names if name not in ("cur+u", "line")]
    print(f"  {'case':23s}" + "".join(f"{name:>15s}" for name in others))
    for (case, reference), rows in results.items():
        base = np.array([r["cur+u"][0] for r in rows])
        cells = []
        for name in others:
            diff = np.array([r[name][0] for r in rows]) - base
            se = diff.std(ddof=1) / math.sqrt(len(diff)) if len(diff) > 1 else float("nan")
            flag = "*" if abs(diff.mean()) > 2 * se else " "
            cells.append(f"{diff.mean():+.3f}/{se:.3f}{flag}")
        print(f"  {case:14s} {reference:8s}" + "".join(f"{c:>15s}" for c in cells))
    print("\nConstant offset of the trace inside the block centres (px, RMS over seeds and axes)")
    for (case, reference), rows in results.items():
        if reference != "first":
            continue
        text = " | ".join(
            f"{name} {np.sqrt(np.mean([r[f'offset {name}'] ** 2 for r in rows])):.3f}"
            for name in ("old", "cur+u")
        )
        print(f"  {case:14s} {text}")
    print("\nPer frame (frame 0 excluded): the block uncertainties propagated through the")
    print("interpolation against the error from the smooth drift: RMS error / RMS sigma, within")
    for (case, reference), rows in results.items():
        off = np.concatenate([r["frames"][1] for r in rows])
        sigma = np.concatenate([r["frames"][2] for r in rows])
        print(
            f"  {case:14s} {reference:8s} {np.sqrt(np.mean(off**2)):.3f} / "
            f"{np.sqrt(np.mean(sigma**2)):.3f}, {np.mean(np.abs(off) <= sigma):.0%}"
        )
    print(
        "\nShipped trace equals the study's rule to",
        max(r["shipped"] for rows in results.values() for r in rows),
    )
    print("\nBlock uncertainty: actual scatter RMS / reported RMS, coverage of |error| <= 1 sigma")
    for (case, reference), rows in results.items():
        scatter = np.concatenate([r["blocks"][0] for r in rows])
        new = np.concatenate([r["blocks"][1] for r in rows])
        old = np.concatenate([r["blocks"][2] for r in rows])
        actual = float(np.sqrt(np.mean(scatter**2)))
        old_rms, new_rms = np.sqrt(np.mean(old**2)), np.sqrt(np.nanmean(new**2))
        print(
            f"{case:14s} {reference:8s} actual {actual:.3f} | even/odd {old_rms:.3f}"
            f" covers {np.mean(np.abs(scatter) <= old):.0%} | halves {new_rms:.3f}"
            f" covers {np.mean(np.abs(scatter) <= new):.0%}"
        )


if __name__ == "__main__":
    main()

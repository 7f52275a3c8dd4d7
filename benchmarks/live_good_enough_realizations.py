"""``benchmarks/live_good_enough.py --realizations R`` (issue 28 item 5): R acquisitions of
each stack's sample, each rule judged against the truth's frame of the expected curve as well
as the realization's own (``runs/2026-11-30-cpu-live-expected-truth.md``).

Writes the per-stack table and the summary of :data:`COMPARED` (stdout) and ``--json``:
``{"realizations": rows, "stacks": stacks}``, as ``benchmarks/live_rule_parts.py`` reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from live_good_enough_sets import SETS
from live_good_enough_track import TRUTH_CHANGE, judge, looked_back, track_stack

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

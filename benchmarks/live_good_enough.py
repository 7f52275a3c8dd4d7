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
``--set fresh3``: eight stacks more, drawn (``live_good_enough_sets.py``) for judging the guard
gap; ``--set fresh4``: sixteen more, drawn alike for judging the floor's candidates. Each point
of the ``--json`` track also records what else a session has (``live_good_enough_track``'s
``recorded``: the RSP's blur, the halves' correlation, image statistics).

``--realizations R``: R acquisitions of each stack's sample (``simulate``'s ``blink_seed``
``100 x seed + r``: the same emitters, other blinking and shot noise), a live session each; each
rule's frame is judged against the truth's frame of the EXPECTED curve (the mean true error over
the R at each measured frame) as well as the realization's own
(``runs/2026-11-30-cpu-live-expected-truth.md``).

The parts beside this script: ``live_good_enough_sets.py`` (the stacks),
``live_good_enough_track.py`` (a stack through a live session, and where the truth and each
rule stop on its track), ``live_good_enough_halves.py`` (``--halves-block``, ``--halves-gap``:
split halves made again) and ``live_good_enough_realizations.py`` (``--realizations``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from live_good_enough_halves import with_halves_block, with_halves_gap
from live_good_enough_realizations import realizations
from live_good_enough_sets import SETS
from live_good_enough_track import RULES, fine_truth_firing, judge, track_stack


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

"""Which part of the stop rule's estimated error keeps it from following the sample (issue 28
item 5; a diagnostic on ``live_good_enough.py --realizations`` JSONs).

The shipped rule reads, at each measurement, ``1 - (1 - F)(1 - noise)``, the newest point's floor
``F`` (7 x the RSP error) at both ends of the 30-frame window, and fires at < 5 % improvement.
Here each part is replaced in turn by what the truth says: the floor ``F_true``, the median over
n >= 30 of ``1 - (1 - e_true) / (1 - noise)`` (this acquisition's), and the noise part
``1 - (1 - e_true) / (1 - F_true)``. Prints, per variant, how often the rule stops within 10 %
of the sample's expected frame, and whether its mean frame per sample follows that frame::

    python benchmarks/live_good_enough.py --set fresh4 --realizations 8 --json f4.json
    python benchmarks/live_rule_parts.py f4.json [more.json ...]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np

FLOOR_PER_RSP = 7.0
CHANGE = 0.05
LOOKBACK = 30


def first_firing(floors: np.ndarray, noise: np.ndarray, frames: list[int]) -> int | None:
    """Where the rule fires, the floor of point i used at both ends of its window."""
    for i, now in enumerate(frames):
        floor = floors[i]
        if not np.isfinite(floor) or floor >= 1:
            continue  # no estimate (as the shipped rule above an RSP error of 1/7)
        before = [j for j in range(i + 1) if frames[j] <= now - LOOKBACK]
        if not before:
            continue
        old = 1 - (1 - floor) * (1 - noise[before[-1]])
        new = 1 - (1 - floor) * (1 - noise[i])
        if np.isfinite(old) and np.isfinite(new) and old > 0 and (old - new) / old < CHANGE:
            return now
    return None


def variants(realization: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The floors and noise parts of each variant for one acquisition."""
    frames = np.array(realization["frames"])
    error = np.array(realization["errors"], float)
    rsp = np.array([p["rsp_error"] for p in realization["track"]], float)
    noise = np.array([p["noise"] for p in realization["track"]], float)
    with np.errstate(invalid="ignore", divide="ignore"):
        floor_true = float(np.nanmedian((1 - (1 - error) / (1 - noise))[frames >= 30]))
    noise_true = 1 - (1 - error) / (1 - floor_true)
    constant = np.full(len(frames), floor_true)
    return {
        "7 x RSP, split halves (shipped)": (FLOOR_PER_RSP * rsp, noise),
        "the truth's floor, split halves": (constant, noise),
        "7 x RSP, the truth's noise part": (FLOOR_PER_RSP * rsp, noise_true),
        "both the truth's (own error)": (constant, noise_true),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", help="live_good_enough.py --realizations JSONs")
    args = parser.parse_args()
    firings: dict[str, list[tuple[str, int | None, int]]] = defaultdict(list)
    for path in args.json:
        with open(path) as handle:
            data = json.load(handle)
        expected = {s["stack"]: s["expected truth"] for s in data["stacks"]}
        for realization in data["realizations"]:
            target = expected[realization["stack"]]
            for name, (floors, noise) in variants(realization).items():
                frame = first_firing(floors, noise, realization["frames"])
                firings[name].append((realization["stack"], frame, target))
    print("| floor, noise part | within 10 % | fired | frames off | per-sample corr | mean frame |")
    print("|---|---|---|---|---|---|")
    for name, items in firings.items():
        fired = [(s, f, e) for s, f, e in items if f is not None and e is not None]
        agree = sum(abs(f - e) <= 0.1 * e for _, f, e in fired)
        off = np.mean([abs(f - e) for _, f, e in fired])
        frames_of: dict[str, list[int]] = defaultdict(list)
        target_of: dict[str, int] = {}
        for stack, frame, target in fired:
            frames_of[stack].append(frame)
            target_of[stack] = target
        means = [np.mean(v) for v in frames_of.values()]
        corr = np.corrcoef(means, [target_of[s] for s in frames_of])[0, 1]
        mean_frame = np.mean([f for _, f, _ in fired])
        print(
            f"| {name} | {agree}/{len(items)} | {len(fired)} | {off:.1f} | {corr:.2f} | "
            f"{mean_frame:.0f} |"
        )


if __name__ == "__main__":
    main()

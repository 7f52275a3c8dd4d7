"""The automatic drift block length (issue 27 item 3) against every fixed length, on simulated
blinking stacks with a known drift.

Cases: the issue's four kinds of drift (tests/compute/test_esrrf_drift_auto.py's ``drifts``:
linear, settling (0.6 px in the first 10 % of the frames, 3 px in all), oscillating plus trend
(the drift tests' ``true_drift``), still; each with 0.03 px per-frame jitter), at 100 to
2,000 frames of 48 x 48 px with 60 blinking emitters (the tests' sample,
tests/compute/esrrf_drift_sim.py). For each case and stack size: the RMS error against the
true drift (px, over frames and axes) of the automatic choice and of every fixed length the
choice considers, averaged over ``--seeds`` stacks (blinking and noise).

Run (CPU; ~10-20 minutes on one core of a shared 2-core machine for the default sweep)::

    python benchmarks/drift_block_length.py                      # table + docs figure
    python benchmarks/drift_block_length.py --frames 200 --seeds 1

The figure (docs/images/esrrf_drift_block_length.png) plots the error against the block
length for each case at ``--figure-frames`` frames, the automatic choice marked.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "compute"))

from esrrf_drift_sim import blinking_drifting_stack  # noqa: E402
from test_esrrf_drift_auto import drifts  # noqa: E402

from napari_gpuscope.compute.esrrf import estimate_drift  # noqa: E402
from napari_gpuscope.compute.esrrf._drift_blocks import auto_lengths  # noqa: E402


def rms(shifts: np.ndarray, truth: np.ndarray) -> float:
    return float(np.sqrt(np.mean((shifts - truth) ** 2)))


def run_case(truth: np.ndarray, seeds: int, shape: int, emitters: int) -> dict:
    n = len(truth)
    auto, chosen, fixed, seconds = [], [], {}, []
    for seed in range(1, seeds + 1):
        stack, _ = blinking_drifting_stack(
            truth, shape=(shape, shape), n_emitters=emitters, seed=seed
        )
        start = time.perf_counter()
        result = estimate_drift(stack, time_averaging=None, device="cpu")
        seconds.append(time.perf_counter() - start)
        auto.append(rms(result.shifts, truth))
        chosen.append(result.time_averaging_chosen)
        for length in auto_lengths(n):
            try:
                trace = estimate_drift(stack, time_averaging=length, device="cpu")
                error = rms(trace.shifts, truth)
            except ValueError:  # too few blocks with structure
                error = np.inf
            fixed.setdefault(length, []).append(error)
    fixed_mean = {k: float(np.mean(v)) for k, v in fixed.items()}
    return {
        "auto": float(np.mean(auto)),
        "chosen": chosen,
        "fixed": fixed_mean,
        "seconds": float(np.mean(seconds)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, nargs="+", default=[100, 200, 500, 1000, 2000])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--shape", type=int, default=48)
    parser.add_argument("--emitters", type=int, default=60)
    parser.add_argument("--figure-frames", type=int, default=200)
    parser.add_argument(
        "--figure", type=Path, default=ROOT / "docs" / "images" / "esrrf_drift_block_length.png"
    )
    args = parser.parse_args()
    results = {}
    print(
        "| frames | drift | auto: lengths chosen | auto RMS (px) | best fixed (px) | "
        "auto / best | auto <= 0.15 where best <= 0.1 | auto time (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in args.frames:
        for kind, truth in drifts(n).items():
            r = run_case(truth, args.seeds, args.shape, args.emitters)
            results[n, kind] = r
            best_length = min(r["fixed"], key=r["fixed"].get)
            best = r["fixed"][best_length]
            bound = "yes" if best > 0.1 or r["auto"] <= 0.15 else "**no**"
            ratio = r["auto"] / best
            flag = "" if ratio <= 1.2 else " **(> 1.2)**"
            print(
                f"| {n} | {kind} | {', '.join(map(str, r['chosen']))} | {r['auto']:.3f} | "
                f"{best:.3f} ({best_length}) | {ratio:.2f}{flag} | {bound} | "
                f"{r['seconds']:.1f} |",
                flush=True,
            )
    if args.figure_frames in args.frames:
        figure(results, args.figure_frames, args.figure)


def figure(results: dict, n: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [kind for (frames, kind) in results if frames == n]
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.2 * len(kinds), 3.0), sharey=True)
    for ax, kind in zip(np.atleast_1d(axes), kinds, strict=True):
        r = results[n, kind]
        lengths = sorted(r["fixed"])
        errors = [r["fixed"][k] for k in lengths]
        ax.plot(lengths, errors, "o-", color="0.3", label="fixed length")
        ax.axhline(r["auto"], color="tab:red", lw=1.5, label="automatic (mean RMS)")
        for length in sorted(set(r["chosen"])):
            ax.axvline(length, color="tab:red", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(0.03, 3)
        ax.set_title(f"{kind}, {n} frames", fontsize=9)
        ax.set_xlabel("frames per block")
        ax.set_xticks(lengths)
        ax.set_xticklabels([str(k) for k in lengths], fontsize=7)
        ax.minorticks_off()
    np.atleast_1d(axes)[0].set_ylabel("trace RMS error vs truth (px)")
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="upper right")
    fig.suptitle(
        "Drift error against block length (48 x 48 px, 60 blinking emitters); dotted: the "
        "lengths the automatic choice picked",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"figure: {path}")


if __name__ == "__main__":
    main()

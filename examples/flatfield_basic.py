"""Fit a BaSiC shading profile, correct tiles, save and reuse the profile (no viewer needed).

Makes a synthetic mosaic (60 vignetted 256 x 256 uint16 tiles with a camera offset of 100 ADU
and a darkfield bump; the truth is known), then on the first GPU (or ``--device cpu``):

1. fits with the automatic smoothness and the darkfield from a measured dark frame (the truth
   here), prints whether it converged and the flatfield error against the truth;
2. runs the autotune (17 smoothness values, all as one batch on a GPU, two at a time on the
   CPU) and prints the new error;
3. corrects the tiles in chunks and prints the shading left (coefficient of variation of the
   mean image) before and after;
4. saves the profile (TIFF + JSON) and applies the loaded profile to the tiles again.

``--figure PATH`` writes the docs figure (truth | mean image | automatic | autotuned).

Examples::

    python examples/flatfield_basic.py                       # first GPU
    python examples/flatfield_basic.py --device cpu --output out/
    python examples/flatfield_basic.py --device cpu --figure docs/images/flatfield_comparison.png
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from napari_gpuscope.compute.flatfield import ShadingProfile, autotune, correct, fit_basic
from napari_gpuscope.sample_data._shading import shaded_tiles


def rel_rmse(estimate: np.ndarray, truth: np.ndarray) -> float:
    estimate = estimate / estimate.mean()
    return float(np.sqrt(((estimate - truth) ** 2).mean()))


def shading_cv(stack: np.ndarray) -> float:
    mean = stack.mean(axis=0, dtype=np.float64)
    return float(mean.std() / mean.mean())


def figure(path: Path, truth, automatic, tuned: ShadingProfile) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mean = truth.images.mean(axis=0) - truth.darkfield
    panels = [
        ("true flatfield", truth.flatfield),
        (f"mean image ({rel_rmse(mean, truth.flatfield):.1%})", mean / mean.mean()),
        (
            f"automatic λ={automatic.smoothness_flatfield[0]:.2f} "
            f"({rel_rmse(automatic.flatfield, truth.flatfield):.1%})",
            automatic.flatfield,
        ),
        (
            f"autotuned λ={tuned.smoothness_flatfield[0]:g} "
            f"({rel_rmse(tuned.flatfield, truth.flatfield):.1%})",
            tuned.flatfield,
        ),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(12, 3.4), layout="constrained")
    for axis, (title, image) in zip(axes, panels, strict=True):
        shown = axis.imshow(image, cmap="viridis", vmin=0.4, vmax=1.4)
        axis.set_title(title, fontsize=9)
        axis.set_axis_off()
    fig.colorbar(shown, ax=axes, shrink=0.8, label="flatfield (mean 1)")
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="default: first GPU; 'cpu' to name it")
    parser.add_argument("--output", type=Path, default=Path("flatfield-out"))
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args()

    truth = shaded_tiles(60, (256, 256), seed=0, dark_offset=100.0)
    start = time.perf_counter()
    profile = fit_basic(truth.images, dark_frame=truth.darkfield, device=args.device)
    print(f"fit: {profile.describe()} in {time.perf_counter() - start:.2f} s")
    print(f"  flatfield error vs truth: {rel_rmse(profile.flatfield, truth.flatfield):.2%}")

    start = time.perf_counter()
    tuned = autotune(truth.images, dark_frame=truth.darkfield, device=args.device)
    print(f"autotune: {tuned.describe()} in {time.perf_counter() - start:.2f} s")
    print(f"  flatfield error vs truth: {rel_rmse(tuned.profile.flatfield, truth.flatfield):.2%}")

    corrected = correct(truth.images, tuned.profile, device=args.device)
    raw = truth.images.astype(np.float32) - truth.darkfield
    print(
        f"shading left (CV of the mean image): raw {shading_cv(raw):.3f} -> "
        f"corrected {shading_cv(corrected):.3f}"
    )

    args.output.mkdir(parents=True, exist_ok=True)
    saved = tuned.profile.save(args.output / "profile.tif")
    again = correct(truth.images, ShadingProfile.load(saved), device=args.device)
    print(
        f"saved {saved} (+ .json); the loaded profile gives the same correction: "
        f"{np.array_equal(again, corrected)}"
    )
    if args.figure is not None:
        figure(args.figure, truth, profile, tuned.profile)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()

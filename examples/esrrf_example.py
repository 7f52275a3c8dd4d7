"""eSRRF super-resolution of the sample stack from Python (no viewer needed).

Loads the plugin's blinking-filaments sample (100 uint16 frames of 64 x 64 pixels of 100 nm:
emitters blinking along filaments, two of them 150 nm apart, true positions kept), runs eSRRF on
the first GPU (or ``--device cpu``) with :class:`~napari_gpuscope.compute.esrrf.EsrrfParams`,
streams the build-up (a line per chunk), and runs a small radius x sensitivity sweep on
a crop to print the QnR table and the best setting. The result is written as an ImageJ TIFF with
its pixel size (input pixel / M) and provenance, the parameters as JSON beside it
(``EsrrfParams.from_json`` reloads them; a batch recipe is made with ``napari-gpuscope recipe``).

``--figures DIR`` also writes the docs figures: widefield mean | eSRRF, the geometry of a single
emitter (NanoPyx grid vs pixel-centred), and the sweep heatmaps.

Examples::

    python examples/esrrf_example.py                          # first GPU
    python examples/esrrf_example.py --device cpu --output out/
    python examples/esrrf_example.py --device cpu --figures docs/images
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.sample_data.esrrf import PIXEL_SIZE_UM, blinking_filaments_stack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda:N (default: first GPU) or cpu")
    parser.add_argument("--output", type=Path, default=Path("esrrf-out"))
    parser.add_argument("--figures", type=Path, default=None)
    args = parser.parse_args()
    if args.device == "cpu":
        import torch

        torch.set_num_threads(1)  # small frames: threads cost more than they give

    stack, truth = blinking_filaments_stack()
    params = esrrf.EsrrfParams(magnification=4, radius=1.5, geometry="centred")
    start = time.perf_counter()
    result = run_job(
        esrrf.iter_esrrf(stack, params=params, device=args.device, frames_per_chunk=10),
        on_progress=lambda update: print(f"  {update.message}"),
    )
    print(f"{result.describe()} in {time.perf_counter() - start:.1f} s")

    args.output.mkdir(parents=True, exist_ok=True)
    from napari_gpuscope.compute.devices import device_label
    from napari_gpuscope.export import save_tiff
    from napari_gpuscope.provenance import build_provenance

    record = build_provenance(
        "esrrf",
        params.to_dict(),
        device=device_label(args.device or "cuda:0"),
        input_name="blinking filaments",
        elapsed_seconds=time.perf_counter() - start,
        result=result.summary(),
    )
    written = save_tiff(
        args.output / "esrrf.tif",
        result.image[0],
        scale=(PIXEL_SIZE_UM / params.magnification,) * 2,
        units="um",
        provenance=record,
    )
    (args.output / "esrrf-params.json").write_text(params.to_json())
    print(f"wrote {written} and the parameters beside it")

    crop = stack[:60, 16:48, 16:48]
    sweep = esrrf.parameter_sweep(
        crop,
        (1.0, 1.5, 2.0, 3.0),
        (1.0, 2.0, 4.0),
        params=params,
        pixel_size=PIXEL_SIZE_UM,
        device=args.device,
    )
    print("QnR (rows: sensitivity 1, 2, 4; columns: radius 1, 1.5, 2, 3):")
    print(np.array2string(sweep.qnr, precision=3))
    print(sweep.describe())
    if args.figures is not None:
        figures(args.figures, stack, truth, result, sweep, args.device)


def figures(folder: Path, stack, truth, result, sweep, device) -> None:
    """The docs figures (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    m = result.params.magnification
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.2), layout="constrained")
    extent_in = (-0.5, 63.5, 63.5, -0.5)
    axes[0].imshow(result.widefield[0], cmap="gray", extent=extent_in)
    axes[0].set_title("widefield mean (100 frames)")
    axes[1].imshow(
        result.image[0], cmap="magma", extent=extent_in, vmax=np.percentile(result.image[0], 99.9)
    )
    axes[1].plot(truth[:, 1], truth[:, 0], ",", color="cyan", alpha=0.5)
    axes[1].set_title(f"eSRRF M{m}, pixel-centred (dots: true emitters)")
    for ax in axes:
        ax.set_axis_off()
    fig.savefig(folder / "esrrf_comparison.png", dpi=110)
    plt.close(fig)

    from scipy.special import erf

    grid = np.arange(32)
    s2 = np.sqrt(2) * 1.3
    profile = 0.5 * (erf((grid + 0.5 - 16) / s2) - erf((grid - 0.5 - 16) / s2))
    single = np.stack([10 + 1000 * np.outer(profile, profile)] * 2).astype(np.float32)
    fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
    for geometry, colour in (("nanopyx", "tab:red"), ("centred", "tab:blue")):
        out = esrrf.esrrf(
            single,
            magnification=5,
            geometry=geometry,
            intensity_weighting=False,
            macro_pixel_correction=False,
            device=device,
        )[0]
        x = (np.arange(160) + 0.5) / 5 - 0.5  # output pixel centres in input pixels
        ax.plot(
            x,
            out[:, 70:95].sum(1) / out[:, 70:95].sum(1).max(),
            color=colour,
            label=f'geometry="{geometry}"',
        )
    ax.axvline(16, color="k", lw=0.8, ls="--", label="emitter (input pixel 16)")
    ax.set_xlim(13, 19)
    ax.set_xlabel("position (input pixels, pixel-centre coordinates)")
    ax.set_ylabel("RGC profile (normalised)")
    ax.legend(fontsize=8)
    fig.savefig(folder / "esrrf_geometry.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(10, 3), layout="constrained")
    for ax, (values, title, cmap) in zip(
        axes,
        (
            (sweep.frc_resolution, "FRC resolution (µm)", "viridis_r"),
            (sweep.rsp, "RSP", "viridis"),
            (sweep.qnr, "QnR", "magma"),
        ),
        strict=True,
    ):
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, origin="lower", aspect="auto")
        fig.colorbar(image, ax=ax)
        ax.set_xticks(range(len(sweep.radii)), [f"{r:g}" for r in sweep.radii])
        ax.set_yticks(range(len(sweep.sensitivities)), [f"{s:g}" for s in sweep.sensitivities])
        ax.set_xlabel("radius (px)")
        ax.set_ylabel("sensitivity")
        ax.set_title(title)
    fig.savefig(folder / "esrrf_sweep.png", dpi=110)
    plt.close(fig)
    print(f"figures written to {folder}")


if __name__ == "__main__":
    main()

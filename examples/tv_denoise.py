"""Denoise the sample image with total variation from Python (no viewer needed).

Loads the plugin's ``noisy_cells_2d`` sample (a simulated uint16 camera frame: 30 photons at peak,
gain 2 ADU/photon, offset 100 ADU, read noise 3 ADU) and denoises it on the first GPU (or
``--device cpu``) with :class:`~napari_gpuscope.compute.tv.TVParams`: a strength relative to the
noise level the job estimates from the image (``weight = strength * sigma_hat``), which is what
makes one set of parameters fit a whole experiment. The parameters are saved as JSON next to the
result (``TVParams.from_json`` reloads them; a batch recipe is made with ``napari-gpuscope
recipe``), an
ImageJ float32 TIFF in ADU with pixel size and provenance; the iteration count and the final
relative duality gap are printed.

``--figure PATH`` also writes the comparison montage used in the docs
(noisy | scikit-image's ``denoise_tv_chambolle`` at the same weight with its default stopping rule
| ours), cropped to a region with cells, filaments and puncta.

Examples::

    python examples/tv_denoise.py                               # first GPU
    python examples/tv_denoise.py --device cpu --output out/    # CPU reference run
    python examples/tv_denoise.py --noise-model poisson         # Anscombe + ROF + exact inverse
    python examples/tv_denoise.py --device cpu --figure docs/images/tv_comparison.png
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.devices import NoGPUError, device_label, resolve_device
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.export.tiff import save_tiff
from napari_gpuscope.provenance import build_provenance
from napari_gpuscope.sample_data import (
    expected_camera_signal,
    fluorescence_phantom_2d,
    noisy_cells_2d,
)

# Region of the 512 x 512 sample shown in the figure: disk edge, ellipse, filaments and puncta.
FIGURE_CROP = (slice(40, 296), slice(96, 352))


def psnr(truth: np.ndarray, estimate: np.ndarray) -> float:
    """PSNR in dB with the truth's dynamic range as the peak."""
    mse = float(np.mean((truth.astype(np.float64) - estimate.astype(np.float64)) ** 2))
    peak = float(truth.max() - truth.min())
    return 10.0 * np.log10(peak**2 / mse)


def write_figure(
    path: Path, noisy: np.ndarray, skimage_result: np.ndarray, ours: np.ndarray, labels: list[str]
) -> None:
    """Save a labelled montage (noisy | scikit-image | ours) as PNG with Pillow."""
    from PIL import Image, ImageDraw, ImageFont

    panels = [p[FIGURE_CROP].astype(np.float64) for p in (noisy, skimage_result, ours)]
    # One display range for all panels, from the denoised image (noise would widen it).
    lo, hi = np.percentile(panels[2], [0.5, 99.8])
    scale = 2  # nearest-neighbour upsampling keeps pixels crisp in the docs
    tiles = []
    for p in panels:
        grey = np.clip((p - lo) / (hi - lo), 0, 1) * 255
        tile = Image.fromarray(grey.astype(np.uint8)).resize(
            (p.shape[1] * scale, p.shape[0] * scale), Image.Resampling.NEAREST
        )
        tiles.append(tile)
    gap, header = 8, 56
    width = sum(t.width for t in tiles) + gap * (len(tiles) - 1)
    canvas = Image.new("L", (width, tiles[0].height + header), color=255)
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default(size=17)
    x = 0
    for tile, label in zip(tiles, labels, strict=True):
        canvas.paste(tile, (x, header))
        draw.multiline_text((x + 4, 4), label, fill=0, font=font, spacing=4)
        x += tile.width + gap
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path, optimize=True)
    print(f"figure written to {path} ({path.stat().st_size / 1024:.0f} KB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: first GPU)")
    parser.add_argument("--strength", type=float, default=1.0, help="weight = strength * sigma")
    parser.add_argument("--noise-model", choices=("gaussian", "poisson"), default="gaussian")
    parser.add_argument("--output", type=Path, default=Path("."), help="folder for the TIFFs")
    parser.add_argument("--figure", type=Path, default=None, help="write the docs montage here")
    args = parser.parse_args(argv)

    data, layer_kwargs, _ = noisy_cells_2d()[0]
    camera = layer_kwargs["metadata"]["sample"]

    poisson = {}
    if args.noise_model == "poisson":
        # The sample's calibration; after the Anscombe transform the noise std is ~1, so the
        # weight is the strength itself.
        poisson = {
            "gain": camera["camera_gain_adu_per_photon"],
            "offset": camera["camera_offset_adu"],
            "read_noise": camera["read_noise_adu"],
        }
    params = tv.TVParams(strength=args.strength, noise_model=args.noise_model, **poisson)

    start = time.perf_counter()
    try:
        result = run_job(tv.iter_denoise(data, params, device=args.device))
    except NoGPUError as error:
        print(f"{error}\n(For a CPU reference run pass --device cpu.)", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - start
    weight = result.weight
    print(f"input {data.shape} {data.dtype}: {result.describe()}")
    truth = expected_camera_signal(fluorescence_phantom_2d())
    print(
        f"PSNR vs the noise-free sample: noisy {psnr(truth, data):.2f} dB, "
        f"denoised {psnr(truth, result.image):.2f} dB"
    )

    args.output.mkdir(parents=True, exist_ok=True)
    saved = args.output / f"tv_{args.noise_model}_params.json"
    saved.write_text(params.to_json())  # tv.TVParams.from_json(saved.read_text()) reloads it
    out_path = args.output / f"noisy_cells_2d_tv_{args.noise_model}.tif"
    save_tiff(
        out_path,
        result.image,
        scale=layer_kwargs["scale"],
        units=layer_kwargs["units"],
        provenance=build_provenance(
            "tv",
            params.to_dict(),
            device=device_label(resolve_device(args.device)),
            input_name=layer_kwargs["name"],
            elapsed_seconds=elapsed,
            result=result.summary(),
        ),
    )
    print(f"denoised image written to {out_path}, parameters to {saved}")

    if args.figure is not None:
        from skimage.restoration import denoise_tv_chambolle

        # Same weight and same float data, so only the solver and its stopping rule differ.
        # (Passing the uint16 array would make scikit-image divide it by 65535 first.)
        reference = denoise_tv_chambolle(data.astype(np.float32), weight=weight)
        # scikit-image does not report its iteration count; our parity mode runs the same rule
        # with scikit-image's defaults (eps 2e-4, at most 200 iterations; ours defaults to 1000).
        parity = run_job(
            tv.iter_denoise(
                data,
                weight,
                method="chambolle",
                tolerance=2e-4,
                max_iterations=200,
                device=args.device,
            )
        )
        labels = [
            f"noisy (uint16 camera frame)\nPSNR {psnr(truth, data):.1f} dB",
            "scikit-image denoise_tv_chambolle, same weight\n"
            f"default eps: stops after {parity.iterations} it, "
            f"PSNR {psnr(truth, reference):.1f} dB",
            f"ours FGP, {result.iterations} it, gap {result.relative_gap:.0e}\n"
            f"PSNR {psnr(truth, result.image):.1f} dB",
        ]
        write_figure(args.figure, data, reference, result.image, labels)
    return 0


if __name__ == "__main__":
    sys.exit(main())

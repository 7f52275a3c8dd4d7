"""Sample data of the phase dock: simulated brightfield z-stacks of unstained cells.

The stacks are made with the forward model of :mod:`napari_gpuscope.compute.phase` (waveorder's
``isotropic_thin_3d``) for a 20x/0.55 air objective with a 0.4 NA condenser at 450 nm, 21
slices 1 µm apart, and Poisson noise at 2000 photons per pixel of background. The layer
metadata records the optics and the true tilt, so the demo and the docs can check the result.
"""

from __future__ import annotations

import numpy as np

from napari_gpuscope.compute.results import Geometry, LayerDataTuple, image_layer

__all__ = [
    "OPTICS",
    "demo_explanation",
    "demo_params",
    "meniscus_brightfield_stack",
    "tilted_brightfield_stack",
]

OPTICS = {
    "wavelength": 0.45,
    "yx_pixel_size": 0.325,
    "z_pixel_size": 1.0,
    "na_illumination": 0.4,
    "na_detection": 0.55,
    "index_of_refraction": 1.0,
}
"""Optics of the samples (µm)."""
N_SLICES = 21
PHOTONS = 2000.0
SEED = 20261123


def _blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur (periodic boundaries, by FFT: NumPy only)."""
    fy = np.fft.fftfreq(image.shape[0])[:, None]
    fx = np.fft.rfftfreq(image.shape[1])[None, :]
    kernel = np.exp(-2 * np.pi**2 * sigma**2 * (fy**2 + fx**2))
    return np.fft.irfft2(np.fft.rfft2(image) * kernel, s=image.shape)


CELL_REACH = 16
"""Pixels from a cell's centre beyond which it adds nothing (its semi-axes are below 14)."""


def cell_phantom(shape: tuple[int, int], seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Phase (radians) and absorption of overlapping ellipsoidal cells with denser nuclei.

    Cells add 0.25-0.5 rad, nuclei 0.15-0.3 rad more (projected ellipsoids, blurred by one
    pixel); absorption is 3 % of the phase plus smooth noise.
    """
    rng = np.random.default_rng(seed)
    ny, nx = shape
    phase = np.zeros(shape)
    for _ in range(max(6, ny * nx // 1400)):
        cy, cx = rng.uniform(12, ny - 12), rng.uniform(12, nx - 12)
        a, b, theta = rng.uniform(7, 14), rng.uniform(5, 10), rng.uniform(0, np.pi)
        # A cell is zero beyond its longest semi-axis (< 14 px): drawing it in its own box
        # keeps 2048² phantoms to seconds and adds exactly the zeros it would add elsewhere.
        rows = slice(max(0, int(cy) - CELL_REACH), min(ny, int(cy) + CELL_REACH + 1))
        cols = slice(max(0, int(cx) - CELL_REACH), min(nx, int(cx) + CELL_REACH + 1))
        dy, dx = np.mgrid[rows, cols].astype(np.float64)
        dy, dx = dy - cy, dx - cx
        for scale_a, scale_b, height in ((1.0, 1.0, (0.25, 0.5)), (0.4, 0.45, (0.15, 0.3))):
            u = (dx * np.cos(theta) + dy * np.sin(theta)) / (scale_a * a)
            v = (-dx * np.sin(theta) + dy * np.cos(theta)) / (scale_b * b)
            phase[rows, cols] += rng.uniform(*height) * np.sqrt(np.clip(1 - u * u - v * v, 0, None))
    phase = _blur(phase, 1.0)
    absorption = 0.03 * phase + 0.01 * _blur(rng.standard_normal(shape), 3.0)
    return phase.astype(np.float32), absorption.astype(np.float32)


def _simulate(phase: np.ndarray, absorption: np.ndarray, zenith: float, azimuth: float):
    from napari_gpuscope.compute import phase as model

    params = model.PhaseParams(**OPTICS)
    return model.simulate_stack(
        phase, absorption, params, N_SLICES, tilt_zenith=zenith, tilt_azimuth=azimuth
    )


def _layer(stack: np.ndarray, name: str, truth: dict) -> LayerDataTuple:
    rng = np.random.default_rng(SEED + 1)
    counts = rng.poisson(PHOTONS * np.clip(stack, 0, None)).astype(np.float32)
    geometry = Geometry(
        scale=(OPTICS["z_pixel_size"], OPTICS["yx_pixel_size"], OPTICS["yx_pixel_size"]),
        units=("um", "um", "um"),
        axis_labels=("z", "y", "x"),
    )
    metadata = {
        "intensity_unit": "photons",
        "sample": {
            **OPTICS,
            "z_order": "descending (slice 0 = highest z)",
            "photons_per_pixel": PHOTONS,
            **truth,
        },
    }
    return image_layer(counts, name, geometry, metadata=metadata, colormap="gray")


def tilted_brightfield_stack() -> list[LayerDataTuple]:
    """napari sample: 21 x 256 x 256 brightfield stack, illumination tilted by 0.2 rad toward
    azimuth 1.0 rad (forward-model convention)."""
    phase, absorption = cell_phantom((256, 256))
    stack = _simulate(phase, absorption, 0.2, 1.0)
    truth = {"tilt_zenith_rad": 0.2, "tilt_azimuth_rad": 1.0}
    return [_layer(stack, "brightfield tilted", truth)]


def meniscus_brightfield_stack() -> list[LayerDataTuple]:
    """napari sample: 21 x 256 x 384 brightfield stack whose tilt grows from 0.05 rad (left)
    to 0.3 rad (right) toward azimuth 0 (+x), as near a well wall.

    Simulated at 4 tilts and blended column by column (smoothly): each column is the stack of
    the zenith at its position.
    """
    shape = (256, 384)
    phase, absorption = cell_phantom(shape, SEED + 7)
    zeniths = np.linspace(0.05, 0.3, 4)
    stacks = [_simulate(phase, absorption, float(z), 0.0) for z in zeniths]
    position = np.linspace(0, len(zeniths) - 1, shape[1])
    stack = np.zeros_like(stacks[0])
    for index, sim in enumerate(stacks):
        weight = np.clip(1 - np.abs(position - index), 0, 1).astype(np.float32)
        stack += sim * weight
    truth = {"tilt_zenith_rad": "0.05 (left) to 0.3 (right), linear", "tilt_azimuth_rad": 0.0}
    return [_layer(stack, "brightfield meniscus", truth)]


def demo_params(sample_kwargs: dict) -> object:
    """Parameters of the headless demo: the sample's optics and the tilt estimated by damped
    Newton steps, globally on the tilted sample and on a 1 x 3 grid on the meniscus (its tilt
    changes along x only). The optimiser stops by itself when the loss has settled and the
    gradient is flat (:mod:`napari_gpuscope.compute.phase._convergence`), about 11 iterations
    on either sample; ``iterations`` stays at its default, a cap that is not reached."""
    from napari_gpuscope.compute.phase import PhaseParams

    sample = sample_kwargs.get("metadata", {}).get("sample", {})
    optics = {key: sample.get(key, value) for key, value in OPTICS.items()}
    if "meniscus" in sample_kwargs.get("name", ""):
        return PhaseParams(**optics, tilt_mode="tiles", tiles_y=1, tiles_x=3, optimizer="newton")
    return PhaseParams(**optics, tilt_mode="global", optimizer="newton")


def demo_explanation(sample_kwargs: dict, result) -> str | None:
    """What a tilt estimate cut off by its iteration limit means, in words (None when it
    reached its stopping rule, was stopped, or no tilt was estimated; a tilt the data do not
    determine says so in its own ``describe()``)."""
    estimate = getattr(result, "estimate", None)
    if estimate is None or estimate.converged or estimate.stopped_early:
        return None
    if estimate.non_finite or estimate.iterations < estimate.params.iterations:
        return None
    history = estimate.loss_history
    change = abs(history[-1] - history[-6]) / abs(history[-6]) if len(history) > 5 else None
    still = "" if change is None else f", still changing by {100 * change:.2g} % over the last 5"
    return (
        f"The tilt optimiser used all its {estimate.iterations} iterations before the loss "
        f"settled (stopping rule: under 0.001 % change over 5 iterations and a gradient below "
        f"1 % of its start{still}). The tilt and the phase shown are its best values so far, "
        "usually close; for the settled value raise Iterations in the phase dock's advanced "
        "settings (iterations= in Python) and run again."
    )

"""The eSRRF workflow on a simulated drifting two-colour acquisition, and its docs figure.

Drift correction, then channel registration, then eSRRF, then the decorrelation resolution to
judge the result: the order NanoPyx users follow, with napari-gpuscope's public API. The data
are simulated, so every step can be checked against the truth: 300 uint16 frames of 80 x 80
pixels of 100 nm, emitters (8 per pixel of length) blinking along filaments (PSF sigma 1.3 px),
Poisson noise, background and camera offset, a smooth drift of a few pixels plus per-frame
jitter, and a second channel of the same filaments (other emitters) displaced by a known
chromatic offset.

The script prints what each step measured against the truth; ``--figure PATH`` also writes the
figure of docs/esrrf.md (``docs/images/esrrf_workflow.png``). About a minute on one CPU thread
(two eSRRF runs of 300 frames at M 4); seconds on a GPU.

Examples::

    python examples/esrrf_workflow.py --device cpu
    python examples/esrrf_workflow.py --device cpu --figure docs/images/esrrf_workflow.png
    python examples/esrrf_workflow.py --device cpu --drift-seeds 6   # the drift step, 6 seeds
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.special import erf

from napari_gpuscope.compute import esrrf

PIXEL_UM = 0.1  # input pixel size
PSF_SIGMA = 1.3  # px: FWHM 3.06 px, a Nyquist-sampled widefield image
SHAPE = (80, 80)
N_FRAMES = 300
CHANNEL_OFFSET = np.array([1.6, -2.3])  # px: channel 1's content relative to channel 0's
M, RADIUS = 4, 1.5


# --------------------------------------------------------------------------- simulation


def true_drift(n_frames: int, rng: np.random.Generator, jitter: float = 0.03) -> np.ndarray:
    """Smooth sub-pixel drift (an oscillation plus a trend, ~4 px in all) and per-frame jitter:
    the trajectory of the drift tests (tests/compute/esrrf_drift_sim.py), 1.5 times larger."""
    t = np.arange(n_frames) / n_frames
    smooth = 1.5 * np.column_stack(
        [2.0 * np.sin(2 * np.pi * 0.6 * t) + 1.2 * t, -3.5 * t + 1.0 * t**2]
    )
    shifts = smooth + rng.normal(0.0, jitter, smooth.shape)
    return shifts - shifts[0]


def filaments(rng: np.random.Generator, n: int = 6) -> list[np.ndarray]:
    """Centre lines ``(k, 2)`` (row, col) of ``n`` gently curved filaments across the frame."""
    t = np.linspace(0.0, 1.0, 2000)[:, None]
    lines = []
    for _ in range(n):
        start = rng.uniform(8, SHAPE[0] - 8, 2)
        angle = rng.uniform(0, np.pi)
        direction = np.array([np.sin(angle), np.cos(angle)])
        normal = np.array([-direction[1], direction[0]])
        length = rng.uniform(50, 90)
        bend = rng.uniform(-8, 8)
        line = start + (t - 0.5) * length * direction + bend * np.sin(np.pi * t) * normal
        inside = np.all((line > 4) & (line < np.array(SHAPE) - 5), axis=1)
        # The longest stretch inside the frame: a curve that leaves and comes back would
        # otherwise join its two parts by a straight line of emitters.
        edges = np.flatnonzero(np.diff(np.concatenate([[0], inside.astype(np.int8), [0]])))
        starts, stops = edges[::2], edges[1::2]
        if len(starts) and (stops - starts).max() > 1:
            k = int(np.argmax(stops - starts))
            lines.append(line[starts[k] : stops[k]])
    return lines


def emitters_on(lines: list[np.ndarray], density: float, rng: np.random.Generator) -> np.ndarray:
    """Emitter positions, ``density`` per pixel of filament length, uniform along each line."""
    points = []
    for line in lines:
        arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(line, axis=0), axis=1))])
        where = rng.uniform(0, arc[-1], rng.poisson(density * arc[-1]))
        points.append(np.column_stack([np.interp(where, arc, line[:, i]) for i in range(2)]))
    return np.concatenate(points)


def profiles(n: int, centres: np.ndarray, sigma: float, step: float = 1.0) -> np.ndarray:
    """``(len(centres), n)`` pixel-integrated Gaussians on a grid of pixels ``step`` wide whose
    pixel ``k`` is centred at ``(k + 0.5) * step - 0.5`` (1: the camera; 1/M: eSRRF's grid)."""
    grid = (np.arange(n)[None, :] + 0.5) * step - 0.5
    s2 = np.sqrt(2.0) * sigma
    c = centres[:, None]
    return 0.5 * (erf((grid + step / 2 - c) / s2) - erf((grid - step / 2 - c) / s2)) / step


def acquisition(positions: np.ndarray, shifts: np.ndarray, rng: np.random.Generator):
    """uint16 frames: blinking emitters (two-state Markov, ~10 % on, 400 photons while on,
    gamma-distributed) at ``positions + shifts[t]``, 20 background photons, Poisson noise,
    camera offset 100 ADU (gain 1)."""
    state = rng.random(len(positions)) < 0.1
    frames = np.empty((len(shifts), *SHAPE), np.uint16)
    for t, shift in enumerate(shifts):
        on = np.nonzero(state)[0]
        moved = positions[on] + shift
        amplitude = 400.0 * rng.gamma(4.0, 0.25, on.size)
        ey = profiles(SHAPE[0], moved[:, 0], PSF_SIGMA)
        ex = profiles(SHAPE[1], moved[:, 1], PSF_SIGMA)
        frames[t] = rng.poisson(20.0 + (ey * amplitude[:, None]).T @ ex) + 100
        flip = rng.random(len(positions))
        state = np.where(state, flip >= 0.45, flip < 0.05)
    return frames


def truth_image(positions: np.ndarray, sigma: float = 0.5) -> np.ndarray:
    """The emitters drawn as narrow Gaussians (sigma in input px) on eSRRF's output grid."""
    ey = profiles(SHAPE[0] * M, positions[:, 0], sigma, 1 / M)
    ex = profiles(SHAPE[1] * M, positions[:, 1], sigma, 1 / M)
    return ey.T @ ex


def pearson(a: np.ndarray, b: np.ndarray, margin: int) -> float:
    """Correlation of two images without eSRRF's zero border band."""
    a, b = (x[margin:-margin, margin:-margin].ravel() for x in (a, b))
    return float(np.corrcoef(a, b)[0, 1])


# --------------------------------------------------------------------------- the workflow


def simulate(seed: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """The two-channel acquisition ``(C, T, Y, X)`` uint16, each channel's emitter positions in
    frame 0 (channel 1 before its offset) and the true drift ``(T, 2)``."""
    rng = np.random.default_rng(seed)
    lines = filaments(rng)
    positions = [emitters_on(lines, 8.0, rng) for _ in range(2)]  # two labels, same filaments
    drift = true_drift(N_FRAMES, rng)
    channels = np.stack(
        [
            acquisition(positions[0], drift, rng),
            acquisition(positions[1] + CHANNEL_OFFSET, drift, rng),
        ]
    )
    return channels, positions, drift


def drift_seeds(n: int, device) -> None:
    """The drift step alone on seeds 0 .. n-1: how typical the figure's seed is."""
    errors = []
    for seed in range(n):
        channels, _, drift = simulate(seed)
        trace = esrrf.estimate_drift(channels[0], time_averaging=30, device=device)
        errors.append(np.sqrt(np.mean((trace.shifts - drift) ** 2)))
        print(f"seed {seed}: drift RMS error {errors[-1]:.3f} px")
    print(f"seeds 0-{n - 1}: {min(errors):.3f}-{max(errors):.3f} px, mean {np.mean(errors):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda:N (default: first GPU) or cpu")
    parser.add_argument("--figure", type=Path, default=None, help="write the figure here")
    parser.add_argument("--seed", type=int, default=7, help="the simulation's seed (figure: 7)")
    parser.add_argument(
        "--drift-seeds", type=int, default=0, help="only the drift step, on seeds 0 .. N-1"
    )
    args = parser.parse_args()
    if args.device == "cpu":
        import torch

        torch.set_num_threads(1)  # small frames: threads cost more than they give
    if args.drift_seeds:
        drift_seeds(args.drift_seeds, args.device)
        return

    start = time.perf_counter()
    channels, positions, drift = simulate(args.seed)  # (C, T, Y, X)
    print(
        f"simulated {channels.shape} uint16 in {time.perf_counter() - start:.1f} s; true drift "
        f"up to {np.abs(drift).max():.2f} px; channel offset {CHANNEL_OFFSET} px"
    )

    # 1. Drift: estimated on channel 0 (both channels share the stage's motion).
    start = time.perf_counter()
    trace = esrrf.estimate_drift(channels[0], time_averaging=30, device=args.device)
    error = trace.shifts - drift
    # Most of the error is a constant offset (the trace at frame 0 is extrapolated from the
    # first blocks): it moves the whole image and does not blur it, so it is reported apart.
    rms = np.sqrt(np.mean(error**2, axis=0))
    rms_wobble = np.sqrt(np.mean((error - error.mean(axis=0)) ** 2, axis=0))
    print(
        f"1. drift in {time.perf_counter() - start:.1f} s: {len(trace.block_frames)} blocks of 30 "
        f"frames; RMS error dy {rms[0]:.3f}, dx {rms[1]:.3f} px (all frames together "
        f"{np.sqrt(np.mean(error**2)):.3f} px); offset {error.mean(axis=0).round(3)} px; "
        f"without it dy {rms_wobble[0]:.3f}, dx {rms_wobble[1]:.3f} px (true jitter 0.03 px; "
        f"reported uncertainty {trace.rms_uncertainty:.3f} px)"
    )
    aligned = np.stack([esrrf.correct_drift(c, trace.shifts, device=args.device) for c in channels])

    # 2. Channel registration on the drift-corrected means, applied to every frame.
    means = aligned.mean(axis=1)
    registration = esrrf.register_channels(means, device=args.device)
    registered = esrrf.apply_registration(aligned, registration, device=args.device)
    print(
        f"2. registration: channel 1 at {registration.shifts[1].round(3)} px "
        f"(true {CHANNEL_OFFSET}), similarity {registration.similarity[1]:.3f}"
    )

    # 3. eSRRF of channel 0 without and with drift correction (same parameters). With
    # drift_correction=True esrrf() estimates the trace itself; passing the one measured above
    # (drift_shifts=) skips a second estimate and is the same correction.
    common = {"magnification": M, "radius": RADIUS, "geometry": "centred", "device": args.device}
    start = time.perf_counter()
    raw_sr = esrrf.esrrf(channels[0], **common)[0]
    raw_time = time.perf_counter() - start
    start = time.perf_counter()
    fixed_sr = esrrf.esrrf(channels[0], drift_shifts=trace.shifts, **common)[0]
    print(
        f"3. eSRRF (M {M}, R {RADIUS}, AVG, pixel-centred) of {N_FRAMES} frames: "
        f"{raw_time:.1f} s uncorrected, {time.perf_counter() - start:.1f} s corrected"
    )
    # Against the truth: the corrected image in frame 0's coordinates; the uncorrected one at
    # the stack's mean position (where its smeared structures are centred).
    margin = int(RADIUS * M)
    r_fixed = pearson(fixed_sr, truth_image(positions[0]), margin)
    r_raw = pearson(raw_sr, truth_image(positions[0] + drift.mean(axis=0)), margin)
    print(
        f"   correlation with the true emitters: {r_raw:.3f} uncorrected, {r_fixed:.3f} corrected"
    )

    # 4. Decorrelation resolution (eSRRF's zero border band cut off first).
    def decorr(image, pixel):
        crop = image[margin:-margin, margin:-margin] if pixel < PIXEL_UM else image
        return esrrf.decorrelation_resolution(crop, pixel_size=pixel * 1000, device=args.device)

    resolutions = {
        "widefield mean, drifting": decorr(channels[0].mean(axis=0), PIXEL_UM),
        "widefield mean, corrected": decorr(means[0], PIXEL_UM),
        "eSRRF, drifting": decorr(raw_sr, PIXEL_UM / M),
        "eSRRF, drift-corrected": decorr(fixed_sr, PIXEL_UM / M),
    }
    for label, result in resolutions.items():
        print(f"4. {label}: {result.resolution_physical:.0f} nm ({result.resolution:.2f} px)")

    if args.figure is not None:
        figure(
            args.figure,
            channels,
            means,
            registered.mean(axis=1),
            drift,
            trace,
            raw_sr,
            fixed_sr,
            resolutions,
            (r_raw, r_fixed),
        )


# --------------------------------------------------------------------------- the figure


def figure(path, channels, means, registered, drift, trace, raw_sr, fixed_sr, resolutions, truth_r):
    """Six panels (the registration one in two parts): the input, each step, the resolution."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11, "axes.titlesize": 11.5, "legend.fontsize": 9.5})
    fig = plt.figure(figsize=(15, 7.4), layout="constrained")
    grid = fig.add_gridspec(2, 4, width_ratios=(1, 1, 1, 0.8))
    extent = (-0.5, SHAPE[1] - 0.5, SHAPE[0] - 0.5, -0.5)  # input pixels, for both grids

    def image_panel(ax, image, title, cmap, vmin, vmax, unit):
        shown = ax.imshow(image, cmap=cmap, vmin=vmin, vmax=vmax, extent=extent)
        ax.set_title(title)
        ax.set_axis_off()
        scale_bar(ax)
        fig.colorbar(shown, ax=ax, shrink=0.8, pad=0.02, label=unit)

    def scale_bar(ax, colour="white"):
        ax.plot([SHAPE[1] - 16, SHAPE[1] - 6], [SHAPE[0] - 6] * 2, color=colour, lw=3)
        ax.text(SHAPE[1] - 11, SHAPE[0] - 8, "1 µm", color=colour, ha="center", va="bottom")

    widefield = channels[0].mean(axis=0)
    image_panel(
        fig.add_subplot(grid[0, 0]),
        widefield,
        f"(a) widefield mean of {N_FRAMES} frames",
        "gray",
        np.percentile(widefield, 0.5),
        np.percentile(widefield, 99.8),
        "ADU",
    )

    ax = fig.add_subplot(grid[0, 1:3])
    frames = np.arange(len(drift))
    centres = [(a + b - 1) / 2 for a, b in trace.block_frames]
    for k, (name, colour) in enumerate((("dy", "tab:blue"), ("dx", "tab:orange"))):
        ax.plot(frames, trace.shifts[:, k], color=colour, lw=2.5, label=f"{name} estimated")
        # The truth drawn thin on top, so the jitter the trace does not follow stays visible.
        ax.plot(frames, drift[:, k], color="k", lw=0.7, alpha=0.7, label="true" if k else None)
        ax.plot(centres, trace.block_shifts[:, k], "o", color=colour, ms=5)
    rms = np.sqrt(np.mean((trace.shifts - drift) ** 2))
    ax.set_title(f"(b) drift: estimated from blocks of 30 frames (dots); RMS error {rms:.3f} px")
    ax.set_xlabel("frame")
    ax.set_ylabel("drift (px)")
    ax.set_xlim(0, len(drift) - 1)
    ax.legend(ncols=3, loc="lower left")
    ax.grid(alpha=0.3)
    nm = ax.secondary_yaxis("right", functions=(lambda v: v * 100, lambda v: v / 100))
    nm.set_ylabel("drift (nm)")

    # The registration panels: channel 0 magenta, channel 1 green (white where they agree).
    overlay_grid = grid[:, 3].subgridspec(2, 1)
    for row, (pair, title) in enumerate(
        ((means, "(c) before registration"), (registered, "after registration"))
    ):
        ax = fig.add_subplot(overlay_grid[row])
        a, b = (
            np.clip((p - np.percentile(p, 1)) / np.ptp(np.percentile(p, (1, 99.8))), 0, 1)
            for p in pair
        )
        ax.imshow(np.dstack([a, b, a]), extent=extent)
        ax.set_title(title)
        ax.set_axis_off()
        scale_bar(ax)
        ax.text(2, 2, "ch 0", color="magenta", va="top", fontsize=10, fontweight="bold")
        ax.text(19, 2, "ch 1", color="lime", va="top", fontsize=10, fontweight="bold")

    vmax = np.percentile(np.concatenate([raw_sr.ravel(), fixed_sr.ravel()]), 99.8)
    for col, (image, key, r, title) in enumerate(
        (
            (raw_sr, "eSRRF, drifting", truth_r[0], f"(d) eSRRF M {M}, no correction"),
            (fixed_sr, "eSRRF, drift-corrected", truth_r[1], f"(e) eSRRF M {M}, drift-corrected"),
        )
    ):
        image_panel(fig.add_subplot(grid[1, col]), image, title, "magma", 0, vmax, "eSRRF (a.u.)")
        fig.axes[-2].text(
            0.03,
            0.97,
            f"decorr. {resolutions[key].resolution_physical:.0f} nm\nr = {r:.2f} with truth",
            color="white",
            transform=fig.axes[-2].transAxes,
            ha="left",
            va="top",
            fontsize=11,
            bbox={"facecolor": "black", "alpha": 0.55, "edgecolor": "none", "pad": 2},
        )

    # d(k) of each image, and the peak k_c of its high-passed curves that gives the resolution
    # (1 / k_c in µm with k in cycles per µm).
    ax = fig.add_subplot(grid[1, 2])
    styles = {
        "widefield mean, corrected": ("0.35", "--", "widefield"),
        "eSRRF, drifting": ("tab:purple", "-", "eSRRF, drifting"),
        "eSRRF, drift-corrected": ("tab:red", "-", "eSRRF, corrected"),
    }
    for key, (colour, style, label) in styles.items():
        result = resolutions[key]
        nyquist = 1 / (2 * result.pixel_size / 1000)  # cycles per µm
        ax.plot(
            result.radii * nyquist,
            result.d0,
            color=colour,
            ls=style,
            label=f"{label}: {result.resolution_physical:.0f} nm",
        )
        ax.axvline(result.kc_max * nyquist, color=colour, ls=":", lw=1.5)
    ax.set_xlabel("spatial frequency k (µm⁻¹)")
    ax.set_ylabel("decorrelation d(k)")
    ax.set_title("(f) decorrelation (dotted: k_c; res. = 1 / k_c)")
    ax.set_xlim(0, 20)
    ax.set_ylim(0, 0.85)
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    print(f"figure written to {path}")


if __name__ == "__main__":
    main()

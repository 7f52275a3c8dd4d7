"""The simulated stacks of ``benchmarks/live_good_enough.py`` (issue 28 item 5): each set's
``tests/live/quality_sim.py`` ``simulate`` parameters, by stack name.

``dev`` holds the stacks the constants were chosen on (the test's two and eight more);
``fresh`` and ``fresh2`` eight each, never looked at while choosing; ``fresh3`` (eight) and
``fresh4`` (sixteen) were drawn at random, as their comments say, before any run.
"""

from __future__ import annotations

SETS: dict[str, dict[str, dict[str, float]]] = {
    "dev": {
        "sparse, bright": {"density": 2.0, "on": 0.1, "photons": 300, "background": 50, "seed": 1},
        "dense, dim": {"density": 4.0, "on": 0.05, "photons": 150, "background": 80, "seed": 2},
        "d1": {"density": 2.0, "on": 0.1, "photons": 300, "background": 50, "seed": 11},
        "d2": {"density": 4.0, "on": 0.05, "photons": 150, "background": 80, "seed": 12},
        "d3": {"density": 3.0, "on": 0.08, "photons": 200, "background": 60, "seed": 13},
        "d4": {"density": 1.5, "on": 0.15, "photons": 500, "background": 30, "seed": 14},
        "d5": {"density": 5.0, "on": 0.1, "photons": 100, "background": 100, "seed": 15},
        "d6": {"density": 2.5, "on": 0.03, "photons": 250, "background": 40, "seed": 16},
        "d7": {"density": 3.5, "on": 0.12, "photons": 120, "background": 120, "seed": 17},
        "d8": {"density": 1.0, "on": 0.06, "photons": 400, "background": 70, "seed": 18},
    },
    "fresh": {
        "f1": {"density": 2.2, "on": 0.07, "photons": 280, "background": 55, "seed": 101},
        "f2": {"density": 3.8, "on": 0.06, "photons": 170, "background": 90, "seed": 102},
        "f3": {"density": 1.2, "on": 0.12, "photons": 450, "background": 40, "seed": 103},
        "f4": {"density": 4.5, "on": 0.04, "photons": 130, "background": 70, "seed": 104},
        "f5": {"density": 2.8, "on": 0.1, "photons": 220, "background": 100, "seed": 105},
        "f6": {"density": 1.8, "on": 0.2, "photons": 350, "background": 60, "seed": 106},
        "f7": {"density": 3.2, "on": 0.04, "photons": 300, "background": 50, "seed": 107},
        "f8": {"density": 2.0, "on": 0.09, "photons": 110, "background": 110, "seed": 108},
    },
    "fresh2": {
        "g1": {"density": 2.6, "on": 0.08, "photons": 240, "background": 65, "seed": 201},
        "g2": {"density": 4.2, "on": 0.05, "photons": 160, "background": 85, "seed": 202},
        "g3": {"density": 1.4, "on": 0.14, "photons": 420, "background": 45, "seed": 203},
        "g4": {"density": 3.0, "on": 0.035, "photons": 200, "background": 60, "seed": 204},
        "g5": {"density": 2.0, "on": 0.11, "photons": 150, "background": 95, "seed": 205},
        "g6": {"density": 1.6, "on": 0.18, "photons": 320, "background": 50, "seed": 206},
        "g7": {"density": 3.6, "on": 0.07, "photons": 260, "background": 75, "seed": 207},
        "g8": {"density": 2.4, "on": 0.06, "photons": 130, "background": 105, "seed": 208},
    },
    # Drawn with np.random.default_rng(20261130): density U(1, 5) to 0.1, on log-U(0.03, 0.2)
    # to 0.001, photons U(100, 500) to 10, background U(30, 120) to 5; written before any run.
    "fresh3": {
        "h1": {"density": 3.6, "on": 0.055, "photons": 290, "background": 30, "seed": 301},
        "h2": {"density": 2.7, "on": 0.072, "photons": 300, "background": 90, "seed": 302},
        "h3": {"density": 4.2, "on": 0.169, "photons": 460, "background": 85, "seed": 303},
        "h4": {"density": 4.0, "on": 0.062, "photons": 370, "background": 95, "seed": 304},
        "h5": {"density": 2.4, "on": 0.114, "photons": 140, "background": 65, "seed": 305},
        "h6": {"density": 1.2, "on": 0.152, "photons": 330, "background": 50, "seed": 306},
        "h7": {"density": 1.3, "on": 0.041, "photons": 260, "background": 95, "seed": 307},
        "h8": {"density": 4.4, "on": 0.082, "photons": 420, "background": 105, "seed": 308},
    },
    # As fresh3, with np.random.default_rng(20261201): for each stack, in this order,
    # round(rng.uniform(1, 5), 1), round(exp(rng.uniform(log 0.03, log 0.2)), 3),
    # round(rng.uniform(100, 500) / 10) * 10, round(rng.uniform(30, 120) / 5) * 5 (with
    # 20261130 these give fresh3); written before any run, after the candidate floors were
    # declared (benchmarks/runs/2026-11-30-cpu-live-floor.md).
    "fresh4": {
        f"k{i + 1}": dict(zip(("density", "on", "photons", "background", "seed"), row, strict=True))
        for i, row in enumerate(
            [
                (3.7, 0.033, 260, 60, 401),
                (3.5, 0.04, 240, 75, 402),
                (1.8, 0.078, 130, 50, 403),
                (2.2, 0.175, 310, 50, 404),
                (3.1, 0.083, 370, 70, 405),
                (3.9, 0.082, 220, 60, 406),
                (2.7, 0.135, 430, 90, 407),
                (2.9, 0.05, 200, 110, 408),
                (4.5, 0.157, 110, 40, 409),
                (1.7, 0.038, 140, 110, 410),
                (2.6, 0.1, 470, 35, 411),
                (2.8, 0.049, 230, 60, 412),
                (2.7, 0.058, 240, 105, 413),
                (4.2, 0.032, 160, 100, 414),
                (2.7, 0.032, 250, 35, 415),
                (3.1, 0.184, 490, 40, 416),
            ]
        )
    },
}

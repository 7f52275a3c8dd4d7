"""Sample data of the flat-field (BaSiC) dock: vignetted tiles with a known flat- and darkfield.

Each sample is one layer (the headless demo fits every layer a sample returns); the truth it
was made with is :func:`ground_truth` (and its range is in the layer metadata).
"""

from __future__ import annotations

from napari_gpuscope.compute.results import Geometry, LayerDataTuple, image_layer

from ._shading import ShadedTiles, shaded_tiles

__all__ = [
    "demo_explanation",
    "demo_follow_up",
    "demo_params",
    "ground_truth",
    "vignetted_tiles",
    "vignetted_tiles_with_offset",
]

TILES, SHAPE, SEED = 48, (256, 256), 0
_GEOMETRY = Geometry(
    scale=(1.0, 0.65, 0.65), units=("", "um", "um"), axis_labels=("tile", "y", "x")
)


def ground_truth(dark_offset: float | None = None) -> ShadedTiles:
    """The tiles of a sample with their true flatfield, darkfield and content.

    Examples
    --------
    >>> truth = ground_truth(100.0)
    >>> truth.images.shape, round(float(truth.darkfield.min()))
    ((48, 256, 256), 100)
    """
    return shaded_tiles(TILES, SHAPE, seed=SEED, dark_offset=dark_offset)


def _layer(dark_offset: float | None, name: str) -> list[LayerDataTuple]:
    truth = ground_truth(dark_offset)
    metadata = {
        "intensity_unit": "ADU",
        "sample": {
            "tiles": TILES,
            "dark_offset_adu": dark_offset,
            "true_flatfield_range": [float(truth.flatfield.min()), float(truth.flatfield.max())],
            "true_darkfield_mean_adu": float(truth.darkfield.mean()),
            "ground_truth": f"napari_gpuscope.sample_data.flatfield.ground_truth({dark_offset})",
        },
    }
    return [image_layer(truth.images, name, _GEOMETRY, metadata=metadata, colormap="gray")]


def vignetted_tiles() -> list[LayerDataTuple]:
    """napari sample: 48 vignetted 256 x 256 uint16 tiles (flatfield range 0.43-1.32)."""
    return _layer(None, "vignetted tiles")


def vignetted_tiles_with_offset() -> list[LayerDataTuple]:
    """napari sample: the tiles with a camera offset of 100 ADU and a darkfield bump."""
    return _layer(100.0, "tiles with offset")


def demo_params(sample_kwargs: dict) -> object:
    """Parameters of the headless demo on a flat-field sample: the defaults (automatic
    smoothness), with the darkfield estimated on the sample that has an offset, and the
    reweighting stopped once the profile changes by less than 0.3 % (not 0.1 %: the flatfield
    is the same to 3 decimals, and the CPU run of the offset sample takes half as long)."""
    from napari_gpuscope.compute.flatfield import BasicParams

    with_offset = sample_kwargs.get("metadata", {}).get("sample", {}).get("dark_offset_adu")
    return BasicParams(get_darkfield=with_offset is not None, reweighting_tol=3e-3)


def demo_follow_up(data, sample_kwargs: dict, profile, params, device: str):
    """The demo shows the tiles corrected with the fitted profile too (the dock's Apply)."""
    from napari_gpuscope.compute.flatfield import iter_apply_profile
    from napari_gpuscope.compute.jobs import run_job

    return "apply", run_job(iter_apply_profile(data, profile, params, device=device))


def demo_explanation(sample_kwargs: dict, profile) -> str | None:
    """Why the estimated darkfield is below the true one, in words (None when it is close or
    was not estimated)."""
    sample = sample_kwargs.get("metadata", {}).get("sample", {})
    true_mean = sample.get("true_darkfield_mean_adu")
    if true_mean is None or profile.darkfield_source != "estimated":
        return None
    found = float(profile.darkfield.mean())
    if abs(found - true_mean) <= 0.1 * true_mean:
        return None
    return (
        f"The estimated darkfield averages {found:.0f} ADU where the truth is {true_mean:.0f} "
        "ADU. This is the limit of the method, not a failed fit: BaSiC can only separate an "
        "additive darkfield from the multiplicative flatfield where the tiles' brightness "
        "differs, and much of a constant offset looks like dim content to it. When the camera "
        "offset is known, give it (the dock's Camera offset; camera_offset= in Python), or give "
        "a dark frame taken with the shutter closed (the dock's Dark frame; dark_frame=): "
        "either makes the darkfield exact."
    )

"""Sample data of the flat-field (BaSiC) dock: vignetted tiles with a known flat- and darkfield.

Each sample is one layer (the headless demo fits every layer a sample returns); the truth it
was made with is :func:`ground_truth` (and its range is in the layer metadata).
"""

from __future__ import annotations

from napari_gpuscope.compute.results import Geometry, LayerDataTuple, image_layer

from ._shading import ShadedTiles, shaded_tiles

__all__ = ["demo_params", "ground_truth", "vignetted_tiles", "vignetted_tiles_with_offset"]

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
    smoothness), with the darkfield estimated on the sample that has an offset."""
    from napari_gpuscope.compute.flatfield import BasicParams

    with_offset = sample_kwargs.get("metadata", {}).get("sample", {}).get("dark_offset_adu")
    return BasicParams(get_darkfield=with_offset is not None)

"""Sample data of the flat-field (BaSiC) dock: vignetted tiles with a known flat- and darkfield."""

from __future__ import annotations

from napari_gpuscope.compute.results import Geometry, LayerDataTuple, image_layer

from ._shading import shaded_tiles

__all__ = ["demo_params", "vignetted_tiles", "vignetted_tiles_with_offset"]

_GEOMETRY = Geometry(
    scale=(1.0, 0.65, 0.65), units=("", "um", "um"), axis_labels=("tile", "y", "x")
)


def _layers(dark_offset: float | None, name: str) -> list[LayerDataTuple]:
    truth = shaded_tiles(60, (256, 256), seed=0, dark_offset=dark_offset)
    metadata = {
        "intensity_unit": "ADU",
        "sample": {
            "tiles": 60,
            "dark_offset_adu": dark_offset,
            "vignetting_range": [float(truth.flatfield.min()), float(truth.flatfield.max())],
        },
    }
    layers = []
    flat_geometry = _GEOMETRY.trailing(2)
    layers.append(
        image_layer(
            truth.flatfield,
            f"{name}: true flatfield",
            flat_geometry,
            metadata={"intensity_unit": "ratio"},
            colormap="viridis",
            visible=False,
        )
    )
    if dark_offset is not None:
        layers.append(
            image_layer(
                truth.darkfield,
                f"{name}: true darkfield",
                flat_geometry,
                metadata={"intensity_unit": "ADU"},
                colormap="magma",
                visible=False,
            )
        )
    # The tiles last: napari selects the newest layer, which the dock takes as its input.
    layers.append(image_layer(truth.images, name, _GEOMETRY, metadata=metadata, colormap="gray"))
    return layers


def vignetted_tiles() -> list[LayerDataTuple]:
    """napari sample: 60 vignetted 256 x 256 uint16 tiles, plus the true flatfield (hidden)."""
    return _layers(None, "vignetted tiles")


def vignetted_tiles_with_offset() -> list[LayerDataTuple]:
    """napari sample: the tiles with a camera offset of 100 ADU and a darkfield bump, plus the
    true flatfield and darkfield (hidden)."""
    return _layers(100.0, "tiles with offset")


def demo_params(sample_kwargs: dict) -> object:
    """Parameters of the headless demo on a flat-field sample: the defaults (automatic
    smoothness), with the darkfield estimated on the sample that has an offset."""
    from napari_gpuscope.compute.flatfield import BasicParams

    with_offset = sample_kwargs.get("metadata", {}).get("sample", {}).get("dark_offset_adu")
    return BasicParams(get_darkfield=with_offset is not None)

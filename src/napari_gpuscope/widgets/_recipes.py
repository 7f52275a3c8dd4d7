"""Save and load batch recipes from a dock (the "Recipe" row: Save... / Load...).

A recipe saved from a dock holds the parameters the dock would run with (``dock.params()``),
the facts of its input layer (axes, pixel size, units, dtype) and the layer as provenance; it
is what ``napari-gpuscope run`` applies to a whole experiment (``docs/batch.md``). Loading one
sets the dock's controls; parameters the dock takes from the layer (e.g. TV's spacing) or does
not show are named in the status line when the recipe's value differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from qtpy.QtWidgets import QFileDialog, QHBoxLayout, QPushButton, QWidget

from napari_gpuscope.batch.recipe_sections import Artifact, ArtifactFile, InputFacts, file_sha256
from napari_gpuscope.batch.recipes import Recipe, load_recipe

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.dock.context import DockContext

__all__ = ["RecipeRow", "apply_recipe", "pinned_artifact", "recipe_from_dock"]

FILE_FILTER = "Recipe (*.yaml *.yml)"


def input_facts(layer: napari.layers.Image | None) -> InputFacts:
    """The facts of an image layer that a batch run checks its inputs against (its axes only
    when every axis has a label of its own)."""
    if layer is None:
        return InputFacts()
    units = [str(getattr(unit, "units", unit)) for unit in getattr(layer, "units", ()) or ()]
    labels = [str(label) for label in layer.axis_labels]
    return InputFacts(
        axes=None if any(_unlabelled(label) for label in labels) else labels,
        pixel_size=[float(step) for step in layer.scale],
        units=units if units and all(units) else None,
        ndim=int(layer.ndim),
        dtype=str(getattr(layer.data, "dtype", "")) or None,
    )


def _unlabelled(label: str) -> bool:
    """napari's placeholder for an axis without a label (``"-3"``, ``"-2"``, ``"-1"``), which
    says nothing about a batch run's inputs (recorded, every file's axes, ``"tyx"``, differed).

    Examples
    --------
    >>> [_unlabelled(label) for label in ("-2", "t", "y")]
    [True, False, False]
    """
    return label.startswith("-") and label[1:].isdigit()


def write_artifacts(dock: DockContext, recipe_path: Path) -> list[Artifact]:
    """Write the dock's job inputs (:meth:`recipe_artifacts`: a dark frame, a mask layer, a
    loaded drift trace) beside the recipe, ``<recipe stem>.<artifact name>.<ext>``, pinned by
    their SHA-256 and named relative to the recipe, as ``napari-gpuscope recipe --artifact``
    names them. An image is a TIFF; a drift trace (anything with ``to_csv``, a
    :class:`~napari_gpuscope.compute.esrrf.DriftResult`) is its CSV: ``(dy, dx)`` per frame in
    input pixels, every float written exactly (``repr``), which is what the job reads back."""
    import numpy as np
    import tifffile

    artifacts = []
    for name, (value, _source) in dock.recipe_artifacts().items():
        if hasattr(value, "to_csv"):
            file = value.to_csv(recipe_path.with_name(f"{recipe_path.stem}.{name}.csv"))
        else:
            file = recipe_path.with_name(f"{recipe_path.stem}.{name}.tif")
            tifffile.imwrite(file, np.ascontiguousarray(np.asarray(value)))
        artifacts.append(Artifact(name=name, path=file.name, sha256=file_sha256(file)))
    return artifacts


def pinned_artifact(name: str, file: Path, others: tuple[Path, ...] = ()) -> Artifact:
    """An artifact written beside a recipe (``file`` and the ``others`` it consists of, e.g. a
    profile's JSON sidecar), each pinned by its SHA-256 and named relative to the recipe."""
    return Artifact(
        name=name,
        path=file.name,
        sha256=file_sha256(file),
        files=[ArtifactFile(path=other.name, sha256=file_sha256(other)) for other in others],
    )


def recipe_from_dock(dock: DockContext, artifacts: list[Artifact] | None = None) -> Recipe:
    """The recipe for the dock's current parameters, input layer and ``artifacts`` (raises
    ValueError for invalid parameters)."""
    layer = dock.input_layer
    source = None
    if layer is not None:
        path = getattr(getattr(layer, "source", None), "path", None)
        source = f"layer {layer.name!r}" + (f" ({path})" if path else "")
    return Recipe.from_params(
        dock.params(), input=input_facts(layer), artifacts=artifacts, source=source
    )


def apply_recipe(dock: DockContext, recipe: Recipe) -> list[str]:
    """Set the dock's controls from a recipe; returns the parameters it could not set.

    Raises
    ------
    ValueError
        The recipe is for another method.
    """
    if recipe.method != dock.method_id:
        raise ValueError(
            f"this recipe is for {recipe.method!r}, not {dock.method_id!r}: load it in the "
            f"{recipe.method} dock"
        )
    dock.set_params(recipe.params_model())
    shown = dock.params().to_dict()
    return [name for name, value in recipe.params.items() if shown.get(name) != value]


class RecipeRow(QWidget):
    """The dock's "Recipe" row: "Save..." and "Load..." buttons (short: the dock stays narrow).

    It talks to its dock through :class:`~napari_gpuscope.dock.context.DockContext` (the
    parameters, the input layer, the status line).
    """

    def __init__(self, dock: DockContext) -> None:
        super().__init__()
        self.dock = dock
        self.save_button = QPushButton("Save...")
        self.save_button.setToolTip(
            "Save these parameters and the input's facts as a YAML recipe, to run them over a "
            "whole experiment with 'napari-gpuscope run' (docs/batch.md)"
        )
        self.save_button.clicked.connect(lambda: self.save())
        self.load_button = QPushButton("Load...")
        self.load_button.setToolTip("Set the parameters from a saved recipe")
        self.load_button.clicked.connect(lambda: self.load())
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.save_button)
        layout.addWidget(self.load_button)

    def save(self, path: str | Path | None = None) -> Path | None:
        """Write the recipe (asks for a file when ``path`` is None); None when cancelled or
        when the parameters are invalid (the status line says why)."""
        try:
            recipe = recipe_from_dock(self.dock)
        except ValueError as exc:
            self.dock.set_status(f"Recipe not saved: {exc}")
            return None
        if path is None:
            layer = self.dock.input_layer
            stem = f"{layer.name if layer is not None else 'recipe'}-{self.dock.method_id}"
            name, _ = QFileDialog.getSaveFileName(self, "Save recipe", f"{stem}.yaml", FILE_FILTER)
            if not name:
                return None
            path = Path(name) if Path(name).suffix else Path(name).with_suffix(".yaml")
        path = Path(path)
        if self.dock.recipe_artifacts():  # the job's inputs, written beside the recipe
            try:
                recipe = recipe_from_dock(self.dock, write_artifacts(self.dock, path))
            except (ValueError, OSError) as exc:
                self.dock.set_status(f"Recipe not saved: {exc}")
                return None
        written = recipe.save(path)
        text = f"Recipe saved to {written.name} (recipe {recipe.hash()[:12]})."
        notes = self.dock.recipe_notes()
        if notes:  # a run here would differ from the recipe's: say how
            text += " Note: " + "; ".join(notes) + "."
        self.dock.set_status(text)
        return written

    def load(self, path: str | Path | None = None) -> Recipe | None:
        """Read a recipe and set the dock's parameters from it (asks for a file when ``path`` is
        None); None when cancelled or invalid (the status line says why)."""
        if path is None:
            name, _ = QFileDialog.getOpenFileName(self, "Load recipe", "", FILE_FILTER)
            if not name:
                return None
            path = name
        try:
            recipe = load_recipe(path)
            unset = apply_recipe(self.dock, recipe)
        except ValueError as exc:
            self.dock.set_status(f"Recipe not loaded: {exc}")
            return None
        text = f"Recipe {Path(path).name} loaded."
        if unset:
            text += (
                f" Not set from it (this dock takes them from the layer or does not show "
                f"them): {', '.join(unset)}."
            )
        self.dock.set_status(text)
        return recipe

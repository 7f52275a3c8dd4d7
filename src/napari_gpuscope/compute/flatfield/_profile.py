"""The fitted shading profile: flatfield, darkfield, baseline and how they were obtained."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..results import Geometry, LayerDataTuple, image_layer, result_name
from ._params import BasicParams

__all__ = ["DARKFIELD_SOURCES", "ShadingProfile"]

DARKFIELD_SOURCES = ("none", "estimated", "offset", "frame")
_FORMAT = "napari-gpuscope shading profile"
_VERSION = 1


@dataclass(frozen=True)
class ShadingProfile:
    """A BaSiC shading profile: ``image_n = baseline_n * flatfield + darkfield + foreground_n``.

    Correct an image with ``(image - darkfield) / flatfield`` (:func:`correct`).

    Attributes
    ----------
    flatfield : numpy.ndarray
        float32 ``(Y, X)``, mean 1 (``(P, Y, X)`` for ``P`` problems fitted together).
    darkfield : numpy.ndarray
        float32, same shape, in the images' units (zeros when none was used).
    baseline : numpy.ndarray
        float32 ``(T,)`` (``(P, T)``): each image's background level, in intensity units.
    params : BasicParams
        The parameters as requested.
    smoothness_flatfield, smoothness_darkfield : tuple of float
        The smoothness actually used, per problem (the automatic value when requested).
    darkfield_source : {"none", "estimated", "offset", "frame"}
        Where the darkfield came from.
    converged : tuple of bool
        Per problem: reweighting met ``reweighting_tol``, the last ALM pass met
        ``optimization_tol``, and everything is finite.
    reweight_passes, alm_iterations : tuple of int
        Per problem: reweighting passes run; inner iterations of the last pass.
    alm_residual, reweight_score : tuple of float
        Per problem: the last pass's ``||residual|| / ||images||`` and the last change.
    offset : tuple of float
        Per problem: the flat part of an estimated darkfield (0 otherwise).
    working_shape : tuple of int
        The fit's image shape.
    stopped_early : bool
        The user stopped the fit and kept the profile of the last pass.
    batch_axis : int or None
        The axis of independent problems of the fitted input (None: one problem).

    Examples
    --------
    >>> import numpy as np
    >>> p = ShadingProfile.from_arrays(np.ones((4, 4)), darkfield=np.full((4, 4), 100.0))
    >>> p.darkfield_source, float(p.darkfield.mean())
    ('frame', 100.0)
    """

    flatfield: np.ndarray
    darkfield: np.ndarray
    baseline: np.ndarray
    params: BasicParams = field(default_factory=BasicParams)
    smoothness_flatfield: tuple[float, ...] = ()
    smoothness_darkfield: tuple[float, ...] = ()
    darkfield_source: str = "none"
    converged: tuple[bool, ...] = ()
    reweight_passes: tuple[int, ...] = ()
    alm_iterations: tuple[int, ...] = ()
    alm_residual: tuple[float, ...] = ()
    reweight_score: tuple[float, ...] = ()
    offset: tuple[float, ...] = ()
    working_shape: tuple[int, int] = (0, 0)
    stopped_early: bool = False
    batch_axis: int | None = None

    @classmethod
    def from_arrays(
        cls,
        flatfield: Any,
        darkfield: Any = None,
        *,
        camera_offset: float | None = None,
        normalize: bool = True,
    ) -> ShadingProfile:
        """A profile from a flatfield you have (e.g. Fiji's) and a dark frame or offset.

        ``normalize`` divides the flatfield by its mean (corrected images keep their scale).
        """
        flat = np.asarray(flatfield, dtype=np.float64)
        if flat.ndim not in (2, 3) or not np.isfinite(flat).all() or (flat <= 0).any():
            raise ValueError("flatfield must be a finite, positive 2D (Y, X) or 3D (P, Y, X) array")
        if normalize:
            flat = flat / flat.mean(axis=(-2, -1), keepdims=True)
        source = "none"
        dark = np.zeros_like(flat)
        if darkfield is not None and camera_offset is not None:
            raise ValueError("give either a darkfield frame or a camera_offset, not both")
        if darkfield is not None:
            dark = np.broadcast_to(np.asarray(darkfield, dtype=np.float64), flat.shape)
            source = "frame"
        elif camera_offset is not None:
            dark = np.full_like(flat, float(camera_offset))
            source = "offset"
        return cls(
            flatfield=flat.astype(np.float32),
            darkfield=np.array(dark, dtype=np.float32),
            baseline=np.zeros((*flat.shape[:-2], 0), dtype=np.float32),
            params=BasicParams(camera_offset=camera_offset),
            darkfield_source=source,
        )

    @property
    def problems(self) -> int:
        """Number of independent profiles (1 for a single ``(Y, X)`` profile)."""
        return 1 if self.flatfield.ndim == 2 else self.flatfield.shape[0]

    @property
    def all_converged(self) -> bool:
        """Every problem converged (False for a loaded profile without fit facts)."""
        return bool(self.converged) and all(self.converged) and not self.stopped_early

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for provenance (everything but the arrays)."""
        return {
            "params": self.params.to_dict(),
            "smoothness_flatfield": [float(v) for v in self.smoothness_flatfield],
            "smoothness_darkfield": [float(v) for v in self.smoothness_darkfield],
            "darkfield_source": self.darkfield_source,
            "converged": [bool(v) for v in self.converged],
            "reweight_passes": [int(v) for v in self.reweight_passes],
            "alm_iterations": [int(v) for v in self.alm_iterations],
            "alm_residual": [float(v) for v in self.alm_residual],
            "reweight_score": [float(v) for v in self.reweight_score],
            "offset": [float(v) for v in self.offset],
            "working_shape": [int(v) for v in self.working_shape],
            "stopped_early": bool(self.stopped_early),
            "batch_axis": self.batch_axis,
            "shape": list(self.flatfield.shape),
            "flatfield_range": [float(self.flatfield.min()), float(self.flatfield.max())],
            "automatic": self.automatic_choices(),
        }

    def automatic_choices(self) -> dict[str, str]:
        """The smoothness chosen from the data where it was left automatic (None, BaSiCPy's
        rule from the mean image's spectrum; :class:`napari_gpuscope.provenance.
        AutomaticChoices`); nothing for a loaded profile (its fit's choices are its own).

        Examples
        --------
        >>> import numpy as np
        >>> from napari_gpuscope.compute.flatfield import BasicParams
        >>> one, zero = np.ones((4, 4), np.float32), np.zeros((4, 4), np.float32)
        >>> profile = ShadingProfile(one, zero, np.ones(3, np.float32), params=BasicParams(),
        ...                          smoothness_flatfield=(0.0123,), converged=(True,))
        >>> profile.automatic_choices()
        {'flatfield smoothness': '0.0123'}
        """
        if not self.converged:
            return {}
        choices = {}
        pairs = (
            ("flatfield smoothness", self.params.smoothness_flatfield, self.smoothness_flatfield),
            ("darkfield smoothness", self.params.smoothness_darkfield, self.smoothness_darkfield),
        )
        for name, asked, used in pairs:
            if asked is None and used:
                choices[name] = ", ".join(f"{v:.3g}" for v in used)
        return choices

    def describe(self) -> str:
        """One line in plain words, e.g. ``"converged after 4 reweighting passes (...)"``."""
        if not self.converged:
            return f"loaded profile, flatfield {self._range()}, darkfield: {self.darkfield_source}"
        lam = ", ".join(f"{v:.3g}" for v in self.smoothness_flatfield)
        lam = f"auto → {lam}" if self.params.smoothness_flatfield is None else lam
        facts = f"flatfield {self._range()}, smoothness {lam}, darkfield: {self.darkfield_source}"
        if self.darkfield_source == "estimated":
            facts += f" (mean {float(self.darkfield.mean()):.4g})"
        passes = max(self.reweight_passes)
        if self.stopped_early:
            return f"stopped early by request after {passes} reweighting passes ({facts})"
        if self.all_converged:
            return f"converged after {passes} reweighting passes ({facts})"
        bad = sum(not c for c in self.converged)
        which = "" if self.problems == 1 else f" for {bad} of {self.problems} problems"
        reason = (
            "a non-finite value appeared"
            if not all(np.isfinite(self.alm_residual))
            else f"the tolerances were not met within {self.params.max_reweight_iterations} "
            f"passes / {self.params.max_iterations} iterations (change "
            f"{max(self.reweight_score):.2g}, residual {max(self.alm_residual):.2g})"
        )
        return f"NOT converged{which}: {reason} ({facts})"

    def _range(self) -> str:
        return f"{float(self.flatfield.min()):.3f}-{float(self.flatfield.max()):.3f}"

    def layers(
        self,
        name: str = "images",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """The flatfield (ratio, colormap "viridis"), ``"flatfield · <name> [<settings>]"``,
        and, when used, the darkfield, ``"darkfield · <name> [<settings>]"``."""
        if geometry is not None:
            full = geometry.trailing(4)
            known = len(full.scale or full.units or full.axis_labels or full.translate or ())
            if self.flatfield.ndim == 3 and self.batch_axis is not None and known == 4:
                # (P, Y, X), one profile per problem: the input's problem axis, then Y, X
                geometry = full.select([self.batch_axis, 2, 3])
            else:
                geometry = geometry.trailing(self.flatfield.ndim)
        meta = dict(metadata or {})
        flat_meta = {**meta, "intensity_unit": "ratio", "quantity": "flatfield"}
        label = self.params.label
        out = [
            image_layer(
                self.flatfield,
                result_name("flatfield", name, label),
                geometry,
                metadata=flat_meta,
                colormap="viridis",
            )
        ]
        if self.darkfield_source != "none":
            out.append(
                image_layer(
                    self.darkfield,
                    result_name("darkfield", name, label),
                    geometry,
                    metadata={**meta, "quantity": "darkfield"},
                    colormap="magma",
                )
            )
        return out

    # -- persistence ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write ``<path>.tif`` (flatfield, darkfield as two float32 pages per problem... as a
        ``(2, Y, X)`` or ``(P, 2, Y, X)`` ImageJ hyperstack) and ``<path>.json`` (parameters,
        smoothness used, fit facts, baseline). Returns the TIFF path.

        Examples
        --------
        >>> import numpy as np, tempfile, pathlib
        >>> p = ShadingProfile.from_arrays(np.ones((4, 4)), camera_offset=100)
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> ShadingProfile.load(p.save(folder / "scope")).darkfield_source
        'offset'
        """
        import tifffile

        _check_usable(self.flatfield, self.darkfield, "this profile (not saved)")
        base = Path(path)
        if base.suffix.lower() in (".tif", ".tiff", ".json"):
            base = base.with_suffix("")
        stack = np.stack([self.flatfield, self.darkfield], axis=-3).astype(np.float32)
        tiff_path = base.with_suffix(".tif")
        tifffile.imwrite(
            tiff_path,
            stack,
            imagej=True,
            metadata={"axes": "CYX" if stack.ndim == 3 else "ZCYX"},
        )
        facts = self.summary()
        facts.update(
            format=_FORMAT,
            version=_VERSION,
            tiff=tiff_path.name,
            baseline=np.asarray(self.baseline, dtype=np.float64).tolist(),
        )
        base.with_suffix(".json").write_text(json.dumps(facts, indent=2))
        return tiff_path

    @classmethod
    def load(cls, path: str | Path) -> ShadingProfile:
        """Read a profile written by :meth:`save` (give the ``.tif``, the ``.json`` or the stem)."""
        import tifffile

        base = Path(path)
        if base.suffix.lower() in (".tif", ".tiff", ".json"):
            base = base.with_suffix("")
        json_path = base.with_suffix(".json")
        if not json_path.exists():
            raise FileNotFoundError(f"no profile description {json_path} next to the TIFF")
        facts = json.loads(json_path.read_text())
        if facts.get("format") != _FORMAT:
            raise ValueError(f"{json_path} is not a {_FORMAT} (format {facts.get('format')!r})")
        stack = np.asarray(tifffile.imread(base.parent / facts["tiff"]), dtype=np.float32)
        expected = tuple(facts["shape"])
        stack = stack.reshape((*expected[:-2], 2, *expected[-2:]))
        _check_usable(
            stack[..., 0, :, :], stack[..., 1, :, :], f"profile {base.parent / facts['tiff']}"
        )
        return cls(
            flatfield=np.ascontiguousarray(stack[..., 0, :, :]),
            darkfield=np.ascontiguousarray(stack[..., 1, :, :]),
            baseline=np.asarray(facts["baseline"], dtype=np.float32),
            params=BasicParams.from_dict(facts["params"]),
            smoothness_flatfield=tuple(facts["smoothness_flatfield"]),
            smoothness_darkfield=tuple(facts["smoothness_darkfield"]),
            darkfield_source=facts["darkfield_source"],
            converged=tuple(facts["converged"]),
            reweight_passes=tuple(facts["reweight_passes"]),
            alm_iterations=tuple(facts["alm_iterations"]),
            alm_residual=tuple(facts["alm_residual"]),
            reweight_score=tuple(facts["reweight_score"]),
            offset=tuple(facts["offset"]),
            working_shape=tuple(facts["working_shape"]),
            stopped_early=facts["stopped_early"],
            batch_axis=facts["batch_axis"],
        )


def _check_usable(flatfield: np.ndarray, darkfield: np.ndarray, what: str) -> None:
    """Refuse a profile that would corrupt every image it corrects: a non-finite or non-positive
    flatfield (e.g. the NaN profile of an all-zero stack) or a non-finite darkfield."""
    problems = []
    if not np.isfinite(flatfield).all():
        problems.append(f"{int((~np.isfinite(flatfield)).sum())} non-finite flatfield values")
    elif (flatfield <= 0).any():
        problems.append(f"{int((flatfield <= 0).sum())} flatfield values <= 0")
    if not np.isfinite(darkfield).all():
        problems.append(f"{int((~np.isfinite(darkfield)).sum())} non-finite darkfield values")
    if problems:
        raise ValueError(
            f"{what}: {' and '.join(problems)}; a profile must have a finite, positive "
            "flatfield and a finite darkfield (fit it again on images with signal)"
        )

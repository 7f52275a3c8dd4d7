"""What a TV denoising job returns: the image, the parameters and solver facts it was made
with, and its summary, description and layers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..camera import CameraModel
from ..results import Geometry, LayerDataTuple, image_layer, result_name
from ._params import TVParams

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._types import JSONDict

__all__ = ["TVResult"]


@dataclass(frozen=True)
class TVResult:
    """Denoised image and the facts needed to trust and reproduce it.

    Attributes
    ----------
    image : numpy.ndarray
        float32, same shape as the input, in the input's intensity units.
    params : TVParams
        The parameters as requested (``weight`` None means it was derived from ``strength``).
    weight : float
        TV weight used (image units; Anscombe units for ``noise_model="poisson"``).
    noise_sigma : float or None
        Noise level estimated from the image when the weight was derived from the strength in
        the Gaussian model, else None.
    iterations : int
        Iterations run (the largest over chunks and independent problems).
    relative_gap : float
        Relative duality gap ``(P(u) - D(y)) / P(u)`` of the returned image (the largest over
        independent problems; in Anscombe units for ``noise_model="poisson"``): an upper
        bound on ``(P(u) - P*) / P(u)``. For a volume split into chunks it is computed on the
        stitched result, in float64 (FGP runs the unchunked iterations chunk by chunk, so the
        result is the unchunked one). 0 when nothing had to be solved.
    converged : bool
        FGP: every problem reached ``relative_gap <= tolerance``. Chambolle: scikit-image's
        stopping rule fired for every problem (or the problem was constant, hence solved
        exactly), which says nothing about the gap. Never True for a run stopped early or a
        result with NaN.
    spacing : tuple of float
        Difference weight of every non-channel axis.
    chunks : int
        Number of device chunks (1 when everything fit at once).
    camera : CameraModel or None
        Camera parameters used in Poisson mode.
    stopped_early : bool
        The user asked to stop and keep the result so far.
    unprocessed_fraction : float
        Fraction of the voxels left as the input (clipped at 0 in non-negative mode) because
        the run was stopped before their chunk was reached (0 unless ``stopped_early`` with
        several chunks).
    kernel_paths : dict of str to str
        Which implementation of each fused operation ran and why (FGP), e.g. ``{"fgp_step":
        "fused kernel (verified against the twin)"}``.
    """

    image: np.ndarray
    params: TVParams
    weight: float
    iterations: int
    relative_gap: float
    converged: bool
    spacing: tuple[float, ...]
    chunks: int
    noise_sigma: float | None = None
    camera: CameraModel | None = None
    stopped_early: bool = False
    unprocessed_fraction: float = 0.0
    kernel_paths: dict[str, str] = field(default_factory=dict)
    intensity_unit: str = ""
    """The input's intensity unit (e.g. ``"ADU"``), which σ is in; the array knows none, the
    dock sets it from the layer (:meth:`with_intensity_unit`)."""

    @property
    def method(self) -> str:
        """The solver that ran."""
        return self.params.method

    @property
    def noise_model(self) -> str:
        """The noise model used."""
        return self.params.noise_model

    @property
    def poisson(self) -> CameraModel | None:
        """The camera model of Poisson mode (alias of :attr:`camera`)."""
        return self.camera

    def with_intensity_unit(self, unit: str | None) -> TVResult:
        """The same result whose status and automatic choices say σ in ``unit``.

        Examples
        --------
        >>> import numpy as np
        >>> from napari_gpuscope.compute import tv
        >>> result = TVResult(np.zeros((4, 4), np.float32), tv.TVParams(strength=2.0), 0.2,
        ...                   10, 1e-4, True, (1.0, 1.0), 1, noise_sigma=0.1)
        >>> result.with_intensity_unit("ADU").automatic_choices()
        {'TV weight': '0.2 = strength 2 × noise σ 0.1 ADU'}
        """
        return dataclasses.replace(self, intensity_unit=unit or "")

    @property
    def _sigma_text(self) -> str:
        unit = f" {self.intensity_unit}" if self.intensity_unit else ""
        return f"{self.noise_sigma:.4g}{unit}"

    def automatic_choices(self) -> dict[str, str]:
        """The values chosen from the data (:class:`napari_gpuscope.provenance.
        AutomaticChoices`): the weight from the measured noise (Gaussian model with a
        strength), the camera model estimated from the image (Poisson mode without a gain).

        Examples
        --------
        >>> import numpy as np
        >>> from napari_gpuscope.compute import tv
        >>> result = TVResult(np.zeros((4, 4), np.float32), tv.TVParams(strength=2.0), 0.2,
        ...                   10, 1e-4, True, (1.0, 1.0), 1, noise_sigma=0.1)
        >>> result.automatic_choices()
        {'TV weight': '0.2 = strength 2 × noise σ 0.1'}
        """
        out = {}
        if self.noise_sigma is not None:
            out["TV weight"] = (
                f"{self.weight:.4g} = strength {self.params.strength:g} × noise σ "
                f"{self._sigma_text}"
            )
        if self.camera is not None and self.params.gain is None:
            camera = self.camera
            out["camera model"] = (
                f"gain {camera.gain:.4g}, offset {camera.offset:.4g}, read noise "
                f"{camera.read_noise:.4g} (estimated)"
            )
        return out

    def summary(self) -> JSONDict:
        """JSON-able facts for provenance (everything but the image)."""
        return {
            "params": self.params.to_dict(),
            "weight": float(self.weight),
            "noise_sigma": None if self.noise_sigma is None else float(self.noise_sigma),
            "iterations": int(self.iterations),
            "relative_gap": float(self.relative_gap),
            "converged": bool(self.converged),
            "method": self.method,
            "noise_model": self.noise_model,
            "spacing": [float(s) for s in self.spacing],
            "chunks": int(self.chunks),
            "camera": None if self.camera is None else dataclasses.asdict(self.camera),
            "stopped_early": bool(self.stopped_early),
            "unprocessed_fraction": float(self.unprocessed_fraction),
            "kernel_paths": dict(self.kernel_paths),
            "automatic": self.automatic_choices(),
        }

    def describe(self) -> str:
        """One line in plain words, e.g. ``"converged in 80 iterations (relative gap 9.5e-04
        <= tolerance 1e-03, weight 6.18 = strength 1 x noise σ 6.18)"``."""
        params = self.params
        gap = f"relative gap {self.relative_gap:.1e}"
        if params.method == "fgp":
            below = self.relative_gap <= params.tolerance
            gap += f" {'<=' if below else '>'} tolerance {params.tolerance:.0e}"
        facts = f"{gap}, weight {self.weight:.4g}"
        if self.noise_sigma is not None:
            facts += f" = strength {params.strength:g} x noise σ {self._sigma_text}"
        elif params.weight is None and params.noise_model == "poisson":
            facts += f" = strength {params.strength:g} (Anscombe units)"
        if self.camera is not None and params.gain is None:
            # Estimated from the image: a choice the status names, as the noise above.
            facts += f", camera gain {self.camera.gain:.3g} estimated"
        if self.chunks > 1:
            facts += f", {self.chunks} chunks"
        if self.stopped_early:
            left = ""
            if self.unprocessed_fraction > 0:
                left = (
                    f"; {self.unprocessed_fraction:.0%} of the image was not reached and is "
                    "left as the input"
                )
            return f"stopped early by request after {self.iterations} iterations ({facts}){left}"
        if self.iterations == 0:
            if self.weight > 0:
                return (
                    "nothing to solve: the weight is negligible next to the data, so the input "
                    f"is its own solution to float32 precision ({facts})"
                )
            return f"nothing to solve ({facts})"
        if params.method == "chambolle":
            if self.converged and self.relative_gap == 0:
                return f"solved exactly: the image is constant along the smoothed axes ({facts})"
            chunked = ""
            if self.chunks > 1:
                chunked = "; split into chunks, so not identical to scikit-image's result"
            if self.converged:
                # scikit-image's rule compares successive energies; it says nothing about the
                # distance to the optimum, which the gap bounds.
                return (
                    f"stopped by scikit-image's energy-change rule (eps {params.tolerance:g}) "
                    f"after {self.iterations} iterations ({facts}){chunked}"
                )
            return (
                f"stopped at the iteration limit ({params.max_iterations}) before "
                f"scikit-image's energy-change rule fired ({facts}){chunked}"
            )
        if self.converged:
            return f"converged in {self.iterations} iterations ({facts})"
        return (
            f"stopped at the iteration limit ({params.max_iterations}) before reaching the "
            f"tolerance ({facts})"
        )

    def layers(
        self,
        name: str = "image",
        geometry: Geometry | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> list[LayerDataTuple]:
        """One image layer, ``"TV denoised · <name> [s=1]"`` (or ``w=<weight>``), in the input's
        units.

        No colormap or contrast limits are set: a viewer shows the result like its input.
        """
        return [
            image_layer(
                self.image,
                result_name("TV denoised", name, self.params.label),
                geometry,
                metadata=metadata,
            )
        ]

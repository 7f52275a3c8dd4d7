"""The clip job and its result (result protocol: summary, describe, layers, stopped_early)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from napari_gpuscope.compute.jobs import Job, Progress, blocking, is_stop
from napari_gpuscope.compute.results import Geometry, LayerDataTuple, image_layer, result_name
from napari_gpuscope.compute.signatures import takes_params

from ._params import ClipParams


@dataclass(frozen=True)
class ClipResult:
    """The clipped image and how much of it was clipped."""

    image: np.ndarray
    params: ClipParams
    clipped_fraction: float
    stopped_early: bool = False

    def summary(self) -> dict[str, Any]:
        return {"clipped_fraction": self.clipped_fraction, "stopped_early": self.stopped_early}

    def describe(self) -> str:
        early = ", stopped early by request" if self.stopped_early else ""
        return f"{100 * self.clipped_fraction:.1f} % of the pixels clipped{early}"

    def layers(
        self,
        name: str = "image",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        title = result_name("clipped", name, self.params.label)
        return [image_layer(self.image, title, geometry, metadata=metadata)]


@takes_params(ClipParams)
def iter_clip(data: Any, params: ClipParams, *, device: str | None = None) -> Job[ClipResult]:
    """Clip ``data`` block by block of rows (NumPy: any device; STOP keeps what is done).

    Parameters
    ----------
    data : array-like
        The image.
    {params}
    device : str, optional
        Ignored (NumPy).
    """
    del device
    image = np.asarray(data, dtype=np.float32)
    out = image.copy()
    rows = np.array_split(np.arange(image.shape[-2]), params.blocks)
    stopped = False
    for index, block in enumerate(rows):
        command = yield Progress(index / len(rows), f"block {index + 1} of {len(rows)}")
        if is_stop(command):
            stopped = True
            break
        out[..., block, :] = np.clip(image[..., block, :], params.low, params.high)
    changed = float(np.mean(out != image))
    return ClipResult(out, params, changed, stopped_early=stopped)


clip = blocking(iter_clip, unwrap=lambda result: result.image)

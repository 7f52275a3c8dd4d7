"""BaSiC flat-field (shading) correction on the GPU.

Fits ``image_n = baseline_n * flatfield + darkfield + foreground_n`` to a stack of tiles or
frames (BaSiCPy 2.0's approximate mode, with its bugs fixed: see :mod:`._alm`) and corrects
images with the profile: ``(image - darkfield) / flatfield``.

- :func:`iter_fit_basic` / :func:`fit_basic` -> :class:`ShadingProfile` (flatfield with mean
  1, darkfield, per-image baseline, the parameters and smoothness used, an honest converged
  flag); :class:`BasicParams` holds every parameter;
- :func:`iter_correct` / :func:`correct`: apply a fitted or loaded profile, streamed in
  chunks (timelapse: per-frame baseline removal as BaSiCPy's transform);
- :func:`autotune`: choose the smoothness by BaSiCPy's entropy + Fourier-L0 cost, candidates
  fitted together in one batch;
- :meth:`ShadingProfile.save` / :meth:`ShadingProfile.load`: TIFF + JSON;
- :data:`batch_hooks` (:mod:`._batch`): batch runs fit one profile on every position (or load
  the recipe's saved profile) and correct each position with it.
"""

from . import _batch as batch_hooks
from ._autotune import CANDIDATES, AutotuneResult, autotune, iter_autotune
from ._correct import correct, iter_correct, timelapse_baseline
from ._fit import OUTPUTS, fit_basic, iter_fit_basic
from ._params import BasicParams
from ._profile import DARKFIELD_SOURCES, ShadingProfile

__all__ = [
    "CANDIDATES",
    "DARKFIELD_SOURCES",
    "OUTPUTS",
    "AutotuneResult",
    "BasicParams",
    "ShadingProfile",
    "autotune",
    "batch_hooks",
    "correct",
    "fit_basic",
    "iter_autotune",
    "iter_correct",
    "iter_fit_basic",
    "timelapse_baseline",
]

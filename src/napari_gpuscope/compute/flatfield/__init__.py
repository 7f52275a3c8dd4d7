"""BaSiC flat-field (shading) correction on the GPU.

Fits ``image_n = baseline_n * flatfield + darkfield + foreground_n`` to a stack of tiles or
frames (BaSiCPy 2.0's approximate mode, with its bugs fixed: see :mod:`._alm`) and corrects
images with the profile: ``(image - darkfield) / flatfield``.

- :func:`iter_fit_basic` / :func:`fit_basic` -> :class:`ShadingProfile` (flatfield with mean
  1, darkfield, per-image baseline, the parameters and smoothness used, an honest converged
  flag); :class:`BasicParams` holds every parameter;
- :func:`iter_apply_profile` / :func:`apply_profile` -> :class:`CorrectionResult`: the apply
  job (the dock's Apply, batch runs): correct with the apply fields of :class:`BasicParams`
  (``output_dtype``, ``clip_negative``, ``timelapse_baseline``) and measure the shading left
  (:func:`shading_stats`);
- :func:`iter_correct` / :func:`correct`: the array-level correction under it, streamed in
  chunks (timelapse: per-frame baseline removal as BaSiCPy's transform);
- :func:`autotune`: choose the smoothness by BaSiCPy's entropy + Fourier-L0 cost, candidates
  fitted together in one batch;
- :meth:`ShadingProfile.save` / :meth:`ShadingProfile.load`: TIFF + JSON;
- :data:`batch_hooks` (:mod:`._batch`): batch runs of the fit job fit one profile on every
  position (or load the recipe's saved profile) and correct each position with it;
  :data:`apply_hooks`: the apply job's, which only load the saved profile.
"""

from .._lazy import attach

__all__ = [
    "APPLY_FIELDS",
    "CANDIDATES",
    "DARKFIELD_SOURCES",
    "OUTPUTS",
    "OUTPUT_DTYPES",
    "AutotuneResult",
    "BasicParams",
    "CorrectionResult",
    "ShadingProfile",
    "ShadingStats",
    "apply_hooks",
    "apply_profile",
    "autotune",
    "batch_hooks",
    "broadcast_weight",
    "centre_lines",
    "correct",
    "display_limits",
    "fit_basic",
    "iter_apply_profile",
    "iter_autotune",
    "iter_correct",
    "iter_fit_basic",
    "shading_stats",
    "timelapse_baseline",
]

# Each name imports its module when first used (PEP 562, compute/_lazy.py): the parameter
# models and the registry's metadata load without torch (recipe, validate, status).
__getattr__, __dir__ = attach(
    __name__,
    globals(),
    {
        "._apply": [
            "CorrectionResult",
            "ShadingStats",
            "apply_profile",
            "centre_lines",
            "display_limits",
            "iter_apply_profile",
            "shading_stats",
        ],
        "._autotune": ["CANDIDATES", "AutotuneResult", "autotune", "iter_autotune"],
        "._batch": ["apply_hooks"],
        "._correct": ["correct", "iter_correct", "timelapse_baseline"],
        "._fit": ["OUTPUTS", "broadcast_weight", "fit_basic", "iter_fit_basic"],
        "._params": ["APPLY_FIELDS", "OUTPUT_DTYPES", "BasicParams"],
        "._profile": ["DARKFIELD_SOURCES", "ShadingProfile"],
    },
    modules={"batch_hooks": "._batch"},
)

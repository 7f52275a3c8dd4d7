"""Tilt-corrected 2D quantitative phase from a brightfield z-stack.

The model is waveorder's ``isotropic_thin_3d`` (weak-object transfer functions of a thin
sample imaged through focus with partially coherent, possibly tilted illumination), built on the
device with the angle and z parts cached (:mod:`._optics`; a job without a cache of its own
uses the process's cache of its device, keyed by the optics: :func:`shared_cache`). The
inverse is the closed-form 2x2 Tikhonov solve per frequency, least-squares consistent with
the forward model (:mod:`._inverse`); at zero tilt it equals waveorder 3.0.5's SVD inverse, with
tilt waveorder's azimuth is ours + pi (:func:`azimuth_from_waveorder`). The tilt (zenith, azimuth,
focus offset) is estimated per tile by batched NAdam or damped Newton on the midband-power
loss (:mod:`._tilt`, :mod:`._estimate`) and reconstructions with a tilt map blend overlapping
tiles smoothly (:mod:`._tiles`, :mod:`._reconstruct`). A TV-regularised phase (ADMM whose
z-step is the TV method's proximal step, :func:`~napari_gpuscope.compute.tv.prox`, all on the
device) is an option. The Tikhonov strength is chosen per stack by default
(``regularization="auto"``, :mod:`._auto_regularization`). :mod:`._memory` counts the device
memory a reconstruction needs; :mod:`._preview` is the dock's live preview
(:func:`preview_job`, re-solving with the :class:`PhaseSolvers`' kept solver).
"""

from .._lazy import attach

__all__ = [
    "OUTPUTS",
    "NormalEquations",
    "OpticsCache",
    "OpticsKey",
    "PhaseParams",
    "PhaseResult",
    "PhaseSolver",
    "PhaseSolvers",
    "PhaseWarning",
    "TileGrid",
    "TiltMap",
    "TiltResult",
    "azimuth_from_waveorder",
    "azimuth_to_waveorder",
    "batch_hooks",
    "blend_weights",
    "canonical_tilt",
    "clear_shared_caches",
    "estimate_tilt",
    "iter_estimate_tilt",
    "iter_reconstruct",
    "normalize_stack",
    "preview_job",
    "radial_zenith_init",
    "reconstruct",
    "shared_cache",
    "simulate_stack",
    "svd_filter",
    "tikhonov_filter",
    "transfer_functions",
    "z_positions",
]

# Each name imports its module when first used (PEP 562, compute/_lazy.py): the parameter
# models and the registry's metadata load without torch (recipe, validate, status).
__getattr__, __dir__ = attach(
    __name__,
    globals(),
    {
        "._estimate": ["TiltResult"],
        "._inverse": ["NormalEquations", "normalize_stack", "svd_filter", "tikhonov_filter"],
        "._job": [
            "OUTPUTS",
            "azimuth_from_waveorder",
            "azimuth_to_waveorder",
            "estimate_tilt",
            "iter_estimate_tilt",
            "iter_reconstruct",
            "reconstruct",
        ],
        "._optics": [
            "OpticsCache",
            "OpticsKey",
            "clear_shared_caches",
            "shared_cache",
            "transfer_functions",
            "z_positions",
        ],
        "._params": ["PhaseParams", "PhaseWarning"],
        "._preview": ["PhaseSolvers", "preview_job"],
        "._result": ["PhaseResult"],
        "._simulate": ["simulate_stack"],
        "._solver": ["PhaseSolver"],
        "._tiles": [
            "TileGrid",
            "TiltMap",
            "blend_weights",
            "canonical_tilt",
            "radial_zenith_init",
        ],
    },
    modules={"batch_hooks": "._batch"},
)

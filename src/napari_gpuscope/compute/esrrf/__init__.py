"""eSRRF super-resolution on the GPU, NanoPyx-exact, streamed frame by frame.

Enhanced super-resolution radial fluctuations (Laine et al., Nat. Methods 2023) turns a stack of
blinking-fluorophore frames into a super-resolved image: each frame is magnified (Catmull-Rom),
its intensity gradients measure how strongly they converge on every output pixel (radial
gradient convergence, RGC), and the per-frame maps are combined over time (mean, variance or
lag-1 autocovariance) and corrected for the sub-pixel grid pattern.

- :func:`iter_esrrf` / :func:`esrrf`: the reconstruction; ``geometry="nanopyx"`` reproduces
  NanoPyx 2.1.5 ``nanopyx.methods.eSRRF`` (``use_fht=False``) to float32 rounding,
  ``"centred"`` the same method on a pixel-centred grid. Frames stream from host memory
  in chunks planned from free device memory into online temporal statistics (device memory
  O(output), not O(frames x output)).
- QnR (quality and resolution, as NanoJ-eSRRF): :func:`frc_resolution`,
  :func:`resolution_scaled_pearson`, :func:`error_map` and :func:`iter_parameter_sweep` /
  :func:`parameter_sweep`; :func:`decorrelation_resolution` (Descloux et al. 2019, NanoPyx's
  algorithm), the resolution of one image and the sweep's third map.
- :func:`register_channels` / :func:`apply_registration`: channel registration (translation
  per channel, or a smooth per-block map) before eSRRF of multi-channel data;
  :func:`iter_channels` (what :func:`iter_esrrf` does with 4D input): drift, registration and
  eSRRF of each channel.

Modules, by family (a family's first module holds its entry point):

- reconstruction: :mod:`._params`, :mod:`._input` (checks, time points), :mod:`._lattice`
  (sampling geometry, per-phase tap table), :mod:`._ops` (torch twins), :mod:`._kernels` and
  :mod:`._kernel_ops` + ``esrrf.cu`` (fused kernels), :mod:`._pipeline` (one frame chunk),
  :mod:`._temporal` (online statistics, macro-pixel correction), :mod:`._reader` (prefetching
  reads), :mod:`._stream` and :mod:`._stream_result` (one stack streamed, its result),
  :mod:`._job` (the job: a stack or channels), :mod:`._preview` (the dock's live preview of the
  visible region), :mod:`._resample` (Catmull-Rom taps and the correlation window that drift and
  registration share), :mod:`._batch` (batch hooks);
- drift: :mod:`._drift` (the job, :func:`estimate_drift`), :mod:`._drift_params`,
  :mod:`._drift_blocks` (block ranges and sums), :mod:`._drift_correlate` (correlation,
  sub-pixel peak, significance), :mod:`._drift_measure` (the passes of one estimate),
  :mod:`._drift_mean` (the mean reference), :mod:`._drift_trace` (interpolation, ends,
  uncertainty), :mod:`._drift_checks` (refusals), :mod:`._drift_auto` and
  :mod:`._drift_choice` (the automatic block length), :mod:`._drift_result`
  (:class:`DriftResult`), :mod:`._drift_csv` (the trace's CSV file), :mod:`._drift_correct`
  (:func:`correct_drift`);
- resolution and QnR: :mod:`._qnr` (FRC, RSP, error map), :mod:`._decorr` (decorrelation
  analysis) with :mod:`._decorr_region`, :mod:`._decorr_blur`, :mod:`._decorr_curves` and
  :mod:`._decorr_result`, :mod:`._resolution` (the job's ``measure_resolution``),
  :mod:`._sweep` (the sweep job) with :mod:`._sweep_params`, :mod:`._sweep_run` and
  :mod:`._sweep_result`;
- channels: :mod:`._channels` and :mod:`._channels_result` (multi-channel input and result),
  :mod:`._channel_input`, :mod:`._register` (channel registration) with
  :mod:`._register_checks`, :mod:`._register_shifts`, :mod:`._register_blocks` and
  :mod:`._register_sample`.
"""

from .._lazy import attach

__all__ = [
    "CHANNEL_COLORMAPS",
    "DRIFT_FIELDS",
    "DRIFT_REFERENCES",
    "FRC_THRESHOLD",
    "GEOMETRIES",
    "MAX_CHANNELS",
    "OUTPUT",
    "REGISTRATIONS",
    "SWEEP_OUTPUTS",
    "TEMPORAL_MODES",
    "ChannelView",
    "ChannelsResult",
    "DecorrelationResult",
    "DriftParams",
    "DriftResult",
    "ErrorMap",
    "EsrrfParams",
    "EsrrfResult",
    "PreviewRegion",
    "RegistrationResult",
    "ResolutionMeasurement",
    "StackedChannels",
    "SweepParams",
    "SweepResult",
    "apply_registration",
    "correct_drift",
    "decorrelation_resolution",
    "error_map",
    "esrrf",
    "estimate_drift",
    "frc_curve",
    "frc_resolution",
    "guess_channel_axis",
    "iter_channels",
    "iter_correct_drift",
    "iter_esrrf",
    "iter_estimate_drift",
    "iter_parameter_sweep",
    "iter_sweep",
    "load_drift_trace",
    "output_geometry",
    "parameter_sweep",
    "preview_job",
    "qnr_scores",
    "register_channels",
    "resolution_scaled_pearson",
    "time_points",
    "visible_region",
]

# Each name imports its module when first used (PEP 562, compute/_lazy.py): the parameter
# models and the registry's metadata load without torch (recipe, validate, status).
__getattr__, __dir__ = attach(
    __name__,
    globals(),
    {
        "._drift": ["estimate_drift", "iter_estimate_drift"],
        "._drift_correct": ["correct_drift", "iter_correct_drift"],
        "._drift_result": ["DriftResult", "load_drift_trace"],
        "._decorr": ["DecorrelationResult", "decorrelation_resolution"],
        "._resolution": ["ResolutionMeasurement"],
        "._register": ["RegistrationResult", "apply_registration", "register_channels"],
        "._drift_params": ["DRIFT_REFERENCES", "DriftParams"],
        "._input": ["time_points"],
        "._job": ["esrrf", "iter_esrrf"],
        "._stream": ["OUTPUT", "EsrrfResult", "output_geometry"],
        "._params": [
            "DRIFT_FIELDS",
            "GEOMETRIES",
            "REGISTRATIONS",
            "TEMPORAL_MODES",
            "EsrrfParams",
        ],
        "._channels": [
            "CHANNEL_COLORMAPS",
            "MAX_CHANNELS",
            "ChannelView",
            "ChannelsResult",
            "StackedChannels",
            "guess_channel_axis",
            "iter_channels",
        ],
        "._preview": ["PreviewRegion", "preview_job", "visible_region"],
        "._qnr": [
            "FRC_THRESHOLD",
            "ErrorMap",
            "error_map",
            "frc_curve",
            "frc_resolution",
            "qnr_scores",
            "resolution_scaled_pearson",
        ],
        "._sweep": [
            "SWEEP_OUTPUTS",
            "SweepResult",
            "iter_parameter_sweep",
            "iter_sweep",
            "parameter_sweep",
        ],
        "._sweep_params": ["SweepParams"],
    },
)

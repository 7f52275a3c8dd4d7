"""Multi-channel eSRRF as a job (issue 19): ``iter_esrrf`` of 4D input drift-corrects,
registers (``channel_registration``, a recipe parameter) and reconstructs each channel, reading
a lazy channel frame chunk by frame chunk. Oracles: the single-channel job on each channel,
scikit-image's phase_cross_correlation for the channels' overlay, the simulator's known shift."""

from __future__ import annotations

import numpy as np
import pytest
from esrrf_drift_sim import blinking_drifting_stack
from job_helpers import stop_after
from skimage.registration import phase_cross_correlation

from napari_gpuscope.compute import esrrf
from napari_gpuscope.compute.arrays import InvalidInputError
from napari_gpuscope.compute.esrrf import (
    DRIFT_FIELDS,
    ChannelsResult,
    ChannelView,
    DriftParams,
    EsrrfParams,
)
from napari_gpuscope.compute.jobs import run_job

OFFSET = np.array([1.4, -2.2])  # channel 1's content relative to channel 0's, input px


@pytest.fixture(scope="module")
def two_channels():
    """(C, T, Y, X): the same emitters, channel 1 moved by OFFSET, blinking independently."""
    frames = 80
    still = np.zeros((frames, 2))
    first, _ = blinking_drifting_stack(still, shape=(72, 72), n_emitters=120, seed=4)
    second, _ = blinking_drifting_stack(still + OFFSET, shape=(72, 72), n_emitters=120, seed=4)
    second = np.random.default_rng(5).permutation(second)  # blinking independent of channel 0's
    return np.stack([first, second])


class CountingReads:
    """A lazy 4D array (like a Zarr array) that records the largest read."""

    def __init__(self, data):
        self.data, self.shape, self.dtype, self.largest = data, data.shape, data.dtype, 0

    def __getitem__(self, key):
        part = np.asarray(self.data[key])
        self.largest = max(self.largest, part.size)
        return part


def test_each_channel_equals_the_single_channel_job(two_channels, cpu_device):
    params = EsrrfParams(magnification=2)
    result = run_job(esrrf.iter_esrrf(two_channels, params=params, device=cpu_device))
    assert isinstance(result, ChannelsResult) and result.registration is None
    for c in range(2):
        alone = esrrf.esrrf(two_channels[c], params=params, device=cpu_device)
        np.testing.assert_array_equal(result.channels[c].image, alone)
    assert esrrf.esrrf(two_channels, params=params, device=cpu_device).shape == (2, 1, 144, 144)


def test_the_channel_axis_can_be_second_and_is_read_lazily(two_channels, cpu_device):
    params = EsrrfParams(magnification=2)
    expected = esrrf.esrrf(two_channels, params=params, device=cpu_device)
    lazy = CountingReads(np.ascontiguousarray(two_channels.transpose(1, 0, 2, 3)))  # (T, C, Y, X)
    job = esrrf.iter_esrrf(
        lazy, params=params, channel_axis=1, frames_per_chunk=8, device=cpu_device
    )
    result = run_job(job)
    np.testing.assert_array_equal(result.image, expected)
    assert lazy.largest <= 8 * 72 * 72  # one chunk of one channel, never a whole channel
    np.testing.assert_array_equal(ChannelView(lazy, 1, 1)[3], two_channels[1, 3])


def test_translation_registration_from_the_parameters_overlays_the_channels(
    two_channels, cpu_device
):
    params = EsrrfParams(magnification=2, channel_registration="translation")
    result = run_job(esrrf.iter_esrrf(two_channels, params=params, device=cpu_device))
    np.testing.assert_allclose(result.registration.shifts[1], OFFSET, atol=0.1)
    left, _, _ = phase_cross_correlation(result.image[0, 0], result.image[1, 0], upsample_factor=20)
    assert np.hypot(*left) < 0.3, left  # output px; unregistered they are 2 x OFFSET apart
    plain = esrrf.esrrf(two_channels, magnification=2, device=cpu_device)
    apart, _, _ = phase_cross_correlation(plain[0, 0], plain[1, 0], upsample_factor=20)
    np.testing.assert_allclose(apart, -2 * OFFSET, atol=0.3)
    assert result.summary()["registration"]["elastic"] is False
    assert "channel_registration" in params.to_dict()  # recipes and provenance carry it


def test_drift_of_channels_and_the_trace_file(cpu_device):
    frames = 100
    drift = np.column_stack([np.linspace(0, 2.0, frames), np.linspace(0, -1.5, frames)])
    first, _ = blinking_drifting_stack(drift, shape=(64, 64), n_emitters=150, seed=6)
    second, _ = blinking_drifting_stack(drift, shape=(64, 64), n_emitters=150, seed=7)
    params = EsrrfParams(magnification=2, drift_correction=True, drift_time_averaging=20)
    result = run_job(esrrf.iter_esrrf(np.stack([first, second]), params, device=cpu_device))
    rms = np.sqrt(np.mean((result.drift.shifts - drift) ** 2))
    assert rms < 0.15, rms
    text = result.files()["drift.csv"]
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines[0] == "frame,dy_px,dx_px"
    rows = np.array([[float(v) for v in line.split(",")] for line in lines[1:]])
    np.testing.assert_allclose(rows[:, 1:3], result.drift.shifts)


def test_stop_and_keep_returns_the_channels_so_far(two_channels, cpu_device):
    job = esrrf.iter_esrrf(two_channels, magnification=2, frames_per_chunk=8, device=cpu_device)
    result, _ = stop_after(job, 1)
    assert result.stopped_early and len(result.channels) == 1
    assert result.image.shape[0] == 1


@pytest.mark.parametrize(
    ("shape", "axis", "words"),
    [
        ((1, 8, 32, 32), 0, "2 to 8 channels"),
        ((9, 8, 32, 32), 0, "2 to 8 channels"),
        ((8, 2, 32, 32), 2, r"axis 0 \(C, T, Y, X\) or axis 1"),
        ((8, 32, 32), 0, "channels of blinking frames are 4D"),
    ],
)
def test_bad_channel_input_names_what_is_valid(shape, axis, words, cpu_device):
    with pytest.raises(InvalidInputError, match=words):
        esrrf.iter_esrrf(np.ones(shape, np.float32), channel_axis=axis, device=cpu_device)


def test_the_drift_options_are_declared_once_in_drift_params():
    assert set(DRIFT_FIELDS.values()) == set(DriftParams.names())
    for own, field in DRIFT_FIELDS.items():
        mine, theirs = EsrrfParams.info(own), DriftParams.info(field)
        for key in ("kind", "optional", "default", "help", "unit", "minimum", "maximum", "choices"):
            assert getattr(mine, key) == getattr(theirs, key), (own, key)
        assert mine.added_later and mine.advanced
    params = EsrrfParams(drift_reference="mean", drift_smoothing=1.5, max_drift=4.0)
    assert params.drift_params() == DriftParams(reference="mean", smoothing=1.5, max_drift=4.0)


def test_a_registered_channel_reports_its_drift_not_drift_plus_registration(
    two_channels, cpu_device
):
    trace = np.column_stack([np.linspace(0, 0.5, 80), np.zeros(80)])
    params = EsrrfParams(magnification=2, channel_registration="translation")
    result = run_job(
        esrrf.iter_esrrf(two_channels, params=params, drift_shifts=trace, device=cpu_device)
    )
    for channel in result.channels:
        np.testing.assert_array_equal(channel.drift.shifts, trace)
    assert "up to 0.50 px" in result.describe()


def test_layers_stacked_as_channels_equal_the_4d_array(two_channels, cpu_device):
    from napari_gpuscope.compute.esrrf import StackedChannels

    first, second = CountingReads(two_channels[0]), CountingReads(two_channels[1])
    stacked = StackedChannels([first, second])
    params = EsrrfParams(magnification=2, channel_registration="translation")
    job = esrrf.iter_esrrf(stacked, params=params, frames_per_chunk=8, device=cpu_device)
    result = run_job(job)
    expected = run_job(esrrf.iter_esrrf(two_channels, params=params, device=cpu_device))
    np.testing.assert_array_equal(result.image, expected.image)
    assert max(first.largest, second.largest) <= 8 * 72 * 72  # a chunk, never a whole layer
    with pytest.raises(InvalidInputError, match="one shape"):
        StackedChannels([two_channels[0], two_channels[1, :10]])

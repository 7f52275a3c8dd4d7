"""Multi-channel MDAs live: their frames come interleaved by channel, so a session follows one
channel (``CoreSource(core, channel=...)``, or the dock's entry per channel) and an MDA of
several channels with none chosen is refused in words, never mixed into one result."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pymmcore_plus")
useq = pytest.importorskip("useq")

from pymmcore_plus.experimental.unicore import StateDevice  # noqa: E402

from napari_gpuscope import live  # noqa: E402
from napari_gpuscope.compute import tv  # noqa: E402
from napari_gpuscope.dock.live_sources import MDA, source_choices  # noqa: E402

from .camera import make_core  # noqa: E402
from .test_live import DEVICE, WAIT, blinking, offline  # noqa: E402

CHANNELS = ("DAPI", "FITC")


class FilterWheel(StateDevice):
    """A wheel with one position per channel: the channel group's presets set its label."""

    def __init__(self) -> None:
        super().__init__(dict(enumerate(CHANNELS)))
        self._state = 0

    def get_state(self) -> int:
        return self._state

    def set_state(self, position: int) -> None:
        self._state = int(position)


def two_channel_core(stack: np.ndarray):
    core, camera = make_core(stack)
    core.loadPyDevice("Wheel", FilterWheel())
    core.initializeDevice("Wheel")
    for channel in CHANNELS:
        core.defineConfig("Channel", channel, "Wheel", "Label", channel)
    core.setChannelGroup("Channel")
    return core, camera


def two_channels(time_points: int, **plans) -> useq.MDASequence:
    return useq.MDASequence(
        time_plan={"interval": 0, "loops": time_points}, channels=list(CHANNELS), **plans
    )


def test_one_channel_of_an_interleaved_mda_equals_the_offline_job_on_its_frames():
    stack = blinking(8)  # served in order: frame 2t is DAPI's at time t, 2t + 1 FITC's
    core, _ = two_channel_core(stack)
    params = tv.TVParams(weight=8.0)
    source = live.CoreSource(core, channel="FITC")
    session = live.attach(source, "tv", params, device=DEVICE)
    core.mda.run(two_channels(4))
    assert session.wait(WAIT)
    assert session.refused is None
    assert session.frames_received == session.frames_processed == 4
    result = session.result()
    for t, frame in enumerate(stack[1::2]):  # each frame denoised as the registry's job does
        assert result.image[t].tobytes() == offline("tv", None, frame, params).image.tobytes()
    assert source.expected_frames() == 4


def test_several_channels_with_none_chosen_are_refused_in_words():
    core, _ = two_channel_core(blinking(8))
    session = live.attach(core, "tv", tv.TVParams(weight=8.0), device=DEVICE)
    core.mda.run(two_channels(4))
    assert session.wait(WAIT)
    assert "2 channels (DAPI, FITC)" in session.refused
    assert "channel='DAPI'" in session.refused  # what would be valid
    assert session.frames_processed == 0
    assert session.frames_refused == session.frames_received == 8


def test_a_channel_the_mda_does_not_acquire_is_refused():
    core, _ = two_channel_core(blinking(8))
    source = live.CoreSource(core, channel="TRITC")
    session = live.attach(source, "tv", tv.TVParams(weight=8.0), device=DEVICE)
    core.mda.run(two_channels(2))
    assert session.wait(WAIT)
    assert "follows channel 'TRITC'" in session.refused
    assert "channels DAPI, FITC" in session.refused
    assert session.frames_processed == 0


def test_one_channels_z_stacks_are_stacks_even_when_channels_are_innermost():
    """Axis order t, z, c: the frames go DAPI z0, FITC z0, DAPI z1, ...; FITC's frames alone
    are z-stacks in order."""
    slices, time_points = 3, 2
    stack = blinking(time_points * slices * 2)
    core, _ = two_channel_core(stack)
    params = tv.TVParams(weight=8.0, spacing=(1.0, 1.0, 1.0))
    source = live.CoreSource(core, channel="FITC")
    session = live.attach(source, "tv", params, device=DEVICE, frames_per_stack=slices)
    z_plan = {"range": float(slices - 1), "step": 1.0}
    core.mda.run(two_channels(time_points, z_plan=z_plan, axis_order="tzc"))
    assert session.wait(WAIT)
    assert session.refused is None
    fitc = stack[1::2].reshape(time_points, slices, *stack.shape[1:])
    result = session.result()
    for t in range(time_points):
        expected = offline("tv", None, fitc[t], params)
        assert result.image[t].tobytes() == expected.image.tobytes()


def test_the_dock_lists_each_channel_of_a_cores_channel_group():
    core, _ = two_channel_core(blinking(2))
    name = live.register_core(core, "scope")
    try:
        mda = [c for c in source_choices([]) if c.kind == MDA and c.target is core]
    finally:
        live.unregister_core(core)
    assert [c.label for c in mda] == [
        f"{name}: MDA",
        f"{name}: MDA, channel DAPI",
        f"{name}: MDA, channel FITC",
    ]
    source = mda[2].source()
    assert isinstance(source, live.CoreSource) and source.channel == "FITC"
    assert mda[2].name == f"{name} FITC"  # the result layers say which channel


def test_a_channel_without_the_z_plan_is_refused_for_z_stacks():
    """Found in review: FITC acquired without the z plan (do_stack=False) passed the z-stack
    check (the sequence's sizes say 3 z positions), and its frames of two time points would
    have made one 'stack'. DAPI, which has the z plan, is followed."""
    slices = 3
    sequence = useq.MDASequence(
        time_plan={"interval": 0, "loops": 2},
        z_plan={"range": float(slices - 1), "step": 1.0},
        channels=[{"config": "DAPI"}, {"config": "FITC", "do_stack": False}],
        axis_order="tcz",
    )
    params = tv.TVParams(weight=8.0, spacing=(1.0, 1.0, 1.0))
    for channel, refused in (("FITC", True), ("DAPI", False)):
        core, _ = two_channel_core(blinking(8))
        source = live.CoreSource(core, channel=channel)
        session = live.attach(source, "tv", params, device=DEVICE, frames_per_stack=slices)
        core.mda.run(sequence)
        assert session.wait(WAIT)
        if refused:
            assert "channel 'FITC''s frames are not z-stacks of 3 slices" in session.refused
            assert session.frames_processed == 0
        else:
            assert session.refused is None and session.frames_processed == 2 * slices

"""A folder an acquisition program writes TIFF files into, followed live (issue 28 item 1: "a
TIFF ... being written"): every settled file's frames, in order, once each; the session's
result equals the offline job over the same frames (byte-equal on the CPU)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import tifffile

from napari_gpuscope import live
from napari_gpuscope.compute.flatfield import BasicParams, ShadingProfile
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.methods import METHODS

WAIT = 120  # seconds: a bound on a hung session, never a pacing


def _frames(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).poisson(300, (count, 16, 16)).astype(np.uint16)


def _write(path, data) -> None:
    """As a writer that finishes a file under another name, then renames it."""
    partial = path.with_suffix(".part")
    tifffile.imwrite(partial, data, photometric="minisblack")
    os.replace(partial, path)


def _apply(frames, profile, params):
    job = METHODS["flatfield"].job_spec("apply").job_function()
    return run_job(job(frames, params=params, device="cpu", profile=profile, measure_shading=False))


def _until(condition, timeout: float = WAIT) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "the session did not get there"
        time.sleep(0.02)


@pytest.fixture
def profile():
    yy, xx = np.mgrid[:16, :16]
    return ShadingProfile.from_arrays(1.0 + 0.02 * (yy - xx) / 16)


def test_files_written_into_a_folder_are_processed_in_order_once(tmp_path, profile):
    params = BasicParams(output_dtype="float32")
    source = live.FolderSource(tmp_path, settle_s=0.2, poll_s=0.02)
    session = live.attach(source, "flatfield", params, device="cpu", job="apply", profile=profile)
    a, b, c = _frames(3, 1), _frames(1, 2)[0], _frames(2, 3)
    _write(tmp_path / "t000.tif", a)
    _write(tmp_path / "t001.tif", b)  # a (Y, X) file is one frame
    _until(lambda: session.frames_received >= 4)
    _write(tmp_path / "t002.tif", c)
    (tmp_path / "notes.txt").write_text("not a TIFF")
    _until(lambda: session.frames_processed >= 6)
    session.finish()  # gated on what arrived, never on a time without frames
    assert session.wait(WAIT)
    expected = _apply(np.concatenate([a, b[None], c]), profile, params)
    assert session.frames_received == session.frames_processed == 6
    assert session.result().image.tobytes() == expected.image.tobytes()


def test_a_file_that_grows_after_it_was_read_hands_on_its_new_frames_only(tmp_path, profile):
    params = BasicParams(output_dtype="float32")
    source = live.FolderSource(tmp_path, settle_s=0.2, poll_s=0.02)
    session = live.attach(source, "flatfield", params, device="cpu", job="apply", profile=profile)
    frames = _frames(5, 4)
    _write(tmp_path / "stack.tif", frames[:2])
    _until(lambda: session.frames_processed == 2)
    _write(tmp_path / "stack.tif", frames)  # the writer went on
    _until(lambda: session.frames_processed == 5)
    session.finish()
    assert session.wait(WAIT)
    assert session.result().image.tobytes() == _apply(frames, profile, params).image.tobytes()


def test_existing_files_can_be_left_out_and_a_bad_folder_is_refused(tmp_path, profile):
    _write(tmp_path / "before.tif", _frames(2, 5))
    params = BasicParams(output_dtype="float32")
    source = live.FolderSource(tmp_path, settle_s=0.2, poll_s=0.02, include_existing=False)
    session = live.attach(source, "flatfield", params, device="cpu", job="apply", profile=profile)
    new = _frames(1, 6)
    _write(tmp_path / "after.tif", new)
    _until(lambda: session.frames_processed >= 1)
    session.finish()
    assert session.wait(WAIT)
    assert session.frames_received == 1  # not before.tif's 2 frames
    assert session.result().image.tobytes() == _apply(new, profile, params).image.tobytes()
    with pytest.raises(ValueError, match="does not exist"):
        live.FolderSource(tmp_path / "nowhere")


def test_files_of_one_name_with_two_suffixes_are_both_taken(tmp_path, profile):
    """pos.tif and pos.tiff map to one batch position name, but a folder source hands on
    frames, not named positions: both files' frames come (before, neither came)."""
    params = BasicParams(output_dtype="float32")
    first, second = _frames(2, 7), _frames(1, 8)
    _write(tmp_path / "pos.tif", first)
    _write(tmp_path / "pos.tiff", second)
    source = live.FolderSource(tmp_path, settle_s=0.1, poll_s=0.02)
    session = live.attach(source, "flatfield", params, device="cpu", job="apply", profile=profile)
    _until(lambda: session.frames_processed >= 3)
    session.finish()
    assert session.wait(WAIT)
    expected = _apply(np.concatenate([first, second]), profile, params)
    assert session.result().image.tobytes() == expected.image.tobytes()


def test_detach_waits_for_the_folders_poller(tmp_path, profile, monkeypatch):
    """A poller in the middle of a slow read when the session detaches: detach returns once
    it has ended (before, detach said detached while it still read)."""
    import threading

    reading = threading.Event()

    def slow_read(self, path, on_frame) -> bool:
        reading.set()
        self._stop.wait()  # the read goes on past the disconnect
        time.sleep(1.0)
        return False

    monkeypatch.setattr(live.FolderSource, "_hand_on", slow_read)
    _write(tmp_path / "big.tif", _frames(1, 10))
    params = BasicParams(output_dtype="float32")
    source = live.FolderSource(tmp_path, settle_s=0.0, poll_s=0.02)
    session = live.attach(source, "flatfield", params, device="cpu", job="apply", profile=profile)
    assert reading.wait(WAIT)
    session.detach()
    assert session.detached
    assert not any(t.name == "napari-gpuscope-live-folder" for t in threading.enumerate())


def test_a_grown_files_new_frames_are_read_without_its_first_pages(tmp_path, monkeypatch):
    """Only the new pages of a file that grew are read: reading the whole file each time it
    grows costs the square of its length."""
    from napari_gpuscope.live import _folder

    frames = _frames(6, 9)
    path = tmp_path / "stack.tif"
    _write(path, frames)
    np.testing.assert_array_equal(_folder._frames_from(str(path), 0), frames)
    monkeypatch.setattr(
        tifffile.TiffPageSeries, "asarray", lambda *a, **k: pytest.fail("the whole series read")
    )
    np.testing.assert_array_equal(_folder._frames_from(str(path), 4), frames[4:])
    assert _folder._frames_from(str(path), 6).shape == (0, 16, 16)

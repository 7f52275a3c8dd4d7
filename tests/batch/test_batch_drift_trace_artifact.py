"""A recipe's ``drift_trace`` artifact (issue 25 item 2): eSRRF's run job accepts a drift trace,
so a trace loaded in the dock travels with the recipe saved there, and ``napari-gpuscope run``
corrects every position with it; a position of another number of frames is refused with a
message naming the artifact, the others run.

Positions are small blinking stacks (24 frames of 32 x 32, Poisson noise) so that each runs in
about a second on the CPU; the oracle is the registry's job called directly with the same trace
as ``drift_shifts`` (byte for byte), and the trace in each position's provenance and
``drift.csv``.
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
import zarr

from napari_gpuscope.batch.ngff import ATTRIBUTE
from napari_gpuscope.batch.recipes import load_recipe
from napari_gpuscope.batch.store import BatchStore
from napari_gpuscope.cli import main
from napari_gpuscope.compute.esrrf import DriftResult, EsrrfParams, iter_esrrf, load_drift_trace
from napari_gpuscope.compute.jobs import run_job

FRAMES = 24
PARAMS = {"magnification": "2", "drift_correction": "true"}


@pytest.fixture(scope="module")
def client(inprocess_client):
    return inprocess_client


def _blinking(frames: int, seed: int, side: int = 32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:side, :side].astype(np.float64)
    points = rng.uniform(6, side - 6, size=(25, 2))
    stack = np.empty((frames, side, side), np.uint16)
    for k in range(frames):
        image = np.zeros((side, side))
        for py, px in points[rng.random(len(points)) < 0.3]:
            image += 250 * np.exp(-((y - py) ** 2 + (x - px) ** 2) / (2 * 1.3**2))
        stack[k] = rng.poisson(image + 20)
    return stack


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """Two positions of FRAMES frames, one of 16, a (T, C, Y, X) hyperstack of FRAMES, and a
    trace of FRAMES frames (a smooth sub-pixel path) saved as the dock saves it."""
    folder = tmp_path_factory.mktemp("trace_artifact")
    inputs = folder / "in"
    inputs.mkdir()
    stacks = {"fov0": _blinking(FRAMES, 1), "fov1": _blinking(FRAMES, 2), "short": _blinking(16, 3)}
    for name, stack in stacks.items():
        tifffile.imwrite(inputs / f"{name}.tif", stack, imagej=True, metadata={"axes": "TYX"})
    channels = np.stack([_blinking(FRAMES, 4), _blinking(FRAMES, 5)], axis=1)  # (T, C, Y, X)
    tifffile.imwrite(inputs / "hyper.tif", channels, imagej=True, metadata={"axes": "TCYX"})
    stacks["hyper"] = channels
    t = np.arange(FRAMES) / (FRAMES - 1)
    shifts = np.stack([1.3 * t + 0.2 * np.sin(5 * t), -0.9 * t**2], axis=1)
    shifts -= shifts[0]
    trace_file = DriftResult.from_shifts(shifts).to_csv(folder / "trace.csv")
    return folder, inputs, stacks, trace_file


def _recipe(folder, trace_file, *extra: str) -> tuple[int, object]:
    path = folder / "recipe.yaml"
    argv = ["recipe", "esrrf", "-o", str(path), "--artifact", f"drift_trace={trace_file}"]
    for name, value in PARAMS.items():
        argv += ["--set", f"{name}={value}"]
    return main([*argv, *extra]), path


def test_a_run_corrects_every_position_with_the_recipes_trace_and_refuses_other_lengths(
    experiment, client, tmp_path, capsys
):
    folder, inputs, stacks, trace_file = experiment
    code, path = _recipe(folder, trace_file)
    assert code == 0, capsys.readouterr().err
    recipe = load_recipe(path)
    assert [a.name for a in recipe.artifacts] == ["drift_trace"]
    trace = load_drift_trace(trace_file)

    # validate says which position the trace does not fit, in the run's words.
    assert main(["validate", str(path), str(inputs / "*.tif")]) == 1
    said = capsys.readouterr()
    text = said.out + said.err
    assert "short" in text and "has 24 frames but this position has 16" in text
    assert "fov0" not in text and "hyper" not in text

    out = tmp_path / "out.zarr"
    argv = ["run", str(path), str(inputs / "*.tif"), "--out", str(out), "--device", "cpu"]
    assert main([*argv, "--no-progress", "--cluster", client.scheduler.address]) == 1
    capsys.readouterr()
    store = BatchStore(out)
    assert [name for name in stacks if store.failed_record(name)] == ["short"]
    assert (
        "ValueError: artifact 'drift_trace' (trace.csv) has 24 frames but this position has 16: "
        "a drift trace is one (dy, dx) per frame of the stack it corrects"
    ) in store.failed_record("short")["reason"]

    params = EsrrfParams(magnification=2, drift_correction=True)
    for name in ("fov0", "fov1", "hyper"):
        kwargs = {"channel_axis": 1} if name == "hyper" else {}
        direct = run_job(
            iter_esrrf(stacks[name], params, drift_shifts=trace, device="cpu", **kwargs)
        )
        # A channel's image per group: channel 0 the position's, channel 1 its first extra.
        groups = [out / name / "0", out / name / "extra" / "eSRRF" / "0"]
        images = direct.image if name == "hyper" else direct.image[None]
        for group, image in zip(groups, images, strict=False):
            written = np.asarray(zarr.open_array(str(group), mode="r"))
            assert written.reshape(image.shape).tobytes() == image.tobytes()
        result = zarr.open_group(str(out / name), mode="r").attrs[ATTRIBUTE]["provenance"]
        channels = result["result"].get("channels", [result["result"]])
        assert len(channels) == (2 if name == "hyper" else 1)
        for facts in channels:  # every channel corrected with the one trace
            assert np.asarray(facts["drift"]["shifts_px"]).tobytes() == trace.tobytes()
            assert facts["drift"]["params"] is None  # a given trace, not an estimate
    # The trace was applied: uncorrected, the image differs.
    plain = EsrrfParams(magnification=2)
    uncorrected = run_job(iter_esrrf(stacks["fov0"], plain, device="cpu")).image
    written = np.asarray(zarr.open_array(str(out / "fov0" / "0"), mode="r"))
    assert written.reshape(uncorrected.shape).tobytes() != uncorrected.tobytes()
    assert np.array_equal(load_drift_trace(out / "fov0" / "drift.csv"), trace)


def test_a_trace_artifact_is_refused_without_drift_correction_or_under_another_name(
    experiment, capsys
):
    folder, _, _, trace_file = experiment
    code, _ = _recipe(folder, trace_file, "--set", "drift_correction=false")
    assert code != 0
    assert (
        "artifact 'drift_trace' cannot be combined with drift_correction=false: the trace is "
        "the drift correction"
    ) in capsys.readouterr().err
    argv = ["recipe", "esrrf", "-o", str(folder / "other.yaml")]
    assert main([*argv, "--artifact", f"profile={trace_file}"]) != 0
    assert "eSRRF's run takes only a 'drift_trace' artifact" in capsys.readouterr().err
    bad = folder / "bad.csv"
    bad.write_text("frame,a,b\n0,0,0\n")
    assert main([*argv, "--artifact", f"drift_trace={bad}"]) != 0
    err = capsys.readouterr().err
    assert "artifact 'drift_trace' (bad.csv)" in err and "dy_px and dx_px" in err

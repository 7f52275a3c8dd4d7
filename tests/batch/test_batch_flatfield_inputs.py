"""Flat-field's fit inputs beyond the data (issue 25 item 2): a dark frame and a background mask
are optional artifacts of the fit job, ``batch_axis`` is a parameter; bad artifacts are refused
naming the artifact and what would be valid."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

from napari_gpuscope.cli import main
from napari_gpuscope.compute.flatfield import BasicParams, batch_hooks, fit_basic
from napari_gpuscope.sample_data._shading import shaded_tiles


def _with_object(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tiles with one bright disc painted at the same place in every tile (a dust speck
    on the sensor, a bead in every field), and the Labels-style mask: 1 = background (fitted),
    0 = the disc."""
    _, y, x = images.shape
    yy, xx = np.mgrid[:y, :x]
    disc = (yy - y // 3) ** 2 + (xx - 2 * x // 3) ** 2 < (y // 5) ** 2
    painted = images.astype(np.float32)
    painted[:, disc] += 0.5 * images.mean()  # half the mean level: a broad, soft object
    return painted, (~disc).astype(np.uint8)


def _rms(flat: np.ndarray, truth: np.ndarray) -> float:
    flat = flat / flat.mean()
    truth = truth / truth.mean()
    return float(np.sqrt(np.mean((flat - truth) ** 2)))


def test_a_background_mask_keeps_a_bright_object_out_of_the_flatfield():
    # Oracle: the known shading of the simulation. An object at the same place in every tile
    # looks like shading to BaSiC; masked out (pixels > 0 fitted), the flatfield is the truth's.
    truth = shaded_tiles(32, (128, 128), seed=3)
    painted, mask = _with_object(truth.images)
    params = BasicParams(working_size=128)
    plain = fit_basic(painted, params, device="cpu")
    masked = fit_basic(painted, params, fitting_weight=mask, device="cpu")  # (Y, X) broadcast
    same = fit_basic(
        painted, params, fitting_weight=np.broadcast_to(mask, painted.shape), device="cpu"
    )
    assert masked.flatfield.tobytes() == same.flatfield.tobytes()
    disc = mask == 0
    # Unmasked, the object is in the flatfield: it is brighter there than the truth says.
    bump = plain.flatfield[disc].mean() / plain.flatfield.mean()
    expected = truth.flatfield[disc].mean() / truth.flatfield.mean()
    assert bump > expected * 1.2  # measured: 1.72 against 1.25
    assert abs(masked.flatfield[disc].mean() / masked.flatfield.mean() - expected) < 0.05
    assert _rms(masked.flatfield, truth.flatfield) < 0.5 * _rms(plain.flatfield, truth.flatfield)


def test_batch_axis_is_a_parameter_written_only_when_set():
    # Recipes saved before the field keep their hash: the default is not written.
    assert "batch_axis" not in BasicParams().to_dict()
    assert BasicParams(batch_axis=0).to_dict()["batch_axis"] == 0
    assert BasicParams.from_dict({}).batch_axis is None
    truth = shaded_tiles(8, (32, 32), seed=1)
    stack = np.stack([truth.images, 2 * truth.images])  # (C, T, Y, X)
    profile = fit_basic(stack, BasicParams(batch_axis=0, working_size=32), device="cpu")
    assert profile.flatfield.shape == (2, 32, 32) and profile.batch_axis == 0


def test_dark_frame_and_mask_artifacts_are_accepted_and_used_by_the_run(tmp_path, capsys):
    truth = shaded_tiles(12, (64, 64), seed=2, dark_offset=100.0)
    painted, mask = _with_object(truth.images)
    tifffile.imwrite(tmp_path / "dark.tif", truth.darkfield.astype(np.float32))
    tifffile.imwrite(tmp_path / "mask.tif", mask)
    recipe = tmp_path / "flat.yaml"
    argv = ["recipe", "flatfield", "--set", "working_size=64", "-o", str(recipe)]
    argv += ["--artifact", f"dark_frame={tmp_path / 'dark.tif'}"]
    argv += ["--artifact", f"fitting_weight={tmp_path / 'mask.tif'}"]
    assert main(argv) == 0, capsys.readouterr().err
    from napari_gpuscope.batch.recipes import load_recipe

    loaded = load_recipe(recipe)
    assert [a.name for a in loaded.artifacts] == ["dark_frame", "fitting_weight"]
    # The hooks' prepare is what a run does once: the fit with the dark frame and the mask.
    readers = [lambda t=t: t for t in painted]
    artifacts = {a.name: tmp_path / a.path for a in loaded.artifacts}
    prepared = batch_hooks.prepare(
        loaded.params_model(), readers, device="cpu", artifacts=artifacts
    )
    direct = fit_basic(
        painted,
        loaded.params_model(),
        dark_frame=truth.darkfield.astype(np.float32),
        fitting_weight=mask,
        device="cpu",
    )
    assert prepared.flatfield.tobytes() == direct.flatfield.tobytes()
    assert prepared.darkfield.tobytes() == direct.darkfield.tobytes()


def test_bad_artifacts_name_the_artifact_and_what_is_valid(tmp_path, capsys):
    truth = shaded_tiles(6, (64, 64), seed=4)
    tifffile.imwrite(tmp_path / "dark.tif", np.full((64, 64), 100, np.float32))
    tifffile.imwrite(tmp_path / "dark3d.tif", np.zeros((2, 64, 64), np.float32))
    tifffile.imwrite(tmp_path / "small.tif", np.ones((32, 32), np.uint8))
    out = ["-o", str(tmp_path / "r.yaml")]

    # A dark frame is the darkfield: not with an estimated darkfield or a camera offset.
    dark = ["--artifact", f"dark_frame={tmp_path / 'dark.tif'}"]
    code = main(["recipe", "flatfield", "--set", "get_darkfield=true", *out, *dark])
    err = capsys.readouterr().err
    assert code == 2
    assert "artifact 'dark_frame' cannot be combined with get_darkfield=True" in err
    assert "valid: a dark frame with get_darkfield=false and camera_offset=null" in err
    # A dark frame is one image.
    assert main(
        ["recipe", "flatfield", *out, "--artifact", f"dark_frame={tmp_path / 'dark3d.tif'}"]
    )
    assert "artifact 'dark_frame' (dark3d.tif): shape (2, 64, 64); a dark frame is one (Y, X)" in (
        capsys.readouterr().err
    )
    # An unknown name lists the names the fit takes.
    assert main(["recipe", "flatfield", *out, "--artifact", f"dark={tmp_path / 'dark.tif'}"]) == 2
    assert "takes the artifacts 'profile', 'dark_frame', 'fitting_weight', not 'dark'" in (
        capsys.readouterr().err
    )
    # A mask of another frame size: refused when the run fits, naming both shapes.
    readers = [lambda t=t: t for t in truth.images]
    with pytest.raises(ValueError) as info:
        batch_hooks.prepare(
            BasicParams(),
            readers,
            device="cpu",
            artifacts={"fitting_weight": tmp_path / "small.tif"},
        )
    assert str(info.value) == (
        "artifact 'fitting_weight' (small.tif) has shape (32, 32); a mask must be (Y, X) = "
        "(64, 64) (one mask for every image) or the images' shape (6, 64, 64)"
    )
    with pytest.raises(ValueError, match="cannot be combined with camera_offset=100"):
        batch_hooks.prepare(
            BasicParams(camera_offset=100.0),
            readers,
            device="cpu",
            artifacts={"dark_frame": tmp_path / "dark.tif"},
        )


def _four_d_positions(count: int, seed: int) -> list[np.ndarray]:
    """(C, T, Y, X) positions: channel 1 has its own shading (a different simulation)."""
    positions = []
    for index in range(count):
        first = shaded_tiles(6, (32, 32), seed=seed + index).images
        second = shaded_tiles(6, (32, 32), seed=seed + 100 + index, vignetting=0.6).images
        positions.append(np.stack([first, second]).astype(np.float32))
    return positions


def test_4d_positions_fit_along_the_recipes_axis_as_the_dock_fits_one_4d_layer():
    """With ``batch_axis`` a batch fit takes (C, T, Y, X) positions: each channel is fitted on
    every position's frames of it, which is the fit of one 4D layer holding them all (what the
    dock does with such a layer), and each position is corrected along that axis."""
    from napari_gpuscope.compute.flatfield import iter_apply_profile
    from napari_gpuscope.compute.jobs import run_job

    positions = _four_d_positions(2, seed=20)
    params = BasicParams(batch_axis=0, working_size=32)
    readers = [lambda p=p: p for p in positions]
    assert batch_hooks.screen(params, readers) == {}
    assert (
        "not a (Y, X) tile or a (T, Y, X) stack"
        in batch_hooks.screen(BasicParams(working_size=32), readers)[0]
    )

    prepared = batch_hooks.prepare(params, readers, device="cpu", artifacts={})
    whole = fit_basic(np.concatenate(positions, axis=1), params, device="cpu")
    assert prepared.flatfield.shape == (2, 32, 32)
    assert prepared.flatfield.tobytes() == whole.flatfield.tobytes()

    done = run_job(
        batch_hooks.job(positions[1], params, prepared=prepared, device="cpu", cache_key="")
    )
    alone = run_job(iter_apply_profile(positions[1], whole, params, batch_axis=0, device="cpu"))
    assert done.image.tobytes() == alone.image.tobytes()
    assert done.summary() == alone.summary()  # the shading left is measured, as Apply does

"""A fuzz table for the batch CLI (issue 17): bad inputs of every class the issue names (options
out of range, hostile or broken recipes, a locked, corrupt or unwritable store, malformed
plates, truncated, NaN and wrong-shaped files, artifacts that are not what the job needs), plus
randomly damaged recipes. Each answer is a clear one: exit 2 with one ``napari-gpuscope:`` line
naming the problem, exit 1 naming the bad file, or a correct result (exit 0) -- never an
exception escaping, never a hang (no cluster is started here)."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile

from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.cli import main


def _call(capsys, argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: exit 2 with its usage line
        code = int(exc.code)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def world(tmp_path):
    """Good positions, a TV recipe and a flat-field recipe."""
    rng = np.random.default_rng(0)
    good = tmp_path / "good"
    good.mkdir()
    for index in range(2):
        tifffile.imwrite(good / f"p{index}.tif", rng.poisson(50, (32, 32)).astype(np.uint16))
    tv = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    flat = Recipe.from_defaults("flatfield").save(tmp_path / "flat.yaml")
    return {"root": tmp_path, "good": str(good / "*.tif"), "tv": str(tv), "flat": str(flat)}


def _recipe_text(world, text: str) -> str:
    path = Path(world["root"]) / f"r{abs(hash(text)) % 10**8}.yaml"
    path.write_text(text)
    return str(path)


def _bad_files(world, kind: str) -> str:
    folder = Path(world["root"]) / kind
    folder.mkdir()
    rng = np.random.default_rng(1)
    for index in range(2):
        tifffile.imwrite(folder / f"p{index}.tif", rng.poisson(50, (32, 32)).astype(np.uint16))
    if kind == "truncated":
        whole = (folder / "p0.tif").read_bytes()
        (folder / "bad.tif").write_bytes(whole[: len(whole) - 500])
    elif kind == "nan":
        data = np.ones((32, 32), np.float32)
        data[5, 5] = np.nan
        tifffile.imwrite(folder / "bad.tif", data)
    elif kind == "shape":
        tifffile.imwrite(folder / "bad.tif", np.ones((20, 32), np.uint16))
    elif kind == "garbage":
        (folder / "bad.tif").write_bytes(b"\x00" * 64)
    return str(folder / "*.tif")


def _plate(world, wells, images=None) -> str:
    root = Path(world["root"]) / "plate.zarr"
    root.mkdir()
    attrs = {"ome": {"version": "0.5", "plate": {"wells": wells}}}
    (root / "zarr.json").write_text(
        json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attrs})
    )
    if images is not None:
        well = root / "A" / "1"
        well.mkdir(parents=True)
        attrs = {"ome": {"version": "0.5", "well": {"images": images}}}
        (well / "zarr.json").write_text(
            json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attrs})
        )
        image = well / "0"
        image.mkdir()
        attrs = {"ome": {"version": "0.5", "multiscales": [{"datasets": []}]}}
        (image / "zarr.json").write_text(
            json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attrs})
        )
    return str(root)


def _store(world, run_json: str | None = None, lock_pid: int | None = None) -> str:
    out = Path(world["root"]) / "out.zarr"
    markers = Path(str(out) + ".batch")
    markers.mkdir(parents=True)
    if run_json is not None:
        (markers / "run.json").write_text(run_json)
    if lock_pid is not None:
        record = {"pid": lock_pid, "host": socket.gethostname(), "since": "2026-01-01T00:00:00"}
        (markers / "lock.json").write_text(json.dumps(record))
    return str(out)


def _run(world, *extra: str, recipe: str | None = None, inputs: str | None = None) -> list[str]:
    out = str(Path(world["root"]) / "o.zarr")
    return [
        "run",
        recipe or world["tv"],
        inputs or world["good"],
        "--out",
        out,
        "--device",
        "cpu",
        *extra,
    ]


BILLION_LAUGHS = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
    )
    + "schema_version: 1\nmethod: tv\n"
)

# (id, argv builder, expected exit code, what the message must say)
CASES = [
    ("workers-negative", lambda w: _run(w, "--workers", "-1"), 2, "--workers: must be from 1"),
    ("workers-huge", lambda w: _run(w, "--workers", "100000"), 2, "must be from 1 to 1000"),
    ("workers-text", lambda w: _run(w, "--workers", "many"), 2, "expected a whole number"),
    ("memory-negative", lambda w: _run(w, "--memory=-1GB"), 2, "--memory: expected a size"),
    ("walltime-bad", lambda w: _run(w, "--walltime", "1h"), 2, "--walltime: expected HH:MM:SS"),
    (
        "yaml-duplicate",
        lambda w: [
            "validate",
            _recipe_text(w, "schema_version: 1\nmethod: tv\nmethod: esrrf\n"),
            w["good"],
        ],
        2,
        "key 'method' appears twice",
    ),
    (
        "yaml-digits",
        lambda w: [
            "validate",
            _recipe_text(w, f"schema_version: 1\nmethod: tv\nparams:\n  strength: {'9' * 5000}\n"),
            w["good"],
        ],
        2,
        "strength: line 4",
    ),
    (
        "yaml-python-tag",
        lambda w: [
            "validate",
            _recipe_text(w, "!!python/object/apply:os.system [echo hi]\n"),
            w["good"],
        ],
        2,
        "not a safe YAML recipe",
    ),
    (
        "yaml-billion-laughs",
        lambda w: ["validate", _recipe_text(w, BILLION_LAUGHS), w["good"]],
        2,
        "unknown key",
    ),
    (
        "yaml-list",
        lambda w: ["validate", _recipe_text(w, "- 1\n- 2\n"), w["good"]],
        2,
        "a recipe is a mapping",
    ),
    (
        "yaml-empty",
        lambda w: ["validate", _recipe_text(w, ""), w["good"]],
        2,
        "a recipe is a mapping",
    ),
    (
        "yaml-binary",
        lambda w: ["validate", _recipe_text(w, "\x00\x01\x02"), w["good"]],
        2,
        "not a safe YAML recipe",
    ),
    (
        "recipe-missing",
        lambda w: ["validate", "/nonexistent/r.yaml", w["good"]],
        2,
        "cannot read the recipe",
    ),
    (
        "input-no-match",
        lambda w: ["validate", w["tv"], "/nonexistent/*.tif"],
        2,
        "matches no TIFF file",
    ),
    (
        "plate-no-path",
        lambda w: ["validate", w["tv"], _plate(w, [{"rowIndex": 0}])],
        2,
        "has no 'path'",
    ),
    (
        "plate-no-datasets",
        lambda w: ["validate", w["tv"], _plate(w, [{"path": "A/1"}], [{"path": "0"}])],
        2,
        "not a readable OME-Zarr image",
    ),
    ("status-corrupt", lambda w: ["status", _store(w, "{oops")], 2, "run.json is corrupt"),
    (
        "resume-corrupt",
        lambda w: [
            "run",
            w["tv"],
            w["good"],
            "--out",
            _store(w, "[]"),
            "--device",
            "cpu",
            "--resume",
        ],
        2,
        "run.json is corrupt",
    ),
    (
        "store-unwritable",
        lambda w: [*_run(w)[:4], str(Path(w["tv"]) / "o.zarr"), "--device", "cpu"],
        2,
        "cannot write beside the output store",
    ),
    (
        "validate-truncated",
        lambda w: ["validate", w["tv"], _bad_files(w, "truncated")],
        1,
        "bad: cannot read the pixels of",
    ),
    (
        "validate-nan",
        lambda w: ["validate", w["tv"], _bad_files(w, "nan")],
        1,
        "holds 1 NaN or infinite pixel(s)",
    ),
    (
        "validate-garbage",
        lambda w: ["validate", w["tv"], _bad_files(w, "garbage")],
        1,
        "bad: cannot read",
    ),
    (
        "validate-flat-shape",
        lambda w: ["validate", w["flat"], _bad_files(w, "shape")],
        1,
        "shape (20, 32), most positions have (32, 32)",
    ),
    (
        "artifact-text",
        lambda w: [
            "recipe",
            "flatfield",
            "--job",
            "apply",
            "--artifact",
            f"profile={w['tv']}",
            "-o",
            str(Path(w["root"]) / "a.yaml"),
        ],
        2,
        "not a shading profile",
    ),
    (
        "set-digits",
        lambda w: [
            "recipe",
            "tv",
            "--set",
            f"strength={'1' * 5000}",
            "-o",
            str(Path(w["root"]) / "a.yaml"),
        ],
        2,
        "--set strength: cannot read",
    ),
    (
        "set-nan",
        lambda w: ["recipe", "tv", "--set", "strength=nan", "-o", str(Path(w["root"]) / "a.yaml")],
        2,
        "strength",
    ),
    ("good-validate", lambda w: ["validate", w["tv"], w["good"]], 0, "2 positions, 0 problem"),
]


@pytest.mark.parametrize(
    ("argv", "code", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_bad_input_gets_a_clear_answer(world, capsys, argv, code, says):
    got, out, err = _call(capsys, argv(world))
    text = out + err
    assert got == code, text
    assert says in text, text
    assert "Traceback" not in text
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines and (
            lines[-1].startswith("napari-gpuscope:") or "error: argument" in lines[-1]
        )


def test_a_locked_store_is_a_clear_answer(world, capsys):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = _store(world, lock_pid=holder.pid)
        got, _, err = _call(
            capsys, ["run", world["tv"], world["good"], "--out", out, "--device", "cpu"]
        )
    finally:
        holder.kill()
        holder.wait()
    assert got == 2 and f"locked by another run (pid {holder.pid}" in err


def test_randomly_damaged_recipes_are_valid_or_refused_in_words(world, capsys):
    """300 recipes with characters deleted, duplicated or replaced: each validates (0/1) or is
    refused with exit 2 and a ``napari-gpuscope:`` line; no exception escapes."""
    base = Path(world["tv"]).read_text()
    rng = random.Random(17)
    alphabet = "0123456789:-[]{}\n #&*!'\"%@`.eE+,?|>"
    for trial in range(300):
        text = list(base)
        for _ in range(rng.randint(1, 4)):
            where = rng.randrange(len(text))
            action = rng.choice(("delete", "duplicate", "replace"))
            if action == "delete":
                del text[where]
            elif action == "duplicate":
                text.insert(where, text[where])
            else:
                text[where] = rng.choice(alphabet)
        path = Path(world["root"]) / f"fuzz{trial}.yaml"
        path.write_text("".join(text))
        got, out, err = _call(capsys, ["validate", str(path), world["good"]])
        assert got in (0, 1, 2), (trial, out, err)
        if got == 2:
            assert err.startswith("napari-gpuscope: "), (trial, "".join(text), err)
            assert len(err.strip().splitlines()) == 1, (trial, err)


# ------------------------------------------------------------ blank data through a batch run
def _scan(steps_px: int, blocks: int, seed: int, per_block: int = 4) -> np.ndarray:
    """A 48 x 48 px field of view moving ``steps_px`` along x each block over a larger
    textured sample (so consecutive blocks share their content however far it goes), with
    Poisson noise: frame t shows frame 0's content moved by -steps_px per block."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    texture = gaussian_filter(rng.normal(size=(64, 48 + steps_px * blocks + 8)), 2.0)
    texture = np.clip(400 + 4000 * texture / texture.std(), 0, None)
    frames = [
        rng.poisson(texture[8:56, k * steps_px : k * steps_px + 48])
        for k in range(blocks)
        for _ in range(per_block)
    ]
    return np.asarray(frames, np.uint16)


def _camera_background(shape, seed) -> np.ndarray:
    return (100 + np.random.default_rng(seed).poisson(20.0, shape)).astype(np.uint16)


def test_blank_drift_blocks_and_impossible_traces_in_a_batch(tmp_path, inprocess_client):
    """Issue 26 items 1 and 13 through a batch run of the drift job (reference='previous'):
    a position whose blocks 3 and 6 are camera background is done, its provenance and
    drift.csv saying those blocks were interpolated, not measured; a position of background
    only fails naming the blocks without structure; a scan whose steps add up beyond the
    frame fails naming the frame. Each answer is the estimate's own, never a trace invented
    from noise."""
    import zarr

    from napari_gpuscope.batch.inputs import discover
    from napari_gpuscope.batch.ngff import ATTRIBUTE
    from napari_gpuscope.batch.recipes import Recipe
    from napari_gpuscope.batch.runner import run_batch
    from napari_gpuscope.compute import esrrf

    gaps = _scan(3, 6, seed=1)
    gaps[8:12] = _camera_background((4, 48, 48), 2)
    gaps[20:24] = _camera_background((4, 48, 48), 3)
    positions = {
        "a_scan": _scan(3, 6, seed=0),
        "b_gaps": gaps,
        "c_background": _camera_background((24, 48, 48), 4),
        "d_beyond": _scan(5, 12, seed=5),  # 55 px of steps on a 48 px frame
    }
    for name, stack in positions.items():
        tifffile.imwrite(tmp_path / f"{name}.tif", stack)
    recipe = Recipe.from_params(esrrf.DriftParams(time_averaging=4, reference="previous"))
    out = tmp_path / "out.zarr"

    report = run_batch(recipe, discover(str(tmp_path / "*.tif")), out, inprocess_client)

    assert report.done == ["a_scan", "b_gaps"], report.failed
    assert "no structure in common" in report.failed["c_background"]
    assert "6 of 6 blocks" in report.failed["c_background"]
    assert "has drifted by" in report.failed["d_beyond"]
    assert "48 x 48 px frame" in report.failed["d_beyond"]
    facts = zarr.open_group(str(out / "b_gaps"), mode="r").attrs[ATTRIBUTE]["provenance"]
    assert facts["result"]["interpolated_blocks"] == [2, 5]
    assert "frames 8-11, 20-23" in (out / "b_gaps" / "drift.csv").read_text()
    trace = esrrf.load_drift_trace(out / "b_gaps" / "drift.csv")
    # the measured blocks' content moved by -3 px a block (the scan's known steps)
    measured = [0, 1, 3, 4]
    centres = [4 * k + 1 for k in measured]  # a frame inside each measured block
    np.testing.assert_allclose(trace[centres, 1] - trace[centres[0], 1], [0, -3, -9, -12], atol=0.3)

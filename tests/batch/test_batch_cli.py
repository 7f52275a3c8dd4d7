"""The batch commands without a cluster: refusals, dry run, validate."""

from __future__ import annotations

import pytest
import tifffile
from batch_helpers import write_positions

from napari_gpuscope.batch.recipe_sections import InputFacts
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.cli import main


def test_run_without_a_gpu_refuses_and_names_the_cpu_option(tmp_path, capsys):
    write_positions(tmp_path / "in", 1, shape=(32, 32))
    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    code = main(["run", str(recipe), str(tmp_path / "in" / "*.tif"), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "--device cpu" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_dry_run_counts_and_computes_nothing(tmp_path, capsys):
    write_positions(tmp_path / "in", 3, shape=(32, 32))
    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    out = tmp_path / "out.zarr"
    code = main(
        [
            "run",
            str(recipe),
            str(tmp_path / "in" / "*.tif"),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--dry-run",
        ]
    )
    assert code == 0
    assert "would compute 3, skip 0" in capsys.readouterr().out
    assert not out.exists()


def test_missing_input_and_unknown_store(tmp_path, capsys):
    recipe = Recipe.from_defaults("tv").save(tmp_path / "tv.yaml")
    assert main(["run", str(recipe), str(tmp_path / "*.tif"), "--out", "x", "--device", "cpu"]) == 2
    assert "matches no TIFF file" in capsys.readouterr().err
    assert main(["status", str(tmp_path / "never.zarr")]) == 0
    assert "no batch run recorded" in capsys.readouterr().out


def test_validate_reports_pixel_size_axes_and_unreadable_files(tmp_path, capsys):
    folder = tmp_path / "in"
    write_positions(folder, 2, shape=(32, 32))  # 0.1 um pixels
    tifffile.imwrite(
        folder / "coarse.tif",
        tifffile.imread(folder / "field00.tif"),
        imagej=True,
        resolution=(5, 5),
        metadata={"unit": "um", "axes": "YX"},
    )
    tifffile.imwrite(folder / "stack.tif", tifffile.imread(folder / "field00.tif")[None])
    (folder / "broken.tif").write_bytes(b"nope")
    facts = InputFacts(axes=["y", "x"], pixel_size=[0.1, 0.1], ndim=2, dtype="uint16")
    recipe = Recipe.from_params(Recipe.from_defaults("tv").params_model(), input=facts)
    path = recipe.save(tmp_path / "tv.yaml")

    code = main(["validate", str(path), str(folder / "*.tif")])

    out = capsys.readouterr().out
    assert code == 1
    assert "coarse: pixel size [0.2, 0.2], the recipe was tuned at [0.1, 0.1]" in out
    assert "stack: 3 dimensions (1, 32, 32), the recipe expects 2" in out
    assert "broken: cannot read" in out
    assert "field00" not in out and "field01" not in out
    assert "5 positions, 3 problem(s)" in out


def test_slurm_jobs_ask_for_one_gpu_and_retire_before_the_wall_time():
    pytest.importorskip("dask_jobqueue")
    from napari_gpuscope.batch.cluster import ClusterChoice, slurm_cluster

    choice = ClusterChoice(
        cluster="slurm", device="cuda", walltime="02:00:00", queue="gpu", account="lab"
    )
    with slurm_cluster(choice) as cluster:
        script = cluster.job_script()
    assert "#SBATCH --gres=gpu:1" in script
    assert "#SBATCH -p gpu" in script and "#SBATCH -A lab" in script
    assert "#SBATCH -t 02:00:00" in script
    assert "--resources GPU=1" in script
    assert "--lifetime 108m --lifetime-stagger 6m --lifetime-restart" in script
    assert "--nthreads 1" in script


def test_units_written_differently_are_the_same_unit(tmp_path, capsys):
    write_positions(tmp_path / "in", 1, shape=(32, 32))  # ImageJ unit "um"
    facts = InputFacts(units=["micrometer", "micrometer"], pixel_size=[0.1, 0.1])
    recipe = Recipe.from_params(Recipe.from_defaults("tv").params_model(), input=facts)
    path = recipe.save(tmp_path / "tv.yaml")
    assert main(["validate", str(path), str(tmp_path / "in" / "*.tif")]) == 0
    assert "0 problem(s)" in capsys.readouterr().out

"""The quick commands (``recipe``, ``validate``, ``status``, ``--help``) import no heavy
module (issue 18 item 16), and the lazy method packages they rely on still export everything.

Each command runs in a fresh interpreter that reports, after the command, which forbidden
modules ``sys.modules`` holds: torch (2-18 s by load), napari and the Qt/vispy stack,
distributed and CuPy. ``validate`` may load torch: it runs each job's own input checks
(:data:`VALIDATE_LOADS`). The lazy packages (``compute/_lazy.py``) are checked against their
modules: every name of ``__all__`` is in ``dir()`` and is the object its module defines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tifffile

from napari_gpuscope.methods import METHODS

FORBIDDEN = (
    "torch",
    "cupy",
    "napari",
    "qtpy",
    "PyQt5",
    "PyQt6",
    "PySide2",
    "PySide6",
    "vispy",
    "magicgui",
    "matplotlib",
    "distributed",
    "dask.distributed",
)

# Runs each command (a JSON list of argv lists) with the console command's main and prints,
# per command, its exit code and the forbidden modules loaded so far.
_WRAPPER = textwrap.dedent(
    """
    import json, sys
    from napari_gpuscope.cli import main
    forbidden = json.loads(sys.argv[1])
    for argv in json.loads(sys.argv[2]):
        try:
            code = main(argv)
        except SystemExit as exc:  # --help
            code = exc.code
        loaded = [m for m in forbidden if m in sys.modules]
        print("QUICK " + json.dumps({"argv": argv, "code": code, "loaded": loaded}))
    """
)

# Every registered method's package of array code, by method id (read at collection).
METHOD_PACKAGES = {spec.id: spec.compute_package for spec in METHODS.values()}


def _quick(commands: list[list[str]], cwd: Path) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, json.dumps(FORBIDDEN), json.dumps(commands)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    results = [
        json.loads(line[6:]) for line in done.stdout.splitlines() if line.startswith("QUICK ")
    ]
    assert len(results) == len(commands), done.stdout + done.stderr
    return results


VALIDATE_LOADS = ("torch",)
"""What ``validate`` may load: it makes each position's job to run the job's own input checks
(issue 26 item 7: it passed inputs that run then failed), and the jobs are torch modules. It
still loads no GUI, Dask or CuPy."""


def _assert_light(results: list[dict], codes: tuple[int, ...] = (0,)) -> None:
    for result in results:
        assert result["code"] in codes, result
        allowed = VALIDATE_LOADS if result["argv"][:1] == ["validate"] else ()
        loaded = [name for name in result["loaded"] if name not in allowed]
        assert loaded == [], f"{result['argv']} imported {result['loaded']}"


@pytest.fixture(scope="module")
def positions(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quick")
    rng = np.random.default_rng(0)
    for index in range(3):
        tifffile.imwrite(folder / f"p{index}.tif", rng.poisson(20, (48, 48)).astype(np.uint16))
    return folder


def test_help_and_recipes_of_every_job_import_no_heavy_module(positions):
    from napari_gpuscope.compute.flatfield._profile import ShadingProfile

    yy, xx = np.mgrid[:32, :32]
    flat = 1.2 - 0.4 * ((yy - 16) ** 2 + (xx - 16) ** 2) / 512
    ShadingProfile.from_arrays(flat / flat.mean()).save(positions / "scope.tif")
    commands = [["--help"], ["recipe", "--help"], ["run", "--help"], ["status", "--help"]]
    for spec in METHODS.values():
        for job in spec.job_ids:
            out = f"{spec.id}-{job}.yaml"
            extra = (
                ["--artifact", "profile=scope.tif"] if "profile" in spec.job_spec(job).needs else []
            )
            commands.append(["recipe", spec.id, "--job", job, *extra, "-o", out])
    results = _quick(commands, positions)
    _assert_light(results)
    assert (positions / "flatfield-apply.yaml").read_text().count("sha256") == 2  # tif + json


def test_validate_of_every_job_runs_its_checks_without_a_gui_dask_or_cupy(positions):
    recipes, validates = [], []  # one interpreter: the recipes first, before torch loads
    for spec in METHODS.values():
        for job in spec.job_ids:
            if "profile" in spec.job_spec(job).needs:
                continue  # a recipe with an artifact: the test above
            recipe = f"validate-{spec.id}-{job}.yaml"
            recipes += [["recipe", spec.id, "--job", job, "-o", recipe]]
            validates += [["validate", recipe, "p*.tif"]]
    commands = recipes + validates
    results = _quick(commands, positions)
    # 1: the job refuses these single 48 x 48 images (eSRRF and drift want frames), as run would
    _assert_light(results, codes=(0, 1))
    assert len(results) >= 12


@pytest.mark.parametrize("package", METHOD_PACKAGES.values(), ids=list(METHOD_PACKAGES))
def test_a_method_package_exports_everything_lazily(package):
    code = textwrap.dedent(
        f"""
        import importlib, inspect, json, pydoc, sys
        name = "{package}"
        package = importlib.import_module(name)
        before = sorted(m for m in ("torch", "scipy") if m in sys.modules)
        missing_dir = sorted(set(package.__all__) - set(dir(package)))
        wrong = []
        for export in package.__all__:
            value = getattr(package, export)
            # The same object under the same name in a module of the compute layer.
            homes = [m for n, m in list(sys.modules.items()) if n.startswith(name + ".")
                     or n == "napari_gpuscope.compute.geometry"]
            if inspect.ismodule(value):  # batch_hooks: the package's _batch module
                if not any(m is value for m in homes):
                    wrong.append(export)
            elif not any(getattr(m, export, None) is value for m in homes):
                wrong.append(export)
        text = pydoc.render_doc(package, renderer=pydoc.plaintext)
        undocumented = sorted(e for e in package.__all__ if e not in text)
        print(json.dumps({{"before": before, "missing_dir": missing_dir, "wrong": wrong,
                          "undocumented": undocumented}}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report == {"before": [], "missing_dir": [], "wrong": [], "undocumented": []}


def test_parameter_models_and_the_registry_load_without_torch():
    code = textwrap.dedent(
        """
        import json, sys
        from napari_gpuscope.methods import METHODS
        from napari_gpuscope.compute.tv import TVParams
        from napari_gpuscope.compute.esrrf import EsrrfParams, SweepParams
        models = [job.params_class().__name__ for spec in METHODS.values() for job in spec.jobs]
        for spec in METHODS.values():
            for job in spec.jobs:
                job.params_class()().to_dict()
        print(json.dumps({"models": models, "torch": "torch" in sys.modules}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["torch"] is False
    assert "TVParams" in report["models"] and "SweepParams" in report["models"]


def test_a_job_still_imports_its_module_on_first_use():
    """``from ... import denoise`` gives the job, with torch, and the package's ``compute.tv``
    attribute works without an explicit import of the subpackage."""
    code = textwrap.dedent(
        """
        import sys
        import napari_gpuscope.compute as compute
        assert "torch" not in sys.modules
        from napari_gpuscope.compute.tv import denoise, TVParams
        from napari_gpuscope.compute.tv._job import denoise as defined
        assert denoise is defined and "torch" in sys.modules
        assert compute.tv.TVParams is TVParams and "tv" in dir(compute)
        try:
            compute.tv.no_such_name
        except AttributeError as exc:
            assert "no_such_name" in str(exc)
        else:
            raise AssertionError("no AttributeError")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


# -- a real run: status of its store, a clean shutdown, the progress lines of a log -----------

# Spawned Dask workers (their command line has --multiprocessing-fork) take 6 s to exit, as a
# worker holding torch and a position's arrays can on a busy machine: distributed's default
# close gives a worker 4 s before it kills it ("Worker process still alive ... killing").
_SLOW_EXIT = textwrap.dedent(
    """
    import sys
    if "--multiprocessing-fork" in getattr(sys, "orig_argv", ()):
        import atexit, time
        atexit.register(time.sleep, 6)
    """
)


@pytest.fixture(scope="module")
def finished_run(positions, tmp_path_factory):
    slow = tmp_path_factory.mktemp("slow-exit")
    (slow / "sitecustomize.py").write_text(_SLOW_EXIT)
    subprocess.run(
        [sys.executable, "-m", "napari_gpuscope.cli", "recipe", "tv", "-o", "run-tv.yaml"],
        cwd=positions,
        check=True,
        capture_output=True,
    )
    paths = [str(slow), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    run = ["run", "run-tv.yaml", "p*.tif", "--out", "run.zarr", "--device", "cpu"]
    done = subprocess.run(
        [sys.executable, "-m", "napari_gpuscope.cli", *run, "--workers", "1", "--dashboard", ""],
        cwd=positions,
        env=env,
        capture_output=True,  # not a terminal: the progress prints lines
        text=True,
        timeout=300,
    )
    return done, positions / "run.zarr"


@pytest.mark.slow
def test_a_cli_run_shuts_its_cluster_down_without_killing_workers(finished_run):
    done, _ = finished_run
    assert done.returncode == 0, done.stderr
    assert "computed 3, skipped 0" in done.stdout
    assert "still alive" not in done.stderr and "killing" not in done.stderr, done.stderr


@pytest.mark.slow
def test_a_run_logged_off_a_terminal_prints_each_progress_line_once(finished_run):
    done, _ = finished_run
    lines = [line for line in done.stderr.splitlines() if "remaining |" in line]
    assert "\r" not in done.stderr
    assert len(lines) == len(set(lines)) >= 1
    assert lines[-1].split(" | ")[0].endswith("3 done, 0 failed, 0 remaining")


@pytest.mark.slow
def test_status_and_validate_of_a_run_import_no_heavy_module(finished_run, positions):
    _, out = finished_run
    # The store is also an input: a Zarr group of OME-Zarr images (read with zarr, no Dask).
    commands = [["status", str(out)], ["status", "--help"], ["validate", "run-tv.yaml", str(out)]]
    results = _quick(commands, positions)
    _assert_light(results)

"""Architecture rules checked at run time, in fresh interpreters (import-linter checks them
statically): the compute layer imports no GUI toolkit, no plotting and none of the plugin's
upper layers; the GPU kit's tests collect without napari or dask (pydantic, which the parameter
models need, is carried to the GPU machine by the kit: scripts/gpu-check.sh)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

GUI = (
    "qtpy",
    "PyQt5",
    "PyQt6",
    "PySide2",
    "PySide6",
    "napari",
    "magicgui",
    "superqt",
    "vispy",
    "matplotlib",
)
UPPER_LAYERS = (
    "napari_gpuscope.widgets",
    "napari_gpuscope.export",
    "napari_gpuscope.methods",
    "napari_gpuscope.method_specs",
    "napari_gpuscope.demos",
    "napari_gpuscope.cli",
    "napari_gpuscope.sample_data",
)


def _run(code: str, **kwargs) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        **kwargs,
    )
    return result.stdout.strip()


def _loaded(prefixes: tuple[str, ...]) -> str:
    """Code that prints the loaded modules equal to or below one of ``prefixes``."""
    return (
        f"bad = sorted(k for k in sys.modules if any(k == p or k.startswith(p + '.') "
        f"for p in {prefixes!r}))\n"
        "print(','.join(bad))\n"
    )


def test_compute_layer_imports_no_gui_no_plotting_and_no_upper_layer():
    code = (
        "import importlib, pkgutil, sys\n"
        "import napari_gpuscope.compute as c\n"
        "for m in pkgutil.walk_packages(c.__path__, c.__name__ + '.'):\n"
        "    importlib.import_module(m.name)\n" + _loaded(GUI + UPPER_LAYERS)
    )
    assert _run(code) == "", "the compute layer pulled these in"


def test_provenance_and_sample_data_import_no_gui():
    code = "import sys\nimport napari_gpuscope.provenance, napari_gpuscope.sample_data\n"
    assert _run(code + _loaded(GUI)) == ""


def test_gpu_kit_tests_collect_without_napari_or_dask(tmp_path):
    """scripts/gpu-check.sh runs ``pytest tests/gpu tests/compute -m gpu`` on a machine holding
    only torch, CuPy, NumPy, SciPy, scikit-image, tifffile and pytest, plus pydantic and its
    dependencies, which the kit installs from .kit-wheels first."""
    plugin = tmp_path / "loaded_modules.py"
    plugin.write_text(
        textwrap.dedent(
            """
            import sys

            def pytest_collection_finish(session):
                top = {name.split(".")[0] for name in sys.modules}
                print("LOADED:" + ",".join(sorted(top)))
            """
        )
    )
    code = (
        "import sys, pytest\n"
        "sys.exit(pytest.main(['tests/gpu', 'tests/compute', '-m', 'gpu', '--collect-only',\n"
        "    '-q', '-p', 'no:cacheprovider', '-o', 'addopts=', '-p', 'loaded_modules']))\n"
    )
    env = {
        **os.environ,
        # The test environment's plugins (napari's, pytest-qt) are not on the GPU machine.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    }
    out = _run(code, env=env, cwd=Path(__file__).resolve().parents[1])
    (line,) = [line for line in out.splitlines() if line.startswith("LOADED:")]
    loaded = set(line.removeprefix("LOADED:").split(","))
    assert "torch" in loaded  # the plugin saw the collection
    assert not loaded & {"napari", "dask", "zarr", "yaml", *GUI}

"""``napari_gpuscope.compute`` names its public modules and method packages in ``__all__``
(every one, and only those), and importing the package imports none of them."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import napari_gpuscope.compute as compute


def test_all_lists_every_public_module_of_the_package():
    public = {m.name for m in pkgutil.iter_modules(compute.__path__) if not m.name.startswith("_")}
    assert sorted(compute.__all__) == sorted(public)


def test_all_lists_the_package_of_every_registered_method_of_the_house():
    """A method's package is listed by being there: no edit to ``compute/__init__.py``."""
    from napari_gpuscope import methods

    house = [
        spec.compute_package
        for spec in methods.METHODS.values()
        if spec.compute_package.startswith("napari_gpuscope.compute.")
    ]
    assert house  # the plugin's own methods live here
    for package in house:
        name = package.removeprefix("napari_gpuscope.compute.")
        assert name in compute.__all__ and getattr(compute, name).__name__ == package


def test_importing_the_package_imports_none_of_its_modules():
    code = (
        "import sys, napari_gpuscope.compute as c; "
        "print(sorted(m for m in sys.modules if m.startswith('napari_gpuscope.compute.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

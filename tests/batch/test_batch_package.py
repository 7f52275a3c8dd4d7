"""``napari_gpuscope.batch`` names its public modules in ``__all__`` (every one, and only
those), and importing the package imports none of them."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import napari_gpuscope.batch as batch


def test_all_lists_every_public_module_of_the_package():
    public = {m.name for m in pkgutil.iter_modules(batch.__path__) if not m.name.startswith("_")}
    assert sorted(batch.__all__) == sorted(public)


def test_importing_the_package_imports_none_of_its_modules():
    code = (
        "import sys, napari_gpuscope.batch as b; "
        "print(sorted(m for m in sys.modules if m.startswith('napari_gpuscope.batch.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

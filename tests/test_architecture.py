"""Architecture rule: the compute layer never imports Qt, napari or magicgui."""

import subprocess
import sys

FORBIDDEN = (
    "qtpy",
    "PyQt5",
    "PyQt6",
    "PySide2",
    "PySide6",
    "napari",
    "magicgui",
    "superqt",
    "vispy",
)


def test_compute_layer_imports_no_gui_modules():
    code = (
        "import importlib, pkgutil, sys\n"
        "import napari_gpuscope.compute as c\n"
        "for m in pkgutil.walk_packages(c.__path__, c.__name__ + '.'):\n"
        "    importlib.import_module(m.name)\n"
        "import napari_gpuscope.provenance, napari_gpuscope.sample_data\n"
        f"bad = sorted(k for k in sys.modules if k.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert result.stdout.strip() == "", f"compute pulled in GUI modules: {result.stdout}"

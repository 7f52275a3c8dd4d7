"""napari_gpuscope.live imports no GUI toolkit, and nothing heavy until a session runs.

Run in a fresh interpreter, as tests/test_architecture.py checks the compute layer; without
pymmcore-plus too (the package needs it only to attach to a core, which the caller passes).
"""

from __future__ import annotations

import subprocess
import sys

GUI = ("qtpy", "PyQt5", "PyQt6", "PySide2", "PySide6", "magicgui", "superqt", "vispy", "matplotlib")


def test_live_imports_no_gui_toolkit_nor_torch_nor_pymmcore():
    code = (
        "import sys\n"
        "import napari_gpuscope.live\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    loaded = set(out)
    assert not loaded & set(GUI), sorted(loaded & set(GUI))
    assert "torch" not in loaded and "pymmcore_plus" not in loaded and "napari" not in loaded

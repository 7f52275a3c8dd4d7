"""The dock view of the test-only method of ``tests/tiny_method.py``: a thin MethodDock.

Everything else (the parameter form, Run, streaming, results, provenance) comes from the base
and the registry entry, so this class exists only once the method is registered.
"""

from __future__ import annotations

from napari_gpuscope.widgets import MethodDock


class TinyDock(MethodDock):
    """Scales the input layer (``tiny_method.iter_tiny``)."""

    method_id = "tiny"

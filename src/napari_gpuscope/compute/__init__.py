"""Pure array code for napari-gpuscope: torch, CuPy and NumPy only.

Nothing here imports Qt, napari or magicgui, nor the method registry (import-linter contracts
in ``pyproject.toml``; a test also checks it in a fresh interpreter), so every method can run
from scripts, notebooks and batch jobs. Importing this package imports none of its modules:
each is imported when used (``compute.tv`` as an attribute too). The method packages export
their names the same way (:mod:`._lazy`): a parameter model imports without torch, a job
imports torch when it is first used. Modules:

- :mod:`.devices` -- GPU discovery and device resolution (no silent CPU fallback).
- :mod:`.jobs` -- the progress protocol: generators of :class:`~.jobs.Progress` updates.
- :mod:`.job_control` -- what a consumer steers a job with (cancel, stop) and paces previews by.
- :mod:`.params` -- the parameter models (validated, self-describing, JSON/YAML).
- :mod:`.results` -- the result protocol (:class:`~.results.MethodResult`) and layer tuples.
- :mod:`.preview` -- the plane a live preview computes (:class:`~.preview.PlaneView`) and
  :class:`~.preview.PreviewResult`; each method's preview job lives in its package.
- :mod:`.memory` -- chunk planning from free device memory and out-of-memory retries.
- :mod:`.chunking` -- axis layouts and device-sized chunks with halos.
- :mod:`.arrays` -- input validation and host/device transfer, chunk by chunk.
- :mod:`.geometry` -- difference weights from physical pixel sizes.
- :mod:`.camera`, :mod:`.noise` -- the camera model, noise levels and the GAT.
- :mod:`.kernels` -- fused CUDA kernels (CuPy ``RawModule``) with torch twins.
- one package per method (the method registry, :mod:`napari_gpuscope.methods`, names each
  method's package: ``MethodSpec.compute_package``).

``__all__`` lists every public module and package found here, so a new method's package needs
no edit to this file.
"""

import pkgutil as _pkgutil

__all__ = sorted(
    module.name for module in _pkgutil.iter_modules(__path__) if not module.name.startswith("_")
)
del _pkgutil


def __getattr__(name: str) -> object:
    """``compute.tv`` without ``import napari_gpuscope.compute.tv`` first (PEP 562)."""
    if name in __all__:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

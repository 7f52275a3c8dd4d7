"""Pure array code for napari-gpuscope: torch, CuPy and NumPy only.

Nothing here imports Qt, napari or magicgui (a test checks this in a fresh interpreter), so every
method can run from scripts, notebooks and batch jobs. Modules:

- :mod:`.devices` -- GPU discovery and device resolution (no silent CPU fallback).
- :mod:`.jobs` -- the progress protocol: generators of :class:`~.jobs.Progress` updates.
- :mod:`.memory` -- chunk planning from free device memory and out-of-memory retries.
- :mod:`.arrays` -- input validation and host/device transfer, chunk by chunk.
- :mod:`.kernels` -- fused CUDA kernels (CuPy ``RawModule``) with torch twins.
- one module per method, e.g. :mod:`.tv`.
"""

"""Clipping an image to a range: the tests' method package's array code.

:func:`iter_clip` is the job (:class:`ClipParams` in, :class:`ClipResult` out),
:func:`clip` its blocking twin. Like the house's method packages it imports no GUI toolkit,
none of the registry, docks or samples, and no other method's package (the import-linter
contracts generated with it registered say so).

Modules: :mod:`._params` (the parameter model), :mod:`._job` (the job and its result).
"""

from napari_gpuscope.compute._lazy import attach

__all__ = ["ClipParams", "ClipResult", "clip", "iter_clip"]

__getattr__, __dir__ = attach(
    __name__,
    globals(),
    {"._job": ["ClipResult", "clip", "iter_clip"], "._params": ["ClipParams"]},
)

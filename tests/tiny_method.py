"""A method that exists only in the tests: everything a method brings, in one small module.

:data:`SPEC` is its registry entry. ``tests/test_adding_a_method.py`` registers it at run time
(:func:`napari_gpuscope.methods.registered`) and checks that every part of the house that lists
methods picks it up; its dock view is ``tests/widgets/tiny_dock.py``. The title holds a colon
and a ``|`` on purpose: the manifest must quote it and the README's tables escape it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from napari_gpuscope.compute.jobs import Progress
from napari_gpuscope.compute.params import Params, param
from napari_gpuscope.compute.results import image_layer
from napari_gpuscope.methods import JobSpec, MethodSpec, SampleSpec


class TinyParams(Params):
    """Scale an image by a factor."""

    method_id: ClassVar[str] = "tiny"
    factor: float = param(2.0, minimum=0.0, maximum=10.0, unit="x", help="Multiply by this")


@dataclass(frozen=True)
class TinyResult:
    """The scaled image (result protocol)."""

    image: np.ndarray
    factor: float
    stopped_early: bool = False

    def summary(self) -> dict[str, Any]:
        return {"factor": self.factor}

    def describe(self) -> str:
        return f"scaled by {self.factor:g}"

    def layers(self, name="image", geometry=None, metadata=None):
        return [
            image_layer(self.image, f"{name} [tiny x{self.factor:g}]", geometry, metadata=metadata)
        ]


def iter_tiny(data: Any, params: TinyParams | None = None, *, device: str | None = None):
    """The job: one progress update, then the scaled image (any device: it is NumPy)."""
    params = params or TinyParams()
    yield Progress(0.0, "scaling")
    image = np.asarray(data, dtype=np.float32) * np.float32(params.factor)
    return TinyResult(image, params.factor)


class TinyOffsetParams(Params):
    """Add a constant to an image (the method's second job)."""

    method_id: ClassVar[str] = "tiny"
    shift: float = param(1.0, minimum=-100.0, maximum=100.0, unit="ADU", help="Add this")


def iter_offset(data: Any, params: TinyOffsetParams | None = None, *, device: str | None = None):
    """The second job: the image plus a constant (its result reuses TinyResult's layers)."""
    params = params or TinyOffsetParams()
    yield Progress(0.0, "adding")
    return TinyResult(np.asarray(data, dtype=np.float32) + np.float32(params.shift), 1.0)


def ramp() -> list[tuple[Any, dict[str, Any], str]]:
    """The sample: a 16 x 24 ramp."""
    data = np.arange(16 * 24, dtype=np.uint16).reshape(16, 24)
    return [(data, {"name": "ramp", "scale": (0.5, 0.5)}, "image")]


def demo_params(sample_kwargs: Mapping[str, Any]) -> TinyParams:
    """The headless demo's parameters for a sample."""
    return TinyParams(factor=3.0)


SPEC = MethodSpec(
    id="tiny",
    title="Tiny scale: x|y",
    jobs=(
        JobSpec("scale", "Scale", "tiny_method:TinyParams", "tiny_method:iter_tiny"),
        JobSpec("offset", "Offset", "tiny_method:TinyOffsetParams", "tiny_method:iter_offset"),
    ),
    dock="tiny_dock:TinyDock",
    samples=(SampleSpec("tiny-ramp", "Ramp (tiny)", "tiny_method:ramp"),),
    demo_params="tiny_method:demo_params",
    menu="napari/layers/transform",
    description="Scales an image: the method the tests add at run time.",
)
"""The one edit a method makes to the house, here made at run time."""

"""ClipParams: every parameter of the clip job once."""

from __future__ import annotations

from typing import ClassVar

from napari_gpuscope.compute.params import Params, param


class ClipParams(Params):
    """Clip an image to ``[low, high]``."""

    method_id: ClassVar[str] = "clip"
    low: float = param(0.0, minimum=-1e6, maximum=1e6, unit="ADU", help="Values below become this")
    high: float = param(100.0, minimum=-1e6, maximum=1e6, unit="ADU", help="Values above too")
    blocks: int = param(4, minimum=1, maximum=64, advanced=True, help="Progress updates")

    def validate(self) -> None:
        if self.low > self.high:
            self.fail("low", f"({self.low:g}) must not exceed high={self.high:g}")

    @property
    def label(self) -> str:
        return f"{self.low:g}-{self.high:g}"

"""Parameters of the sweep job: the grid to sweep and the eSRRF parameters it holds fixed."""

from __future__ import annotations

from ..params import param
from ._params import EsrrfParams

__all__ = ["SweepParams"]


MAX_SWEEP_VALUES = 100
"""The most radii (or sensitivities) one sweep takes: a cell is one eSRRF reconstruction."""


def duplicates_text(values: tuple[float, ...]) -> str:
    """The repeated values, a few of them, in words (never the whole list: a list of
    thousands made a 25 kB message).

    Examples
    --------
    >>> duplicates_text((1.0, 2.0, 1.0, 3.0, 2.0))
    '1 and 2 (each value once)'
    """
    seen: set[float] = set()
    repeated: list[float] = []
    for value in values:
        if value in seen and value not in repeated:
            repeated.append(value)
        seen.add(value)
    shown = [f"{v:g}" for v in repeated[:5]]
    words = ", ".join(shown[:-1]) + f" and {shown[-1]}" if len(shown) > 1 else shown[0]
    more = f" and {len(repeated) - 5} more" if len(repeated) > 5 else ""
    return f"{words}{more} (each value once)"


class SweepParams(EsrrfParams):
    """eSRRF's parameters plus the radius x sensitivity grid of a QnR sweep.

    ``radius`` and ``sensitivity`` are not used (the grid replaces them); time points are not
    used either (the sweep's frames form one reconstruction).

    Examples
    --------
    >>> p = SweepParams(radii=(1.0, 2.0), sensitivities=(1.0,), magnification=2)
    >>> p.radii, p.base().magnification
    ((1.0, 2.0), 2)
    >>> SweepParams(radii=(0.1,))
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.params.ParameterError: SweepParams.radii[0] must be ...
    """

    radii: tuple[float, ...] = param(
        (1.0, 1.5, 2.0),
        unit="px",
        minimum=0.5,
        maximum=5.0,
        help="Radii to try (columns of the grid), in input pixels",
    )
    sensitivities: tuple[float, ...] = param(
        (1.0, 2.0),
        minimum=0.0,
        maximum=10.0,
        help="Sensitivities to try (rows of the grid)",
    )
    sweep_frames: int | None = param(
        None,
        minimum=4,
        maximum=10_000_000,
        help="Use the first this many frames (at least 4); None = all frames",
        advanced=True,
    )

    def validate(self) -> None:
        super().validate()
        for name in ("radii", "sensitivities"):
            values = getattr(self, name)
            if not values:
                self.fail(name, "must hold at least one value")
            if len(values) > MAX_SWEEP_VALUES:
                self.fail(
                    name,
                    f"holds {len(values)} values; a sweep takes at most {MAX_SWEEP_VALUES} "
                    "per axis (each cell of the grid is one eSRRF reconstruction)",
                )
            if len(set(values)) != len(values):
                self.fail(name, f"holds duplicates: {duplicates_text(values)}")

    def base(self) -> EsrrfParams:
        """The eSRRF parameters the sweep holds fixed."""
        fields = self.to_dict()
        # to_dict may leave out fields at their default (EsrrfParams' later additions, so
        # that older recipes hash as before): those take the default here too.
        return EsrrfParams.from_dict(
            {name: fields[name] for name in EsrrfParams.names() if name in fields}
        )

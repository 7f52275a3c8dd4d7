"""The run report (``--report FILE``): what was computed, skipped and failed, and how fast."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import JSONDict

__all__ = ["BatchReport"]


@dataclass
class BatchReport:
    """Outcome of one batch run.

    Attributes
    ----------
    recipe_hash, method, input, out, device : str
    done : list of str
        Positions computed in this run.
    skipped : list of str
        Positions skipped as already complete (``--resume``).
    failed : dict
        Position name -> reason.
    timings : dict
        ``wall_seconds``, ``positions_per_second``, ``position_seconds`` (name -> seconds in its
        task), ``mean_position_seconds``, ``position_stages`` (name -> ``{"read", "compute",
        "write"}`` seconds, see :func:`~napari_gpuscope.batch.tasks.run_position`) and
        ``mean_stage_seconds`` (the same, averaged over the positions computed).
    dashboard : str or None
        The Dask dashboard's address.
    dry_run : bool
        Whether nothing was computed (``done`` then lists what *would* be).
    interrupted : bool
        Whether the run was interrupted (the positions in none of the lists are pending).
    automatic : dict
        Position -> its automatic choices (name -> value, as its provenance's ``"automatic"``
        names them; positions that chose nothing are left out).
    automatic_summary : dict
        Choice name -> ``{"positions", "lowest", "highest"}`` over the positions computed (the
        values ordered by their leading number, each with its position), set by
        :meth:`finish`.
    workers : dict
        Dask worker -> ``{"busy_seconds", "positions", "gpu"}``: the time it had a position
        in hand (reading, computing or writing), how many it finished, and the GPUs it saw
        (``CUDA_VISIBLE_DEVICES``; None on the CPU).

    Examples
    --------
    >>> report = BatchReport("abc", "tv", "in/*.tif", "out.zarr", "cpu", done=["a"])
    >>> report.exit_code, report.failed
    (0, {})
    """

    recipe_hash: str
    method: str
    input: str
    out: str
    device: str
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    timings: JSONDict = field(default_factory=dict)
    dashboard: str | None = None
    dry_run: bool = False
    interrupted: bool = False
    workers: dict[str, JSONDict] = field(default_factory=dict)
    automatic: dict[str, dict[str, str]] = field(default_factory=dict)
    automatic_summary: dict[str, JSONDict] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 when nothing failed, 1 when a position failed (failures are never silent), 130
        when interrupted."""
        if self.interrupted:
            return 130
        return 1 if self.failed else 0

    def finish(
        self,
        wall_seconds: float,
        position_seconds: dict[str, float],
        position_stages: dict[str, dict[str, float]] | None = None,
    ) -> None:
        """Fill in the timings (``position_stages``: name -> read/compute/write seconds)."""
        count = len(self.done)
        stages = dict(sorted((position_stages or {}).items()))
        names = ("read", "compute", "write")
        means = {
            stage: round(sum(s.get(stage, 0.0) for s in stages.values()) / len(stages), 4)
            for stage in names
            if stages
        }
        self.timings = {
            "wall_seconds": round(wall_seconds, 4),
            "positions_per_second": round(count / wall_seconds, 4) if wall_seconds > 0 else None,
            "mean_position_seconds": (
                round(sum(position_seconds.values()) / len(position_seconds), 4)
                if position_seconds
                else None
            ),
            "position_seconds": dict(sorted(position_seconds.items())),
            "mean_stage_seconds": means,
            "position_stages": stages,
        }

    def note_automatic(self, position: str, choices: object) -> None:
        """Keep a computed position's automatic choices (a mapping of str to str; ignored
        when empty or not a mapping) and update :attr:`automatic_summary`."""
        if isinstance(choices, dict) and choices:
            self.automatic[position] = {str(k): str(v) for k, v in choices.items()}
            self.automatic_summary = _automatic_summary(self.automatic)

    def to_json(self) -> str:
        """The report as JSON text."""
        return json.dumps(asdict(self), indent=2, sort_keys=False)

    def write(self, path: str | Path) -> Path:
        """Write :meth:`to_json` to ``path``."""
        path = Path(path)
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    def lines(self) -> list[str]:
        """A short summary for the terminal."""
        verb = "would compute" if self.dry_run else "computed"
        out = [
            f"{verb} {len(self.done)}, skipped {len(self.skipped)} (already complete), "
            f"failed {len(self.failed)}; recipe {self.recipe_hash[:12]}"
        ]
        rate = self.timings.get("positions_per_second")
        if rate:
            out.append(f"{self.timings['wall_seconds']:.1f} s, {rate:.2f} positions/s")
        means = self.timings.get("mean_stage_seconds")
        if means:
            out.append(
                "per position (mean): "
                + ", ".join(f"{stage} {seconds:.3f} s" for stage, seconds in means.items())
            )
        if self.workers:
            busy = []
            for name, worker in self.workers.items():
                gpu = f" (GPU {worker['gpu']})" if worker.get("gpu") else ""
                busy.append(f"{name}{gpu} {worker['busy_seconds']:.1f} s")
            out.append("busy per worker: " + ", ".join(busy))
        for name, summary in self.automatic_summary.items():
            low, high, count = summary["lowest"], summary["highest"], summary["positions"]
            span = low if count == 1 else f"{low} to {high}"
            out.append(f"automatic {name}: {span} ({count} position{'s' * (count != 1)})")
        if self.interrupted:
            out.append("INTERRUPTED: the other positions are pending; rerun with --resume")
        out += [f"FAILED {name}: {reason}" for name, reason in sorted(self.failed.items())]
        return out


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _automatic_summary(automatic: dict[str, dict[str, str]]) -> dict[str, JSONDict]:
    """Per choice: how many positions made it, and its lowest and highest value ("0.0031
    (A01)"), ordered by the value's leading number (as text where a value has none).

    Examples
    --------
    >>> _automatic_summary({"A01": {"regularization": "0.0093"},
    ...                     "B02": {"regularization": "0.0031"}})
    {'regularization': {'positions': 2, 'lowest': '0.0031 (B02)', 'highest': '0.0093 (A01)'}}
    """
    values: dict[str, list[tuple[str, str]]] = {}
    for position, choices in sorted(automatic.items()):
        for name, value in choices.items():
            values.setdefault(name, []).append((value, position))

    def order(item: tuple[str, str]) -> tuple[int, float, str]:
        match = _NUMBER.search(item[0])
        return (0, float(match.group()), item[0]) if match else (1, 0.0, item[0])

    out: dict[str, JSONDict] = {}
    for name, items in values.items():
        items.sort(key=order)
        (low, low_at), (high, high_at) = items[0], items[-1]
        out[name] = {
            "positions": len(items),
            "lowest": f"{low} ({low_at})",
            "highest": f"{high} ({high_at})",
        }
    return out

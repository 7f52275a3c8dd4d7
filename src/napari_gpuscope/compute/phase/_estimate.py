"""The tilt-estimation job: per-tile (or global) optimisation with progress and stop & keep."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..jobs import Job, Output, Progress, is_stop
from ..memory import MemoryRetry, plan_chunk
from ..results import Geometry, LayerDataTuple, image_layer, result_name, vectors_layer
from ._determined import MIN_SIGNAL_SHARE, not_determined_reason
from ._measurable import measurability
from ._outliers import replace_outlier_tiles
from ._params import PhaseParams
from ._tiles import TileGrid, TiltMap, canonical_tilt
from ._tilt import TiltStep, bytes_per_tile, optimise_tilt

__all__ = ["ESTIMATE_TILE", "GLOBAL_TILES", "TiltResult", "estimate_on_device", "tilt_grid"]

ESTIMATE_TILE = 128
"""Tiles are estimated on their central ESTIMATE_TILE x ESTIMATE_TILE pixels (the midband loss
needs no more; the cost of an iteration scales with the area)."""
GLOBAL_TILES = 2
"""A global estimate shares one tilt over up to GLOBAL_TILES x GLOBAL_TILES sampled tiles."""


@dataclass(frozen=True)
class TiltResult:
    """The estimated tilt map and how the optimiser got there.

    Attributes
    ----------
    tilt_map : TiltMap
        Per-tile (one tile for a global estimate) zenith, azimuth (canonical, forward-model
        convention) and focus offset.
    params : PhaseParams
        The parameters used.
    loss_history : list of float
        Summed loss (``params.tilt_loss``) per iteration.
    iterations : int
        Iterations run.
    converged : bool
        The optimiser stopped by its rule before the iteration limit, every tile's loss
        settled and its gradient fallen (:mod:`._convergence`), and the data determine the
        tilt (:attr:`signal_share`); never True when stopped early, at the iteration limit,
        or when the loss went non-finite.
    stopped_early : bool
        The user asked to stop and keep the best values so far.
    not_measurable : str
        Why the stack holds no tilt to measure (e.g. every slice constant: no contrast; or
        "tilt not determined by the data (...)": the loss's curvature in the zenith comes
        mostly from the model's capacity to fit noise, see :mod:`._determined`), or ``""``.
        Such a result is never ``converged``, and a batch fails its position.
    signal_share : tuple of float
        Per tile (one for a global estimate), the share of the loss's curvature that comes
        from the data at the best values. Empty when no parameter was free.
    undetermined_tiles : int
        Tiles of a fit that reached its stopping rule whose share is below one half: their
        tilt is not determined by the data, and the result is not ``converged`` (all of
        them: ``not_measurable`` says so). An unsettled fit is judged by neither: it is not
        converged anyway, and its shares are not at a minimum.
    """

    tilt_map: TiltMap
    params: PhaseParams
    loss_history: list[float] = field(default_factory=list)
    iterations: int = 0
    converged: bool = False
    stopped_early: bool = False
    non_finite: bool = False
    not_measurable: str = ""
    signal_share: tuple[float, ...] = ()
    undetermined_tiles: int = 0

    @property
    def is_global(self) -> bool:
        """One tilt for the whole field."""
        return self.tilt_map.grid.count == 1

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for provenance."""
        return {
            "params": self.params.to_dict(),
            "tilt_map": self.tilt_map.summary(),
            "loss_history": [float(v) for v in self.loss_history],
            "iterations": int(self.iterations),
            "converged": bool(self.converged),
            "stopped_early": bool(self.stopped_early),
            "non_finite": bool(self.non_finite),
            **({"not_measurable": self.not_measurable} if self.not_measurable else {}),
            **({"signal_share": list(self.signal_share)} if self.signal_share else {}),
            **({"undetermined_tiles": self.undetermined_tiles} if self.undetermined_tiles else {}),
        }

    def layers(
        self,
        name: str = "image",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        """The tilt map: zenith and azimuth (radians) as images of one pixel per tile, placed
        on the tile centres of the input, and the tilt vectors.

        Examples
        --------
        >>> grid = TileGrid.covering((64, 96), (2, 3))
        >>> tilt = TiltMap.uniform(grid, 0.2, 1.0)
        >>> layers = TiltResult(tilt, PhaseParams()).layers("cells")
        >>> [kwargs["name"] for _, kwargs, _ in layers]
        ['tilt zenith · cells', 'tilt azimuth · cells', 'tilt · cells']
        >>> grid.starts_y, grid.starts_x  # one map pixel per tile: its step is the tiles' step
        ((0, 26), (0, 28, 56))
        >>> layers[0][0].shape, layers[0][1]["scale"]
        ((2, 3), (26.0, 28.0))
        """
        meta = {**(metadata or {}), "tilt_map": self.tilt_map.summary()}
        planes = geometry.trailing(2) if geometry is not None else Geometry()
        step = [float(s) for s in planes.scale] if planes.scale else [1.0, 1.0]
        origin = [float(t) for t in planes.translate] if planes.translate else [0.0, 0.0]
        grid = self.tilt_map.grid
        first = grid.centers()[0]
        spacing = [
            (starts[-1] - starts[0]) / (len(starts) - 1) if len(starts) > 1 else size
            for starts, size in ((grid.starts_y, grid.size[0]), (grid.starts_x, grid.size[1]))
        ]
        tiles = Geometry(
            scale=tuple(s * d for s, d in zip(step, spacing, strict=True)),
            translate=tuple(o + s * c for o, s, c in zip(origin, step, first, strict=True)),
            units=planes.units,
            axis_labels=planes.axis_labels,
        )
        maps = [
            image_layer(
                np.asarray(values, np.float32).reshape(grid.tiles),
                result_name(f"tilt {what}", name),
                tiles,
                metadata={**meta, "intensity_unit": "rad", "quantity": f"tilt {what}"},
                colormap="magma" if what == "zenith" else "twilight",
                visible=what == "zenith",
            )
            for what, values in (
                ("zenith", self.tilt_map.zenith),
                ("azimuth", self.tilt_map.azimuth),
            )
        ]
        replaced = self.tilt_map.replaced
        colour: Any = "yellow"
        if replaced is not None and replaced.any():  # replaced by the neighbours' fit: orange
            colour = np.where(replaced.ravel(), "orange", "yellow").tolist()
        arrows = vectors_layer(
            self.tilt_map.vectors(),
            result_name("tilt", name),
            planes,
            metadata=meta,
            edge_color=colour,
            edge_width=2.0,
            vector_style="arrow",
        )
        return [*maps, arrows]

    def describe(self) -> str:
        """One line, e.g. ``"global tilt zenith 0.201 rad, azimuth 1.00 rad (converged in 12
        iterations, NAdam)"``."""
        m = self.tilt_map
        if self.is_global:
            what = (
                f"global tilt zenith {m.zenith.item():.3f} rad, azimuth {m.azimuth.item():.2f} rad"
            )
        else:
            what = (
                f"{m.grid.tiles[0]}x{m.grid.tiles[1]} tilt map, zenith "
                f"{m.zenith.min():.3f}-{m.zenith.max():.3f} rad"
            )
            replaced = 0 if m.replaced is None else int(m.replaced.sum())
            if replaced:
                what += (
                    f"; {replaced} tile{'s' if replaced > 1 else ''} that disagreed with "
                    "the neighbouring tiles replaced by their fit"
                )
        how = "NAdam" if self.params.optimizer == "nadam" else "damped Newton"
        if self.not_measurable:
            state = f"not measurable: {self.not_measurable}"
        elif self.non_finite:
            state = (
                f"loss became non-finite; kept the best values from {self.iterations} iterations"
            )
        elif self.stopped_early:
            state = f"stopped early after {self.iterations} iterations"
        elif self.undetermined_tiles:
            state = (
                f"{self.undetermined_tiles} of {len(self.signal_share)} tiles' tilt not "
                "determined by the data (their loss's curvature comes mostly from the model's "
                "capacity to fit noise)"
            )
        elif self.converged:
            state = f"converged in {self.iterations} iterations"
        else:
            state = (
                f"not converged: iteration limit {self.iterations} reached before the loss "
                "settled and its gradient fell; raise the iteration limit or use a larger tile"
            )
        return f"{what} ({state}, {how})"


def tilt_grid(shape: tuple[int, int], params: PhaseParams, tiles: Any = None) -> TileGrid:
    """The tiles of a tilt map: ``tiles`` (rows, columns), else the params' grid in "tiles" mode,
    else one tile (global)."""
    if tiles is None and params.tilt_mode == "tiles":
        tiles = (params.tiles_y, params.tiles_x)
    if tiles is None:
        return TileGrid(shape, (1, 1), shape, (0,), (0,))
    tiles = (int(tiles[0]), int(tiles[1]))
    if tiles[0] < 1 or tiles[1] < 1 or tiles[0] > shape[0] // 8 or tiles[1] > shape[1] // 8:
        raise ValueError(
            f"tiles={tiles} does not fit an image of {shape[0]} x {shape[1]} pixels (at least 1 "
            "and at most one tile per 8 pixels along each axis)"
        )
    return TileGrid.covering(shape, tiles, params.tile_overlap)


def _start_values(grid: TileGrid, params: PhaseParams, init: TiltMap | None):
    if init is None:
        return params.tilt_zenith, params.tilt_azimuth, 0.0
    if init.grid.tiles == grid.tiles:
        return init.zenith.ravel(), init.azimuth.ravel(), init.focus.ravel()
    if init.grid.count == 1:
        return init.zenith.item(), init.azimuth.item(), init.focus.item()
    raise ValueError(
        f"init has a {init.grid.tiles} tile grid; the estimate uses {grid.tiles}: give a map of "
        "the same grid (or a global one) as warm start"
    )


def estimate_on_device(
    data: torch.Tensor,
    params: PhaseParams,
    grid: TileGrid,
    init: TiltMap | None = None,
    memory_budget: int | None = None,
) -> Job[TiltResult]:
    """Estimate the tilt of ``grid``'s tiles (one tile: global) from ``data (Z, Y, X)``.

    Tiles are optimised together as one batch when the device holds them all, else in groups
    planned from the free memory (each group its own batch, one after the other; an
    out-of-memory error halves the group and starts it again).
    """
    shape = tuple(data.shape[-2:])
    shared = grid.count == 1
    work = TileGrid.sampling(shape, ESTIMATE_TILE, GLOBAL_TILES) if shared else grid
    work = work.central(ESTIMATE_TILE)
    zenith, azimuth, focus = _start_values(grid, params, init)
    count = work.count
    starts = {
        "zenith": np.broadcast_to(np.asarray(zenith, np.float64), (count,)).copy(),
        "azimuth": np.broadcast_to(np.asarray(azimuth, np.float64), (count,)).copy(),
        "focus": np.broadcast_to(np.asarray(focus, np.float64), (count,)).copy(),
    }
    per_tile = bytes_per_tile(params, work.size, int(data.shape[-3]))
    what = f"the tilt estimate of {work.size[0]} x {work.size[1]} tiles"
    group = count
    if not shared:  # shared parameters couple the tiles: one batch
        group = plan_chunk(count, per_tile, data.device, budget=memory_budget, what=what)
    retry = MemoryRetry(data.device, memory_budget, what)
    current = TiltStep(0, np.full(count, np.nan), *(starts[k].copy() for k in starts))
    boxes = work.boxes()
    history: list[float] = []
    shares: list[torch.Tensor] = []  # per group, on the device: read with the checks
    stopped = non_finite = False
    converged = True
    first = 0
    while first < count:
        last = min(count, first + group)
        members = slice(first, last)
        try:
            outcome = yield from _optimise_group(
                data, params, work, boxes[members], starts, members, shared, current, grid,
                shape, history, stopped, (first, last, count),
            )  # fmt: skip
        except Exception as exc:
            if not retry.recover(exc):
                raise
            if group == 1:
                raise retry.error(per_tile) from None
            group = max(1, group // 2)
            continue
        best, group_stopped, group_converged = outcome
        for name in ("zenith", "azimuth", "focus", "loss"):
            getattr(current, name)[members] = getattr(best, name)
        if best.signal_share is not None:
            shares.append(best.signal_share)
        stopped = stopped or group_stopped
        non_finite = non_finite or best.non_finite
        converged = converged and group_converged
        first = last
    tilt_map = _as_map(grid, current, shared)
    if not shared:
        tilt_map = replace_outlier_tiles(tilt_map)
    complete = len(shares) > 0 and sum(int(s.numel()) for s in shares) == (1 if shared else count)
    blank, read = measurability(data, params, torch.cat(shares) if complete else None)
    share = tuple(read)
    settled = converged and not (stopped or non_finite)
    blank = blank or (not_determined_reason(share) if settled else "")
    undetermined = sum(v < MIN_SIGNAL_SHARE for v in share) if settled else 0
    return TiltResult(
        tilt_map=tilt_map,
        params=params,
        loss_history=history,
        iterations=len(history),
        converged=converged and not (stopped or non_finite or blank or undetermined),
        stopped_early=stopped,
        non_finite=non_finite,
        not_measurable=blank,
        signal_share=share,
        undetermined_tiles=undetermined,
    )


def _optimise_group(
    data, params, work, boxes, starts, members, shared, current, grid, shape, history,
    stopped, span,
):  # fmt: skip
    """Run the optimiser on one group of tiles; returns (best step, stopped, converged)."""
    first, last, count = span
    optimiser = optimise_tilt(
        data,
        params,
        work,
        zenith=starts["zenith"][members],
        azimuth=starts["azimuth"][members],
        focus=starts["focus"][members],
        shared=shared,
        boxes=boxes,
    )
    n = params.iterations
    where = "" if (first, last) == (0, count) else f"tiles {first + 1}-{last} of {count}, "
    group_history: list[float] = []
    try:
        step, phase = optimiser.send(None)
        while True:
            group_history.append(float(step.loss.sum()))
            shown = TiltStep(step.iteration, current.loss.copy(), current.zenith.copy(),
                             current.azimuth.copy(), current.focus.copy())  # fmt: skip
            for name in ("zenith", "azimuth", "focus", "loss"):
                getattr(shown, name)[members] = getattr(step, name)
            command = yield Progress(
                None,
                # n is a cap, not the count: "3/40" read as a fraction beside "no estimate"
                f"{where}tilt: iteration {step.iteration + 1}, stops when converged (at most "
                f"{n}), loss {group_history[-1]:.4g}",
                step=step.iteration + 1,
                # not called "loss": its few-percent range reads better on a linear axis
                metrics={"tilt objective": group_history[-1]},
                outputs={  # phase first: the tilt vectors are drawn above it
                    "phase": Output(_mosaic(boxes, phase, shape), shape=shape),
                    "tilt": Output(_as_map(grid, shown, shared).vectors, kind="vectors"),
                },
            )
            stopped = stopped or is_stop(command)
            step, phase = optimiser.send(stopped)
    except StopIteration as done:
        best = done.value
    finally:
        optimiser.close()
    history.extend(group_history)
    converged = best.converged and not stopped
    return best, stopped, converged


def _as_map(grid: TileGrid, step: TiltStep, shared: bool) -> TiltMap:
    take = (lambda v: np.full(grid.tiles, v[0])) if shared else (lambda v: v.reshape(grid.tiles))
    zenith, azimuth = canonical_tilt(take(step.zenith), take(step.azimuth))
    loss = np.full(grid.tiles, step.loss.sum()) if shared else step.loss.reshape(grid.tiles)
    return TiltMap(grid, zenith, azimuth, take(step.focus), loss)


def _mosaic(boxes, phase: torch.Tensor, shape: tuple[int, int]):
    """Lazy full-size preview: each tile's current phase at its place, zeros elsewhere."""

    def make() -> np.ndarray:
        out = np.zeros(shape, dtype=np.float32)
        tiles = phase.cpu().numpy()
        for tile, (ys, xs) in zip(tiles, boxes, strict=True):
            out[ys, xs] = tile - tile.mean()
        return out

    return make

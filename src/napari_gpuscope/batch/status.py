"""``napari-gpuscope status OUT.zarr`` and ``napari-gpuscope validate RECIPE INPUT``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from napari_gpuscope.batch.inputs import Position
from napari_gpuscope.batch.ngff import ngff_unit
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.store import BatchStore

if TYPE_CHECKING:
    from napari_gpuscope.batch.inputs import InputInfo
    from napari_gpuscope.batch.recipe_sections import InputFacts

__all__ = ["StoreStatus", "has_input_facts", "store_status", "validate_inputs"]


@dataclass
class StoreStatus:
    """Per-position state of a batch output.

    Attributes
    ----------
    recipe_hash : str or None
        The last run's recipe hash (None: the store was never run).
    done, pending : list of str
    failed : dict
        Position -> reason.
    running : str or None
        Who holds the store's lock (pid, host, since; "stale" when its process is gone).
    """

    recipe_hash: str | None
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    running: str | None = None

    def lines(self) -> list[str]:
        """What ``status`` prints."""
        lock = [f"a run holds the store's lock: {self.running}"] if self.running else []
        if self.recipe_hash is None:
            return [*lock, "no batch run recorded here"]
        out = [
            *lock,
            f"recipe {self.recipe_hash[:12]}: {len(self.done)} done, {len(self.failed)} failed, "
            f"{len(self.pending)} pending",
        ]
        out += [f"failed  {name}: {reason}" for name, reason in sorted(self.failed.items())]
        out += [f"pending {name}" for name in self.pending]
        return out


def store_status(out: str | Path) -> StoreStatus:
    """Done / failed / pending per position of the last run recorded in ``out``.

    A position is done when its marker's key is the one the last run expected (same recipe,
    same input identity) and its group exists; failed when a failure is recorded and it is not
    done; pending otherwise.
    """
    from napari_gpuscope.batch.lock import StoreLock

    store = BatchStore(out)
    lock = StoreLock(store)
    running = None
    if lock.path.is_file():
        owner = lock.owner()
        stale = owner is None or StoreLock.is_stale(owner)
        running = lock.describe(owner) + (" (stale: its process is gone)" if stale else "")
    record = store.run_record()
    if not record:
        return StoreStatus(None, running=running)
    status = StoreStatus(record["recipe_hash"], running=running)
    for entry in record["positions"]:
        name, key = entry["name"], entry.get("key")
        failure = store.failed_record(name)
        if key is not None and store.is_complete(name, key):
            status.done.append(name)
        elif failure is not None:
            status.failed[name] = failure.get("reason", "unknown")
        else:
            status.pending.append(name)
    return status


def validate_inputs(
    recipe: Recipe,
    positions: Sequence[Position],
    *,
    recipe_dir: Path | None = None,
    pixels: bool = True,
) -> list[str]:
    """Problems that would make a run fail or compute the wrong thing, in words.

    Checks the artifacts (present, unchanged, loading as what the job needs) and each
    position's metadata against the recipe's input facts: number of dimensions, axes, pixel
    size (relative tolerance 1e-3), units. A dtype differing from the recipe's is reported too
    (the parameters may be in the other type's units). With ``pixels`` (``validate``), each
    position is also read whole, as a run reads it: a truncated or corrupt file, NaN or
    infinite pixels (which every method refuses) and, for jobs whose batch hooks ``screen``
    their positions before a fit (flat-field), whatever that screen leaves out.
    """
    problems = list(recipe.check_artifacts(recipe_dir))
    facts = recipe.input
    readable = []
    for position in positions:
        try:
            info = position.info()
        except Exception as exc:
            problems.append(f"{position.name}: cannot read {position.source}: {exc}")
            continue
        readable.append(position)
        problems += [f"{position.name}: {text}" for text in _mismatches(facts, info)]
    if pixels:
        pixel_problems = _pixel_problems(recipe, readable)
        problems += pixel_problems
        if not problems:  # the job's own checks on what reads and loads
            problems += _job_problems(recipe, readable, recipe_dir)
    return problems


def _job_problems(
    recipe: Recipe, positions: Sequence[Position], recipe_dir: Path | None
) -> list[str]:
    """What each position's job refuses before it computes anything: the job is made as a
    run makes it (:meth:`ResolvedRecipe.make_job`; a two-phase job's saved artifact loaded,
    never a fit) and closed unstarted, so its input checks (frames, dimensions, a profile's
    shape...) speak as in a run."""
    from napari_gpuscope.batch.task_spec import ResolvedRecipe

    resolved = ResolvedRecipe.resolve(recipe, recipe.hash())
    prepared = None
    prepare = getattr(resolved.hooks, "prepare", None)
    if prepare is not None:
        artifacts = {a.name: recipe.artifact_path(a, recipe_dir) for a in recipe.artifacts}
        replaces_fit = getattr(resolved.hooks, "replaces_fit", lambda names: bool(names))
        if not replaces_fit(set(artifacts)):
            return []  # the run fits on every position first: its screen spoke above
        try:
            prepared = prepare(resolved.params, [], device="cpu", artifacts=artifacts)
        except Exception as exc:  # an artifact that does not load: the run fails the same
            return [f"{recipe.method}: {type(exc).__name__}: {exc}"]
    problems = []
    for position in positions:
        try:
            job = resolved.make_job(position.open(), "cpu", prepared, position.info().axes)
            job.close()  # checked, never started
        except Exception as exc:
            problems.append(f"{position.name}: {position.source}: {exc}")
    return problems


def _pixel_problems(recipe: Recipe, positions: Sequence[Position]) -> list[str]:
    """What a run finds reading the pixels (see :func:`validate_inputs`)."""
    import numpy as np

    from napari_gpuscope.methods import load

    job = recipe.job_spec()
    hooks = load(job.batch) if job.batch else None
    screen = getattr(hooks, "screen", None)
    if screen is not None and not recipe.artifacts:  # the run's own check, the same words
        bad = screen(recipe.params_model(), [position.read for position in positions])
        return [
            f"{positions[index].name}: {positions[index].source}: {reason}"
            for index, reason in sorted(bad.items())
        ]
    problems = []
    for position in positions:
        try:
            data = position.read()
        except Exception as exc:
            problems.append(
                f"{position.name}: cannot read the pixels of {position.source}: "
                f"{type(exc).__name__}: {exc}"
            )
            continue
        if np.issubdtype(data.dtype, np.floating):
            count = int(data.size - np.count_nonzero(np.isfinite(data)))
            if count:
                problems.append(
                    f"{position.name}: {position.source} holds {count} NaN or infinite "
                    "pixel(s), which the methods refuse"
                )
        del data
    return problems


def has_input_facts(recipe: Recipe) -> bool:
    """Whether the recipe records any input fact to check positions against."""
    return any(value is not None for value in recipe.input.model_dump().values())


def _mismatches(facts: InputFacts, info: InputInfo) -> list[str]:
    out = []
    if facts.ndim is not None and len(info.shape) != facts.ndim:
        out.append(f"{len(info.shape)} dimensions {info.shape}, the recipe expects {facts.ndim}")
    if facts.axes is not None and info.axes is not None:
        expected = [a.lower() for a in facts.axes]
        if list(info.axes[-len(expected) :]) != expected:
            out.append(f"axes {''.join(info.axes)}, the recipe expects {''.join(expected)}")
    if facts.pixel_size is not None and info.pixel_size is not None:
        expected = facts.pixel_size
        actual = info.pixel_size[-len(expected) :]
        if len(actual) == len(expected) and any(
            a is not None and not math.isclose(a, e, rel_tol=1e-3)
            for a, e in zip(actual, expected, strict=True)
        ):
            out.append(
                f"pixel size {list(actual)}, the recipe was tuned at {list(expected)} "
                "(parameters in pixels would mean another physical size)"
            )
    if facts.units is not None and info.units is not None:
        actual_units = list(info.units[-len(facts.units) :])
        same = [
            ngff_unit(a) == ngff_unit(e) for a, e in zip(actual_units, facts.units, strict=False)
        ]
        if all(actual_units) and not all(same):
            out.append(f"units {actual_units}, the recipe expects {list(facts.units)}")
    if facts.dtype is not None and info.dtype != facts.dtype:
        out.append(f"dtype {info.dtype}, the recipe was tuned on {facts.dtype}")
    return out

"""Batch resolves a run's method, job and recipe hash once: a position looks nothing up in the
registry and hashes nothing (issue 15). Counted by wrapping the registry's ``method`` and
``Recipe.hash``, on the CPU, with tasks called directly and through an in-process cluster."""

from __future__ import annotations

from collections import Counter

import pytest
from batch_helpers import FlatHooks, FlatParams, write_positions

from napari_gpuscope import methods
from napari_gpuscope.batch import recipes, task_spec, tasks
from napari_gpuscope.batch.inputs import discover
from napari_gpuscope.batch.recipes import Recipe
from napari_gpuscope.batch.runner import run_batch
from napari_gpuscope.batch.store import BatchStore, marker_key


@pytest.fixture
def counts(monkeypatch):
    """Registry lookups (``methods.method``, also as imported by the recipes module) and
    recipe hashes made from now on; every worker cache starts empty."""
    seen: Counter[str] = Counter()
    lookup, digest = methods.method, Recipe.hash

    def counted_method(method_id):
        seen["lookups"] += 1
        return lookup(method_id)

    def counted_hash(self):
        seen["hashes"] += 1
        return digest(self)

    monkeypatch.setattr(methods, "method", counted_method)
    monkeypatch.setattr(recipes, "method", counted_method)
    monkeypatch.setattr(Recipe, "hash", counted_hash)
    # Caches of earlier tests would hide the first resolution.
    monkeypatch.setattr(task_spec, "_RESOLVED", {})
    return seen


def _validation_lookups(counts: Counter[str], data: dict) -> int:
    """Lookups that validating the recipe itself makes (the recipe model's business)."""
    before = counts["lookups"]
    Recipe.from_data(data)
    return counts["lookups"] - before


@pytest.mark.parametrize("method_id", ["tv", "flat"])
def test_a_position_looks_nothing_up_and_hashes_nothing(tmp_path, counts, flat_method, method_id):
    write_positions(tmp_path / "in", 3, shape=(32, 32))
    positions = discover(str(tmp_path / "in" / "*.tif"))
    recipe = Recipe.from_defaults("tv") if method_id == "tv" else Recipe.from_params(FlatParams())
    recipe_hash = recipe.hash()
    out = str(tmp_path / "out.zarr")
    task = task_spec.TaskSpec(recipe.model_dump(mode="json"), recipe_hash, out)
    BatchStore(task.out).prepare({})
    validation = _validation_lookups(counts, task.recipe)
    counts.clear()

    # The run's first task on this worker resolves: the recipe validated, its method looked
    # up once; the driver's hash is used, never recomputed.
    prepared = tasks.prepare_run(task, positions)
    first = dict(counts)
    assert first.get("hashes", 0) == 0
    assert first.get("lookups", 0) == validation + 1
    per_position = []
    for position in positions:
        counts.clear()
        summary = tasks.run_position(
            task, position, marker_key(recipe_hash, position.identity()), prepared
        )
        assert summary["status"] == "done", summary
        per_position.append((counts["lookups"], counts["hashes"]))

    assert per_position == [(0, 0)] * len(positions)
    written = BatchStore(task.out).done_record(positions[0].name)
    assert written is not None and written["recipe_hash"] == recipe_hash
    if method_id == "flat":  # the hooks' job got the driver's hash as its cache key
        assert FlatHooks.built == {recipe_hash: len(positions)}


def test_a_run_hashes_its_recipe_once_and_looks_its_method_up_once_per_side(tmp_path, counts):
    from distributed import Client

    write_positions(tmp_path / "in", 4, shape=(32, 32))
    positions = discover(str(tmp_path / "in" / "*.tif"))
    recipe = Recipe.from_defaults("tv", strength=1.2)
    validation = _validation_lookups(counts, recipe.model_dump(mode="json"))
    with Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
    ) as client:
        counts.clear()
        report = run_batch(recipe, positions, tmp_path / "out.zarr", client)

    assert report.failed == {} and len(report.done) == 4
    assert counts["hashes"] == 1  # the driver's, shared by plan, the record and every task
    # The driver asks whether the method has a prepare hook; the (one) worker validates and
    # resolves the recipe once for all four positions.
    assert counts["lookups"] == 1 + validation + 1
    run = BatchStore(tmp_path / "out.zarr").run_record()
    assert run is not None and run["recipe_hash"] == recipe.hash()

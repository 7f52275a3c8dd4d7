"""Every result layer of every job says what it shows first (issue 18, item 7).

napari's layer list cuts long names on the left: "...ion reg=0.001]" and "...ase reg=0.001]"
could not be told apart. The oracle is the kind each job's registry entry promises for each
of its outputs (``JobSpec.output_kinds``, and the ``quantity`` the layer's metadata states,
where it states one), not our own output. Every registered job is checked.
"""

from __future__ import annotations

import numpy as np
import pytest

from napari_gpuscope import methods
from napari_gpuscope.compute import esrrf, flatfield, phase, tv
from napari_gpuscope.compute.jobs import run_job
from napari_gpuscope.compute.results import Geometry, split_result_name
from napari_gpuscope.sample_data._shading import shaded_tiles
from napari_gpuscope.sample_data.esrrf import blinking_filaments_stack
from napari_gpuscope.sample_data.phase import OPTICS, tilted_brightfield_stack

RNG = np.random.default_rng(18)


def _tv():
    yy, xx = np.mgrid[:96, :96]
    clean = 100.0 + 50.0 * ((yy - 48) ** 2 + (xx - 40) ** 2 < 400)
    return run_job(tv.iter_denoise(clean + RNG.normal(0, 10, clean.shape), 8.0, device="cpu"))


def _esrrf_run():
    stack, _ = blinking_filaments_stack(12, (32, 32))
    return run_job(esrrf.iter_esrrf(stack, magnification=2, device="cpu"))


def _esrrf_sweep():
    stack, _ = blinking_filaments_stack(12, (32, 32))
    params = esrrf.SweepParams(radii=(1.5,), sensitivities=(1.0,), magnification=2)
    return run_job(esrrf.iter_sweep(stack, params, device="cpu"))


def _tiles():
    return shaded_tiles(12, (48, 48), seed=4, dark_offset=100.0).images


def _flatfield_fit():
    return flatfield.fit_basic(_tiles(), get_darkfield=True, device="cpu")


def _flatfield_apply():
    tiles = _tiles()
    return flatfield.apply_profile(tiles, flatfield.fit_basic(tiles, device="cpu"), device="cpu")


def _phase_stack():
    return np.asarray(tilted_brightfield_stack()[0][0][:, :64, :64])


def _phase_reconstruct():
    return phase.reconstruct(
        _phase_stack(), **OPTICS, tilt_zenith=0.2, tilt_azimuth=1.0, device="cpu"
    )


def _phase_tilt():
    params = phase.PhaseParams(
        **OPTICS, tilt_mode="tiles", tiles_y=1, tiles_x=2, optimizer="newton", iterations=2
    )
    return phase.estimate_tilt(_phase_stack(), params=params, device="cpu")


def _esrrf_drift():
    stack, _ = blinking_filaments_stack(24, (32, 32))
    params = esrrf.DriftParams(time_averaging=4)
    return run_job(esrrf.iter_estimate_drift(stack, params, device="cpu"))


# A small input for each job of the plugin's own methods (their samples are too big for a quick
# test). A job not named here (a method registered since, e.g. the tests' method package) runs
# on its method's first sample with its demo parameters (main job) or default parameters.
MAKERS = {
    ("tv", "denoise"): _tv,
    ("esrrf", "run"): _esrrf_run,
    ("esrrf", "sweep"): _esrrf_sweep,
    ("esrrf", "drift"): _esrrf_drift,
    ("flatfield", "fit"): _flatfield_fit,
    ("flatfield", "apply"): _flatfield_apply,
    ("phase", "reconstruct"): _phase_reconstruct,
    ("phase", "estimate_tilt"): _phase_tilt,
}

# Every job of every registered method, read when the tests are collected.
JOBS = [(spec.id, job.id) for spec in methods.METHODS.values() for job in spec.jobs]


def _on_its_sample(method_id, job_id):
    spec = methods.method(method_id)
    job = spec.job_spec(job_id)
    if job.needs:
        pytest.fail(f"{method_id}.{job_id} needs {job.needs}: give it a maker in MAKERS")
    data, kwargs, _ = spec.samples[0].load()[0]
    params = spec.params_for_sample(kwargs) if job is spec.jobs[0] else job.params_class()()
    return run_job(job.job_function()(data, params=params, device="cpu"))


def test_every_maker_is_a_registered_job():
    assert set(MAKERS) <= set(JOBS)


@pytest.mark.parametrize("key", JOBS, ids=["-".join(key) for key in JOBS])
def test_every_result_layer_name_starts_with_what_it_shows(key):
    """The oracle is what the job's registry entry promises (``JobSpec.output_kinds``)."""
    kinds = methods.method(key[0]).job_spec(key[1]).output_kinds
    result = MAKERS[key]() if key in MAKERS else _on_its_sample(*key)
    layers = result.layers("cells 01", Geometry(scale=(0.1, 0.1)))
    names = [kwargs["name"] for _, kwargs, _ in layers]
    assert len(names) >= len(kinds), names
    for index, (_, kwargs, _) in enumerate(layers):
        name = kwargs["name"]
        parts = split_result_name(name)
        assert parts is not None and parts[1] == "cells 01", name  # a later output too
        kind = kinds[index] if index < len(kinds) else parts[0]
        assert name.startswith(f"{kind} · cells 01"), name
        quantity = kwargs["metadata"].get("quantity")
        assert quantity in (None, kind), (name, quantity)
    # What a narrow layer list shows of each: the first characters tell them apart.
    assert len({name[:12] for name in names}) == len(names), names


def test_phase_and_absorption_differ_where_the_layer_list_shows_them():
    phase_layer, absorption_layer, _ = _phase_reconstruct().layers("brightfield meniscus")
    phase_name, absorption_name = phase_layer[1]["name"], absorption_layer[1]["name"]
    assert phase_name[:12] != absorption_name[:12]
    assert phase_name.startswith("phase · ") and absorption_name.startswith("absorption · ")

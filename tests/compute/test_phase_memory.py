"""Phase on the device, counted on the CPU: the memory plan against the allocator, transfer
functions built once per optics (a second stack builds none), shared transfer functions read in
place, and the frequency crop of odd sizes.

The memory plan is checked against the CPU allocator's own record of every allocation
(``phase_probes.peak_allocated``), with the fused kernels emulated on the host
(``NAPARI_GPUSCOPE_HOST_KERNELS=1``) so that the same arrays are allocated as on a GPU. The CPU's
FFT needs no work area; the plan's bound for cuFFT's (:data:`FFT_WORK_PLANES` outputs) is left
out here (``fft_work=0``) and checked on a GPU by ``tests/gpu/test_gpu_phase.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from phase_probes import peak_allocated

from napari_gpuscope.compute import phase
from napari_gpuscope.compute.kernels import HOST_KERNELS_ENV, host_emulation_available
from napari_gpuscope.compute.phase import _ops, _optics, _regularization_ops
from napari_gpuscope.compute.phase._reconstruct import Reconstructor
from napari_gpuscope.compute.tv import _ops as tv_ops
from napari_gpuscope.sample_data.phase import OPTICS

AIR = OPTICS  # the samples' optics: air, NA 0.4 / 0.55, 0.45 µm light
FUSED = (
    _ops.normal_equations_op,
    _ops.tikhonov_solve_op,
    _regularization_ops.regularization_components_op,
    tv_ops.fgp_step,
    tv_ops.fgp_primal,
)


def _stack(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (1 + 0.05 * rng.standard_normal(shape)).astype(np.float32)


@pytest.fixture
def host_kernels(monkeypatch):
    """The fused kernels emulated on the CPU: the allocations of a GPU run."""
    if not host_emulation_available():
        pytest.skip("g++ not available")
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    for op in FUSED:
        op.reset()
    yield
    for op in FUSED:
        op.reset()


def _measure(stack, params, cache, budget=None):
    """Peak bytes of one region's normal equations and solve, and the plan they ran with."""
    data = torch.from_numpy(stack)
    recon = Reconstructor(data, params, cache, budget)

    def run():
        return recon.solve(recon.system(data, params.tilt_zenith, params.tilt_azimuth))

    with torch.no_grad():
        _, peak = peak_allocated(run)
    slices = math.ceil(stack.shape[0] / recon.chunks)
    return peak, recon.plan, slices


CASES = [
    # (slices, height, width, regularizer, budget)
    pytest.param(11, 64, 64, "tikhonov", None, id="64x64x11"),
    pytest.param(21, 96, 128, "tikhonov", None, id="96x128x21"),
    pytest.param(7, 64, 64, "tv", None, id="tv-64x64x7"),
    pytest.param(11, 64, 64, "tikhonov", 2_300_000, id="chunked-64x64x11"),
]


@pytest.mark.parametrize(("n_z", "h", "w", "regularizer", "budget"), CASES)
def test_memory_plan_matches_the_allocations(host_kernels, n_z, h, w, regularizer, budget):
    """The planned peak is at least what is allocated and at most 3 % (plus the small-tensor
    allowance) above it: cold (every optic built), then warm (all cached)."""
    from napari_gpuscope.compute.phase._memory import SMALL_BYTES

    params = phase.PhaseParams(**AIR, tilt_zenith=0.2, tilt_azimuth=1.0, regularizer=regularizer)
    stack = _stack((n_z, h, w))
    _measure(stack, params, phase.OpticsCache())  # compiles and self-tests the kernels first
    cache = phase.OpticsCache()
    for label in ("cold", "warm"):
        peak, plan, slices = _measure(stack, params, cache, budget)
        planned = plan.peak(slices, fft_work=0)
        assert peak <= planned, (label, peak, plan.breakdown(slices, 0))
        assert planned <= 1.03 * peak + SMALL_BYTES, (label, peak, plan.breakdown(slices, 0))
        if budget is not None:
            assert slices < n_z
            assert plan.peak(slices) <= budget  # what the chunk was planned with
            assert plan.peak(slices + 1) > budget


def test_the_plan_counts_what_the_cache_holds():
    """A cached region plans for no optics; one that must be chunked keeps nothing."""
    params = phase.PhaseParams(**AIR, tilt_zenith=0.2, tilt_azimuth=1.0)
    data = torch.from_numpy(_stack((11, 64, 64)))
    cache = phase.OpticsCache()
    recon = Reconstructor(data, params, cache)
    cold = recon.memory_plan((64, 64), 0.2, 1.0)
    key = recon.key((64, 64))
    over = 64 * 64 * key.factor**2
    # kept per slice: two complex64 transfer functions and one complex64 defocus spectrum
    assert cold.stored_per_slice == 2 * 8 * 64 * 64 + 8 * over
    with torch.no_grad():
        recon.system(data, 0.2, 1.0)
    warm = recon.memory_plan((64, 64), 0.2, 1.0)
    assert warm.stored == 0
    assert warm.stored_per_slice == 0
    assert "build" not in warm.passes
    assert cache.nbytes == 11 * cold.stored_per_slice
    with torch.no_grad():
        Reconstructor(data, params, phase.OpticsCache(), 2_300_000).system(data, 0.2, 1.0)
    chunked_cache = phase.OpticsCache()
    chunked = Reconstructor(data, params, chunked_cache, 2_300_000)
    with torch.no_grad():
        chunked.system(data, 0.2, 1.0)
    assert chunked.chunks > 1
    assert not chunked.plan.keep
    assert chunked_cache.nbytes == 0  # nothing kept: the plan had no room for it


def test_a_second_stack_with_the_same_optics_builds_no_transfer_function(monkeypatch):
    """reconstruct(..., optics_cache=cache) on another stack: every builder is counted."""
    calls = {"build": 0, "wotf": 0, "grid": 0}
    for name, counter in (("_build", "build"), ("wotf", "wotf"), ("_Grid", "grid")):
        original = getattr(_optics, name)

        def counted(*args, _original=original, _counter=counter, **kwargs):
            calls[_counter] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(_optics, name, counted)
    params = phase.PhaseParams(**AIR, tilt_zenith=0.2, tilt_azimuth=1.0)
    cache = phase.OpticsCache()
    stack, other = _stack((11, 64, 64), 1), _stack((11, 64, 64), 2)
    first = phase.reconstruct(stack, params=params, optics_cache=cache, device="cpu")
    assert calls == {"build": 1, "wotf": 0, "grid": 1}
    builds = dict(cache.builds)
    second = phase.reconstruct(other, params=params, optics_cache=cache, device="cpu")
    assert calls == {"build": 1, "wotf": 0, "grid": 1}  # nothing built for the second stack
    assert cache.builds == builds
    # a new regularization, the live re-solve or the TV option need no optics either
    phase.reconstruct(other, params=params, regularization=1e-2, optics_cache=cache, device="cpu")
    phase.PhaseSolver(other, params, device="cpu", optics_cache=cache).solve(3e-3)
    tv = params.replace(regularizer="tv", tv_iterations=2)
    phase.reconstruct(other, params=tv, optics_cache=cache, device="cpu")
    assert calls == {"build": 1, "wotf": 0, "grid": 1}
    assert cache.builds == builds
    phase.clear_shared_caches()  # what earlier tests of this process built with these optics
    fresh = phase.reconstruct(other, params=params, device="cpu")  # the shared cache: one build
    assert calls["build"] == 2
    np.testing.assert_array_equal(second.phase, fresh.phase)
    assert not np.array_equal(first.phase, second.phase)


def test_the_cache_keeps_within_its_byte_limit():
    key = phase.OpticsKey((32, 32), 0.325, 0.45, 1.0, 0.4, 0.55, 1e4, "cpu")
    z = phase.z_positions(5, 1.0)
    probe = phase.OpticsCache()
    probe.transfer_functions(key, z, 0.1, 0.5)
    one = probe.nbytes  # transfer functions and defocus spectra of one tilt
    spectra = 5 * 8 * 32 * 32 * key.factor**2
    cache = phase.OpticsCache(max_bytes=2 * one - spectra)  # room for the spectra and 2 TFs
    for zenith in (0.1, 0.2, 0.3):
        cache.transfer_functions(key, z, zenith, 0.5)
    assert cache.nbytes <= cache.max_bytes
    assert cache.has(key, z, 0.3, 0.5) and cache.has(key, z, 0.2, 0.5)
    assert not cache.has(key, z, 0.1, 0.5)  # least recently used, dropped
    assert cache.has_spectra(key, z)
    tiny = phase.OpticsCache(max_bytes=one - spectra - 1)  # nothing fits: built, never kept
    tf = tiny.transfer_functions(key, z, 0.1, 0.5)
    assert tiny.nbytes == 0
    np.testing.assert_allclose(tf.phase, probe.transfer_functions(key, z, 0.1, 0.5).phase)


@pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")
def test_shared_transfer_functions_are_read_in_place(host_kernels):
    """Several problems and one set of transfer functions: no per-problem copy is made (only
    the five outputs are allocated), and the result equals the twin with broadcasting."""
    gen = torch.Generator().manual_seed(0)
    batch, n_z, h, w = 6, 7, 16, 24

    def spectrum(shape):
        return torch.complex(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))

    data = spectrum((batch, n_z, h, w))
    absorption, phase_tf = spectrum((n_z, h, w)), spectrum((n_z, h, w))
    _ops.normal_equations(data, absorption, phase_tf, True)  # compile first
    outs, peak = peak_allocated(lambda: _ops.normal_equations(data, absorption, phase_tf, True))
    assert peak <= batch * h * w * (4 + 4 + 3 * 8)  # the outputs; no (B, Z, Y, X) copy
    twin = _ops.normal_equations_twin(data, absorption.conj(), phase_tf.conj())
    for got, want in zip(outs, twin, strict=True):
        torch.testing.assert_close(got, want.expand_as(got), rtol=1e-4, atol=1e-4 * n_z)


@pytest.mark.parametrize(("shape", "optics"), [((37, 53), AIR), ((33, 40), AIR)])
def test_odd_sizes_keep_their_frequencies(shape, optics):
    """The transfer functions of a (Y, X) region are the oversampled ones at the region's
    frequencies k (index k mod N of the N-point grid), also for odd sizes at an even
    oversampling factor (an fftshift-and-slice crop is one frequency off there). Reference: the
    model's formulas on the full oversampled grid, with two inverse FFTs."""
    pixel, wavelength = optics["yx_pixel_size"], optics["wavelength"]
    key = phase.OpticsKey(shape, pixel, wavelength, 1.0, 0.4, 0.55, 1e4, "cpu")
    assert key.factor % 2 == 0
    z = phase.z_positions(5, 1.0)
    grid = _optics._Grid(key)
    source = _optics.illumination_pupil(grid, torch.tensor(0.2), torch.tensor(1.0))
    q = _optics.defocused_pupil(grid, z)
    sq_hat, q_hat = torch.fft.fft2(source * q), torch.fft.fft2(q)
    h1 = torch.fft.ifft2(torch.conj(sq_hat) * q_hat)
    h2 = torch.fft.ifft2(sq_hat * torch.conj(q_hat))
    norm = (source * (q.real**2 + q.imag**2)).sum(dim=(-2, -1), keepdim=True)
    big_a, big_p = (h1 + h2) / norm, 1j * (h1 - h2) / norm
    ky = np.fft.fftfreq(shape[0], 1 / shape[0]).astype(int) % grid.shape[0]
    kx = np.fft.fftfreq(shape[1], 1 / shape[1]).astype(int) % grid.shape[1]
    cached = phase.OpticsCache().transfer_functions(key, z, 0.2, 1.0)
    for big, ours in ((big_a, cached.absorption), (big_p, cached.phase)):
        want = big[:, ky][:, :, kx]
        assert float((ours - want).abs().max()) <= 1e-5 * float(want.abs().max())

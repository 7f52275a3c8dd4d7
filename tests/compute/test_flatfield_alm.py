"""The batched BaSiC ALM pass: problems that converge at different iterations freeze on their
own (against a plain one-problem-at-a-time reference loop), and one iteration is a fixed,
small number of launches with no host synchronisation (counted on the CPU through the g++
host emulation of the kernels and a torch dispatch mode)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from napari_gpuscope.compute.flatfield import _alm, fit_basic
from napari_gpuscope.compute.flatfield import _ops as ops
from napari_gpuscope.compute.flatfield._dct import dct2, idct2
from napari_gpuscope.compute.kernels import (
    HOST_KERNELS_ENV,
    HostBackend,
    host_emulation_available,
)
from napari_gpuscope.sample_data._shading import shaded_tiles

needs_gxx = pytest.mark.skipif(not host_emulation_available(), reason="g++ not available")


# ---- the reference: one problem, plain torch, a host-side stop test per iteration ----------
# (the pre-fusion implementation of the same algorithm, BaSiCPy's ApproximateFit; the
# darkfield step is the MATLAB heuristic written out with torch reductions)


def _shrink(x, threshold):
    return torch.sign(x) * torch.clamp(x.abs() - threshold, min=0)


def _reference_dark(images, rest_sum, rest_in, inner, flat, baseline, sparse, dark, mu, lam_dark,
                    offset_max):
    pixels = flat.numel()
    n_in = inner.sum().float()
    n_out = pixels - n_in
    total_mean = rest_sum.sum() / (rest_sum.numel() * pixels)
    mean_in = rest_in / n_in.clamp_min(1)
    mean_out = (rest_sum - rest_in) / n_out.clamp_min(1)
    coeff = (mean_in - mean_out) / (total_mean + 1e-6)
    valid = baseline < 1
    count = valid.sum().float()
    b, c = baseline[valid], coeff[valid]
    s1, s2, s3, s4 = (b**2).sum(), b.sum(), c.sum(), (b * c).sum()
    denominator = s2 * s3 - count * s4
    offset = torch.zeros(()) if denominator == 0 else (s1 * s3 - s2 * s4) / denominator
    flat_mean = flat.mean()
    offset = torch.minimum(offset.clamp_min(0), offset_max / flat_mean)
    z = offset * (flat_mean - flat)
    if count == 0:
        return dark, torch.zeros(())
    valid_mean = (images - sparse)[valid].mean(dim=0)
    shape = valid_mean - b.mean() * flat
    shape = shape - shape.mean() - z
    threshold = lam_dark / (_alm.ENT_DARK * mu)
    new_dark = _shrink(idct2(_shrink(dct2(shape), threshold)), threshold) + z
    return new_dark, offset


def _reference_pass(images, weight, baseline, lam_flat, lam_dark, mu0, image_norm, offset_max,
                    get_darkfield, max_iterations, tol):
    """One problem: ``images`` (T, m, n); everything else a scalar or (T,)."""
    t_count = images.shape[0]
    flat_hat = dct2(torch.ones(images.shape[1:]))
    flat = idct2(flat_hat)
    dark = torch.zeros_like(flat)
    dark_before = dark
    offset = torch.zeros(())
    sparse = torch.zeros_like(images)
    dual = torch.zeros_like(images)
    mu, mu_max = mu0, mu0 * _alm.MAX_MU_COEF
    column = images.mean(dim=0) - flat * baseline.mean() - dark
    iterations, ratio = 0, float("inf")
    for _ in range(max_iterations):
        flat_hat = _shrink(flat_hat + dct2(column), lam_flat / mu)
        flat = idct2(flat_hat)
        value = images - flat * baseline[:, None, None] - dark + dual / mu
        sparse = _shrink(value, weight / mu)
        rest = images - sparse
        rest_sum = rest.sum(dim=(-2, -1))
        baseline = (rest_sum / (rest_sum.sum() / t_count)).clamp_min(0)
        new_dark = dark
        if get_darkfield:
            inner = flat >= flat.mean()
            rest_in = (rest * inner).sum(dim=(-2, -1))
            new_dark, offset = _reference_dark(images, rest_sum, rest_in, inner, flat, baseline,
                                               sparse, dark, mu, lam_dark, offset_max)
        mu_next = min(mu * _alm.RHO, mu_max)
        residual = images - flat * baseline[:, None, None] - dark - sparse
        dual = dual + mu * residual
        column = (residual + dual / mu_next).mean(dim=0) - (new_dark - dark)
        ratio = float(residual.square().sum().sqrt() / image_norm)
        dark_before, dark, mu = dark, new_dark, mu_next
        iterations += 1
        if not (ratio > tol and np.isfinite(ratio)):
            break
    return {"flat": flat, "dark": dark, "dark_before": dark_before, "offset": offset,
            "baseline": baseline, "sparse": sparse, "iterations": iterations, "ratio": ratio}


# ---- problems that converge at different iterations ----------------------------------------


def _problems(get_darkfield: bool):
    """Three problems, one stack: different shading, noise and darkfield, so the ALM meets its
    tolerance after different numbers of iterations (28, 25 and 27)."""
    stacks = [
        shaded_tiles(16, (24, 24), seed=1, vignetting=0.6).images,
        shaded_tiles(16, (24, 24), seed=4, vignetting=1.4, dark_offset=100.0).images,
        shaded_tiles(16, (24, 24), seed=5, read_noise=20.0, dark_offset=10.0).images,
    ]
    images = torch.from_numpy(np.stack(stacks).astype(np.float32))
    p = images.shape[0]
    weight = torch.ones_like(images)
    means = images.mean(dim=(-2, -1))
    baseline = means / means.mean(dim=1, keepdim=True)
    mu0 = _alm.MU_COEF / _alm.spectral_norm(images)
    lam_flat = _alm.auto_smoothness(images)
    return {
        "images": images,
        "weight": weight,
        "init_baseline": baseline,
        "lam_flat": lam_flat,
        "lam_dark": 0.1 * lam_flat,
        "mu0": mu0,
        "image_norm": torch.linalg.vector_norm(images.reshape(p, -1), dim=1),
        "offset_max": images.reshape(p, -1).amin(dim=1),
        "get_darkfield": get_darkfield,
        "max_iterations": 200,
        "tol": 1e-5,
    }


_EPS32 = float(np.finfo(np.float32).eps)


def _check_ratio(out, k, alone, images):
    """The stop ratio ||F|| / ||I|| (F = I - flat * baseline - dark - sparse) by an error model,
    not by a tolerance read off one CPU: F cancels values ~1e5 times larger, so the two
    float32 loops' ratios differ by what their states differ by, however that rounding goes.

    - Each loop's ratio equals the one recomputed in float64 from its own returned state, up
      to float32 rounding of the residual: each element is a few operations on values of
      size |I| + |M|, so the norm's error is below eps32 * || |I| + |M| ||.
    - The two ratios differ by at most ||M_batch - M_reference|| / ||I|| (the triangle
      inequality, the images being the same) plus both rounding errors.
    """
    images = images.double()
    norm = float(images.norm())

    def model(flat, baseline, dark, sparse):
        return flat.double() * baseline.double()[:, None, None] + dark.double() + sparse.double()

    batch = model(out["flat"][k], out["baseline"][k], out["dark_before"][k], out["sparse"][k])
    reference = model(alone["flat"], alone["baseline"], alone["dark_before"], alone["sparse"])
    rounding = {
        name: 4 * _EPS32 * float((images.abs() + m.abs()).norm()) / norm
        for name, m in (("batch", batch), ("reference", reference))
    }
    for name, m, reported in (
        ("batch", batch, float(out["ratio"][k])),
        ("reference", reference, alone["ratio"]),
    ):
        recomputed = float((images - m).norm()) / norm
        assert abs(reported - recomputed) <= rounding[name], (name, reported, recomputed)
    apart = float((batch - reference).norm()) / norm
    difference = abs(float(out["ratio"][k]) - alone["ratio"])
    assert difference <= apart + rounding["batch"] + rounding["reference"]


_FIELDS = ("flat", "baseline", "sparse", "dark", "dark_before", "offset")
# How many input roundings two float32 evaluations of the pass in different operation orders
# amount to: measured 0.8-2.8 (both CPUs CI has used); the sparse part and the darkfield's
# shrinkage make the pass ill-conditioned, so a rounding anywhere moves the result by about
# what a rounding of the input does.
_ROUNDINGS = 10


def _sensitivity(problem, out):
    """Per problem and field, how far the pass's result moves when each input value is
    rounded once more (multiplied by 1 +- eps32, random signs; the larger of two draws): the
    error model of every comparison below, measured on the machine that runs the test."""
    generator = torch.Generator().manual_seed(0)
    moved = {key: torch.zeros(problem["images"].shape[0]) for key in _FIELDS}
    for _ in range(2):
        signs = torch.randint(0, 2, problem["images"].shape, generator=generator) * 2 - 1
        again = _alm._alm_pass(**{**problem, "images": problem["images"] * (1 + _EPS32 * signs)})
        for key in _FIELDS:
            change = (again[key] - out[key]).abs().reshape(len(moved[key]), -1).amax(dim=1)
            moved[key] = torch.maximum(moved[key], change)
    return moved


def _check_against_reference(out, problem):
    """Each problem of the batch against (1) the same pass run on that problem alone and (2)
    the plain reference loop: the same iterations, and results that differ by no more than
    a few input roundings move them (:func:`_sensitivity`; the batched GEMMs and the
    reference's order of operations round differently, and the pass amplifies rounding)."""
    names = ("images", "weight", "init_baseline", "lam_flat", "lam_dark", "mu0", "image_norm")
    moved = _sensitivity(problem, out)
    for k in range(problem["images"].shape[0]):
        one = {
            key: value[k : k + 1] if isinstance(value, torch.Tensor) else value
            for key, value in problem.items()
        }
        by_itself = _alm._alm_pass(**one)
        alone = _reference_pass(
            *(problem[name][k] for name in (*names, "offset_max")),
            problem["get_darkfield"],
            problem["max_iterations"],
            problem["tol"],
        )
        assert int(out["iterations"][k]) == int(by_itself["iterations"][0]) == alone["iterations"]
        _check_ratio(out, k, alone, problem["images"][k])
        for key in _FIELDS:
            # a floor of a few ulps of the field for fields the perturbation did not move
            floor = 8 * _EPS32 * (float(alone[key].abs().max()) + 1e-30)
            atol = _ROUNDINGS * float(moved[key][k]) + floor
            torch.testing.assert_close(out[key][k], by_itself[key][0], rtol=0, atol=atol)
            torch.testing.assert_close(
                out[key][k], alone[key].to(out[key].dtype), rtol=0, atol=atol
            )


@pytest.mark.parametrize("get_darkfield", [False, True], ids=["no-dark", "dark"])
def test_problems_freeze_on_their_own(get_darkfield):
    """Each problem of a batch stops where it alone stops, with its own result."""
    problem = _problems(get_darkfield)
    out = _alm._alm_pass(**problem)
    iterations = [int(i) for i in out["iterations"]]
    assert len(set(iterations)) == 3, iterations  # three different stopping points
    _check_against_reference(out, problem)


@needs_gxx
@pytest.mark.parametrize("get_darkfield", [False, True], ids=["no-dark", "dark"])
def test_problems_freeze_on_their_own_through_the_kernels(monkeypatch, get_darkfield):
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    problem = _problems(get_darkfield)
    before = Counter({op.name: op.calls["host"] for op in ops.OPS})
    out = _alm._alm_pass(**problem)
    used = {op.name for op in ops.OPS if op.calls["host"] > before[op.name]}
    expected = {op.name for op in ops.OPS}
    if not get_darkfield:
        expected -= {"basic_dark_shape", "basic_dark_finish"}
    assert used == expected
    assert len({int(i) for i in out["iterations"]}) == 3
    _check_against_reference(out, problem)


@pytest.mark.parametrize("get_darkfield", [False, True], ids=["no-dark", "dark"])
def test_fit_of_several_problems_equals_each_alone(get_darkfield):
    """Reweighting too: each problem of a batch keeps its own passes (4, 21, 3 and 17 without
    the darkfield), ALM iterations, convergence and result."""
    stacks = [
        shaded_tiles(16, (24, 24), seed=1, vignetting=0.6).images,
        shaded_tiles(16, (24, 24), seed=4, vignetting=1.4).images,
        shaded_tiles(16, (24, 24), seed=5, read_noise=20.0, dark_offset=10.0).images,
        shaded_tiles(16, (24, 24), seed=3, cells=300.0).images,
    ]
    both = fit_basic(np.stack(stacks), batch_axis=0, get_darkfield=get_darkfield, device="cpu")
    alone = [fit_basic(s, get_darkfield=get_darkfield, device="cpu") for s in stacks]
    if not get_darkfield:
        assert len(set(both.reweight_passes)) == 4, both.reweight_passes
    for k in range(len(stacks)):
        assert both.reweight_passes[k] == alone[k].reweight_passes[0]
        assert both.alm_iterations[k] == alone[k].alm_iterations[0]
        assert both.converged[k] == alone[k].converged[0]
        np.testing.assert_allclose(both.flatfield[k], alone[k].flatfield, atol=5e-5)
        # With the darkfield these 16-tile stacks stop at 25 passes unconverged, the darkfield
        # still swinging by ~100: float rounding of the batch shows at 1e-4 of that.
        scale = float(np.abs(alone[k].darkfield).max())
        np.testing.assert_allclose(both.darkfield[k], alone[k].darkfield, atol=1e-3 * scale)
        np.testing.assert_allclose(both.baseline[k], alone[k].baseline, rtol=1e-5)


# ---- launches and host synchronisations per iteration ----------------------------------------

# Operations that launch nothing on a GPU (views, allocation without a fill).
_NO_LAUNCH = {
    "aten._unsafe_view.default",
    "aten.empty.memory_format",
    "aten.empty_like.default",
    "aten.empty_strided.default",
    "aten.detach.default",
    "aten.alias.default",
    "aten.lift_fresh.default",
}
# Operations that make the host wait for the device on CUDA.
_SYNCS = {
    "aten._local_scalar_dense.default",
    "aten.nonzero.default",
    "aten.item.default",
    "aten.is_nonzero.default",
    "aten.equal.default",
    "aten.allclose.default",
    "aten.masked_select.default",
    "aten.unique.default",
    "aten._unique2.default",
}


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.launches: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in _SYNCS:
            self.syncs[name] += 1
        elif not func.is_view and name not in _NO_LAUNCH:
            self.launches[name] += 1
        return func(*args, **(kwargs or {}))


def _count_pass(problem, iterations: int):
    """Torch operations (with syncs) and kernel launches of one ALM pass of ``iterations``."""
    kernels: Counter[str] = Counter()
    real = HostBackend.launch

    def counting(self, function, n_threads, args):
        kernels[function.name] += 1
        return real(self, function, n_threads, args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HostBackend, "launch", counting)
        with _Count() as count:
            out = _alm._alm_pass(**{**problem, "max_iterations": iterations, "tol": 0.0})
    assert [int(i) for i in out["iterations"]] == [iterations] * problem["images"].shape[0]
    return count, kernels


@needs_gxx
@pytest.mark.parametrize(
    ("get_darkfield", "ceiling"), [(False, 12), (True, 19)], ids=["no-dark", "dark"]
)
def test_launches_and_syncs_per_iteration(monkeypatch, get_darkfield, ceiling):
    """Per iteration (the difference between a 6- and a 3-iteration pass, so the pass's setup
    cancels): at most 12 launches without the darkfield and 19 with it (kernels + torch
    operations), one asynchronous copy of the flags, and no operation that synchronises."""
    monkeypatch.setenv(HOST_KERNELS_ENV, "1")
    problem = _problems(get_darkfield)
    for op in ops.OPS:
        assert op.prepare("cpu")  # compiled and self-tested outside the count
    _count_pass(problem, 1)  # and the DCT matrices cached
    short_torch, short_kernels = _count_pass(problem, 3)
    long_torch, long_kernels = _count_pass(problem, 6)
    torch_ops = {k: (n - short_torch.launches[k]) / 3 for k, n in long_torch.launches.items()}
    torch_ops = {k: n for k, n in torch_ops.items() if n}  # the pass's setup cancels
    kernels = {k: (n - short_kernels[k]) / 3 for k, n in long_kernels.items()}
    copies = torch_ops.pop("aten.copy_.default", 0)
    assert copies == 1  # the flags for the host's stop check
    launches = sum(torch_ops.values()) + sum(kernels.values())
    assert launches <= ceiling, (torch_ops, kernels)
    # Every kernel once per iteration (basic_shrink twice with the darkfield), GEMMs for the
    # DCTs, two reductions: nothing else.
    assert kernels["basic_sparse"] == kernels["basic_baseline"] == 1
    assert torch_ops["aten.sum.IntList_out"] == 2  # the row partials' lanes, the pixel sums
    assert kernels["basic_dual"] == kernels["basic_dual_sums"] == kernels["basic_status"] == 1
    assert kernels["basic_shrink"] == (2 if get_darkfield else 1)
    assert set(torch_ops) <= {"aten.bmm.out", "aten.mm.out", "aten.sum.IntList_out"}, torch_ops
    # Host syncs: none in the loop (the setup's are the spectral-norm-free pass start: none)
    assert not long_torch.syncs and not short_torch.syncs, long_torch.syncs


def test_the_twin_path_has_no_sync_per_iteration():
    """Without kernels (the CPU path, or a GPU whose kernels failed their self-test) the loop
    still makes no synchronising torch call."""
    problem = _problems(True)
    with _Count() as count:
        _alm._alm_pass(**{**problem, "max_iterations": 4, "tol": 0.0})
    assert not count.syncs, count.syncs

"""The TV-regularised phase on the device: ``tv.prox`` (FGP on tensors) against ``tv.denoise``
and scikit-image, and the ADMM against the previous implementation (a ``tv.denoise`` job through
the host per iteration, kept here as the reference) and against an ADMM whose z-step is
scikit-image's Chambolle solver run to convergence."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rof_oracle import rof_energy
from skimage.restoration import denoise_tv_chambolle

from napari_gpuscope.compute import phase, tv
from napari_gpuscope.compute.phase._inverse import NormalEquations
from napari_gpuscope.compute.phase._reconstruct import TV_RHO, Reconstructor, admm_tv
from napari_gpuscope.sample_data.phase import OPTICS

AIR = OPTICS  # the samples' optics: air, NA 0.4 / 0.55, 0.45 µm light


def _image(shape, seed=0):
    rng = np.random.default_rng(seed)
    image = np.zeros(shape, np.float32)
    image[shape[0] // 4 : shape[0] // 2, shape[1] // 3 :] = 1.0
    return (image + 0.2 * rng.standard_normal(shape)).astype(np.float32)


@pytest.mark.parametrize(
    ("shape", "weight", "spacing", "nonnegative", "iterations"),
    [
        ((40, 52), 0.15, None, False, 10),
        ((40, 52), 0.4, (1.0, 0.5), True, 37),
        ((6, 20, 24), 0.2, (0.5, 1.0, 1.0), False, 25),
    ],
)
def test_prox_runs_the_iterations_of_denoise(shape, weight, spacing, nonnegative, iterations):
    """Without a warm start, ``prox`` is ``denoise`` stopped after the same FGP iterations."""
    image = _image(shape)
    got = tv.prox(
        torch.from_numpy(image),
        weight,
        iterations=iterations,
        spacing=spacing,
        nonnegative=nonnegative,
    )
    want = tv.denoise(
        image,
        weight,
        spacing=spacing,
        nonnegative=nonnegative,
        max_iterations=iterations,
        tolerance=0.0,
        device="cpu",
    )
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-6)


def test_prox_converges_to_scikit_image_and_a_warm_start_stays_there():
    """3000 FGP iterations against scikit-image's Chambolle solver (20000 iterations): the same
    image within 1e-3, and an ROF energy (independent oracle) no higher."""
    image = _image((48, 40), seed=1)
    reference = denoise_tv_chambolle(
        image.astype(np.float64), weight=0.2, eps=1e-12, max_num_iter=20000
    )
    dual = torch.zeros((2, 48, 40))
    converged = tv.prox(torch.from_numpy(image), 0.2, iterations=3000, dual=dual)
    np.testing.assert_allclose(converged.numpy(), reference, atol=1e-3)
    energy = rof_energy(converged.numpy().astype(np.float64), image.astype(np.float64), 0.2)
    assert energy <= rof_energy(reference, image.astype(np.float64), 0.2) * (1 + 1e-7)
    # from the converged dual, one more iteration is still the solution
    again = tv.prox(torch.from_numpy(image), 0.2, iterations=1, dual=dual)
    np.testing.assert_allclose(again.numpy(), converged.numpy(), atol=1e-5)
    # leading axes are independent problems
    batch = torch.from_numpy(np.stack([image, 2 * image]))
    both = tv.prox(batch, 0.2, iterations=500, spacing=(1.0, 1.0))
    for index, scale in enumerate((1.0, 2.0)):
        alone = tv.prox(torch.from_numpy(scale * image), 0.2, iterations=500)
        np.testing.assert_allclose(both[index].numpy(), alone.numpy(), atol=1e-6)


def test_prox_edges():
    image = torch.from_numpy(_image((8, 8)))
    out = tv.prox(image, 0.0)
    assert torch.equal(out, image) and out.data_ptr() != image.data_ptr()
    assert float(tv.prox(image, 0.0, nonnegative=True).min()) >= 0
    with pytest.raises(ValueError, match="weight"):
        tv.prox(image, -1.0)
    with pytest.raises(ValueError, match="iterations"):
        tv.prox(image, 0.1, iterations=0)
    with pytest.raises(ValueError, match="dual"):
        tv.prox(image, 0.1, dual=torch.zeros((1, 8, 8)))
    with pytest.raises(ValueError, match="couples"):
        tv.prox(image, 0.1, spacing=(1.0, 1.0, 1.0))


def host_side_admm(system, reg, strength, iterations, **denoise):
    """The previous implementation: each z-step a whole ``tv.denoise`` job through the host."""
    a_hat, p_hat = system.solve(reg)
    z = torch.fft.ifft2(p_hat).real
    u = torch.zeros_like(z)
    shifted = NormalEquations(
        system.g_aa, system.g_pp + TV_RHO, system.g_ap, system.b_a, system.b_p
    )
    for _ in range(iterations):
        shifted.b_p = system.b_p + TV_RHO * torch.fft.fft2(z - u)
        a_hat, p_hat = shifted.solve(reg)
        current = torch.fft.ifft2(p_hat).real
        target = (current + u).cpu().numpy().astype(np.float32)
        denoised = np.asarray(tv.denoise(target, strength / TV_RHO, device="cpu", **denoise))
        z = torch.from_numpy(denoised).to(current.device)
        u = u + current - z
    return torch.fft.ifft2(a_hat).real, z


def exact_admm(system, reg, strength, iterations):
    """The same ADMM with scikit-image's Chambolle solver run to convergence as the z-step."""
    _, p_hat = system.solve(reg)
    z = torch.fft.ifft2(p_hat).real.double()
    u = torch.zeros_like(z)
    shifted = NormalEquations(
        system.g_aa, system.g_pp + TV_RHO, system.g_ap, system.b_a, system.b_p
    )
    for _ in range(iterations):
        shifted.b_p = system.b_p + TV_RHO * torch.fft.fft2((z - u).float())
        _, p_hat = shifted.solve(reg)
        current = torch.fft.ifft2(p_hat).real.double()
        target = (current + u).numpy()
        z = torch.from_numpy(
            denoise_tv_chambolle(target, weight=strength / TV_RHO, eps=1e-9, max_num_iter=5000)
        )
        u = u + current - z
    return z.numpy()


@pytest.fixture(scope="module")
def tv_system():
    params = phase.PhaseParams(**AIR, regularizer="tv", tv_strength=2e-3, regularization=1e-4)
    rng = np.random.default_rng(7)
    truth = np.zeros((64, 64), np.float32)
    truth[16:40, 20:44] = 0.6
    stack = phase.simulate_stack(truth, 0.03 * truth, params, 9)
    stack = (rng.poisson(500.0 * stack) / 500.0).astype(np.float32)
    data = torch.from_numpy(stack)
    with torch.no_grad():
        system = Reconstructor(data, params, phase.OpticsCache()).system(data, 0.0, 0.0)
    return system, params


def test_admm_equals_the_previous_implementation_for_the_same_iterations(tv_system):
    """Cold-started z-steps of K FGP iterations are the previous ``tv.denoise`` z-steps stopped
    after K iterations, for 15 ADMM iterations."""
    system, p = tv_system
    with torch.no_grad():
        for k in (10, 40):
            a_hat, ours = admm_tv(
                system, p.regularization, p.tv_strength, 15, prox_iterations=k, warm_start=False
            )
            absorption, reference = host_side_admm(
                system, p.regularization, p.tv_strength, 15, max_iterations=k, tolerance=0.0
            )
            np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=0, atol=1e-6)
            np.testing.assert_allclose(
                torch.fft.ifft2(a_hat).real.numpy(), absorption.numpy(), rtol=0, atol=1e-6
            )


def test_admm_is_closer_to_the_exact_admm_than_the_previous_one(tv_system):
    """The default (warm-started z-steps) against the ADMM with converged z-steps: at least as
    close as the previous implementation's certified (relative gap 1e-3) z-steps, and within
    1e-3 rad."""
    system, p = tv_system
    exact = exact_admm(system, p.regularization, p.tv_strength, 15)
    with torch.no_grad():
        _, ours = admm_tv(system, p.regularization, p.tv_strength, 15)
        _, previous = host_side_admm(system, p.regularization, p.tv_strength, 15)
    ours_error = float(np.abs(ours.numpy() - exact).max())
    previous_error = float(np.abs(previous.numpy() - exact).max())
    assert ours_error <= 1e-3
    assert ours_error <= previous_error

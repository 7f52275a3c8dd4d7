"""The checked 2D Fourier transforms (``compute.fourier``) against NumPy's (pocketfft), on the
sizes where torch's MKL transform is wrong on several threads (pytorch/pytorch#169670), and
with a deliberately broken torch transform."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_gpuscope.compute import fourier


@pytest.fixture
def fresh_verdicts(monkeypatch):
    """Every case checked again (the module keeps its verdicts for the process)."""
    monkeypatch.setattr(fourier, "_VERDICTS", {})


def _relative_error(got: torch.Tensor, want: np.ndarray) -> float:
    return float(np.abs(got.numpy() - want).max() / np.abs(want).max())


@pytest.mark.parametrize("shape", [(2048, 2048), (1, 2048, 2048), (3, 96, 80), (37, 53)])
def test_both_directions_equal_numpy_on_two_threads(shape, fresh_verdicts):
    """2048² on 2 threads is the case torch 2.13's own ifft2 got wrong on this project's CI
    machine (a round trip returned garbage); on a torch without the defect it passes as well."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        data = torch.randn(shape, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
        array = data.numpy().astype(np.complex128)
        assert _relative_error(fourier.fft2(data), np.fft.fft2(array)) < 1e-5
        assert _relative_error(fourier.ifft2(data), np.fft.ifft2(array)) < 1e-5
        real = data.real.contiguous()
        assert _relative_error(fourier.fft2(real), np.fft.fft2(real.numpy())) < 1e-5
    finally:
        torch.set_num_threads(threads)


def test_a_wrong_2d_transform_is_found_and_bypassed(monkeypatch, fresh_verdicts):
    true_ifft2 = torch.fft.ifft2
    monkeypatch.setattr(torch.fft, "ifft2", lambda x: 4 * true_ifft2(x))  # the defect's size
    data = torch.randn((2, 64, 48), dtype=torch.complex64)
    got = fourier.ifft2(data)
    assert _relative_error(got, np.fft.ifft2(data.numpy())) < 1e-5
    assert fourier.verdicts()[((2, 64, 48), torch.complex64, True, torch.get_num_threads())] == (
        "by axes"
    )
    # The forward transform was not touched: it keeps torch's 2D transform, bit for bit.
    assert torch.equal(fourier.fft2(data), torch.fft.fft2(data))


def test_right_2d_and_wrong_1d_keep_the_2d_transform(monkeypatch, fresh_verdicts):
    """NumPy decides which of the two disagreeing transforms is right."""
    true_fft = torch.fft.fft
    monkeypatch.setattr(torch.fft, "fft", lambda x, dim=-1: 2 * true_fft(x, dim=dim))
    data = torch.randn((40, 40), dtype=torch.complex64)
    assert torch.equal(fourier.fft2(data), torch.fft.fft2(data))
    assert set(fourier.verdicts().values()) == {"2d"}


def test_both_wrong_fails_in_words(monkeypatch, fresh_verdicts):
    monkeypatch.setattr(torch.fft, "ifft2", lambda x: torch.zeros_like(x))
    monkeypatch.setattr(torch.fft, "ifft", lambda x, dim=-1: torch.zeros_like(x))
    with pytest.raises(RuntimeError, match=r"shape \(32, 32\).*set_num_threads\(1\)"):
        fourier.ifft2(torch.randn((32, 32), dtype=torch.complex64))


def test_gradients_pass_through_the_bypass(monkeypatch, fresh_verdicts):
    """The tilt estimate differentiates through these transforms."""
    data = torch.randn((2, 24, 20), dtype=torch.complex64)
    target = torch.randn((2, 24, 20))

    def loss_grad() -> torch.Tensor:
        x = data.clone().requires_grad_(True)
        (fourier.ifft2(fourier.fft2(x) * 1.5).real - target).square().sum().backward()
        return x.grad

    plain = loss_grad()
    true_ifft2 = torch.fft.ifft2
    monkeypatch.setattr(torch.fft, "ifft2", lambda x: 4 * true_ifft2(x))
    monkeypatch.setattr(fourier, "_VERDICTS", {})
    torch.testing.assert_close(loss_grad(), plain, rtol=1e-5, atol=1e-5)


def test_a_1024_phase_field_has_its_contrast():
    """A 1024² field's transfer functions are built on a 2048² grid: through torch's faulty
    transform its simulated stack came out flat (std 1e-10 against 0.015 at 1000² and 1030²)."""
    from napari_gpuscope.compute import phase
    from napari_gpuscope.sample_data.phase import OPTICS, cell_phantom

    params = phase.PhaseParams(**OPTICS)
    contrast = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the suite runs on one thread, where MKL is right
    try:
        for size in (1024, 1030):
            truth, absorption = cell_phantom((size, size))
            contrast[size] = float(np.std(phase.simulate_stack(truth, absorption, params, 5)))
    finally:
        torch.set_num_threads(threads)
    assert contrast[1024] == pytest.approx(contrast[1030], rel=0.05)


def test_compute_calls_the_checked_transforms_only():
    """A new ``torch.fft.fft2``/``ifft2`` call in compute/ would bypass the check."""
    from pathlib import Path

    import napari_gpuscope.compute as compute

    root = Path(compute.__file__).parent
    direct = [
        f"{path.relative_to(root)}:{number}"
        for path in root.rglob("*.py")
        if path.name != "fourier.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "torch.fft.fft2(" in line or "torch.fft.ifft2(" in line
    ]
    assert not direct, direct


def test_integers_are_transformed_as_torch_does(fresh_verdicts):
    data = torch.arange(48 * 40).reshape(48, 40) % 7
    torch.testing.assert_close(fourier.fft2(data), torch.fft.fft2(data))


def test_the_bypass_returns_a_contiguous_transform(monkeypatch, fresh_verdicts):
    true_fft2 = torch.fft.fft2
    monkeypatch.setattr(torch.fft, "fft2", lambda x: 4 * true_fft2(x))
    out = fourier.fft2(torch.randn((3, 64, 48), dtype=torch.complex64))
    assert out.is_contiguous()

"""Random inputs of the fused ALM ops (:mod:`._ops`): what their self-tests, the host tests and
the GPU kit run kernel and twin on.

Each returns ``(args, kwargs)`` as :class:`~napari_gpuscope.compute.kernels.FusedOp` examples
do, drawn on the CPU with ``generator`` and moved to ``device``; the state ops' ``args`` is one
:class:`~._alm_state.AlmState` whose fields the op does not read are zeros.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._alm_state import AlmState
from ._geometry import dc_scale

__all__ = [
    "dark_finish_example",
    "dark_shape_example",
    "dual_example",
    "shrink_example",
    "sparse_example",
    "status_example",
]

Example = tuple[tuple[torch.Tensor | AlmState, ...], dict[str, float | bool]]
"""``(args, kwargs)`` of one op call."""


def _uniform(device: torch.device, generator: torch.Generator) -> Callable[..., torch.Tensor]:
    """``rand(*size)``: uniform on [0, 1), drawn on the CPU with ``generator``, on ``device``."""

    def rand(*size: int) -> torch.Tensor:
        return torch.rand(size, generator=generator).to(device)

    return rand


def _flat_hat_for(flat: torch.Tensor) -> torch.Tensor:
    """A coefficient array whose DC term is ``flat``'s mean (what the kernels read of it)."""
    hat = torch.randn(flat.shape, generator=torch.Generator().manual_seed(1)).to(flat.device)
    mean = flat.reshape(flat.shape[0], -1).mean(dim=1)
    hat.reshape(flat.shape[0], -1)[:, 0] = mean / dc_scale(flat[0].numel())
    return hat


def _active_example(p: int, device: torch.device) -> torch.Tensor:
    """Every other problem frozen (the first active)."""
    return (torch.arange(p, device=device) % 2 == 0).float()


def _stack_state(
    device: torch.device, generator: torch.Generator, p: int, t: int, shape: tuple[int, int]
) -> dict[str, torch.Tensor]:
    """A random ALM state: images ~ 50-150, flat ~ 0.5-1.5, baseline ~ 0.5-1.5 (relative; its
    scale does not matter to the kernels), dark ~ 0-10; ``mu`` ~ 0.01-0.03."""
    rand = _uniform(device, generator)
    images = 100 * rand(p, t, *shape) + 50
    flat = 0.5 + rand(p, *shape)
    baseline = (50 + 100 * rand(p, t)) / 100
    dark = 10 * rand(p, *shape)
    dual = rand(p, t, *shape) - 0.5
    weight = rand(p, t, *shape) + 0.1
    mu = 0.01 + 0.02 * rand(p)
    return {
        "images": images,
        "flat": flat,
        "flat_hat": _flat_hat_for(flat),
        "baseline": baseline,
        "dark": dark,
        "dual": dual,
        "weight": weight,
        "mu": mu,
        "active": _active_example(p, device),
    }


def shrink_example(device: torch.device, generator: torch.Generator) -> Example:
    """``basic_shrink``'s ``(x, y, threshold, active, out)``, the middle problem frozen."""
    rand = _uniform(device, generator)
    x = 4 * rand(3, 6, 7) - 2
    active = torch.tensor([1.0, 0.0, 1.0], device=device)
    return (x, rand(3, 6, 7) - 0.5, rand(3), active, x.clone()), {"with_y": True}


def sparse_example(
    device: torch.device,
    generator: torch.Generator,
    p: int = 3,
    t: int = 5,
    shape: tuple[int, int] = (7, 9),
) -> Example:
    """``basic_sparse``'s state of ``p`` problems of ``t`` images of ``shape``."""
    given = _stack_state(device, generator, p, t, shape)
    rand = _uniform(device, generator)
    rows = rand(p, t, 2)
    sparse = rand(p, t, *shape)
    state = AlmState.filled(p, t, shape, device, rows=rows, sparse=sparse, **given)
    return (state,), {}


def dual_example(
    device: torch.device,
    generator: torch.Generator,
    p: int = 3,
    t: int = 20,
    shape: tuple[int, int] = (7, 9),
) -> Example:
    """``basic_dual``'s state (with the darkfield's three pixel sums), ``rho = 1.5``."""
    given = _stack_state(device, generator, p, t, shape)
    rand = _uniform(device, generator)
    sparse = 20 * (rand(p, t, *shape) - 0.5)
    state = AlmState.filled(
        p,
        t,
        shape,
        device,
        sparse=sparse,
        mu_max=1.2 * given["mu"],
        column=rand(p, *shape),
        pixel_sums=rand(p, 3, *shape),
        **given,
    )
    return (state,), {"rho": 1.5}


def status_example(
    device: torch.device, generator: torch.Generator, p: int = 3, t: int = 20
) -> Example:
    """``basic_status``'s state (with the darkfield's totals), images of 6 x 7 pixels."""
    shape = (6, 7)
    m = shape[0] * shape[1]
    rand = _uniform(device, generator)
    rows = 100 * m * (0.5 + rand(p, t, 2))
    rows[..., 1] *= 0.5  # the inner pixels' share
    baseline = 0.5 + rand(p, t)  # about half below 1
    totals = torch.stack((m * rand(p), 80 * m * rand(p), m * (0.3 + 0.4 * rand(p))), dim=1)
    flat = 0.5 + rand(p, *shape)
    given = {"totals": totals.floor(), "rows": rows, "baseline": baseline}
    given["flat_hat"] = _flat_hat_for(flat)
    given["image_norm"] = 50 * m * (1 + rand(p))
    given["offset_max"] = 40 + 20 * rand(p)
    given["lam_flat"] = rand(p)
    given["lam_dark"] = 0.1 * rand(p)
    given["mu"] = 0.01 + rand(p)
    given["mu_max"] = 1e3 * (1 + rand(p))
    given["active"] = _active_example(p, device)
    given["active_next"] = rand(p)  # written for every problem
    given["iterations"] = torch.full((p,), 3.0, device=device)
    for name in ("ratio", "thr_flat", "thr_dark", "offset"):
        given[name] = rand(p)
    given["dark_values"] = rand(p, 3)
    state = AlmState.filled(p, t, shape, device, **given)
    return (state,), {"rho": 1.5, "tol": 1e-4, "ent_dark": 10.0}


def _dark_state(
    device: torch.device, generator: torch.Generator, p: int = 3, shape: tuple[int, int] = (6, 7)
) -> dict[str, torch.Tensor]:
    rand = _uniform(device, generator)
    flat = 0.5 + rand(p, *shape)
    values = torch.stack((torch.tensor([4.0, 0.0, 7.0]), 0.5 + rand(p).cpu(), rand(p).cpu()), 1)
    return {
        "flat": flat,
        "flat_hat": _flat_hat_for(flat),
        "offset": 30 * rand(p),
        "dark_values": values.to(device),
        "active": _active_example(p, device),
    }


def dark_shape_example(device: torch.device, generator: torch.Generator) -> Example:
    """``basic_dark_shape``'s state: 3 problems of 6 x 7 pixels, the second with no image of
    ``B < 1``."""
    given = _dark_state(device, generator)
    p, *shape = given["flat"].shape
    pixel_sums = 400 * torch.rand((p, 3, *shape), generator=generator).to(device)
    work = torch.rand_like(given["flat"])
    state = AlmState.filled(p, 1, (shape[0], shape[1]), device, pixel_sums=pixel_sums,
                            work=work, **given)
    return (state,), {}


def dark_finish_example(device: torch.device, generator: torch.Generator) -> Example:
    """``basic_dark_finish``'s state: 3 problems of 6 x 7 pixels (``work`` is the smoothed
    shape)."""
    given = _dark_state(device, generator)
    flat = given["flat"]
    p, *shape = flat.shape
    work = 20 * torch.rand(flat.shape, generator=generator).to(device) - 10
    dark = 10 * torch.rand(flat.shape, generator=generator).to(device)
    state = AlmState.filled(
        p,
        1,
        (shape[0], shape[1]),
        device,
        work=work,
        thr_dark=torch.tensor([2.0, 1.0, 3.0], device=device),
        dark=dark,
        dark_before=torch.rand_like(flat),
        column=100 * torch.rand_like(flat),
        **given,
    )
    return (state,), {}

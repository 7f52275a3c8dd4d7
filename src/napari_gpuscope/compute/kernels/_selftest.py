"""The first-use self-test of a fused op: its kernel against its torch twin on example inputs.

:class:`~._dispatch.FusedOp` runs it once per device before it lets the kernel run; the
verdict (match, mismatch with the largest difference) decides the op's path there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from ._backends import Backend
from ._gate import StreamHold
from ._structure import Output, clone, copy_into, output_of, poisoned_like, with_output

__all__ = ["Checked", "Example", "Launch", "self_test"]

Example = Callable[
    [torch.device, torch.Generator], tuple[tuple[object, ...], dict[str, object]]
]
"""``example(device, generator) -> (args, kwargs)``: small random inputs of an op."""

Launch = Callable[..., None]
"""``launch(backend, *args, **kwargs)``: an op's kernel launcher."""


class Checked(Protocol):
    """What the self-test needs of an op (:class:`~._dispatch.FusedOp` has it)."""

    launch: Launch
    twin: Callable[..., None]
    example: Example
    outputs: tuple[Output, ...]
    rtol: float
    atol: float


def _bound(backend: Backend) -> Backend:
    """The backend bound to torch's current stream, when it binds to streams."""
    bind = getattr(backend, "on_current_stream", None)
    return bind() if bind is not None else backend


def self_test(op: Checked, backend: Backend, device: torch.device) -> tuple[bool, str]:
    """Compare the kernel on ``backend`` with the twin on the op's example inputs.

    Outputs whose initial values the twin does not read (pure outputs) start as NaN on both
    sides, so an element the kernel never writes shows as a mismatch, and so does a kernel
    that did not run at all (an uninitialised example output may hold the right answer
    from an earlier test: the first H100 run passed a wrong-stream kernel that way).

    On CUDA the kernel is launched once beforehand (the NVRTC compile stays out of the
    test), then the test runs on a fresh stream held by a :class:`StreamHold` until the
    host has launched the kernel: the stream writes the inputs, runs the kernel and
    compares, so a kernel launched on any other stream than torch's current one runs on
    poisoned inputs and fails. Nothing is synchronised between the launch and the
    comparison (which runs on that stream too).

    Returns
    -------
    ok : bool
        Whether every output matched within ``rtol``/``atol``.
    detail : str
        ``"max abs diff X vs twin"`` or what differs.

    Raises
    ------
    Exception
        Whatever the kernel raised (e.g. :class:`KernelCompileError`).
    """
    # A CPU generator on every device: examples draw on the host and move to ``device``, so
    # the same seed gives the same inputs everywhere.
    generator = torch.Generator().manual_seed(0)
    args, kwargs = op.example(device, generator)
    args, kwargs = _poison_pure_outputs(op, args, kwargs)
    twin_args, twin_kwargs = clone(args), clone(kwargs)
    op.twin(*twin_args, **twin_kwargs)
    kernel_args, kernel_kwargs = poisoned_like(args), poisoned_like(kwargs)
    if device.type == "cuda":
        scratch_args, scratch_kwargs = clone(args), clone(kwargs)
        with torch.cuda.device(device):
            op.launch(_bound(backend), *scratch_args, **scratch_kwargs)
            torch.cuda.synchronize(device)
        del scratch_args, scratch_kwargs
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))  # the example's copies
        with torch.cuda.device(device), torch.cuda.stream(stream):
            hold = StreamHold(device)
            copy_into((kernel_args, kernel_kwargs), (args, kwargs))
            op.launch(_bound(backend), *kernel_args, **kernel_kwargs)
            hold.release()
            result = _compare(op, (twin_args, twin_kwargs), (kernel_args, kernel_kwargs))
        return result
    copy_into((kernel_args, kernel_kwargs), (args, kwargs))
    op.launch(backend, *kernel_args, **kernel_kwargs)
    return _compare(op, (twin_args, twin_kwargs), (kernel_args, kernel_kwargs))


def _poison_pure_outputs(
    op: Checked, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[tuple[object, ...], dict[str, object]]:
    """The example with every output the twin only writes (never reads) set to NaN.

    An output is pure when NaN in it before the call changes none of the twin's outputs;
    in-out arguments (a dual variable updated in place) keep their values. The probe runs
    never read the example's outputs (fresh filled tensors stand in for all of them): a
    pure output is often ``torch.empty``, and copying it would read uninitialised device
    memory (compute-sanitizer's initcheck flags that).
    """

    def trial(nan_output: Output | None) -> tuple[torch.Tensor, ...]:
        trial_args, trial_kwargs = list(args), dict(kwargs)
        for output in op.outputs:
            like = output_of(args, kwargs, output)
            value = float("nan") if output == nan_output else 0.5
            with_output(trial_args, trial_kwargs, output, torch.full_like(like, value))
        op.twin(*trial_args, **trial_kwargs)
        return tuple(output_of(trial_args, trial_kwargs, o) for o in op.outputs)

    reference = trial(None)
    poisoned_args, poisoned_kwargs = list(args), dict(kwargs)
    for output in op.outputs:
        probed = trial(output)
        if all(
            torch.equal(got.isnan(), want.isnan())
            and torch.allclose(got, want, rtol=0, atol=0, equal_nan=True)
            for got, want in zip(probed, reference, strict=True)
        ):
            poison = torch.full_like(output_of(args, kwargs, output), float("nan"))
            with_output(poisoned_args, poisoned_kwargs, output, poison)
    return tuple(poisoned_args), poisoned_kwargs


def _compare(
    op: Checked,
    twin: tuple[Sequence[object], dict[str, object]],
    kernel: tuple[Sequence[object], dict[str, object]],
) -> tuple[bool, str]:
    """Whether the kernel's outputs match the twin's, and the largest difference."""
    worst = 0.0
    ok = True
    for output in op.outputs:
        expected = output_of(twin[0], twin[1], output)
        got = output_of(kernel[0], kernel[1], output)
        if expected.shape != got.shape:
            shapes = f"{tuple(got.shape)} vs twin {tuple(expected.shape)}"
            return False, f"output {output!r} has shape {shapes}"
        if expected.numel() == 0:
            continue
        if not torch.allclose(got, expected, rtol=op.rtol, atol=op.atol, equal_nan=True):
            ok = False
        if bool((got.isnan() != expected.isnan()).any()):
            worst = float("nan")
        elif worst == worst:  # not already NaN
            worst = max(worst, float((got.double() - expected.double()).abs().nan_to_num(0).max()))
    detail = f"max abs diff {worst:.3g} vs twin"
    if worst != worst:
        detail = "NaN where the twin has a number (or the reverse) vs twin"
    return ok, detail

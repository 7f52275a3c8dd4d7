"""Online temporal statistics of per-frame eSRRF maps, and macro-pixel correction.

NanoPyx stores every frame's map (``T x HM x WM`` floats) and then takes the mean, the
population variance or the lag-1 autocovariance over the frame axis. Here the frames stream
through running sums in float64 on the device -- ``S1 = sum x``, ``S2 = sum x^2``,
``L = sum x_t x_(t+1)``, the first and the last frame -- from which the same statistics follow
exactly (research note section 1.4)::

    AVG  = S1 / n
    VAR  = S2 / n - AVG^2
    TAC2 = (L - AVG (2 S1 - x_0 - x_(n-1)) + (n - 1) AVG^2) / (n - 1)

so device memory is a few output-sized arrays whatever the number of frames. float64 keeps
the cancellation in VAR and TAC2 far below float32 resolution.
"""

from __future__ import annotations

import torch

__all__ = ["TemporalAccumulator", "macro_pixel_correct"]


class TemporalAccumulator:
    """Running sums of one time point's frames (see the module docstring).

    Parameters
    ----------
    shape : tuple of int
        ``(H M, W M)``.
    mode : {"AVG", "VAR", "TAC2"}
    device : torch.device

    Examples
    --------
    >>> acc = TemporalAccumulator((1, 2), "VAR", torch.device("cpu"))
    >>> acc.add(torch.tensor([[[1.0, 2.0]], [[3.0, 2.0]]]))
    >>> acc.result().tolist()
    [[1.0, 0.0]]
    """

    def __init__(self, shape: tuple[int, int], mode: str, device: torch.device) -> None:
        self.mode = mode
        self.count = 0
        zeros = lambda: torch.zeros(shape, dtype=torch.float64, device=device)  # noqa: E731
        self.total = zeros()
        self.squares = zeros() if mode == "VAR" else None
        self.lagged = zeros() if mode == "TAC2" else None
        self.first: torch.Tensor | None = None
        self.last: torch.Tensor | None = None

    def add(self, frames: torch.Tensor) -> None:
        """Add a chunk of consecutive frames ``(B, H M, W M)`` (float32)."""
        for frame in frames:
            x = frame.to(torch.float64)
            self.total += x
            if self.squares is not None:
                self.squares.addcmul_(x, x)
            if self.lagged is not None:
                if self.last is not None:
                    self.lagged.addcmul_(self.last, x)
                if self.first is None:
                    self.first = x
                self.last = x
            self.count += 1

    def result(self) -> torch.Tensor:
        """The statistic of the frames added so far, float32 (zeros before any frame; VAR and
        TAC2 of a single frame are 0)."""
        if self.count == 0:
            return torch.zeros_like(self.total, dtype=torch.float32)
        n = self.count
        mean = self.total / n
        if self.mode == "AVG":
            out = mean
        elif self.mode == "VAR":
            out = (self.squares / n - mean * mean).clamp_min_(0.0)
        elif n < 2:
            out = torch.zeros_like(mean)
        else:
            ends = 2 * self.total - self.first - self.last
            out = (self.lagged - mean * ends + (n - 1) * mean * mean) / (n - 1)
        return out.to(torch.float32)


def macro_pixel_correct(image: torch.Tensor, magnification: int) -> torch.Tensor:
    """Divide every sub-pixel phase by its mean over the image (NanoPyx's macro-pixel
    correction; a phase whose mean is 0 is left as it is).

    Examples
    --------
    >>> image = torch.tensor([[1.0, 4.0], [3.0, 8.0]])
    >>> macro_pixel_correct(image, 1).tolist()
    [[0.25, 1.0], [0.75, 2.0]]
    """
    m = magnification
    rows, cols = image.shape[-2:]
    blocks = image.reshape(rows // m, m, cols // m, m)
    phase_mean = blocks.to(torch.float64).mean(dim=(0, 2))  # (M, M)
    safe = torch.where(phase_mean != 0, phase_mean, 1.0)
    return (blocks / safe[None, :, None, :]).to(image.dtype).reshape(rows, cols)

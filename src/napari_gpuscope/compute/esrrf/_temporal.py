"""Online temporal statistics of per-frame eSRRF maps, and macro-pixel correction.

NanoPyx stores every frame's map (``T x HM x WM`` floats) and then takes the mean, the
population variance or the lag-1 autocovariance over the frame axis. Here the frames stream
through running sums in float64 on the device -- ``S1 = sum x``, ``S2 = sum x^2``,
``L = sum x_t x_(t+1)`` -- and the first and the last frame's values (float32, as computed),
from which the same statistics follow exactly (research note section 1.4)::

    AVG  = S1 / n
    VAR  = S2 / n - AVG^2
    TAC2 = (L - AVG (2 S1 - x_0 - x_(n-1)) + (n - 1) AVG^2) / (n - 1)

so device memory is a few output-sized arrays whatever the number of frames. float64 keeps
the cancellation in VAR and TAC2 far below float32 resolution. On a GPU the fused kernel
``esrrf_rgc_accumulate`` does the folding (:func:`fold`, frame by frame in the same order)
itself, in registers, so no per-frame map is ever stored.

A chunk of frames is *staged* (the sums after it are written to a second buffer, the committed
ones are only read) and *committed* when the whole chunk has finished (the buffers swap): an
out-of-memory error anywhere in a chunk leaves the committed sums as they were, so the retried
chunk never counts a frame twice. The widefield sum of the raw frames goes the same way, frame
by frame into float64 (like the statistics), so that it does not depend on how the frames are
chunked: a dock streaming small chunks, a batch run and a GPU with less free memory (smaller
planned chunks) give the same bytes.
"""

from __future__ import annotations

import torch

__all__ = [
    "EDGE_ROWS",
    "STATE_ROWS",
    "STATISTIC_CODES",
    "TemporalAccumulator",
    "fold",
    "macro_pixel_correct",
]

STATE_ROWS = {"AVG": ("total",), "VAR": ("total", "squares"), "TAC2": ("total", "lagged")}
"""The float64 planes of the running sums per statistic, in order (the layout the fused kernel
reads and writes)."""

EDGE_ROWS = ("first", "last")
"""The float32 planes of the first and the last frame's values (TAC2's end corrections)."""

STATISTIC_CODES = {"AVG": 0, "VAR": 1, "TAC2": 2}
"""How ``esrrf_rgc_accumulate`` names the statistics."""


def fold(
    maps: torch.Tensor,
    mode: str,
    sums_in: torch.Tensor,
    edges_in: torch.Tensor,
    sums_out: torch.Tensor,
    edges_out: torch.Tensor,
    continuing: bool,
) -> None:
    """The running state after the consecutive frames ``maps`` ``(B, H M, W M)`` (float32).

    ``sums_out``/``edges_out`` receive ``sums_in``/``edges_in`` with the frames added one at a
    time, in order (the fused kernel's arithmetic: float64 sums of float32 values, whose
    products are exact). ``continuing``: the incoming state already holds frames (the first
    of ``maps`` pairs with the last of them). No float64 copy of the chunk is made.
    """
    sums_out.copy_(sums_in)
    edges_out.copy_(edges_in)
    total = sums_out[0]
    first, last = edges_out
    started = continuing
    for frame in maps:
        x = frame.to(torch.float64)
        total += x
        if mode == "VAR":
            sums_out[1].addcmul_(x, x)
        elif mode == "TAC2" and started:
            sums_out[1].addcmul_(last, x)
        if not started:
            first.copy_(frame)
        last.copy_(frame)
        started = True


class TemporalAccumulator:
    """Running sums of one time point's frames (see the module docstring).

    Parameters
    ----------
    shape : tuple of int
        ``(H M, W M)``.
    mode : {"AVG", "VAR", "TAC2"}
    device : torch.device
    frame_shape : tuple of int, optional
        ``(H, W)`` of the raw frames, to keep their (widefield) sum as well.

    Attributes
    ----------
    count : int
        Frames committed.
    sums : torch.Tensor
        float64 ``(len(STATE_ROWS[mode]), H M, W M)``: the committed sums.
    edges : torch.Tensor
        float32 ``(2, H M, W M)``: the committed first and last frame's values.

    Examples
    --------
    >>> acc = TemporalAccumulator((1, 2), "VAR", torch.device("cpu"))
    >>> acc.add(torch.tensor([[[1.0, 2.0]], [[3.0, 2.0]]]))
    >>> acc.result().tolist()
    [[1.0, 0.0]]
    """

    def __init__(
        self,
        shape: tuple[int, int],
        mode: str,
        device: torch.device,
        frame_shape: tuple[int, int] | None = None,
    ) -> None:
        self.mode = mode
        self.rows = STATE_ROWS[mode]
        self.count = 0
        self.sums = torch.zeros((len(self.rows), *shape), dtype=torch.float64, device=device)
        self.edges = torch.zeros((2, *shape), dtype=torch.float32, device=device)
        self._staged_sums = torch.empty_like(self.sums)
        self._staged_edges = torch.empty_like(self.edges)
        self._staged_frames: int | None = None
        self.widefield_sum: torch.Tensor | None = None
        self._staged_widefield: torch.Tensor | None = None
        self._widefield_ready = False
        if frame_shape is not None:
            self.widefield_sum = torch.zeros(frame_shape, dtype=torch.float64, device=device)
            self._staged_widefield = torch.empty_like(self.widefield_sum)

    @staticmethod
    def state_bytes(shape: tuple[int, int], mode: str) -> int:
        """Device bytes of the committed and the staged state (sums and edges)."""
        return 2 * (8 * len(STATE_ROWS[mode]) + 4 * len(EDGE_ROWS)) * shape[0] * shape[1]

    @property
    def continuing(self) -> bool:
        """Whether frames have been committed (the next one pairs with the last of them)."""
        return self.count > 0

    def plane(self, name: str) -> torch.Tensor:
        """One committed plane by name: a sum (``"total"``, ``"squares"``, ``"lagged"``) or an
        edge (``"first"``, ``"last"``)."""
        if name in EDGE_ROWS:
            return self.edges[EDGE_ROWS.index(name)]
        return self.sums[self.rows.index(name)]

    # -- staging -----------------------------------------------------------------------------
    def buffers(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(sums, edges, staged sums, staged edges)``: where a kernel reads the state so far
        and writes the state after the chunk (call :meth:`staged` after it)."""
        return self.sums, self.edges, self._staged_sums, self._staged_edges

    def staged(self, frames: int) -> None:
        """The staged state now holds the committed frames and ``frames`` more."""
        self._staged_frames = frames

    def stage(self, maps: torch.Tensor) -> None:
        """Stage a chunk of consecutive per-frame maps ``(B, H M, W M)`` (float32) with
        :func:`fold`: the committed state is read, not changed."""
        sums, edges, staged_sums, staged_edges = self.buffers()
        fold(maps, self.mode, sums, edges, staged_sums, staged_edges, self.continuing)
        self.staged(len(maps))

    def stage_widefield(self, frames: torch.Tensor) -> None:
        """Stage the sum of a chunk of raw float32 frames ``(B, H, W)``: each frame added to
        the float64 total in order (no float64 copy of the chunk), so the sum is the same
        however the frames are chunked (float32 partial sums of a chunk were not, for the
        non-integer values of drift-corrected frames)."""
        if self.widefield_sum is None or self._staged_widefield is None:
            raise ValueError("this accumulator keeps no widefield sum (no frame_shape)")
        staged = self._staged_widefield
        staged.copy_(self.widefield_sum)
        for frame in frames:
            staged.add_(frame)
        self._widefield_ready = True

    def commit(self) -> None:
        """Make the staged chunk part of the state (swaps buffers: nothing here can fail)."""
        if self._staged_frames is None:
            raise RuntimeError("nothing staged to commit")
        if self.widefield_sum is not None and not self._widefield_ready:
            raise RuntimeError("the chunk's widefield sum was not staged")
        self.sums, self._staged_sums = self._staged_sums, self.sums
        self.edges, self._staged_edges = self._staged_edges, self.edges
        if self._widefield_ready:
            self.widefield_sum, self._staged_widefield = self._staged_widefield, self.widefield_sum
        self.count += self._staged_frames
        self._staged_frames = None
        self._widefield_ready = False

    def add(self, maps: torch.Tensor) -> None:
        """Stage and commit a chunk of consecutive frames ``(B, H M, W M)`` (float32)."""
        self.stage(maps)
        self.commit()

    # -- results -----------------------------------------------------------------------------
    def result(self) -> torch.Tensor:
        """The statistic of the frames committed so far, float32 (zeros before any frame; VAR
        and TAC2 of a single frame are 0)."""
        total = self.plane("total")
        if self.count == 0:
            return torch.zeros_like(total, dtype=torch.float32)
        n = self.count
        mean = total / n
        if self.mode == "AVG":
            out = mean
        elif self.mode == "VAR":
            out = (self.plane("squares") / n - mean * mean).clamp_min_(0.0)
        elif n < 2:
            out = torch.zeros_like(mean)
        else:
            ends = 2 * total - self.plane("first").double() - self.plane("last").double()
            out = (self.plane("lagged") - mean * ends + (n - 1) * mean * mean) / (n - 1)
        return out.to(torch.float32)

    def widefield(self) -> torch.Tensor:
        """float32 mean of the raw frames committed so far (zeros before any)."""
        if self.widefield_sum is None:
            raise ValueError("this accumulator keeps no widefield sum (no frame_shape)")
        return (self.widefield_sum / max(1, self.count)).to(torch.float32)


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

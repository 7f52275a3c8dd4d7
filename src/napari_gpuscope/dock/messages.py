"""The plain words of every dock's messages: errors a microscopist can act on, progress and
sentences. Qt-free."""

from __future__ import annotations

from napari_gpuscope.compute.devices import NoGPUError
from napari_gpuscope.compute.jobs import Progress
from napari_gpuscope.compute.memory import DeviceMemoryError, is_out_of_memory

__all__ = ["is_expected", "plain_error_message", "progress_text", "sentence"]


def is_expected(exc: BaseException) -> bool:
    """Whether ``exc`` says what the user should change in the dock (an input the method does
    not take, a parameter out of range), not that something broke: the dock says it once, in
    its status line, and notifies nothing.

    Examples
    --------
    >>> from napari_gpuscope.compute.arrays import InvalidInputError
    >>> is_expected(InvalidInputError("layer 'a' has shape (8,)")), is_expected(RuntimeError())
    (True, False)
    """
    from napari_gpuscope.compute.arrays import InvalidInputError
    from napari_gpuscope.compute.params import ParameterError

    return isinstance(exc, InvalidInputError | ParameterError)


def plain_error_message(exc: BaseException) -> str:
    """Turn an exception from a job into a sentence a microscopist can act on."""
    text = str(exc).strip() or type(exc).__name__
    name = type(exc).__name__
    if isinstance(exc, DeviceMemoryError | NoGPUError | ValueError):
        return text  # these messages are written for users already
    if is_out_of_memory(exc):
        return (
            "The GPU ran out of memory. Close other GPU programs, pick another GPU, "
            f"or process a smaller region. (Details: {text})"
        )
    if isinstance(exc, MemoryError):
        return "The computer ran out of memory (RAM). Process a smaller region."
    return f"{text} ({name})"


def progress_text(update: Progress) -> str:
    """Progress in plain words: ``"42 % - iteration 420/1000, gap 3.1e-03"`` or
    ``"working, no estimate of the time left - estimating the noise level"``."""
    if update.fraction is None:
        head = "working, no estimate of the time left"
    else:
        head = f"{update.fraction:.0%}".replace("%", " %")
    return f"{head} - {update.message}" if update.message else head


def sentence(text: str) -> str:
    """``text`` with a capital first letter and a final full stop.

    Examples
    --------
    >>> sentence("converged in 12 iterations")
    'Converged in 12 iterations.'
    """
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."

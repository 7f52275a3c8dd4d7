"""A profile's flatfield and darkfield on the device, prepared once for many corrections.

A correction uploads the profile's fields and checks that the flatfield is finite and positive
(two full passes and two host syncs). One run over a stack does it once; a live session applies
the profile to every frame as it arrives, one run per frame, and would pay it per frame (at
2048 x 2048: two 16 MB uploads and the checks, more than the correction itself on a GPU).
:class:`ProfileFields` keeps the prepared fields for the runs made inside its
:meth:`~ProfileFields.reused` block; outside one, every run prepares its own, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import torch

from ..arrays import InvalidInputError
from ._profile import ShadingProfile

__all__ = ["ProfileFields", "prepared_fields"]

_ACTIVE: ContextVar[ProfileFields | None] = ContextVar(
    "napari_gpuscope_profile_fields", default=None
)


class _Entry:
    """One profile's fields on one device, and the arrays they were made from (held, so that
    their identity, the entry's key, cannot be taken by another array)."""

    def __init__(self, flat: np.ndarray, dark: np.ndarray, device: torch.device) -> None:
        self.arrays = (flat, dark)
        self.flat = torch.as_tensor(flat, dtype=torch.float32, device=device)
        self.dark = torch.as_tensor(dark, dtype=torch.float32, device=device)
        if self.flat.ndim == 2:
            self.flat, self.dark = self.flat[None], self.dark[None]
        self.checked = False


class ProfileFields:
    """Profiles' device fields, reused by the corrections run inside :meth:`reused`.

    The fields are the profile's arrays as they were when first used: a profile is not
    modified while a block that reuses its fields runs (a live session's profile is fixed at
    attach). :meth:`clear` frees the device memory; the fields also go with this object.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute.flatfield import ShadingProfile, correct
    >>> profile = ShadingProfile.from_arrays(np.ones((4, 4)), camera_offset=1)
    >>> fields = ProfileFields()
    >>> with fields.reused():
    ...     images = [correct(np.full((1, 4, 4), v), profile, device="cpu") for v in (3, 5)]
    >>> len(fields), [float(i.max()) for i in images]
    (1, [2.0, 4.0])
    >>> fields.clear(); len(fields)
    0
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[int, int, str], _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @contextmanager
    def reused(self) -> Iterator[ProfileFields]:
        """Corrections run in this block (in this thread or context) reuse these fields."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    def clear(self) -> None:
        """Forget every prepared field (their device memory is freed)."""
        self._entries.clear()

    def entry(self, profile: ShadingProfile, device: torch.device) -> _Entry:
        """The prepared entry of ``profile`` on ``device`` (made on first use)."""
        key = (id(profile.flatfield), id(profile.darkfield), str(device))
        found = self._entries.get(key)
        if found is None:
            found = self._entries[key] = _Entry(profile.flatfield, profile.darkfield, device)
        return found


def prepared_fields(
    profile: ShadingProfile, frame_shape: tuple[int, int], problems: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``profile``'s flatfield and darkfield on ``device``, ``(problems, Y, X)`` each, checked
    against the images' frame shape and problem count; the flatfield must be finite and
    positive (checked once per prepared entry).

    Inside a :meth:`ProfileFields.reused` block they are uploaded once and reused; otherwise
    prepared for this call only.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from napari_gpuscope.compute.flatfield import ShadingProfile
    >>> profile = ShadingProfile.from_arrays(np.ones((4, 4)))
    >>> flat, dark = prepared_fields(profile, (4, 4), 2, torch.device("cpu"))
    >>> tuple(flat.shape), float(dark.max())
    ((2, 4, 4), 0.0)
    """
    active = _ACTIVE.get()
    if active is None:
        entry = _Entry(profile.flatfield, profile.darkfield, device)
    else:
        entry = active.entry(profile, device)
    flat, dark = entry.flat, entry.dark
    if tuple(flat.shape[-2:]) != frame_shape:
        raise InvalidInputError(
            f"the profile is {tuple(flat.shape[-2:])} but the images are {frame_shape}: "
            "apply a profile fitted on images of the same size"
        )
    if flat.shape[0] not in (1, problems):
        raise InvalidInputError(
            f"the profile holds {flat.shape[0]} flatfields for {problems} problems"
        )
    if not entry.checked:
        if not bool((flat > 0).all()) or not bool(torch.isfinite(flat).all()):
            raise InvalidInputError(
                "the profile's flatfield must be finite and positive everywhere"
            )
        entry.checked = True
    return flat.expand(problems, -1, -1), dark.expand(problems, -1, -1)

"""Placeholder: fused kernels come in a later commit."""

from __future__ import annotations

import torch

__all__ = ["FusedChain", "why_twins"]


class FusedChain:
    @classmethod
    def for_device(cls, geometry, device: torch.device):
        return None


def why_twins(device: torch.device) -> str:
    return "no fused kernels yet"

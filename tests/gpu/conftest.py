"""The GPU verification suite: skipped without a usable CUDA GPU, collected everywhere.

Every module here sets ``pytestmark = pytest.mark.gpu`` (so ``-m gpu`` selects the suite).
``scripts/gpu-check.sh`` runs it on a bare CUDA machine (torch, CuPy, NumPy, SciPy,
scikit-image, tifffile, pytest; no napari) with ``PYTHONPATH=src``.
Tests add measurements to the kit's report through the ``kit_record`` fixture; they land in
``$GPUSCOPE_KIT_RECORDS`` (a JSON file) when that variable is set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

RECORDS_ENV = "GPUSCOPE_KIT_RECORDS"
_records: dict[str, object] = {}


def _gpu_reason() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch sees none)"
    try:
        torch.ones(1, device="cuda").sum().item()
    except Exception as exc:  # a broken driver: nothing here can run
        return f"the CUDA GPU is not usable: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    reason = None
    checked = False
    for item in items:
        if here not in Path(item.fspath).parents:
            continue
        if not checked:
            reason, checked = _gpu_reason(), True
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def gpu() -> torch.device:
    """The first CUDA device."""
    return torch.device("cuda", 0)


@pytest.fixture(scope="session")
def kit_record():
    """``kit_record(key, value)``: store a JSON-able measurement for the kit's report."""

    def record(key: str, value: object) -> None:
        _records[key] = value

    return record


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get(RECORDS_ENV)
    if path and _records:
        Path(path).write_text(json.dumps(_records, indent=2, default=str), encoding="utf-8")

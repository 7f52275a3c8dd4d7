"""The GPU verification suite: skipped without a usable CUDA GPU, collected everywhere.

Every module here sets ``pytestmark = pytest.mark.gpu`` (so ``-m gpu`` selects the suite).
``scripts/gpu-check.sh`` runs it on a bare CUDA machine (torch, CuPy, NumPy, SciPy,
scikit-image, tifffile, pytest; no napari) with ``PYTHONPATH=src``.
Tests add measurements to the kit's report through the ``kit_record`` fixture; they land in
``$GPUSCOPE_KIT_RECORDS`` (a JSON file) when that variable is set.

Every test here also checks that no registered fused op (every method's,
:func:`~napari_gpuscope.compute.kernels.registered_ops`) was disabled by a self-test mismatch or
found unavailable while it ran: the test during which that happened fails (once; later tests
are not blamed), and the kit's records list the ops left off at the end.
"""

from __future__ import annotations

import json
import os
import sys
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


def _kernel_states() -> dict[str, tuple[frozenset[str], tuple[tuple[str, str], ...]]]:
    from napari_gpuscope.compute.kernels import registered_ops

    return {
        op.name: (frozenset(op.disabled_devices), tuple(sorted(op.unavailable.items())))
        for op in registered_ops()
    }


@pytest.fixture(autouse=True)
def _no_kernel_disabled_or_unavailable():
    """Fail the test during which a registered op's kernel was disabled or found unavailable."""
    before = _kernel_states()
    yield
    after = _kernel_states()
    changed = {name: state for name, state in after.items() if state != before.get(name)}
    if changed:
        lines = [
            f"{name}: disabled on {sorted(disabled)}, unavailable {dict(unavailable)}"
            for name, (disabled, unavailable) in changed.items()
        ]
        pytest.fail("fused kernels switched off during this test:\n" + "\n".join(lines))


@pytest.fixture(scope="session")
def kit_record():
    """``kit_record(key, value)``: store a JSON-able measurement for the kit's report."""

    def record(key: str, value: object) -> None:
        _records[key] = value

    return record


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if "napari_gpuscope.compute.kernels" in sys.modules:
        off = {
            name: {"disabled": sorted(disabled), "unavailable": dict(unavailable)}
            for name, (disabled, unavailable) in _kernel_states().items()
            if disabled or unavailable
        }
        if off:
            _records["kernels switched off at the end"] = off
    path = os.environ.get(RECORDS_ENV)
    if path and _records:
        Path(path).write_text(json.dumps(_records, indent=2, default=str), encoding="utf-8")

"""The live tests drive pymmcore-plus cores in this process. When another test module has
started a Qt application (the widget tests), pymmcore-plus would deliver a core's events through
Qt signals, queued to the Qt event loop that a blocking ``session.wait`` never runs; its
psygnal backend delivers them from the acquisition thread, as a script without Qt sees them."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _psygnal_core_events(monkeypatch):
    monkeypatch.setenv("PYMM_SIGNALS_BACKEND", "psygnal")

"""The docstring Examples of napari_gpuscope.live stay true (the package is not among
pyproject's doctest testpaths yet)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ("_buffer", "_sources", "_session", "_methods")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"napari_gpuscope.live.{name}")
    failed, _attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failed == 0

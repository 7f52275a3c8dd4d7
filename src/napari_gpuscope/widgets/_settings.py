"""Dock settings that persist between napari sessions: one small JSON file per dock.

The file holds the method's parameters as its params model writes them
(:meth:`~napari_gpuscope.compute.params.Params.to_dict`, minus the fields that belong to a layer,
such as the spacing) and a few dock options. It lives in the user's configuration directory
(``~/.config/napari-gpuscope/docks/<method>.json`` on Linux), or under
``$NAPARI_GPUSCOPE_CONFIG_DIR`` when that is set (tests point it at a temporary folder).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_DIR_ENV", "DockSettings"]

CONFIG_DIR_ENV = "NAPARI_GPUSCOPE_CONFIG_DIR"
_VERSION = 1


def _config_dir() -> Path:
    override = os.environ.get(CONFIG_DIR_ENV, "").strip()
    if override:
        return Path(override)
    from platformdirs import user_config_dir

    return Path(user_config_dir("napari-gpuscope", appauthor=False))


class DockSettings:
    """The saved settings of one dock.

    Parameters
    ----------
    method_id : str
        The dock's method (file name).

    Examples
    --------
    >>> import os, tempfile
    >>> os.environ[CONFIG_DIR_ENV] = tempfile.mkdtemp()
    >>> settings = DockSettings("tv")
    >>> settings.save({"strength": 2.0}, {"replace_last": False})
    >>> settings.load()
    ({'strength': 2.0}, {'replace_last': False})
    """

    def __init__(self, method_id: str) -> None:
        self.method_id = method_id

    @property
    def path(self) -> Path:
        """The JSON file."""
        return _config_dir() / "docks" / f"{self.method_id}.json"

    def load(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(params, options)`` as saved; empty dicts when nothing (readable) was saved."""
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}, {}
        if not isinstance(record, dict) or record.get("version") != _VERSION:
            return {}, {}
        params, options = record.get("params"), record.get("options")
        return (
            params if isinstance(params, dict) else {},
            options if isinstance(options, dict) else {},
        )

    def save(self, params: dict[str, Any], options: dict[str, Any]) -> None:
        """Write the settings (a failure to write is not an error worth interrupting work)."""
        record = {"version": _VERSION, "method": self.method_id, "params": params}
        record["options"] = options
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(record, indent=2), encoding="utf-8")
            tmp.replace(self.path)
        except OSError:
            pass

    def clear(self) -> None:
        """Forget the saved settings."""
        with contextlib.suppress(OSError):
            self.path.unlink()

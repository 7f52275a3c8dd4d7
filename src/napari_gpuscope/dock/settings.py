"""Dock settings that persist between napari sessions: one small JSON file per dock.

The file holds the method's parameters exactly as its params model writes them
(:meth:`~napari_gpuscope.compute.params.Params.to_dict`, so ``TVParams.from_dict`` reads them
back, e.g. as a recipe for a script) and, separately, a few dock options. It is written whenever
a setting changes. It lives in the user's configuration directory
(``~/.config/napari-gpuscope/docks/<method>.json`` on Linux), or under
``$NAPARI_GPUSCOPE_CONFIG_DIR`` when that is set (tests point it at a temporary folder).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from napari_gpuscope.compute.params import Params

__all__ = ["CONFIG_DIR_ENV", "DockSettings", "SettingValue"]

CONFIG_DIR_ENV = "NAPARI_GPUSCOPE_CONFIG_DIR"
SettingValue = bool | int | float | str | None
"""A dock option as the JSON file holds it (a check box's state, a section left open)."""
_VERSION = 2
"""Version 1 kept only the fields a dock showed; such files are ignored (defaults)."""


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
    >>> from napari_gpuscope.compute.tv import TVParams
    >>> os.environ[CONFIG_DIR_ENV] = tempfile.mkdtemp()
    >>> settings = DockSettings("tv")
    >>> settings.save(TVParams(strength=2.0), {"replace_last": False})
    >>> params, options = settings.load(TVParams)
    >>> params.strength, options
    (2.0, {'replace_last': False})
    """

    def __init__(self, method_id: str) -> None:
        self.method_id = method_id
        self._written: str | None = None

    @property
    def path(self) -> Path:
        """The JSON file."""
        return _config_dir() / "docks" / f"{self.method_id}.json"

    def load(self, params_class: type[Params]) -> tuple[Params | None, dict[str, SettingValue]]:
        """``(params, options)`` as saved.

        ``params`` is None when nothing readable was saved or the saved values are not valid
        parameters (written by another version): the dock then starts from the defaults.
        ``options`` is an empty dict when none were saved.
        """
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, {}
        if not isinstance(record, dict) or record.get("version") != _VERSION:
            return None, {}
        options = record.get("options")
        options = options if isinstance(options, dict) else {}
        try:
            params = params_class.from_dict(record.get("params"))
        except (ValueError, TypeError):  # ParameterError is a ValueError
            params = None
        return params, options

    def save(self, params: Params, options: dict[str, SettingValue]) -> None:
        """Write the settings (a failure to write is not an error worth interrupting work)."""
        text = json.dumps(
            {"version": _VERSION, "params": params.to_dict(), "options": options}, indent=2
        )
        if text == self._written and self.path.exists():
            return  # nothing changed (e.g. the spacing refilled from the same layer)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(self.path)
        except OSError:
            return
        self._written = text

    def clear(self) -> None:
        """Forget the saved settings."""
        self._written = None
        with contextlib.suppress(OSError):
            self.path.unlink()

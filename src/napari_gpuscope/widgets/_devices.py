"""The device row shared by every dock: a combo of usable CUDA GPUs and a refresh button.

The plugin is a GPU tool, so the combo lists CUDA GPUs only -- there is no CPU entry and no CPU
toggle. Without a GPU the row shows :func:`~napari_gpuscope.compute.devices.no_gpu_message` and
reports that nothing can run, so the dock disables Run and live preview.

Tests need a device on machines without a GPU. For them, :data:`_TEST_ONLY_DEVICES` holds extra
``(label, device)`` entries that only the ``cpu_device`` pytest fixture (``tests/conftest.py``)
appends to; nothing in the UI can add one.
"""

from __future__ import annotations

import html
import re

from qtpy.QtCore import Qt, Signal
from qtpy.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from napari_gpuscope.compute import devices as _compute_devices

__all__ = ["DeviceRow", "available_devices"]

_TEST_ONLY_DEVICES: list[tuple[str, str]] = []
"""Extra ``(label, device)`` entries. Appended to ONLY by the ``cpu_device`` test fixture."""


def available_devices() -> list[tuple[str, str]]:
    """List the devices a dock may offer, as ``(label, device)`` pairs.

    Returns
    -------
    list of tuple of str
        One entry per CUDA GPU that passed a probe allocation, e.g.
        ``("cuda:0 - NVIDIA RTX 4090 - 21.3 / 24.0 GB free", "cuda:0")``, followed by any
        test-only entries. Empty on a machine without a usable GPU.
    """
    gpus = [(gpu.label, gpu.device) for gpu in _compute_devices.list_gpus()]
    return gpus + list(_TEST_ONLY_DEVICES)


def _message_html(message: str) -> str:
    """The no-GPU message as rich text: a bold red headline, then the details in plain text.

    A whole paragraph of bold red text is hard to read; only the headline (the text before the
    first colon or full stop, kept) needs to alarm; the instructions need to be readable and
    copyable (the label is selectable; links are not made clickable because the theme's link
    colour is unreadable on napari's dark background).
    """
    split = re.search(r"[:.]\s", message)
    if split is None:
        head, rest = message, ""
    else:
        head, rest = message[: split.start() + 1], message[split.end() :]
    rest = html.escape(rest)
    return f'<b style="color:#e04040">{html.escape(head)}</b><br>{rest}'


class DeviceRow(QWidget):
    """Device combo, refresh button and (when no GPU is usable) a prominent explanation.

    Signals
    -------
    availability_changed(bool)
        Emitted after every refresh with whether at least one device is available.
    device_changed(object)
        The selected device string (or None) changed, by the user or by a refresh.
    """

    availability_changed = Signal(bool)
    device_changed = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = QComboBox()
        self.combo.setToolTip("CUDA GPU the computation runs on (free / total memory)")
        self.combo.setPlaceholderText("no usable GPU")
        self.combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.combo.setMinimumContentsLength(12)
        self._selected: str | None = None
        self.combo.currentIndexChanged.connect(self._on_selection)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Probe the GPUs again (e.g. after freeing memory)")
        self.refresh_button.clicked.connect(self.reprobe)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setObjectName("gpuscope_no_gpu_message")
        self.message.setTextFormat(Qt.TextFormat.RichText)
        # Selectable: the fix is a pip command the user will want to copy.
        self.message.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        # A long word-wrapped text must wrap to the dock, not widen it.
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Device:"))
        row.addWidget(self.combo, stretch=1)
        row.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.message)
        self.refresh()

    def refresh(self) -> None:
        """Re-probe the devices, keeping the current selection when it is still available."""
        previous = self.device
        entries = available_devices()
        self.combo.blockSignals(True)
        self.combo.clear()
        for label, device in entries:
            self.combo.addItem(label, device)
        if previous is not None:
            index = self.combo.findData(previous)
            if index >= 0:
                self.combo.setCurrentIndex(index)
        if self.combo.currentIndex() < 0 and entries:  # with a placeholder Qt selects nothing
            self.combo.setCurrentIndex(0)
        self.combo.blockSignals(False)
        available = bool(entries)
        self.combo.setEnabled(available)
        self.message.setText("" if available else _message_html(_compute_devices.no_gpu_message()))
        self.message.setVisible(not available)
        self.availability_changed.emit(available)
        self._on_selection()

    def _on_selection(self, *_: object) -> None:
        device = self.device
        if device != self._selected:
            self._selected = device
            self.device_changed.emit(device)

    def reprobe(self) -> None:
        """Forget the cached GPU probes (they are made once per process), then refresh."""
        _compute_devices.forget_gpus()
        self.refresh()

    @property
    def available(self) -> bool:
        """Whether at least one device can run work."""
        return self.combo.count() > 0

    @property
    def device(self) -> str | None:
        """The selected device string (``"cuda:0"``), or None when there is none."""
        data = self.combo.currentData()
        return None if data is None else str(data)

    def offered_devices(self) -> list[str]:
        """Device strings currently in the combo (for tests and scripting)."""
        return [str(self.combo.itemData(i)) for i in range(self.combo.count())]

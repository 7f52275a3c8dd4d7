"""Camera rows of a form: gain ("auto" = estimate), offset and read noise, and the estimate."""

from __future__ import annotations

from qtpy.QtCore import QObject, Qt
from qtpy.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QWidget

from napari_gpuscope.compute.camera import CameraModel
from napari_gpuscope.widgets._controls._form import ParamForm

__all__ = ["CameraRows", "describe_camera"]

_FIELDS = ("gain", "offset", "read_noise")


def describe_camera(camera: CameraModel, *, estimated: bool) -> str:
    """The camera model in a few words, e.g. for the dock after a run estimated it."""
    text = f"gain {camera.gain:.3g} ADU/photon, offset {camera.offset:.4g} ADU"
    if camera.read_noise or not estimated:
        text += f", read noise {camera.read_noise:.3g} ADU"
    return f"Estimated: {text}." if estimated else f"Camera: {text}."


_ESTIMATE_TOOLTIP = (
    "Camera model the last run estimated from the image (Poisson noise, gain 'auto'). One "
    "image cannot tell the offset and the read noise apart: the offset absorbs both, which "
    "transforms the data identically, so the read noise shows as 0."
)


class CameraRows(QObject):
    """Ties a form's ``gain``, ``offset`` and ``read_noise`` fields into one camera model.

    A gain of "auto" (the control's minimum) means "estimate the whole model from the image":
    offset and read noise are then disabled and mean "auto" (None) too, through the same
    :class:`~napari_gpuscope.widgets._controls.FieldStyle` mechanism. After a run that estimated
    the model, :meth:`show_estimate` shows the values, and "Use these" copies them into the
    fields (then the same camera is used for every later run, e.g. on a whole experiment).

    Parameters
    ----------
    form : ParamForm
        A form generated with the three fields (gain styled with ``auto_text``).
    """

    def __init__(self, form: ParamForm) -> None:
        super().__init__(form)
        self.form = form
        self.estimate = QLabel()
        self.estimate.setWordWrap(True)
        self.estimate.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.estimate.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.estimate.setToolTip(_ESTIMATE_TOOLTIP)
        self.use_button = QPushButton("Use these")
        self.use_button.setToolTip(
            "Copy the estimated gain, offset and read noise into the fields, so later runs "
            "use this camera model instead of estimating it again"
        )
        self.use_button.clicked.connect(self._use_estimate)
        self.row = QWidget()
        row = QHBoxLayout(self.row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.estimate, stretch=1)
        row.addWidget(self.use_button, alignment=Qt.AlignmentFlag.AlignTop)
        form.add_row("", self.row, after="read_noise")
        self._camera: CameraModel | None = None
        self._visible = True
        form.widgets["gain"].changed.connect(self._sync)
        self._sync()
        self.show_estimate(None)

    @property
    def known_gain(self) -> bool:
        """Whether the user entered a gain (else the model is estimated)."""
        return self.form.value("gain") is not None

    def set_visible(self, visible: bool) -> None:
        """Show or hide the camera rows (e.g. only for a Poisson noise model)."""
        self._visible = visible
        for name in _FIELDS:
            self.form.set_row_visible(name, visible)
        self._show_row()

    def show_estimate(self, camera: CameraModel | None) -> None:
        """Show the camera model a run estimated (None: clear)."""
        self._camera = camera
        self.estimate.setText("" if camera is None else describe_camera(camera, estimated=True))
        self._show_row()

    def _show_row(self) -> None:
        self.row.setVisible(self._visible and self._camera is not None)

    def _sync(self, *_: object) -> None:
        known = self.known_gain
        auto_text = self.form.styles["gain"].auto_text
        for name in ("offset", "read_noise"):
            widget = self.form.widgets[name]
            widget.enabled = known
            self.form.set_auto_text(name, None if known else auto_text)
            if not known:
                self.form.set_values({name: None})
            elif widget.value <= widget.min:
                widget.value = max(0.0, widget.min)

    def _use_estimate(self) -> None:
        camera = self._camera
        if camera is None:
            return
        self.form.set_values(
            {"gain": camera.gain, "offset": camera.offset, "read_noise": camera.read_noise}
        )
        self.show_estimate(None)

"""A dock's parameter form bound to its model: values set and checked as the API checks them,
fields changed from the defaults marked and named, and the settings restored and saved."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from qtpy.QtCore import QObject

from napari_gpuscope.compute.params import ParameterError, Params
from napari_gpuscope.widgets._controls._changes import mark_labels

if TYPE_CHECKING:
    from napari_gpuscope.dock.model import DockModel
    from napari_gpuscope.widgets._controls import ParamForm
    from napari_gpuscope.widgets._controls._changes import ChangesRow
    from napari_gpuscope.widgets._dock_parts import DockPanel

__all__ = ["FormBinding", "checked_value"]


class FormBinding(QObject):
    """The parameter form of a dock, bound to its model.

    A part of the dock's view, owned by its form (it goes when the form does).

    Parameters
    ----------
    form : ParamForm
        The generated (and custom) parameter controls (the owner).
    model : DockModel
        The dock's model (parameters model, defaults, settings).
    changes : ChangesRow
        Where the fields changed from the defaults are named.
    layer_fields : tuple of str
        Fields filled in from the input layer: never "changed from the defaults".
    """

    def __init__(
        self,
        form: ParamForm,
        model: DockModel,
        changes: ChangesRow,
        *,
        layer_fields: tuple[str, ...] = (),
    ) -> None:
        super().__init__(form)
        self.form, self.model, self.changes = form, model, changes
        self.layer_fields = layer_fields

    def set_param(self, name: str, value: object) -> None:
        """Show ``value`` in the control of parameter ``name``, validated as the API and recipes
        validate it (see :meth:`~napari_gpuscope.widgets.MethodDock.set_param`)."""
        form, title = self.form, self.model.title
        control = form.custom.get(name)
        if control is None and name not in form.widgets:
            raise KeyError(f"{title} has no control for the parameter {name!r}")
        value = checked_value(self.model.params_class, name, value)
        if control is not None:
            set_value = getattr(control, "set_value", None)
            if set_value is None:
                raise KeyError(f"{name!r} is taken from the input layer; it cannot be set")
            set_value(value)
            return
        widget = form.widgets[name]
        low, high = getattr(widget, "min", None), getattr(widget, "max", None)
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if is_number and low is not None and high is not None and not low <= value <= high:
            raise ParameterError(
                f"{title}: {name} = {value!r} is outside what its control offers, "
                f"[{low:g}, {high:g}]"
            )
        form.set_values({name: value})

    def set_params(self, params: Params) -> None:
        """Show ``params`` in every control that can show them (the others, e.g. a spacing
        taken from the layer, keep theirs)."""
        self.form.set_values({name: getattr(params, name) for name in self.form.widgets})
        for name, control in self.form.custom.items():
            set_value = getattr(control, "set_value", None)
            if set_value is not None:
                set_value(getattr(params, name))

    def show_changes(self) -> list[str]:
        """Mark the fields whose value differs from the default (restored settings included)
        and say which in the changes row; returns their names."""
        infos = {info.name: info for info in self.model.params_class.param_info()}
        names = [name for name in self.form.widgets if name not in self.layer_fields]
        defaults = self.model.defaults()
        changed = self.changes.show_changes(
            {name: infos[name].label for name in names},
            {name: self.form.value(name) for name in names},
            {name: defaults[name] for name in names},
            {
                name: style.auto_text
                for name, style in self.form.styles.items()
                if style.auto_text and name in names
            },
        )
        for name in names:
            mark_labels([self.form.label_of(name)], name in changed)
        return changed

    def load_settings(self, panel: DockPanel) -> None:
        """Show the saved parameters (the fields the form has; the others come from the layer
        or keep their defaults) and options; then save every later change."""
        saved, options = self.model.load_settings()
        if saved is not None:
            self.form.set_values({name: getattr(saved, name) for name in self.form.widgets})
        panel.apply_options(options)
        if options.get("advanced_open") is True:
            self.form.advanced.expand(animate=False)
        self.model.saving = True
        self.show_changes()

    def save_settings(self, panel: DockPanel, params: Callable[[], Params]) -> None:
        """Write the parameters the controls describe (``params()``; while they are invalid the
        last valid settings stay) and the panel's options."""
        options = {**panel.options(), "advanced_open": self.form.advanced.isExpanded()}
        self.model.save_settings(params, options)


def checked_value(params_class: type[Params], name: str, value: object) -> object:
    """``value`` as the model ``params_class`` validates the field ``name`` (its type and
    range, with the other fields at their defaults), so a dock takes exactly what the API and
    recipes take.

    Raises
    ------
    ParameterError
        Naming the field, the value and what is valid (the model's own message).

    Examples
    --------
    >>> from napari_gpuscope.compute.tv import TVParams
    >>> checked_value(TVParams, "max_iterations", 200)
    200
    >>> try:
    ...     checked_value(TVParams, "max_iterations", 2.5)
    ... except ValueError as error:
    ...     print(error)
    TVParams.max_iterations must be an integer in [1, 1e+06], got 2.5
    """
    if name not in params_class.model_fields:
        return value
    return getattr(params_class().replace(**{name: value}), name)

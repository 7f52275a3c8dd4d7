"""The ``napari-gpuscope`` console command.

``napari-gpuscope demo`` opens napari with the plugin's docks and sample data.
``napari-gpuscope demo --headless --out DIR [--device cuda:0|cpu]`` runs every available method
on its sample data and writes, per run, the result as an ImageJ TIFF and a screenshot with
provenance (PNG + JSON sidecar). Screenshots need an X display; on a machine without one run it
under ``xvfb-run -a``.

``napari-gpuscope recipe | run | validate | status`` are the batch commands
(:mod:`napari_gpuscope.batch.cli`, ``docs/batch.md``).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import napari

    from .compute._types import ArrayLike
    from .compute.results import LayerDataTuple
    from .demos import DemoRun
    from .methods import MethodSpec

import numpy as np

__all__ = ["main"]


DESCRIPTION = (
    "GPU flat-field (BaSiC), eSRRF, phase and TV denoising for microscopy: the demo, and the "
    "batch commands that apply a recipe saved from a dock to many positions."
)
"""The command's help text (plain text: argparse prints it as it is)."""

EPILOG = """examples:
  napari-gpuscope demo
  napari-gpuscope recipe tv -o tv.yaml
  napari-gpuscope run tv.yaml data/*.tif --out results.zarr --device cuda
  napari-gpuscope status results.zarr

'napari-gpuscope COMMAND --help' describes each command; docs/batch.md the batch runs."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="napari-gpuscope",
        description=textwrap.fill(DESCRIPTION, 79),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo_help = "open napari with the docks and sample data, or run headless"
    demo = sub.add_parser(
        "demo",
        help=demo_help,
        description=f"{demo_help[0].upper()}{demo_help[1:]}: --headless runs every method on "
        "its sample data and writes each result as a TIFF and a screenshot (needs an X "
        "display: run it under xvfb-run -a).",
    )
    demo.add_argument(
        "--headless", action="store_true", help="run without a window and write files"
    )
    demo.add_argument("--out", type=Path, default=Path("demo-output"), help="output folder")
    demo.add_argument(
        "--device",
        default=None,
        help="cuda:N (default: the first GPU) or cpu for a reference run on the CPU",
    )
    demo.add_argument("--methods", nargs="*", default=None, help="method ids to run (default: all)")
    from .batch.cli import add_parsers

    add_parsers(sub)  # recipe, run, validate, status
    return parser


def _has_display() -> bool:
    return sys.platform != "linux" or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )


def _show_middle_plane(viewer: napari.Viewer) -> None:
    """Put every slider (the axes not displayed) on its middle plane, not on plane 0."""
    displayed = set(viewer.dims.displayed)
    viewer.dims.current_step = tuple(
        steps // 2 if axis not in displayed else current
        for axis, (steps, current) in enumerate(
            zip(viewer.dims.nsteps, viewer.dims.current_step, strict=True)
        )
    )


def _demo_sample_layers(spec: MethodSpec) -> list[LayerDataTuple]:
    """The layer-data tuples the interactive demo opens: the method's first volume (or
    stack), so the dock shows how it handles more than one plane; else its first sample."""
    for sample in reversed(spec.samples):
        layers = sample.load()
        if any(np.ndim(data) >= 3 for data, *_ in layers):
            return layers
    return spec.samples[0].load()


def _populate_demo(viewer: napari.Viewer) -> None:
    """Open one sample at its middle plane, selected, and every method's dock."""
    from napari.layers import Layer

    from .methods import METHODS, PLUGIN

    # One sample only: two samples of different dimensionality would be drawn over each other
    # (the 2D image on plane 0 of the volume).
    first = next((spec for spec in METHODS.values() if spec.samples), None)
    if first is not None:
        layers = [viewer.add_layer(Layer.create(*data)) for data in _demo_sample_layers(first)]
        _show_middle_plane(viewer)
        viewer.layers.selection.active = layers[0]
    for spec in METHODS.values():
        viewer.window.add_plugin_dock_widget(PLUGIN, spec.title)
    viewer.reset_view()  # the docks took canvas width: show the whole plane


def _interactive_demo() -> int:
    import napari
    from qtpy.QtCore import QTimer

    viewer = napari.Viewer(title="napari-gpuscope demo")
    _populate_demo(viewer)
    # The window gets its final size once shown: fit the plane again then.
    QTimer.singleShot(0, viewer.reset_view)
    napari.run()
    return 0


#: The headless demo zooms small samples so each panel is at least this wide (whole zooms).
DEMO_PANEL_PIXELS = 400


def demo_zoom(plane: Sequence[int]) -> int:
    """The whole zoom that makes a plane at least :data:`DEMO_PANEL_PIXELS` wide, capped at the
    figure export's largest zoom (a tiny plane is then drawn smaller, not refused)."""
    from .export.figure import MAX_ZOOM

    return min(MAX_ZOOM, max(1, -(-DEMO_PANEL_PIXELS // max(plane))))


def demo_grid_shape(viewboxes: int) -> tuple[int, int]:
    """Rows and columns of the demo figure's grid: one row up to three panels, else two rows
    (napari's square default left an empty cell for three)."""
    if viewboxes <= 3:
        return (1, max(1, viewboxes))
    return (2, -(-viewboxes // 2))


def _robust_limits(data: ArrayLike) -> tuple[float, float]:
    """0.1 and 99.9 percentiles of (a sample of) the values: a few bright spots must not make
    the rest of the input dark."""
    import numpy as np

    values = np.asarray(data).ravel()
    values = values[:: max(1, values.size // 2_000_000)].astype(np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return (0.0, 1.0)
    low, high = (float(v) for v in np.percentile(values, (0.1, 99.9)))
    return (low, high) if high > low else (low - 0.5, high + 0.5)


def _demo_viewer(run: DemoRun) -> napari.Viewer:
    """A shown viewer with the sample and its results side by side in one row (two rows from
    four panels): results in the input's unit on the input's display range, others on their own
    range and labelled with what they show."""
    import napari
    from napari.layers import Image, Layer
    from qtpy.QtWidgets import QApplication

    from .demos import DEMO_QUANTITY_KEY
    from .export.units import QUANTITY_KEY

    viewer = napari.Viewer(show=True, title=f"napari-gpuscope demo: {run.slug}")
    viewer.window.resize(1200, 720)
    # One field of view, without a result's border of zeros (eSRRF's, a black frame).
    (data, kwargs, layer_type), *results = run.figure_layers()
    kwargs = dict(kwargs)
    if layer_type == "image" and not kwargs.get("rgb"):
        kwargs.setdefault("contrast_limits", _robust_limits(data))
    source = viewer.add_layer(Layer.create(data, kwargs, layer_type))
    input_unit = run.input_layer[1].get("metadata", {}).get("intensity_unit")
    input_planes = int(np.prod(np.shape(data)[:-2]))
    for data, kwargs, layer_type in results:
        kwargs = dict(kwargs)
        metadata = dict(kwargs.get("metadata", {}))
        what = metadata.pop(DEMO_QUANTITY_KEY, None)
        unit = metadata.get("intensity_unit")
        # Another quantity (a flatfield ratio, radians, a super-resolved a.u.), a field with its
        # own colormap (a darkfield of a few ADU next to thousands), or a reduction of the
        # input (a mean over time: a single frame's range would flatten it): its own range.
        own_display = (
            "colormap" in kwargs
            or (unit is not None and unit != input_unit)
            or int(np.prod(np.shape(data)[:-2])) < input_planes
        )
        if layer_type == "image" and isinstance(source, Image) and not source.rgb:
            if own_display:
                kwargs.setdefault("contrast_limits", _value_limits(data))
                if what:
                    metadata.setdefault(QUANTITY_KEY, what)
            else:
                # Results in the input's unit share its display range on purpose: the same
                # grey level is the same intensity in both panels.
                kwargs.setdefault("colormap", source.colormap)
                kwargs.setdefault("contrast_limits", tuple(source.contrast_limits))
                kwargs.setdefault("gamma", source.gamma)
        kwargs["metadata"] = metadata
        viewer.add_layer(Layer.create(data, kwargs, layer_type))
    _show_middle_plane(viewer)
    viewer.canvas.grid.shape = demo_grid_shape(sum(layer.visible for layer in viewer.layers))
    viewer.canvas.grid.enabled = True  # input and results side by side
    QApplication.processEvents()
    return viewer


def _value_limits(data: ArrayLike) -> tuple[float, float]:
    """The finite value range of a result (a constant one widened, as napari needs)."""
    import numpy as np

    values = np.asarray(data, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return (0.0, 1.0)
    low, high = float(values.min()), float(values.max())
    return (low, high) if high > low else (low - 0.5, high + 0.5)


def _screenshot(run: DemoRun, path: Path) -> None:
    from .export import export_screenshot
    from .export._panels import figure_panels, world_region

    viewer = _demo_viewer(run)
    try:
        # The zoom of the finest layer shown (eSRRF's result has 4 x the input's pixels).
        visible = [layer for panel in figure_panels(viewer) for layer in panel.layers]
        zoom = demo_zoom(world_region(viewer, visible).shape)
        export_screenshot(viewer, path, zoom=zoom, colorbar=True, titles=True)
    finally:
        viewer.close()


def _headless_demo(out: Path, device: str | None, methods: Sequence[str] | None) -> int:
    from .compute.devices import NoGPUError, resolve_device
    from .demos import available_demos, run_demo
    from .export.tiff import save_layer_data_tiff

    try:
        resolved = str(resolve_device(device))
    except NoGPUError as exc:
        print(f"napari-gpuscope: {exc}", file=sys.stderr)
        print("For a CPU reference run, pass --device cpu explicitly.", file=sys.stderr)
        return 2
    if not _has_display():
        print(
            "napari-gpuscope: the headless demo draws screenshots and needs an X display; "
            "run it under Xvfb: xvfb-run -a napari-gpuscope demo --headless ...",
            file=sys.stderr,
        )
        return 2
    demos = available_demos()
    unknown = sorted(set(methods or ()) - set(demos))
    if unknown:
        print(
            f"napari-gpuscope: unknown method(s) {unknown}; known: {sorted(demos)}", file=sys.stderr
        )
        return 2
    out.mkdir(parents=True, exist_ok=True)
    print(f"napari-gpuscope demo on {resolved} -> {out.resolve()}")
    for method in methods or demos:
        for run in run_demo(demos[method], resolved):
            result, kwargs, _ = run.result_layer
            tiff = save_layer_data_tiff(out / f"{run.slug}.tif", result, kwargs)
            png = out / f"{run.slug}.png"
            _screenshot(run, png)
            print(f"  {run.summary}")
            if run.explanation:
                print(textwrap.indent(textwrap.fill(run.explanation, 92), "    "))
            print(f"    wrote {tiff.name}, {png.name} (+ {png.stem}.json)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``napari-gpuscope`` command."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        if args.headless:
            return _headless_demo(args.out, args.device, args.methods)
        return _interactive_demo()
    from .batch.cli import COMMANDS, dispatch

    if args.command in COMMANDS:
        code = dispatch(args)
        if args.command == "run" and not args.dry_run:
            _open_with_this_plugin(args.out)
        return code
    raise AssertionError(args.command)


def _open_with_this_plugin(out: Path) -> None:
    """After a run, make ``napari OUT.zarr`` (and each position) open with this plugin unasked.

    napari's builtins reader claims every folder too and a plugin cannot declare a priority,
    so without a saved preference the very first open asks which reader to use (and a script's
    ``viewer.open`` reads the store at scale 1). Saved here, on the machine that ran the
    command, for this store only; lives outside :mod:`napari_gpuscope.batch`, whose workers
    import no napari.
    """
    from .batch.reader_layout import store_root

    if store_root(Path(out)) is None:  # refused, interrupted before a position, or not written
        return
    from .napari_reader import prefer_store

    if prefer_store(out):
        print(f"napari {out} opens it with napari-gpuscope (saved in napari's reader preferences)")


if __name__ == "__main__":
    raise SystemExit(main())

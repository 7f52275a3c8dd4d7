"""The ``napari-gpuscope`` console command.

``napari-gpuscope demo`` opens napari with the plugin's docks and sample data.
``napari-gpuscope demo --headless --out DIR [--device cuda:0|cpu]`` runs every available method
on its sample data and writes, per run, the result as an ImageJ TIFF and a screenshot with
provenance (PNG + JSON sidecar). Screenshots need an X display; on a machine without one run it
under ``xvfb-run -a``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="napari-gpuscope", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="open napari with the docks and sample data, or run headless"
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
    return parser


def _has_display() -> bool:
    return sys.platform != "linux" or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )


def _interactive_demo() -> int:
    import napari

    from .methods import METHODS, PLUGIN

    viewer = napari.Viewer(title="napari-gpuscope demo")
    for spec in METHODS.values():
        for sample in spec.samples:
            viewer.open_sample(PLUGIN, sample.key)
        viewer.window.add_plugin_dock_widget(PLUGIN, spec.title)
    napari.run()
    return 0


def _screenshot(run, path: Path) -> None:
    import napari
    from qtpy.QtWidgets import QApplication

    from .export import export_screenshot

    viewer = napari.Viewer(show=True, title=f"napari-gpuscope demo: {run.slug}")
    try:
        viewer.window.resize(1200, 720)
        from napari.layers import Layer

        for layer_data in (run.input_layer, *run.result_layers):
            layer = viewer.add_layer(Layer.create(*layer_data))
            if hasattr(layer, "name_overlay"):  # label each grid panel with its layer name
                layer.name_overlay.visible = True
        viewer.canvas.grid.enabled = True  # input and result side by side
        # The canvas gets its final size only once Qt has processed the resize.
        QApplication.processEvents()
        viewer.reset_view()
        QApplication.processEvents()
        export_screenshot(viewer, path, scale=1.0)
    finally:
        viewer.close()


def _headless_demo(out: Path, device: str | None, methods: Sequence[str] | None) -> int:
    from .compute.devices import NoGPUError, resolve_device
    from .demos import available_demos, run_demo
    from .export import save_tiff
    from .export.tiff import axes_from_labels

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
            tiff = save_tiff(
                out / f"{run.slug}.tif",
                result,
                scale=kwargs.get("scale"),
                units=kwargs.get("units"),
                axes=axes_from_labels(kwargs.get("axis_labels") or (), result.ndim),
                provenance=run.provenance,
            )
            png = out / f"{run.slug}.png"
            _screenshot(run, png)
            print(f"  {run.summary}\n    wrote {tiff.name}, {png.name} (+ {png.stem}.json)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``napari-gpuscope`` command."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        if args.headless:
            return _headless_demo(args.out, args.device, args.methods)
        return _interactive_demo()
    raise AssertionError(args.command)


if __name__ == "__main__":
    raise SystemExit(main())

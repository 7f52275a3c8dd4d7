"""The registry entry of the tests' method package: the one edit a method makes to the house.

``tests/conftest.py`` passes :data:`SPEC` to :func:`napari_gpuscope.methods.register` before
collection when ``NAPARI_GPUSCOPE_TEST_METHOD_PACKAGE=1``.
"""

from __future__ import annotations

from napari_gpuscope.methods import JobSpec, MethodSpec, SampleSpec

SPEC = MethodSpec(
    id="clip",
    title="Clip (test package)",
    jobs=(
        JobSpec(
            "clip",
            "Clip",
            "fake_method_pkg.compute:ClipParams",
            "fake_method_pkg.compute:iter_clip",
            description="Clip an image to a range.",
            output_kinds=("clipped",),
        ),
    ),
    dock="fake_method_pkg.dock:ClipDock",
    samples=(SampleSpec("clip-gradient", "Gradient (clip)", "fake_method_pkg.samples:gradient"),),
    demo_params="fake_method_pkg.samples:demo_params",
    supports_stop=True,
    description="Clips an image to a range: the method package the tests add.",
    guide_title="Clipping (tests)",
)

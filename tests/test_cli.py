"""The napari-gpuscope console command and its headless demo."""

import json

import numpy as np
import pytest
import tifffile
import torch

from napari_gpuscope import cli, sample_data


def test_headless_demo_without_gpu_stops_with_the_no_gpu_message(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["demo", "--headless", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs an NVIDIA GPU with CUDA" in err and "--device cpu" in err
    assert not any(tmp_path.iterdir())


def test_headless_demo_without_display_says_to_use_xvfb(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(cli.sys, "platform", "linux")
    assert cli.main(["demo", "--headless", "--out", str(tmp_path), "--device", "cpu"]) == 2
    assert "xvfb-run" in capsys.readouterr().err


@pytest.fixture
def small_samples(monkeypatch):
    """Shrink the samples so the CPU reference run stays quick."""
    camera, light = sample_data.DEFAULT_CAMERA, sample_data.Illumination()
    samples = sample_data.tv

    def small_2d():
        data = sample_data.simulate_camera(sample_data.fluorescence_phantom_2d((96, 128)), camera)
        return [samples._layer(data, "noisy cells 2D", (0.1, 0.1), camera, light)]

    def small_3d():
        phantom = sample_data.fluorescence_phantom_3d((8, 48, 64))
        data = sample_data.simulate_camera(phantom, camera)
        return [samples._layer(data, "noisy cells 3D", (0.4, 0.1, 0.1), camera, light)]

    # The registry names the functions of the TV sample module: patch them there.
    monkeypatch.setattr(samples, "noisy_cells_2d", small_2d)
    monkeypatch.setattr(samples, "noisy_cells_3d", small_3d)


def test_headless_demo_writes_results_and_screenshots(small_samples, tmp_path, capsys):
    assert cli.main(["demo", "--headless", "--out", str(tmp_path), "--device", "cpu"]) == 0
    for slug, shape in (("tv-2d", (96, 128)), ("tv-3d", (8, 48, 64))):
        with tifffile.TiffFile(tmp_path / f"{slug}.tif") as tif:
            assert tif.is_imagej
            result = tif.asarray()
        assert result.shape == shape and result.dtype == np.float32 and np.isfinite(result).all()
        sidecar = json.loads((tmp_path / f"{slug}.json").read_text())
        assert "tv" in json.dumps(sidecar)
        png = (tmp_path / f"{slug}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and b"napari_gpuscope" in png
    assert "relative gap" in capsys.readouterr().out

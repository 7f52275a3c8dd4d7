"""The manifest and kernel sources ship in the wheel and napari finds the plugin both from the
editable install and from a wheel installed in a fresh virtual environment."""

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "napari.yaml"


def test_editable_install_serves_the_top_level_manifest():
    from npe2 import PluginManifest

    manifest = PluginManifest.from_distribution("napari-gpuscope")
    assert manifest.name == "napari-gpuscope"
    top_level = yaml.safe_load(MANIFEST.read_text())
    assert [c.id for c in manifest.contributions.commands] == [
        c["id"] for c in top_level["contributions"]["commands"]
    ]


def test_every_command_resolves_to_a_python_object():
    from npe2 import PluginManifest

    manifest = PluginManifest.from_distribution("napari-gpuscope")
    for command in manifest.contributions.commands:
        module_name, attr = command.python_name.split(":")
        module = __import__(module_name, fromlist=[attr])
        assert callable(getattr(module, attr)), command.python_name


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        timeout=600,
    )
    return next(out.glob("napari_gpuscope-*.whl"))


def test_wheel_contains_manifest_and_kernel_sources(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "napari_gpuscope/napari.yaml" in names
    kernels = {Path(n).name for n in names if n.startswith("napari_gpuscope/compute/kernels/")}
    expected = {p.name for p in (ROOT / "src/napari_gpuscope/compute/kernels").glob("*.cu")}
    assert expected and expected <= kernels
    assert "host_shim.h" in kernels
    shipped = zipfile.ZipFile(wheel).read("napari_gpuscope/napari.yaml").decode()
    assert shipped == MANIFEST.read_text()  # a real file, not a dangling symlink
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "napari-gpuscope = napari_gpuscope:napari.yaml" in text


def test_wheel_in_a_fresh_environment_is_found_by_npe2(wheel, tmp_path):
    env_dir = tmp_path / "clean"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=600,
    )
    # Dependencies (napari, npe2, torch...) come from the test environment through a .pth line;
    # .pth files inside that folder (our own editable install) are *not* processed, so the
    # plugin itself can only come from the wheel.
    clean_site = next((env_dir / "lib").glob("python3*/site-packages"))
    (clean_site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = (
        "import napari_gpuscope, npe2, pathlib\n"
        "m = npe2.PluginManifest.from_distribution('napari-gpuscope')\n"
        "pm = npe2.PluginManager(); pm.discover()\n"
        "assert 'napari-gpuscope' in pm._manifests, sorted(pm._manifests)\n"
        "print(pathlib.Path(napari_gpuscope.__file__).resolve())\n"
        "print(m.display_name)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr
    location, display_name = result.stdout.split("\n")[:2]
    assert Path(location).is_relative_to(env_dir.resolve())
    assert display_name == yaml.safe_load(MANIFEST.read_text())["display_name"]
    validate = subprocess.run(
        [env_dir / "bin" / "python", "-m", "npe2", "validate", "napari-gpuscope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr

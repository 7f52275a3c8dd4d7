"""The manifest and kernel sources ship in the wheel and napari finds the plugin both from the
editable install and from a wheel installed in a fresh virtual environment."""

import os
import shutil
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
    # Built from a copy without build/ and *.egg-info: setuptools reuses build/lib and
    # SOURCES.txt from earlier builds, which would ship files the package data no longer names.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE", "napari.yaml"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "src",
        source / "src",
        symlinks=True,  # src/napari_gpuscope/napari.yaml links to the top-level manifest
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"),
    )
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
            str(source),
        ],
        check=True,
        timeout=600,
    )
    return next(out.glob("napari_gpuscope-*.whl"))


def test_wheel_contains_manifest_and_kernel_sources(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "napari_gpuscope/napari.yaml" in names
    # Every .cu of the compute package (kernels/ and each method's own folder), at its place.
    package = ROOT / "src"
    sources = sorted((package / "napari_gpuscope/compute").rglob("*.cu"))
    assert any(p.parent.name == "kernels" for p in sources)
    assert any(p.parent.name != "kernels" for p in sources)  # a method's kernels, e.g. tv/
    expected = [p.relative_to(package).as_posix() for p in sources]
    missing = [name for name in expected if name not in names]
    assert not missing, f"kernel sources missing from the wheel: {missing}"
    assert "napari_gpuscope/compute/kernels/host_shim.h" in names
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

"""The files generated from the method registry are current, and the generator keeps the rest
of each file as it is."""

from __future__ import annotations

import shutil

import pytest

from napari_gpuscope import generate

GENERATED = (
    "napari.yaml",
    "README.md",
    "docs/user-guide.md",
    "docs/recipe.schema.json",
    "pyproject.toml",
)


def test_generated_files_are_current():
    stale = [
        path.relative_to(generate.ROOT).as_posix()
        for path, text in generate.generated_files().items()
        if path.read_text(encoding="utf-8") != text
    ]
    assert not stale, (
        f"{', '.join(stale)} stale: the method registry changed; run `{generate.COMMAND}` "
        "and commit the result"
    )


def test_every_generated_file_is_listed():
    paths = {p.relative_to(generate.ROOT).as_posix() for p in generate.generated_files()}
    assert paths == set(GENERATED)


@pytest.fixture
def checkout(tmp_path):
    """A copy of the generated files (the generator writes here, never into the repository)."""
    for name in GENERATED:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(generate.ROOT / name, tmp_path / name)
    return tmp_path


def test_check_finds_a_stale_section_and_writing_restores_it_alone(checkout, capsys):
    readme = checkout / "README.md"
    current = readme.read_text()
    readme.write_text(current.replace("| eSRRF |", "| eSRRF (renamed) |"))
    assert generate.main(["--check", "--root", str(checkout)]) == 1
    out = capsys.readouterr().out
    assert "README.md" in out and generate.COMMAND in out and "napari.yaml" not in out

    assert generate.main(["--root", str(checkout)]) == 0
    assert "rewrote README.md" in capsys.readouterr().out
    assert readme.read_text() == current
    assert generate.main(["--check", "--root", str(checkout)]) == 0
    assert generate.main(["--root", str(checkout)]) == 0
    assert "up to date" in capsys.readouterr().out


def test_only_the_lines_between_the_markers_are_generated(checkout):
    manifest = checkout / "napari.yaml"
    edited = manifest.read_text().replace(
        "      display_name: ImageJ TIFF with provenance", "      display_name: ImageJ TIFF"
    )
    manifest.write_text(edited)
    assert manifest not in generate.write(checkout)  # the writer entry is hand-written: kept
    assert manifest.read_text() == edited


def test_missing_markers_name_the_file_and_the_section(checkout, capsys):
    guide = checkout / "docs" / "user-guide.md"
    guide.write_text(guide.read_text().replace("end generated: methods", "end: methods"))
    with pytest.raises(generate.GenerateError, match=r"docs/user-guide.md.*generated: methods"):
        generate.generated_files(checkout)
    with pytest.raises(SystemExit):
        generate.main(["--check", "--root", str(checkout)])
    assert "docs/user-guide.md" in capsys.readouterr().err


def test_a_method_package_outside_the_house_joins_the_import_linter_contracts():
    from napari_gpuscope.methods import method
    from tiny_method import SPEC

    sections = generate.importlinter_sections([method("tv"), SPEC])
    assert sections == {
        "root-packages": 'root_packages = ["napari_gpuscope", "tiny_method"]\n',
        "compute-sources-gui": 'source_modules = ["napari_gpuscope.compute", "tiny_method"]\n',
        "compute-sources-house": 'source_modules = ["napari_gpuscope.compute", "tiny_method"]\n',
        "method-packages": 'modules = ["napari_gpuscope.compute.tv", "tiny_method"]\n',
    }

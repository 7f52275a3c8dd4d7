"""The files generated from the method registry, and the command that rewrites them.

What the registry (:data:`napari_gpuscope.methods.METHODS`) knows is written into the files
that cannot read it at run time:

- ``napari.yaml``: per method, the dock's and each sample's command, the widget, the sample-data
  entries and the dock's Layers submenu (``MethodSpec.menu``); the rest of the manifest (export
  commands, the writer, the File menu) is written by hand around them;
- ``README.md``: the table of tools and the table of the docks' menus;
- ``docs/user-guide.md``: the list of the methods' guides;
- ``docs/recipe.schema.json``: the recipe's JSON Schema (:mod:`napari_gpuscope.batch.schema`);
- ``pyproject.toml``: the import-linter contracts' lists of method packages
  (``MethodSpec.compute_package``): the packages held independent of each other, a method's
  package outside the house among the compute layer's (no GUI toolkit, no docks or registry)
  and its top-level package among the root packages.

In all but the schema, only the lines between a ``begin generated: NAME`` and an ``end
generated: NAME`` marker line (a YAML or TOML comment, an HTML comment in Markdown) are
rewritten; the schema is generated whole. After changing the registry, run from the repository::

    python -m napari_gpuscope.generate          # rewrite what is stale
    python -m napari_gpuscope.generate --check  # exit 1 naming the stale files

``tests/test_generate.py`` fails, naming this command, when a file is stale.

Examples
--------
>>> from napari_gpuscope import generate
>>> from napari_gpuscope.methods import method
>>> print(generate.user_guide_methods([method("tv"), method("phase")]), end="")
- [TV denoising](tv.md)
- [Tilt-corrected phase](phase.md)
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import yaml

from .methods import METHODS, PLUGIN, MethodSpec

__all__ = [
    "COMMAND",
    "ROOT",
    "GenerateError",
    "fill",
    "generated_files",
    "importlinter_sections",
    "main",
    "manifest_sections",
    "menu_table",
    "stale_files",
    "tools_table",
    "user_guide_methods",
    "write",
]

COMMAND = "python -m napari_gpuscope.generate"
"""What a developer runs after changing the registry."""

ROOT = Path(__file__).resolve().parents[2]
"""The source checkout this module lives in (``src/napari_gpuscope/generate.py``)."""

Specs = Sequence[MethodSpec]


class GenerateError(RuntimeError):
    """A generated file's markers are missing or broken; the message names file and section."""


# ---------------------------------------------------------------------------- napari.yaml
def _yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar: plain where YAML reads it back unchanged, else quoted."""
    try:
        plain = yaml.safe_load(f"key: {text}") == {"key": text}
    except yaml.YAMLError:
        plain = False
    # A JSON string is a valid YAML double-quoted scalar.
    return text if plain else json.dumps(text, ensure_ascii=False)


def _yaml_items(items: Iterable[Sequence[tuple[str, str]]], indent: int) -> str:
    """Block-sequence items of ``key: value`` mappings, ``indent`` spaces deep."""
    lines = []
    for item in items:
        for index, (key, value) in enumerate(item):
            lead = "- " if index == 0 else "  "
            lines.append(f"{' ' * indent}{lead}{key}: {_yaml_scalar(value)}")
    return "".join(f"{line}\n" for line in lines)


def manifest_sections(specs: Specs) -> dict[str, str]:
    """The generated sections of ``napari.yaml``, by marker name.

    Parameters
    ----------
    specs : sequence of MethodSpec
        The methods, in menu order.

    Returns
    -------
    dict of str to str
        ``"commands"`` (each dock's command, then its samples'), ``"widgets"``,
        ``"sample-data"`` and ``"layers-menus"`` (each Layers submenu with its docks), as the
        YAML lines that go between the markers.

    Examples
    --------
    >>> from napari_gpuscope.methods import method
    >>> print(manifest_sections([method("esrrf")])["widgets"], end="")
        - command: napari-gpuscope.esrrf_dock
          display_name: eSRRF
    """
    commands = []
    for spec in specs:
        commands.append(
            (("id", spec.command_id), ("title", spec.title), ("python_name", spec.dock))
        )
        commands.extend(
            (("id", s.command_id), ("title", s.title), ("python_name", s.function))
            for s in spec.samples
        )
    widgets = [(("command", spec.command_id), ("display_name", spec.title)) for spec in specs]
    samples = [
        (("key", s.key), ("display_name", s.title), ("command", s.command_id))
        for spec in specs
        for s in spec.samples
    ]
    menus: dict[str, list[MethodSpec]] = {}
    for spec in specs:
        menus.setdefault(spec.menu, []).append(spec)
    layers_menus = "".join(
        f"    {menu}:\n" + _yaml_items(((("command", s.command_id),) for s in docks), indent=6)
        for menu, docks in menus.items()
    )
    return {
        "commands": _yaml_items(commands, indent=4),
        "widgets": _yaml_items(widgets, indent=4),
        "sample-data": _yaml_items(samples, indent=4),
        "layers-menus": layers_menus,
    }


# ---------------------------------------------------------------------------- pyproject.toml
COMPUTE = "napari_gpuscope.compute"
"""The compute layer; the house's method packages are inside it."""


def _toml_list(key: str, items: Sequence[str], indent: int = 0, width: int = 99) -> str:
    """``key = [...]`` of TOML strings: on one line where it fits, else one item a line."""
    lead = " " * indent
    inline = f"{lead}{key} = [{', '.join(json.dumps(item) for item in items)}]\n"
    if len(inline) <= width + 1:
        return inline
    lines = "".join(f"{lead}    {json.dumps(item)},\n" for item in items)
    return f"{lead}{key} = [\n{lines}{lead}]\n"


def importlinter_sections(specs: Specs) -> dict[str, str]:
    """The generated sections of ``pyproject.toml``'s ``[tool.importlinter]``, by marker name.

    Every method's :attr:`~napari_gpuscope.methods.MethodSpec.compute_package` is held
    independent of the others' (``"method-packages"``, the independence contract's
    ``modules``). A package outside ``napari_gpuscope.compute`` (a method that lives in
    another distribution, or the tests' method package) is also a source of the compute
    layer's two forbidden contracts (``"compute-sources-gui"``, ``"compute-sources-house"``)
    and its top-level package a root package (``"root-packages"``).

    Examples
    --------
    >>> from napari_gpuscope.methods import method
    >>> print(importlinter_sections([method("tv"), method("phase")])["method-packages"], end="")
    modules = ["napari_gpuscope.compute.tv", "napari_gpuscope.compute.phase"]
    """
    packages = list(dict.fromkeys(spec.compute_package for spec in specs))
    outside = [name for name in packages if name != COMPUTE and not name.startswith(COMPUTE + ".")]
    roots = list(dict.fromkeys(["napari_gpuscope", *(name.split(".")[0] for name in outside)]))
    sources = _toml_list("source_modules", [COMPUTE, *outside])
    return {
        "root-packages": _toml_list("root_packages", roots),
        "compute-sources-gui": sources,
        "compute-sources-house": sources,
        "method-packages": _toml_list("modules", packages),
    }


# ---------------------------------------------------------------------------- Markdown
def _cell(text: str) -> str:
    """Text for a Markdown table cell (a ``|`` would end the cell)."""
    return text.replace("|", "\\|")


def _bold_path(path: Sequence[str]) -> str:
    return f"**{' > '.join(path)}**"


def tools_table(specs: Specs) -> str:
    """The README's table of tools: title, status and ``MethodSpec.description``.

    Examples
    --------
    >>> from napari_gpuscope.methods import method
    >>> tools_table([method("esrrf")]).splitlines()[2].split(" | ")[:2]
    ['| **eSRRF**', 'available']
    """
    rows = [
        f"| **{_cell(spec.title)}** | available | {_cell(spec.description)} |" for spec in specs
    ]
    return "\n".join(["| Tool | Status | What it is for |", "|---|---|---|", *rows]) + "\n"


def menu_table(specs: Specs) -> str:
    """The README's paragraph and table of where each dock is in napari's menus.

    The menu paths are ``MethodSpec.menu_paths`` (what napari builds from the manifest; the
    menu tests click the same paths), the guide ``docs/<MethodSpec.guide>``.
    """
    layers = list(dict.fromkeys(_bold_path(spec.menu_paths[1][:-1]) for spec in specs))
    where = layers[-1]
    if len(layers) > 1:
        where = f"its **Layers** submenu, {', '.join(layers[:-1])} or {where}"
    intro = textwrap.fill(
        f"Every dock is in {_bold_path(('Plugins', PLUGIN))} and in {where} (both open the "
        "same dock):",
        width=99,
        break_on_hyphens=False,
    )
    rows = []
    for spec in specs:
        menus = ", ".join(_bold_path(path) for path in spec.menu_paths)
        guide = f"docs/{spec.guide}"
        rows.append(f"| {_cell(spec.title)} | {_cell(menus)} | [{guide}]({guide}) |")
    table = ["| Dock | Menus | Guide |", "|---|---|---|", *rows]
    return intro + "\n\n" + "\n".join(table) + "\n"


def user_guide_methods(specs: Specs) -> str:
    """The user guide's list of the methods' guides (``guide_title`` linking to ``guide``).

    Examples
    --------
    >>> from napari_gpuscope.methods import method
    >>> user_guide_methods([method("tv")])
    '- [TV denoising](tv.md)\\n'
    """
    return "".join(f"- [{spec.guide_title}]({spec.guide})\n" for spec in specs)


# ---------------------------------------------------------------------------- markers
def fill(text: str, name: str, body: str, *, where: str = "file") -> str:
    """Replace the lines between the ``begin generated: name`` and ``end generated: name``
    marker lines of ``text`` with ``body``; the marker lines stay as they are.

    Raises
    ------
    GenerateError
        The markers are missing or appear more than once.

    Examples
    --------
    >>> text = "a\\n<!-- begin generated: x -->\\nold\\n<!-- end generated: x -->\\nb\\n"
    >>> print(fill(text, "x", "new\\n"), end="")
    a
    <!-- begin generated: x -->
    new
    <!-- end generated: x -->
    b
    """
    key = re.escape(name)
    pattern = re.compile(
        rf"(^[^\n]*\bbegin generated: {key}(?![\w-])[^\n]*\n)"
        rf".*?"
        rf"(^[^\n]*\bend generated: {key}(?![\w-]))",
        re.MULTILINE | re.DOTALL,
    )
    found = pattern.findall(text)
    if len(found) != 1:
        state = "missing" if not found else f"found {len(found)} times"
        raise GenerateError(
            f"{where}: the markers 'begin generated: {name}' ... 'end generated: {name}' "
            f"(one line each) are {state}"
        )
    return pattern.sub(lambda match: match.group(1) + body + match.group(2), text)


def _fill_all(sections: dict[str, str], markdown: bool) -> Callable[[str, str], str]:
    def render(text: str, where: str) -> str:
        for name, body in sections.items():
            # Blank lines around Markdown blocks: the comment never joins a table or a list.
            text = fill(text, name, f"\n{body}\n" if markdown else body, where=where)
        return text

    return render


def _schema_text() -> str:
    from .batch.schema import schema_text  # imports pydantic and every params model

    return schema_text()


def generated_files(root: Path = ROOT, specs: Specs | None = None) -> dict[Path, str]:
    """Every generated file's path and the text it should have now, computed in memory.

    Parameters
    ----------
    root : Path
        The source checkout.
    specs : sequence of MethodSpec, optional
        The methods (default: the registry as it is now, including methods registered at run
        time). ``docs/recipe.schema.json`` always follows the registry.

    Returns
    -------
    dict of Path to str
        Compare with the files (:func:`stale_files`) or write them (:func:`write`).
    """
    specs = list(METHODS.values()) if specs is None else list(specs)
    renderers = {
        "napari.yaml": _fill_all(manifest_sections(specs), markdown=False),
        "README.md": _fill_all(
            {"tools-table": tools_table(specs), "menu-table": menu_table(specs)}, markdown=True
        ),
        "docs/user-guide.md": _fill_all({"methods": user_guide_methods(specs)}, markdown=True),
        "pyproject.toml": _fill_all(importlinter_sections(specs), markdown=False),
    }
    files = {}
    for name, render in renderers.items():
        path = root / name
        files[path] = render(path.read_text(encoding="utf-8"), name)
    files[root / "docs" / "recipe.schema.json"] = _schema_text()
    return files


def stale_files(root: Path = ROOT) -> list[Path]:
    """The generated files whose text differs from what the registry gives now."""
    return [
        path
        for path, text in generated_files(root).items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def write(root: Path = ROOT) -> list[Path]:
    """Rewrite the stale generated files; returns them."""
    changed = []
    for path, text in generated_files(root).items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m napari_gpuscope.generate [--check] [--root DIR]``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Rewrite the files generated from the method registry."
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is stale"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the source checkout")
    args = parser.parse_args(argv)
    if not (args.root / "napari.yaml").is_file():
        parser.error(f"{args.root} is not a source checkout of {PLUGIN} (no napari.yaml)")
    try:
        paths = stale_files(args.root) if args.check else write(args.root)
    except GenerateError as exc:
        parser.error(str(exc))
    names = [path.relative_to(args.root).as_posix() for path in paths]
    if args.check:
        if names:
            print(f"stale (run {COMMAND}): {', '.join(names)}")
        return 1 if names else 0
    print(f"rewrote {', '.join(names)}" if names else "every generated file is up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

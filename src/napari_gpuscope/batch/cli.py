"""The batch subcommands of ``napari-gpuscope``: ``recipe``, ``run``, ``validate``, ``status``.

Exit codes: 0 all done; 1 some positions failed (the report and ``status`` say which and why);
2 a usage or configuration error (bad recipe, no input, store exists); 130 interrupted (the
report, when asked for, is written all the same).

The subcommands' arguments are in :mod:`.cli_parsers`, each subcommand in its own module
(:mod:`.cli_recipe`, :mod:`.cli_run`, :mod:`.cli_inspect`); this module dispatches to them.
"""

from __future__ import annotations

import argparse

from napari_gpuscope.batch import cli_inspect, cli_recipe, cli_run
from napari_gpuscope.batch.cli_fail import fail
from napari_gpuscope.batch.cli_parsers import add_parsers

__all__ = ["COMMANDS", "add_parsers", "dispatch"]

COMMANDS = ("recipe", "run", "validate", "status")


def dispatch(args: argparse.Namespace) -> int:
    """Run a batch subcommand; returns the exit code."""
    from napari_gpuscope.batch.inputs import InputError
    from napari_gpuscope.batch.recipes import RecipeError

    try:
        return {
            "recipe": cli_recipe.recipe,
            "run": cli_run.run,
            "validate": cli_inspect.validate,
            "status": cli_inspect.status,
        }[args.command](args)
    except (RecipeError, InputError, ValueError, RuntimeError) as exc:
        return fail(str(exc))
    except OSError as exc:  # a file the command itself reads or writes (not a position's)
        where = f"{exc.filename}: " if exc.filename else ""
        return fail(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        return fail("interrupted; finished positions are kept: rerun with --resume", 130)

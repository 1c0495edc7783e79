"""`bertkit recipes [[show] NAME]`: list the recipes with one line each, or print one."""

from __future__ import annotations

import argparse

EXAMPLE = """example:
  bertkit recipes                 # one line per recipe
  bertkit recipes show conll2003  # the full YAML, with its comments (or: bertkit recipes conll2003)
  bertkit recipes glue            # what `bertkit finetune glue` runs
"""


def glue_text() -> str:
    """What `finetune glue` is, for the listing (its first line) and `recipes glue`."""
    from .glue import TASKS

    return ("`bertkit finetune glue`: every GLUE recipe that has data, each as itself, into the BERT paper's "
            f"Table 1.\nNot a recipe of its own: it runs {', '.join(sorted(TASKS))} (`--tasks` picks some),\neach "
            "with its recipe (`bertkit recipes NAME` shows one) and the flags given for all; docs/glue_and_heads.md.")


def summary(path) -> str:
    """The recipe's first comment line, without the leading '# '."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def run(args: argparse.Namespace) -> int:
    from ..config_files import RECIPES_DIR, load_recipe, recipe_names, recipe_path, recipe_task
    from ..errors import BertkitError

    action, name = args.action, args.name
    if action not in ("list", "show"):  # `bertkit recipes sst2`: that recipe
        if name:
            raise BertkitError(f"unknown action '{action}': bertkit recipes [list | [show] NAME]")
        action, name = "show", action
    if action == "list" and name:
        raise BertkitError("'list' takes no recipe name: bertkit recipes [list | [show] NAME]")
    if action == "show":
        if not name:
            raise BertkitError("which recipe? e.g. bertkit recipes show sst2")
        if name == "glue":
            print(glue_text())
            return 0
        path = recipe_path(name)
        if path.parent != RECIPES_DIR:  # a file of one's own that does not load is reported, not printed
            load_recipe(name)
        print(path.read_text(), end="")
        return 0
    for name in recipe_names():  # read, not resolved: no model library imported (the tests load every recipe)
        print(f"{name:<10} {recipe_task(name):<24} {summary(recipe_path(name))}")
    print(f"{'glue':<10} {'(the GLUE recipes above)':<24} {glue_text().splitlines()[0]}")
    return 0


def register(subparsers, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser("recipes", help="list the recipes, or show one", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", nargs="?", default="list", metavar="{list,show,NAME}",
                   help="list: every recipe, its task and summary (default); show NAME, or NAME alone: one "
                        "recipe's settings")
    p.add_argument("name", nargs="?", help="recipe to show")
    p.set_defaults(func=run)

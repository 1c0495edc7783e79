"""`bertkit recipes [[show] NAME]`: list the recipes with one line each, or print one."""

from __future__ import annotations

import argparse

EXAMPLE = """example:
  bertkit recipes                 # one line per recipe
  bertkit recipes show conll2003  # the full YAML, with its comments (or: bertkit recipes conll2003)
"""


def summary(path) -> str:
    """The recipe's first comment line, without the leading '# '."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def run(args: argparse.Namespace) -> int:
    from ..config_files import load_recipe, recipe_names, recipe_path
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
        path = recipe_path(name)
        load_recipe(name)  # a recipe that does not load is reported, not printed
        print(path.read_text(), end="")
        return 0
    for name in recipe_names():
        cfg = load_recipe(name)
        print(f"{name:<10} {cfg.task:<24} {summary(recipe_path(name))}")
    return 0


def register(subparsers, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser("recipes", help="list the recipes, or show one", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", nargs="?", default="list", metavar="{list,show,NAME}",
                   help="list: every recipe, its task and summary (default); show NAME, or NAME alone: one "
                        "recipe's settings")
    p.add_argument("name", nargs="?", help="recipe to show")
    p.set_defaults(func=run)

"""The `bertkit` command: argparse subcommands, each registered by its module in `bertkit/commands/`."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .commands import evaluate, export, extract, finetune, predict, probe, recipes, serve
from .errors import EXIT_USER_ERROR, BertkitError

COMMANDS = [finetune, evaluate, predict, extract, probe, serve, export, recipes]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertkit", description="The BERT paper's recipes, one command each.")
    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


def reference(width: int = 100) -> str:
    """docs/cli.md: every command's `--help`, as argparse prints it at `width` columns (a test keeps it current)."""
    import os

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        parser = build_parser()
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parts = ["# Command-line reference\n\nGenerated from the argparse definitions: "
                 "`python -c \"from bertkit.cli import reference; print(reference(), end='')\" > docs/cli.md`.\n",
                 f"## bertkit\n\n```\n{parser.format_help()}```\n"]
        parts += [f"## bertkit {name}\n\n```\n{sub.format_help()}```\n" for name, sub in subparsers.choices.items()]
        return "\n".join(parts)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def main(argv: list[str] | None = None) -> int:
    import shlex

    from .utils import COMMAND

    argv = sys.argv[1:] if argv is None else argv
    COMMAND[0] = shlex.join(["bertkit", *argv])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BertkitError as e:
        rank = os.environ.get("RANK", "0")  # under a launcher every process reports; the others say which they are
        print(f"{'' if rank == '0' else f'[rank {rank}] '}bertkit {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The `bertkit` command: argparse subcommands, each registered by its module in `bertkit/commands/`.

A command whose flags depend on a task (`finetune RECIPE`: the recipe's task options; `predict --model RUN`: the
task's input and output formats) is given the command line when its parser is built (`register(sub, argv)`), finds
the task from it cheaply (the recipe's YAML, the run folder's config), and adds that task's flags: so
`bertkit finetune squad --help` shows the QA options and `bertkit finetune sst2 --help` the classification ones.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys

from . import __version__
from .commands import evaluate, export, extract, finetune, predict, probe, recipes, search, serve
from .errors import EXIT_USER_ERROR, BertkitError, Stopped, Terminated

COMMANDS = [finetune, search, evaluate, predict, extract, probe, serve, export, recipes]


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of `bertkit`; `argv` (the command line) lets the chosen command add its task's flags."""
    parser = OneLineParser(prog="bertkit", description="The BERT paper's recipes, one command each.")
    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    command = next((a for a in argv or [] if not a.startswith("-")), None)
    for module in COMMANDS:
        name = module.__name__.rsplit(".", 1)[-1]
        module.register(sub, argv[argv.index(command) + 1:] if argv and name == command else None)
    return parser


class OneLineParser(argparse.ArgumentParser):
    """argparse's own errors (a value that is not a number, a flag without its value) in one line, as bertkit's are:
    its default printed the command's whole usage first, 41 lines for `finetune`, burying the line."""

    def error(self, message: str):
        what = "the commands" if self.prog == "bertkit" else "its flags"
        print(f"{self.prog}: error: {message} (`{self.prog} --help` lists {what})", file=sys.stderr)
        raise SystemExit(2)


def unknown_flags(args, extra: list[str]) -> None:
    """Exit 2 on one line naming the flags no option of the command took and where its flags are listed (with the
    recipe or model that decides the task's own: a long command's whole usage would bury the line)."""
    which = (f" {args.recipe}" if getattr(args, "recipe", None) else
             f" --model {args.model}" if getattr(args, "model", None) else "")
    print(f"bertkit {args.command}: error: unrecognized arguments: {' '.join(extra)} (`bertkit {args.command}{which} "
          "--help` lists its flags)", file=sys.stderr)
    raise SystemExit(2)


def reference(width: int = 100) -> str:
    """docs/cli.md: every command's `--help`, as argparse prints it at `width` columns (a flag's aliases as Python
    3.13 writes them) and a test keeps it current; `finetune` once per built-in task (a recipe of each) and `predict`
    without a model."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        parser = build_parser()
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parts = ["# Command-line reference\n\nGenerated from the argparse definitions: "
                 "`python -c \"from bertkit.cli import reference; print(reference(), end='')\" > docs/cli.md`.\n",
                 f"## bertkit\n\n```\n{parser.format_help()}```\n"]
        for name, sub in subparsers.choices.items():
            parts.append(f"## bertkit {name}\n\n```\n{sub.format_help()}```\n")
            if name == "finetune":
                for recipe in finetune.REFERENCE_RECIPES:
                    full = _subparser(["finetune", recipe], "finetune")
                    parts.append(f"### bertkit finetune {recipe} (task options)\n\n```\n"
                                 f"{finetune.task_help(full)}```\n")
        return _aliases_once("\n".join(parts))
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


_ALIASES = re.compile(r"(?m)^( +)(-[\w-]+) (\S+)((?:, -[\w-]+ \3)+)(  .*)?$")


def _aliases_once(text: str) -> str:
    """A flag's aliases as Python 3.13's argparse writes them, the value's name once (`--recipe, --task RECIPE`),
    where 3.11 and 3.12 repeat it after each (`--recipe RECIPE, --task RECIPE`): docs/cli.md is the same text
    whichever Python makes it (the help text after a short one keeps its column)."""
    def once(m: re.Match) -> str:
        names = [m[2]] + [alias.split()[0] for alias in m[4].split(", ")[1:]]
        said = f"{', '.join(names)} {m[3]}"
        rest = m[5] or ""
        return m[1] + said + (" " * (len(m[2] + m[3] + m[4]) + 1 - len(said)) + rest if rest else "")
    return _ALIASES.sub(once, text)


NUMBER_LISTS = ("--layers", "--class-weights")  # comma-separated numbers, which may begin with "-"


def layers_joined(argv: list[str]) -> list[str]:
    """`--layers -1,-2` as `--layers=-1,-2`: argparse takes a value that begins with "-" and is not one number for
    a flag ("expected one argument"), and layers count back from the last with negative numbers (a class weight
    below 0 is refused by its own check, `--class-weights -1,2`: was argparse's "expected one argument")."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in NUMBER_LISTS and re.match(r"-\d", arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _subparser(argv: list[str], name: str) -> argparse.ArgumentParser:
    parser = build_parser(argv)
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[name]


@contextlib.contextmanager
def sigterm_unwinds(command: str):
    """Within the block SIGTERM raises `Terminated`, for the commands that write outputs and train nothing (training
    stops at a checkpoint on its own; serve's server drains); an ignored SIGTERM stays so, and the handler before is
    put back after."""
    import signal
    import threading

    if command not in ("predict", "evaluate", "extract", "export") or signal.getsignal(signal.SIGTERM) is not \
            signal.SIG_DFL or threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    import shlex
    import time

    started = time.perf_counter()  # before the parser imports the tasks (torch, transformers): a command's wall time

    from .utils import COMMAND

    argv = sys.argv[1:] if argv is None else argv
    # In a log (stderr not a terminal) the libraries' bars (loading weights, writing shards, map) stay out, as
    # bertkit's own do, unless --verbose; the variables are read when transformers and datasets are imported, later.
    if not sys.stderr.isatty() and "--verbose" not in argv:
        for var in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
            os.environ.setdefault(var, "1")
    COMMAND[0] = shlex.join(["bertkit", *argv])
    argv = layers_joined(argv)
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    args.started = started
    try:
        if getattr(args, "task_error", None):  # the command could not tell its task (a bad recipe or model)
            raise BertkitError(args.task_error)
        if extra:
            unknown_flags(args, extra)
        if not sys.stderr.isatty() and args.command != "recipes":  # a log: no terminal colour codes in it
            from .commands.common import plain_library_logs

            plain_library_logs()
        with sigterm_unwinds(args.command):
            code = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader that left (`| head`) is met by the handler below
        return code
    except BrokenPipeError:  # stdout's reader stopped reading: what it took was all it wanted, no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit writes nowhere
        return 141  # as a shell reports a command ended by SIGPIPE
    except BertkitError as e:
        rank = os.environ.get("RANK", "0")  # under a launcher every process reports; the others say which they are
        print(f"{'' if rank == '0' else f'[rank {rank}] '}bertkit {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as e:  # the file system refused a path (no such folder, no permission, full): its own words
        if e.filename is None or "--verbose" in argv:
            raise
        print(f"bertkit {args.command}: error: {e.strerror or e}: {e.filename}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Stopped as e:  # a signal asked training to stop; its checkpoint is written
        how = "goes on from there" if args.command == "search" else "with --resume continues from there"
        if os.environ.get("RANK", "0") == "0":
            print(f"bertkit {args.command}: {e}; the same command {how}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    finally:
        if "torch.distributed" in sys.modules and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # a launched process
            from .training.launch import leave

            leave()


def run() -> int:
    """The `bertkit` command (`python -m bertkit`, the console script): `main`, then every object the process made
    frozen (`gc.freeze`) for its exit, where Python's last collections would otherwise walk all of them, torch's,
    transformers' and datasets' modules included: seconds of a 2-core machine after the command's work is done
    (docs/speed.md). Not for `main` called in a process that goes on (tests, notebooks)."""
    try:
        return main()
    finally:
        import gc

        gc.freeze()


if __name__ == "__main__":
    sys.exit(run())

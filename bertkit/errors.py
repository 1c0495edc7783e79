"""User-facing errors. The CLI prints them as one clear line and exits with code 2 (no traceback)."""

from __future__ import annotations

EXIT_USER_ERROR = 2


class BertkitError(Exception):
    """An error caused by the user's input (a file, a flag, a recipe), not by a bug in bertkit."""


def need_extra(what: str, extra: str, *modules: str) -> None:
    """BertkitError naming the extra to install unless every module imports: `what` needs them.

    Example:
    ```python
    >>> need_extra("bertkit serve", "serve", "json")  # present: nothing happens
    >>> need_extra("--peft", "peft", "no_such_module")
    Traceback (most recent call last):
    bertkit.errors.BertkitError: --peft needs no_such_module: pip install 'bertkit[peft]'
    ```
    """
    import importlib

    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise BertkitError(f"{what} needs {', '.join(missing)}: pip install 'bertkit[{extra}]'")


class DataError(BertkitError):
    """Bad input data, located by file, line and field.

    Example:
    ```python
    >>> str(DataError("no label", file="dev.tsv", line=3, field="label"))
    'dev.tsv, line 3, field "label": no label'
    ```
    """

    def __init__(self, message: str, file=None, line: int | None = None, field: str | None = None):
        self.file, self.line, self.field, self.reason = file, line, field, message
        where = [str(file) if str(file) != "-" else "<stdin>"] if file is not None else []
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f'field "{field}"')
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class Stopped(Exception):
    """Training stopped on a signal (`signum`) after writing a resumable checkpoint; the CLI says so and exits with
    128 + signum, as a process ended by that signal reports."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class Terminated(BaseException):
    """SIGTERM during a command that writes outputs (predict, evaluate, extract, export), raised where the main thread
    stands so that its temporaries are removed, as on Ctrl-C (the signal's default ends the process where it stands
    and leaves them); the CLI exits with 143, as a process ended by SIGTERM reports. A BaseException, as
    KeyboardInterrupt is: no `except Exception` on its way takes it for an error."""

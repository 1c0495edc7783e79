"""`python -m bertkit ...` is the `bertkit` command."""

import sys

from .cli import run

sys.exit(run())

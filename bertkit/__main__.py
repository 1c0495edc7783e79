"""`python -m bertkit ...` is the `bertkit` command."""

import sys

from .cli import main

sys.exit(main())

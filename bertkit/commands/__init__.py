"""One module per subcommand; each exposes `register(subparsers)` and sets `func` on its parser."""

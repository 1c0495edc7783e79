"""`make quickstart`: the main job on a fresh clone, one epoch of the packaged MiniLM on SST-2, wherever it was cloned.

Where the data comes from:
- local files (`$BERTKIT_DATA_DIR/sst2/train.tsv` and `dev.tsv`; the Makefile sets BERTKIT_DATA_DIR when a data
  folder sits in a sibling folder of the clone): used offline, no network call;
- else, when the Hugging Face hub answers: the hub's GLUE SST-2 (`nyu-mll/glue`, config `sst2`), said so first;
- else: a message saying how to point at data, exit code 2.

    python -m bertkit.quickstart --output-dir runs/quickstart
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

from .errors import EXIT_USER_ERROR, BertkitError

COMMAND = ["finetune", "sst2", "--model", "minilm-l6", "--epochs", "1"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """Whether the hub's host accepts a connection (a proxy or firewall that refuses it counts as unreachable)."""
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def decide(data_dir: str | None, reachable=hub_reachable) -> tuple[str, list[str], dict[str, str], str]:
    """(source, extra finetune flags, environment changes, message): 'local' or 'hub'; BertkitError for neither."""
    folder = Path(data_dir) / "sst2" if data_dir else None
    if folder is not None and (folder / "train.tsv").is_file() and (folder / "dev.tsv").is_file():
        return "local", ["--data-dir", str(folder)], OFFLINE, f"SST-2 from {folder} (offline)"
    if reachable():
        where = f"no SST-2 files under {folder}" if folder is not None else "BERTKIT_DATA_DIR is not set"
        return "hub", [], {k: "" for k in OFFLINE}, f"{where}: reading the hub's GLUE SST-2 (nyu-mll/glue, sst2)"
    raise BertkitError("no SST-2 data here and the Hugging Face hub cannot be reached. Point bertkit at a folder "
                       "holding sst2/train.tsv and sst2/dev.tsv (GLUE format): make quickstart "
                       "BERTKIT_DATA_DIR=/path/to/data")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args(argv)
    try:
        source, flags, env, message = decide(os.environ.get("BERTKIT_DATA_DIR") or None)
    except BertkitError as e:
        print(f"bertkit quickstart: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(f"bertkit quickstart: {message}", file=sys.stderr)
    environ = {k: v for k, v in {**os.environ, **env}.items() if v != ""}
    command = [sys.executable, "-m", "bertkit", *COMMAND, *flags, "--output-dir", args.output_dir]
    return subprocess.run(command, env=environ).returncode


if __name__ == "__main__":
    sys.exit(main())

"""Record every recipe's metrics on the fixed tiny model (tests/conftest.py `recipe_fingerprint`) with the bertkit
that is importable, into tests/data/recipe_metrics.json under the installed torch/transformers versions and this
CPU (the last bits of a float differ between CPU kinds: their matrix kernels sum in other orders); used to
record the values of bertkit 0.2.0 that tests/test_recipe_parity.py compares against:

    git worktree add /tmp/bertkit-0.2.0 d26f4fc
    cd /tmp/bertkit-0.2.0 && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 BERTKIT_CACHE=off \\
        PYTHONPATH=/tmp/bertkit-0.2.0 /path/to/.venv/bin/python /path/to/tests/record_recipe_metrics.py
"""

import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
HERE = Path(__file__).resolve().parent


def _conftest():
    """tests/conftest.py by its path: the bertkit under test is whichever one is importable (PYTHONPATH)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bertkit_tests_conftest", HERE / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    import torch

    import bertkit
    from bertkit.utils import hardware

    conftest = _conftest()
    out_file = HERE / "data" / "recipe_metrics.json"
    recorded = json.loads(out_file.read_text()) if out_file.is_file() else {}
    key = conftest.parity_key()  # the last bits of floats differ by CPU kind
    with tempfile.TemporaryDirectory() as tmp:
        model = conftest.make_fixed_tiny_bert(Path(tmp) / "tiny")
        values = {r: conftest.recipe_fingerprint(r, model, Path(tmp)) for r in conftest.PARITY_RECIPES}
    recorded[key] = {"bertkit": bertkit.__version__, "bertkit_file": bertkit.__file__,
                     "date": time.strftime("%Y-%m-%d"), "hardware": hardware(),
                     "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                     "python": platform.python_version(), "recipes": values}
    out_file.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"recorded {len(values)} recipes under '{key}' in {out_file}")


if __name__ == "__main__":
    main()

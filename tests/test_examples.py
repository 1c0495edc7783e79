import os
import subprocess
import sys

from .conftest import REPO


def test_notebook_example_runs_on_the_tiny_model(tiny_bert, sst2_dir, tmp_path):
    env = {**os.environ, "BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_DATA": str(sst2_dir),
           "BERTKIT_EXAMPLE_TRAIN": "256", "BERTKIT_EXAMPLE_OUT": str(tmp_path / "run"), "BERTKIT_EXAMPLE_LR": "1e-2",
           "BERTKIT_EXAMPLE_EPOCHS": "3"}  # 24 steps: 8 (one epoch at batch 32) are too few for the tiny model
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "sst2_notebook.py")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    accuracy = float(proc.stdout.split("dev accuracy:")[1].split()[0])
    assert accuracy >= 0.75
    assert "{0: 'negative', 1: 'positive'}" in proc.stdout

"""The README's quickstart snippets run as written, on the tiny model and tiny data (the README marks each tested
block with an HTML comment: `<!-- tested: cli -->`, `<!-- tested: notebook -->`, ...)."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from .conftest import CPU_ENV, REPO, make_tiny_bert, write_sst2

BLOCK = re.compile(r"<!-- tested: (\w+) -->\n```(\w+)\n(.*?)```", re.S)


def snippets() -> dict[str, str]:
    found = {name: code for name, _, code in BLOCK.findall((REPO / "README.md").read_text())}
    assert {"cli", "notebook", "extract_cli", "extract_notebook"} <= set(found), sorted(found)
    return found


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder to run the snippets in: tiny SST-2 files under data/sst2, a sentences.txt, a tiny model with the 4
    layers `--layers last4` needs."""
    root = tmp_path_factory.mktemp("readme")
    tiny_bert = make_tiny_bert(root / "tiny-bert", layers=4)
    write_sst2(root / "data" / "sst2", n_train=128, n_dev=32)
    (root / "sentences.txt").write_text("The cat sat on the mat.\nEU rejects German call to boycott British lamb.\n")
    # on the CPU on any machine: `bertkit evaluate` must give the run's own score exactly (on a GPU its default
    # precision, auto, is bf16, not the run's fp32)
    env = {**os.environ, **CPU_ENV, "BERTKIT_DATA_DIR": str(root / "data"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    return root, env, str(tiny_bert)


def tiny(code: str, model: str) -> str:
    """The snippet with the packaged MiniLM replaced by the tiny model, at a learning rate it learns with."""
    return code.replace("minilm-l6", model)


def test_cli_quickstart(workspace):
    root, env, model = workspace
    for line in tiny(snippets()["cli"], model).splitlines():
        line = line.split("  #")[0].strip()
        if not line or line.startswith("bertkit serve"):  # a server does not return; tests/test_serve.py runs it
            continue
        command = line.replace("bertkit ", f"{shlex.quote(sys.executable)} -m bertkit ")
        if line.startswith("bertkit finetune"):
            command += " --lr 1e-2 --precision fp32"
        proc = subprocess.run(command, shell=True, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (line, proc.stderr[-3000:])
        assert "\x1b[" not in proc.stderr, (line, proc.stderr[-3000:])  # a log: no terminal colour codes
        if line.startswith("echo"):
            (answer,) = [json.loads(x) for x in proc.stdout.splitlines()]
            assert answer["text"] == "a gripping, funny film" and answer["label"] in ("negative", "positive")
    run = root / "runs" / "sst2"
    assert (run / "model.safetensors").is_file() and (run / "config.yaml").is_file()
    metrics = json.loads((run / "metrics.json").read_text())
    assert (metrics["name"], metrics["task"]) == ("sst2", "sequence-classification")
    evaluated = json.loads((run / "eval_sst2_dev.json").read_text())  # `bertkit evaluate`: the run's own score
    assert evaluated["accuracy"] == metrics["dev"]["accuracy"] and evaluated["examples"] == 32


def run_python(code: str, root, env) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_notebook_quickstart(workspace):
    root, env, model = workspace
    code = tiny(snippets()["notebook"], model).replace('"epochs": 1', '"epochs": 3, "lr": 1e-2, "precision": "fp32"')
    out = run_python(code, root, env).splitlines()
    metrics = json.loads((root / "runs" / "notebook" / "metrics.json").read_text())
    assert float(out[-2]) == metrics["dev"]["accuracy"] and metrics["name"] == "sst2"  # the accuracy the run recorded
    predictions = ast.literal_eval(out[-1])
    assert [set(p) for p in predictions] == [{"label", "score", "probabilities"}] * 2
    assert all(p["score"] == max(p["probabilities"].values()) for p in predictions)
    assert (root / "runs" / "notebook" / "model.safetensors").is_file()


def test_extraction_quickstart(workspace):
    root, env, model = workspace
    for line in tiny(snippets()["extract_cli"], model).splitlines():
        line = line.split("  #")[0].strip()
        if line:
            command = line.replace("bertkit ", f"{shlex.quote(sys.executable)} -m bertkit ")
            proc = subprocess.run(command, shell=True, cwd=root, env=env, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, (line, proc.stderr[-3000:])
    out = run_python(tiny(snippets()["extract_notebook"], model), root, env).splitlines()
    assert out[-2] == "[(3, 128), (2, 128)]"  # one row per word, 4 layers × 32 concatenated
    assert out[-1] == "['The', 'cat', 'sat', 'on', 'the', 'mat', '.'] (7, 128)"  # sentences.txt's first line

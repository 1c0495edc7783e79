"""`bertkit finetune glue`: every task with data, each with its recipe, into one table in the BERT paper's Table 1
layout (with --seeds: mean ± std); resumable task by task. Tiny generated GLUE files, the tiny random BERT."""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from bertkit.cli import main

from .conftest import REPO, TINY, python_path, sentence, write_sst2, write_sts

FAST = [*TINY, "--epochs", "1", "--warmup-ratio", "0.1"]


def write_glue(root, seed=0):
    """Tiny files in each task's GLUE layout: CoLA (no header), STS-B (original STS files), QNLI (dev only), WNLI,
    SST-2; no MNLI, QQP, MRPC or RTE."""
    rng = random.Random(seed)
    (root / "cola").mkdir(parents=True)
    for name, n in (("train.tsv", 64), ("dev.tsv", 32)):
        (root / "cola" / name).write_text("".join(f"gj04\t{i % 2}\t{'' if i % 2 else '*'}\t{sentence(rng, i % 2)}\n"
                                                  for i in range(n)))
    write_sts(root / "stsb", n_train=128, n_dev=32)
    (root / "qnli").mkdir()
    (root / "qnli" / "dev.tsv").write_text("index\tquestion\tsentence\tlabel\n" + "".join(
        f"{i}\tWhat is {sentence(rng, 1)}?\t{sentence(rng, i % 2)}\t{'entailment' if i % 2 else 'not_entailment'}\n"
        for i in range(120)))
    (root / "wnli").mkdir()
    for name, n in (("train.tsv", 48), ("dev.tsv", 16)):
        (root / "wnli" / name).write_text("index\tsentence1\tsentence2\tlabel\n" + "".join(
            f"{i}\t{sentence(rng, 0)}\t{sentence(rng, i % 2)}\t{i % 2}\n" for i in range(n)))
    write_sst2(root / "sst2", n_train=64, n_dev=32)
    return root


@pytest.mark.slow
def test_glue_table_with_seeds(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_DATA_DIR", str(tmp_path / "elsewhere"))
    out = tmp_path / "glue"
    assert main(["finetune", "glue", "--model", str(tiny_bert), *FAST, "--seeds", "1,2", "--tasks",
                 "cola,stsb,qnli,wnli,sst2,mrpc", "--data-dir", str(write_glue(tmp_path / "data")),
                 "--output-dir", str(out)]) == 0
    assert os.environ["BERTKIT_DATA_DIR"] == str(tmp_path / "elsewhere")  # --data-dir held for the command only
    table = json.loads((out / "table.json").read_text())
    cols = table["columns"]

    def seeds(task, split, metric):
        return [json.loads((out / task / f"seed-{s}" / "metrics.json").read_text())[split][metric] for s in (1, 2)]

    assert cols["CoLA"]["values"] == [seeds("cola", "dev", "mcc")]
    assert cols["STS-B"]["values"] == [seeds("stsb", "sts-dev", "spearman")]
    assert cols["QNLI"]["values"] == [seeds("qnli", "dev_carved20", "accuracy")] and cols["QNLI"]["carved"] == 20
    assert cols["SST-2"]["values"] == [seeds("sst2", "dev", "accuracy")]
    assert cols["WNLI"]["values"] == [seeds("wnli", "dev", "accuracy")]
    assert all(cols[name] is None for name in ("MNLI-m/mm", "QQP", "MRPC", "RTE"))
    # the average: per seed over the table's numbers present (WNLI left out), then mean ± std over the seeds
    averaged = [seeds("qnli", "dev_carved20", "accuracy"), seeds("sst2", "dev", "accuracy"),
                seeds("cola", "dev", "mcc"), seeds("stsb", "sts-dev", "spearman")]
    assert table["average"]["values"] == pytest.approx(np.mean(averaged, axis=0).tolist())
    assert table["average"]["over"] == 4
    md = (out / "table.md").read_text()
    head, rule, row = md.splitlines()[4:7]
    assert head == "| MNLI-m/mm | QQP | QNLI | SST-2 | CoLA | STS-B | MRPC | RTE | Average |"
    cells = [c.strip() for c in row.strip("|").split("|")]
    cola = 100 * np.array(seeds("cola", "dev", "mcc"))
    assert cells[4] == f"{cola.mean():.1f} ± {cola.std(ddof=1):.1f}" and cells[0] == "—" and "†" in cells[2]
    assert cells[8].endswith("(4 of 9)")
    assert "WNLI (outside the average, as in the paper):" in md and "dev_carved20" in md
    assert "MRPC: not in the table: no mrpc/ folder in --data-dir" in md  # --data-dir is the only root looked at
    assert "MNLI-m/mm: not in the table: not run (not in --tasks)" in md


@pytest.mark.slow
def test_glue_resumes_task_by_task(tiny_bert, tmp_path):
    """Killed during STS-B, after CoLA finished: --resume leaves CoLA as it is, continues STS-B from its checkpoint."""
    env = {**os.environ, "BERTKIT_DATA_DIR": str(write_glue(tmp_path / "data")), "PYTHONPATH": python_path(REPO),
           "TOKENIZERS_PARALLELISM": "false"}
    out = tmp_path / "glue"
    # CoLA: 64 / 16 = 4 steps; STS-B: 128 / 16 = 8 steps, checkpoints every 2, killed after step 6 (before its save)
    args = ["finetune", "glue", "--model", str(tiny_bert), *FAST, "--tasks", "cola,stsb", "--save-every", "2",
            "--output-dir", str(out)]
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "faults.py"), "step:6", *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9 and (out / "cola" / "metrics.json").is_file(), proc.stderr[-2000:]  # SIGKILL
    assert not (out / "stsb" / "metrics.json").exists() and (out / "stsb" / "checkpoints" / "step-0000004").is_dir()
    cola_before = (out / "cola" / "metrics.json").stat().st_mtime_ns
    proc = subprocess.run([sys.executable, "-m", "bertkit.cli", *args, "--resume"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "glue: cola: finished before, not run again" in proc.stdout and "glue: stsb: resuming" in proc.stdout
    assert "resumed from" in proc.stderr and "step-0000004" in proc.stderr
    assert (out / "cola" / "metrics.json").stat().st_mtime_ns == cola_before
    table = json.loads((out / "table.json").read_text())
    assert table["columns"]["STS-B"]["values"] == [[json.loads((out / "stsb" / "metrics.json").read_text())
                                                    ["sts-dev"]["spearman"]]]
    # a later --resume (both finished: nothing trains) keeps the command that trained them in the table
    proc = subprocess.run([sys.executable, "-m", "bertkit.cli", *args[:-6], "--output-dir", str(out), "--resume",
                           "--tasks", "cola"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (out / "table.md").read_text()
    assert text.index("--tasks cola,stsb --save-every 2") < text.index("--resume --tasks cola`") and "(before)" in text
    assert "training loops 0 s in all" not in text

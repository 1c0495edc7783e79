"""Two processes on CPU (gloo), started as a launcher starts them (RANK, WORLD_SIZE, MASTER_* set), each one's exit
code read: every task's evaluation on dev sets smaller than one batch, of odd size and with fewer batches than
processes; resume after SIGKILL (tests/faults.py); SIGTERM stopping both at one step; a NaN loss stopping every
process; FSDP (tests/fsdp_cpu.py)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from bertkit.cli import main

from .conftest import CPU_ENV, REPO, squad_json, write_conll, write_rte, write_sst2

pytestmark = pytest.mark.slow
FAULTS = str(REPO / "tests" / "faults.py")  # `python tests/faults.py POINT ARGS`: bertkit ARGS, SIGKILLed at POINT
EVAL_BATCH = 3  # odd dev set: 13 rows = 5 batches, the last of 1 row; small dev set: 2 rows = 1 batch < 2 processes


def launch(args: list[str], processes: int = 2, env: dict | None = None, timeout: int = 600,
           driver: str | None = None) -> list:
    """`python -m bertkit.cli ARGS` (or `python DRIVER ARGS`) in `processes` processes of one gloo group; their
    CompletedProcess-like results."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # CPU processes on any machine: with a GPU visible, FSDP2's default device mesh would put the shards on it
    base = {**os.environ, **CPU_ENV, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(processes),
            "LOCAL_WORLD_SIZE": str(processes), **(env or {})}
    command = [sys.executable, driver] if driver else [sys.executable, "-m", "bertkit.cli"]
    procs = [subprocess.Popen([*command, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(processes)]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            p.kill()
    return results


def ok(results) -> None:
    for r in results:
        assert r.returncode == 0, r.stderr[-3000:]


# --- the four tasks, each with an odd-sized and a tiny dev set --------------------------------------------------
def sst2_data(d: Path) -> tuple[list[str], list[str]]:
    write_sst2(d, n_train=128, n_dev=15)
    rows = (d / "dev.tsv").read_text().splitlines()
    (d / "dev-odd.tsv").write_text("\n".join(rows[:14]) + "\n")  # header + 13
    (d / "dev-small.tsv").write_text("\n".join(rows[:1] + rows[14:16]) + "\n")  # header + 2
    return ["dev-odd.tsv", "dev-small.tsv"], ["sst2"]


def rte_data(d: Path):
    write_rte(d, n_train=128, n_dev=15)
    rows = (d / "dev.tsv").read_text().splitlines()
    (d / "dev-odd.tsv").write_text("\n".join(rows[:14]) + "\n")
    (d / "dev-small.tsv").write_text("\n".join(rows[:1] + rows[14:16]) + "\n")
    return ["dev-odd.tsv", "dev-small.tsv"], ["rte"]


def conll_data(d: Path):
    d.mkdir(parents=True)
    write_conll(d / "train.txt", 64, seed=0, long_every=16)
    write_conll(d / "valid-odd.txt", 13, seed=1, long_every=4)  # long sentences: more windows than sentences
    write_conll(d / "valid-small.txt", 2, seed=2, long_every=3)
    write_conll(d / "test.txt", 5, seed=3, long_every=2)  # the recipe's test file: scored once at the end
    return ["valid-odd.txt", "valid-small.txt"], ["conll2003", "--max-length", "32"]


def squad_data(d: Path):
    d.mkdir(parents=True)
    rng = random.Random(0)
    (d / "train.json").write_text(json.dumps(squad_json(rng, 48, "t")))
    (d / "validation-odd.json").write_text(json.dumps(squad_json(rng, 13, "v", references=2)))
    (d / "validation-small.json").write_text(json.dumps(squad_json(rng, 2, "s", references=2)))
    return ["validation-odd.json", "validation-small.json"], [
        "squad", "--max-length", "64", "--max-question-length", "16", "--window-overlap", "16"]


def read_examples(path: Path) -> list:
    """The examples of a dev file, in order: texts, CoNLL sentences (word lists) or SQuAD question ids."""
    if path.suffix == ".json":
        return [qa["id"] for a in json.loads(path.read_text())["data"] for p in a["paragraphs"] for qa in p["qas"]]
    if path.suffix == ".txt":
        from bertkit.data.conll import read_conll_file

        return read_conll_file(path)["tokens"]
    return [line.split("\t") for line in path.read_text().splitlines()[1:]]


def predicted(run: Path, split: str, suffix: str) -> list:
    rows = [json.loads(line) for line in (run / f"predictions_{split}.jsonl").read_text().splitlines()]
    return [r["id"] for r in rows] if suffix == ".json" else [r["tokens"] for r in rows] if suffix == ".txt" \
        else rows


@pytest.mark.usefixtures("cpu_only")  # the one process's `evaluate` on the CPU too, on any machine (to 1e-9)
@pytest.mark.parametrize("make", [sst2_data, rte_data, conll_data, squad_data], ids=["sst2", "rte", "ner", "qa"])
def test_two_processes_score_every_dev_example_once_as_one_process_does(make, tiny_bert, tmp_path, capsys):
    data = tmp_path / "data"
    dev_files, (recipe, *task_flags) = make(data)
    run = tmp_path / "run"
    results = launch(["finetune", recipe, *task_flags, "--model", str(tiny_bert), "--data-dir", str(data),
                      "--validation-files", ",".join(dev_files), "--eval-batch-size", str(EVAL_BATCH),
                      "--batch-size", "8", "--max-steps", "4", "--eval-every", "4", "--lr", "1e-3",
                      "--precision", "fp32", "--output-dir", str(run)], timeout=300)
    ok(results)
    assert "a new head" in results[0].stderr and "a new head" not in results[1].stderr  # load notes said once
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["train"]["processes"] == 2
    for name in dev_files:
        split, suffix = Path(name).stem, Path(name).suffix
        examples = read_examples(data / name)
        preds = predicted(run, split, suffix)
        assert len(preds) == len(examples) == metrics["data"][split]  # every example scored, once
        if suffix in (".json", ".txt"):  # question ids, sentences: the same ones, in file order
            assert preds == examples
        capsys.readouterr()
        assert main(["evaluate", "--model", str(run), "--task", recipe, "--file", str(data / name),
                     "--precision", "fp32", "--batch-size", "128"]) == 0
        single = json.loads(capsys.readouterr().out)
        for key, value in metrics[split].items():
            if isinstance(value, (int, float)):
                assert single[key] == pytest.approx(value, abs=1e-9), (split, key)


# --- resume after SIGKILL and NaN stop, two processes -----------------------------------------------------------
def finetune_args(tiny_bert, data, out, *extra):
    # 128 rows / (8 × 2 processes) = 8 steps per epoch, 2 epochs; checkpoints every 3 steps, evaluation every 4
    return ["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(data), "--precision", "fp32",
            "--lr", "1e-2", "--batch-size", "8", "--epochs", "2", "--eval-every", "4", "--save-every", "3",
            "--eval-batch-size", "8", "--output-dir", str(out), *extra]


def test_sigkill_mid_epoch_then_resume_equals_the_uninterrupted_two_process_run(tiny_bert, tmp_path):
    data = write_sst2(tmp_path / "sst2", n_train=128, n_dev=21)
    reference, cut = tmp_path / "reference", tmp_path / "cut"
    ok(launch(finetune_args(tiny_bert, data, reference)))
    killed = launch(["step:7", *finetune_args(tiny_bert, data, cut)], driver=FAULTS)  # epoch 1 of 8 steps
    assert [r.returncode for r in killed] == [-signal.SIGKILL] * 2
    assert (cut / "checkpoints" / "latest").read_text().strip() == "step-0000006"  # resumes 6 batches in
    assert not (cut / "metrics.json").exists()
    resumed = launch(finetune_args(tiny_bert, data, cut, "--resume"))
    ok(resumed)
    assert "resumed from" in resumed[0].stderr
    a, b = load_file(reference / "model.safetensors"), load_file(cut / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)  # bitwise
    for name in ("eval_metrics.jsonl", "metrics.json"):
        ref, res = (json.loads(line) for line in ((reference / name).read_text(), (cut / name).read_text())) \
            if name.endswith(".json") else ((reference / name).read_text(), (cut / name).read_text())
        if name == "metrics.json":
            assert ref["dev"] == res["dev"] and ref["best_step"] == res["best_step"]
        else:
            assert ref == res


def test_sigterm_stops_both_processes_at_one_step_after_a_checkpoint(tiny_bert, tmp_path):
    data = write_sst2(tmp_path / "sst2", n_train=128, n_dev=21)
    out = tmp_path / "run"  # 16 epochs of 8 steps; the processes agree on a stop at most 50 steps (LOG_EVERY) apart
    stopped = launch(["term:13", *finetune_args(tiny_bert, data, out, "--epochs", "16")], driver=FAULTS)
    assert [r.returncode for r in stopped] == [128 + signal.SIGTERM] * 2, stopped[0].stderr[-2000:]
    step = int(re.search(r"stopped by SIGTERM at step (\d+) of 128", stopped[0].stderr).group(1))
    assert 13 <= step <= 13 + 50 and "stopped" not in stopped[1].stderr
    assert (out / "checkpoints" / "latest").read_text().strip() == f"step-{step:07d}"
    assert not (out / "metrics.json").exists()


def test_nan_loss_stops_every_process_with_exit_2_and_writes_no_result(tiny_bert, tmp_path):
    data = write_sst2(tmp_path / "sst2", n_train=128, n_dev=21)
    out = tmp_path / "run"
    results = launch(finetune_args(tiny_bert, data, out, "--lr", "1e12", "--max-grad-norm", "1e30"))
    assert [r.returncode for r in results] == [2, 2], [r.stderr[-2000:] for r in results]
    assert all("the training loss became" in r.stderr and "Traceback" not in r.stderr for r in results)
    assert not (out / "metrics.json").exists() and not (out / "model.safetensors").exists()



def test_a_folder_another_run_holds_stops_every_process_with_exit_2(tiny_bert, tmp_path):
    from bertkit.training.folder import RunFolder

    data = write_sst2(tmp_path / "sst2", n_train=128, n_dev=21)
    out = tmp_path / "run"
    with RunFolder(out):  # the main process finds it locked; the others hear so rather than wait for its name
        results = launch(finetune_args(tiny_bert, data, out), timeout=300)
        assert list(out.iterdir()) == []
    assert [r.returncode for r in results] == [2, 2], [r.stderr[-2000:] for r in results]
    assert all(f"output folder {out} is in use by another run" in r.stderr and "Traceback" not in r.stderr
               for r in results)

# --- FSDP on CPU ---------------------------------------------------------------------------------------------------
def fsdp_env() -> dict:
    """The FSDP_* environment `accelerate launch --config_file examples/accelerate/fsdp2.yaml` sets."""
    import yaml

    fsdp = yaml.safe_load((REPO / "examples" / "accelerate" / "fsdp2.yaml").read_text())["fsdp_config"]
    return {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": str(fsdp["fsdp_version"]),
            "FSDP_AUTO_WRAP_POLICY": fsdp["fsdp_auto_wrap_policy"],
            "FSDP_TRANSFORMER_CLS_TO_WRAP": fsdp["fsdp_transformer_layer_cls_to_wrap"],
            "FSDP_STATE_DICT_TYPE": fsdp["fsdp_state_dict_type"],
            "FSDP_RESHARD_AFTER_FORWARD": str(fsdp["fsdp_reshard_after_forward"]).lower()}


def launch_fsdp(args: list[str], env: dict | None = None, fault: str | None = None) -> list:
    """`launch` through tests/fsdp_cpu.py (FSDP on CPU processes); `fault`: a tests/faults.py point."""
    fault_args = ["--fault", fault] if fault else []
    return launch([*fault_args, *args], env={**fsdp_env(), **(env or {})}, driver=str(REPO / "tests" / "fsdp_cpu.py"))


def test_fsdp_trains_as_ddp_does_saves_plain_weights_and_resumes(tiny_bert, tmp_path):
    from transformers import AutoModelForSequenceClassification

    data = write_sst2(tmp_path / "sst2", n_train=128, n_dev=21)
    options = ["--layer-lr-decay", "0.8", "--freeze-word-embeddings", "--max-grad-norm", "0.1"]  # clipping is active
    fsdp, ddp, cut = tmp_path / "fsdp", tmp_path / "ddp", tmp_path / "cut"
    ok(launch_fsdp(finetune_args(tiny_bert, data, fsdp, *options)))
    assert "FSDP" in json.loads((fsdp / "versions.json").read_text())["distributed_type"]
    assert list((fsdp / "checkpoints" / "step-0000016").glob("pytorch_model_fsdp_0*"))  # sharded checkpoints
    # DDP without the CPU speed-ups (not applied under FSDP) is the same computation
    ok(launch(finetune_args(tiny_bert, data, ddp, *options, "--no-fast-dropout")))
    a, b = load_file(fsdp / "model.safetensors"), load_file(ddp / "model.safetensors")
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    base = load_file(tiny_bert / "model.safetensors")
    assert (a["bert.embeddings.word_embeddings.weight"] == base["embeddings.word_embeddings.weight"]).all()
    model = AutoModelForSequenceClassification.from_pretrained(fsdp / "checkpoints" / "best")
    assert model.config.id2label == {0: "negative", 1: "positive"}
    # killed mid-epoch, resumed from the sharded checkpoint: the same weights, bitwise
    killed = launch_fsdp(finetune_args(tiny_bert, data, cut, *options), fault="step:7")
    assert [r.returncode for r in killed] == [-signal.SIGKILL] * 2
    ok(launch_fsdp(finetune_args(tiny_bert, data, cut, *options, "--resume")))
    c = load_file(cut / "model.safetensors")
    assert all((a[k] == c[k]).all() for k in a)


# --- a memory budget in two processes ----------------------------------------------------------------------------
DIFFERENT_PLANS = """
import os, sys
from bertkit.cli import main
from bertkit.training import budget, loop

rank = os.environ["RANK"]
budget._largest_fitting = lambda *args: (4 if rank == "0" else 8, False)  # the two processes' probes disagree
train_loader = loop.train_loader


def spy(features, task, batch_size, *args):  # the micro-batch each process trains
    print(f"rank {rank} trains micro-batches of {batch_size}", file=sys.stderr, flush=True)
    return train_loader(features, task, batch_size, *args)


loop.train_loader = spy
sys.exit(main(sys.argv[1:]))
"""


def test_processes_whose_memory_probes_disagree_train_the_main_processs_plan(tiny_bert, tmp_path):
    data = write_sst2(tmp_path / "sst2", n_train=128, n_dev=21)
    driver, out = tmp_path / "different_plans.py", tmp_path / "run"
    driver.write_text(DIFFERENT_PLANS)
    results = launch(finetune_args(tiny_bert, data, out, "--memory-budget", "16GB", "--max-steps", "3"),
                     driver=str(driver), timeout=180)
    ok(results)
    assert [f"rank {r} trains micro-batches of 4" in results[r].stderr for r in (0, 1)] == [True, True]
    assert "memory budget 16GB: micro-batch 4 × accumulation 2" in results[0].stderr
    train = json.loads((out / "metrics.json").read_text())["train"]
    assert train["steps"] == 3 and train["examples_seen"] == 3 * 8 * 2  # 3 steps × effective batch × 2 processes
    assert "batch_size: 4\ngrad_accum: 2\n" in (out / "config.yaml").read_text()


def test_a_memory_budget_under_fsdp_plans_trains_and_says_its_probe_was_unsharded(tiny_bert, tmp_path):
    data = write_sst2(tmp_path / "sst2", n_train=128, n_dev=21)
    out = tmp_path / "run"
    results = launch_fsdp(finetune_args(tiny_bert, data, out, "--memory-budget", "16GB", "--max-steps", "3"))
    ok(results)
    assert "memory budget under FSDP: the probe trained the whole model" in results[0].stderr
    train = json.loads((out / "metrics.json").read_text())["train"]
    assert train["steps"] == 3 and train["examples_seen"] == 3 * 8 * 2  # 3 steps × effective batch × 2 processes
    assert "FSDP" in json.loads((out / "versions.json").read_text())["distributed_type"]

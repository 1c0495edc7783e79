"""Crash-safe resume (SIGKILL at several points, injected by tests/faults.py), NaN stops, launch checks and real
2-process data parallel."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from safetensors.torch import load_file

from .conftest import CPU_ENV, REPO, tiny_args, write_sst2

FAULTS = str(REPO / "tests" / "faults.py")


def bertkit(args, env=None, launcher=(), fault=None):
    """`bertkit ARGS` in a subprocess (under `launcher`, e.g. torchrun); with `fault` (a tests/faults.py point such
    as "step:13") the process SIGKILLs itself there."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    if fault:
        cmd = [sys.executable, FAULTS, fault, *args]
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    else:
        cmd = [*launcher, "-m", "bertkit.cli", *args] if launcher else [sys.executable, "-m", "bertkit.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_sst2(tmp_path_factory.mktemp("rel") / "sst2", n_train=256, n_dev=65)


def finetune_args(tiny_bert, data, out, *extra):
    # 256 / 16 = 16 steps per epoch, 2 epochs; evaluation every 8 steps, checkpoints also every 5
    return tiny_args(tiny_bert, "sst2", data, out, "--epochs", "2", "--eval-every", "8", "--save-every", "5",
                     "--eval-batch-size", "8", *extra)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_bert, data):
    out = tmp_path_factory.mktemp("ref") / "run"
    proc = bertkit(finetune_args(tiny_bert, data, out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def same_run(a, b):
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)  # bitwise
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert ma["dev"] == mb["dev"] and ma["best_step"] == mb["best_step"]
    assert (a / "eval_metrics.jsonl").read_text() == (b / "eval_metrics.jsonl").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("point", ["step:13", "eval:16", "checkpoint:10", "pointer:15", "checkpoint:24"])
def test_sigkill_then_resume_equals_uninterrupted_run(point, tiny_bert, data, reference, tmp_path):
    out = tmp_path / "run"
    killed = bertkit(finetune_args(tiny_bert, data, out), fault=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (out / "metrics.json").exists()
    resumed = bertkit(finetune_args(tiny_bert, data, out, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    same_run(reference, out)
    assert not list((out / "checkpoints").glob(".*"))  # no temporary left behind


@pytest.mark.parametrize("point, refused", [("full:11", "checkpoints/step-0000015"),
                                            pytest.param("full:7", "checkpoints/best", marks=pytest.mark.slow)])
def test_a_disk_that_fills_is_one_line_and_resume_equals_the_run(point, refused, tiny_bert, data, reference, tmp_path):
    """The disk fills mid-run (faults.py `full:N`): the next checkpoint (torch's writer: no errno) or the best model
    (safetensors': EFBIG) cannot be written. One line with the path asked for, exit 2, no temporary left; the earlier
    checkpoint stays, and --resume once there is room ends as the uninterrupted run."""
    out = tmp_path / "run"
    full = bertkit(finetune_args(tiny_bert, data, out), fault=point)
    last = full.stderr.strip().splitlines()[-1]
    assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr[-3000:]
    assert last.startswith("bertkit finetune: error: ") and last.endswith(str(out / refused)), last
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]  # no temporary left behind
    assert (out / "checkpoints" / "latest").read_text().strip() in ("step-0000005", "step-0000010")
    resumed = bertkit(finetune_args(tiny_bert, data, out, "--resume"))
    assert resumed.returncode == 0 and "resumed from" in resumed.stderr, resumed.stderr[-3000:]
    same_run(reference, out)


@pytest.mark.slow
@pytest.mark.parametrize("point, sent, again", [("term", signal.SIGTERM, "SIGTERM"), ("int", signal.SIGINT, "Ctrl-C")])
def test_a_signal_stops_at_a_checkpoint_and_resume_equals_uninterrupted_run(tiny_bert, data, reference, tmp_path,
                                                                            point, sent, again):
    out = tmp_path / "run"
    stopped = bertkit(finetune_args(tiny_bert, data, out), fault=f"{point}:13")  # between checkpoints 10 and 15
    assert stopped.returncode == 128 + sent, stopped.stderr[-2000:]
    assert f"{sent.name}: stopping at the end of a step, with a checkpoint to go on from; {again} again" \
        in stopped.stderr
    assert (f"bertkit finetune: stopped by {sent.name} at step 13 of 32, checkpoint "
            f"{out / 'checkpoints' / 'step-0000013'} written; the same command with --resume continues from there"
            ) in stopped.stderr
    assert "Traceback" not in stopped.stderr and not (out / "metrics.json").exists()
    resumed = bertkit(finetune_args(tiny_bert, data, out, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "(step 13)" in resumed.stderr
    same_run(reference, out)


@pytest.mark.slow
def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(tiny_bert, data, reference, tmp_path):
    out = tmp_path / "run"
    killed = bertkit(finetune_args(tiny_bert, data, out), fault="step:22")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    latest = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    assert latest.name == "step-0000020"
    weights = latest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a torn write
    resumed = bertkit(finetune_args(tiny_bert, data, out, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step-0000020 is damaged" in resumed.stderr and "resumed from" in resumed.stderr
    same_run(reference, out)


def test_nan_loss_stops_with_a_message_and_keeps_the_last_good_checkpoint(tiny_bert, data, tmp_path):
    out = tmp_path / "run"
    proc = bertkit(finetune_args(tiny_bert, data, out, "--lr", "1e12", "--max-grad-norm", "1e30"))
    assert proc.returncode == 2 and "the training loss became" in proc.stderr and "Traceback" not in proc.stderr
    kept = (out / "checkpoints" / "latest").is_file()  # a message that names what is there, and a way out untried
    assert ("The last good checkpoint is kept in" if kept else "No checkpoint was written yet") in proc.stderr
    assert proc.stderr.strip().endswith("Try a lower --lr.")  # the run is fp32 already
    for ckpt in (out / "checkpoints").glob("step-*"):
        assert all(t.isfinite().all() for t in load_file(ckpt / "model.safetensors").values())


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
# what a launcher sets for its processes: a test that starts a launcher gives it none of these (a plain shell's)
LAUNCHER_VARIABLES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                      "ACCELERATE_USE_CPU"}


@pytest.mark.slow
def test_two_process_cpu_data_parallel_is_real(tiny_bert, data, tmp_path):
    # 2 processes × 8 examples = 16 per step, as the single-process run with batch 16; 3 epochs = 48 steps
    common = ["--epochs", "3", "--seed", "1"]
    out, single_out = tmp_path / "ddp", tmp_path / "single"
    proc = bertkit(finetune_args(tiny_bert, data, out, "--batch-size", "8", *common), env=CPU_ENV, launcher=TORCHRUN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the one-process run and the evaluation on the CPU too, on any machine: the same arithmetic as the two processes
    assert bertkit(finetune_args(tiny_bert, data, single_out, *common), env=CPU_ENV).returncode == 0
    metrics, single = (json.loads((d / "metrics.json").read_text()) for d in (out, single_out))
    assert metrics["train"]["processes"] == 2 and metrics["train"]["steps"] == single["train"]["steps"] == 48
    assert abs(metrics["dev"]["accuracy"] - single["dev"]["accuracy"]) <= 0.05 and metrics["dev"]["accuracy"] >= 0.9
    lrs = [json.loads(line)["lr"] for line in (out / "train_log.jsonl").read_text().splitlines()]
    single_lrs = [json.loads(line)["lr"] for line in (single_out / "train_log.jsonl").read_text().splitlines()]
    assert lrs == single_lrs  # the schedule advances once per step, not once per process
    # evaluation gathered every example exactly once (65 examples in 9 batches of 8: an uneven split)
    assert len((out / "predictions_dev.jsonl").read_text().splitlines()) == 65
    assert proc.stdout.count('"main_metric"') == 1  # only the main process prints
    evaluated = bertkit(["evaluate", "--model", str(out), "--task", "sst2", "--data-dir", str(data), "--precision",
                         "fp32"], env=CPU_ENV)
    assert evaluated.returncode == 0
    assert json.loads((out / "eval_sst2_dev.json").read_text())["accuracy"] == metrics["dev"]["accuracy"]


@pytest.mark.slow
def test_torchrun_without_the_cpu_flag_is_stopped_with_the_right_command(tiny_bert, data, tmp_path):
    # a machine without a GPU (with one, two processes without the flag are a GPU launch)
    env = {**{k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([*TORCHRUN, "-m", "bertkit.cli", *finetune_args(tiny_bert, data, tmp_path / "x")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert "ACCELERATE_USE_CPU=1 torchrun --standalone --nproc_per_node 2" in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_accelerate_launch_cpu_single_process_is_detected(tiny_bert, data, tmp_path):
    accelerate = shutil.which("accelerate", path=os.path.dirname(sys.executable))
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    proc = subprocess.run([accelerate, "launch", "--cpu", "--num_processes", "2", "-m", "bertkit.cli",
                           *finetune_args(tiny_bert, data, tmp_path / "x")], capture_output=True, text=True,
                          env=env, timeout=600)
    # accelerate launch exits 1 whenever its process fails; that process's own status 2 is bertkit's user error
    # (a crash would be 1): the launch check stopped it, with the right command, before anything was written
    assert proc.returncode == 1 and "returned non-zero exit status 2." in proc.stderr, proc.stderr[-3000:]
    assert "starts ONE process" in proc.stderr and "torchrun --standalone --nproc_per_node N" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_pickle_weights_need_an_explicit_opt_in(tiny_bert, data, tmp_path, capsys):
    import torch
    from transformers import AutoModel

    from bertkit.cli import main

    pickled = tmp_path / "pickled"  # the tiny base model with its weights as a pickle instead of safetensors
    pickled.mkdir()
    for f in tiny_bert.iterdir():
        if f.name != "model.safetensors":
            (pickled / f.name).write_bytes(f.read_bytes())
    torch.save(AutoModel.from_pretrained(tiny_bert).state_dict(), pickled / "pytorch_model.bin")
    args = ["finetune", "sst2", "--model", str(pickled), "--data-dir", str(data), "--max-steps", "2", "--precision",
            "fp32", "--output-dir"]
    assert main([*args, str(tmp_path / "refused")]) == 2
    assert "--allow-pickle" in capsys.readouterr().err and not (tmp_path / "refused").exists()
    assert main([*args, str(tmp_path / "allowed"), "--allow-pickle"]) == 0


def test_ctrl_c_twice_stops_at_once_and_a_signal_ignored_at_start_stays_ignored(capfd):
    from types import SimpleNamespace

    from bertkit.training.launch import StopSignal

    one = SimpleNamespace(num_processes=1)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's foreground process
    try:
        with pytest.raises(KeyboardInterrupt), StopSignal(one, 50) as stop:
            assert not stop.due(1)
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.due(2) and stop.signum == signal.SIGINT
            os.kill(os.getpid(), signal.SIGINT)  # again: Python's own handler, at once
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert "SIGINT: stopping at the end of a step" in capfd.readouterr().err
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a shell script's background job
        with StopSignal(one, 50) as stop:
            os.kill(os.getpid(), signal.SIGINT)
            assert not stop.due(1)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_processes_agree_on_a_stop_about_every_two_seconds_and_at_most_every_50_steps(monkeypatch):
    """Several processes agree at the first step they make, then about every `seconds` at the pace they measured
    together at the last agreement (at least every step, at most `most` steps apart): steps of 0.5 s agree every 4
    steps; once steps take 5 s, every step from the agreement that measured them; a signal is heard at the next."""
    from types import SimpleNamespace

    import torch

    from bertkit.training import launch
    from bertkit.training.launch import StopSignal, agreement_interval

    assert agreement_interval(5.0, 10, 2.0, 50) == 4 and agreement_interval(5.0, 1, 2.0, 50) == 1
    assert agreement_interval(0.05, 50, 2.0, 50) == 50 and agreement_interval(0.0, 3, 2.0, 50) == 50
    clock = [100.0]
    monkeypatch.setattr(launch.time, "perf_counter", lambda: clock[0])
    reduced = []  # what each agreement summed: [processes signalled, seconds]; the other process as this one
    two = SimpleNamespace(num_processes=2, device=torch.device("cpu"),
                          reduce=lambda t, reduction: reduced.append(t.tolist()) or t * 2)
    agreed = []
    with StopSignal(two, 50, seconds=2.0) as stop:
        for step in range(1, 20):
            clock[0] += 0.5 if step < 10 else 5.0
            if stop.due(step):
                break
            agreed += [step] if len(reduced) > len(agreed) else []
            if step == 13:
                stop.signum = signal.SIGTERM
    assert agreed == [1, 5, 9, 13] and step == 14  # 0.5 s a step: every 4; steps 10-13 took 5 s: then every one
    assert reduced[-2:] == [[0.0, 20.0], [1.0, 5.0]]


@pytest.mark.parametrize("where", ["making the temporary", "writing", "renaming"])
@pytest.mark.parametrize("is_dir", [False, True])
def test_an_interruption_anywhere_in_an_atomic_write_leaves_only_what_was_there(where, is_dir, tmp_path, monkeypatch):
    """The temporary is named before it is made and made inside the `try` that removes it (`mkdtemp` made it
    before: a SIGTERM there left it behind)."""
    from pathlib import Path

    from bertkit.utils import atomic_path

    final = tmp_path / "out"
    before = final / "w" if is_dir else final
    if is_dir:
        final.mkdir()
    before.write_text("before")
    mkdir, replace = Path.mkdir, os.replace

    def interrupted(real):
        def call(*args, **kwargs):
            real(*args, **kwargs)  # done, then the signal: the window the old code left open
            raise KeyboardInterrupt
        return call

    if where == "making the temporary":
        monkeypatch.setattr(Path, "mkdir", interrupted(mkdir))
    elif where == "renaming":  # a file's one rename, or the first of a folder's two (the old one set aside)
        monkeypatch.setattr(os, "replace", interrupted(replace))
    with pytest.raises(KeyboardInterrupt), atomic_path(final, is_dir=is_dir) as tmp:
        monkeypatch.setattr(Path, "mkdir", mkdir)
        (tmp / "w" if is_dir else tmp).write_text("new")
        if where == "writing":
            raise KeyboardInterrupt
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert before.read_text() == ("new" if where == "renaming" and not is_dir else "before")


@pytest.mark.parametrize("command, limit", [("extract-npy", 48 << 10), ("predict", 4 << 10),
                                            pytest.param("extract-safetensors", 48 << 10, marks=pytest.mark.slow),
                                            pytest.param("evaluate", 64, marks=pytest.mark.slow)])
def test_an_output_on_a_full_disk_is_one_line_naming_it_and_nothing_is_left(command, limit, tiny_bert, data, reference,
                                                                             tmp_path):
    """No file may grow past `limit` bytes (RLIMIT_FSIZE: EFBIG, as ENOSPC on a full disk): numpy's and
    safetensors' shards, predict's and evaluate's outputs. One line naming the output asked for, exit 2, nothing
    half-written beside it (was a traceback, exit 1: numpy's "N requested and M written" carries no errno)."""
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(line.split("\t")[0] + "\n" for line in (data / "train.tsv").read_text().splitlines()[1:]))
    out = tmp_path / "out"
    args = {"extract-npy": ["extract", "--model", str(tiny_bert), "--input", str(texts), "--output", str(out),
                            "--layers", "last2", "--pool", "none", "--format", "npy"],
            "predict": ["predict", "--model", str(reference), "--input", str(texts), "--output", str(out)],
            "evaluate": ["evaluate", "--model", str(reference), "--output", str(out)]}
    args["extract-safetensors"] = [*args["extract-npy"][:-1], "safetensors"]
    proc = bertkit(args[command], fault=f"fsize:{limit}")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last.startswith(f"bertkit {command.split('-')[0]}: error: ") and last.endswith(f": {out}"), last
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt"]  # no output, no temporary beside it

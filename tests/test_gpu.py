"""The CUDA side of the graphed step and graphed inference: run on a machine with a GPU (skipped elsewhere; the logic
they wrap is checked on a CPU by test_graphed_step.py and test_graphed_inference.py)."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from .conftest import TINY_RUNS, Cut, cloze_registered, cut_training, tiny_run, tiny_run_args

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def tiny_classifier(tiny_bert, dropout: float):
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_bert), num_labels=2,
                                                               hidden_dropout_prob=dropout,
                                                               attention_probs_dropout_prob=dropout).cuda().train()
    return model


def loss_increments(tiny_bert, dropout: float, accumulation: int, calls: int = 6, compiled: bool = False) -> list:
    """The loss each call of a GraphedStep's backward adds, on one fixed batch (the later calls are replays; with no
    accumulation each is a whole step, at a learning rate of 0 so that the weights stay); `compiled`: the model
    torch.compile'd (inductor), as --compile does."""
    from bertkit.tasks.base import Task
    from bertkit.training.graphed import WARMUP, GraphedStep

    model = tiny_classifier(tiny_bert, dropout)
    if compiled:
        model.compile(dynamic=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)
    accelerator = SimpleNamespace(device=torch.device("cuda"), gradient_accumulation_steps=accumulation)
    task = SimpleNamespace(compute_loss=Task.compute_loss.__get__(SimpleNamespace()))
    step = GraphedStep(accelerator, model, optimizer, task, 1.0, batch_size=4, log=print)
    ids = torch.randint(1000, 2000, (4, 16), device="cuda")
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 1, 0, 1]).cuda()}
    seen = []
    for _ in range(calls):
        before = step.loss_sum.item()
        step.backward(batch)
        seen.append(step.loss_sum.item() - before)
        if accumulation == 1:
            assert step.update() and not step.updated  # the whole step's graph has updated already
    assert step.failed is None and step.graphs and step.replays == calls - WARMUP[0]
    assert step.whole == (accumulation == 1) and step.update_graph is None
    assert step.fold_clip  # a fused AdamW on CUDA clips as it steps
    return seen[WARMUP[0]:]


@pytest.mark.parametrize("accumulation, compiled", [(1, False), (2, False), (1, True)])
def test_replays_draw_new_dropout_masks(tiny_bert, accumulation, compiled):
    try:
        with_dropout = loss_increments(tiny_bert, 0.3, accumulation, compiled=compiled)
        assert len(set(with_dropout)) == len(with_dropout)  # a new mask at every replay
        without = loss_increments(tiny_bert, 0.0, accumulation, compiled=compiled)
        assert max(without) - min(without) < 1e-6  # the same batch, no dropout: the same loss
    finally:
        torch._dynamo.reset()


def evaluation_accuracy(run: Path) -> list:
    """[(step, dev accuracy)] of a run's evaluations."""
    lines = (run / "eval_metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["dev/accuracy"]) for r in map(json.loads, lines)]


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_a_graphed_run_trains_like_the_static_step(grad_accum, tiny_bert, sst2_dir, tmp_path, capsys):
    """Whole-step graphs (no accumulation) or forward-and-backward graphs beside an update graph (accumulation); both
    runs with query, key and value in one matmul (a GPU's model change). The graphed run's evaluations score as the
    static run's."""
    from safetensors.torch import load_file

    from .conftest import fit, small_config

    runs = {}
    for kind in ("static", "graphed"):
        runs[kind] = tmp_path / kind
        _, result = fit(tiny_bert, small_config(sst2_dir, runs[kind], train_step=kind, batch_size=24 // grad_accum,
                                                grad_accum=grad_accum, max_steps=30, dropout=0.0,
                                                attention_dropout=0.0, eval_every="10"))
        step = result["train"]["step"]
        assert step["kind"] == kind
        err = capsys.readouterr().err
        assert "fused_qkv" in err  # the training line's model changes
        assert "CUDA graph capture failed" not in err
    assert step["capture_failed"] is None and step["graphs"] >= 2 and step["replays"] > 15  # a replay a full step
    seen = [json.loads((runs[k] / "metrics.json").read_text())["train"]["examples_seen"] for k in runs]
    if grad_accum == 1:
        assert seen == [2 * 256 + 8 * 24] * 2  # 11 steps an epoch (the 11th of 16 examples, eager when graphed)
    assert seen[0] == seen[1]
    a, b = (load_file(str(runs[k] / "model.safetensors")) for k in runs)
    for k in a:  # the same arithmetic; kernels may differ in rounding between a captured and an eager launch
        assert torch.allclose(a[k], b[k], atol=1e-4), k
    scored = [evaluation_accuracy(runs[k]) for k in runs]
    assert [x for x, _ in scored[0]] == [x for x, _ in scored[1]] == [10, 20, 30]
    for x, y in zip(*scored, strict=True):  # 64 dev sentences: at most one answer apart
        assert x[1] == pytest.approx(y[1], abs=1 / 64 + 1e-9), (x, y)


def test_an_fp16_run_is_graphed_with_its_loss_scale_on_the_device(tiny_bert, sst2_dir, tmp_path, capsys):
    """fp16 (auto's choice on a GPU without bf16: V100, T4) with --train-step graphed: accelerate's GradScaler's scale
    checked, backed off and grown inside the graphs (`LossScale`), overflowed steps skipped by the fused AdamW on the
    device. Against accelerate's own eager fp16 step and the static step: the same final loss scale (its checkpoint's
    scaler.pt) and the same weights, to the rounding in which a captured and an eager launch may differ."""
    from safetensors.torch import load_file

    from .conftest import fit, small_config

    runs, scales = {}, {}
    for kind in ("eager", "static", "graphed"):
        runs[kind] = tmp_path / kind
        _, result = fit(tiny_bert, small_config(sst2_dir, runs[kind], train_step=kind, precision="fp16",
                                                batch_size=24, max_steps=30, dropout=0.0, attention_dropout=0.0,
                                                eval_every="100"))
        assert result["train"]["step"]["kind"] == kind and result["train"]["precision"] == "fp16"
        assert "CUDA graph capture failed" not in capsys.readouterr().err
        latest = (runs[kind] / "checkpoints" / "latest").read_text().strip()
        scales[kind] = torch.load(runs[kind] / "checkpoints" / latest / "scaler.pt", weights_only=True)["scale"]
    step = result["train"]["step"]
    assert step["capture_failed"] is None and step["graphs"] >= 1 and step["replays"] > 15
    assert scales["eager"] == scales["static"] == scales["graphed"], scales
    weights = {k: load_file(str(runs[k] / "model.safetensors")) for k in runs}
    for name in weights["eager"]:
        for kind in ("static", "graphed"):
            assert torch.allclose(weights[kind][name], weights["eager"][name], atol=1e-4), (kind, name)


def test_a_compiled_model_is_captured(tiny_bert, sst2_dir, tmp_path):
    """--compile (inductor, dynamic lengths, per layer) under the graphed step: the graphs hold inductor's kernels
    and train to about the plain graphed run's weights (dropout off so that the two compare; its masks under
    compile: test_replays_draw_new_dropout_masks)."""
    from safetensors.torch import load_file

    from .conftest import fit, small_config

    runs = {}
    try:
        for name, compile_ in (("plain", False), ("compiled", True)):
            runs[name] = tmp_path / name
            _, result = fit(tiny_bert, small_config(sst2_dir, runs[name], batch_size=24, max_steps=30, dropout=0.0,
                                                    attention_dropout=0.0, eval_every="100", compile=compile_))
            step = result["train"]["step"]
            assert step["kind"] == "graphed" and step["capture_failed"] is None and step["replays"] > 15, step
        assert "--compile" in step["reason"]
    finally:
        torch._dynamo.reset()
    a, b = (load_file(str(runs[k] / "model.safetensors")) for k in runs)
    for k in a:  # inductor's fused kernels round differently
        assert torch.allclose(a[k], b[k], atol=1e-3), k


def test_a_tf32_run_is_graphed_and_puts_the_switches_back(tiny_bert, sst2_dir, tmp_path):
    """--precision tf32: fp32 weights and activations, CUDA matmuls on TF32 tensor cores for the run only; the step
    graphed as an fp32 run's is."""
    from .conftest import fit, small_config

    before, during = torch.backends.cuda.matmul.allow_tf32, []
    cfg = small_config(sst2_dir, tmp_path / "run", precision="tf32", batch_size=24, max_steps=30, eval_every="100")
    _, result = fit(tiny_bert, cfg, callbacks=[lambda trainer, state: during.append(
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))])
    step = result["train"]["step"]
    assert step["kind"] == "graphed" and step["capture_failed"] is None and step["replays"] > 15, step
    assert during and set(during) == {(True, True)} and torch.backends.cuda.matmul.allow_tf32 == before
    assert json.loads((tmp_path / "run" / "versions.json").read_text())["precision"] == "tf32"


def test_a_class_weighted_loss_is_captured(tiny_bert, sst2_dir, tmp_path):
    """With class weights the graphed step still replays (their tensor is made once, not copied from the host at
    every step, which a capture refuses)."""
    from bertkit import SequenceClassification, Trainer

    from .conftest import small_config

    cfg = small_config(sst2_dir, tmp_path / "run", precision="bf16", batch_size=24, max_steps=30, eval_every="100")
    train, evals, names = SequenceClassification.load_data(cfg)
    task = SequenceClassification.from_pretrained(str(tiny_bert), label_names=names, class_weights=[1.0, 2.0])
    step = Trainer(task, cfg).fit(train, evals)["train"]["step"]
    assert step["kind"] == "graphed" and step["capture_failed"] is None and step["replays"] > 15, step


def test_a_memory_budget_on_the_gpu_is_planned_there(tiny_bert, sst2_dir, tmp_path):
    """`--memory-budget` on a GPU (budget.plan_cuda, torch's peak allocated memory): the recipe's micro-batch under a
    large budget; under one below what the process already holds, a clear error before training (the search between
    is checked on a CPU with the counters stood in for: tests/test_memory.py; a tiny model's micro-batches differ by
    less than the plan's 1 MB resolution next to what earlier tests left allocated)."""
    from bertkit.errors import BertkitError

    from .conftest import fit, small_config

    kw = dict(precision="bf16", batch_size=24, max_steps=3, eval_every="100")
    _, large = fit(tiny_bert, small_config(sst2_dir, tmp_path / "large", memory_budget="16GB", **kw))
    plan = large["memory"]["budget_plan"]
    assert plan["device"] == "cuda" and (plan["micro_batch"], plan["grad_accum"]) == (24, 1)
    assert large["train"]["examples_seen"] == 3 * 24
    with pytest.raises(BertkitError, match="the run does not fit on the GPU"):
        fit(tiny_bert, small_config(sst2_dir, tmp_path / "small", memory_budget="1MB", **kw))


def test_graphed_inference_answers_as_eager(tiny_bert):
    from bertkit import SequenceClassification
    from bertkit.graphs import GraphedForward

    task = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["neg", "pos"])
    task.model.cuda().eval()
    rows = [{"text": t} for t in ["a good film", "a dull and boring plot that never ends", "fine"] * 20]
    answers = [task.predict_rows(rows) for _ in range(3)]  # eager, captured, replayed
    for eager, replayed in zip(answers[0], answers[2], strict=True):
        assert eager["label"] == replayed["label"] and eager["score"] == pytest.approx(replayed["score"], abs=1e-5)
    forward = task.__dict__["_graphed_forwards"]["fp32"]
    assert isinstance(forward, GraphedForward) and forward.graphs and forward.failed is None


@pytest.mark.parametrize("pool", ["mean", "cls"])  # pooled to words on the GPU; copied to the host first
def test_features_on_the_gpu_are_the_cpus(pool, tiny_bert):
    import numpy as np

    from bertkit.extract.extractor import FeatureExtractor

    sentences = [s.split() for s in ["a good film", "a dull and boring plot that never ends", "fine"] * 20]
    cpu = FeatureExtractor(str(tiny_bert), layers="last2", pool=pool, precision="fp32", device="cpu")(sentences)
    fx = FeatureExtractor(str(tiny_bert), layers="last2", pool=pool, precision="fp32", device="cuda")
    for _ in range(3):  # eager, captured, replayed
        for a, b in zip(cpu, fx(sentences), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("name", list(TINY_RUNS))  # every task's shapes: pairs, windows, per-position labels, choices
def test_every_task_trains_graphed_on_the_gpu(name, tmp_path_factory, tiny_bert, tmp_path):
    """Each built-in task and the plugin fine-tune through the graphed step (one length bucket: a shape's two
    warm-ups, its capture, then replays) with no capture failing, to a finite loss."""
    from bertkit.cli import main

    args = tiny_run_args(tmp_path_factory, tiny_bert, name, tmp_path / "run")
    with cloze_registered() if name == "cloze" else contextlib.nullcontext():
        assert main([*args, "--length-buckets", "1", "--max-steps", "8", "--eval-every", "8"]) == 0
    step = json.loads((tmp_path / "run" / "metrics.json").read_text())["train"]["step"]
    assert step["kind"] == "graphed" and step["capture_failed"] is None and step["graphs"] == 1, step
    assert step["replays"] >= 1, step
    losses = [json.loads(line)["loss"] for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert losses and all(map(math.isfinite, losses))


def test_a_graphed_run_cut_and_resumed_ends_as_the_uninterrupted_one(tmp_path_factory, tiny_bert, tmp_path):
    """Resume through the graphed step: the cut run's resume warms up and captures its shapes again where the
    uninterrupted run replays them, with the CUDA generator restored from the checkpoint (accelerate's state): the same
    losses at every logged step and the same weights at the end, to the rounding in which a captured and an eager
    launch may differ (test_a_graphed_run_trains_like_the_static_step)."""
    from safetensors.torch import load_file

    from bertkit.cli import main

    def args(out):  # 20 steps of batch 16 over two buckets, a checkpoint every 6 steps, dropout on
        return [*tiny_run_args(tmp_path_factory, tiny_bert, "sst2", out), "--length-buckets", "2", "--max-steps", "20",
                "--eval-every", "10", "--save-every", "6"]

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(args(whole)) == 0

    with cut_training(lambda state: state["global_step"] == 9), pytest.raises(Cut):  # 3 after step 6's checkpoint
        main(args(cut))
    assert main([*args(cut), "--resume"]) == 0
    ran, resumed = (json.loads((d / "metrics.json").read_text())["train"] for d in (whole, cut))
    assert ran["step"]["kind"] == resumed["step"]["kind"] == "graphed", (ran["step"], resumed["step"])
    assert ran["steps"] == resumed["steps"] == 20 and ran["step"]["replays"] > resumed["step"]["replays"] > 0

    def logged(d):
        return [(r["step"], r["loss"]) for r in map(json.loads, (d / "train_log.jsonl").read_text().splitlines())]

    for (s1, l1), (s2, l2) in zip(logged(whole), logged(cut), strict=True):
        assert s1 == s2 and l1 == pytest.approx(l2, rel=1e-5), (s1, l1, l2)
    last = Path("checkpoints", (whole / "checkpoints" / "latest").read_text().strip(), "model.safetensors")
    a, b = load_file(str(whole / last)), load_file(str(cut / last))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-4), (k, (a[k] - b[k]).abs().max().item())


@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-4), ("bf16", 2e-2)])  # bf16: auto's choice there
def test_serve_on_the_gpu_answers_as_the_cpu(tmp_path_factory, tiny_bert, precision, tolerance):
    """`bertkit serve`'s engine on the GPU (graphed, bucketed forwards) gives the answers of the run's model on the
    CPU in fp32, at its first call (eager), second (captured) and third (replayed); in bf16 up to its rounding."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serve.app import create_app
    from bertkit.serve.engine import Engine
    from bertkit.tasks import load_task

    run = tiny_run(tmp_path_factory, tiny_bert, "sst2")
    texts = ["the film was wonderful and funny", "a dull , tedious plot", "null", "the story is " * 40 + "weak"] * 5
    cpu = load_task(str(run))
    cpu.model.cpu().eval()
    expected = cpu.predict_rows([{"text": t} for t in texts], probs=True)
    engine = Engine(str(run), precision=precision)
    assert (engine.device, engine.precision) == ("cuda", precision)
    with TestClient(create_app(engine)) as client:
        for _ in range(3):
            r = client.post("/predict", json={"texts": texts, "probs": True})
            assert r.status_code == 200, r.text
            for served, want in zip(r.json()["predictions"], expected, strict=True):
                assert served["probabilities"] == pytest.approx(want["probabilities"], abs=tolerance)
                if abs(want["score"] - 0.5) > tolerance:  # a label rounding cannot flip
                    assert served["label"] == want["label"]

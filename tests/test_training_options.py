"""Optional training tweaks: frozen word embeddings, a re-initialised pooler, layer-wise learning-rate decay, gradient
norms in the training log, dropout rates, early stopping."""

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from bertkit.config_files import load_recipe
from bertkit.cpu import dropout as fd
from bertkit.errors import BertkitError
from bertkit.training.changes import reinit_pooler, reset_dropout, set_dropout
from bertkit.training.optim import build_optimizer

from .conftest import fit, small_config

WORDS = "bert.embeddings.word_embeddings.weight"


def test_freeze_word_embeddings_keeps_them_and_trains_the_rest(tiny_bert, sst2_dir, tmp_path):
    before = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2).state_dict()
    task, _ = fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", freeze_word_embeddings=True, epochs=1))
    after = load_file(str(tmp_path / "run" / "model.safetensors"))
    assert torch.equal(after[WORDS], before[WORDS])
    for key in ("bert.embeddings.position_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight"):
        assert not torch.equal(after[key], before[key])
    assert task.model.get_input_embeddings().weight.requires_grad  # unfrozen again for later use


def test_reinit_pooler_is_seeded_and_needs_a_pooler(tiny_bert):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    dense = model.bert.pooler.dense
    torch.nn.init.constant_(dense.weight, 0.5)
    torch.nn.init.constant_(dense.bias, 0.5)
    torch.manual_seed(1)
    reinit_pooler(model)
    first = dense.weight.detach().clone()
    assert dense.bias.abs().sum() == 0
    assert first.std().item() == pytest.approx(model.config.initializer_range, rel=0.2)
    torch.manual_seed(1)
    reinit_pooler(model)
    assert torch.equal(dense.weight, first)
    with pytest.raises(BertkitError, match="no pooler"):
        reinit_pooler(AutoModelForTokenClassification.from_pretrained(tiny_bert, num_labels=3))
    with pytest.raises(BertkitError, match="the token-classification head does not use the pooler"):
        load_recipe("conll2003", {"reinit_pooler": True})
    assert load_recipe("sst2", {"reinit_pooler": True}).reinit_pooler


def test_layer_lr_decay_groups(tiny_bert, sst2_dir, tmp_path):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    layers = model.config.num_hidden_layers
    lr_of = {}
    for cfg_decay in (1.0, 0.5):
        opt = build_optimizer(model, small_config(sst2_dir, tmp_path, lr=1.0, layer_lr_decay=cfg_decay))
        lr_of[cfg_decay] = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
        assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))
    params = dict(model.named_parameters())
    assert set(lr_of[1.0].values()) == {1.0}
    assert lr_of[0.5][id(params["classifier.weight"])] == 1.0
    assert lr_of[0.5][id(params["bert.pooler.dense.weight"])] == 1.0
    top = f"bert.encoder.layer.{layers - 1}.output.dense.weight"
    assert lr_of[0.5][id(params[top])] == 0.5
    assert lr_of[0.5][id(params["bert.encoder.layer.0.output.dense.weight"])] == 0.5 ** layers
    assert lr_of[0.5][id(params[WORDS])] == 0.5 ** (layers + 1)
    wd = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert wd[id(params["bert.encoder.layer.0.output.dense.bias"])] == 0.0 and wd[id(params[top])] == 0.01


@pytest.mark.usefixtures("cpu_only")  # a CUDA graph would replay the clipping without calling it
def test_train_log_has_gradient_norms(tiny_bert, sst2_dir, tmp_path, monkeypatch):
    """Each log line: the mean gradient norm before clipping over the steps since the previous line, and how many of
    them were clipped (norm above max_grad_norm), against norms measured here as each step clips."""
    import json

    norms = []
    clip = torch.nn.utils.clip_grad_norm_  # what accelerate's and the static step's clipping call

    def measured(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        norms.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in parameters])).item())
        return clip(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", measured)
    # 16 steps logged at the evaluations (steps 8 and 16); a bound the norms cross, so some steps clip, some not
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", epochs=1, max_grad_norm=0.5))
    rows = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert len(norms) == 16 and [r["step"] for r in rows] == [8, 16]
    assert 0 < sum(n > 0.5 for n in norms) < 16
    for r, since in zip(rows, (norms[:8], norms[8:]), strict=True):
        assert r["grad_norm"] == pytest.approx(sum(since) / 8, rel=1e-5)
        assert r["clipped_steps"] == sum(n > 0.5 for n in since)


def test_a_log_line_averages_finite_gradient_norms_and_counts_the_others(tmp_path):
    """A stretch of 4 steps, 2 of them with an inf or NaN gradient norm (fp16's overflows, skipped): the line's
    gradient norm is the mean of the 2 finite ones, and the other 2 are counted; without any, the key is left out."""
    import json
    import time
    from types import SimpleNamespace

    from bertkit.training.results import record_loss

    def line(grad_stats):
        step = SimpleNamespace(loss_sum=torch.tensor(4.0), grad_stats=torch.tensor(grad_stats))
        trainer = SimpleNamespace(
            since_log=[4, time.perf_counter() - 1], step=step, output_dir=tmp_path, ckpt_dir=tmp_path,
            accelerator=SimpleNamespace(reduce=lambda t, reduction: t, num_processes=1, is_main_process=True),
            scheduler=SimpleNamespace(get_last_lr=lambda: [0.1]), cfg=SimpleNamespace(batch_size=8, report_to=[]),
            memory=SimpleNamespace(record=lambda phase: {}, reset_peak=lambda: None))
        record_loss(trainer, {"global_step": 4}, SimpleNamespace(set_postfix=lambda **kw: None))
        assert step.grad_stats.tolist() == [0.0] * 4  # read out, and zeroed for the next stretch
        return json.loads((tmp_path / "train_log.jsonl").read_text().splitlines()[-1])

    row = line([3.0, 1.0, 2.0, 2.0])
    assert (row["loss"], row["grad_norm"], row["clipped_steps"], row["nonfinite_grad_steps"]) == (1.0, 1.5, 1, 2)
    assert "nonfinite_grad_steps" not in line([6.0, 0.0, 4.0, 0.0])
    assert "grad_norm" not in line([0.0, 0.0, 0.0, 4.0])  # every step overflowed: no norm to average


def test_early_stopping_stops_after_evaluations_without_improvement(tiny_bert, sst2_dir, tmp_path):
    # lr 0: the metric cannot improve after the first evaluation, so patience 2 stops at the third (step 12)
    cfg = small_config(sst2_dir, tmp_path / "run", lr=0.0, eval_every="4", early_stopping=2)
    _, result = fit(tiny_bert, cfg)
    evals = (tmp_path / "run" / "eval_metrics.jsonl").read_text().splitlines()
    assert result["train"]["steps"] == 12 and len(evals) == 3 and result["best_step"] == 4
    _, resumed = fit(tiny_bert, cfg, resume=True)  # trained on to its next evaluation, and a fourth line
    assert resumed["train"]["steps"] == 12 and (tmp_path / "run" / "eval_metrics.jsonl").read_text().splitlines() \
        == evals


def _rates(model):
    """{(is attention dropout, rate)} over the model's dropout modules."""
    return {(n.endswith("self.dropout"), m.p) for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)}


def test_set_dropout_sets_attention_and_hidden_rates_and_resets(tiny_bert):
    model = fd.fast_dropout(AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2))
    p = model.config.hidden_dropout_prob
    assert p > 0 and _rates(model) == {(True, model.config.attention_probs_dropout_prob), (False, p)}
    old = set_dropout(model, hidden=0.0, attention=0.25)
    assert _rates(model) == {(True, 0.25), (False, 0.0)}
    assert len(old) == sum(isinstance(m, torch.nn.Dropout) for m in model.modules())
    set_dropout(model, attention=0.0)  # None leaves the hidden rate alone
    assert _rates(model) == {(True, 0.0), (False, 0.0)}
    ids = torch.randint(1000, 5000, (2, 9))
    model.train()  # nothing drops: training-mode outputs are the evaluation-mode ones
    train_logits = model(input_ids=ids).logits
    torch.testing.assert_close(train_logits, model.eval()(input_ids=ids).logits)
    reset_dropout(fd.restore_dropout(model), old)  # by name, so after the swap back too
    assert _rates(model) == {(True, model.config.attention_probs_dropout_prob), (False, p)}


def test_trainer_trains_with_the_rates_and_saves_the_checkpoints_own(tiny_bert, sst2_dir, tmp_path):
    seen = []
    cfg = small_config(sst2_dir, tmp_path / "run", dropout=0.0, attention_dropout=0.05, epochs=1)
    task, _ = fit(tiny_bert, cfg, callbacks=[lambda trainer, state: seen.append(_rates(trainer.model))])
    assert seen and all(r == {(True, 0.05), (False, 0.0)} for r in seen)
    config = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run").config
    assert config.hidden_dropout_prob == task.model.config.hidden_dropout_prob > 0
    assert {p for _, p in _rates(task.model)} == {config.hidden_dropout_prob, config.attention_probs_dropout_prob}
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (recorded["dropout"], recorded["attention_dropout"]) == (0.0, 0.05)


@pytest.mark.parametrize("value", [1.0, -0.1])
def test_dropout_rates_are_checked(value):
    with pytest.raises(BertkitError, match="'attention_dropout' must be in"):
        load_recipe("sst2", {"attention_dropout": value})


def test_model_changes_are_undone_exactly_also_when_training_raises(tiny_bert):
    """Every change training makes (dropout rates, frozen embeddings, gradient checkpointing, the CPU speed-ups with
    the kept heap) is undone on the way out of `model_changes` when the block raises: the same module types, rates,
    trainable flags, forward and weights."""
    import torch

    from bertkit.config import run_config
    from bertkit.tasks import SequenceClassification
    from bertkit.training.changes import model_changes

    task = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["negative", "positive"])
    model = task.model

    def snapshot():
        return ([(name, type(m).__name__, getattr(m, "p", None)) for name, m in model.named_modules()],
                {n: p.requires_grad for n, p in model.named_parameters()},
                any(getattr(m, "gradient_checkpointing", False) for m in model.modules()),
                model.config._attn_implementation, "forward" in model.__dict__,
                {k: v.clone() for k, v in model.state_dict().items()})

    before = snapshot()
    cfg = run_config(name="sst2", label_names=["negative", "positive"], precision="bf16", dropout=0.3,
                     attention_dropout=0.05, freeze_word_embeddings=True, gradient_checkpointing=True)
    with pytest.raises(RuntimeError, match="stopped inside"):
        with model_changes(task, cfg, cpu=True, precision="bf16", log=lambda _: None) as applied:
            assert {"freeze_word_embeddings", "dropout", "gradient_checkpointing", "fast_dropout"} <= set(applied)
            assert snapshot()[:3] != before[:3]  # the changes took effect inside
            raise RuntimeError("stopped inside")
    after = snapshot()
    assert after[:5] == before[:5]
    assert after[5].keys() == before[5].keys() and all(torch.equal(after[5][k], before[5][k]) for k in before[5])


@pytest.mark.usefixtures("cpu_only")  # its second half makes a CPU Accelerator, which a process on a GPU refuses
def test_a_mixed_precision_run_gives_the_model_its_own_forward_back(tiny_bert, sst2_dir, tmp_path):
    """accelerate sets an autocast wrapper as the prepared model's `forward` (bf16); the trainer takes it off with
    `restore_forward`, not with accelerate's `unwrap_model(keep_fp32_wrapper=False)`, which unwraps through
    transformers' own decorators of `forward` too (the second half pins that reason: when it fails, accelerate gives
    back the class's forward and the trainer can use it)."""
    from accelerate import Accelerator
    from transformers import AutoModelForSequenceClassification

    from .conftest import fit, small_config

    task, _ = fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", precision="bf16", max_steps=2))
    assert "forward" not in vars(task.model)  # the class's forward again

    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_bert), num_labels=2)
    accelerator = Accelerator(mixed_precision="bf16", cpu=True)
    accelerator.unwrap_model(accelerator.prepare(model), keep_fp32_wrapper=False)
    assert vars(model)["forward"].__func__ is not type(model).forward

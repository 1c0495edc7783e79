"""The trainer wherever it runs: precision chosen for the hardware, CPU speed-ups checked and undone however a run
ends, and a run folder that records the model that was actually trained."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import yaml
from transformers import AutoModelForSequenceClassification

from bertkit import QuestionAnswering, Trainer, device
from bertkit.config import run_config
from bertkit.cpu import cpu_speedups, heap
from bertkit.cpu import dropout as fast_dropout
from bertkit.errors import BertkitError

from .conftest import fit, small_config, write_squad

CPU = torch.device("cpu")


def timer(fp32_ms: float, bf16_ms: float):
    calls = []

    def time_matmul(dtype):
        calls.append(dtype)
        return bf16_ms if dtype == torch.bfloat16 else fp32_ms

    return time_matmul, calls


def test_a_cpu_without_native_bf16_trains_in_fp32_without_timing_anything():
    time_matmul, calls = timer(10.0, 1.0)
    choice = device.choose_precision("auto", CPU, flags={"avx2", "avx512f", "avx512_vnni"}, timer=time_matmul)
    assert choice.precision == "fp32" and "no native bf16" in choice.reason and calls == []


@pytest.mark.parametrize("fp32_ms,bf16_ms,expected", [(10.0, 3.0, "bf16"), (10.0, 40.0, "fp32")])
def test_native_bf16_is_used_only_where_it_is_measured_faster(fp32_ms, bf16_ms, expected):
    time_matmul, calls = timer(fp32_ms, bf16_ms)
    choice = device.choose_precision("auto", CPU, flags={"avx512f", "avx512_bf16"}, timer=time_matmul)
    assert choice.precision == expected and sorted(map(str, calls)) == ["torch.bfloat16", "torch.float32"]
    assert choice.evidence == {"cpu_flags": ["avx512_bf16"], "matmul_ms": {"fp32": fp32_ms, "bf16": bf16_ms}}
    assert choice.precision == device.choose_precision("auto", CPU, flags={"amx_bf16"}, timer=time_matmul).precision


def test_this_machine_gets_the_faster_of_its_two_precisions():
    choice = device.choose_precision("auto", CPU)
    timings = choice.evidence.get("matmul_ms")
    if timings is None:  # no native bf16 here: fp32 without a measurement
        assert choice.precision == "fp32"
    else:
        assert choice.precision == min(timings, key=timings.get)


@pytest.mark.parametrize("capability,expected", [((7, 0), "fp16"), ((7, 5), "fp16"), ((8, 0), "bf16"),
                                                 ((9, 0), "bf16")])
def test_gpus_get_bf16_only_where_native(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "a GPU")
    choice = device.choose_precision("auto", torch.device("cuda"))
    assert choice.precision == expected and choice.evidence["capability"] == f"{capability[0]}.{capability[1]}"


def test_explicit_precisions_are_checked():
    assert device.choose_precision("bf16", CPU).precision == "bf16"
    with pytest.raises(BertkitError, match="fp16 needs a GPU"):
        device.choose_precision("fp16", CPU)


@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (9, 0)])
def test_tf32_is_fp32_on_tensor_cores_of_gpus_that_have_them(monkeypatch, capability):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "a GPU")
    if capability < (8, 0):
        with pytest.raises(BertkitError, match="tf32 needs compute capability 8.0"):
            device.choose_precision("tf32", torch.device("cuda"))
        return
    choice = device.choose_precision("tf32", torch.device("cuda"))
    assert choice.precision == "tf32" and "TF32 tensor cores" in choice.reason
    with pytest.raises(BertkitError, match="tf32 needs an NVIDIA GPU"):
        device.choose_precision("tf32", CPU)


def test_tf32_switches_are_set_for_the_run_and_put_back():
    switches = torch.backends.cuda.matmul, torch.backends.cudnn
    before = [s.allow_tf32 for s in switches]
    try:
        for start in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = start
            with device.matmul_precision("bf16"):
                assert [s.allow_tf32 for s in switches] == [start, start]
            with pytest.raises(KeyError), device.matmul_precision("tf32"):  # put back however the run ends
                assert [s.allow_tf32 for s in switches] == [True, True]
                raise KeyError("a failed run")
            assert [s.allow_tf32 for s in switches] == [start, start]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_a_given_fp32_accelerator_trains_tf32_when_asked(monkeypatch):
    from types import SimpleNamespace

    from bertkit.training.prepare import make_accelerator

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "a GPU")
    given = SimpleNamespace(mixed_precision="no", device=torch.device("cuda"), gradient_accumulation_steps=1)
    cfg = run_config(name="sst2", precision="tf32", grad_accum=2)
    accelerator, choice = make_accelerator(cfg, "unused", given)
    assert accelerator is given and choice.precision == "tf32" and given.gradient_accumulation_steps == 2
    bf16 = SimpleNamespace(mixed_precision="bf16", device=torch.device("cuda"), gradient_accumulation_steps=1)
    with pytest.raises(BertkitError, match="precision tf32 asked for, but the given Accelerator uses bf16"):
        make_accelerator(cfg, "unused", bf16)


@pytest.mark.usefixtures("cpu_only")  # a CPU's choice (a GPU's is bf16 or fp16)
def test_the_run_records_the_precision_choice_and_why(tiny_bert, sst2_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(device, "_DECIDED", {})
    monkeypatch.setattr(device, "cpu_flags", lambda: {"avx2", "avx512f"})  # an Intel Xeon without bf16
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", precision="auto", epochs=1))
    versions = json.loads((tmp_path / "run" / "versions.json").read_text())
    assert versions["precision"] == "fp32" and "no native bf16" in versions["precision_choice"]["reason"]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["train"]["precision"] == "fp32"


@pytest.mark.usefixtures("cpu_only")
def test_an_evaluation_called_after_fit_runs_in_the_runs_matmul_precision(tiny_bert, sst2_dir, tmp_path,
                                                                          monkeypatch):
    from bertkit import SequenceClassification
    from bertkit.training import loop

    cfg = small_config(sst2_dir, tmp_path / "run", epochs=1)
    train, evals, names = SequenceClassification.load_data(cfg)
    task = SequenceClassification.from_pretrained(str(tiny_bert), label_names=names)
    trainer = Trainer(task, cfg)
    result = trainer.fit(train, evals)
    trainer.precision = "tf32"  # as a GPU run of --precision tf32 has it (a CPU refuses tf32 before training)
    seen, predict = [], loop.predict_features
    monkeypatch.setattr(loop, "predict_features",
                        lambda *a: seen.append(torch.backends.cuda.matmul.allow_tf32) or predict(*a))
    name, rows = next(iter(evals.items()))
    examples = task.examples(rows)
    before, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, False
    try:
        metrics, _ = trainer.evaluate({name: (examples, task.encode(examples))})
        assert seen == [True] and torch.backends.cuda.matmul.allow_tf32 is False  # set for it, then put back
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert metrics[name] == result[name]  # the best weights, scored again: what fit reported


@pytest.mark.usefixtures("cpu_only")
def test_an_evaluation_called_after_fit_computes_in_the_runs_mixed_precision(tiny_bert, sst2_dir, tmp_path):
    """bf16: after `fit` (accelerate's autocasting forward undone) an evaluation computes in bf16 as fit's own did,
    not in fp32: the same probabilities as the run's predictions file, bit for bit."""
    from bertkit import SequenceClassification

    cfg = small_config(sst2_dir, tmp_path / "run", epochs=1, precision="bf16")
    train, evals, names = SequenceClassification.load_data(cfg)
    task = SequenceClassification.from_pretrained(str(tiny_bert), label_names=names)
    trainer = Trainer(task, cfg)
    trainer.fit(train, evals)
    name, rows = next(iter(evals.items()))
    examples = task.examples(rows)
    _, predictions = trainer.evaluate({name: (examples, task.encode(examples))})
    written = (tmp_path / "run" / f"predictions_{name}.jsonl").read_text().splitlines()
    assert predictions[name] == [json.loads(line) for line in written]


# --- CPU speed-ups ---------------------------------------------------------------------------------------------
def model_of(tiny_bert):
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)


def state_of(model) -> dict:
    """What a patch could leave behind: module classes, dropout rates, instance forwards, attention, grads."""
    return {"classes": [type(m).__name__ for m in model.modules()],
            "rates": [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)],
            "forwards": [n for n, m in model.named_modules() if "forward" in m.__dict__],
            "attention": model.config._attn_implementation,
            "requires_grad": [p.requires_grad for p in model.parameters()]}


def outputs(model, seed=0):
    ids = torch.randint(1000, 5000, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        evaluated = model.eval()(input_ids=ids).logits
        torch.manual_seed(seed)
        trained = model.train()(input_ids=ids).logits
    return evaluated, trained


def test_every_speed_up_takes_effect_with_the_installed_transformers(tiny_bert):
    model = model_of(tiny_bert)
    before = state_of(model)
    with cpu_speedups(model, keep_heap=True, log=pytest.fail) as applied:
        assert applied == ["fast_dropout", "unfused_attention"] + (["keep_heap"] if heap._glibc() else [])
        assert state_of(model) != before
    assert state_of(model) == before


def test_what_does_not_take_effect_is_skipped_with_one_message(tiny_bert, monkeypatch):
    model, messages = model_of(tiny_bert), []
    assert model.config._attn_implementation == "sdpa"
    monkeypatch.setattr(fast_dropout, "route_attention", lambda m: False)  # an older transformers: no registry
    with cpu_speedups(model, log=messages.append) as applied:
        assert applied == ["fast_dropout"]
    assert messages == ["cpu speed-ups: the installed transformers has no attention registry; attention stays fused"]
    messages.clear()
    monkeypatch.setattr(fast_dropout, "swap_dropout", lambda m: 12)  # "swapped", but the forward never reaches it
    with cpu_speedups(model, log=messages.append) as applied:
        assert applied == []
    assert messages[-1] == "cpu speed-ups: fast_dropout did not take effect with this model and transformers; skipped"
    assert state_of(model) == state_of(model_of(tiny_bert))


class Stop(Exception):
    pass


@pytest.mark.usefixtures("cpu_only")  # the CPU speed-ups and kept heap apply to CPU training only
def test_a_fit_that_raises_leaves_the_model_as_an_unpatched_copy_and_the_heap_released(tiny_bert, sst2_dir,
                                                                                       tmp_path, monkeypatch):
    calls = []
    real_release = heap.release_heap
    monkeypatch.setattr(heap, "release_heap", lambda: calls.append("release") or real_release())
    from bertkit import SequenceClassification

    cfg = small_config(sst2_dir, tmp_path / "run", precision="bf16", dropout=0.0, attention_dropout=0.3,
                       freeze_word_embeddings=True)
    train, evals, names = SequenceClassification.load_data(cfg)
    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=names)
    before = state_of(clf.model)

    def stop(trainer, state):
        assert state_of(trainer.task.model) != before  # patched while training
        if state["global_step"] == 3:
            raise Stop

    with pytest.raises(Stop):
        Trainer(clf, cfg, callbacks=[stop]).fit(train, evals)
    assert state_of(clf.model) == before and calls == (["release"] if heap._glibc() else [])
    unpatched = copy.deepcopy(model_of(tiny_bert))
    unpatched.classifier = copy.deepcopy(clf.model.classifier)
    unpatched.load_state_dict(clf.model.state_dict())  # the weights it trained to, in a model never patched
    for a, b in zip(outputs(clf.model), outputs(unpatched), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# --- one source of truth ---------------------------------------------------------------------------------------
def test_a_notebook_run_records_the_model_and_windows_it_trained(tiny_bert, tmp_path):
    data = write_squad(tmp_path / "squad", n_train=32, n_dev=8)
    cfg = run_config(task="question-answering", name="squad", data_dir=str(data), train_file="train.json",
                     validation_files=["validation.json"], metrics=["exact_match", "f1"], main_metric="f1",
                     precision="fp32", max_steps=2, batch_size=8, output_dir=str(tmp_path / "run"))
    assert (cfg.model, cfg.max_length, cfg.task_options.window_overlap) == ("bert-base-uncased", 128, 128)  # defaults
    qa = QuestionAnswering.from_pretrained(str(tiny_bert), max_length=64, window_overlap=16, max_question_length=16)
    train, evals, _ = QuestionAnswering.load_data(cfg)
    Trainer(qa, cfg).fit(train, evals)
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    options = recorded["task_options"]
    assert (recorded["model"], recorded["max_length"], options["window_overlap"]) == (str(tiny_bert), 64, 16)
    assert (recorded["task"], recorded["name"], options["max_question_length"]) == ("question-answering", "squad", 16)
    card = (tmp_path / "run" / "README.md").read_text()  # a local folder: in the card's text, not as a hub id
    assert f"base model: `{tiny_bert}`" in card and "base_model:" not in card
    again = QuestionAnswering.from_pretrained(str(tmp_path / "run"))  # its window settings come back from the run
    assert (again.max_length, again.window_overlap, again.max_question_length) == (64, 16, 16)


def test_gpu_loaders_use_workers_pinned_memory_and_pad_to_multiples_of_8(tiny_bert):
    import datasets

    from bertkit import SequenceClassification, TokenClassification
    from bertkit.training.data import loader_options

    assert {"num_workers", "pin_memory"} <= set(loader_options(torch.device("cuda")))
    assert not {"num_workers", "pin_memory"} & set(loader_options(CPU))
    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["a", "b"])
    ner = TokenClassification.from_pretrained(str(tiny_bert), label_names=["O", "B-X", "I-X"])
    rows = {clf: clf.encode(datasets.Dataset.from_dict({"text": ["one two three", "four"], "label": [0, 1]})),
            ner: ner.encode(datasets.Dataset.from_dict({"tokens": [["a", "b", "c"], ["d"]],
                                                        "tags": [[0, 1, 2], [0]]}))}
    for task, features in rows.items():
        assert task.collate(list(features))["input_ids"].shape[1] == 5  # the longest row: [CLS] 3 words [SEP]
        task.pad_to_multiple_of(8)
        assert task.collate(list(features))["input_ids"].shape[1] == 8


@pytest.mark.usefixtures("cpu_only")  # the kept heap is for CPU training only
@pytest.mark.parametrize("precision,kept", [("fp32", False), ("bf16", True)])
def test_the_trainer_keeps_the_heap_in_bf16_only(tiny_bert, sst2_dir, tmp_path, monkeypatch, precision, kept):
    asked = []
    monkeypatch.setattr(heap, "keep_heap", lambda: asked.append(precision) or False)  # asked, never applied

    def stop(trainer, state):
        raise Stop

    cfg = small_config(sst2_dir, tmp_path / "run", precision=precision)
    with pytest.raises(Stop):
        fit(tiny_bert, cfg, callbacks=[stop])
    assert asked == ([precision] if kept else [])

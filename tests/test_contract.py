"""The contract every task passes: each name `task_names()` returns and the plugin task of examples/custom_task.py,
on its tiny session run (conftest TINY_RUNS, trained a few steps on synthetic files in its recipe's format):
- its loss makes no tensor off the batch's device (a CUDA-graph capture could not copy one);
- the run folder loads in plain transformers (`auto_model_class`, in a process without bertkit) with the same
  outputs on the task's own features, its tokenizer and label names;
- a run cut after a checkpoint (a callback raising) and resumed ends with the uninterrupted run's weights;
- several rows predicted at once answer as each row alone;
- `bertkit predict`, `serve` and the ONNX export answer one input alike."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli import main
from bertkit.tasks import task_names

from .conftest import SENTENCES, Cut, cli_predict, cloze_registered, cut_training, exported, tiny_run, tiny_run_args

PLUGIN = "cloze"  # examples/custom_task.py


@dataclass
class Spec:
    run: str  # the tiny run (conftest TINY_RUNS)
    rows: list[dict]  # input rows of `predict_rows`; the last one is the input of predict / serve / export
    line: object = None  # row → what `bertkit predict --input` reads of it (a text line, or a JSONL row: the row)
    body: object = None  # rows → the body of serve's POST /predict (default {"inputs": rows})
    options: dict = field(default_factory=dict)  # `predict_rows` options, and the `bertkit predict` flags for them
    flags: tuple = ()


def texts(rows, key):
    return [r[key] for r in rows]


SPECS = {
    "sequence-classification": Spec(
        "sst2", [{"text": t} for t in ["the film was wonderful and funny", "a dull , tedious plot", "null",
                                       "its cast is really superb", "the story is " * 40 + "weak"]],
        line=lambda r: r["text"], body=lambda rows: {"texts": texts(rows, "text"), "probs": True},
        options={"probs": True}, flags=("--probs",)),
    "token-classification": Spec(  # the last sentence is longer than a window of 24 pieces
        "ner", [{"sentence": s} for s in SENTENCES[4:] + ["Kowalczyk " * 12 + "visited Nairobi with Mary Okonkwo"]],
        line=lambda r: r["sentence"], body=lambda rows: {"sentences": texts(rows, "sentence")}),
    "question-answering": Spec(  # the last context takes several windows of 64 pieces
        "qa", [{"question": "which colour is mentioned ?", "context": "the film was red and long"},
               {"question": "name the colour .", "context": "Green , said the cast", "id": 7},
               {"question": "what color appears in the text ?",
                "context": " ".join(["the report said"] * 25) + " blue today", "id": "q3"}],
        body=lambda rows: {"questions": rows}),
    "multiple-choice": Spec(  # different numbers of endings
        "swag", [{"context": "a story", "endings": ["it was boring", "it was superb", "it was tedious"], "id": "q2"},
                 {"context": "the film is, \"so\" it goes", "start": "she",
                  "endings": ["the good .", "a dull .", "the awful .", "the weak ."]}]),
    PLUGIN: Spec(
        "cloze", [{"text": "a dull plot , it was [MASK] .", "id": 7}, {"text": "wonderful , so it was [MASK] ."},
                  {"text": "the film was superb and the cast brilliant , so it was [MASK] ."}]),
}
TASKS = sorted({*task_names(), PLUGIN})


def test_every_registered_task_has_contract_inputs():
    assert set(TASKS) <= set(SPECS), f"add the contract's inputs of {sorted(set(TASKS) - set(SPECS))} to SPECS"


@pytest.fixture
def task_run(request, tmp_path_factory, tiny_bert):
    """(spec, run folder) of the task named by the test's parameter, with the plugin registered for its test."""
    name = request.param
    if name not in SPECS:
        pytest.fail(f"no contract inputs for task {name!r}: add them to SPECS")
    spec = SPECS[name]
    if name == PLUGIN:
        with cloze_registered():
            yield spec, tiny_run(tmp_path_factory, tiny_bert, spec.run)
    else:
        yield spec, tiny_run(tmp_path_factory, tiny_bert, spec.run)


def close(got, expected, atol: float, where: str = "answer") -> None:
    """Equal answers: the same keys, texts, labels and lists; numbers within `atol` (batches pad differently)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys(), f"{where}: {got} != {expected}"
        for k in expected:
            close(got[k], expected[k], atol, f"{where}.{k}")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), f"{where}: {got} != {expected}"
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            close(g, e, atol, f"{where}[{i}]")
    elif isinstance(expected, float) and not isinstance(got, bool):
        assert got == pytest.approx(expected, abs=atol), f"{where}: {got} != {expected}"
    else:
        assert type(got) is type(expected) and got == expected, f"{where}: {got!r} != {expected!r}"


# --- plain transformers, in a process that never imports bertkit -------------------------------------------------
PLAIN = r"""
import json, sys
import numpy as np, torch, transformers
for line in sys.stdin:
    ask = json.loads(line)
    model = getattr(transformers, ask["auto_class"]).from_pretrained(ask["run"]).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(ask["run"])
    inputs, out = np.load(ask["inputs"]), {}
    with torch.no_grad():
        for i in range(ask["features"]):
            x = {k.split(":")[1]: torch.from_numpy(inputs[k]) for k in inputs.files if k.split(":")[0] == str(i)}
            y = model(**x)
            out.update({f"{i}:{k}": y[k][0].numpy() for k in ask["outputs"]})
    np.savez(ask["answer"], **out)
    print(json.dumps({"class": type(model).__module__, "id2label": model.config.id2label,
                      "ids": tokenizer(ask["texts"])["input_ids"],
                      "bertkit": sorted(m for m in sys.modules if m.split(".")[0] == "bertkit")}), flush=True)
"""


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """ask(run, auto class name, per-feature inputs, output keys, texts) → (outputs, what the process says): a
    process that loads the run with transformers alone, started once for the module."""
    folder = tmp_path_factory.mktemp("plain")
    log = open(folder / "stderr.txt", "w+")
    proc = subprocess.Popen([sys.executable, "-c", PLAIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                            text=True, cwd=folder)

    def ask(run, auto_class: str, features: list[dict], outputs, texts: list[str]):
        n = len(list(folder.glob("in-*.npz")))
        arrays = {f"{i}:{k}": v.numpy() for i, f in enumerate(features) for k, v in f.items()}
        np.savez(folder / f"in-{n}.npz", **arrays)
        proc.stdin.write(json.dumps({"run": str(run), "auto_class": auto_class, "inputs": str(folder / f"in-{n}.npz"),
                                     "features": len(features), "outputs": list(outputs), "texts": texts,
                                     "answer": str(folder / f"out-{n}.npz")}) + "\n")
        proc.stdin.flush()
        said = proc.stdout.readline()
        log.seek(0)
        assert said, f"the plain transformers process ended: {log.read()[-3000:]}"
        return np.load(folder / f"out-{n}.npz"), json.loads(said)

    yield ask
    proc.stdin.close()
    proc.wait(60)
    log.close()


MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.mark.parametrize("task_run", TASKS, indirect=True)
def test_the_run_loads_in_plain_transformers_with_the_same_outputs(task_run, plain):
    from bertkit.inference import forward_all
    from bertkit.tasks import load_task

    spec, run = task_run
    assert (run / "model.safetensors").is_file() and not list(run.glob("*.bin"))
    task = load_task(str(run))
    seen = []

    def recording(task, features, batch_size, precision):  # the task's own inference, every output whole
        outputs = forward_all(task, features, batch_size, precision)
        seen.append((features, outputs))
        return outputs

    task.runner, task.output_reducer = recording, lambda features: None  # QA: its logits, not answer candidates
    task.predict_rows(spec.rows, **spec.options)
    inputs, ours = [], []
    for features, outputs in seen:  # one call, or several (multiple choice: one per number of endings)
        columns = features.column_names if hasattr(features, "column_names") else list(features)
        for i, out in enumerate(outputs):  # each feature alone (no padding), as plain transformers gets it
            batch = task.collate([{k: features[k][i] for k in columns}])
            inputs.append({k: batch[k] for k in MODEL_INPUTS if k in batch})
            ours.append(out)
    assert seen and ours
    sample = [next(iter(r.values())) for r in spec.rows[:2]]
    sample = [s if isinstance(s, str) else " ".join(s) for s in sample]
    theirs, said = plain(run, task.auto_model_class.__name__, inputs, task.output_keys, sample)

    assert said["bertkit"] == [] and said["class"].startswith("transformers.models.")
    assert said["ids"] == task.tokenizer(sample)["input_ids"]  # AutoTokenizer reads the saved tokenizer alike
    if task.named_labels:
        assert said["id2label"] == {str(i): n for i, n in enumerate(task.label_names)}
    for i, out in enumerate(ours):
        for k in task.output_keys:
            assert theirs[f"{i}:{k}"].shape == out[k].shape, (i, k)
            np.testing.assert_allclose(theirs[f"{i}:{k}"], out[k], atol=1e-5, rtol=0, err_msg=f"feature {i}, {k}")


@pytest.mark.parametrize("task_run", TASKS, indirect=True)
def test_the_loss_makes_no_tensor_off_the_batchs_device(task_run, tmp_path_factory):
    """A tensor `compute_loss` makes without a device is a host tensor on a GPU, which a CUDA-graph capture cannot
    copy: the graphed step would run eagerly (conftest's host_tensors_in_loss, watching the tiny run's training)."""
    spec, run = task_run
    made = json.loads((run.parent / f"{spec.run}.host-tensors.json").read_text())
    assert made == [], f"compute_loss makes tensors without device=: {made}"


# --- resume ---------------------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("cpu_only")  # as the session's run was made (tiny_run); a GPU's resume: tests/test_gpu.py
@pytest.mark.parametrize("task_run", TASKS, indirect=True)
def test_resume_after_a_cut_ends_as_the_uninterrupted_run(task_run, tmp_path_factory, tiny_bert, tmp_path, capsys):
    spec, run = task_run
    cut = tmp_path / "cut"
    args = tiny_run_args(tmp_path_factory, tiny_bert, spec.run, cut)  # the session run's own arguments
    latest = cut / "checkpoints" / "latest"

    def two_steps_after_a_checkpoint(state):
        return latest.is_file() and state["global_step"] == int(latest.read_text().split("-")[1]) + 2

    with cut_training(two_steps_after_a_checkpoint), pytest.raises(Cut) as stopped:
        main(args)
    assert not (cut / "metrics.json").exists()
    checkpoint = latest.read_text().strip()
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    assert f"resumed from {latest.parent / checkpoint}" in capsys.readouterr().err  # the run went on from there
    assert int(checkpoint.split("-")[1]) == stopped.value.args[0] - 2

    # bit for bit: the last step's weights (the run folder holds the best step's, maybe the checkpoint's own) and those
    # published; the same losses, rates and gradient norms at each logged step
    last = (run / "checkpoints" / "latest").read_text().strip()
    assert (cut / "checkpoints" / "latest").read_text().strip() == last != checkpoint
    for weights in (Path("checkpoints", last, "model.safetensors"), Path("model.safetensors")):
        a, b = load_file(run / weights), load_file(cut / weights)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), weights

    def trained(folder):
        rows = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"], r["lr"], r.get("grad_norm"), r.get("clipped_steps")) for r in rows]

    assert trained(run) == trained(cut)
    ran, resumed = (json.loads((d / "metrics.json").read_text()) for d in (run, cut))
    assert ran["train"]["steps"] == resumed["train"]["steps"] and ran["best_step"] == resumed["best_step"]
    from bertkit.report import eval_splits

    assert {s: ran[s] for s in eval_splits(ran)} == {s: resumed[s] for s in eval_splits(resumed)}
    assert (run / "eval_metrics.jsonl").read_text() == (cut / "eval_metrics.jsonl").read_text()


# --- a file read as the run's were not ----------------------------------------------------------------------------
@pytest.mark.parametrize("task_run", TASKS, indirect=True)
def test_evaluate_takes_a_flag_for_every_option_saying_how_a_file_is_read(task_run):
    """`bertkit evaluate --model RUN --file F` scores a file whose columns or delimiter differ from the run's: each
    option of the task marked `read=True` is a flag there, given as `finetune`'s, and it changes the run's config as
    evaluate reads it."""
    import dataclasses

    from bertkit.cli import build_parser
    from bertkit.commands.evaluate import read_overrides
    from bertkit.config_files import load_run_config
    from bertkit.tasks import checkpoint_task
    from bertkit.typed import flag, hints, read_options

    _, run = task_run
    task_class = checkpoint_task(str(run))[0]
    saved = load_run_config(run / "config.yaml")
    fields = {f.name: f for f in dataclasses.fields(task_class.Options)}
    for name in read_options(task_class.Options):
        kind = hints(task_class.Options)[name]
        value = (fields[name].metadata.get("choices") or ["1" if kind is int else "x,y" if "list" in str(kind) else
                                                         "x"])
        value = next(v for v in value if v != getattr(saved.task_options, name))  # not what the run read
        argv = ["evaluate", "--model", str(run), flag(fields[name].metadata.get("dest", name)), value]
        overrides = read_overrides(build_parser(argv).parse_args(argv))  # argparse: exit 2 for a flag it lacks
        assert set(overrides) == {name}, overrides
        read = saved.replace("command line", **overrides).task_options
        assert getattr(read, name) != getattr(saved.task_options, name), name
        assert all(getattr(read, f) == getattr(saved.task_options, f) for f in fields if f != name)


# --- batches ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("task_run", TASKS, indirect=True)
def test_rows_predicted_together_answer_as_each_alone(task_run):
    from bertkit.tasks import load_task

    spec, run = task_run
    task = load_task(str(run))
    together = task.predict_rows(spec.rows, batch_size=2, **spec.options)  # sorted by length, padded batches
    alone = [task.predict_rows([row], **spec.options)[0] for row in spec.rows]
    assert len(together) == len(spec.rows)
    for i, (t, a) in enumerate(zip(together, alone, strict=True)):
        close(t, a, 1e-5, f"row {i}")
    assert task.predict_rows([], **spec.options) == []  # no rows, no answers (was an error inside the encoding)


@pytest.mark.parametrize("task_run", TASKS, indirect=True)
def test_predict_in_slices_writes_what_it_writes_in_one(task_run, tmp_path, monkeypatch):
    """`bertkit predict` answers and writes its input a slice at a time (its memory is a slice's, not the input's):
    in slices of one row it writes what it writes in one slice."""
    from bertkit.tasks import load_task
    from bertkit.tasks.io import TaskIO

    spec, run = task_run
    lines = [spec.line(r) if spec.line else r for r in spec.rows]
    whole = cli_predict(run, lines, tmp_path, *spec.flags)
    cls, calls = type(load_task(str(run))), []
    answer = cls.predict_rows

    def counted(self, rows, *args, **kw):
        calls.append(len(rows))
        return answer(self, rows, *args, **kw)

    monkeypatch.setattr(TaskIO, "PREDICT_SLICE", 1)
    monkeypatch.setattr(cls, "predict_rows", counted)
    sliced = cli_predict(run, lines, tmp_path, *spec.flags)
    assert calls == [1] * len(lines)
    close(sliced, whole, 1e-5, "sliced")


def test_a_notebooks_single_string_is_one_input_not_its_characters(tiny_bert):
    """`predict("text")` answers as `predict(["text"])` for the tasks whose notebook `predict` takes texts; an
    empty list gets an empty list."""
    from bertkit import BertkitError, MultipleChoice, QuestionAnswering, SequenceClassification, TokenClassification

    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["a", "b"])
    assert clf.predict("a fine film", with_probs=True) == clf.predict(["a fine film"], with_probs=True)
    ner = TokenClassification.from_pretrained(str(tiny_bert), label_names=["O", "B-PER", "I-PER"])
    assert ner.predict("Ann lives in Rome .") == ner.predict(["Ann lives in Rome ."])
    qa = QuestionAnswering.from_pretrained(str(tiny_bert))
    assert qa.predict("Where does Ann live?", "Ann lives in Rome.") == qa.predict(["Where does Ann live?"],
                                                                                ["Ann lives in Rome."])
    mc = MultipleChoice.from_pretrained(str(tiny_bert))
    endings = ["He plays.", "He eats it.", "He sings."]
    assert mc.predict("A man sits at a piano.", endings) == mc.predict(["A man sits at a piano."], [endings]) == \
        mc.predict_rows([{"context": "A man sits at a piano.", "endings": endings}])
    assert clf.predict([]) == ner.predict([]) == qa.predict([], []) == mc.predict([], []) == []
    with pytest.raises(BertkitError, match="sentence 1: no words"):
        ner.predict([["Ann"], []])
    with pytest.raises(BertkitError, match="context 0: give a non-empty text and two or more non-empty endings"):
        mc.predict("A man sits.", ["He plays."])
    with pytest.raises(BertkitError, match="context 1: give a non-empty text"):
        mc.predict(["A man sits.", " "], [endings, endings])


def test_a_notebooks_predict_prints_no_progress_bar_and_leaves_them_as_they_were(tiny_bert, capfd, monkeypatch):
    """A notebook's predict prints answers, not datasets' "Map" bars; the bars' setting is the user's afterwards."""
    import datasets

    monkeypatch.setenv("BERTKIT_CACHE", "off")  # every call maps (a cached encoding would not)

    from bertkit import MultipleChoice, QuestionAnswering, TokenClassification

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.enable_progress_bars()
    try:
        ner = TokenClassification.from_pretrained(str(tiny_bert), label_names=["O", "B-PER", "I-PER"])
        qa = QuestionAnswering.from_pretrained(str(tiny_bert))
        mc = MultipleChoice.from_pretrained(str(tiny_bert))
        capfd.readouterr()
        ner.predict(["Ann lives in Rome ."])
        qa.predict(["Where does Ann live?"], ["Ann lives in Rome."])
        mc.predict_rows([{"context": "Ann opens the door.", "endings": ["She walks in.", "It rains fish."]}])
        assert "Map" not in capfd.readouterr().err
        assert not datasets.are_progress_bars_disabled()
        datasets.Dataset.from_dict({"a": [1]}).map(lambda x: x)  # the user's own maps keep their bar
        assert "Map" in capfd.readouterr().err
    finally:
        (datasets.disable_progress_bars if was_disabled else datasets.enable_progress_bars)()


@pytest.mark.usefixtures("cpu_only")  # stand-in graphs on a CPU (a GPU's own: tests/test_gpu.py)
@pytest.mark.parametrize("task_run", TASKS, indirect=True)
def test_rows_on_the_gpu_path_answer_as_on_the_plain_one(task_run, monkeypatch):
    """Inference's GPU path (batches by a token budget over a few lengths, topped up with empty rows, a graph per
    shape: here a stand-in that calls the forward again, as a replay does), which predict, evaluate and serve take
    on a GPU: the plain path's answers."""
    from bertkit.tasks import load_task

    from .conftest import gpu_inference_path

    spec, run = task_run
    task = load_task(str(run))
    plain = task.predict_rows(spec.rows, batch_size=2, **spec.options)
    with gpu_inference_path(monkeypatch):
        for _ in range(3):  # eager, captured, replayed
            for i, (g, p) in enumerate(zip(task.predict_rows(spec.rows, **spec.options), plain, strict=True)):
                close(g, p, 1e-5, f"row {i}")
    assert any(f.graphs and not f.failed for f in vars(task)["_graphed_forwards"].values())


# --- predict, serve and export on one input -----------------------------------------------------------------------
@pytest.mark.usefixtures("cpu_only")  # the three front-ends on one device (a GPU's own answers: tests/test_gpu.py)
@pytest.mark.parametrize("task_run", TASKS, indirect=True)
def test_predict_serve_and_export_answer_alike(task_run, tmp_path_factory, tiny_bert, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from fastapi.testclient import TestClient

    from bertkit.serve.app import create_app
    from bertkit.serve.engine import Engine
    from bertkit.tasks import load_task

    spec, run = task_run
    row = spec.rows[-1]
    task = load_task(str(run))
    line = spec.line(row) if spec.line else row
    predicted = cli_predict(run, [line], tmp_path, *spec.flags)
    assert len(predicted) == 1
    close(predicted[0], task.echo(row, task.predict_rows([row], **spec.options)[0]), 1e-6, "predict")

    engine = Engine(str(run), precision="fp32")
    with TestClient(create_app(engine)) as client:
        meta = client.get("/metadata").json()
        assert meta["task"] == task.name and meta["labels"] == (task.label_names or None)
        assert meta["inputs"] == {k: t.__name__ for k, t in task.input_fields.items()}
        r = client.post("/predict", json=spec.body([row]) if spec.body else {"inputs": [row]})
        assert r.status_code == 200, r.text
    served, = r.json()["predictions"]
    close(served, predicted[0], 1e-5, "serve")

    flags = () if spec.run == "sst2" else ("--no-features",)  # as tests/test_export.py exports them
    _, onnx = exported(tmp_path_factory, tiny_bert, spec.run, *flags)
    info = json.loads((onnx / "export.json").read_text())
    assert (info["task"], info["pipeline_tag"]) == (task.name, task.pipeline_tag)
    assert info["graphs"]["model.onnx"]["max_abs_diff_fp32"] < 1e-4
    from_onnx = cli_predict(onnx, [line], tmp_path, "--backend", "onnx", *spec.flags)
    close(from_onnx[0], predicted[0], 1e-4, "export")

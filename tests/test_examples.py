"""The examples/ scripts run as written on the tiny model, and what they print is what their runs recorded."""

import ast
import json
import os
import subprocess
import sys
import tempfile

from .conftest import CPU_ENV, NER_LABELS, REPO, write_conll, write_squad, write_swag


def run_example(name, env, args=()):
    """The example in a process on the CPU on any machine: its answers are compared exactly, across a reload and with
    CPU arithmetic (a trained model left on a GPU and one reloaded on the CPU differ in the last digits). Its TMPDIR
    is a folder of its own, which it must leave without a folder of bertkit's where the test names the output folder
    (`os.environ.get(KEY, tempfile.mkdtemp())` made one anyway, on every run, and left it in the machine's /tmp)."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, str(REPO / "examples" / name), *args],
                              env={**os.environ, **CPU_ENV, "TMPDIR": tmp, **env}, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        if "BERTKIT_EXAMPLE_OUT" in env:
            assert not [p for p in os.listdir(tmp) if p.startswith("bertkit-")], os.listdir(tmp)
    return proc.stdout


def printed(out: str, label: str) -> list[float]:
    """The numbers printed after `label`."""
    return [float(x) for x in out.split(label)[1].splitlines()[0].split()]


def test_notebook_example_runs_on_the_tiny_model(tiny_bert, sst2_dir, tmp_path):
    out = run_example("sst2_notebook.py", {
        "BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_DATA": str(sst2_dir), "BERTKIT_EXAMPLE_TRAIN": "256",
        "BERTKIT_EXAMPLE_OUT": str(tmp_path / "run"), "BERTKIT_EXAMPLE_LR": "1e-2",
        "BERTKIT_EXAMPLE_EPOCHS": "3"})  # 24 steps: 8 (one epoch at batch 32) are too few for the tiny model
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    (accuracy,) = printed(out, "dev accuracy:")
    assert accuracy == round(metrics["dev"]["accuracy"], 4) and (metrics["name"], metrics["task"]) == (
        "sst2", "sequence-classification")
    assert accuracy >= 0.75  # the tiny model learns the sentiment words
    lines = out.splitlines()
    in_memory = ast.literal_eval(lines[lines.index(next(x for x in lines if x.startswith("dev accuracy:"))) + 1])
    (reloaded,) = ast.literal_eval(next(x for x in lines if x.startswith("[{'label'")))  # bertkit.load_task(run)
    assert reloaded == {"label": in_memory["label"], "score": in_memory["score"]}  # the run saved is the model used
    assert lines[-1] == "{0: 'negative', 1: 'positive'}"  # plain transformers reads the run's labels


def test_ner_example_runs_on_the_tiny_model(tiny_bert, tmp_path):
    data = tmp_path / "conll2003"
    data.mkdir()
    write_conll(data / "train.txt", 128, seed=0, long_every=16)
    write_conll(data / "valid.txt", 32, seed=1, long_every=8)
    out = run_example("ner_notebook.py", {"BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_DATA": str(data),
                                          "BERTKIT_EXAMPLE_OUT": str(tmp_path / "run"), "BERTKIT_EXAMPLE_LR": "1e-2",
                                          "BERTKIT_EXAMPLE_EPOCHS": "2"})
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert printed(out, "valid entity F1:") == [round(metrics["valid"]["f1"], 4)]  # the F1 the run recorded
    assert (metrics["name"], metrics["task"], metrics["main_metric"]) == ("conll2003", "token-classification", "f1")
    assert "'entities'" in out and "'Brussels', 'to', 'London', '.'" in out  # raw text is split into words


def test_qa_example_runs_on_the_tiny_model(tiny_bert, tmp_path):
    data = write_squad(tmp_path / "squad", n_train=64, n_dev=16)
    out = run_example("qa_notebook.py", {"BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_DATA": str(data),
                                         "BERTKIT_EXAMPLE_OUT": str(tmp_path / "run"), "BERTKIT_EXAMPLE_LR": "1e-2"})
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    v = metrics["validation"]
    assert printed(out, "validation EM / F1:") == [round(v["exact_match"], 2), round(v["f1"], 2)]
    assert (metrics["name"], metrics["task"], metrics["main_metric"]) == ("squad", "question-answering", "f1")
    answer = ast.literal_eval(out.splitlines()[-1].split(" | gold:")[0])
    assert set(answer) == {"answer", "score", "start", "end"}
    gold = json.loads((data / "validation.json").read_text())["data"][0]["paragraphs"][0]
    assert gold["context"][answer["start"]:answer["end"]] == answer["answer"]  # a span of the question's context
    assert out.splitlines()[-1].endswith(f"| gold: {gold['qas'][0]['answers'][0]['text']}")


def test_multiple_choice_example_runs_on_the_tiny_model(tiny_bert, tmp_path):
    """README: TokenClassification, QuestionAnswering and MultipleChoice each have a runnable script in examples/
    (multiple choice had none)."""
    data = write_swag(tmp_path / "swag", n_train=64, n_dev=16)
    out = run_example("mc_notebook.py", {"BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_DATA": str(data),
                                         "BERTKIT_EXAMPLE_OUT": str(tmp_path / "run"), "BERTKIT_EXAMPLE_LR": "1e-2"})
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert printed(out, "val accuracy:") == [round(metrics["val"]["accuracy"], 4)]  # the accuracy the run recorded
    assert (metrics["name"], metrics["task"], metrics["main_metric"]) == ("swag", "multiple-choice", "accuracy")
    lines = out.splitlines()
    in_memory = ast.literal_eval(lines[-2].split(" | gold:")[0])
    (reloaded,) = ast.literal_eval(lines[-1])  # bertkit.load_task(run): the same choice from the saved run
    assert set(in_memory) == {"label", "ending", "score", "probabilities"} and len(in_memory["probabilities"]) == 4
    assert reloaded["label"] == in_memory["label"] and reloaded["probabilities"] == in_memory["probabilities"]


def test_extract_example_runs_on_the_tiny_model(tiny_bert, tmp_path):
    out = run_example("extract_notebook.py", {"BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_LAYERS": "all",
                                              "BERTKIT_EXAMPLE_OUT": str(tmp_path / "feats")})
    assert "[(9, 64), (2, 64)]" in out and "[(32,), (32,)]" in out and "(9, 64)" in out.splitlines()[-2]


def test_casing_example_scores_a_casing_checkpoint_from_plain_transformers(tiny_bert, tmp_path):
    import torch

    import bertkit
    from bertkit.data.conll import read_conll_file

    ner = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=NER_LABELS, casing=True,
                                                      max_length=512)
    with torch.no_grad():  # make the casing rows matter, as training would
        ner.model.bert.embeddings.token_type_embeddings.weight[1:].normal_(0, 1.0)
    ner.save(tmp_path / "cased")
    # a CoNLL file whose gold tags are bertkit's own predictions (with casing ids, one window per sentence)
    words = read_conll_file(write_conll(tmp_path / "words.txt", 8, seed=2, long_every=4))["tokens"]
    tags = [p["tags"] for p in ner.predict(words)]
    lines = [line for ws, ts in zip(words, tags, strict=True) for line in [*(f"{w} {t}" for w, t in
                                                                              zip(ws, ts, strict=True)), ""]]
    (tmp_path / "test.txt").write_text("\n".join(lines) + "\n")
    out = run_example("ner_casing_plain.py", {}, [str(tmp_path / "cased"), str(tmp_path / "test.txt")])
    assert "type_vocab_size 4, bertkit_casing True; 8 sentences" in out
    assert printed(out, "entity F1 with casing ids:") == [100.0]  # plain transformers predicts what bertkit does
    assert printed(out, "entity F1 without (all 0):") != [100.0]  # without the casing ids it does not

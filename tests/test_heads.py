"""Regression and multi-label heads, class weights and long-text windows, through the CLI and the tasks on the
tiny random BERT: plain transformers reloads each head with the same outputs; predict and evaluate work on them."""

import json
import random
import shutil

import numpy as np
import pytest
import torch
import yaml
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from bertkit import MultiLabelClassification, SequenceClassification, SequenceRegression
from bertkit.cli import main
from bertkit.tasks.scores import pool_windows, resolve_class_weights

from .conftest import FILLER, MULTI, POSITIVE, TINY, write_multi_label, write_sts

FAST = [*TINY, "--warmup-ratio", "0.1"]


@pytest.fixture(scope="module")
def stsb_run(tmp_path_factory, tiny_bert):
    data = write_sts(tmp_path_factory.mktemp("data") / "stsb")
    out = tmp_path_factory.mktemp("runs") / "stsb"
    assert main(["finetune", "stsb", "--model", str(tiny_bert), "--data-dir", str(data), "--epochs", "3", *FAST,
                 "--output-dir", str(out)]) == 0
    return out, data


@pytest.fixture(scope="module")
def multi_run(tmp_path_factory, tiny_bert):
    data = write_multi_label(tmp_path_factory.mktemp("data") / "topics")
    out = tmp_path_factory.mktemp("runs") / "topics"
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(data), "--epochs", "3", *FAST,
                 *MULTI, "--output-dir", str(out)]) == 0
    return out, data


def plain(run, texts, pairs=None):
    model = AutoModelForSequenceClassification.from_pretrained(run).eval()
    tok = AutoTokenizer.from_pretrained(run)
    with torch.no_grad():
        return model, model(**tok(texts, pairs, padding=True, truncation=True, return_tensors="pt")).logits.numpy()


def test_a_lower_is_better_main_metric_keeps_the_lowest(tiny_bert, stsb_run, tmp_path):
    _, data = stsb_run
    out = tmp_path / "mse"
    assert main(["finetune", "stsb", "--model", str(tiny_bert), "--data-dir", str(data), "--epochs", "2", *FAST,
                 "--eval-every", "4", "--main-metric", "mse", "--output-dir", str(out)]) == 0
    evals = [json.loads(line) for line in (out / "eval_metrics.jsonl").read_text().splitlines()]
    best = min(evals, key=lambda e: e["sts-dev/mse"])
    assert len(evals) > 2 and json.loads((out / "metrics.json").read_text())["best_step"] == best["step"]


def test_regression_head_reloads_in_plain_transformers(stsb_run):
    run, _ = stsb_run
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics["sts-dev"]) == {"pearson", "spearman", "mse"} and metrics["main_metric"] == "spearman"
    assert metrics["sts-dev"]["spearman"] > 0.3  # loose floor: the score follows the positive words
    texts, pairs = ["the film was great and superb", "a dull plot"], ["the story", "the cast"]
    ours = SequenceRegression.from_pretrained(str(run)).predict(texts, pairs)
    model, logits = plain(run, texts, pairs)
    assert model.config.problem_type == "regression" and model.config.num_labels == 1
    np.testing.assert_allclose([o["value"] for o in ours], logits[:, 0], atol=1e-5)
    y = torch.tensor([4.5, 0.0])  # plain transformers trains it with the same loss: MSE on the one output
    tok = AutoTokenizer.from_pretrained(run)
    with torch.no_grad():
        loss = model(**tok(texts, pairs, padding=True, return_tensors="pt"), labels=y).loss
    assert loss.item() == pytest.approx(float(np.mean((logits[:, 0] - y.numpy()) ** 2)), rel=1e-5)


def test_predict_and_evaluate_on_a_regression_run(stsb_run, tmp_path, capsys):
    run, data = stsb_run
    (tmp_path / "in.tsv").write_text("sentence1\tsentence2\nthe film was superb\tthe story\n")
    assert main(["predict", "--model", str(run), "--input", str(tmp_path / "in.tsv"), "--output",
                 str(tmp_path / "p.jsonl")]) == 0
    (pred,) = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert set(pred) == {"text", "text_pair", "value"} and isinstance(pred["value"], float)
    capsys.readouterr()
    assert main(["evaluate", "--model", str(run), "--task", "stsb", "--data-dir", str(data),
                 "--precision", "fp32"]) == 0  # no --split: the run's own, its first validation file's (sts-dev)
    result = json.loads(capsys.readouterr().out)
    assert result["split"] == "sts-dev"
    metrics = json.loads((run / "metrics.json").read_text())["sts-dev"]
    assert result["spearman"] == pytest.approx(metrics["spearman"], abs=1e-6) and result["examples"] == 48


def test_predict_reads_a_file_laid_out_as_the_run_read_its_own(stsb_run, tmp_path, capsys):
    run, data = stsb_run  # trained on the STS Benchmark's files: tab-separated although named .csv, no header
    assert main(["predict", "--model", str(run), "--input", str(data / "sts-dev.csv")]) == 0
    preds = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    fields = [line.split("\t") for line in (data / "sts-dev.csv").read_text().splitlines()]
    assert [(p["id"], p["text"], p["text_pair"]) for p in preds] == [(f[3], f[5], f[6]) for f in fields]
    (tmp_path / "in.csv").write_text('sentence1,sentence2\n"the film, superb",the story\n')  # a CSV of its own
    assert main(["predict", "--model", str(run), "--input", str(tmp_path / "in.csv")]) == 0
    (pred,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (pred["text"], pred["text_pair"]) == ("the film, superb", "the story")
    (tmp_path / "in.tsv").write_text('sentence1\tsentence2\n"a ""b"""\tc\n')
    for quoting, text in (("csv", 'a "b"'), ("none", '"a ""b"""')):  # predict's --quoting, as finetune's
        assert main(["predict", "--model", str(run), "--input", str(tmp_path / "in.tsv"), "--quoting", quoting]) == 0
        assert json.loads(capsys.readouterr().out)["text"] == text


def test_predict_reads_a_file_quoted_as_the_run_read_its_own(tiny_bert, tmp_path, capsys):
    """A TSV quoted throughout (R's write.table), trained on with --quoting csv: predict reads it so too (it carried
    the run's layout over only where the run set columns or a delimiter)."""
    rows = [f'"{t} film {i}"\t"{t[:3]}"' for i in range(4) for t in ("good", "bad")]
    (tmp_path / "r.tsv").write_text('"text"\t"label"\n' + "\n".join(rows) + "\n")
    run = tmp_path / "run"
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(tmp_path), "--train-file", "r.tsv",
                 "--validation-files", "r.tsv", "--quoting", "csv", "--text-column", "text", "--label-column",
                 "label", "--label-names", "", "--max-steps", "1", "--batch-size", "4", "--output-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(run), "--input", str(tmp_path / "r.tsv")]) == 0
    texts = [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()]
    assert texts == [r.split("\t")[0].strip('"') for r in rows]


def test_multi_label_head_reloads_in_plain_transformers(multi_run):
    run, _ = multi_run
    metrics = json.loads((run / "metrics.json").read_text())["dev"]
    assert set(metrics) == {"micro_f1", "macro_f1", "subset_accuracy"} and metrics["micro_f1"] >= 0.75
    options = yaml.safe_load((run / "config.yaml").read_text())["task_options"]
    assert options["problem_type"] == "multi_label_classification" and options["threshold"] == 0.5
    texts = ["the film was great", "a dull and superb plot", "the story"]
    ours = MultiLabelClassification.from_pretrained(str(run)).predict(texts, with_probs=True)
    model, logits = plain(run, texts)
    assert model.config.problem_type == "multi_label_classification"
    assert sorted(model.config.id2label.values()) == ["neg", "pos"]
    probs = 1 / (1 + np.exp(-logits))  # [texts, labels]
    for o, p in zip(ours, probs, strict=True):
        assert o["labels"] == [model.config.id2label[i] for i in np.flatnonzero(p >= 0.5)]
        np.testing.assert_allclose([o["probabilities"][model.config.id2label[i]] for i in range(2)], p, atol=1e-5)
    gold = [json.loads(line)["gold"] for line in (run / "predictions_dev.jsonl").read_text().splitlines()]
    assert ["neg", "pos"] in gold and [] in gold and ["pos"] in gold  # several labels, one, or none per row


def test_predict_and_evaluate_on_a_multi_label_run(multi_run, tmp_path, capsys):
    run, data = multi_run
    (tmp_path / "in.txt").write_text("the film was great\na dull plot\n")
    assert main(["predict", "--model", str(run), "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "p.jsonl"), "--probs"]) == 0
    preds = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(preds) == 2 and all(set(p) == {"text", "labels", "scores", "probabilities"} for p in preds)
    assert all(p["scores"] == {n: p["probabilities"][n] for n in p["labels"]} for p in preds)
    capsys.readouterr()
    # no recipe: evaluate takes the run's own config.yaml (its data folder, files and metrics)
    assert main(["evaluate", "--model", str(run), "--split", "dev", "--precision", "fp32"]) == 0
    result = json.loads(capsys.readouterr().out)
    metrics = json.loads((run / "metrics.json").read_text())["dev"]
    assert result["micro_f1"] == pytest.approx(metrics["micro_f1"], abs=1e-6)


def test_predict_reads_a_table_by_the_column_the_run_trained_on(multi_run, tmp_path, capsys):
    run = tmp_path / "run"  # the multi-label run, as if trained on a 'review' column
    shutil.copytree(multi_run[0], run)
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config.replace("text_column: text\n", "text_column: review\n", 1))
    table = tmp_path / "in.csv"
    table.write_text("id,notes,review\n7,ignore me,the film was great\n")
    assert main(["predict", "--model", str(run), "--input", str(table)]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["id"], row["text"]) == ("7", "the film was great")
    table.write_text("id,notes,body\n7,ignore me,the film was great\n")  # neither its column nor a usual one
    assert main(["predict", "--model", str(run), "--input", str(table)]) == 2
    assert "line 1: no text column found (tried review, text, sentence," in capsys.readouterr().err


# --- class weights ---------------------------------------------------------------------------------------------
def test_balanced_weights_follow_scikit_learn_and_bce_pos_weight():
    from sklearn.utils.class_weight import compute_class_weight

    labels = [0, 0, 0, 0, 0, 0, 1, 1, 2]
    expected = compute_class_weight("balanced", classes=np.arange(3), y=np.asarray(labels))
    assert resolve_class_weights("balanced", labels, ["a", "b", "c"], "single_label_classification") == \
        pytest.approx(expected.tolist())
    multi = [[0], [0, 1], [], [0]]  # label 0 in 3 of 4 rows, label 1 in 1 of 4
    assert resolve_class_weights("balanced", multi, ["x", "y"], "multi_label_classification") == \
        pytest.approx([1 / 3, 3.0])
    with pytest.raises(Exception, match="never occur"):
        resolve_class_weights("balanced", [0, 0], ["a", "b"], "single_label_classification")


@pytest.mark.parametrize("cls, labels, loss", [
    (SequenceClassification, [0, 1, 1], lambda w: torch.nn.CrossEntropyLoss(weight=w)),
    (MultiLabelClassification, [[0], [0, 1], []], lambda w: torch.nn.BCEWithLogitsLoss(pos_weight=w)),
])
def test_weighted_loss_is_torch_weighted_loss(tiny_bert, cls, labels, loss):
    clf = cls.from_pretrained(str(tiny_bert), label_names=["a", "b"], class_weights=[1.0, 4.0])
    features = clf.encode(clf.examples({"text": ["good film", "bad film", "dull"], "label": labels}))
    batch = clf.collate([features[i] for i in range(3)])
    clf.model.eval()
    with torch.no_grad():
        logits = clf.model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        weighted = clf.compute_loss(clf.model, batch)
        unweighted = clf.model(**batch).loss  # the model's own (unweighted) loss
    expected = loss(torch.tensor([1.0, 4.0]))(logits, batch["labels"])
    assert weighted.item() == pytest.approx(expected.item(), rel=1e-6) and weighted.item() != unweighted.item()
    # the weights tensor is made once per device (a host copy every step cannot be captured in a CUDA graph), and
    # anew when the weights change
    made = clf._weights_on(torch.device("cpu"))
    assert clf._weights_on(torch.device("cpu")) is made
    clf.class_weights = [2.0, 1.0]
    assert clf._weights_on(torch.device("cpu")).tolist() == [2.0, 1.0]


def test_balanced_class_weights_are_recorded_as_numbers(tiny_bert, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rows = [f"{'great film' if i % 4 == 0 else 'dull film'} {i}\t{int(i % 4 == 0)}\n" for i in range(64)]
    (data / "train.tsv").write_text("sentence\tlabel\n" + "".join(rows))  # 16 positive, 48 negative
    (data / "dev.tsv").write_text("sentence\tlabel\n" + "".join(rows[:16]))
    out = tmp_path / "run"
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(data), "--epochs", "1", *FAST,
                 "--class-weights", "balanced", "--output-dir", str(out)]) == 0
    options = yaml.safe_load((out / "config.yaml").read_text())["task_options"]
    assert options["class_weights"] == pytest.approx([64 / (2 * 48), 64 / (2 * 16)])  # n / (labels × count)


def test_balanced_class_weights_from_a_notebook_come_from_fit_s_training_labels(tiny_bert, tmp_path, caplog):
    from bertkit import Trainer, run_config

    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["neg", "pos"], class_weights="balanced")
    train = {"text": [f"film {i}" for i in range(8)], "label": ["pos", "neg", "neg", "neg"] * 2}  # 2 pos, 6 neg
    cfg = run_config(max_steps=1, batch_size=4, precision="fp32", output_dir=str(tmp_path / "run"))
    Trainer(clf, cfg).fit(train, {"text": ["a film"], "label": ["pos"]})
    assert clf.class_weights == pytest.approx([8 / (2 * 6), 8 / (2 * 2)])  # n / (labels × count), the CLI's rule
    options = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["task_options"]
    assert options["class_weights"] == pytest.approx([8 / 12, 2.0])  # recorded as numbers, as a CLI run's are
    fresh = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["neg", "pos"],
                                                   class_weights="balanced")
    batch = fresh.collate([fresh.encode(fresh.examples(train))[0]])
    with pytest.raises(Exception, match="computed from the training labels when fit starts"):
        fresh.compute_loss(fresh.model, batch)  # not before: unweighted would be silently wrong


# --- long texts: windows pooled per text -------------------------------------------------------------------------
def test_pool_windows_numpy_expectation():
    logits = np.array([[1.0, 0.0], [3.0, -2.0], [0.5, 0.5], [-1.0, 4.0]], dtype=np.float32)  # [windows, labels]
    owner = [0, 0, 1, 0]
    np.testing.assert_allclose(pool_windows(logits, owner, 2, "mean"), [[1.0, 2 / 3], [0.5, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(pool_windows(logits, owner, 2, "max"), [[3.0, 4.0], [0.5, 0.5]])


def test_a_2000_word_document_gets_one_prediction_from_windows_covering_every_piece(tiny_bert):
    rng = random.Random(0)
    doc = " ".join(rng.choice(FILLER + POSITIVE + ["unbelievably", "cinematographers"]) for _ in range(2000))
    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["a", "b"], max_length=64,
                                                 doc_pooling="mean", doc_window_overlap=16)
    features = clf.encode(clf.examples({"text": [doc, "short one"], "label": [1, 0]}))
    pieces = clf.tokenizer(doc, add_special_tokens=False)["input_ids"]
    windows = [f["input_ids"][1:-1] for f in features if f["example_index"] == 0]  # without [CLS] and [SEP]
    assert len(pieces) > 2000 and len(windows) > 1 and all(len(w) <= 62 for w in windows)
    start = 0
    for w in windows:  # each window continues the text where the previous one left off, 16 pieces back
        assert w == pieces[start:start + len(w)]
        start += len(w) - 16
    assert start + 16 == len(pieces)  # the last window ends at the last piece
    assert [f["labels"] for f in features] == [1] * len(windows) + [0]  # every window carries its text's label
    for how in ("mean", "max"):
        clf.doc_pooling = how
        preds = clf.predict([doc, "short one"], with_probs=True)
        assert len(preds) == 2 and preds[0]["label"] in ("a", "b")


def test_windows_in_training_and_evaluation(tiny_bert, sst2_dir, tmp_path):
    """Each window trains with its text's label; evaluation scores one pooled prediction per text."""
    out = tmp_path / "run"
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--epochs", "1", *FAST,
                 "--max-length", "12", "--doc-pooling", "max", "--doc-window-overlap", "4", "--output-dir",
                 str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    preds = (out / "predictions_dev.jsonl").read_text().splitlines()
    assert metrics["data"] == {"train": 256, "dev": 64} and len(preds) == 64
    assert metrics["train"]["examples_seen"] > 256  # more windows than texts: the sentences are longer than 10 pieces
    reloaded = SequenceClassification.from_pretrained(str(out))
    assert (reloaded.options.doc_pooling, reloaded.options.doc_window_overlap, reloaded.max_length) == ("max", 4, 12)
    assert (reloaded.doc_pooling, reloaded.window_overlap) == ("max", 4)  # what encoding and pooling use

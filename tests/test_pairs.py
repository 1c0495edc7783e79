"""Sentence-pair tasks (MNLI, RTE, MRPC): loaders, segment ids, multi-seed summaries, pair prediction."""

import json

import numpy as np
import pytest

from bertkit import SequenceClassification
from bertkit.cli import main
from bertkit.config_files import load_recipe
from bertkit.errors import DataError

from .conftest import MNLI_HEADER, SHARED_DATA, hub_cache_with, tiny_finetune, write_rte


def mnli_files(d):
    d.mkdir(parents=True, exist_ok=True)
    rows = [{"sentence1": "A man sleeps.", "sentence2": "Someone rests.", "gold_label": "entailment"},
            {"sentence1": "A man sleeps.", "sentence2": "A cat runs.", "gold_label": "-"},
            {"sentence1": "A man sleeps.", "sentence2": "He is awake.", "gold_label": "contradiction"}]
    (d / "train_sample10k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
        line = "\t".join(["0", "1", "1n", "slate", "x", "x", "x", "x", "The sky is blue.", "It is \"null\".",
                          "neutral", "", "", "", "", "neutral"])
        (d / name).write_text(MNLI_HEADER + "\n" + line + "\n")
    return d


def test_mnli_jsonl_train_skips_no_majority_rows_and_evaluates_both_dev_sets(tmp_path, capsys):
    cfg = load_recipe("mnli", {"data_dir": str(mnli_files(tmp_path / "mnli"))})
    train, evals, names = SequenceClassification.load_data(cfg)
    assert names == ["entailment", "neutral", "contradiction"]
    assert train["label"] == [0, 2] and train["text_pair"] == ["Someone rests.", "He is awake."]
    assert list(evals) == ["dev_matched", "dev_mismatched"] and evals["dev_matched"]["label"] == [1]
    assert evals["dev_matched"]["text_pair"] == ['It is "null".']
    assert "skipped 1 rows labelled -" in capsys.readouterr().err


def test_rte_text_labels_and_mrpc_bom_crlf_quality_column(tmp_path):
    rte = tmp_path / "rte"
    rte.mkdir()
    (rte / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\tA b.\tA.\tentailment\n"
                                   "1\tC d.\tE.\tnot_entailment\n")
    (rte / "dev.tsv").write_text((rte / "train.tsv").read_text())
    train, _, _ = SequenceClassification.load_data(load_recipe("rte", {"data_dir": str(rte)}))
    assert train["label"] == [0, 1]
    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    text = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n1\t1\t2\tHe said \" yes \" .\tHe agreed .\r\n"
    (mrpc / "train.tsv").write_bytes(text.encode())
    (mrpc / "dev.tsv").write_bytes(text.encode())
    train, evals, names = SequenceClassification.load_data(load_recipe("mrpc", {"data_dir": str(mrpc)}))
    assert names == ["not_equivalent", "equivalent"] and train["label"] == [1]
    assert train["text"] == ['He said " yes " .'] and evals["dev"]["text_pair"] == ["He agreed ."]


@pytest.mark.parametrize("line, message, field", [
    ("0\tA b.\tA.\tmaybe\n", "unknown label 'maybe'", "label"),
    ("0\tA b.\t\tentailment\n", "empty text", "sentence2"),
])
def test_pair_bad_rows(tmp_path, line, message, field):
    rte = tmp_path / "rte"
    rte.mkdir()
    (rte / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + line)
    (rte / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n")
    with pytest.raises(DataError, match=message) as e:
        SequenceClassification.load_data(load_recipe("rte", {"data_dir": str(rte)}))
    assert e.value.field == field and e.value.line == 2


def test_missing_pair_column_is_named(tmp_path):
    rte = tmp_path / "rte"
    rte.mkdir()
    (rte / "train.tsv").write_text("index\tsentence1\tlabel\n0\tA b.\tentailment\n")
    with pytest.raises(DataError, match='field "sentence2": missing column'):
        SequenceClassification.load_data(load_recipe("rte", {"data_dir": str(rte)}))
    (rte / "train.tsv").write_text("premise\thypothesis\tgold\nA b.\tA.\tentailment\n")  # all said at once (were
    with pytest.raises(DataError) as e:  # said one a run: three runs to find them)
        SequenceClassification.load_data(load_recipe("rte", {"data_dir": str(rte)}))
    assert e.value.field == "sentence1" and e.value.reason == (
        "missing columns 'sentence1', 'sentence2', 'label' (found: premise, hypothesis, gold; --text-column, "
        "--text-pair-column, --label-column name the columns to read)")


def test_pair_encoding_segment_ids_and_longest_first_truncation(tiny_bert):
    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["a", "b"], max_length=12)
    import datasets

    feats = clf.encode(datasets.Dataset.from_dict({"text": ["a man sleeps"], "text_pair": ["someone rests"],
                                                   "label": [0]}))
    ids, segments = feats[0]["input_ids"], feats[0]["token_type_ids"]
    tokens = clf.tokenizer.convert_ids_to_tokens(ids)
    assert tokens == ["[CLS]", "a", "man", "sleeps", "[SEP]", "someone", "rests", "[SEP]"]
    assert segments == [0, 0, 0, 0, 0, 1, 1, 1]
    long = clf.encode(datasets.Dataset.from_dict({"text": ["one two three four five six seven eight nine ten"],
                                                  "text_pair": ["yes no"]}))
    tokens = clf.tokenizer.convert_ids_to_tokens(long[0]["input_ids"])
    assert len(tokens) == 12 and tokens[-3:] == ["yes", "no", "[SEP]"]  # the longer text was cut


def test_multi_seed_run_writes_mean_and_std(tmp_path, tiny_bert, capsys):
    data = write_rte(tmp_path / "rte")
    out = tmp_path / "runs"
    tiny_finetune(tiny_bert, "rte", data, out, "--epochs", "2", "--seeds", "13,42")
    summary = json.loads((out / "summary.json").read_text())
    per_seed = [json.loads((out / f"seed-{s}" / "metrics.json").read_text())["dev"]["accuracy"] for s in (13, 42)]
    m = summary["metrics"]["dev/accuracy"]
    assert summary["seeds"] == [13, 42] and m["values"] == per_seed
    assert (summary["name"], summary["task"]) == ("rte", "sequence-classification")
    assert m["mean"] == pytest.approx(np.mean(per_seed)) and m["std"] == pytest.approx(np.std(per_seed, ddof=1))
    assert max(per_seed) >= 0.75  # at least one seed learns the task (tiny sets vary by seed, as RTE does)
    assert "dev/accuracy" in capsys.readouterr().out
    assert (out / "report_seeds.png").is_file() and "| dev/accuracy |" in (out / "report.md").read_text()
    # pair prediction from JSONL {premise, hypothesis}
    inp = tmp_path / "pairs.jsonl"
    inp.write_text(json.dumps({"premise": "the film is", "hypothesis": "a great plot"}) + "\n")
    assert main(["predict", "--model", str(out / "seed-13"), "--input", str(inp), "--probs"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert row["text_pair"] == "a great plot" and set(row["probabilities"]) == {"entailment", "not_entailment"}
    # text lines: the two texts split by a tab (as JSONL's answer); a line without its second text is refused
    lines = tmp_path / "pairs.txt"
    lines.write_text("the film is\ta great plot\n")
    assert main(["predict", "--model", str(out / "seed-13"), "--input", str(lines), "--probs"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == row
    lines.write_text("the film is\ta great plot\nthe film is\n")
    assert main(["predict", "--model", str(out / "seed-13"), "--input", str(lines)]) == 2
    assert f"{lines}, line 2: this model classifies pairs of texts" in capsys.readouterr().err
    lines.write_text("the film is\ta great\tplot\n")  # a third field was read into the second text
    assert main(["predict", "--model", str(out / "seed-13"), "--input", str(lines)]) == 2
    assert f"{lines}, line 1: this model classifies pairs of texts: give each line as a text, a tab, the second " \
           "text (found 3 fields)" in capsys.readouterr().err
    assert main(["predict", "--model", str(out), "--input", str(inp)]) == 2  # the seeds' folder: which seed's?
    assert f"error: model folder {out} holds one run per seed (seed-13, seed-42): give one of them, e.g. " \
           f"{out / 'seed-13'}\n" in capsys.readouterr().err


@pytest.mark.skipif(not (SHARED_DATA / "mnli").is_dir(), reason="shared data not available")
def test_real_pair_files_parse(capsys):
    sizes = {"mnli": (10000, 9815), "rte": (2490, 277), "mrpc": (3667, 408)}
    for task, (n_train, n_dev) in sizes.items():
        train, evals, _ = SequenceClassification.load_data(load_recipe(task, {"data_dir": str(SHARED_DATA / task)}))
        assert len(train) == n_train and len(next(iter(evals.values()))) == n_dev, task
    # the public 10k MultiNLI sample happens to hold no '-' rows (checked with grep): nothing is skipped
    assert "skipped" not in capsys.readouterr().err


def test_a_run_of_another_task_gets_a_new_head(tiny_bert, tmp_path, capsys):
    """Intermediate training (e.g. MNLI, then RTE): the encoder is kept, the head is new for the new labels."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    mnli = AutoModelForSequenceClassification.from_pretrained(
        tiny_bert, num_labels=3, id2label={0: "entailment", 1: "neutral", 2: "contradiction"})
    mnli.save_pretrained(tmp_path / "mnli")
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path / "mnli")
    rte = SequenceClassification.from_pretrained(str(tmp_path / "mnli"), label_names=["entailment", "not_entailment"])
    assert rte.model.classifier.out_features == 2 and rte.label_names == ["entailment", "not_entailment"]
    assert "replaced by a new one" in capsys.readouterr().err
    encoder = "bert.encoder.layer.0.attention.self.query.weight"
    assert torch.equal(rte.model.state_dict()[encoder], mnli.state_dict()[encoder])
    same_size = SequenceClassification.from_pretrained(str(tmp_path / "mnli"), label_names=["a", "b", "c"])
    assert not torch.equal(same_size.model.classifier.weight, mnli.classifier.weight)
    kept = SequenceClassification.from_pretrained(str(tmp_path / "mnli"))  # no labels asked: the run's own head
    assert torch.equal(kept.model.classifier.weight, mnli.classifier.weight)


def test_a_hub_checkpoint_of_another_task_gets_a_new_head(tiny_bert, tmp_path, monkeypatch, capsys):
    """As above, from a hub id (its config.json in the hub's cache): a head of another size is not a load error."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    mnli = AutoModelForSequenceClassification.from_pretrained(
        tiny_bert, num_labels=3, id2label={0: "entailment", 1: "neutral", 2: "contradiction"})
    mnli.save_pretrained(tmp_path / "mnli")
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path / "mnli")
    hub_cache_with(tmp_path / "mnli", tmp_path / "hub", "acme/mnli", monkeypatch)
    rte = SequenceClassification.from_pretrained("acme/mnli", label_names=["entailment", "not_entailment"])
    assert rte.model.classifier.out_features == 2
    assert "acme/mnli: its head for ['entailment', 'neutral', 'contradiction'] is replaced" in capsys.readouterr().err


@pytest.mark.parametrize("recipe", ["mrpc", "rte", "mnli", "cola"])
def test_encoding_is_run_glues(recipe, tiny_bert, monkeypatch):
    """bertkit encodes single texts and pairs as run_glue.py does (as transcribed for the Trainer reference in
    benchmarks/parity_sides.py): the same input ids, token types and labels, example for example, on real GLUE
    data at a max_length of 32, so that most pairs are cut and which text loses tokens matters."""
    if not (SHARED_DATA / recipe).is_dir():
        pytest.skip(f"shared {recipe} data not available")
    from pathlib import Path

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))
    from parity_sides import sequence_side

    cfg = load_recipe(recipe, {"data_dir": str(SHARED_DATA / recipe), "max_length": 32, "max_train_samples": 400,
                                "max_eval_samples": 400})
    train, evals, labels = SequenceClassification.load_data(cfg)
    dev = next(iter(evals.values()))
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=len(labels))
    task = SequenceClassification(model, tok, label_names=labels, max_length=32, options=cfg.task_options)
    side = sequence_side(cfg, tok, labels, dev)
    columns = ("input_ids", "token_type_ids", "labels")
    for examples in (train, dev):
        ours, theirs = task.encode(examples), side.encode_train(examples)
        assert len(ours) == len(theirs) == len(examples) > 100
        assert [[row[c] for c in columns] for row in ours] == [[row[c] for c in columns] for row in theirs]
        if recipe != "cola":  # most pairs are cut (CoLA's sentences are short)
            assert sum(length == 32 for length in ours["length"]) > len(examples) / 2
        assert any(1 in types for types in ours["token_type_ids"]) == (recipe != "cola")  # pairs: segment B

"""Named-entity recognition (CoNLL-2003) on the tiny model: reading CoNLL files, word-piece alignment, windows for
long sentences, conlleval parity of the metric, the run folder, evaluate / predict, notebook use and bad input."""

import io
import json
import random
import subprocess
import sys

import datasets
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from seqeval.metrics.sequence_labeling import get_entities
from transformers import AutoModelForTokenClassification, AutoTokenizer

import bertkit
from bertkit.cli import main
from bertkit.config_files import load_recipe, load_run_config
from bertkit.data.conll import (
    conll_lines,
    label_names_for,
    read_conll_file,
    to_iob2,
)
from bertkit.errors import BertkitError, DataError
from bertkit.metrics.ner import EntityScores
from bertkit.tasks.casing import CASING_TYPES, word_casing
from bertkit.tasks.token_classification import TokenClassification
from bertkit.tasks.windows import merge_windows, word_windows

from . import conlleval
from .conftest import NER_FILLER, NER_LABELS, NER_LAST, SHARED_DATA, tiny_finetune, write_conll_dir

MAX_LENGTH = 24  # in the run below: 22 pieces per window, so the 40-word sentences are cut into windows


@pytest.fixture(scope="module")
def conll_dir(tmp_path_factory):
    return write_conll_dir(tmp_path_factory.mktemp("data") / "conll2003", n_train=256, n_dev=64)


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory, tiny_bert, conll_dir):
    out = tmp_path_factory.mktemp("runs") / "conll2003"
    return tiny_finetune(tiny_bert, "conll2003", conll_dir, out, "--epochs", "2", "--max-length", str(MAX_LENGTH))


def write(path, text):
    path.write_text(text)
    return path


# --- reading CoNLL files ------------------------------------------------------------------------------------------
def test_reads_columns_docstart_and_sentence_breaks(tmp_path):
    f = write(tmp_path / "a.txt", "-DOCSTART- -X- -X- O\r\n\r\nEU NNP B-NP B-ORG \r\nrejects VBZ B-VP O\r\n\r\n\r\n"
                                  "-DOCSTART- -X- -X- O\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n")
    data = read_conll_file(f)
    assert data["tokens"] == [["EU", "rejects"], ["Peter", "Blackburn"]]
    assert data["tags"] == [["B-ORG", "O"], ["B-PER", "I-PER"]] and data["scheme"] == "IOB2"
    assert data["docs"] == [0, 1]  # the document of each sentence, counted in -DOCSTART- lines
    assert read_conll_file(f, tag_column=2)["tags"][0] == ["B-NP", "B-VP"]  # another column, counted from 0


@pytest.mark.parametrize("sep", ["\t", " ", "  \t"])
def test_two_column_form(tmp_path, sep):
    f = write(tmp_path / "b.tsv", f"EU{sep}B-ORG\nrejects{sep}O\n\nGerman{sep}B-MISC\n")
    assert read_conll_file(f) == {"tokens": [["EU", "rejects"], ["German"]], "tags": [["B-ORG", "O"], ["B-MISC"]],
                                  "docs": [0, 0], "scheme": "IOB2", "converted": 0}  # no -DOCSTART-: one document


def test_iob1_is_converted_to_iob2_and_reported(tmp_path, capsys):
    assert to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "I-ORG"]) == (
        ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "I-ORG"], 3)
    assert to_iob2(["B-PER", "I-PER", "O", "B-LOC"]) == (["B-PER", "I-PER", "O", "B-LOC"], 0)  # IOB2 unchanged
    iob1 = "Peter I-PER\nBlackburn I-PER\nand O\nJohn I-PER\nSmith I-PER\nMary B-PER\nin O\nBonn I-LOC\n"
    write(tmp_path / "train.txt", iob1)
    write(tmp_path / "valid.txt", "Paris I-LOC\n")
    cfg = load_recipe("conll2003", {"data_dir": str(tmp_path), "test_file": None})
    train, evals, names = TokenClassification.load_data(cfg)
    assert train["tags"] == [["B-PER", "I-PER", "O", "B-PER", "I-PER", "B-PER", "O", "B-LOC"]]
    assert evals["valid"]["tags"] == [["B-LOC"]] and names == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    err = capsys.readouterr().err
    assert "train.txt: 1 sentences, 8 tokens, tags IOB1, converted to IOB2 (3 entities began with I-)" in err
    assert "valid.txt: 1 sentences, 1 tokens, tags IOB1" in err


def test_jsonl_in_the_datasets_layout_reads_as_its_conll_file_does(conll_dir, tmp_path):
    conll = read_conll_file(conll_dir / "valid.txt")
    names = label_names_for(conll["tags"])
    rows = [{"tokens": w, "ner_tags": [names.index(t) if i % 2 else t for t in tags]}  # ids and names alike
            for i, (w, tags) in enumerate(zip(conll["tokens"], conll["tags"], strict=True))]
    f = write(tmp_path / "valid.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    data = read_conll_file(f, label_names=names, tag_ids=names)
    assert (data["tokens"], data["tags"], data["scheme"]) == (conll["tokens"], conll["tags"], "IOB2")
    with pytest.raises(DataError, match='line 2, field "ner_tags": tag id .*: give the tags\' names in id order'):
        read_conll_file(f, label_names=names)  # names derived from other data: the ids need not follow their order
    assert data["docs"] == [0] * len(rows)  # a JSONL file is one document
    iob1 = write(tmp_path / "iob1.jsonl", json.dumps({"words": ["Peter", "Bonn"], "labels": ["I-PER", "I-LOC"]}))
    data = read_conll_file(iob1, columns=["words", "labels"])  # other field names: the options' hub_columns
    assert (data["tags"], data["scheme"], data["converted"]) == ([["B-PER", "B-LOC"]], "IOB1", 2)
    assert "tags" not in read_conll_file(f, tagged=False)
    assert read_conll_file(f, label_names=names, max_samples=3, tag_ids=names)["tokens"] == conll["tokens"][:3]


def test_json_lines_named_json_as_run_ner_writes_them_read_as_jsonl(tmp_path):
    rows = [{"id": "0", "tokens": ["Peter", "visited", "Bonn"], "ner_tags": [1, 0, 3]}]  # run_ner.py's .json files
    f = write(tmp_path / "train.json", "".join(json.dumps(r) + "\n" for r in rows))
    data = read_conll_file(f, tag_ids=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])  # was read as CoNLL columns
    assert (data["tokens"], data["tags"]) == ([["Peter", "visited", "Bonn"]], [["B-PER", "O", "B-LOC"]])
    other = write(tmp_path / "words.json", json.dumps({"words": ["Bonn"], "labels": ["B-LOC"]}))
    with pytest.raises(DataError, match=r'line 1, field "tokens": missing \(the line has: words, labels; '
                                        r"--hub-columns names"):
        read_conll_file(other)


def test_a_run_on_jsonl_files_of_the_working_folder_scores_no_recipe_test_file(tiny_bert, conll_dir, tmp_path,
                                                                                monkeypatch, capsys):
    for split in ("train", "valid"):
        conll = read_conll_file(conll_dir / f"{split}.txt", max_samples=64)
        rows = [{"tokens": w, "ner_tags": t} for w, t in zip(conll["tokens"], conll["tags"], strict=True)]
        write(tmp_path / f"{split}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BERTKIT_DATA_DIR", raising=False)
    assert main(["finetune", "conll2003", "--model", str(tiny_bert), "--train-file", "train.jsonl",
                 "--validation-files", "valid.jsonl", "--precision", "fp32", "--max-steps", "2",
                 "--output-dir", "run"]) == 0  # no test.txt here: the recipe's test file is CoNLL-2003's
    assert "no test set: the recipe's test file test.txt is not in the working folder" in capsys.readouterr().err
    assert load_run_config(tmp_path / "run" / "config.yaml").test_file is None
    assert (tmp_path / "run" / "predictions_valid.conll").is_file() and not list((tmp_path / "run").glob("*test*"))


def test_label_order_is_o_then_b_i_per_type_alphabetically():
    assert label_names_for([["B-PER", "O", "I-MISC"], ["B-ORG", "B-LOC"]]) == NER_LABELS


@pytest.mark.parametrize("content, line, message", [
    ("EU NNP B-ORG\nrejects O\n", 2, "expected 3 columns (as in the file's first token line), found 2"),
    ("EU B-ORG\n\nfoo X-FOO\n", 3, "unknown tag 'X-FOO': expected O, B-TYPE or I-TYPE (IOB1 or IOB2)"),
    ("EU B-ORG\nPeter E-PER\n", 2, "IOBES/BILOU tags are not supported"),
    ("EU B\n", 1, "an entity tag needs a type"),
    ("EU\nrejects\n", 1, "no tag column -1 in a line of 1 column(s)"),
    ("-DOCSTART- -X- O\n\n\n", None, "no sentences"),
    ("", None, "file is empty"),
])
def test_bad_files_name_file_and_line(tmp_path, content, line, message):
    f = write(tmp_path / "bad.txt", content)
    with pytest.raises(DataError) as e:
        read_conll_file(f)
    assert e.value.line == line and message in str(e.value) and str(f) in str(e.value)


def test_a_tag_outside_the_training_label_set_is_an_error(tmp_path):
    f = write(tmp_path / "valid.txt", "EU B-ORG\n\nfoo B-FOO\n")
    with pytest.raises(DataError, match=r"line 3, field \"column 2\": tag 'B-FOO' is not in the label set"):
        read_conll_file(f, label_names=NER_LABELS)


# --- word pieces and windows --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ner_task(tiny_bert):
    return bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=NER_LABELS)


@pytest.mark.parametrize("all_pieces", [False, True])
def test_first_piece_of_each_word_carries_its_label(ner_task, all_pieces):
    ner_task.label_all_pieces = all_pieces
    examples = datasets.Dataset.from_dict({"tokens": [["Kowalczyk", "met", "Okonkwo", "\u200b"]],
                                           "tags": [["B-PER", "O", "B-PER", "O"]]})
    (feature,) = ner_task.encode(examples)
    ner_task.label_all_pieces = False
    pieces = ner_task.tokenizer.convert_ids_to_tokens(feature["input_ids"])
    assert pieces == ["[CLS]", "ko", "##wal", "##cz", "##yk", "met", "ok", "##on", "##k", "##wo", "[UNK]", "[SEP]"]
    assert feature["word_ids"] == [-1, 0, 0, 0, 0, 1, 2, 2, 2, 2, 3, -1]  # a word with no pieces becomes [UNK]
    B, I, O = NER_LABELS.index("B-PER"), NER_LABELS.index("I-PER"), 0  # noqa: E741
    rest = I if all_pieces else -100  # the pieces after the first: I- of the word's type, or left out of the loss
    assert feature["labels"] == [-100, B, rest, rest, rest, O, B, rest, rest, rest, O, -100]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), max_size=40), st.integers(6, 12), st.data())
def test_windows_cover_the_sentence_in_order_within_budget(counts, budget, data):
    overlap = data.draw(st.integers(0, budget - 1))
    windows = word_windows(counts, budget, overlap)
    if not counts:
        assert windows == []
        return
    assert windows[0][0] == 0 and windows[-1][1] == len(counts)
    assert all(sum(counts[s:e]) <= budget and e > s for s, e in windows)
    for (s1, e1), (s2, e2) in zip(windows, windows[1:], strict=False):
        assert s1 < s2 <= e1 < e2 and sum(counts[s2:e1]) <= overlap  # no gap, progress, bounded overlap
    if sum(counts) <= budget:
        assert windows == [(0, len(counts))]


def test_each_word_takes_the_window_where_it_has_most_context():
    # words 0..5 of one piece each; windows hold words 0-3 and 2-5; logits say which window they came from
    word_ids = [[-1, 0, 1, 2, 3, -1], [-1, 2, 3, 4, 5, -1]]
    logits = [np.tile([1.0, 0.0], (6, 1)), np.tile([0.0, 1.0], (6, 1))]
    (merged,) = merge_windows(word_ids, [0, 0], logits, [6])
    # contexts: window 1: w2 min(2,1)=1, w3 min(3,0)=0; window 2: w2 min(0,3)=0, w3 min(1,2)=1
    assert merged.argmax(-1).tolist() == [0, 0, 0, 1, 1, 1]


def test_a_sentence_longer_than_max_length_gets_every_word_tagged(tiny_bert):
    ner = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=NER_LABELS, max_length=8)
    words = [random.Random(0).choice(NER_LAST + NER_FILLER) for _ in range(50)]
    features = ner.encode(datasets.Dataset.from_dict({"tokens": [words]}))
    assert len(features) > 10 and max(features["length"]) <= 8  # many windows, none truncated
    (pred,) = ner.predict([words])
    assert pred["tokens"] == words and len(pred["tags"]) == 50 and set(pred["tags"]) <= set(NER_LABELS)


# --- document context ----------------------------------------------------------------------------------------------
def test_document_context_fills_the_window_unlabelled_within_the_document(tiny_bert):
    ner = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=NER_LABELS, max_length=16, context=4)
    doc = [["Peter", "met", "Mary"], ["in", "Paris"], ["today", "."], ["Reuters", "said"]]
    tags = [["B-PER", "O", "B-PER"], ["O", "B-LOC"], ["O", "O"], ["B-ORG", "O"]]
    f = ner.encode(datasets.Dataset.from_dict({"tokens": doc, "tags": tags, "doc": [0, 0, 0, 1]}))
    pieces = [ner.tokenizer.convert_ids_to_tokens(ids) for ids in f["input_ids"]]
    # sentence 1: up to 4 pieces of its document on each side (all there is: 3 left, 2 right)
    assert pieces[1] == ["[CLS]", "peter", "met", "mary", "in", "paris", "today", ".", "[SEP]"]
    assert f["word_ids"][1] == [-1, -1, -1, -1, 0, 1, -1, -1, -1]  # context pieces belong to no word
    assert f["labels"][1] == [-100, -100, -100, -100, 0, NER_LABELS.index("B-LOC"), -100, -100, -100]
    assert pieces[0][:5] == ["[CLS]", "peter", "met", "mary", "in"] and len(pieces[0]) == 2 + 3 + 4  # 4 right
    assert pieces[3] == ["[CLS]", "reuters", "said", "[SEP]"]  # document 1: nothing from document 0
    # a sentence longer than a window: its own words outside the window are context, the window stays ≤ 16
    long = [random.Random(1).choice(NER_LAST + NER_FILLER) for _ in range(30)]
    f = ner.encode(datasets.Dataset.from_dict({"tokens": [["Paris"], long], "doc": [0, 0]}))
    assert max(f["length"]) <= 16 and len(f) > 3
    pieces = [ner.tokenizer.convert_tokens_to_ids(ner.tokenizer.tokenize(w)) for w in long]  # per word
    for ids, wids in zip(f["input_ids"][1:], f["word_ids"][1:], strict=True):  # each window of the long sentence
        inside = [w for w in wids if w >= 0]
        first, last = inside[0], inside[-1]
        n_left = wids.index(first) - 1  # context pieces between [CLS] and the window's first word
        n_right = len(wids) - 2 - n_left - len(inside)  # and between the last word and [SEP]
        assert wids == [-1] * (1 + n_left) + inside + [-1] * (1 + n_right) and n_left <= 4 and n_right <= 4
        before = ner.tokenizer.convert_tokens_to_ids(["paris"]) + [p for w in range(first) for p in pieces[w]]
        after = [p for w in range(last + 1, 30) for p in pieces[w]]
        assert ids[1:1 + n_left] == before[len(before) - n_left:]  # the pieces right before the window
        assert ids[len(ids) - 1 - n_right:-1] == after[:n_right]  # and right after it
        room = 14 - len(inside)  # no room left unused while a side still has context to give
        assert n_left + n_right == room or (n_left == min(4, len(before)) and n_right == min(4, len(after)))
    (pred,) = ner.predict([long], documents=[0])
    assert len(pred["tags"]) == 30 and pred["tokens"] == long  # every word predicted, in order
    with pytest.raises(BertkitError, match="documents: 1 numbers for 2 sentences"):
        ner.predict([long, long], documents=[0])


def test_ner_context_is_a_recipe_option_for_token_classification_only(tiny_bert, conll_dir):
    given = {"model": str(tiny_bert), "data_dir": str(conll_dir)}
    cfg = load_recipe("conll2003", {"ner_context": 8, **given})  # the 0.2 name, an alias of context
    assert cfg.task_options.context == 8 and cfg == load_recipe("conll2003", {"context": 8, **given})
    ner = bertkit.TokenClassification.from_config(cfg, label_names=NER_LABELS)
    assert ner.options.context == ner.context == 8
    with pytest.raises(BertkitError, match="unknown key 'ner_context'"):  # not an option of sequence classification
        load_recipe("sst2", {"ner_context": 8})
    with pytest.raises(BertkitError, match="'context' .* must be 0 or more"):
        load_recipe("conll2003", {"ner_context": -1})


# --- the metric against an independent conlleval port -------------------------------------------------------------
TAGS = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG", "B-ORG", "I-MISC"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(TAGS), st.sampled_from(TAGS)), min_size=1, max_size=15),
                min_size=1, max_size=20))
def test_entity_scores_equal_conlleval_on_any_tags(sentences):
    gold = [[g for g, _ in s] for s in sentences]
    pred = [[p for _, p in s] for s in sentences]
    ours = EntityScores().compute(predictions=pred, references=gold)
    theirs = conlleval.evaluate(conll_lines([["w"] * len(g) for g in gold], gold, pred).splitlines())
    assert ours["f1"] == pytest.approx(theirs["overall"]["fb1"] / 100, abs=1e-9)
    assert ours["precision"] == pytest.approx(theirs["overall"]["precision"] / 100, abs=1e-9)
    assert {t: round(v["f1"] * 100, 9) for t, v in ours["per_type"].items()} == {
        t: round(v["fb1"], 9) for t, v in theirs["types"].items()}


# --- a fine-tuned run ---------------------------------------------------------------------------------------------
def test_run_folder_metrics_and_predictions(ner_run, conll_dir):
    names = {p.name for p in ner_run.iterdir()}
    assert {"config.json", "model.safetensors", "metrics.json", "predictions_valid.jsonl", "predictions_valid.conll",
            "predictions_test.jsonl", "predictions_test.conll", "eval_metrics.jsonl", "report.md", "README.md",
            "report_per_type_valid.png", "report_per_type_test.png"} <= names
    assert "pipeline_tag: token-classification" in (ner_run / "README.md").read_text()
    metrics = json.loads((ner_run / "metrics.json").read_text())
    assert metrics["main_metric"] == "f1" and set(metrics) >= {"valid", "test"}
    for split in ("valid", "test"):
        m = metrics[split]
        assert 0.8 <= m["f1"] < 1.0  # learns the entities; 'Jordan' (a person or a place) keeps it below 1
        assert set(m["per_type"]) == {"LOC", "MISC", "ORG", "PER"}
        assert set(m["per_type"]["PER"]) == {"precision", "recall", "f1", "support"}
    assert metrics["test"]["per_type"]["ORG"]["support"] == sum(
        t == "ORG" for tags in read_conll_file(conll_dir / "test.txt")["tags"] for t, _, _ in get_entities(tags))
    config = json.loads((ner_run / "config.json").read_text())
    assert list(config["id2label"].values()) == NER_LABELS and config["bertkit_max_length"] == MAX_LENGTH


def test_every_input_word_gets_a_prediction_in_order(ner_run, conll_dir):
    gold = read_conll_file(conll_dir / "valid.txt")
    rows = [json.loads(line) for line in (ner_run / "predictions_valid.jsonl").read_text().splitlines()]
    assert [r["tokens"] for r in rows] == gold["tokens"] and [r["gold"] for r in rows] == gold["tags"]
    assert all(len(r["tags"]) == len(r["tokens"]) for r in rows)
    tok = AutoTokenizer.from_pretrained(ner_run)
    long = [r for r in rows if len(tok(r["tokens"], is_split_into_words=True)["input_ids"]) > MAX_LENGTH]
    assert len(long) >= 8  # the 40-word sentences were cut into windows ...
    pairs = [(p, g) for r in long for w, p, g in zip(r["tokens"], r["tags"], r["gold"], strict=True) if w != "Jordan"]
    assert sum(p == g for p, g in pairs) >= 0.9 * len(pairs)  # ... and tagged word by word, in order


def test_conlleval_gives_the_same_f1_on_the_predictions_file(ner_run):
    metrics = json.loads((ner_run / "metrics.json").read_text())
    for split in ("valid", "test"):
        result = conlleval.evaluate((ner_run / f"predictions_{split}.conll").read_text().splitlines())
        assert result["overall"]["fb1"] / 100 == pytest.approx(metrics[split]["f1"], abs=1e-4)
        for etype, row in result["types"].items():
            assert row["fb1"] / 100 == pytest.approx(metrics[split]["per_type"][etype]["f1"], abs=1e-4)
    rows = [json.loads(line) for line in (ner_run / "predictions_valid.jsonl").read_text().splitlines()]
    lines = conll_lines([r["tokens"] for r in rows], [r["gold"] for r in rows], [r["tags"] for r in rows])
    assert lines == (ner_run / "predictions_valid.conll").read_text()


def test_plain_transformers_loads_the_run_and_predicts_the_same(ner_run):
    sentences = [["EU", "rejects", "German", "call"], ["Peter", "Kowalczyk", "visited", "the", "United", "Nations"],
                 ["Reuters", "said", "Anna", "Okonkwo", "met", "Jordan", "in", "Nairobi"]]
    model = AutoModelForTokenClassification.from_pretrained(ner_run).eval()
    tok = AutoTokenizer.from_pretrained(ner_run)
    assert model.config.id2label[7] == "B-PER" and model.config.label2id["I-PER"] == 8
    enc = tok(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        ids = model(**enc).logits.argmax(-1)  # [sentences, pieces]
    plain = []
    for i in range(len(sentences)):
        word_ids = enc.word_ids(i)
        firsts = [p for p, w in enumerate(word_ids) if w is not None and (p == 0 or word_ids[p - 1] != w)]
        plain.append([model.config.id2label[int(ids[i, p])] for p in firsts])
    ours = bertkit.TokenClassification.from_pretrained(str(ner_run)).predict(sentences)
    assert [o["tags"] for o in ours] == plain
    assert ours[1]["entities"][0] == {"type": "PER", "text": "Peter Kowalczyk", "word_start": 0, "word_end": 2}


def test_evaluate_command_reproduces_the_run_metrics(ner_run, conll_dir, capsys):
    assert main(["evaluate", "--model", str(ner_run), "--task", "conll2003", "--split", "test", "--data-dir",
                 str(conll_dir), "--precision", "fp32"]) == 0
    result = json.loads((ner_run / "eval_conll2003_test.json").read_text())
    assert result["f1"] == json.loads((ner_run / "metrics.json").read_text())["test"]["f1"]


def test_predict_conll_file_round_trips_to_the_run_predictions(ner_run, conll_dir, tmp_path):
    out = tmp_path / "valid.conll"
    assert main(["predict", "--model", str(ner_run), "--input", str(conll_dir / "valid.txt"), "--output-format",
                 "conll", "--output", str(out), "--precision", "fp32"]) == 0  # a CoNLL file: found by -DOCSTART-
    assert out.read_text() == (ner_run / "predictions_valid.conll").read_text()
    expected = [json.loads(line) for line in (ner_run / "predictions_valid.jsonl").read_text().splitlines()]
    for flag in ("--input-format", "--format"):  # extract's name for it, and the older one
        assert main(["predict", "--model", str(ner_run), "--input", str(conll_dir / "valid.txt"), flag, "conll",
                     "--output", str(tmp_path / "valid.jsonl"), "--precision", "fp32"]) == 0
        rows = [json.loads(line) for line in (tmp_path / "valid.jsonl").read_text().splitlines()]
        assert [(r["tokens"], r["tags"], r["gold"], r["entities"]) for r in rows] == [
            (r["tokens"], r["tags"], r["gold"], r["entities"]) for r in expected]


def test_predict_answers_slices_of_whole_documents(ner_run, conll_dir, tmp_path, monkeypatch, capsys):
    """`bertkit predict` answers and writes a slice of rows at a time; a CoNLL file's slices are whole documents (a
    model trained with document context reads a sentence's neighbours). Its output is the one slice's; CoNLL output
    of rows only some of which have gold tags is decided over the whole input (no gold column)."""
    from bertkit.tasks import load_task
    from bertkit.tasks.io import TaskIO

    task = load_task(str(ner_run))
    monkeypatch.setattr(TaskIO, "PREDICT_SLICE", 2)
    rows = [{"sentence": ["a"], "doc": d} for d in (0, 0, 0, 1, 1, 2, 3, 3)]
    assert [[r["doc"] for r in part] for part in task.predict_slices(rows)] == [[0, 0, 0], [1, 1], [2, 3, 3]]
    assert [len(part) for part in task.predict_slices([{"sentence": ["a"]}] * 5)] == [2, 2, 1]

    blocks = (conll_dir / "valid.txt").read_text().split("\n\n")[1:]  # sentences, after the -DOCSTART- block
    src = write(tmp_path / "docs.txt", "\n\n".join(
        ("-DOCSTART- -X- -X- O\n\n" if i % 5 == 0 else "") + b for i, b in enumerate(blocks)))
    args = ["predict", "--model", str(ner_run), "--input", str(src), "--output-format", "conll", "--precision", "fp32"]
    monkeypatch.setattr(TaskIO, "PREDICT_SLICE", 4096)
    assert main(args) == 0
    whole = capsys.readouterr().out
    monkeypatch.setattr(TaskIO, "PREDICT_SLICE", 3)
    assert main(args) == 0
    assert capsys.readouterr().out == whole and len(whole.split("\n\n")) > 60

    monkeypatch.setattr(TaskIO, "PREDICT_SLICE", 1)
    mixed = write(tmp_path / "mixed.jsonl", json.dumps({"tokens": ["Peter", "Bonn"], "ner_tags": ["I-PER", "I-LOC"]})
                  + "\n" + json.dumps({"tokens": ["Peter"]}) + "\n")
    assert main(["predict", "--model", str(ner_run), "--input", str(mixed), "--output-format", "conll"]) == 0
    assert [len(line.split()) for line in capsys.readouterr().out.splitlines() if line] == [2, 2, 2]  # token pred


def test_predict_raw_and_pretokenized_text(ner_run, monkeypatch, capsys):
    text = "Peter Kowalczyk visited Paris, said Reuters."
    monkeypatch.setattr(sys, "stdin", io.StringIO(text + "\n"))
    assert main(["predict", "--model", str(ner_run), "--input", "-", "--precision", "fp32"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["text"] == text and row["tokens"] == ["Peter", "Kowalczyk", "visited", "Paris", ",", "said",
                                                     "Reuters", "."]
    assert row["entities"] and all(text[e["start"]:e["end"]] == e["text"] for e in row["entities"])
    assert {"type": "PER", "text": "Peter Kowalczyk", "word_start": 0, "word_end": 2, "start": 0, "end": 15} in (
        row["entities"])
    monkeypatch.setattr(sys, "stdin", io.StringIO("Peter Kowalczyk  visited Paris,\n"))
    assert main(["predict", "--model", str(ner_run), "--input", "-", "--pretokenized", "--output-format",
                 "conll", "--precision", "fp32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines if line] == ["Peter", "Kowalczyk", "visited", "Paris,"]
    assert lines[0] == "Peter B-PER" and lines[-1] == ""  # no gold tags: `token pred`


def test_predict_jsonl_of_tokens_or_text_with_ids(ner_run, tmp_path, capsys):
    src = tmp_path / "sentences.jsonl"
    src.write_text('{"id": "a", "tokens": ["Peter", "Kowalczyk", "visited", "Paris,"]}\n\n'
                   '{"text": "Peter Kowalczyk  visited Paris,"}\n')
    assert main(["predict", "--model", str(ner_run), "--input", str(src), "--precision", "fp32"]) == 0
    first, second = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert list(first)[:2] == ["id", "tokens"] and first["id"] == "a" and "text" not in first
    assert first["tokens"] == ["Peter", "Kowalczyk", "visited", "Paris,"] and first["tags"][0] == "B-PER"
    assert second["text"] == "Peter Kowalczyk  visited Paris," and second["tokens"][-1] == ","
    src.write_text('{"tokens": ["Peter"]}\n{"tokens": ["Peter", "K owalczyk"]}\n')
    assert main(["predict", "--model", str(ner_run), "--input", str(src)]) == 2
    assert f'{src}, line 2, field "tokens": must be a non-empty list of words' in capsys.readouterr().err


def test_predict_jsonl_echoes_its_gold_tags_as_the_conll_file_does(ner_run, conll_dir, tmp_path, capsys):
    conll = read_conll_file(conll_dir / "valid.txt")
    src = write(tmp_path / "valid.jsonl", "".join(json.dumps({"tokens": w, "ner_tags": t}) + "\n"
                                                  for w, t in zip(conll["tokens"], conll["tags"], strict=True)))
    assert main(["predict", "--model", str(ner_run), "--input", str(src), "--precision", "fp32"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["gold"] for r in rows] == conll["tags"] and all(len(r["tags"]) == len(r["gold"]) for r in rows)
    write(src, json.dumps({"tokens": ["Peter", "Bonn"], "ner_tags": ["I-PER", "I-LOC"]}) + "\n"
          + json.dumps({"tokens": ["Peter"], "ner_tags": [1]}) + "\n")
    assert main(["predict", "--model", str(ner_run), "--input", str(src), "--output-format", "conll"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].split()[0] == "Peter" and len(out.out.splitlines()[0].split()) == 2  # no gold
    assert "tags given as ids (1 sentences) are not echoed" in out.err
    write(src, json.dumps({"tokens": ["Peter", "Bonn"], "ner_tags": ["I-PER", "I-LOC"]}) + "\n")
    assert main(["predict", "--model", str(ner_run), "--input", str(src)]) == 0
    assert json.loads(capsys.readouterr().out)["gold"] == ["B-PER", "B-LOC"]  # IOB1 read as IOB2
    write(src, json.dumps({"tokens": ["Peter"], "ner_tags": ["S-PER"]}) + "\n")
    assert main(["predict", "--model", str(ner_run), "--input", str(src)]) == 2
    assert 'line 1, field "ner_tags": unknown tag \'S-PER\'' in capsys.readouterr().err


def test_predict_jsonl_with_other_field_names_by_hub_columns(ner_run, conll_dir, tmp_path, capsys):
    conll = read_conll_file(conll_dir / "valid.txt")
    pairs = list(zip(conll["tokens"], conll["tags"], strict=True))[:8]
    plain = write(tmp_path / "plain.jsonl", "".join(json.dumps({"tokens": w, "ner_tags": t}) + "\n" for w, t in pairs))
    other = write(tmp_path / "other.jsonl", "".join(json.dumps({"words": w, "labels": t}) + "\n" for w, t in pairs))
    assert main(["predict", "--model", str(ner_run), "--input", str(plain), "--precision", "fp32"]) == 0
    expected = capsys.readouterr().out
    assert main(["predict", "--model", str(ner_run), "--input", str(other), "--precision", "fp32"]) == 2
    assert 'field "tokens": give either "tokens"' in capsys.readouterr().err
    assert main(["predict", "--model", str(ner_run), "--input", str(other), "--precision", "fp32", "--hub-columns",
                 "words,labels"]) == 0
    assert capsys.readouterr().out == expected  # the same answers, the gold tags echoed
    assert main(["predict", "--model", str(ner_run), "--input", str(other), "--hub-columns", "words"]) == 2
    assert "'hub_columns' names two columns: words, tags" in capsys.readouterr().err


def test_notebook_use_on_lists_of_words(ner_run, tiny_bert, conll_dir, tmp_path):
    ner = bertkit.TokenClassification.from_pretrained(str(ner_run))
    (pred,) = ner.predict([["EU", "rejects", "German", "call"]])
    assert pred["tokens"] == ["EU", "rejects", "German", "call"] and pred["tags"][2] == "B-MISC"
    # train in memory from lists, as in a notebook
    data = read_conll_file(conll_dir / "train.txt", max_samples=48)
    fresh = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=NER_LABELS)
    cfg = bertkit.run_config(task="token-classification", name="conll2003", output_dir=str(tmp_path / "nb"),
                             precision="fp32", lr=1e-2, batch_size=16, max_steps=3, metrics=["f1"])
    dev = {"tokens": data["tokens"][:8], "tags": data["tags"][:8]}
    result = bertkit.Trainer(fresh, cfg).fit({"tokens": data["tokens"], "tags": data["tags"]}, {"dev": dev})
    assert result["train"]["steps"] == 3
    # the dev F1 is that of the trained model's own predictions (3 steps, one evaluation: the model kept)
    tags = [p["tags"] for p in fresh.predict(dev["tokens"])]
    assert result["dev"]["f1"] == pytest.approx(EntityScores().compute(predictions=tags, references=dev["tags"])["f1"])


# --- bad input: one clear line, exit 2, no run folder ------------------------------------------------------------
def corrupt(conll_dir, tmp_path, name, line_no, new_line):
    d = tmp_path / "data"
    d.mkdir()
    for f in ("train.txt", "valid.txt", "test.txt"):
        lines = (conll_dir / f).read_text().splitlines()
        if f == name:
            lines = [] if new_line is None else lines[: line_no - 1] + [new_line] + lines[line_no:]
        (d / f).write_text("\n".join(lines) + "\n" if lines else "")
    return d


@pytest.mark.parametrize("name, line_no, new_line, expected", [
    ("valid.txt", 5, "Paris NNP B-LOC", "valid.txt, line 5: expected 4 columns (as in the file's first token line)"),
    ("train.txt", 7, "foo NN I-NP X-FOO", "train.txt, line 7, field \"column 4\": unknown tag 'X-FOO'"),
    ("train.txt", 3, "Peter NNP I-NP E-PER", "train.txt, line 3, field \"column 4\": unknown tag 'E-PER'"),
    ("test.txt", 4, "foo NN I-NP B-FOO", "test.txt, line 4, field \"column 4\": tag 'B-FOO' is not in the label"),
    ("valid.txt", None, None, "valid.txt: file is empty"),
])
def test_bad_input_exits_2_naming_file_and_line_and_writes_nothing(conll_dir, tiny_bert, tmp_path, capsys, name,
                                                                   line_no, new_line, expected):
    data = corrupt(conll_dir, tmp_path, name, line_no, new_line)
    out = tmp_path / "run"
    assert main(["finetune", "conll2003", "--model", str(tiny_bert), "--data-dir", str(data), "--output-dir",
                 str(out)]) == 2
    err = capsys.readouterr().err
    assert expected in err and str(data / name) in err and "Traceback" not in err
    assert not out.exists()


def test_bad_input_exit_code_from_the_shell(conll_dir, tiny_bert, tmp_path):
    data = corrupt(conll_dir, tmp_path, "train.txt", 7, "foo NN I-NP X-FOO")
    proc = subprocess.run([sys.executable, "-m", "bertkit.cli", "finetune", "conll2003", "--model", str(tiny_bert),
                           "--data-dir", str(data), "--output-dir", str(tmp_path / "run")], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "train.txt, line 7, field \"column 4\": unknown tag 'X-FOO'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "run").exists()


def test_predict_finds_conll_and_jsonl_by_their_lines_in_files_and_on_standard_input(ner_run, conll_dir, tmp_path,
                                                                                       monkeypatch, capsys):
    """Found by using bertkit: a CoNLL .txt without -DOCSTART- was read a sentence a line ("remove blank lines", and
    with them removed, each "word POS chunk tag" line tagged as a sentence); CoNLL and JSONL on standard input were
    refused or read as text, braces and all."""
    args = ["predict", "--model", str(ner_run), "--precision", "fp32"]
    assert main([*args, "--input", str(conll_dir / "valid.txt"), "--input-format", "conll"]) == 0
    expected = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    blocks = (conll_dir / "valid.txt").read_text().split("\n\n")
    no_docstart = write(tmp_path / "nodoc.txt", "\n\n".join(b for b in blocks if not b.startswith("-DOCSTART-")))
    assert main([*args, "--input", str(no_docstart)]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == expected
    for text in ((conll_dir / "valid.txt").read_text(), no_docstart.read_text()):
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))
        assert main([*args, "--input", "-"]) == 0
        assert [json.loads(line)["tags"] for line in capsys.readouterr().out.splitlines()] == [
            r["tags"] for r in expected]
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"id": 7, "tokens": ["Peter", "Kowalczyk"]}\n'))
    assert main([*args, "--input", "-"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["id"] == 7 and row["tokens"] == ["Peter", "Kowalczyk"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("Peter went home O\nAnn stayed I-95\n"))  # text: not one width
    assert main([*args, "--input", "-"]) == 0
    assert [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()] == [
        "Peter went home O", "Ann stayed I-95"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("Peter went home\n\nAnn too\n"))
    assert main([*args, "--input", "-"]) == 2
    assert capsys.readouterr().err.endswith("<stdin>, line 2: empty text (one sentence per line; remove blank lines; "
                                            "a CoNLL file, a word a line: --input-format conll)\n")
    iob1 = write(tmp_path / "iob1.txt", "Peter I-PER\nBlackburn I-PER\nvisited O\nBonn I-LOC\n")
    assert main([*args, "--input", str(iob1)]) == 0  # IOB1 read as IOB2 is said, as finetune says it
    assert f"{iob1}: 1 sentences, 4 tokens, tags IOB1, converted to IOB2 (2 entities began with I-)" in \
        capsys.readouterr().err


def test_predict_bad_conll_input_exits_2(ner_run, tmp_path, capsys):
    f = write(tmp_path / "in.conll", "EU B-ORG\nrejects\n")
    assert main(["predict", "--model", str(ner_run), "--input", str(f), "--output", str(tmp_path / "o")]) == 2
    assert f"{f}, line 2: expected 2 columns" in capsys.readouterr().err and not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as e:  # the flags are the run's task's: a NER run has no --probs
        main(["predict", "--model", str(ner_run), "--input", str(f), "--probs"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == (f"bertkit predict: error: unrecognized arguments: --probs (`bertkit predict "
                                         f"--model {ner_run} --help` lists its flags)\n")  # one line, no usage
    with pytest.raises(SystemExit) as e:  # a classification option on a NER recipe
        main(["finetune", "conll2003", "--problem-type", "regression"])
    assert e.value.code == 2 and capsys.readouterr().err.endswith(
        "unrecognized arguments: --problem-type regression (`bertkit finetune conll2003 --help` lists its flags)\n")


# --- recipe, hub copy, real files ---------------------------------------------------------------------------------
def test_recipe_has_bert_paper_defaults():
    cfg = load_recipe("conll2003")
    assert (cfg.task, cfg.name, cfg.lr, cfg.batch_size, cfg.epochs, cfg.max_length) == (
        "token-classification", "conll2003", 5e-5, 32, 3, 128)
    assert (cfg.validation_files, cfg.test_file, cfg.main_metric) == (["valid.txt"], "test.txt", "f1")
    assert cfg.metrics == ["precision", "recall", "f1", "per_type"]
    assert not cfg.task_options.casing  # the default model is cased; the uncased MiniLM gets the casing ids
    assert load_recipe("conll2003", {"model": "minilm-l6"}).task_options.casing


def test_hub_copy_offline_says_how_to_point_at_data(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTKIT_DATA_DIR", str(tmp_path))
    with pytest.raises(BertkitError, match="BERTKIT_DATA_DIR=/path/to/data.*eriktks/conll2003"):
        TokenClassification.load_data(load_recipe("conll2003"))


def test_hub_copy_is_mapped_to_tag_names_in_our_label_order(monkeypatch, tmp_path):
    hub_names = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]  # the hub's order
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=hub_names))})
    rows = {"train": {"tokens": [["EU", "rejects", "German"], [], ["Peter", "Blackburn"]],
                      "ner_tags": [[3, 0, 7], [], [1, 2]]},
            "validation": {"tokens": [["Bonn", "said"]], "ner_tags": [[0, 0]]},
            "test": {"tokens": [["Mary"]], "ner_tags": [[2]]}}  # I-PER starting an entity: read as B-PER
    calls = []

    def fake_load_dataset(path, name=None, revision=None, split=None):
        calls.append((path, name, revision, split))
        return datasets.Dataset.from_dict(rows[split], features=features)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setenv("BERTKIT_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    cfg = load_recipe("conll2003")
    train, evals, names = TokenClassification.load_data(cfg)
    assert names == ["O", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert train["tokens"] == [["EU", "rejects", "German"], ["Peter", "Blackburn"]]  # the empty row is dropped
    assert train["tags"] == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"]]
    assert evals["validation"]["tags"] == [["O", "O"]]
    assert TokenClassification.load_split(cfg, "test", names)["tags"] == [["B-PER"]]
    assert calls[0] == ("eriktks/conll2003", None, "refs/convert/parquet", "train")
    with pytest.raises(DataError, match=r"eriktks/conll2003\[train\], line 1, field \"ner_tags\": tag 'B-ORG' is not"):
        TokenClassification.load_data(load_recipe("conll2003", {"label_names": ["O", "B-PER", "I-PER"]}))


@pytest.mark.skipif(not (SHARED_DATA / "conll2003").is_dir(), reason="shared CoNLL-2003 not available")
def test_real_conll2003_files_parse_completely():
    expected = {"train.txt": (14041, 23499), "valid.txt": (3250, 5942), "test.txt": (3453, 5648)}
    for name, (sentences, entities) in expected.items():
        data = read_conll_file(SHARED_DATA / "conll2003" / name, label_names=NER_LABELS)
        assert len(data["tokens"]) == sentences and data["scheme"] == "IOB2", name
        assert sum(len(get_entities(tags)) for tags in data["tags"]) == entities, name
        if name == "train.txt":
            assert label_names_for(data["tags"]) == NER_LABELS


# --- word casing as token type ids (casing) --------------------------------------------------------------------------
def test_word_casing_classes():
    words = ["call", "German", "EU", "U.S.", "McDonald", "1996-08-22", "I", "O'Neill", ",", "eBay"]
    assert [word_casing(w) for w in words] == [0, 1, 2, 2, 3, 0, 1, 3, 0, 3]


def test_casing_type_ids_follow_each_word_into_its_pieces_and_context(tiny_bert):
    ner = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=NER_LABELS, max_length=16, context=4,
                                                      casing=True)
    table = ner.model.bert.embeddings.token_type_embeddings.weight  # [types, hidden]
    assert table.shape[0] == CASING_TYPES and ner.model.config.type_vocab_size == CASING_TYPES
    assert torch.equal(table[3], table[0]) and ner.model.config.bertkit_casing is True
    doc = [["NASA", "met"], ["Anna", "Okonkwo", "in", "Paris"], ["today", "eBay"]]
    f = ner.encode(datasets.Dataset.from_dict({"tokens": doc, "doc": [0, 0, 0]}))
    pieces = ner.tokenizer.convert_ids_to_tokens(f["input_ids"][1])
    assert pieces[:5] == ["[CLS]", "nasa", "met", "anna", "ok"]  # 2 context pieces, then Okonkwo's 4 pieces
    expected = [0, 2, 0, 1] + [1] * len(ner.tokenizer.tokenize("Okonkwo")) + [0, 1, 0]
    expected += [3] * len(ner.tokenizer.tokenize("eBay")) + [0]
    assert f["token_type_ids"][1] == expected
    off = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=NER_LABELS, max_length=16)
    assert set(off.encode(datasets.Dataset.from_dict({"tokens": doc}))["token_type_ids"][1]) == {0}


def test_a_casing_checkpoint_loads_in_plain_transformers_and_in_bertkit(tiny_bert, tmp_path):
    ner = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=NER_LABELS, casing=True)
    with torch.no_grad():  # make the casing rows matter, as training would
        ner.model.bert.embeddings.token_type_embeddings.weight[1:].normal_(0, 1.0)
    ner.save(tmp_path / "cased")
    sentences = [["EU", "rejects", "German", "call"], ["Peter", "Kowalczyk", "visited", "the", "United", "Nations"]]
    again = bertkit.TokenClassification.from_pretrained(str(tmp_path / "cased"))  # casing comes from the config
    assert again.casing
    ours = again.predict(sentences)
    model = AutoModelForTokenClassification.from_pretrained(tmp_path / "cased").eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "cased")
    assert model.config.type_vocab_size == CASING_TYPES
    for words, pred in zip(sentences, ours, strict=True):
        enc = tok(words, is_split_into_words=True, return_tensors="pt")
        types = torch.tensor([bertkit.casing_type_ids(tok, words)])
        with torch.no_grad():
            logits = model(**{**enc, "token_type_ids": types}).logits[0]  # [pieces, labels]
            uncased = model(**enc).logits[0]  # token types all 0: every word read as lower case
        firsts = [p for p, w in enumerate(enc.word_ids()) if w is not None and (p == 0 or enc.word_ids()[p - 1] != w)]
        assert [model.config.id2label[int(logits[p].argmax())] for p in firsts] == pred["tags"]
        assert not torch.allclose(logits, uncased)
    with pytest.raises(BertkitError, match="unknown key 'ner_casing'"):  # not an option of sequence classification
        load_recipe("sst2", {"ner_casing": True})
    assert load_recipe("conll2003", {"ner_casing": True}).task_options.casing  # the 0.2 name, an alias of casing

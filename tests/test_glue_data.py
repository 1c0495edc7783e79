"""The GLUE recipes' loaders (CoLA, STS-B in both formats, QNLI carved, QQP, WNLI), their hub paths, and delimited
files as pandas and spreadsheets write them (quoted texts spanning lines) next to GLUE's unquoted ones."""

import csv

import datasets
import pytest

from bertkit import SequenceClassification
from bertkit.config_files import load_recipe
from bertkit.data import read_classification_file, read_rows
from bertkit.data.classification import in_carved_eval
from bertkit.errors import BertkitError, DataError

from .conftest import SHARED_DATA


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load(task, data_dir, **overrides):
    return SequenceClassification.load_data(load_recipe(task, {"data_dir": str(data_dir), **overrides}))


def test_cola_headerless_tsv(tmp_path):
    write(tmp_path / "train.tsv", 'gj04\t1\t\tOur friends won\'t buy this "analysis".\n'
                                  "gj04\t0\t*\tThey drank the pub.\n")
    write(tmp_path / "dev.tsv", "cj99\t1\t\tThe sailors rode the breeze clear of the rocks.\n")
    train, evals, names = load("cola", tmp_path)
    assert names == ["unacceptable", "acceptable"] and train["label"] == [1, 0]
    assert train["text"][0] == 'Our friends won\'t buy this "analysis".' and evals["dev"]["label"] == [1]


PAIRS = [("5.000", "A plane is taking off.", "An air plane is taking off."),
         ("4", "Driver backs into stroller", "Driver backs into mom")]
STS_ORIGINAL = (f"main-captions\tMSRvid\t2012test\t0001\t{chr(9).join(PAIRS[0])}\n"
                f"main-news\theadlines\t2016\t0012\t{chr(9).join(PAIRS[1])}\tnote a\tnote b\n")
STS_GLUE = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
            + "".join(f"{i}\tmain\tMSRvid\t2012\t{i:04d}\tnone\tnone\t{s1}\t{s2}\t{score}\n"
                      for i, (score, s1, s2) in enumerate(PAIRS)))


def test_stsb_reads_the_original_files_and_glue_tsv_alike(tmp_path):
    write(tmp_path / "orig" / "sts-train.csv", STS_ORIGINAL)  # no header; a row with 2 trailing source notes
    write(tmp_path / "orig" / "sts-dev.csv", STS_ORIGINAL)
    write(tmp_path / "glue" / "train.tsv", STS_GLUE)
    write(tmp_path / "glue" / "dev.tsv", STS_GLUE)
    original = load("stsb", tmp_path / "orig")
    glue = load("stsb", tmp_path / "glue", train_file="train.tsv", validation_files="dev.tsv")
    for train, _, names in (original, glue):
        assert names == ["score"] and train["label"] == [5.0, 4.0]
        assert train["text"] == ["A plane is taking off.", "Driver backs into stroller"]
        assert train["text_pair"] == ["An air plane is taking off.", "Driver backs into mom"]
    assert list(original[1]) == ["sts-dev"] and list(glue[1]) == ["dev"]


def test_qqp_glue_format(tmp_path):
    rows = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "0\t1\t2\tHow do I learn Python?\t"
            "What is the best way to learn Python?\t1", '5\t9\t10\tWhy is the sky "blue"?\tWho wrote Hamlet?\t0']
    write(tmp_path / "train.tsv", "\n".join(rows) + "\n")
    write(tmp_path / "dev.tsv", "\n".join(rows[:2]) + "\n")
    cfg = load_recipe("qqp", {"data_dir": str(tmp_path)})
    train, evals, names = SequenceClassification.load_data(cfg)
    assert names == ["not_duplicate", "duplicate"] and train["label"] == [1, 0] and evals["dev"]["label"] == [1]
    assert train["text_pair"][1] == "Who wrote Hamlet?" and cfg.metrics == ["accuracy", "f1"]


def test_wnli_labels_one_is_entailment(tmp_path):
    text = "index\tsentence1\tsentence2\tlabel\n1\tJohn hid because he is short.\tJohn is short.\t1\n"
    write(tmp_path / "train.tsv", text)
    write(tmp_path / "dev.tsv", text)
    train, _, names = load("wnli", tmp_path)
    assert names[train["label"][0]] == "entailment"


QNLI = "index\tquestion\tsentence\tlabel\n" + "".join(
    f"{i}\tWhat is question {i // 2}?\tSentence {i} answers it.\t{'entailment' if i % 3 else 'not_entailment'}\n"
    for i in range(200))


def test_qnli_without_train_names_the_carved_split(tmp_path):
    write(tmp_path / "dev.tsv", QNLI)
    with pytest.raises(DataError, match="train.tsv: file not found .*--carve-eval 20.*dev_carved20"):
        load("qnli", tmp_path)
    train, evals, _ = load("qnli", tmp_path, carve_eval=20)
    (name, held), = evals.items()
    assert name == "dev_carved20" and len(train) + len(held) == 200 and 20 <= len(held) <= 60
    assert not set(train["text"]) & set(held["text"])  # a question's two rows stay on one side
    assert all(in_carved_eval(q, 20) for q in held["text"]) and not any(in_carved_eval(q, 20) for q in train["text"])
    again = SequenceClassification.load_split(load_recipe("qnli", {"data_dir": str(tmp_path)}), "dev_carved20",
                                              ["entailment", "not_entailment"])
    assert again["text"] == held["text"] and again["label"] == held["label"]  # evaluate finds the same split


def test_carve_eval_reads_every_file_it_is_given(tmp_path):
    """--carve-eval left an existing training file unread (train.tsv's rows never trained) and every validation
    file after the first out of the results, without a word."""
    write(tmp_path / "dev.tsv", QNLI)
    write(tmp_path / "other.tsv", QNLI.split("\n", 1)[0] + "\n" + QNLI.split("\n")[5] + "\n")
    train, evals, _ = load("qnli", tmp_path, carve_eval=20, validation_files=["dev.tsv", "other.tsv"])
    assert list(evals) == ["dev_carved20", "other"] and len(evals["other"]) == 1
    write(tmp_path / "train.tsv", QNLI)
    with pytest.raises(DataError, match="train.tsv: the training file is here: --carve-eval 20 trains on part of "
                                        r"dev.tsv, for a task without one \(leave out --carve-eval\)"):
        load("qnli", tmp_path, carve_eval=20)


def fake_hub(monkeypatch, splits: dict):
    """Serve `datasets.load_dataset(name, config, split=...)` from memory, as online."""
    calls = []

    def load_dataset(name, config=None, revision=None, split=None):
        calls.append((name, config, split))
        return datasets.Dataset.from_dict(splits[split])

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("BERTKIT_DATA_DIR", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_hub_glue_configs_are_read_with_their_columns(monkeypatch):
    """No local files: the hub's GLUE config (nyu-mll/glue) with its own column names and label ids."""
    calls = fake_hub(monkeypatch, {"train": {"sentence1": ["a", "b"], "sentence2": ["c", "d"], "label": [4.2, 0.5],
                                             "idx": [0, 1]},
                                   "validation": {"sentence1": ["e"], "sentence2": ["f"], "label": [3.0], "idx": [0]}})
    train, evals, names = SequenceClassification.load_data(load_recipe("stsb"))
    assert calls == [("nyu-mll/glue", "stsb", "train"), ("nyu-mll/glue", "stsb", "validation")]
    assert train["label"] == [4.2, 0.5] and train["text_pair"] == ["c", "d"] and evals["validation"]["text"] == ["e"]
    fake_hub(monkeypatch, {"train": {"question1": ["q1"], "question2": ["q2"], "label": [1], "idx": [0]},
                           "validation": {"question1": ["q3"], "question2": ["q4"], "label": [0], "idx": [0]}})
    train, _, names = SequenceClassification.load_data(load_recipe("qqp"))
    assert train["text"] == ["q1"] and train["label"] == [1] and names == ["not_duplicate", "duplicate"]
    questions = [f"question {i}?" for i in range(50)]
    fake_hub(monkeypatch, {"train": {"question": ["x"], "sentence": ["y"], "label": [0], "idx": [0]},
                           "validation": {"question": questions, "sentence": ["s"] * 50, "label": [0, 1] * 25,
                                          "idx": list(range(50))}})
    train, evals, _ = SequenceClassification.load_data(load_recipe("qnli", {"carve_eval": 20}))
    assert list(evals) == ["validation_carved20"] and len(train) + len(evals["validation_carved20"]) == 50


# --- delimited files as pandas and spreadsheets write them -------------------------------------------------------
def test_pandas_quoted_tsv_with_texts_spanning_lines(tmp_path):
    import pandas as pd

    texts = [f'review {i}: "great"\nsecond line\twith a tab' if i % 7 == 0 else f"plain review {i}"
             for i in range(2000)]
    path = tmp_path / "train.tsv"
    pd.DataFrame({"sentence": texts, "label": [i % 2 for i in range(2000)]}).to_csv(path, sep="\t", index=False)
    assert len(pd.read_csv(path, sep="\t")) == 2000
    with pytest.raises(DataError, match=r"line 2: expected 2 columns .*--quoting"):
        read_rows(path, quoting="none")  # the failure the detection answers; the error names the option
    out = read_classification_file(path, "sentence", "label", ["neg", "pos"])
    assert out["text"] == [t.strip() for t in texts] and out["label"] == [i % 2 for i in range(2000)]
    rows = read_rows(path)
    assert [line for line, _ in rows[:3]] == [2, 4, 5]  # row 1 spans lines 2-3: rows are numbered where they start


def test_error_line_numbers_after_multiline_rows(tmp_path):
    path = tmp_path / "d.tsv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerows([["sentence", "label"], ["one\ntwo\nthree", "1"], ["fine", "0"], ["bad one", "7"]])
    with pytest.raises(DataError) as e:
        read_classification_file(path, "sentence", "label", ["neg", "pos"])
    assert e.value.line == 6 and e.value.field == "label" and "unknown label '7'" in str(e.value)


def test_doubled_quotes_are_detected_and_glue_quotes_stay_text(tmp_path):
    quoted = write(tmp_path / "q.tsv", 'sentence\tlabel\n"He said ""hi"" twice"\t1\nplain\t0\n')
    assert read_classification_file(quoted, "sentence", "label", ["a", "b"])["text"][0] == 'He said "hi" twice'
    assert read_rows(quoted, quoting="none")[0][1]["sentence"] == '"He said ""hi"" twice"'  # forced off: as it is
    glue = write(tmp_path / "g.tsv", 'sentence\tlabel\n"Yes," he said, "no.\t1\n" a quote opens\t0\n"Fine."\t1\n')
    assert read_classification_file(glue, "sentence", "label", ["a", "b"])["text"] == [
        '"Yes," he said, "no.', '" a quote opens', '"Fine."']


def test_unterminated_quote_names_where_the_row_starts(tmp_path):
    path = write(tmp_path / "d.tsv", 'sentence\tlabel\nok\t1\n"never closed\t1\nmore\t0\n')
    with pytest.raises(DataError) as e:
        read_rows(path, quoting="csv")
    assert e.value.line == 3 and "cannot read this row" in str(e.value)


def test_headerless_rows_with_too_few_fields_are_errors(tmp_path):
    write(tmp_path / "train.tsv", "gj04\t1\t\tFine.\ngj04\t1\tshort\n")
    write(tmp_path / "dev.tsv", "gj04\t1\t\tFine.\n")
    with pytest.raises(DataError, match=r"train.tsv, line 2: expected 4 columns \(source, label, original_mark"):
        load("cola", tmp_path)


@pytest.mark.skipif(not (SHARED_DATA / "cola").is_dir(), reason="shared GLUE data not available")
def test_real_glue_files_parse_completely():
    sizes = {}
    for task, extra in (("cola", {}), ("stsb", {}), ("wnli", {}), ("qnli", {"carve_eval": 20})):
        train, evals, _ = load(task, SHARED_DATA / task, **extra)
        sizes[task] = (len(train), *map(len, evals.values()))
    assert sizes == {"cola": (8551, 1043), "stsb": (5749, 1500), "wnli": (635, 71), "qnli": (4383, 1080)}


def test_carve_needs_both_parts(tmp_path):
    write(tmp_path / "dev.tsv", "index\tquestion\tsentence\tlabel\n0\tq?\ts.\tentailment\n")
    with pytest.raises(BertkitError, match="leaves an empty part"):
        load("qnli", tmp_path, carve_eval=20)


def test_evaluating_a_carved_runs_whole_file_says_it_is_not_held_out(tmp_path, tiny_bert, capsys):
    """`evaluate --split dev` on a --carve-eval run scored every row, most of them trained on, without a word."""
    from bertkit.cli import main

    write(tmp_path / "dev.tsv", QNLI)
    run = tmp_path / "run"
    assert main(["finetune", "qnli", "--model", str(tiny_bert), "--data-dir", str(tmp_path), "--carve-eval", "20",
                 "--max-steps", "2", "--precision", "fp32", "--output-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(run), "--split", "dev"]) == 0
    assert "dev: the run trained on 80 % of it (--carve-eval 20), so this is not a held-out score; dev_carved20 is " \
           "its held-out part" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(run)]) == 0  # its own split: nothing to say
    assert "held-out" not in capsys.readouterr().err

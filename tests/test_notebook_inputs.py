"""A notebook's examples (tasks/inputs.py): the shapes a user has (a dict of lists, a DataFrame, records, a Dataset,
one evaluation set given alone) and the values that are wrong in them (missing, of another type, a label that is
no label) refused with the row named, before pyarrow, the tokenizer or torch meet them; label names that would be
read wrongly; a Dataset's ClassLabel order; a seeded head."""

import math

import datasets
import pandas as pd
import pytest
import torch

import bertkit
from bertkit.errors import BertkitError

from .conftest import small_config

NAMES = ["negative", "positive"]
TEXTS = ["a fine film", "a dull film", "great acting", "poor plot"]
LABELS = ["positive", "negative", "positive", "negative"]


@pytest.fixture(scope="module")
def clf(tiny_bert):
    return bertkit.SequenceClassification.from_pretrained(str(tiny_bert), label_names=NAMES)


@pytest.mark.parametrize("texts, labels, said", [
    (["a", None, "c", "d"], LABELS, "row 1: text is missing (None)"),
    (["a", "b", math.nan, "d"], LABELS, "row 2: text is missing (nan)"),
    (TEXTS, ["positive", "negative", None, "negative"], "row 2: label is missing (None)"),
    (["a", "b", "c", 7], LABELS, "row 3: text is 7 (int), where the column holds str values"),
    ([1, 2, 3, 4], LABELS, "row 0: text is 1 (int), not text"),
    (TEXTS, ["positive", 1, "positive", "negative"], "row 1: label is 1 (int), where the column holds str values"),
    (["a", "b", "  ", "d"], LABELS, "row 2: text is empty"),  # as a file's empty text: was trained on
    (["a", "b\ud800", "c", "d"], LABELS, "row 1: text: a lone surrogate (a \\uD800-\\uDFFF escape without its pair): "
                                         "not a Unicode character"),  # was pyarrow's UnicodeEncodeError
])
def test_a_missing_or_mistyped_value_is_refused_with_its_row(clf, texts, labels, said):
    with pytest.raises(BertkitError) as e:
        clf.examples({"text": texts, "label": labels})
    assert str(e.value) == said


def test_a_dataframe_with_a_nan_and_a_regression_label_that_is_nan(tiny_bert, clf):
    frame = pd.DataFrame({"text": TEXTS, "label": LABELS})
    frame.loc[3, "text"] = float("nan")
    with pytest.raises(BertkitError, match=r"^row 3: text is missing \(nan\)$"):
        clf.examples(frame)
    reg = bertkit.SequenceRegression.from_pretrained(str(tiny_bert))  # one output, "score", where none is named
    assert reg.label_names == ["score"] and reg.model.config.num_labels == 1
    with pytest.raises(BertkitError, match=r"^row 1: label is missing \(NaN\)$"):
        reg.examples({"text": TEXTS, "label": [1.0, math.nan, 2.0, 3.0]})


def test_records_and_a_dataframe_read_as_a_dict_of_lists(clf):
    want = clf.examples({"text": TEXTS, "label": LABELS})
    records = [{"text": t, "label": label} for t, label in zip(TEXTS, LABELS, strict=True)]
    for data in (records, pd.DataFrame({"text": TEXTS, "label": LABELS})):
        assert clf.examples(data).to_dict() == want.to_dict()
    with pytest.raises(BertkitError, match=r"^row 1: fields \['text'\], where row 0 has \['label', 'text'\]$"):
        clf.examples([records[0], {"text": "x"}])
    for wrong, said in [("train.csv", "got str"), (["a", "b"], "got a list of str"),
                        ({"text": "a film", "label": "positive"}, "column 'text': expected a list of values")]:
        with pytest.raises(BertkitError, match=said):
            clf.examples(wrong)


def test_label_names_are_distinct_strings_checked_before_the_model_loads(tiny_bert, capsys):
    for names, said in [("negative,positive", "a list of names, got str"),
                        ([1, 2, 3], r"names are strings, got 1 \(int\); write them as \['1', '2', '3'\]"),
                        (["a", "b", "a"], "'a' more than once")]:
        with pytest.raises(BertkitError, match=said):
            bertkit.SequenceClassification.from_pretrained(str(tiny_bert), label_names=names)
    assert "new head" not in capsys.readouterr().err


def test_a_classlabel_column_is_read_by_its_names(clf):
    order = datasets.ClassLabel(names=["positive", "negative"])  # load_dataset's order, not the task's
    ds = datasets.Dataset.from_dict({"text": TEXTS, "label": [order.str2int(label) for label in LABELS]},
                                    features=datasets.Features(text=datasets.Value("string"), label=order))
    assert [NAMES[i] for i in clf.examples(ds)["label"]] == LABELS
    other = datasets.ClassLabel(names=["negative", "neutral"])
    ds = ds.cast_column("label", other)
    with pytest.raises(BertkitError, match=r"are not all among the task's \['negative', 'positive'\]: \['neutral'\]"):
        clf.examples(ds)


def test_labels_that_no_head_has_are_refused_with_their_row(tiny_bert):
    multi = bertkit.MultiLabelClassification.from_pretrained(str(tiny_bert), label_names=["a", "b", "c"])
    for labels, said in [([["a"], ["weather"], []], r"row 1: label 'weather' is neither one of \['a', 'b', 'c'\]"),
                         ([[0], [7], []], "row 1: label 7 is neither"),
                         (["a,b", ["c"], ["a"]], r"row 0: label is 'a,b' \(str\), where the column holds list")]:
        with pytest.raises(BertkitError, match=said):
            multi.examples({"text": ["x", "y", "z"], "label": labels})
    ner = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=["O", "B-PER", "I-PER"])
    for tokens, tags, said in [([["Ann", "ran"]], [["B-PER", "B-CITY"]], "row 0: tag 'B-CITY' is neither"),
                               ([["Ann", "ran"]], [[1, 9]], "row 0: tag 9 is neither"),
                               ([["Ann", None]], [["B-PER", "O"]], "row 0: tokens is missing \\(None\\) in its list")]:
        with pytest.raises(BertkitError, match=said):
            ner.examples({"tokens": tokens, "tags": tags})
    mc = bertkit.MultipleChoice.from_pretrained(str(tiny_bert))
    for label in (3, -1):
        with pytest.raises(BertkitError, match=rf"row 0: label {label} is not the index of one of its 3 endings"):
            mc.examples({"context": ["c"], "start": [""], "endings": [["a", "b", "c"]], "label": [label]})


def test_a_qa_dataset_is_checked_as_a_dict_of_lists_is(tiny_bert):
    qa = bertkit.QuestionAnswering.from_pretrained(str(tiny_bert))
    rows = {"id": ["q0", "q1"], "question": ["Who?", "What?"], "context": ["Ann ran.", "A dog sat."],
            "answers": [{"text": ["Ann"], "answer_start": [0]}, {"text": ["dog"], "answer_start": [2]}]}
    good = datasets.Dataset.from_dict(rows)
    assert qa.examples(good) is good  # whole: kept as it is
    bad = {**rows, "answers": [rows["answers"][0], {"text": ["dog"], "answer_start": [5]}]}
    for data in (bad, datasets.Dataset.from_dict(bad)):
        with pytest.raises(BertkitError, match=r"question q1: answer_start 5 does not index the answer 'dog'"):
            qa.examples(data)


def test_one_evaluation_set_given_alone_is_dev_and_a_multi_label_head_gets_its_own_metrics(tiny_bert, sst2_dir,
                                                                                          tmp_path):
    texts, labels = TEXTS * 4, LABELS * 4
    clf = bertkit.SequenceClassification.from_pretrained(str(tiny_bert), label_names=NAMES)
    result = bertkit.Trainer(clf, small_config(sst2_dir, tmp_path / "one", max_steps=1)).fit(
        {"text": texts, "label": labels}, pd.DataFrame({"text": TEXTS, "label": LABELS}))
    assert set(result["dev"]) >= {"accuracy", "f1"} and result["data"]["dev"] == 4
    multi = bertkit.MultiLabelClassification.from_pretrained(str(tiny_bert), label_names=["a", "b"])
    tags = [["a"], ["b"], ["a", "b"], []]
    result = bertkit.Trainer(multi, small_config(sst2_dir, tmp_path / "multi", max_steps=1)).fit(  # the default
        {"text": texts, "label": tags * 4}, {"dev": {"text": TEXTS, "label": tags}})  # (single-label) config
    assert set(result["dev"]) >= {"micro_f1", "macro_f1", "subset_accuracy"}


def test_a_seed_given_to_from_pretrained_draws_the_same_new_head(tiny_bert):
    heads = []
    for torch_seed in (0, 1):  # torch's own state differs between the two
        torch.manual_seed(torch_seed)
        task = bertkit.SequenceClassification.from_pretrained(str(tiny_bert), label_names=NAMES, seed=7)
        heads.append(task.model.classifier.weight.detach().clone())
    assert torch.equal(*heads)
    torch.manual_seed(1)
    other = bertkit.SequenceClassification.from_pretrained(str(tiny_bert), label_names=NAMES)
    assert not torch.equal(heads[0], other.model.classifier.weight)


def test_a_saved_task_loads_back_with_its_options_and_max_length(tiny_bert, tmp_path):
    """`task.save(folder)` then `load_task(folder)`: the options that change its answers (long texts pooled, a
    multi-label threshold) and its max length come back (were the defaults: other answers); plain transformers
    still loads the folder."""
    from transformers import AutoModelForSequenceClassification

    clf = bertkit.SequenceClassification.from_pretrained(str(tiny_bert), label_names=NAMES, doc_pooling="mean",
                                                         max_length=64)
    again = bertkit.load_task(str(clf.save(tmp_path / "clf")))
    assert (type(again), again.options.doc_pooling, again.max_length) == (bertkit.SequenceClassification, "mean", 64)
    assert again.pairs is False  # single texts, as predict reads them for it (serve's requests too)
    text = " ".join(["a fine film"] * 40)  # longer than a window: pooled over windows by both
    assert again.predict([text], with_probs=True) == clf.predict([text], with_probs=True)
    multi = bertkit.MultiLabelClassification.from_pretrained(str(tiny_bert), label_names=["a", "b"], threshold=0.3)
    assert bertkit.load_task(str(multi.save(tmp_path / "multi"))).options.threshold == 0.3
    assert AutoModelForSequenceClassification.from_pretrained(tmp_path / "clf").config.num_labels == 2


def test_a_notebooks_predict_checks_its_arguments(clf, tiny_bert):
    """An unknown precision ran as fp32; a batch of 0 failed inside `range`; None or a number among the texts failed
    in the tokenizer, unnamed."""
    for kwargs, said in [({"precision": "fp8"}, "precision 'fp8': one of fp32, bf16, fp16"),
                         ({"batch_size": 0}, "batch_size 0: a positive number of examples")]:
        with pytest.raises(BertkitError, match=said):
            clf.predict(["a fine film"], **kwargs)
    for texts, said in [(None, "texts: a text or a list of texts, got NoneType"),
                        (["a fine film", None], r"texts\[1\] is None \(NoneType\), not a text"),
                        (["a fine film", 3], r"texts\[1\] is 3 \(int\), not a text"),
                        (["a fine film", " "], r"texts\[1\]: empty text"),  # was a label, where a file's is refused
                        (["a fine film", "\udfff"], r"texts\[1\]: a lone surrogate")]:  # was the tokenizer's error
        with pytest.raises(BertkitError, match=said):
            clf.predict(texts)
    with pytest.raises(BertkitError, match="2 texts but 1 text_pairs"):
        clf.predict(["a", "b"], ["c"])
    qa = bertkit.QuestionAnswering.from_pretrained(str(tiny_bert))
    with pytest.raises(BertkitError, match="expected an input or a list of inputs, got NoneType"):
        qa.predict(None, None)
    with pytest.raises(BertkitError, match=r"contexts\[0\]: a lone surrogate"):
        qa.predict("who?", "Ann \ud800.")
    ner = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=["O", "B-PER", "I-PER"])
    with pytest.raises(BertkitError, match=r"sentences\[0\]\[1\]: a lone surrogate"):
        ner.predict([["Ann", "\ud800"]])


def test_a_second_fit_into_one_folder_replaces_the_first_runs_checkpoints(tiny_bert, sst2_dir, tmp_path, capsys):
    """A notebook cell run twice into one output folder: the first run's later checkpoints stayed, the second run's
    were pruned as the oldest (`latest` named one that was gone), and a resume continued the first run."""
    out = tmp_path / "run"
    for steps in (6, 2):
        clf = bertkit.SequenceClassification.from_pretrained(str(tiny_bert), label_names=NAMES, seed=1)
        bertkit.Trainer(clf, small_config(sst2_dir, out, max_steps=steps, save_every=2, eval_every="2")).fit(
            {"text": TEXTS * 4, "label": LABELS * 4}, {"dev": {"text": TEXTS, "label": LABELS}})
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["best", "latest", "step-0000002"]
    assert (out / "checkpoints" / "latest").read_text().strip() == "step-0000002"
    assert f"{out} held a run: its checkpoints give way to this one's" in capsys.readouterr().err


def test_a_notebooks_columns_named_as_its_files_are_read(tiny_bert):
    """SST-2's frames name the text `sentence` (the task's `text_column`); `fit` asked for a `text` column."""
    clf = bertkit.SequenceClassification.from_pretrained(str(tiny_bert), label_names=NAMES)  # text_column: sentence
    frame = pd.DataFrame({"sentence": TEXTS, "label": LABELS})
    assert clf.examples(frame).to_dict() == clf.examples({"text": TEXTS, "label": LABELS}).to_dict()
    pairs = bertkit.SequenceClassification.from_pretrained(str(tiny_bert), label_names=NAMES, text_column="premise",
                                                           text_pair_column="hypothesis", label_column="gold")
    ex = pairs.examples({"premise": TEXTS, "hypothesis": TEXTS[::-1], "gold": LABELS})
    assert ex.column_names == ["text", "text_pair", "label"] and ex["text_pair"] == TEXTS[::-1]

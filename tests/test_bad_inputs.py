"""The bad-input corpus (tests/data/bad/): every malformed input, through the real CLI, must give one clear line
naming what and where, exit code 2, no traceback, and no output left behind."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.cli import main

DATA = Path(__file__).parent / "data"
BAD, GOOD = DATA / "bad", DATA / "good"

SST2 = ["finetune", "sst2", "--model", "{tiny}", "--data-dir", str(GOOD), "--validation-files", "dev.tsv",
        "--output-dir", "{out}", "--train-file"]
GENERIC = SST2[:-1] + ["--text-column", "text", "--label-column", "label", "--label-names", "", "--train-file"]
MNLI = ["finetune", "mnli", "--model", "{tiny}", "--validation-files", str(GOOD / "dev_matched.tsv"),
        "--output-dir", "{out}", "--train-file"]
CONLL = ["finetune", "conll2003", "--model", "{tiny}", "--validation-files", str(GOOD / "valid.conll"),
         "--test-file", str(GOOD / "valid.conll"), "--output-dir", "{out}", "--train-file"]
SQUAD = ["finetune", "squad", "--model", "{tiny}", "--validation-files", str(GOOD / "validation.json"),
         "--output-dir", "{out}", "--train-file"]
SQUAD_V2 = ["finetune", "squad_v2", "--model", "{tiny}", "--validation-files", str(GOOD / "validation.json"),
            "--output-dir", "{out}", "--train-file"]
STSB = ["finetune", "stsb", "--model", "{tiny}", "--validation-files", str(GOOD / "sts-dev.csv"), "--output-dir",
        "{out}", "--train-file"]
COLA = ["finetune", "cola", "--model", "{tiny}", "--validation-files", str(GOOD / "cola_dev.tsv"), "--output-dir",
        "{out}", "--train-file"]
MULTI_LABEL = ["finetune", "sst2", "--model", "{tiny}", "--problem-type", "multi_label_classification",
               "--label-names", "news,sport", "--text-column", "text", "--label-column", "labels", "--metrics",
               "micro_f1", "--main-metric", "micro_f1", "--validation-files", str(GOOD / "multilabel_dev.jsonl"),
               "--output-dir", "{out}", "--train-file"]
EXTRACT = ["extract", "--model", "{tiny}", "--output", "{out}", "--layers", "last", "--input"]
PREDICT = ["predict", "--model", "{clf}", "--output", "{out}", "--input"]
RECIPE = ["finetune", "--model", "{tiny}", "--output-dir", "{out}"]

CASES = [  # (file in tests/data/bad, command, expected message)
    ("sst2_missing_column.tsv", SST2, "sst2_missing_column.tsv, line 3: expected 2 columns"),
    ("sst2_extra_column.tsv", SST2, "sst2_extra_column.tsv, line 2: expected 2 columns"),
    ("sst2_unknown_label.tsv", SST2, "line 3, field \"label\": unknown label '7'"),
    ("sst2_empty_text.tsv", SST2, "line 3, field \"sentence\": empty text"),
    ("sst2_empty.tsv", SST2, "sst2_empty.tsv: file is empty"),
    ("sst2_header_only.tsv", SST2, "sst2_header_only.tsv: no data rows"),
    ("sst2_latin1.tsv", SST2, "sst2_latin1.tsv, line 2: not UTF-8 text"),
    ("sst2_wrong_header.tsv", SST2, "line 2, field \"sentence\": missing column"),
    ("generic_missing_column.csv", GENERIC, "generic_missing_column.csv, line 3: expected 2 columns"),
    ("generic_bad_json.jsonl", GENERIC, "generic_bad_json.jsonl, line 2: not valid JSON"),
    ("generic_not_object.jsonl", GENERIC, "line 1: each line must be a JSON object"),
    ("generic_number_text.jsonl", GENERIC, "line 1, field \"text\": text must be a string"),
    ("generic_corrupt.parquet", GENERIC, "generic_corrupt.parquet: not a readable parquet file"),
    ("generic_unknown_type.xml", GENERIC, "unknown file type '.xml'"),
    ("generic_lone_surrogate.jsonl", GENERIC, 'generic_lone_surrogate.jsonl, line 2, field "text": a lone surrogate '
                                              "(a \\uD800-\\uDFFF escape without its pair)"),  # was pyarrow's error
    ("squad_lone_surrogate.json", SQUAD, 'squad_lone_surrogate.json, line 20, field "data[0].paragraphs[0].qas[1].'
                                         'question": a lone surrogate'),  # was the tokenizer's TypeError
    ("mnli_missing_hypothesis.jsonl", MNLI, "line 1, field \"sentence2\": missing column"),
    ("mnli_unknown_label.jsonl", MNLI, "line 1, field \"gold_label\": unknown label 'maybe'"),
    ("conll_wrong_columns.txt", CONLL, "conll_wrong_columns.txt, line 2"),
    ("conll_bad_scheme.txt", CONLL, "IOBES/BILOU tags are not supported"),
    ("conll_empty.txt", CONLL, "conll_empty.txt"),
    ("conll_only_docstart.txt", CONLL, "no sentences"),
    ("conll_no_type.txt", CONLL, "an entity tag needs a type"),
    ("conll_jsonl_ids_without_names.jsonl", CONLL, 'conll_jsonl_ids_without_names.jsonl, line 2, field "ner_tags": '
                                                   "tag id 1: give the tags' names in id order (--label-names"),
    ("conll_jsonl_uneven.jsonl", CONLL, 'conll_jsonl_uneven.jsonl, line 2, field "ner_tags": expected a list of 2 '
                                        "tags, one per token"),
    ("conll_jsonl_spaced_word.jsonl", CONLL, 'conll_jsonl_spaced_word.jsonl, line 2, field "tokens": must be a '
                                             "non-empty list of words (each non-empty, without white space)"),
    ("squad_answer_mismatch.json", SQUAD, "q-mismatch"),
    ("squad_missing_answers.json", SQUAD, "q-noanswers"),
    ("squad_empty_question.json", SQUAD, "q-empty: empty question"),
    ("squad_not_json.json", SQUAD, "squad_not_json.json, line 1: not valid JSON"),
    ("squad_missing_id.json", SQUAD, 'squad_missing_id.json, line 20, field "data[0].paragraphs[0].qas[1].id": '
                                     "missing field 'id'"),  # the line of its question: was none
    ("squad_paragraph_without_qas.json", SQUAD, 'squad_paragraph_without_qas.json, line 22, field '
                                                "\"data[0].paragraphs[1].qas\": missing field 'qas'"),
    ("squad_answers_object.json", SQUAD, 'squad_answers_object.json, line 21, field "data[0].paragraphs[0].qas[1].'
                                         "answers\": question q-object: 'answers' must be a list of {\"text\", "
                                         '"answer_start"} objects, got {'),  # was "no answers"
    ("squad_no_data.json", SQUAD, "not SQuAD JSON"),
    ("squad_empty_context.json", SQUAD, "empty context"),
    ("squad_jsonl_uneven_answers.jsonl", SQUAD, 'squad_jsonl_uneven_answers.jsonl, line 2, field "answers": '
                                                "'answers' must hold lists 'text' and 'answer_start' of one length"),
    ("squad_v2_impossible_with_answers.json", SQUAD_V2, 'squad_v2_impossible_with_answers.json, line 6, field '
     '"data[0].paragraphs[0].qas[1].answers": question q-impossible: is_impossible is true but it has 1 answer(s)'),
    ("squad_v2_answerable_without_answers.json", SQUAD_V2, 'squad_v2_answerable_without_answers.json, line 6, field '
     '"data[0].paragraphs[0].qas[1].answers": question q-noanswers: no answers, but is_impossible is false'),
    ("stsb_not_numeric.csv", STSB, "stsb_not_numeric.csv, line 2, field \"score\": not a number: 'high'"),
    ("multilabel_unknown_label.jsonl", MULTI_LABEL, "line 2, field \"labels\": unknown label 'cooking'"),
    ("multilabel_not_a_list.jsonl", MULTI_LABEL, "line 1, field \"labels\": expected a list of labels"),
    ("tsv_quoted_broken.tsv", SST2, "tsv_quoted_broken.tsv, line 4: expected 2 columns (sentence, label), found 3 "
                                    "(read with quoting off, as GLUE files are; with CSV quoting: line 3"),
    ("cola_short_row.tsv", COLA, "cola_short_row.tsv, line 2: expected 4 columns (source, label, original_mark"),
    ("extract_blank_line.txt", EXTRACT, "extract_blank_line.txt, line 2: empty text"),
    ("extract_missing_field.jsonl", EXTRACT, "line 1, field \"text\": missing text field"),
    ("extract_empty.txt", EXTRACT, "extract_empty.txt: file is empty"),
    ("predict_latin1.txt", PREDICT, "predict_latin1.txt, line 1: not UTF-8 text"),  # the line: one reader now
    ("recipe_unknown_key.yaml", RECIPE, "unknown key 'learning_rate'"),
    ("recipe_wrong_type.yaml", RECIPE, "'batch_size' must be an integer"),
    ("recipe_not_mapping.yaml", RECIPE, "must be a mapping"),
    ("recipe_bad_yaml.yaml", RECIPE, "recipe_bad_yaml.yaml, line 1: not valid YAML: while parsing a flow sequence; "
                                     "expected ',' or ']', but got '<stream end>'\n"),  # was YAML's 6 lines
    ("recipe_bad_choice.yaml", RECIPE, "'precision' must be one of"),
    ("recipe_flat_compute_key.yaml", RECIPE, "recipe_flat_compute_key.yaml: 'precision' belongs under compute: (a "
                                             "mapping)"),
    ("recipe_flat_task_option.yaml", RECIPE, "recipe_flat_task_option.yaml: 'ner_context' is an option of the "
                                             "token-classification task: put it under task_options:"),
    ("recipe_empty.yaml", RECIPE, "recipe_empty.yaml: the recipe is empty (a mapping of key: value"),  # was "No
    # local data for 'recipe_empty'", the defaults' data
    ("recipe_group_not_mapping.yaml", RECIPE, "recipe_group_not_mapping.yaml: 'compute' must be a mapping of its "
                                              "fields, got 'fp32'"),
]
OTHER = [  # inputs that are not files of the corpus
    (EXTRACT[:-3] + ["--layers", "1-9", "--input", str(GOOD / "sentences.txt")], "layer 9 does not exist"),
    (["finetune", "sst2", "--model", "./no/such/model", "--output-dir", "{out}"], "model folder not found"),
    (SST2 + [str(GOOD / "missing.tsv")], "missing.tsv: file not found"),
    (["extract", "--model", "./no/such/model", "--output", "{out}", "--input", str(GOOD / "missing.txt")],
     "missing.txt: file not found"),  # the input checked before the model is loaded
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--batch-size", "0"], "must be positive"),
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--max-steps", "-1"],
     "'max_steps' and 'epochs' must be positive"),
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--max-eval-samples", "0"],
     "'max_eval_samples' must be positive (or unset: every example)"),
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--early-stopping", "0"],  # was one eval
     "'early_stopping' must be positive (or unset: no early stop)"),
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--save-every", "-3"],
     "'save_every' must be 0 or more (0 or unset: at evaluations only)"),
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--lr", "-0.5"],  # was torch's traceback
     "'lr' and 'weight_decay' must be ≥ 0"),
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--warmup-ratio", "10"],  # was trained
     "'warmup_ratio' must be in [0, 1]"),
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--max-grad-norm", "0"],  # was no training
     "'max_grad_norm' must be positive (to clip nothing, a large one: 1e9)"),
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--seeds", "13,42,13"],  # was two runs in one
     "--seeds 13,42,13: each seed once"),
    (["finetune", "qnli", "--model", "{tiny}", "--data-dir", str(GOOD), "--output-dir", "{out}"],
     "train.tsv: file not found (the training file); 'qnli' has only dev.tsv here. To train and measure on a "
     "split carved from it, add --carve-eval 20"),
    (SST2 + [str(GOOD / "dev.tsv"), "--class-weights", "1,2,3"], "class_weights has 3 values but there are 2 labels"),
    (SST2 + [str(GOOD / "dev.tsv"), "--problem-type", "regression"], "metric 'accuracy' is for single_label"),
    (SST2 + [str(GOOD / "dev.tsv"), "--problem-type", "regression", "--metrics", "mse", "--main-metric", "mse"],
     "label_names ['negative', 'positive'] names more (a recipe's classes: --label-names '' names the output score)"),
    (["finetune", "glue", "--model", "{tiny}", "--output-dir", "{out}", "--train-file", "x.tsv"],
     "--train-file names one task's data"),
    (["finetune", "glue", "--model", "{tiny}", "--output-dir", "{out}", "--tasks", "mrpc,qqp", "--data-dir",
      str(DATA)], "no GLUE task has data here (mrpc: no mrpc/ folder in --data-dir; qqp: no qqp/ folder"),
    (["finetune", "glue", "--model", "{tiny}", "--output-dir", "{out}", "--tasks", "cola,squad"],
     "unknown GLUE task(s) squad"),
    (SST2 + [str(GOOD / "dev.tsv"), "--tasks", "cola"], "--tasks is for `bertkit finetune glue` only"),
    (SST2 + [str(GOOD / "dev.tsv"), "--max-length", "600"],  # was a size error in the model at a long sentence
     "max_length 600: the model takes at most 512 tokens in a sequence"),
    (SST2 + [str(GOOD / "dev.tsv"), "--class-weights", "-1,2"], "'class_weights' must be positive"),  # was
    # argparse's "expected one argument"
    (SST2 + [str(GOOD / "dev.tsv"), "--seeds", "1,2", "--seed", "5"],  # --seed was not used
     "--seed 5 and --seeds 1,2: give one (--seeds runs once per seed, each as --seed N)"),
    (["evaluate", "--model", "{clf}", "--recipe", "sst2", "--file", str(GOOD / "dev.tsv"), "--split", "dev"],
     "--file " + str(GOOD / "dev.tsv") + " and --split dev: give one"),  # --split was not used
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--resume"],
     "does not exist (--resume continues the run in --output-dir)"),
]


@pytest.fixture(scope="module")
def clf(tiny_bert, tmp_path_factory):
    """An (untrained) fine-tuned-style classification checkpoint for the predict cases."""
    from bertkit import SequenceClassification

    return SequenceClassification.from_pretrained(str(tiny_bert), label_names=["a", "b"]).save(
        tmp_path_factory.mktemp("clf") / "run")


def check(args, expected, tiny_bert, clf, tmp_path, capsys):
    out = tmp_path / "out"
    fill = {"tiny": str(tiny_bert), "clf": str(clf), "out": str(out)}
    assert main([a.format(**fill) for a in args]) == 2  # any non-bertkit exception would fail the test
    err = capsys.readouterr().err
    assert expected in err, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("name, args, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_file(name, args, expected, tiny_bert, clf, tmp_path, capsys):
    assert (BAD / name).is_file()
    if args is RECIPE:
        args = args[:1] + [str(BAD / name)] + args[1:]
    else:
        args = args + [str(BAD / name)]
    check(args, expected, tiny_bert, clf, tmp_path, capsys)


@pytest.mark.parametrize("args, expected", OTHER, ids=[o[1] for o in OTHER])
def test_bad_argument(args, expected, tiny_bert, clf, tmp_path, capsys):
    check(args, expected, tiny_bert, clf, tmp_path, capsys)


@pytest.mark.parametrize("recipe, files, expected", [
    ("sst2", ["train.csv", "dev.csv"], "train.tsv: file not found (the training file); train.csv is there: "
                                       "--train-file train.csv"),  # was the carve-eval hint or dev.tsv not found
    ("sst2", ["train.tsv", "dev.csv"], "dev.tsv: file not found (an evaluation file); dev.csv is there: "
                                       "--validation-files dev.csv"),
    ("conll2003", ["train.conll", "valid.txt"], "train.txt: file not found (the training file); train.conll is "
                                                "there: --train-file train.conll"),
    ("squad", ["train.jsonl", "validation.json"], "train.json: file not found (the training file); train.jsonl is "
                                                  "there: --train-file train.jsonl"),
    ("swag", ["train.csv", "val.tsv"], "val.csv: file not found (an evaluation file); val.tsv is there: "
                                       "--validation-files val.tsv"),
])
def test_a_missing_file_beside_one_of_its_name_names_that_one(recipe, files, expected, tiny_bert, clf, tmp_path,
                                                               capsys):
    data = tmp_path / "data"
    data.mkdir()
    for name in files:
        (data / name).write_text("x\n")
    check(["finetune", recipe, "--model", "{tiny}", "--data-dir", str(data), "--output-dir", "{out}"], expected,
          tiny_bert, clf, tmp_path, capsys)


def test_corpus_has_at_least_30_files_and_all_are_used():
    files = {p.name for p in BAD.iterdir()}
    assert len(files) >= 30 and files == {c[0] for c in CASES}


def test_a_10_mb_single_line_is_refused_clearly_without_traceback(tiny_bert, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("ok\n" + "word " * 2_000_000 + "\n")  # 10 MB on one line
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "bertkit.cli", *[a.format(tiny=tiny_bert, out=out) for a in EXTRACT],
                           str(big), "--input-format", "pretokenized"], capture_output=True, text=True,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}, timeout=600)
    assert proc.returncode == 2 and "big.txt, line 2: 2000002 word pieces" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_two_evaluation_files_of_one_name_are_refused(tiny_bert, clf, tmp_path, capsys):
    """A split is named by its file's stem: two of one stem were one split (the last file's), the other's results
    lost; a validation file named test.* and the test file likewise."""
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(GOOD / "dev.tsv", other / "dev.tsv")
    shutil.copy(GOOD / "dev.tsv", other / "test.tsv")
    check(SST2 + [str(GOOD / "dev.tsv"), "--validation-files", f"dev.tsv,{other / 'dev.tsv'}"],
          f"dev.tsv and {other / 'dev.tsv'} would both be the split 'dev' of the results (a split is named by its "
          "file's name without the extension): rename one", tiny_bert, clf, tmp_path, capsys)
    check(SST2 + [str(GOOD / "dev.tsv"), "--validation-files", str(other / "test.tsv"), "--test-file", "dev.tsv"],
          f"{other / 'test.tsv'} and the test file dev.tsv would both be the split 'test' of the results (a split is "
          "named by its file's name without the extension): rename one, or leave the test file out with "
          "--test-file none", tiny_bert, clf, tmp_path, capsys)


@pytest.mark.parametrize("recipe, train, evaluated", [("sst2", "dev.tsv", "dev.tsv"),
                                                      ("conll2003", "valid.conll", "valid.txt")])
def test_a_training_file_alone_names_where_the_recipes_evaluation_file_was_looked_for(
        recipe, train, evaluated, tiny_bert, clf, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("BERTKIT_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no data folder: the recipe's own names are looked for here
    args = ["finetune", recipe, "--model", "{tiny}", "--output-dir", "{out}", "--train-file", str(GOOD / train)]
    check(args, f"{evaluated}: file not found (an evaluation file, looked for in the working folder: there "
                f"is no data folder, neither --data-dir nor $BERTKIT_DATA_DIR/{recipe}); name yours with "
                "--validation-files FILE", tiny_bert, clf, tmp_path, capsys)


@pytest.mark.parametrize("args, expected", [
    (PREDICT + [str(GOOD / "sentences.txt"), "--batch-size", "0"], "argument --batch-size: must be positive, not 0"),
    (EXTRACT + [str(GOOD / "sentences.txt"), "--max-length", "-3"], "argument --max-length: must be positive, not -3"),
    (["search", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--trials", "0"], "--trials: must be positive"),
    (["probe", "--model", "{tiny}", "--lr", "nan"], "argument --lr: must be positive, not nan"),
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--batch-size", "abc"],  # argparse's own:
     "bertkit finetune: error: argument --batch-size: invalid int value: 'abc' (`bertkit finetune --help` lists its "
     "flags)"),  # was the command's whole usage (41 lines), then this
    (["finetune", "sst2", "--model", "{tiny}", "--output-dir", "{out}", "--lr", "-1e-5"],
     "argument --lr: expected one argument"),
    ([], "bertkit: error: the following arguments are required: COMMAND (`bertkit --help` lists the commands)"),
])
def test_a_count_or_size_below_1_is_argparses_one_line(args, expected, tiny_bert, clf, tmp_path, capsys):
    out = tmp_path / "out"  # these were tracebacks from deep inside (range() with a step of 0, an empty study)
    with pytest.raises(SystemExit) as stop:
        main([a.format(tiny=tiny_bert, clf=clf, out=out) for a in args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and expected in err and err.count("\n") == 1 and not out.exists()


DEV = {"dev": {"text": ["a film"], "label": [0]}}
NOTEBOOK = [  # Trainer.fit on a notebook's lists: what was an error inside datasets or torch, or a wrong run
    ({"text": [], "label": []}, DEV, "train: no examples"),
    ({"text": ["a", "b"], "label": [0]}, DEV, "train: columns of unequal length: text 2, label 1"),
    ({"text": ["a", "b"], "label": ["neg", "pos"]}, DEV,
     "train: row 0: label 'neg' is neither one of ['negative', 'positive'] nor an id 0-1"),
    ({"text": ["a", "b"], "label": [0, 5]}, DEV, "train: row 1: label 5 is neither one of"),  # was torch's IndexError
    ({"text": ["a", "b"], "label": [0.0, 1.0]}, DEV, "train: row 0: label 0.0 is neither one of"),
    ({"text": ["a", "b"], "label": [0, 1]}, {"dev": {"text": ["a"], "label": [-1]}},
     "evals['dev']: row 0: label -1 is neither one of ['negative', 'positive'] nor an id 0-1 (-1 marks an "
     "unlabelled row"),  # was scored against -1
]


@pytest.mark.parametrize("train, evals, expected", NOTEBOOK, ids=[c[2][:40] for c in NOTEBOOK])
def test_a_notebooks_lists_are_checked_before_the_run_starts(train, evals, expected, tiny_bert, tmp_path):
    from bertkit import BertkitError, SequenceClassification, Trainer, run_config

    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["negative", "positive"])
    cfg = run_config(name="sst2", max_steps=2, output_dir=str(tmp_path / "run"), precision="fp32")
    with pytest.raises(BertkitError) as e:
        Trainer(clf, cfg).fit(train, evals)
    assert str(e.value).startswith(expected)
    assert not (tmp_path / "run").exists()


NER_DEV = {"dev": {"tokens": [["Ann", "sings"]], "tags": [["B-PER", "O"]]}}
QA_DEV = {"dev": {"question": ["Who sings?"], "context": ["Ann sings."],
                  "answers": [{"text": ["Ann"], "answer_start": [0]}]}}
NOTEBOOK_SPANS = [  # NER's and QA's lists: were an IndexError, a TypeError mid-run, or a failure after training
    ("ner", {"tokens": [["Ann", "sings"]], "tags": [["O"]]}, "train: row 0: 2 words but 1 tags"),
    ("ner", {"tokens": [["Ann", "sings"]]}, "train: no 'tags' column (a token-classification example has tokens, "
                                            "tags)"),
    ("qa", {"question": ["Who?"], "context": ["Ann sings."], "answers": [{"text": ["Ann"], "answer_start": [5]}]},
     "train: field \"rows[0].answers[0].answer_start\": question 0: answer_start 5 does not index the answer 'Ann' "
     "(the context there reads 'ing'); fix the row, or give the task skip_bad_examples=True to skip such questions"),
    ("qa", {"question": ["Who?"], "context": ["Ann sings."], "answers": [{"text": "Ann", "answer_start": 0}]},
     "train: field \"rows[0].answers\": 'answers' must hold lists 'text' and 'answer_start' of one length"),
    ("qa", {"question": ["Who?"], "context": ["Ann sings."]}, "train: no 'answers' column"),
    ("qa", {"question": [" "], "context": ["Ann sings."], "answers": [{"text": ["Ann"], "answer_start": [0]}]},
     "train: row 0: question is empty"),  # a notebook's empty text, as a classification example's
]


@pytest.mark.parametrize("task, train, expected", NOTEBOOK_SPANS, ids=[c[2][:40] for c in NOTEBOOK_SPANS])
def test_a_notebooks_ner_and_qa_lists_are_checked(task, train, expected, tiny_bert, tmp_path):
    from bertkit import BertkitError, QuestionAnswering, TokenClassification, Trainer, run_config

    model = TokenClassification.from_pretrained(str(tiny_bert), label_names=["O", "B-PER", "I-PER"]) \
        if task == "ner" else QuestionAnswering.from_pretrained(str(tiny_bert))
    cfg = run_config(name=task, max_steps=1, output_dir=str(tmp_path / "run"), precision="fp32")
    with pytest.raises(BertkitError) as e:
        Trainer(model, cfg).fit(train, NER_DEV if task == "ner" else QA_DEV)
    assert str(e.value).startswith(expected)
    assert not (tmp_path / "run").exists()


def test_a_notebooks_qa_lists_without_ids_train_and_score(tiny_bert, tmp_path, caplog):
    """Questions given without ids are numbered (scoring needed an `id` column: it failed after training); the
    option `skip_bad_examples` skips an answer_start that does not index its answer, as it does in a file."""
    from bertkit import QuestionAnswering, Trainer, run_config

    qa = QuestionAnswering.from_pretrained(str(tiny_bert), skip_bad_examples=True)
    cfg = run_config(name="qa", max_steps=1, output_dir=str(tmp_path / "run"), precision="fp32")
    train = {k: v * 2 for k, v in QA_DEV["dev"].items()}
    train["answers"] = [train["answers"][0], {"text": ["Ann"], "answer_start": [5]}]
    result = Trainer(qa, cfg).fit(train, QA_DEV)
    assert set(result["dev"]) == {"exact_match", "f1"}
    assert "the questions given: skipped 1 question(s) whose answer_start does not index" in caplog.text


def test_a_recipe_not_utf8_and_a_run_folders_damaged_config_are_one_line(clf, tmp_path, capsys):
    recipe = tmp_path / "latin1.yaml"
    recipe.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert main(["finetune", str(recipe)]) == 2
    assert capsys.readouterr().err == f"bertkit finetune: error: {recipe}, line 1: not UTF-8 text (byte 0xe9)\n"
    run = tmp_path / "run"
    shutil.copytree(clf, run)
    (run / "config.yaml").write_text("task: [\n")  # was YAML's traceback
    for command in (["predict", "--model", str(run), "--input", str(GOOD / "sentences.txt")],
                    ["evaluate", "--model", str(run), "--file", str(GOOD / "dev.tsv")]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"bertkit {command[0]}: error: {run / 'config.yaml'}, line ") and \
            ": not valid YAML: " in err and err.count("\n") == 1, err


def test_an_output_the_file_system_refuses_is_one_line(clf, tiny_bert, tmp_path, capsys):
    """An output under a path that cannot be made (a file where a folder should be): one line naming the path asked
    for (was an OSError traceback naming its temporary)."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder\n")
    commands = {"predict": ["--model", str(clf), "--input", str(GOOD / "sentences.txt"), "--output",
                            str(blocker / "p.jsonl")],
                "export": ["--model", str(clf), "--output", str(blocker / "onnx")],
                "extract": ["--model", str(tiny_bert), "--input", str(GOOD / "sentences.txt"), "--layers", "last",
                            "--output", str(blocker / "feats")]}
    for command, args in commands.items():
        assert main([command, *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(blocker) in err and ".tmp" not in err, err
        assert err.startswith(f"bertkit {command}: error: "), err


def test_an_output_file_that_is_a_folder_is_said_before_the_work(clf, tmp_path, capsys):
    """`predict --output` or `evaluate --output` naming a folder: refused before the model loads (predict named its
    temporary, `.p.<random>.tmp/p`, after answering every input; evaluate after scoring the whole split)."""
    folder = tmp_path / "p"
    folder.mkdir()
    for command in (["predict", "--model", str(clf), "--input", str(GOOD / "sentences.txt")],
                    ["evaluate", "--model", str(clf), "--file", str(GOOD / "dev.tsv")]):
        assert main([*command, "--output", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err == f"bertkit {command[0]}: error: --output {folder} is a folder: give the path of a file to " \
                      "write\n", err
    assert list(tmp_path.iterdir()) == [folder] and list(folder.iterdir()) == []


def test_an_output_that_is_the_input_file_is_refused(clf, tmp_path, capsys, monkeypatch):
    """`predict --input same.txt --output same.txt` replaced the input with its answers."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copy(GOOD / "sentences.txt", "same.txt")
    shutil.copy(GOOD / "dev.tsv", "dev.tsv")
    for command, given in ((["predict", "--model", str(clf), "--input", "same.txt"], "same.txt"),
                           (["evaluate", "--model", str(clf), "--file", "dev.tsv"], "dev.tsv")):
        before = (tmp_path / given).read_bytes()
        assert main([*command, "--output", str(tmp_path / given)]) == 2  # the same file, by another path
        assert capsys.readouterr().err == (f"bertkit {command[0]}: error: --output {tmp_path / given} is the input "
                                           "file: give another path (the answers would replace it)\n")
        assert (tmp_path / given).read_bytes() == before


def test_an_atomic_write_onto_a_folder_names_the_path_asked_for(tmp_path):
    from bertkit.utils import atomic_path

    (tmp_path / "out").mkdir()
    with pytest.raises(OSError) as caught, atomic_path(tmp_path / "out") as tmp:
        tmp.write_text("new")
    assert caught.value.filename == str(tmp_path / "out")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]

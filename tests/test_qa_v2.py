"""SQuAD 2.0 question answering: the v2 loader (unanswerable questions; errors naming file, line and field; the hub
layout), [CLS] targets, the no-answer decision on hand-made logits, and an end-to-end CLI run of the tiny model
(finetune squad_v2 → predictions.json + null_odds.json → the official evaluation → evaluate → predict; a QA run in
plain transformers: test_contract.py).
Metric parity: test_squad_v2_metric.py; v1.1: test_qa.py."""

import json

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.config_files import load_recipe, read_yaml, recipe_path
from bertkit.data.squad import read_squad_file
from bertkit.errors import DataError
from bertkit.tasks.qa_spans import Window, decide, null_logit, rank_answers, with_null

from . import squad_v2_official as official
from .conftest import SHARED_DATA, tiny_run, tiny_run_data, use_fake_hub_squad, write_squad_v2


@pytest.fixture(scope="module")
def v2_dir(tmp_path_factory):
    return tiny_run_data(tmp_path_factory, "qa_v2")  # write_squad_v2's files


@pytest.fixture(scope="module")
def v2_run(tmp_path_factory, tiny_bert, v2_dir):
    """`bertkit finetune squad_v2` for two epochs on v2_dir with windows of 64 pieces (conftest TINY_RUNS)."""
    return tiny_run(tmp_path_factory, tiny_bert, "qa_v2")


# --- loading and validation ------------------------------------------------------------------------------------
def test_v2_loader_keeps_unanswerable_questions_with_empty_answers(v2_dir, tmp_path):
    questions, skipped = read_squad_file(v2_dir / "validation.json", no_answer=True)
    assert len(questions) == 48 and skipped == 0
    assert questions[1]["answers"] == {"text": [], "answer_start": []}  # plausible_answers are not answers
    answers = questions[0]["answers"]
    assert questions[0]["context"][answers["answer_start"][0]:].startswith(answers["text"][0])
    assert sum(not a["text"] for a in questions["answers"]) == 24
    questions.to_json(tmp_path / "validation.jsonl", lines=True)  # the datasets layout, a question a line
    again, _ = read_squad_file(tmp_path / "validation.jsonl", no_answer=True)
    assert again.to_list() == questions.to_list()  # empty answers: unanswerable
    with pytest.raises(DataError, match="no answers"):
        read_squad_file(tmp_path / "validation.jsonl")  # SQuAD v1.1 (the squad recipe) refuses them


def edit_question(directory, i, **fields):
    obj = json.loads((directory / "train.json").read_text())
    obj["data"][0]["paragraphs"][i]["qas"][0].update(fields)
    (directory / "train.json").write_text(json.dumps(obj, indent=1))
    text = (directory / "train.json").read_text()
    return text[:text.index(f'"id": "t{i:04d}"')].count("\n") + 1  # the line of the question's id


@pytest.mark.parametrize("i, fields, message", [
    (3, {"answers": [{"text": "the", "answer_start": 0}]}, "question t0003: is_impossible is true but it has 1"),
    (2, {"answers": []}, "question t0002: no answers, but is_impossible is false"),
    (5, {"is_impossible": "yes"}, "question t0005: 'is_impossible' must be true or false"),
    (4, {"answers": None}, "question t0004: 'answers' must be a list"),
])
def test_bad_v2_questions_name_file_line_and_field(tmp_path, i, fields, message):
    write_squad_v2(tmp_path, n_train=8, n_dev=2)
    line = edit_question(tmp_path, i, **fields)
    with pytest.raises(DataError) as e:
        read_squad_file(tmp_path / "train.json", no_answer=True)
    field = "is_impossible" if "is_impossible" in fields else "answers"
    assert str(e.value).startswith(f'{tmp_path / "train.json"}, line {line}, field "data[0].paragraphs[{i}].qas[0].'
                                   f'{field}": {message}'), str(e.value)
    assert "\n" not in str(e.value)


def test_v1_recipe_refuses_unanswerable_questions_and_names_squad_v2(v2_dir):
    with pytest.raises(DataError, match="question v0001: no answers .*needs the squad_v2 recipe"):
        read_squad_file(v2_dir / "validation.json")


def test_without_is_impossible_empty_answers_mean_unanswerable(tmp_path):
    write_squad_v2(tmp_path, n_train=4, n_dev=1)
    obj = json.loads((tmp_path / "train.json").read_text())
    for p in obj["data"][0]["paragraphs"]:
        del p["qas"][0]["is_impossible"]
    (tmp_path / "train.json").write_text(json.dumps(obj))
    questions, _ = read_squad_file(tmp_path / "train.json", no_answer=True)
    assert [bool(a["text"]) for a in questions["answers"]] == [True, False, True, False]


def test_hub_squad_v2_is_used_without_local_data(monkeypatch, tmp_path):
    from bertkit.tasks.question_answering import QuestionAnswering

    use_fake_hub_squad(monkeypatch, tmp_path, write_squad_v2(tmp_path / "hub", n_train=6, n_dev=1),
                       "rajpurkar/squad_v2")
    train, evals, _ = QuestionAnswering.load_data(load_recipe("squad_v2"))
    assert len(train) == 6 and list(evals) == ["validation"]
    assert [len(a["text"]) for a in train["answers"]] == [1, 0, 1, 0, 1, 0]


def test_squad_v2_recipe_carries_the_squad_settings_over():
    v1, v2 = load_recipe("squad"), load_recipe("squad_v2")
    same = ("task", "batch_size", "lr", "epochs", "warmup_ratio", "max_length")
    options = ("window_overlap", "max_question_length", "max_answer_length", "n_best")
    assert {k: getattr(v1, k) for k in same} == {k: getattr(v2, k) for k in same}
    assert {k: getattr(v1.task_options, k) for k in options} == {k: getattr(v2.task_options, k) for k in options}
    assert v2.task_options.allow_no_answer and not v1.task_options.allow_no_answer
    assert v2.hub.dataset == "rajpurkar/squad_v2" and v2.name == "squad_v2"
    assert read_yaml(recipe_path("squad"))["model_overrides"] == read_yaml(recipe_path("squad_v2"))["model_overrides"]
    assert v2.metrics == ["squad_v2", "best_f1"] and v2.main_metric == "best_f1"
    tuned = load_recipe("squad_v2", {"model": "minilm-l6"})
    assert (tuned.batch_size, tuned.grad_accum, tuned.lr, tuned.epochs, tuned.layer_lr_decay) == (8, 2, 1.5e-4, 3, 0.9)


@pytest.mark.skipif(not (SHARED_DATA / "squad_v2").is_dir(), reason="shared SQuAD 2.0 not available")
def test_real_squad_v2_files_parse_completely():
    from bertkit.tasks.question_answering import QuestionAnswering

    train, evals, _ = QuestionAnswering.load_data(load_recipe("squad_v2", {"data_dir": str(SHARED_DATA / "squad_v2")}))
    assert (len(train), len(evals["validation"])) == (4449, 1629)
    assert sum(not a["text"] for a in train["answers"]) == 2342
    assert sum(not a["text"] for a in evals["validation"]["answers"]) == 826


# --- [CLS] targets and the no-answer decision ------------------------------------------------------------------
def test_unanswerable_windows_target_cls_and_answerable_ones_as_in_v1(tiny_bert, v2_dir):
    from bertkit.tasks import QuestionAnswering

    questions, _ = read_squad_file(v2_dir / "train.json", no_answer=True)
    v2 = QuestionAnswering.from_pretrained(str(tiny_bert), max_length=64, max_question_length=16, window_overlap=16,
                                           allow_no_answer=True)
    features = v2.encode(questions)
    impossible = [not questions[q]["answers"]["text"] for q in features["example_index"]]
    assert sum(impossible) >= 120 and len(features) > len(questions)  # long paragraphs give several windows
    targets = list(zip(features["start_positions"], features["end_positions"], strict=True))
    assert all(t == (0, 0) for t, imp in zip(targets, impossible, strict=True) if imp)
    answerable = questions.select([i for i, a in enumerate(questions["answers"]) if a["text"]])
    v1 = QuestionAnswering.from_pretrained(str(tiny_bert), max_length=64, max_question_length=16, window_overlap=16)
    v1_targets = list(zip(*(v1.encode(answerable)[k] for k in ("start_positions", "end_positions")), strict=True))
    assert [t for t, imp in zip(targets, impossible, strict=True) if not imp] == v1_targets
    assert any(s > 0 for s, _ in v1_targets)


def test_training_from_a_v2_checkpoint_chooses_the_threshold_again(tiny_bert, tmp_path):
    from bertkit.tasks import QuestionAnswering

    v2 = QuestionAnswering.from_pretrained(str(tiny_bert), allow_no_answer=True)
    v2.null_threshold = -2.5  # as a run sets it once chosen on its evaluation set
    v2.save(tmp_path / "v2")
    assert json.loads((tmp_path / "v2" / "config.json").read_text())["bertkit_null_threshold"] == -2.5
    loaded = QuestionAnswering.from_pretrained(str(tmp_path / "v2"))
    assert (loaded.allow_no_answer, loaded.null_threshold) == (True, -2.5)
    again = QuestionAnswering.from_config(load_recipe("squad_v2", {"model": str(tmp_path / "v2")}))
    assert (again.allow_no_answer, again.null_threshold) == (True, None)
    v1 = QuestionAnswering.from_config(load_recipe("squad", {"model": str(tmp_path / "v2")}))
    assert not v1.allow_no_answer and "squad_v2" not in v1.metric_builtins
    v1.save(tmp_path / "v1")
    assert "bertkit_null_threshold" not in json.loads((tmp_path / "v1" / "config.json").read_text())


OFFSETS = np.array([[0, 0], [0, 3], [0, 0], [0, 5], [6, 11], [0, 0]])  # [CLS] who [SEP] hello world [SEP]


def w(start, end):
    return Window(np.array(start, dtype=float), np.array(end, dtype=float), OFFSETS, 3, 4)


def test_no_answer_wins_when_its_score_beats_the_best_span_by_more_than_the_threshold():
    # null 5 + 5 = 10 against the best span "world" 3 + 4 = 7: null odds 3
    wins = [w([5, 0, 0, 1, 3, 0], [5, 0, 0, 1, 4, 0])]
    spans, null_p, odds = with_null(rank_answers(wins, "hello world"), null_logit(wins))
    assert odds == 3.0 and spans[0]["text"] == "world" and sum(a["score"] for a in spans) + null_p == pytest.approx(1)
    assert null_p > spans[0]["score"]
    assert decide(spans, odds, null_p, 0.0) == {"text": "", "score": null_p, "start": 0, "end": 0, "no_answer": True}
    kept = decide(spans, odds, null_p, 3.5)  # a higher threshold: the span stays
    assert (kept["text"], kept["start"], kept["end"], kept["no_answer"]) == ("world", 6, 11, False)
    assert decide(spans, odds, null_p, 3.0)["no_answer"] is False  # "exceeds": equal is not enough


def test_a_span_wins_when_the_null_score_loses_and_the_null_is_the_least_confident_window():
    # two windows: null 2 and 0.5 (the minimum counts); best span "hello world" 3 + 4 = 7
    wins = [w([1, 0, 0, 3, 0, 0], [1, 0, 0, 0, 4, 0]), w([0.25, 0, 0, 0, 0, 0], [0.25, 0, 0, 0, 0, 0])]
    assert null_logit(wins) == 0.5
    spans, null_p, odds = with_null(rank_answers(wins, "hello world"), null_logit(wins))
    assert odds == 0.5 - 7.0 and decide(spans, odds, null_p, 0.0)["text"] == "hello world"
    assert decide(spans, odds, null_p, -7.0)["no_answer"] is True  # threshold below the odds: no answer
    none = with_null([], 1.0)  # no span at all (best logit counts as 0): no answer at any threshold
    assert none[1:] == (1.0, 1.0) and decide(none[0], none[2], none[1], 5.0)["no_answer"] is True


def test_score_chooses_the_official_best_f1_threshold_on_the_evaluation_set(tiny_bert):
    """Hand-made logits for three questions through the task: the threshold is evaluate-v2.0.py's
    best_f1_thresh, the answers are cut by it, and the metrics are the official ones on answers and null odds."""
    import datasets

    from bertkit.metrics import SQUAD_V2_BUILTIN, resolve_metrics
    from bertkit.tasks import QuestionAnswering

    qa = QuestionAnswering.from_pretrained(str(tiny_bert), allow_no_answer=True)
    contexts = ["the red car", "a blue sky", "nothing here"]
    examples = datasets.Dataset.from_dict({"id": ["a", "b", "c"], "question": ["colour ?"] * 3, "context": contexts,
                                           "answers": [{"text": ["red"], "answer_start": [4]},
                                                       {"text": ["blue"], "answer_start": [2]},
                                                       {"text": [], "answer_start": []}]})
    features = qa.encode(examples)
    outputs = []
    for f, context in zip(features, contexts, strict=True):  # [CLS] colour ? [SEP] w1 w2 w3 [SEP]: context tokens 4..6
        start, end = np.zeros(f["length"]), np.zeros(f["length"])
        word = {"the red car": 5, "a blue sky": 5, "nothing here": 4}[context]
        start[word] = end[word] = 2.0  # best span: the colour word (4)
        start[0] = end[0] = {"the red car": 0.0, "a blue sky": 1.5, "nothing here": 3.0}[context]  # null 0 / 3 / 6
        outputs.append({"start_logits": start, "end_logits": end})
    hooks = resolve_metrics(["squad_v2"], builtins=SQUAD_V2_BUILTIN)
    metrics, predictions = qa.score(outputs, examples, features, hooks)
    odds = {p["id"]: p["null_odds"] for p in predictions}
    assert odds == {"a": -4.0, "b": -1.0, "c": 2.0}
    assert [p["answer"] for p in predictions] == ["red", "blue", ""] and metrics["best_f1_thresh"] == -1.0
    dataset = [{"paragraphs": [{"context": c, "qas": [{"id": i, "answers": [{"text": t} for t in a["text"]]}]}
                               for i, c, a in zip(examples["id"], contexts, examples["answers"], strict=True)]}]
    answers = {p["id"]: p["answer"] for p in predictions}
    assert metrics == pytest.approx(official.evaluate(dataset, answers, odds)) and metrics["f1"] == 100.0
    qa.null_threshold = -2.0  # a saved threshold is applied as it is: "blue" (odds -1) becomes no answer
    metrics, predictions = qa.score(outputs, examples, features, hooks)
    assert [p["answer"] for p in predictions] == ["red", "", ""] and metrics["HasAns_exact"] == 50.0


# --- end to end ----------------------------------------------------------------------------------------------------
def test_finetune_squad_v2_writes_the_official_files_and_learns(v2_run, v2_dir):
    out = v2_run
    dev = json.loads((v2_dir / "validation.json").read_text())["data"]
    predictions = json.loads((out / "predictions.json").read_text())
    null_odds = json.loads((out / "null_odds.json").read_text())
    ids = {qa["id"] for p in dev[0]["paragraphs"] for qa in p["qas"]}
    assert set(predictions) == set(null_odds) == ids and all(isinstance(v, float) for v in null_odds.values())
    metrics = json.loads((out / "metrics.json").read_text())["validation"]
    expected = official.evaluate(dev, predictions, null_odds)  # what the official script says on these files
    assert metrics == pytest.approx(expected, abs=1e-9) and set(metrics) == set(expected)
    threshold = json.loads((out / "config.json").read_text())["bertkit_null_threshold"]
    assert threshold == metrics["best_f1_thresh"]  # the saved threshold is the one chosen on the dev set
    assert all((v == "") == (null_odds[q] > threshold) for q, v in predictions.items())
    assert metrics["best_f1"] >= 70 and metrics["HasAns_f1"] > 0 and metrics["NoAns_f1"] > 0  # all "" scores 50
    lines = [json.loads(line) for line in (out / "predictions_validation.jsonl").read_text().splitlines()]
    assert {"no_answer", "null_odds", "gold"} <= set(lines[0]) and lines[1]["gold"] == []
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.usefixtures("cpu_only")  # the answers and threshold the run made on the CPU (tiny_run)
def test_evaluate_and_predict_use_the_saved_threshold(v2_run, v2_dir, tmp_path):
    from bertkit.tasks import QuestionAnswering

    out = v2_run
    threshold = json.loads((out / "config.json").read_text())["bertkit_null_threshold"]
    assert main(["evaluate", "--model", str(out), "--task", "squad_v2", "--split", "validation", "--data-dir",
                 str(v2_dir), "--precision", "fp32"]) == 0
    evaluated = json.loads((out / "eval_squad_v2_validation.json").read_text())
    final = json.loads((out / "metrics.json").read_text())["validation"]
    assert evaluated["best_f1"] == pytest.approx(final["best_f1"]) and evaluated["NoAns_total"] == 24

    paragraphs = json.loads((v2_dir / "validation.json").read_text())["data"][0]["paragraphs"][:6]
    rows = [{"id": p["qas"][0]["id"], "question": p["qas"][0]["question"], "context": p["context"]}
            for p in paragraphs]
    src = tmp_path / "questions.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["predict", "--model", str(out), "--input", str(src), "--output", str(tmp_path / "a.jsonl"),
                 "--precision", "fp32"]) == 0
    answers = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert set(answers[0]) == {"id", "question", "answer", "score", "start", "end", "no_answer", "null_odds"}
    run = [json.loads(line) for line in (out / "predictions_validation.jsonl").read_text().splitlines()][:6]
    for row, a, r in zip(rows, answers, run, strict=True):  # the run's answers to the same questions
        assert a["no_answer"] == (a["null_odds"] > threshold) == (a["answer"] == "")
        assert row["context"][a["start"]:a["end"]] == a["answer"]
        assert (a["id"], a["answer"], a["start"], a["end"], a["no_answer"]) == (
            r["id"], r["answer"], r["start"], r["end"], r["no_answer"])
        assert (a["score"], a["null_odds"]) == pytest.approx((r["score"], r["null_odds"]), abs=1e-6)
    assert any(a["no_answer"] for a in answers) and not all(a["no_answer"] for a in answers)

    qa = QuestionAnswering.from_pretrained(str(out))
    assert qa.allow_no_answer and qa.null_threshold == threshold
    questions, contexts = [r["question"] for r in rows], [r["context"] for r in rows]
    assert [a["no_answer"] for a in qa.predict(questions, contexts)] == [a["no_answer"] for a in answers]
    qa.null_threshold = 1e9
    always = qa.predict(questions, contexts)
    qa.null_threshold = -1e9
    never = qa.predict(questions, contexts)
    assert not any(a["no_answer"] for a in always) and all(a["answer"] == "" for a in never)

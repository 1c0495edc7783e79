"""SQuAD v1.1 question answering: the loader's validation (local JSON and the hub layout), and an end-to-end CLI
run of the tiny model (finetune → predictions.json → official script → evaluate → predict; plain transformers,
serve and export: test_contract.py).
Spans: test_qa_spans.py; metrics: test_squad_metric.py."""

import json

import pytest

from bertkit.cli import main
from bertkit.config_files import load_recipe
from bertkit.data.squad import read_squad_file
from bertkit.errors import BertkitError, DataError

from . import squad_v1_official as official
from .conftest import SHARED_DATA, tiny_run, tiny_run_data, use_fake_hub_squad, write_squad


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory):
    """write_squad's files with one bad training answer (t0007), the session's tiny qa run's data."""
    return tiny_run_data(tmp_path_factory, "qa")


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory, tiny_bert, squad_dir):
    """(run folder, what it logged): `bertkit finetune squad --skip-bad-examples` for one epoch on squad_dir, with
    windows of 64 pieces (conftest TINY_RUNS)."""
    out = tiny_run(tmp_path_factory, tiny_bert, "qa")
    return out, (out.parent / "qa.log").read_text()


# --- loading and validation ------------------------------------------------------------------------------------
def test_loader_reads_ids_questions_and_all_reference_answers(squad_dir):
    questions, skipped = read_squad_file(squad_dir / "validation.json")
    assert len(questions) == 48 and skipped == 0 and questions[0]["id"] == "v0000"
    answers = questions[0]["answers"]
    assert len(answers["text"]) == 2 and questions[0]["context"][answers["answer_start"][0]:].startswith(
        answers["text"][0])


def as_jsonl(questions, path):
    """Questions as the Hugging Face datasets layout writes them, a question a line (`Dataset.to_json`)."""
    questions.to_json(path, lines=True)
    return path


def test_jsonl_in_the_datasets_layout_reads_as_its_squad_file_does(squad_dir, tmp_path):
    questions, _ = read_squad_file(squad_dir / "validation.json")
    jsonl = as_jsonl(questions, tmp_path / "validation.jsonl")
    again, skipped = read_squad_file(jsonl)
    assert again.to_list() == questions.to_list() and skipped == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    rows[3]["answers"]["answer_start"][0] += 1  # an answer that is not where it says
    rows[5]["id"] = rows[4]["id"]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as e:
        read_squad_file(jsonl)
    assert str(e.value).startswith(f"{jsonl}, line 4, field \"answers[0].answer_start\": question {rows[3]['id']}: ")
    with pytest.raises(DataError, match=f'line 6, field "id": question {rows[4]["id"]}: duplicate id \\(first at '
                                        "line 5\\)"):
        read_squad_file(jsonl, skip_bad=True)


def test_run_qa_json_files_read_as_the_datasets_layout(squad_dir, tmp_path):
    from bertkit.data.squad import read_squad_questions
    from bertkit.tasks.question_answering_io import is_squad_file

    questions, _ = read_squad_file(squad_dir / "validation.json")
    lines = tmp_path / "lines.json"  # run_qa.py's files: JSON lines named .json (was "not valid JSON: Extra data")
    questions.to_json(lines, lines=True)
    assert read_squad_file(lines)[0].to_list() == questions.to_list() and not is_squad_file(str(lines))
    rows = questions.to_list()
    data = tmp_path / "data.json"  # or {"data": [questions]} (was "missing field 'paragraphs'")
    data.write_text(json.dumps({"version": "x", "data": rows}, indent=1))
    assert read_squad_file(data)[0].to_list() == questions.to_list() and is_squad_file(str(data))
    assert read_squad_questions(data)[0] == {k: rows[0][k] for k in ("id", "question", "context")}
    rows[3]["answers"]["answer_start"][0] += 1
    rows[5]["answers"] = {"text": [], "answer_start": []}
    data.write_text(json.dumps({"data": rows}, indent=1))
    line = next(n for n, t in enumerate(data.read_text().splitlines(), 1) if f'"{rows[3]["id"]}"' in t)
    with pytest.raises(DataError, match=f'line {line}, field "data\\[3\\].answers\\[0\\].answer_start": question '):
        read_squad_file(data)
    with pytest.raises(DataError, match=r'field "data\[5\].answers": .*no answers \(a SQuAD v1.1 question has at '
                                        r"least one; unanswerable ones, SQuAD 2.0: the squad_v2 recipe, or "
                                        r"--allow-no-answer\)"):
        read_squad_file(data, skip_bad=True)
    assert len(read_squad_file(data, skip_bad=True, no_answer=True)[0]) == len(rows) - 1


def mutate(directory, edit, name="train.json"):
    obj = json.loads((directory / name).read_text())
    edit(obj["data"][0]["paragraphs"])
    (directory / name).write_text(json.dumps(obj))


def set_key(key, value, i=2):
    def edit(paragraphs):
        target = paragraphs[i] if key == "context" else paragraphs[i]["qas"][0]
        target[key] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    (lambda ps: ps[2]["qas"][0]["answers"][0].update(answer_start=3), "question t0002: answer_start 3 does not index"),
    (set_key("question", "   "), "question t0002: empty question"),
    (set_key("context", ""), "question t0002: empty context"),
    (set_key("answers", []), "question t0002: no answers"),
    (lambda ps: ps[2]["qas"][0].pop("question"), "question t0002: missing field 'question'"),
    (lambda ps: ps[2]["qas"][0].pop("id"), "field \"data[0].paragraphs[2].qas[0].id\": missing field 'id'"),
    (set_key("id", "t0001"), "question t0001: duplicate id"),
])
def test_bad_questions_are_clear_errors_naming_the_question(tmp_path, edit, message):
    write_squad(tmp_path, n_train=5, n_dev=2)
    mutate(tmp_path, edit)
    with pytest.raises(DataError) as e:
        read_squad_file(tmp_path / "train.json")
    assert message in str(e.value) and str(tmp_path / "train.json") in str(e.value)


def test_malformed_json_names_file_and_line(tmp_path):
    (tmp_path / "train.json").write_text('{"version": "1.1",\n "data": [\n {"paragraphs": [}\n]}')
    with pytest.raises(DataError, match=r"train.json, line 3: not valid JSON"):
        read_squad_file(tmp_path / "train.json")
    (tmp_path / "train.json").write_text('[{"context": "x"}]')
    with pytest.raises(DataError, match='not SQuAD JSON: expected an object with a "data" list'):
        read_squad_file(tmp_path / "train.json")


def test_skip_bad_examples_counts_what_it_skips(tmp_path, caplog):
    write_squad(tmp_path, n_train=10, n_dev=2, bad_train_ids=("t0003", "t0008"))
    questions, skipped = read_squad_file(tmp_path / "train.json", skip_bad=True)
    assert skipped == 2 and len(questions) == 8 and "t0003" not in questions["id"]
    assert "skipped 2 question(s) whose answer_start does not index the answer text" in caplog.text


def test_bad_answer_start_on_the_command_line_exits_2_and_writes_nothing(tmp_path, tiny_bert, capsys):
    data = write_squad(tmp_path / "data", n_train=20, n_dev=4, bad_train_ids=("t0005",))
    out = tmp_path / "run"
    args = ["finetune", "squad", "--model", str(tiny_bert), "--data-dir", str(data), "--output-dir", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "train.json" in err and "question t0005: answer_start" in err and "--skip-bad-examples" in err
    assert not out.exists()


def test_hub_copy_is_used_without_local_data(monkeypatch, tmp_path):
    from bertkit.tasks.question_answering import QuestionAnswering

    data = write_squad(tmp_path / "hub", n_train=6, n_dev=1)
    use_fake_hub_squad(monkeypatch, tmp_path, data, "rajpurkar/squad")
    cfg = load_recipe("squad", {"max_eval_samples": 4})
    train, evals, names = QuestionAnswering.load_data(cfg)
    assert len(train) == 6 and list(evals) == ["validation"] and len(evals["validation"]) == 4 and names == []
    assert train[0]["id"] == "train-t0000" and train[0]["answers"]["text"] == [train[0]["context"][
        train[0]["answers"]["answer_start"][0]:][:len(train[0]["answers"]["text"][0])]]
    assert len(QuestionAnswering.load_split(cfg, "validation", [])) == 4
    mutate(data, set_key("answers", [{"text": "zzz", "answer_start": 0}], i=1))
    with pytest.raises(DataError, match=r"rajpurkar/squad \(train\), .*question train-t0001: answer_start 0"):
        QuestionAnswering.load_data(cfg)


def test_train_answer_consensus_reorders_training_references_only(tmp_path, capsys):
    from bertkit.tasks.qa_spans import consensus_first
    from bertkit.tasks.question_answering import QuestionAnswering

    context = "Super Bowl 50 was played at Levi's Stadium in Santa Clara, California."
    refs = {"text": ["Santa Clara, California", "Santa Clara", "Santa Clara"], "answer_start": [46, 46, 46]}
    assert consensus_first(refs) == {"text": ["Santa Clara", "Santa Clara, California", "Santa Clara"],
                                     "answer_start": [46, 46, 46]}
    tie = {"text": ["the Santa Clara", "Santa Clara"], "answer_start": [42, 46]}  # equal after normalisation
    assert consensus_first(tie) == tie and consensus_first({"text": ["x"], "answer_start": [0]})["text"] == ["x"]
    answers = [{"text": t, "answer_start": context.index(t)} for t in refs["text"]]
    split = {"version": "1.1", "data": [{"title": "SB", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "Where?", "answers": answers}]}]}]}
    for name in ("train.json", "validation.json"):
        (tmp_path / name).write_text(json.dumps(split))
    load = QuestionAnswering.load_data
    first = load(load_recipe("squad", {"data_dir": str(tmp_path)}))
    consensus = load(load_recipe("squad", {"data_dir": str(tmp_path), "train_answer": "consensus"}))
    assert first[0][0]["answers"]["text"][0] == "Santa Clara, California"
    assert consensus[0][0]["answers"]["text"] == ["Santa Clara", "Santa Clara, California", "Santa Clara"]
    assert "train_answer consensus: 1 of 1 training questions" in capsys.readouterr().err
    assert consensus[1]["validation"][0]["answers"] == first[1]["validation"][0]["answers"]  # references untouched
    with pytest.raises(BertkitError, match="'train_answer' must be one of first, consensus"):
        load_recipe("squad", {"train_answer": "longest"})


def test_squad_recipe_defaults():
    cfg = load_recipe("squad")
    assert (cfg.task, cfg.name, cfg.lr, cfg.batch_size, cfg.epochs, cfg.max_length) == (
        "question-answering", "squad", 3e-5, 32, 2, 384)
    o = cfg.task_options
    assert (o.window_overlap, o.n_best, o.max_answer_length, o.max_question_length) == (128, 20, 30, 64)
    assert cfg.metrics == ["exact_match", "f1"] and cfg.main_metric == "f1" and not o.skip_bad_examples


@pytest.mark.skipif(not (SHARED_DATA / "squad").is_dir(), reason="shared SQuAD not available")
def test_real_squad_files_parse_completely():
    cfg = load_recipe("squad", {"data_dir": str(SHARED_DATA / "squad")})
    from bertkit.tasks.question_answering import QuestionAnswering

    train, evals, names = QuestionAnswering.load_data(cfg)
    assert len(train) == 7147 and len(evals["validation"]) == 2233 and names == []
    assert max(len(a["text"]) for a in evals["validation"]["answers"]) >= 3


@pytest.mark.parametrize("recipe", ["squad", "squad_v2"])
def test_windows_and_labels_are_run_qas(recipe, tiny_bert, monkeypatch):
    """bertkit's QA windows and answer labels are run_qa.py's (its prepare_train_features, as transcribed for the
    Trainer reference in benchmarks/parity_sides.py): the same input ids, token types and start/end labels, window for
    window, on real SQuAD questions cut into several short windows, so answers outside a window label [CLS], as do
    SQuAD 2.0's unanswerable questions."""
    if not (SHARED_DATA / recipe).is_dir():
        pytest.skip(f"shared {recipe} data not available")
    from pathlib import Path

    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from bertkit.tasks.question_answering import QuestionAnswering

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))
    from parity_sides import qa_windows

    cfg = load_recipe(recipe, {"data_dir": str(SHARED_DATA / recipe), "max_length": 128, "max_eval_samples": 300,
                                "task_options": {"window_overlap": 32}})
    questions = QuestionAnswering.load_split(cfg, "validation", [])
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    task = QuestionAnswering(AutoModelForQuestionAnswering.from_pretrained(tiny_bert), tok, max_length=128,
                             options=cfg.task_options)
    ours, theirs = task.encode(questions), qa_windows(cfg, tok, questions, keep_offsets=False)
    columns = ("input_ids", "token_type_ids", "start_positions", "end_positions")
    assert len(ours) == len(theirs) > 1.5 * len(questions)  # most contexts need several windows of 128
    assert [[row[c] for c in columns] for row in ours] == [[row[c] for c in columns] for row in theirs]
    starts = list(ours["start_positions"])
    assert 0 < starts.count(0) < len(starts)  # windows without the answer ([CLS]) and windows with it
    unanswerable = {q for q, a in enumerate(questions["answers"]) if not a["text"]}
    assert (recipe == "squad_v2") == bool(unanswerable)
    assert all(s == 0 for q, s in zip(ours["example_index"], starts, strict=True) if q in unanswerable)


# --- end to end --------------------------------------------------------------------------------------------------
def test_finetune_writes_official_predictions_and_learns(qa_run, squad_dir):
    out, stderr = qa_run
    assert "skipped 1 question(s)" in stderr
    predictions = json.loads((out / "predictions.json").read_text())
    dev = json.loads((squad_dir / "validation.json").read_text())["data"]
    assert set(predictions) == {qa["id"] for p in dev[0]["paragraphs"] for qa in p["qas"]}
    assert all(isinstance(v, str) for v in predictions.values())
    metrics = json.loads((out / "metrics.json").read_text())["validation"]
    assert metrics == pytest.approx(official.evaluate(dev, predictions), abs=1e-9)  # what the official script says
    assert metrics["f1"] >= 60  # the tiny model finds the colour
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    first = nbest["v0000"]
    assert first[0]["text"] == predictions["v0000"] and {"text", "score", "logit", "start", "end"} <= set(first[0])
    lines = [json.loads(line) for line in (out / "predictions_validation.jsonl").read_text().splitlines()]
    assert len(lines) == 48 and set(lines[0]) == {"id", "answer", "score", "start", "end", "question", "gold"}
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert (out / "report_question_types_validation.png").is_file() and (out / "report.md").is_file()
    assert "pipeline_tag: question-answering" in (out / "README.md").read_text()


def test_evaluate_and_predict_cli_agree_with_the_run(qa_run, squad_dir, tmp_path, capsys):
    out, _ = qa_run
    assert main(["evaluate", "--model", str(out), "--task", "squad", "--split", "validation", "--data-dir",
                 str(squad_dir), "--precision", "fp32"]) == 0
    evaluated = json.loads((out / "eval_squad_validation.json").read_text())
    final = json.loads((out / "metrics.json").read_text())["validation"]
    assert evaluated["examples"] == 48  # the same model on the same questions: the run's own scores
    assert (evaluated["exact_match"], evaluated["f1"]) == pytest.approx((final["exact_match"], final["f1"]), abs=1e-9)

    dev = json.loads((squad_dir / "validation.json").read_text())["data"][0]["paragraphs"][:5]
    rows = [{"id": p["qas"][0]["id"], "question": p["qas"][0]["question"], "context": p["context"]} for p in dev]
    rows[1].pop("id")
    src = tmp_path / "questions.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["predict", "--model", str(out), "--input", str(src), "--output", str(tmp_path / "a.jsonl"),
                 "--precision", "fp32"]) == 0
    answers = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert set(answers[0]) == {"id", "question", "answer", "score", "start", "end"} and "id" not in answers[1]
    assert [a["question"] for a in answers] == [r["question"] for r in rows]
    run = [json.loads(line) for line in (out / "predictions_validation.jsonl").read_text().splitlines()][:5]
    for row, a, r in zip(rows, answers, run, strict=True):  # the run's answers to the same questions
        assert row["context"][a["start"]:a["end"]] == a["answer"]
        assert (a["answer"], a["start"], a["end"]) == (r["answer"], r["start"], r["end"])
        assert a["score"] == pytest.approx(r["score"], abs=1e-6)


def test_predict_reads_a_squad_file_and_writes_the_official_scorers_predictions(qa_run, squad_dir, tmp_path,
                                                                                 capsys):
    out, _ = qa_run
    dev = json.loads((squad_dir / "validation.json").read_text())
    for p in dev["data"][0]["paragraphs"]:  # a test file: no answers
        for qa in p["qas"]:
            qa.pop("answers")
    src = tmp_path / "test.json"
    src.write_text(json.dumps(dev, indent=1))
    assert main(["predict", "--model", str(out), "--input", str(src), "--output-format", "squad", "--output",
                 str(tmp_path / "predictions.json"), "--precision", "fp32"]) == 0
    assert json.loads((tmp_path / "predictions.json").read_text()) == json.loads(
        (out / "predictions.json").read_text())  # the run's own answers to the same 48 questions
    from bertkit.tasks.io import TaskIO

    with pytest.MonkeyPatch.context() as m:  # answered 5 questions at a time, written as one object
        m.setattr(TaskIO, "PREDICT_SLICE", 5)
        assert main(["predict", "--model", str(out), "--input", str(src), "--output-format", "squad", "--precision",
                     "fp32"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads((out / "predictions.json").read_text())
    del dev["data"][0]["paragraphs"][1]["qas"][0]["question"]
    src.write_text(json.dumps(dev, indent=1))
    assert main(["predict", "--model", str(out), "--input", str(src)]) == 2
    line = next(n for n, t in enumerate(src.read_text().splitlines(), 1) if '"v0001"' in t)
    assert f'test.json, line {line}, field "data[0].paragraphs[1].qas[0].question": question v0001: missing field ' \
        "'question'" in capsys.readouterr().err
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text('{"question": "who?", "context": "Ann."}\n')
    assert main(["predict", "--model", str(out), "--input", str(jsonl), "--output-format", "squad"]) == 2
    assert 'q.jsonl, line 1, field "id": missing field (--output-format squad keys each answer by its question\'s ' \
        "id)" in capsys.readouterr().err
    jsonl.write_text('{"id": "a", "question": "who?", "context": "Ann."}\n\n{"id": "a", "question": "why?", '
                     '"context": "Ann."}\n')  # was "the inputs' ids are not unique", naming no file nor id
    assert main(["predict", "--model", str(out), "--input", str(jsonl), "--output-format", "squad"]) == 2
    assert 'q.jsonl, line 3, field "id": id \'a\' again (first on line 1)' in capsys.readouterr().err


def test_predict_qa_bad_input_is_one_clear_line(qa_run, tmp_path, capsys):
    out, _ = qa_run
    src = tmp_path / "q.jsonl"
    src.write_text('{"question": "who?", "context": "Ann."}\n{"question": "what?"}\n')
    assert main(["predict", "--model", str(out), "--input", str(src)]) == 2
    assert 'q.jsonl, line 2, field "context": missing field' in capsys.readouterr().err
    src.write_text("Who wrote it?\n")  # a question as plain text: the line says what a row holds
    assert main(["predict", "--model", str(out), "--input", str(src)]) == 2
    assert ('q.jsonl, line 1: not valid JSON: Expecting value (column 1); each line is one JSON object with '
            '"question", "context"') in capsys.readouterr().err


def test_evaluation_keeps_candidates_not_logits_with_the_same_answers(qa_run, squad_dir, monkeypatch):
    """forward_all keeps each window's answer candidates (a bounded n_best a side), and the answers from them are
    exactly those from the full start/end logits, several-window questions included."""
    from bertkit.inference import forward_all
    from bertkit.tasks import load_task
    from bertkit.tasks.question_answering import QuestionAnswering

    out, _ = qa_run
    task = load_task(str(out))
    cfg = load_recipe("squad", {"data_dir": str(squad_dir), "max_length": 64})
    examples = task.load_split(cfg, "validation", [])
    features = task.encode(examples)
    assert len(features) > len(examples)  # some questions take several windows
    kept = forward_all(task, features, 8)
    assert all(set(o) == {"start_top", "start_top_logits", "end_top", "end_top_logits", "cls_logits"} and
               len(o["start_top"]) <= task.n_best for o in kept)
    monkeypatch.setattr(QuestionAnswering, "output_reducer", lambda self, features: None)
    full = forward_all(task, features, 8)
    assert all(len(o["start_logits"]) == n for o, n in zip(full, features["length"], strict=True))
    assert task.answers(kept, examples, features) == task.answers(full, examples, features)


def test_a_window_overlap_that_leaves_no_room_names_the_flags(tiny_bert):
    from bertkit import QuestionAnswering

    with pytest.raises(Exception, match=r"window_overlap 128 must be smaller than the context room of a window: "
                                        r"max_length 64 - max_question_length 64 - 3 special tokens = -3; lower "
                                        r"--window-overlap or --max-question-length, or raise --max-length"):
        QuestionAnswering.from_pretrained(str(tiny_bert), max_length=64)


def test_questions_whose_answer_fits_no_window_are_counted(tiny_bert, capsys):
    """They train on [CLS] (as run_qa.py's do), said where it was silent."""
    from bertkit import QuestionAnswering

    qa = QuestionAnswering.from_pretrained(str(tiny_bert), max_length=64, max_question_length=16, window_overlap=16)
    long_answer = " ".join(f"word{i}" for i in range(60))  # more word pieces than a window's room
    context = f"Ann ran. {long_answer} Then it rained."
    examples = qa.examples({"id": ["a", "b"], "question": ["Who ran?", "What was said?"], "context": [context] * 2,
                            "answers": [{"text": ["Ann"], "answer_start": [0]},
                                        {"text": [long_answer], "answer_start": [9]}]})
    capsys.readouterr()
    features = qa.encode(examples)
    assert len(features) > 2 and "1 of 2 question(s) have their answer in no window (longer than a window's room " \
        "for context): their windows target [CLS], as run_qa.py's do" in capsys.readouterr().err

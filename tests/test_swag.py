"""SWAG multiple choice (BERT §4.4), the task added as one module: SWAG's CSV read strictly, a run that learns, and
`predict` (CSV and JSONL), `evaluate` and serve's checks on it (plain transformers, serve and ONNX export answering
alike: test_contract.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bertkit.cli import main
from bertkit.config_files import load_recipe

from .conftest import REPO, tiny_run, tiny_run_data

ROWS = [{"context": "the film is, \"so\" it goes", "start": "she", "endings": ["the good .", "a dull .",
                                                                              "the awful .", "the weak ."]},
        {"context": "a story", "endings": ["it was boring", "it was superb", "it was tedious"], "id": "q2"}]


@pytest.fixture(scope="module")
def swag_dir(tmp_path_factory):
    return tiny_run_data(tmp_path_factory, "swag")  # write_swag's files


@pytest.fixture(scope="module")
def swag_run(tmp_path_factory, tiny_bert, swag_dir):
    """`bertkit finetune swag` for three epochs on swag_dir at --max-length 32 (conftest TINY_RUNS)."""
    return tiny_run(tmp_path_factory, tiny_bert, "swag")


def test_recipe_has_the_papers_settings():
    cfg = load_recipe("swag")
    assert (cfg.task, cfg.lr, cfg.batch_size, cfg.epochs, cfg.max_length) == ("multiple-choice", 2e-5, 16, 3, 128)
    assert (cfg.train_file, cfg.validation_files, cfg.hub.dataset, cfg.hub.config) == \
        ("train.csv", ["val.csv"], "allenai/swag", "regular")
    assert cfg.task_options.ending_columns == ["ending0", "ending1", "ending2", "ending3"]
    assert cfg.metrics == ["accuracy"]


def test_reads_swag_csv_into_contexts_and_four_endings(swag_dir, tiny_bert):
    cfg = load_recipe("swag", {"data_dir": str(swag_dir)})
    from bertkit.tasks import get_task

    train, evals, labels = get_task("multiple-choice").load_data(cfg)
    assert len(train) == 160 and list(evals) == ["val"] and len(evals["val"]) == 40 and labels == []
    row = train[0]
    assert row["context"].endswith(', "so" it goes') and len(row["endings"]) == 4 and 0 <= row["label"] < 4
    assert row["start"] in ("someone", "the man", "she")


def test_the_pairs_are_context_and_start_plus_ending(tiny_bert):
    from bertkit.tasks import MultipleChoice

    task = MultipleChoice.from_pretrained(str(tiny_bert), max_length=32)
    import datasets

    features = task.encode(datasets.Dataset.from_dict({"context": ["a b"], "start": ["she"], "endings": [["c", "d"]],
                                                       "label": [1]}))
    pairs = [task.tokenizer.decode(ids) for ids in features[0]["input_ids"]]
    assert pairs == ["[CLS] a b [SEP] she c [SEP]", "[CLS] a b [SEP] she d [SEP]"]
    batch = task.collate([features[0], features[0]])
    assert batch["input_ids"].shape == (2, 2, 7) and batch["labels"].tolist() == [1, 1]


def test_finetune_learns_and_writes_metrics_and_predictions(swag_run):
    metrics = json.loads((swag_run / "metrics.json").read_text())
    assert metrics["task"] == "multiple-choice" and metrics["name"] == "swag"
    assert metrics["val"]["accuracy"] >= 0.6  # chance is 0.25
    rows = [json.loads(line) for line in (swag_run / "predictions_val.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and all(len(r["probabilities"]) == 4 and abs(sum(r["probabilities"]) - 1) < 1e-5
                                   for r in rows)
    assert sum(r["label"] == r["gold"] for r in rows) / 40 == metrics["val"]["accuracy"]
    card = (swag_run / "README.md").read_text()
    assert "AutoModelForMultipleChoice" in card and "pipeline_tag: multiple-choice" in card
    saved = (swag_run / "config.yaml").read_text()
    assert "task: multiple-choice" in saved and "task_options:\n  context_column: sent1" in saved


@pytest.mark.usefixtures("cpu_only")  # the run's own score exactly: the CPU's arithmetic, as the run's (tiny_run)
def test_evaluate_reproduces_the_run_metrics(swag_run, swag_dir, capsys):
    assert main(["evaluate", "--model", str(swag_run), "--data-dir", str(swag_dir), "--split", "val"]) == 0
    result = json.loads((swag_run / "eval_swag_val.json").read_text())
    assert result["accuracy"] == json.loads((swag_run / "metrics.json").read_text())["val"]["accuracy"]


@pytest.mark.usefixtures("cpu_only")
def test_evaluate_reads_other_column_names_by_the_tasks_flags(swag_run, swag_dir, tmp_path, capsys):
    import csv

    rows = list(csv.reader((swag_dir / "val.csv").open(newline="")))
    names = {"sent1": "ctx", "sent2": "lead", "ending0": "a", "ending1": "b", "ending2": "c", "ending3": "d",
             "label": "gold"}
    with (tmp_path / "renamed.csv").open("w", newline="") as f:
        csv.writer(f).writerows([[names.get(c, c) for c in rows[0]], *rows[1:]])
    evaluate = ["evaluate", "--model", str(swag_run), "--file", str(tmp_path / "renamed.csv")]
    assert main(evaluate) == 2
    err = capsys.readouterr().err
    assert 'field "sent1"' in err and "--context-column names the column to read" in err, err
    assert main([*evaluate, "--context-column", "ctx", "--start-column", "lead", "--label-column", "gold"]) == 2
    assert "--ending-columns names the column to read" in capsys.readouterr().err
    assert main([*evaluate, "--context-column", "ctx", "--start-column", "lead", "--label-column", "gold",
                 "--ending-columns", "a,b,c,d"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["examples"] == 40 and result["accuracy"] == json.loads(
        (swag_run / "metrics.json").read_text())["val"]["accuracy"]


def test_predict_reads_a_csv_by_the_runs_columns_or_the_flags(swag_run, swag_dir, tmp_path, capsys):
    """predict read every CSV with SWAG's column names, whatever the run had read its files with."""
    import csv
    import shutil

    import yaml

    rows = list(csv.reader((swag_dir / "test.csv").open(newline="")))
    names = {"sent1": "ctx", "sent2": "lead", "ending0": "a", "ending1": "b", "ending2": "c", "ending3": "d"}
    with (tmp_path / "renamed.csv").open("w", newline="") as f:
        csv.writer(f).writerows([[names.get(c, c) for c in rows[0]], *rows[1:]])

    def predict(run, path, *flags):
        capsys.readouterr()
        code = main(["predict", "--model", str(run), "--input", str(path), *flags])
        return code, capsys.readouterr()

    code, own = predict(swag_run, swag_dir / "test.csv")
    assert code == 0 and len(own.out.splitlines()) == 12
    code, said = predict(swag_run, tmp_path / "renamed.csv")
    assert code == 2 and "--context-column names the column to read" in said.err.splitlines()[-1], said.err
    flags = ("--context-column", "ctx", "--start-column", "lead", "--ending-columns", "a,b,c,d")
    code, answered = predict(swag_run, tmp_path / "renamed.csv", *flags)
    assert code == 0 and answered.out == own.out
    renamed_run = shutil.copytree(swag_run, tmp_path / "run", ignore=shutil.ignore_patterns("checkpoints"))
    config = yaml.safe_load((renamed_run / "config.yaml").read_text())
    config["task_options"].update(context_column="ctx", start_column="lead", ending_columns=["a", "b", "c", "d"])
    (renamed_run / "config.yaml").write_text(yaml.safe_dump(config))  # a run that read files with these columns
    code, answered = predict(renamed_run, tmp_path / "renamed.csv")
    assert code == 0 and answered.out == own.out, answered.err
    with (tmp_path / "five.csv").open("w", newline="") as f:  # a fifth ending, which the run does not read
        csv.writer(f).writerows([rows[0] + ["ending4"], *[r + ["a fifth ending"] for r in rows[1:]]])
    code, answered = predict(swag_run, tmp_path / "five.csv")
    assert code == 0 and answered.out == own.out  # was said nowhere
    assert f"{tmp_path / 'five.csv'}: column(s) ending4 not read: the endings are ending0, ending1, ending2, " \
           "ending3 (--ending-columns names them)" in answered.err


def test_predict_jsonl_and_csv(swag_run, swag_dir, tmp_path, monkeypatch, capsys):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps(r) + "\n" for r in ROWS)))
    assert main(["predict", "--model", str(swag_run), "--input", "-"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(out) == 2 and len(out[0]["probabilities"]) == 4 and len(out[1]["probabilities"]) == 3
    assert out[1]["id"] == "q2" and out[1]["ending"] == ROWS[1]["endings"][out[1]["label"]]
    assert main(["predict", "--model", str(swag_run), "--input", str(swag_dir / "test.csv"), "--output",
                 str(tmp_path / "test.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and all(set(r) == {"id", "label", "ending", "score", "probabilities"} for r in rows)


@pytest.mark.parametrize("line, field", [('{"context": "a", "endings": ["only one"]}', "endings"),
                                         ('{"context": "", "endings": ["a", "b"]}', "context"),
                                         ('{"endings": ["a", "b"]}', "context")])
def test_bad_predict_input_names_line_and_field(swag_run, tmp_path, capsys, line, field):
    path = tmp_path / "in.jsonl"
    path.write_text('{"context": "fine", "endings": ["a", "b"]}\n\n' + line + "\n")  # a blank line between
    assert main(["predict", "--model", str(swag_run), "--input", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}, line 3, field \"{field}\"" in err and "Traceback" not in err


def test_bad_label_in_training_data_exits_2_naming_file_line_and_field(tmp_path, tiny_bert, swag_dir):
    data = tmp_path / "swag"
    data.mkdir()
    (data / "val.csv").write_text((swag_dir / "val.csv").read_text())
    lines = (swag_dir / "train.csv").read_text().splitlines()
    lines[3] = lines[3].rsplit(",", 1)[0] + ",7"
    (data / "train.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "bertkit.cli", "finetune", "swag", "--model", str(tiny_bert),
                           "--data-dir", str(data), "--output-dir", str(out)], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 2 and 'train.csv, line 4, field "label"' in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_hub_copy_is_read_with_the_same_columns(monkeypatch, tmp_path, swag_dir):
    import datasets

    from bertkit.data import sources
    from bertkit.tasks import get_task

    table = datasets.Dataset.from_csv(str(swag_dir / "val.csv"))
    asked = []
    monkeypatch.setattr(sources, "offline", lambda: False)
    monkeypatch.setattr("bertkit.data.choices.load_hub_splits",
                        lambda cfg, splits: asked.append((cfg.hub.dataset, cfg.hub.config, splits)) or [table])
    monkeypatch.delenv("BERTKIT_DATA_DIR", raising=False)
    cfg = load_recipe("swag", {"max_train_samples": 5})
    train, evals, _ = get_task("multiple-choice").load_data(cfg)
    assert asked == [("allenai/swag", "regular", ["train"]), ("allenai/swag", "regular", ["validation"])]
    assert len(train) == 5 and len(evals["validation"]) == 40


def test_serve_refuses_a_question_with_one_ending(swag_run):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serve.app import create_app
    from bertkit.serve.engine import Engine

    with TestClient(create_app(Engine(str(swag_run), precision="fp32"))) as client:
        bad = client.post("/predict", json={"inputs": [{"context": "a", "endings": ["one"]}]})
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "inputs[0].endings"


def test_one_ending_column_may_hold_each_rows_list_of_endings(swag_run, swag_dir, tmp_path, capsys):
    """A JSONL file in predict's own row format ({"context", "endings": [...]}) could not be evaluated or trained
    on: `--ending-columns endings` was refused ("at least two endings")."""
    import csv

    rows = list(csv.DictReader((swag_dir / "val.csv").open(newline="")))
    lines = [{"context": r["sent1"], "start": r["sent2"], "endings": [r[f"ending{k}"] for k in range(4)],
              "label": int(r["label"])} for r in rows]
    val = tmp_path / "val.jsonl"
    val.write_text("".join(json.dumps(x) + "\n" for x in lines))
    flags = ["--context-column", "context", "--start-column", "start", "--ending-columns", "endings"]
    assert main(["evaluate", "--model", str(swag_run), "--file", str(val), *flags]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["examples"] == 40 and result["accuracy"] == json.loads(
        (swag_run / "metrics.json").read_text())["val"]["accuracy"]
    for k, bad, said in ((3, {"endings": ["one"]}, 'field "endings": one ending column holds a list of two or more'),
                         (5, {"endings": ["a", 7, "c", "d"]}, 'field "endings[1]": must be text, got 7'),
                         (2, {"endings": ["a", "b", "c"]}, 'field "endings": 3 endings where the file\'s first row '
                                                           'has 4'),
                         (4, {"label": 3, "endings": ["a", "b", "c", "d"][:3] + ["d"]}, None)):
        broken = [dict(x) for x in lines]
        broken[k - 1].update(bad)
        val.write_text("".join(json.dumps(x) + "\n" for x in broken))
        code = main(["evaluate", "--model", str(swag_run), "--file", str(val), *flags])
        err = capsys.readouterr().err
        if said is None:
            assert code == 0, err
        else:
            assert code == 2 and f"{val}, line {k}, {said}" in err.strip().splitlines()[-1], err


def test_predict_echoes_a_csvs_id(swag_run, swag_dir, tmp_path, capsys):
    """predict's answers to a SWAG CSV carried no id: only their order told which question each answered."""
    def predict(path, *flags):
        code = main(["predict", "--model", str(swag_run), "--input", str(path), *flags])
        out = capsys.readouterr()
        return code, [json.loads(x) for x in out.out.splitlines()], out.err

    code, answers, _ = predict(swag_dir / "test.csv")
    import csv

    rows = list(csv.DictReader((swag_dir / "test.csv").open(newline="")))
    assert code == 0 and [a["id"] for a in answers] == [r["fold-ind"] for r in rows]  # SWAG's index in its fold
    assert list(answers[0])[:2] == ["id", "label"]
    code, by_video, _ = predict(swag_dir / "test.csv", "--id-column", "video-id")
    assert code == 0 and [a["id"] for a in by_video] == [r["video-id"] for r in rows]
    assert [{**a, "id": 0} for a in by_video] == [{**a, "id": 0} for a in answers]
    code, _, err = predict(swag_dir / "test.csv", "--id-column", "qid")
    assert code == 2 and 'line 2, field "qid": missing column (found: video-id, fold-ind' in err, err

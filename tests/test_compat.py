"""Run folders written by bertkit 0.2.0 (tests/data/runs-0.2.0, made by make.py there: tiny runs of its three
adapters, with a flat config.yaml) keep working without the user doing anything: predict answers as 0.2.0 did, and
evaluate, serve, export and the report read them."""

from __future__ import annotations

import json
import shutil

import pytest

from bertkit.cli import main
from bertkit.config_files import load_run_config

from .conftest import REPO, write_sst2

RUNS = REPO / "tests" / "data" / "runs-0.2.0"
EXPECTED = json.loads((RUNS / "expected.json").read_text())
ADDED = {"question"}  # fields an answer line gained since 0.2.0


@pytest.fixture
def run_copy(tmp_path):
    """A copy of one 0.2.0 run folder (commands may write into a run folder; the kept ones stay as they are)."""
    def copy(name):
        return shutil.copytree(RUNS / name, tmp_path / name)
    return copy


def same(got, want, path="") -> None:
    """Equal, floats to 1e-6 (the same arithmetic on the same weights); an answer may carry fields added since
    (QA's answer lines their question), every field 0.2.0 wrote with its value."""
    if isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-6), path
    elif isinstance(want, dict):
        assert want.keys() <= got.keys() and got.keys() - want.keys() <= ADDED, path
        for k in want:
            same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            same(g, w, f"{path}[{i}]")
    else:
        assert got == want, path


def test_the_flat_config_reads_into_this_versions_layout():
    cfg = load_run_config(RUNS / "sst2" / "config.yaml")
    assert (cfg.task, cfg.name, cfg.task_options.label_names) == ("sequence-classification", "sst2",
                                                                  ["negative", "positive"])
    ner = load_run_config(RUNS / "conll2003" / "config.yaml")
    assert (ner.task, ner.task_options.casing, ner.max_length) == ("token-classification", True, 16)
    qa = load_run_config(RUNS / "squad" / "config.yaml")
    assert (qa.task, qa.task_options.max_question_length, qa.task_options.window_overlap) == \
        ("question-answering", 8, 8)


@pytest.mark.usefixtures("cpu_only")  # the answers 0.2.0 gave on a CPU, to 1e-6
@pytest.mark.parametrize("name", ["sst2", "conll2003", "squad"])
def test_predict_answers_as_0_2_0_did(name, tmp_path, capsys):
    case = EXPECTED[name]
    source = tmp_path / f"in{case['suffix']}"
    source.write_text("".join(case["input"]))
    assert main(["predict", "--model", str(RUNS / name), "--input", str(source), "--precision", "fp32"]) == 0
    captured = capsys.readouterr()
    same([json.loads(line) for line in captured.out.splitlines()], case["output"])
    assert captured.err == ""


@pytest.mark.usefixtures("cpu_only")  # the answers 0.2.0 gave on a CPU, to 1e-6
def test_evaluate_serve_export_and_report_read_a_0_2_0_run(run_copy, tmp_path, capsys):
    run = run_copy("sst2")
    data = write_sst2(tmp_path / "data", n_train=8, n_dev=16)
    assert main(["evaluate", "--model", str(run), "--file", str(data / "dev.tsv"), "--precision", "fp32"]) == 0
    assert json.loads((run / "eval_sst2_dev.json").read_text())["examples"] == 16

    from fastapi.testclient import TestClient

    from bertkit.serve.app import create_app
    from bertkit.serve.engine import Engine

    engine = Engine(str(run), precision="fp32")
    with TestClient(create_app(engine)) as client:
        meta = client.get("/metadata").json()
        assert (meta["task"], meta["labels"], meta["pairs"]) == ("sequence-classification", ["negative", "positive"],
                                                                  False)
        served = client.post("/predict", json={"texts": [EXPECTED["sst2"]["input"][0].strip()]}).json()
    same(served["predictions"][:1], EXPECTED["sst2"]["output"][:1])

    out = tmp_path / "onnx"
    assert main(["export", "--model", str(run), "--format", "onnx", "--output", str(out), "--no-features"]) == 0
    assert json.loads((out / "export.json").read_text())["task"] == "sequence-classification"

    from bertkit.report import write_report

    report = write_report(run).read_text()
    assert "# Run report: sst2" in report and "task: sequence-classification" in report

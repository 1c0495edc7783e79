"""A task added from outside bertkit (examples/custom_task.py, the cloze task) through a package's `bertkit.tasks`
entry point, used end to end by the command line: finetune, evaluate, predict, serve, export, the reports; and a
broken plugin that leaves the built-in tasks working."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time

import pytest

from .conftest import FILLER, NEGATIVE, POSITIVE, REPO

CLOZE_RECIPE = """# cloze: fill in the blank (the custom task of examples/custom_task.py)
task: cloze
train_file: train.jsonl
validation_files: [dev.jsonl]
max_length: 32
batch_size: 16
lr: 1.0e-2
warmup_ratio: 0.1
metrics: [accuracy]
task_options:
  top_k: 2
compute:
  precision: fp32
"""


def install_plugin(site, name: str, entry: str) -> None:
    """A package's metadata as pip writes it (a dist-info folder on the path) declaring a bertkit.tasks entry
    point: what `pip install` of a plugin leaves behind, without the network."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[bertkit.tasks]\n{entry}\n")


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    install_plugin(site, "cloze_plugin", "cloze = custom_task:Cloze")
    path = os.pathsep.join([str(site), str(REPO / "examples"), str(REPO)])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def write_cloze(directory, n: int, seed: int):
    """'... the film was [MASK] .' with a sentiment word earlier in the text: the answer is good or bad."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        good = i % 2 == 0
        words = [rng.choice(FILLER) for _ in range(4)] + [rng.choice(POSITIVE if good else NEGATIVE)]
        rows.append({"text": " ".join(words) + " , so it was [MASK] .", "answer": "good" if good else "bad"})
    return "".join(json.dumps(r) + "\n" for r in rows)


def bertkit(args, env, **kw):
    return subprocess.run([sys.executable, "-m", "bertkit", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=REPO, **kw)


@pytest.fixture(scope="module")
def cloze_run(tmp_path_factory, tiny_bert, plugin_env):
    root = tmp_path_factory.mktemp("cloze")
    data = root / "data"
    data.mkdir()
    (data / "train.jsonl").write_text(write_cloze(data, 96, seed=0))
    (data / "dev.jsonl").write_text(write_cloze(data, 24, seed=1))
    (root / "cloze.yaml").write_text(CLOZE_RECIPE)
    out = root / "run"
    proc = bertkit(["finetune", str(root / "cloze.yaml"), "--model", str(tiny_bert), "--data-dir", str(data),
                    "--max-steps", "24", "--eval-every", "12", "--output-dir", str(out)], plugin_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, data, out


def test_the_plugin_task_trains_and_writes_a_complete_run_folder(cloze_run):
    _, _, out = cloze_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "cloze" and metrics["train"]["steps"] == 24 and metrics["best_step"] in (12, 24)
    assert set(metrics["dev"]) == {"accuracy"}
    predictions = [json.loads(line) for line in (out / "predictions_dev.jsonl").read_text().splitlines()]
    assert len(predictions) == 24 and all(len(p["candidates"]) == 2 for p in predictions)
    card = (out / "README.md").read_text()
    assert "AutoModelForMaskedLM" in card and "pipeline_tag: fill-mask" in card and "(cloze task)" in card
    assert "## Final metrics" in (out / "report.md").read_text()
    assert "task: cloze" in (out / "config.yaml").read_text() and "top_k: 2" in (out / "config.yaml").read_text()


def test_finetune_help_shows_the_plugin_tasks_options(cloze_run, plugin_env):
    root, _, _ = cloze_run
    proc = bertkit(["finetune", str(root / "cloze.yaml"), "--help"], plugin_env)
    assert proc.returncode == 0 and "task options (cloze" in proc.stdout and "--top-k X" in proc.stdout
    assert "--text-column" not in proc.stdout


def test_evaluate_predict_serve_and_export(cloze_run, plugin_env, tmp_path):
    _, data, out = cloze_run
    proc = bertkit(["evaluate", "--model", str(out), "--data-dir", str(data)], plugin_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "eval_cloze_dev.json").read_text())
    assert result["accuracy"] == json.loads((out / "metrics.json").read_text())["dev"]["accuracy"]

    rows = [{"text": "the film was superb , so it was [MASK] ."}, {"text": "a dull plot , it was [MASK] .", "id": 7}]
    lines = "".join(json.dumps(r) + "\n" for r in rows)
    proc = bertkit(["predict", "--model", str(out), "--input", "-"], plugin_env, input=lines)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    predicted = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(predicted) == 2 and predicted[1]["id"] == 7 and predicted[0]["answer"] in predicted[0]["candidates"]

    served = serve_once(out, plugin_env, {"inputs": rows})
    assert [s["answer"] for s in served] == [p["answer"] for p in predicted] and served[1]["id"] == 7

    onnx = tmp_path / "onnx"
    proc = bertkit(["export", "--model", str(out), "--format", "onnx", "--output", str(onnx), "--no-features"],
                   plugin_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((onnx / "export.json").read_text())
    assert info["task"] == "cloze" and info["pipeline_tag"] == "fill-mask"
    assert info["graphs"]["model.onnx"]["max_abs_diff_fp32"] < 1e-4
    proc = bertkit(["predict", "--model", str(onnx), "--backend", "onnx", "--input", "-"], plugin_env, input=lines)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [json.loads(line)["answer"] for line in proc.stdout.splitlines()] == [p["answer"] for p in predicted]


def serve_once(run, env, body) -> list[dict]:
    """Start `bertkit serve` on a free port, POST one /predict request, stop the server."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "bertkit", "serve", "--model", str(run), "--port", str(port),
                             "--precision", "fp32"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                time.sleep(0.3)
        meta = httpx.get(f"http://127.0.0.1:{port}/metadata", timeout=10).json()
        assert meta["task"] == "cloze" and meta["inputs"] == {"text": "str"}
        r = httpx.post(f"http://127.0.0.1:{port}/predict", json=body, timeout=60)
        assert r.status_code == 200, r.text
        bad = httpx.post(f"http://127.0.0.1:{port}/predict", json={"inputs": [{"text": " "}]}, timeout=60)
        assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "inputs[0].text"
        return r.json()["predictions"]
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_broken_plugin_names_itself_and_the_built_in_tasks_still_work(tmp_path):
    site = tmp_path / "site"
    install_plugin(site, "broken_plugin", "broken = no_such_module_here:Task")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    code = ("from bertkit.tasks import get_task, task_names\n"
            "print(task_names())\n"
            "get_task('broken')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "multiple-choice" in proc.stdout and "sequence-classification" in proc.stdout
    assert "task 'broken': the plugin no_such_module_here:Task (broken_plugin) failed to load: " \
           "ModuleNotFoundError" in proc.stderr


def test_register_task_from_a_notebook_and_its_errors(monkeypatch):
    from bertkit.errors import BertkitError
    from bertkit.tasks import Task, get_task, register_task, registry

    registry.task_names()
    monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))  # the tests after this one see no shout-test

    class Shout(Task):
        name = "shout-test"

    assert register_task(Shout) is Shout and get_task("shout-test") is Shout

    class Other(Task):
        name = "shout-test"

    with pytest.raises(BertkitError, match="task 'shout-test' is already registered"):
        register_task(Other)
    assert register_task(Other, replace=True) is Other and get_task("shout-test") is Other
    with pytest.raises(BertkitError, match="unknown task 'shout-tst' \\(did you mean 'shout-test'\\?\\)"):
        get_task("shout-tst")

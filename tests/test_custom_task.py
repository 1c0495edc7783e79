"""A task added from outside bertkit (examples/custom_task.py, the cloze task) through a package's `bertkit.tasks`
entry point: `finetune --help`, `evaluate` and `predict` find it in their own processes and work on a run of it (the
session's tiny cloze run, trained in the test process); a broken plugin leaves the built-in tasks working; tasks
registered from a notebook. The plugin in training, plain transformers, serve and ONNX export: test_contract.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from .conftest import CPU_ENV, REPO, python_path, tiny_run, tiny_run_data


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
    # children on the CPU on any machine: `evaluate` must give the CPU-trained run's own score exactly
    return {**os.environ, **CPU_ENV, "PYTHONPATH": python_path(site, REPO / "examples", REPO), "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1"}


def bertkit(args, env, **kw):
    return subprocess.run([sys.executable, "-m", "bertkit", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=REPO, **kw)


@pytest.fixture(scope="module")
def cloze_run(tmp_path_factory, tiny_bert):
    """(data folder with the recipe cloze.yaml, run folder): the session's tiny cloze run, `bertkit finetune
    cloze.yaml --max-steps 24 --eval-every 12` with the class registered in the test process (conftest TINY_RUNS)."""
    return tiny_run_data(tmp_path_factory, "cloze"), tiny_run(tmp_path_factory, tiny_bert, "cloze")


def test_the_plugin_task_trains_and_writes_a_complete_run_folder(cloze_run):
    _, out = cloze_run
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
    data, _ = cloze_run
    proc = bertkit(["finetune", str(data / "cloze.yaml"), "--help"], plugin_env)
    assert proc.returncode == 0 and "task options (cloze" in proc.stdout and "--top-k X" in proc.stdout
    assert "--text-column" not in proc.stdout


def test_evaluate_and_predict_find_the_plugin(cloze_run, plugin_env):
    data, out = cloze_run
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


def test_a_broken_plugin_names_itself_and_the_built_in_tasks_still_work(tmp_path):
    site = tmp_path / "site"
    install_plugin(site, "broken_plugin", "broken = no_such_module_here:Task")
    env = {**os.environ, "PYTHONPATH": python_path(site, REPO)}
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


def test_a_built_in_name_is_taken_before_the_built_ins_load(monkeypatch):
    """A notebook's task under a built-in's name replaced it silently when registered before any lookup (after one
    it was refused): refused either way now, unless replace=True."""
    from bertkit.errors import BertkitError
    from bertkit.tasks import Task, get_task, register_task, registry

    monkeypatch.setattr(registry, "_TASKS", {})
    monkeypatch.setattr(registry, "_loaded", False)  # as in a fresh process

    class Mine(Task):
        name = "sequence-classification"

    with pytest.raises(BertkitError, match="task 'sequence-classification' is already registered "
                                           "\\(bertkit.tasks.classification.SequenceClassification\\); pass replace"):
        register_task(Mine)
    assert register_task(Mine, replace=True) is Mine and get_task("sequence-classification") is Mine


def test_a_notebooks_row_without_its_blank_is_one_line_naming_it(tiny_bert):
    """The example task's own check: a file's rows are checked as read, a notebook's `predict_rows` failed inside
    `list.index` ("103 is not in list")."""
    from bertkit.errors import BertkitError

    from .conftest import cloze_registered

    with cloze_registered() as Cloze:
        task = Cloze.from_pretrained(str(tiny_bert))
        with pytest.raises(BertkitError, match=r"^row 1: no \[MASK\] in its first 128 word pieces$"):
            task.predict_rows([{"text": "paris is the capital of [MASK] ."}, {"text": "no blank here"}])


def test_a_plugin_does_not_take_a_taken_name(tmp_path):
    """A plugin's class under a built-in's name (a subclass that inherits it) replaced the built-in without a word,
    and its entry point's own name was an unknown task."""
    site = tmp_path / "site"
    (site / "hijack.py").parent.mkdir(parents=True)
    (site / "hijack.py").write_text(
        "from bertkit.tasks import SequenceClassification, Task\n"
        "class MyClassifier(SequenceClassification):\n    pass\n"
        "class Choice(Task):\n    name = 'multiple-choice'\n"
        "class Pairs(Task):\n    name = 'pair-sim'\n")
    install_plugin(site, "hijack", "my-clf = hijack:MyClassifier\nchoice = hijack:Choice\npairs = hijack:Pairs")
    env = {**os.environ, "PYTHONPATH": python_path(site, REPO)}
    code = ("from bertkit.tasks import get_task\n"
            "print(get_task('multiple-choice').__module__, get_task('sequence-classification').__module__,"
            " get_task('pair-sim').__module__)\n"
            "for name in ('my-clf', 'choice', 'pairs'):\n"
            "    try:\n        get_task(name)\n    except Exception as e:\n        print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    out = proc.stdout.splitlines()
    assert out[0] == "bertkit.tasks.multiple_choice bertkit.tasks.classification hijack", proc.stderr
    assert out[1] == "task 'my-clf': the plugin hijack:MyClassifier (hijack) was not loaded: its class's name " \
                     "'sequence-classification' is taken by bertkit.tasks.classification.SequenceClassification " \
                     "(inherited: give the class its own `name`)"
    assert out[2].startswith("task 'choice': the plugin hijack:Choice (hijack) was not loaded: its class's name "
                             "'multiple-choice' is taken by bertkit.tasks.multiple_choice.MultipleChoice")
    assert out[3] == "task 'pairs': the plugin hijack:Pairs (hijack) registers its task as 'pair-sim', not as its " \
                     "entry point's name 'pairs'"
    assert proc.stderr.count("was not loaded") == 2  # said once each, on every command that loads the tasks


def test_a_task_option_named_as_a_run_flag_is_one_line(monkeypatch, tmp_path, capsys):
    """A task's option named `seed` crashed `finetune` with argparse's "conflicting option string" traceback."""
    from dataclasses import dataclass

    from bertkit.cli import main
    from bertkit.tasks import SequenceClassification, register_task, registry
    from bertkit.tasks.classification import ClassificationOptions
    from bertkit.typed import option

    registry.task_names()
    monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))

    @dataclass(frozen=True)
    class SeededOptions(ClassificationOptions):
        seed: int = option(0, "a seed of the task's own")

    class Seeded(SequenceClassification):
        name = "seeded-test"
        Options = SeededOptions

    register_task(Seeded)
    (tmp_path / "seeded.yaml").write_text("task: seeded-test\n")
    said = "SeededOptions's field 'seed' makes the flag --seed, which the command has already: give the field " \
           "another name"
    out = tmp_path / "out"
    assert main(["finetune", str(tmp_path / "seeded.yaml"), "--model", "x", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(said) and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    with pytest.raises(SystemExit):  # --help says it where the task's options would be
        main(["finetune", str(tmp_path / "seeded.yaml"), "--help"])
    assert "task options:\n  not shown: " in capsys.readouterr().out


def test_finetune_help_says_why_a_recipes_task_options_are_not_shown(tmp_path, capsys):
    """`finetune RECIPE --help` of a recipe whose task is not known (its plugin not installed) left the task's
    options out without a word."""
    from bertkit.cli import main

    (tmp_path / "pairs.yaml").write_text("task: pair-sim-test\n")
    with pytest.raises(SystemExit) as stop:
        main(["finetune", str(tmp_path / "pairs.yaml"), "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and "task options:\n  not shown: " in out and "unknown task 'pair-sim-test'" in out


def test_a_task_on_a_pooled_head_uses_the_pooler_unless_it_says_otherwise():
    """A task of one's own over AutoModelForSequenceClassification was told "the head does not use the pooler" by
    --reinit-pooler, and LoRA left the pre-trained pooler frozen: `uses_pooler` (False) was not in the contract."""
    from transformers import (
        AutoModelForMultipleChoice,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    from bertkit.config import run_config
    from bertkit.metrics import BUILTIN
    from bertkit.tasks import Task, registry

    class Pairs(Task):
        name, auto_model_class = "pairs-pooled-test", AutoModelForSequenceClassification
        metric_builtins, default_metrics = {"accuracy": BUILTIN["accuracy"]}, ("accuracy",)

    class Choices(Task):
        auto_model_class = AutoModelForMultipleChoice

    class Tags(Task):
        auto_model_class = AutoModelForTokenClassification

    class Own(Pairs):  # a head of its own over the token vectors
        uses_pooler = False

    class Child(Own):
        pass

    assert (Pairs.uses_pooler, Choices.uses_pooler, Tags.uses_pooler, Own.uses_pooler, Child.uses_pooler) == \
        (True, True, False, False, False)
    registry._TASKS["pairs-pooled-test"] = Pairs
    try:
        assert run_config(task="pairs-pooled-test", reinit_pooler=True).reinit_pooler
    finally:
        del registry._TASKS["pairs-pooled-test"]


def test_a_tasks_broken_contract_is_one_line_naming_its_method(tiny_bert, tmp_path):
    """A task of one's own whose `score` gave a prediction short wrote a predictions file short of a row (exit 0)
    and failed in `predict` later (zip); an `encode` without `length`, no `auto_model_class`, or a loaded model
    given to from_pretrained, were tracebacks from inside bertkit."""
    from transformers import AutoModelForSequenceClassification

    from bertkit import SequenceClassification, Trainer
    from bertkit.errors import BertkitError
    from bertkit.tasks import Task

    from .conftest import cloze_registered, small_config, write_sst2

    data = write_sst2(tmp_path / "sst2", n_train=32, n_dev=8)
    cfg = small_config(data, tmp_path / "run", max_steps=2)

    class Short(SequenceClassification):
        def score(self, outputs, examples, features, metric_hooks):
            metrics, predictions = super().score(outputs, examples, features, metric_hooks)
            return metrics, predictions[:-1]

    class NoLength(SequenceClassification):
        def encode(self, examples):
            return super().encode(examples).remove_columns("length")

    train, evals, names = SequenceClassification.load_data(cfg)
    for cls, said in ((Short, "Short.score gave 7 predictions for 8 examples (one per example, in their order"),
                      (NoLength, "NoLength.encode gave no 'length' column")):
        task = cls.from_pretrained(str(tiny_bert), label_names=names)
        with pytest.raises(BertkitError, match=re.escape(said)):
            Trainer(task, small_config(data, tmp_path / cls.__name__, max_steps=2)).fit(train, evals)
    assert not (tmp_path / "Short" / "predictions_dev.jsonl").exists()
    with cloze_registered() as Cloze:  # a task on the default predict_rows (encode, then score)
        class ShortCloze(Cloze):
            def score(self, outputs, examples, features, metric_hooks):
                metrics, predictions = super().score(outputs, examples, features, metric_hooks)
                return metrics, predictions[:-1]

        cloze = ShortCloze.from_pretrained(str(tiny_bert))
        with pytest.raises(BertkitError, match=re.escape("ShortCloze.score gave 1 predictions for 2 examples")):
            cloze.predict_rows([{"text": "a [MASK] film"}, {"text": "a dull [MASK]"}])

    class Headless(Task):
        name = "headless-test"

    with pytest.raises(BertkitError, match="Headless has no auto_model_class"):
        Headless.from_pretrained(str(tiny_bert))
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    with pytest.raises(BertkitError, match="from_pretrained takes a checkpoint's name or folder, got a "
                                           "BertForSequenceClassification"):
        SequenceClassification.from_pretrained(model)

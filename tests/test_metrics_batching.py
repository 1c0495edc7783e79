import numpy as np
from sklearn.metrics import f1_score, matthews_corrcoef

from bertkit.batching import sorted_batches, train_batches
from bertkit.metrics import compute_metrics, resolve_metrics
from bertkit.metrics.classification import F1, Accuracy


def test_builtin_metrics_match_sklearn():
    rng = np.random.default_rng(0)
    p, r = rng.integers(0, 2, 200).tolist(), rng.integers(0, 2, 200).tolist()
    out = compute_metrics(resolve_metrics(["accuracy", "f1", "mcc"], num_labels=2), p, r)
    assert out["accuracy"] == np.mean(np.array(p) == np.array(r))
    assert out["f1"] == f1_score(r, p) and out["mcc"] == matthews_corrcoef(r, p)
    p3, r3 = rng.integers(0, 3, 90).tolist(), rng.integers(0, 3, 90).tolist()
    assert F1().compute(predictions=p3, references=r3)["f1"] == f1_score(r3, p3, average="macro")


def test_hooks_accept_evaluate_modules_and_callables():
    hooks = resolve_metrics([Accuracy(), lambda p, r: {"count": len(p)}])
    assert compute_metrics(hooks, [1, 1, 0, 0], [1, 0, 0, 0]) == {"accuracy": 0.75, "count": 4}


def test_each_table_of_built_in_metrics_makes_what_its_module_defines():
    """The tables name their metrics without importing them (evaluate is imported by the first one made): each
    name is its module's, and makes that module's metric."""
    import importlib

    import bertkit.metrics as m

    for table, module in [(m.BUILTIN, "classification"), (m.SQUAD_BUILTIN, "squad"), (m.SQUAD_V2_BUILTIN, "squad_v2"),
                          (m.NER_BUILTIN, "ner"), (m.REGRESSION_BUILTIN, "regression"),
                          (m.MULTI_LABEL_BUILTIN, "multi_label")]:
        metrics = importlib.import_module(f"bertkit.metrics.{module}").METRICS
        assert list(table) == list(metrics), module
        assert all(type(make()) is metrics[name] for name, make in table.items()), module
    assert m.Accuracy is Accuracy and m.SquadV2.__module__ == "bertkit.metrics.squad_v2"


def test_built_in_metrics_write_nothing_to_evaluates_cache(tmp_path, monkeypatch):
    """Kept in memory: no cache files and no folder under evaluate's metrics cache (`~/.cache/huggingface/metrics`),
    so a home that cannot be written stops no evaluation (it stopped every run with "Permission denied: /home/...");
    here a file where the folder would be refuses it, as root too."""
    import importlib

    import evaluate

    from bertkit.metrics.squad import Squad

    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(evaluate.config, "HF_METRICS_CACHE", tmp_path / "a-file" / "metrics")
    for module in ("classification", "squad", "squad_v2", "ner", "regression", "multi_label"):
        for cls in importlib.import_module(f"bertkit.metrics.{module}").METRICS.values():
            assert cls().keep_in_memory, cls
    monkeypatch.setattr(evaluate.config, "HF_METRICS_CACHE", tmp_path / "metrics")
    assert Accuracy().compute(predictions=[1, 0], references=[1, 1]) == {"accuracy": 0.5}
    answers = {"text": ["Denver"], "answer_start": [0]}
    assert Squad().compute(predictions=[{"id": "q", "prediction_text": "Denver"}],
                           references=[{"id": "q", "answers": answers}]) == {"exact_match": 100.0, "f1": 100.0}
    assert not (tmp_path / "metrics").exists()


def test_train_batches_are_deterministic_complete_and_grouped():
    lengths = np.random.default_rng(1).integers(5, 128, 1000).tolist()
    a = train_batches(lengths, 32, seed=42, epoch=0)
    assert a == train_batches(lengths, 32, seed=42, epoch=0)
    assert a != train_batches(lengths, 32, seed=42, epoch=1)
    assert sorted(i for b in a for i in b) == list(range(1000))
    plain = train_batches(lengths, 32, seed=42, epoch=0, group_by_length=False)

    def padded(batches):
        return sum(max(lengths[i] for i in b) * len(b) for b in batches)

    assert padded(a) < 0.7 * padded(plain)


def test_sorted_batches_cover_everything_longest_first():
    lengths = [3, 9, 1, 9, 4]
    batches = sorted_batches(lengths, 2)
    assert [i for b in batches for i in b] == [1, 3, 4, 0, 2]


def test_every_built_in_metric_name_is_known_to_the_config_check(tmp_path):
    """Each table of built-in metrics is what the config check accepts for the task (and head) that computes it."""
    from bertkit.config import run_config
    from bertkit.metrics import (
        BUILTIN,
        MULTI_LABEL_BUILTIN,
        NER_BUILTIN,
        REGRESSION_BUILTIN,
        SQUAD_BUILTIN,
        SQUAD_V2_BUILTIN,
    )
    from bertkit.tasks import get_task

    owners = [("sequence-classification", {}, BUILTIN),
              ("sequence-classification", {"problem_type": "regression"}, REGRESSION_BUILTIN),
              ("sequence-classification", {"problem_type": "multi_label_classification"}, MULTI_LABEL_BUILTIN),
              ("token-classification", {}, NER_BUILTIN), ("question-answering", {}, SQUAD_BUILTIN),
              ("question-answering", {"allow_no_answer": True}, SQUAD_V2_BUILTIN),
              ("multiple-choice", {}, {"accuracy": BUILTIN["accuracy"]})]
    for task, options, table in owners:
        cfg = run_config(task=task, **options)
        assert get_task(task).metrics_for(cfg.task_options)[0] == table, (task, options)
        for name in table:
            assert run_config(task=task, metrics=[name], **options).metrics == [name]
    script = tmp_path / "my_metric.py"  # a local metric script: accepted by its path, never looked up online
    script.write_text("")
    assert run_config(metrics=["accuracy", str(script)]).metrics == ["accuracy", str(script)]


def test_an_unknown_metric_name_in_a_recipe_is_refused_without_touching_the_network(tmp_path, monkeypatch, capsys):
    import socket

    import yaml

    from bertkit.cli import main
    from bertkit.config_files import RECIPES_DIR

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    attempts = []

    def guard(*args, **kwargs):
        attempts.append(args)
        raise OSError("network access in a test")

    monkeypatch.setattr(socket.socket, "connect", guard)
    monkeypatch.setattr(socket, "create_connection", guard)
    recipe = yaml.safe_load((RECIPES_DIR / "sst2.yaml").read_text())
    recipe.update(metrics=["accuracy", "bleu"], main_metric="accuracy")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert main(["finetune", str(path), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: metric 'bleu' is not one of the sequence-classification task's (accuracy, f1, mcc) nor a local " \
           "metric script" in err
    assert attempts == [] and not (tmp_path / "run").exists()

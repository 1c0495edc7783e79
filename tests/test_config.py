import pytest

from bertkit.cli import main
from bertkit.config import FinetuneConfig, load_recipe
from bertkit.errors import BertkitError


def test_sst2_recipe_has_bert_paper_defaults():
    cfg = load_recipe("sst2")
    assert (cfg.model, cfg.max_length, cfg.batch_size, cfg.lr, cfg.epochs) == ("bert-base-uncased", 128, 32, 2e-5, 3)
    assert (cfg.warmup_ratio, cfg.weight_decay, cfg.seed, cfg.eval_every) == (0.1, 0.01, 42, "epoch")
    assert cfg.label_names == ["negative", "positive"] and cfg.main_metric == "accuracy"


def test_overrides_win_over_recipe():
    cfg = load_recipe("sst2", {"lr": 3e-5, "max_steps": 10, "eval_every": "5", "validation_files": "a.tsv,b.tsv"})
    assert cfg.lr == 3e-5 and cfg.max_steps == 10 and cfg.eval_every == "5"
    assert cfg.validation_files == ["a.tsv", "b.tsv"]


@pytest.mark.parametrize("yaml_text, message", [
    ("task: sst2\nlearning_rate: 1e-5\n", "unknown key 'learning_rate'"),
    ("batch_size: thirty-two\n", "'batch_size' must be an integer"),
    ("group_by_length: 'yes'\n", "'group_by_length' must be true or false"),
    ("precision: fp8\n", "'precision' must be one of"),
    ("- a\n- b\n", "must be a mapping"),
    ("eval_every: sometimes\n", "'eval_every' must be 'epoch'"),
    ("metrics: [accuracy]\nmain_metric: f1\n", "main_metric 'f1' is not in metrics"),
])
def test_recipe_is_loaded_strictly(tmp_path, yaml_text, message):
    path = tmp_path / "r.yaml"
    path.write_text(yaml_text)
    with pytest.raises(BertkitError, match=message) as e:
        load_recipe(str(path))
    assert str(path) in str(e.value)


def test_unknown_key_suggests_the_nearest():
    from bertkit.config import apply

    with pytest.raises(BertkitError, match="did you mean 'max_steps'"):
        apply(FinetuneConfig(), {"max_step": 3}, "test")


def test_mistyped_recipe_name_suggests_the_nearest(capsys):
    assert main(["finetune", "sst3"]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe 'sst3'" in err and "did you mean 'sst2'" in err and "Traceback" not in err


def test_model_overrides_apply_to_their_model_only_and_flags_still_win(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("task: sst2\nlr: 2.0e-5\nmodel_overrides:\n  minilm-l6: {lr: 1.0e-4, epochs: 2}\n")
    assert load_recipe(str(path)).lr == 2e-5
    tuned = load_recipe(str(path), {"model": "minilm-l6"})
    assert (tuned.lr, tuned.epochs) == (1e-4, 2)
    assert load_recipe(str(path), {"model": "minilm-l6", "lr": 3e-5}).lr == 3e-5
    path.write_text("task: sst2\nmodel_overrides:\n  minilm-l6: {learning_rate: 1.0e-4}\n")
    with pytest.raises(BertkitError, match="model_overrides.minilm-l6: unknown key 'learning_rate'"):
        load_recipe(str(path))

import dataclasses

import pytest

from bertkit.cli import build_parser, main
from bertkit.config import RunConfig, run_config
from bertkit.config_files import FinetuneConfig, load_recipe
from bertkit.errors import BertkitError


def test_sst2_recipe_has_bert_paper_defaults():
    cfg = load_recipe("sst2")
    assert (cfg.model, cfg.max_length, cfg.batch_size, cfg.lr, cfg.epochs) == ("bert-base-uncased", 128, 32, 2e-5, 3)
    assert (cfg.warmup_ratio, cfg.weight_decay, cfg.seed, cfg.eval_every) == (0.1, 0.01, 42, "epoch")
    assert cfg.task_options.label_names == ["negative", "positive"] and cfg.main_metric == "accuracy"
    assert (cfg.task, cfg.name) == ("sequence-classification", "sst2")
    assert (cfg.hub.dataset, cfg.hub.config, cfg.hub.splits) == ("nyu-mll/glue", "sst2", ["train", "validation"])
    assert cfg.compute.precision == "auto" and cfg.task_options.text_column == "sentence"


def test_overrides_win_over_recipe():
    cfg = load_recipe("sst2", {"lr": 3e-5, "max_steps": 10, "eval_every": "5", "validation_files": "a.tsv,b.tsv"})
    assert cfg.lr == 3e-5 and cfg.max_steps == 10 and cfg.eval_every == "5"
    assert cfg.validation_files == ["a.tsv", "b.tsv"]


def test_a_bad_override_is_named_as_where_it_came_from(capsys):
    """A notebook's `load_recipe(name, overrides)` said "command line:", which it had none of."""
    with pytest.raises(BertkitError, match=r"^overrides: 'lr' and 'weight_decay' must be ≥ 0$"):
        load_recipe("sst2", {"lr": -1})
    assert main(["finetune", "sst2", "--lr", "-1"]) == 2
    assert capsys.readouterr().err == "bertkit finetune: error: command line: 'lr' and 'weight_decay' must be ≥ 0\n"


def test_overrides_are_flat_run_fields_group_fields_and_task_options():
    cfg = load_recipe("sst2", {"precision": "fp32", "group_by_length": False, "hub_config": "other",
                               "text_column": "review", "doc_pooling": "mean", "label_names": "neg,pos"})
    assert (cfg.compute.precision, cfg.compute.group_by_length) == ("fp32", False)
    assert (cfg.hub.dataset, cfg.hub.config) == ("nyu-mll/glue", "other")  # the recipe's dataset, the flag's config
    assert (cfg.task_options.text_column, cfg.task_options.doc_pooling) == ("review", "mean")
    assert cfg.task_options.label_names == ["neg", "pos"] and cfg.task_options.label_column == "label"


def test_metrics_asked_for_without_the_recipes_main_metric_take_their_first():
    """--metrics without --main-metric: the recipe's main metric where it is among them, else the first of them (as
    a run without a recipe chooses); --main-metric given is kept and checked."""
    assert load_recipe("sst2", {"metrics": "f1, accuracy"}).main_metric == "accuracy"  # the recipe's, listed
    assert load_recipe("sst2", {"metrics": ["f1"]}).main_metric == "f1"
    with pytest.raises(BertkitError, match="main_metric 'accuracy' is not in metrics"):
        load_recipe("sst2", {"metrics": "f1", "main_metric": "accuracy"})


@pytest.mark.parametrize("yaml_text, message", [
    ("name: sst2\nlearning_rate: 1e-5\n", "unknown key 'learning_rate'"),
    ("batch_size: thirty-two\n", "'batch_size' must be an integer"),
    ("compute:\n  group_by_length: 'yes'\n", "'group_by_length' must be true or false"),
    ("compute:\n  precision: fp8\n", "'precision' must be one of"),
    ("- a\n- b\n", "must be a mapping"),
    ("eval_every: sometimes\n", "'eval_every' must be 'epoch'"),
    ("metrics: [accuracy]\nmain_metric: f1\n", "main_metric 'f1' is not in metrics"),
    ("task: sst2\n", "unknown task 'sst2'"),  # the task is the task type now; the data set is `name`
    ("task_options:\n  window_overlap: 64\n", "unknown key 'window_overlap'"),  # a QA option, not classification's
    ("compute: fp32\n", "'compute' must be a mapping"),
    ("hub:\n  dataset: nyu-mll/glue\n  revison: main\n", r"unknown key 'revison' \(did you mean 'revision'\?\)"),
    # docs/tasks.md: --seeds, --resume and --allow-pickle are command-line choices, which a recipe cannot hold (it
    # said "unknown key 'seeds' (did you mean 'seed'?)", and 'seed: [13, 42]' failed next)
    ("seeds: [13, 42]\n", "'seeds' is not a setting but a choice of the command line: give --seeds"),
    ("resume: true\n", "'resume' is not a setting but a choice of the command line: give --resume"),
    ("allow_pickle: true\n", "'allow_pickle' is not a setting but a choice of the command line: give --allow-pickle"),
])
def test_recipe_is_loaded_strictly(tmp_path, yaml_text, message):
    path = tmp_path / "r.yaml"
    path.write_text(yaml_text)
    with pytest.raises(BertkitError, match=message) as e:
        load_recipe(str(path))
    assert str(path) in str(e.value)


RECIPE = """task: question-answering
name: colours
model: bert-base-uncased
train_file: train.json
validation_files: [validation.json]
hub:
  dataset: rajpurkar/squad
  splits: [train, validation]
compute:
  precision: fp32
  group_by_length: false
task_options:
  window_overlap: 64
  max_answer_length: 12
lr: 3.0e-5
metrics: [exact_match, f1]
main_metric: f1
"""


def test_a_recipe_nests_hub_compute_and_task_options(tmp_path):
    path = tmp_path / "colours.yaml"
    path.write_text(RECIPE)
    cfg = load_recipe(str(path))
    assert (cfg.task, cfg.name, cfg.lr, cfg.metrics) == ("question-answering", "colours", 3e-5, ["exact_match", "f1"])
    assert (cfg.hub.dataset, cfg.hub.config, cfg.hub.splits) == ("rajpurkar/squad", None, ["train", "validation"])
    assert (cfg.compute.precision, cfg.compute.group_by_length, cfg.compute.compile) == ("fp32", False, False)
    options = cfg.task_options
    assert (options.window_overlap, options.max_answer_length, options.max_question_length) == (64, 12, 64)
    assert type(options).__name__ == "QuestionAnsweringOptions"
    assert load_recipe(str(path), {"window_overlap": 32, "precision": "bf16"}).task_options.window_overlap == 32


@pytest.mark.parametrize("yaml_text, message", [
    ("precision: fp32\n", "'precision' belongs under compute: (a mapping)"),
    ("name: sst2\ngroup_by_length: false\n", "'group_by_length' belongs under compute: (a mapping)"),
    ("text_column: review\n", "'text_column' is an option of the sequence-classification task: put it under "
                              "task_options:"),
    ("task: question-answering\nwindow_overlap: 64\n", "'window_overlap' is an option of the question-answering "
                                                       "task: put it under task_options:"),
    ("task: token-classification\nner_context: 64\n", "'ner_context' is an option of the token-classification "
                                                      "task: put it under task_options:"),
])
def test_a_flat_group_key_or_task_option_in_a_recipe_names_where_it_belongs(tmp_path, yaml_text, message):
    path = tmp_path / "r.yaml"
    path.write_text(yaml_text)
    with pytest.raises(BertkitError) as e:
        load_recipe(str(path))
    assert str(e.value) == f"{path}: {message}"


def test_unknown_key_suggests_the_nearest():
    with pytest.raises(BertkitError, match="did you mean 'max_steps'"):
        run_config(max_step=3)
    with pytest.raises(BertkitError, match="did you mean 'max_steps'"):
        run_config().replace(max_step=3)


def test_mistyped_recipe_name_suggests_the_nearest(capsys):
    assert main(["finetune", "sst3"]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe 'sst3'" in err and "did you mean 'sst2'" in err and "Traceback" not in err


def test_model_overrides_apply_to_their_model_only_and_flags_still_win(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: sst2\nlr: 2.0e-5\nmodel_overrides:\n  minilm-l6: {lr: 1.0e-4, epochs: 2}\n")
    assert load_recipe(str(path)).lr == 2e-5
    tuned = load_recipe(str(path), {"model": "minilm-l6"})
    assert (tuned.lr, tuned.epochs) == (1e-4, 2)
    assert load_recipe(str(path), {"model": "minilm-l6", "lr": 3e-5}).lr == 3e-5
    path.write_text("name: sst2\nmodel_overrides:\n  minilm-l6: {learning_rate: 1.0e-4}\n")
    with pytest.raises(BertkitError, match="model_overrides.minilm-l6: unknown key 'learning_rate'"):
        load_recipe(str(path))


def test_model_overrides_take_flat_group_fields_and_task_options(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: sst2\nmodel_overrides:\n"
                    "  minilm-l6: {precision: fp32, compile: true, text_column: review, doc_pooling: max}\n")
    plain, tuned = load_recipe(str(path)), load_recipe(str(path), {"model": "minilm-l6"})
    assert (plain.compute.precision, plain.task_options.doc_pooling) == ("auto", "truncate")
    assert (tuned.compute.precision, tuned.compute.compile) == ("fp32", True)
    assert (tuned.task_options.text_column, tuned.task_options.doc_pooling) == ("review", "max")
    assert load_recipe(str(path), {"model": "minilm-l6", "doc_pooling": "mean"}).task_options.doc_pooling == "mean"
    path.write_text("name: sst2\nmodel_overrides:\n  minilm-l6: {window_overlap: 8}\n")
    with pytest.raises(BertkitError, match="model_overrides.minilm-l6: unknown key 'window_overlap'"):
        load_recipe(str(path))  # a QA option: not one of this task's (every entry is checked, not only the one used)


def finetune_overrides(argv: list[str]) -> dict:
    """The flat overrides a `bertkit finetune` command line gives (nothing is run)."""
    from bertkit.commands.finetune import overrides_from

    return overrides_from(build_parser(argv).parse_args(argv))


def test_task_options_are_flat_flags_on_the_command_line():
    argv = ["finetune", "sst2", "--text-column", "review", "--doc-pooling", "mean", "--precision", "fp32",
            "--hub-config", "other", "--lr", "1e-3"]
    overrides = finetune_overrides(argv)
    assert overrides == {"text_column": "review", "doc_pooling": "mean", "precision": "fp32", "hub_config": "other",
                         "lr": 1e-3}
    cfg = load_recipe("sst2", overrides)
    assert (cfg.task_options.text_column, cfg.task_options.doc_pooling, cfg.compute.precision) == \
        ("review", "mean", "fp32")
    assert (cfg.hub.config, cfg.lr) == ("other", 1e-3)
    qa = load_recipe("squad", finetune_overrides(["finetune", "squad", "--window-overlap", "32", "--n-best", "5"]))
    assert (qa.task_options.window_overlap, qa.task_options.n_best) == (32, 5)


def test_the_old_ner_option_names_are_accepted_everywhere(tmp_path):
    expected = (8, True, 4)

    def ner(cfg):
        return cfg.task_options.context, cfg.task_options.casing, cfg.task_options.window_overlap

    old = {"ner_context": 8, "ner_casing": True, "ner_window_overlap": 4}
    assert ner(run_config(task="token-classification", **old)) == expected
    assert ner(load_recipe("conll2003", old)) == expected  # overrides
    argv = ["finetune", "conll2003", "--ner-context", "8", "--ner-casing", "--ner-window-overlap", "4"]
    assert ner(load_recipe("conll2003", finetune_overrides(argv))) == expected  # flags
    new = ["finetune", "conll2003", "--context", "8", "--casing", "--window-overlap", "4"]
    assert finetune_overrides(argv) == finetune_overrides(new) == {"context": 8, "casing": True, "window_overlap": 4}
    path = tmp_path / "ner.yaml"
    path.write_text("task: token-classification\ntask_options: {ner_context: 8, ner_window_overlap: 4}\n"
                    "model_overrides:\n  minilm-l6: {ner_casing: true}\n")
    assert ner(load_recipe(str(path), {"model": "minilm-l6"})) == expected  # recipe keys and model overrides
    assert load_recipe("conll2003", {"model": "minilm-l6"}).task_options.casing  # the recipe's own override


# bertkit 0.2's recipes, as 0.2 shipped them (comments left out): every option flat, `task` the data set name
SST2_0_2 = """task: sst2
adapter: sequence-classification
model: bert-base-uncased
train_file: train.tsv
validation_files: [dev.tsv]
text_column: sentence
label_column: label
label_names: [negative, positive]
hub_dataset: nyu-mll/glue
hub_config: sst2
hub_splits: [train, validation]
max_length: 128
batch_size: 32
lr: 2.0e-5
epochs: 3
warmup_ratio: 0.1
weight_decay: 0.01
seed: 42
eval_every: epoch
metrics: [accuracy, f1]
model_overrides:
  minilm-l6: {lr: 1.0e-4, batch_size: 64}
main_metric: accuracy
"""
CONLL_0_2 = """task: conll2003
adapter: token-classification
model: bert-base-cased
train_file: train.txt
validation_files: [valid.txt]
test_file: test.txt
tag_column: -1
label_names: []
label_all_pieces: false
hub_dataset: eriktks/conll2003
hub_revision: refs/convert/parquet
hub_splits: [train, validation]
text_column: tokens
label_column: ner_tags
max_length: 128
batch_size: 32
lr: 5.0e-5
epochs: 3
warmup_ratio: 0.1
weight_decay: 0.01
seed: 42
eval_every: epoch
metrics: [precision, recall, f1, per_type]
model_overrides:
  minilm-l6: {lr: 1.0e-4, epochs: 5, layer_lr_decay: 0.9, ner_casing: true}
main_metric: f1
"""


@pytest.mark.parametrize("recipe, text", [("sst2", SST2_0_2), ("conll2003", CONLL_0_2)])
def test_a_bertkit_0_2_recipe_loads_into_the_same_config_as_the_new_layout(tmp_path, recipe, text):
    path = tmp_path / "old.yaml"
    path.write_text(text)
    for overrides in ({}, {"model": "minilm-l6"}, {"model": "minilm-l6", "lr": 3e-5, "precision": "fp32"}):
        old, new = load_recipe(str(path), overrides), load_recipe(recipe, overrides)
        assert old == new and old.to_dict() == new.to_dict(), overrides
    assert (old.task, old.name) == (new.task, recipe)
    path.write_text(text + "learning_rate: 1.0e-5\n")
    with pytest.raises(BertkitError, match="unknown key 'learning_rate'"):
        load_recipe(str(path))


def test_the_0_2_flat_config_class_still_builds_a_run_config():
    old = FinetuneConfig(task="sst2", lr=1e-3, text_column="review", precision="fp32", seeds=[1, 2], resume=True)
    new = run_config(name="sst2", lr=1e-3, text_column="review", precision="fp32")
    assert isinstance(old, RunConfig) and old == new  # seeds and resume are command-line choices now


def test_run_config_is_frozen_small_and_replaced_not_changed():
    cfg = load_recipe("sst2")
    for obj, name in ((cfg, "lr"), (cfg.compute, "precision"), (cfg.hub, "dataset"),
                      (cfg.task_options, "text_column")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, "changed")
    assert len(dataclasses.fields(RunConfig)) <= 40
    assert {"hub", "compute", "task_options"} <= {f.name for f in dataclasses.fields(RunConfig)}
    assert not {"adapter", "seeds", "resume", "allow_pickle", "allow_hub_metrics", "precision", "text_column"} & \
        {f.name for f in dataclasses.fields(RunConfig)}
    new = cfg.replace(lr=1e-3, precision="bf16", text_column="review", hub_dataset="mine")
    assert (new.lr, new.compute.precision, new.task_options.text_column, new.hub.dataset) == \
        (1e-3, "bf16", "review", "mine")
    assert (cfg.lr, cfg.compute.precision, cfg.task_options.text_column, cfg.hub.dataset) == \
        (2e-5, "auto", "sentence", "nyu-mll/glue")
    assert new.task_options.label_names == cfg.task_options.label_names == ["negative", "positive"]
    with pytest.raises(BertkitError, match="'lr' must be a number"):
        cfg.replace(lr="fast")


def test_run_config_from_flat_keywords(tmp_path):
    cfg = run_config(name="sst2", data_dir=str(tmp_path), output_dir=str(tmp_path / "run"), precision="fp32",
                     lr=1e-2, label_names=["negative", "positive"], hub_dataset="nyu-mll/glue", doc_pooling="max")
    assert (cfg.task, cfg.name, cfg.data_dir, cfg.lr) == ("sequence-classification", "sst2", str(tmp_path), 1e-2)
    assert (cfg.compute.precision, cfg.hub.dataset) == ("fp32", "nyu-mll/glue")
    assert (cfg.task_options.label_names, cfg.task_options.doc_pooling) == (["negative", "positive"], "max")
    assert cfg.metrics == ["accuracy", "f1"] and cfg.main_metric == "accuracy"  # the task's defaults
    qa = run_config(task="question-answering", window_overlap=64, allow_no_answer=True)
    assert (qa.task_options.window_overlap, qa.task_options.allow_no_answer) == (64, True)
    assert qa.metrics == ["squad_v2", "best_f1"] and qa.main_metric == "squad_v2"  # SQuAD 2.0's own metrics
    with pytest.raises(BertkitError, match="arguments: unknown key 'window_overlap'"):
        run_config(window_overlap=64)  # a QA option is not one of classification's
    with pytest.raises(BertkitError, match="unknown task 'sst2'"):
        run_config(task="sst2")


@pytest.mark.parametrize("recipe, shown, hidden", [
    ("sst2", ["--text-column", "--doc-pooling", "--problem-type", "task options (sequence-classification"],
     ["--max-question-length", "--window-overlap", "--casing"]),
    ("squad", ["--max-question-length", "--window-overlap", "--n-best", "task options (question-answering"],
     ["--text-column", "--doc-pooling", "--casing"]),
])
def test_finetune_help_shows_the_recipes_task_options_only(capsys, recipe, shown, hidden):
    with pytest.raises(SystemExit) as e:
        main(["finetune", recipe, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "--lr X" in out and "--precision" in out  # the run's own flags are always there
    assert all(flag in out for flag in shown) and not any(flag in out for flag in hidden)


@pytest.mark.parametrize("name", ["sst2", "ner", "qa", "swag", "cloze"])  # every task (conftest TINY_RUNS)
def test_a_run_builds_its_config_once(name, tiny_bert, tmp_path_factory, tmp_path, monkeypatch):
    """The recipe, overrides and flags resolve once; the run's config (its folder, the options its data completes:
    class weights, the label names the data has) is built once from that, and the trainer trains it as it is.
    Reading a run folder's config.yaml back (the report) builds none of the run's."""
    from contextlib import nullcontext

    from bertkit import config, config_files
    from bertkit.training import prepare

    from .conftest import cloze_registered, tiny_run_args

    built, real = [], config.resolve
    monkeypatch.setattr(config, "resolve", lambda layers: built.append(layers[-1][1]) or real(layers))
    monkeypatch.setattr(config_files, "resolve", config.resolve)
    monkeypatch.setattr(prepare, "resolve", config.resolve)
    with cloze_registered() if name == "cloze" else nullcontext():
        args = tiny_run_args(tmp_path_factory, tiny_bert, name, tmp_path / "run")
        assert main([*args, "--max-steps", "2", "--eval-every", "2", "--save-every", "0"]) == 0
    resolved = built.index("command line")  # before it, the recipe's model_overrides are each checked
    assert [b for b in built[resolved:] if not b.endswith("config.yaml")] == ["command line", "the run"]


def test_a_recipe_files_relative_data_dir_is_written_absolute(tmp_path, monkeypatch):
    """`data_dir: mydata` in a recipe file of one's own was kept relative: `evaluate --model RUN` from another
    folder said "--data-dir mydata is not a folder" (a flag never given), and the recipe run from elsewhere too."""
    (tmp_path / "project" / "mydata").mkdir(parents=True)
    (tmp_path / "elsewhere" / "here").mkdir(parents=True)
    recipe = tmp_path / "project" / "my.yaml"
    recipe.write_text("task: sequence-classification\nmetrics: [accuracy]\ndata_dir: mydata\n")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert load_recipe(str(recipe)).data_dir == str(tmp_path / "project" / "mydata")  # beside the recipe
    recipe.write_text("task: sequence-classification\nmetrics: [accuracy]\ndata_dir: here\n")
    assert load_recipe(str(recipe)).data_dir == str(tmp_path / "elsewhere" / "here")  # the working folder's first
    recipe.write_text("task: sequence-classification\nmetrics: [accuracy]\ndata_dir: nowhere\n")
    assert load_recipe(str(recipe)).data_dir == "nowhere"  # said as written when the data loads

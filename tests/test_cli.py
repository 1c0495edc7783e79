"""End-to-end CLI runs on the tiny model: finetune → run folder → evaluate → predict, and bad input."""

import json
import re
import subprocess
import sys

import pytest
import yaml

from bertkit.cli import main
from bertkit.config_files import load_recipe, recipe_names, recipe_task

from .conftest import REPO, bertkit_env, hub_cache_with, tiny_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_bert):
    """The session's tiny sst2 run: `bertkit finetune sst2 --epochs 2` on write_sst2's files (sst2_dir's)."""
    return tiny_run(tmp_path_factory, tiny_bert, "sst2")


def test_run_folder_is_complete(run_dir):
    names = {p.name for p in run_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "config.yaml", "versions.json",
            "eval_metrics.jsonl", "metrics.json", "train_log.jsonl", "predictions_dev.jsonl", "checkpoints",
            "report.md", "README.md", "report_loss_lr.png", "report_metric.png", "report_confusion_dev.png"} <= names
    assert not [n for n in names if n.startswith(".")]  # no temporary leftovers
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["dev"]["accuracy"] >= 0.75 and metrics["train"]["steps"] == 32
    assert (metrics["name"], metrics["task"]) == ("sst2", "sequence-classification")
    evals = [json.loads(line) for line in (run_dir / "eval_metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [16, 32]  # every epoch
    assert json.loads((run_dir / "versions.json").read_text())["torch"].startswith("2.")
    assert "lr: 0.01" in (run_dir / "config.yaml").read_text()
    ckpts = run_dir / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step-0000032" and (ckpts / "best" / "config.json").is_file()


def test_report_and_model_card(run_dir):
    report = (run_dir / "report.md").read_text()
    assert "## Final metrics" in report and "![report_loss_lr.png](report_loss_lr.png)" in report
    assert "| dev | accuracy |" in report and "command: `bertkit finetune sst2" in report
    card = (run_dir / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["pipeline_tag"] == "text-classification" and meta["library_name"] == "transformers"
    assert "AutoModelForSequenceClassification.from_pretrained" in card and "256 examples" in card
    from PIL import Image

    assert Image.open(run_dir / "report_confusion_dev.png").size[0] > 200


def test_predict_accuracy_equals_evaluate(run_dir, sst2_dir, tmp_path, capsys):
    assert main(["evaluate", "--model", str(run_dir), "--recipe", "sst2", "--data-dir", str(sst2_dir)]) == 0
    evaluated = json.loads((run_dir / "eval_sst2_dev.json").read_text())
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "--model", str(run_dir), "--input", str(sst2_dir / "dev.tsv"), "--output", str(out),
                 "--probs"]) == 0
    preds = [json.loads(line) for line in out.read_text().splitlines()]
    gold = [line.rsplit("\t", 1)[1] for line in (sst2_dir / "dev.tsv").read_text().splitlines()[1:]]
    right = [p["label"] == ("positive" if g == "1" else "negative") for p, g in zip(preds, gold, strict=True)]
    accuracy = sum(right) / len(gold)
    assert accuracy == evaluated["accuracy"] and len(preds) == evaluated["examples"] == 64
    assert evaluated["precision"] == "fp32"  # the run trained in fp32: auto follows it (where it would be bf16)
    assert set(preds[0]) == {"text", "label", "score", "probabilities"}
    # a table with an id column (GLUE's test files: index): each answer carries its row's id, first
    test = tmp_path / "test.tsv"
    test.write_text("index\tsentence\n7\ta gripping film\n3\ta dull plot\n")
    capsys.readouterr()  # evaluate's metrics
    assert main(["predict", "--model", str(run_dir), "--input", str(test)]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [list(a)[:2] for a in answers] == [["id", "text"]] * 2 and [a["id"] for a in answers] == ["7", "3"]
    assert main(["predict", "--model", str(run_dir), "--input", str(test), "--id-column", "key"]) == 2
    assert f'{test}, line 1, field "key": missing column (found: index, sentence)' in capsys.readouterr().err


def test_inference_precision_follows_a_run_that_trained_in_fp32(tmp_path):
    from bertkit.tasks.saved import inference_precision

    for config, requested, chosen in [("compute:\n  precision: fp32\n", "auto", "fp32"),
                                      ("compute:\n  precision: fp32\n", "bf16", "bf16"),  # asked: as asked
                                      ("compute:\n  precision: auto\n", "auto", "auto"),
                                      ("precision: fp32\n", "auto", "fp32"),  # bertkit 0.2's flat config
                                      (None, "auto", "auto")]:  # not a run folder (a hub checkpoint's)
        run = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
        run.mkdir()
        if config:
            (run / "config.yaml").write_text(config)
        assert inference_precision(requested, run) == chosen, (config, requested)


@pytest.mark.usefixtures("cpu_only")  # compared at 1e-6 with plain transformers on the CPU
def test_predict_plain_text_from_stdin(run_dir, monkeypatch, capsys):
    import io

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    texts = ["a wonderful , funny film", "null", "a dull , tedious plot"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(t + "\n" for t in texts)))
    assert main(["predict", "--model", str(run_dir), "--input", "-", "--precision", "fp32"]) == 0  # as below
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == texts
    # each line: the label and score of the run itself (plain transformers, fp32): argmax and top probability
    model = AutoModelForSequenceClassification.from_pretrained(run_dir).eval()
    batch = AutoTokenizer.from_pretrained(run_dir)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        probs = model(**batch).logits.softmax(-1)
    assert [r["label"] for r in rows] == [model.config.id2label[int(k)] for k in probs.argmax(-1)]
    assert [r["score"] for r in rows] == pytest.approx(probs.max(-1).values.tolist(), abs=1e-6)
    assert [r["label"] for r in rows][::2] == ["positive", "negative"]  # the run learnt the sentiment words
    # a single-text run: a tab is part of the text; a column of second texts is refused
    monkeypatch.setattr(sys, "stdin", io.StringIO("a wonderful\tfilm\n"))
    assert main(["predict", "--model", str(run_dir), "--input", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == "a wonderful\tfilm"
    # JSONL on standard input, told by its first line (was read as texts: the answers' texts were the JSON lines)
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"sentence": "a wonderful film", "id": 7}\n{"sentence": "x", '
                                                  '"id": 8}\n'))
    assert main(["predict", "--model", str(run_dir), "--input", "-"]) == 0
    assert [(a["id"], a["text"]) for a in map(json.loads, capsys.readouterr().out.splitlines())] == [
        (7, "a wonderful film"), (8, "x")]
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"review": "a wonderful film"}\n'))
    assert main(["predict", "--model", str(run_dir), "--input", "-"]) == 2
    assert "error: <stdin>, line 1: no text column found" in capsys.readouterr().err
    assert main(["predict", "--model", str(run_dir), "--input", "in.tsv", "--text-pair-column", "b"]) == 2
    assert "--text-pair-column: this model classifies single texts" in capsys.readouterr().err


def bad_case(tmp_path, sst2_dir, name):
    d = tmp_path / "data"
    d.mkdir()
    (d / "train.tsv").write_text((sst2_dir / "train.tsv").read_text())
    dev = (sst2_dir / "dev.tsv").read_text().splitlines()
    if name == "missing column":
        dev[5] = dev[5].split("\t")[0]
    elif name == "unknown label":
        dev[5] = dev[5].split("\t")[0] + "\t7"
    elif name == "empty text":
        dev[5] = " \t1"
    if name != "missing file":
        (d / "dev.tsv").write_text("\n".join(dev) + "\n")
    return d


@pytest.mark.parametrize("name, expected", [
    ("missing column", "dev.tsv, line 6: expected 2 columns"),
    ("unknown label", "dev.tsv, line 6, field \"label\": unknown label '7'"),
    ("empty text", "dev.tsv, line 6, field \"sentence\": empty text"),
    ("missing file", "dev.tsv: file not found"),
])
def test_bad_input_exits_2_with_location_and_writes_nothing(tmp_path, tiny_bert, sst2_dir, name, expected):
    data = bad_case(tmp_path, sst2_dir, name)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "bertkit.cli", "finetune", "sst2", "--model", str(tiny_bert),
                           "--data-dir", str(data), "--output-dir", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.usefixtures("cpu_only")  # "fp16 needs a GPU": a machine without one
@pytest.mark.parametrize("args, expected", [
    (["finetune", "sst2", "--model", "./no/such/model"], "model folder not found"),
    (["finetune", "sst2", "--model", "no-such-org/no-such-model", "--data-dir", "{data}", "--output-dir", "{new}"],
     "(offline: HF_HUB_OFFLINE set; give a local checkpoint folder, or --model minilm-l6, the packaged one; nor is "
     "there a folder no-such-org/no-such-model here)"),
    (["finetune", "sst2", "--output-dir", "{run}"], "is not empty; pass --resume"),
    (["finetune", "sst2", "--precision", "fp16", "--model", "{tiny}", "--data-dir", "{data}"], "fp16 needs a GPU"),
    (["finetune", "sst2", "--precision", "tf32", "--model", "{tiny}", "--data-dir", "{data}"],
     "tf32 needs an NVIDIA GPU"),
    (["finetune", "sst2", "--precision", "tf32", "--model", "./no/such/model", "--data-dir", "{missing}"],
     "tf32 needs an NVIDIA GPU"),  # refused before the model or the data is looked for
    (["predict", "--model", "{run}", "--input", "{missing}"], "file not found"),
    (["evaluate", "--model", "{run}", "--task", "sst2", "--split", "train2"], "split 'train2' not known"),
    (["evaluate", "--model", "{run}", "--recipe", "squad"], "recipe squad is a question-answering recipe"),
])
def test_user_errors_are_one_clear_line(args, expected, run_dir, tiny_bert, sst2_dir, tmp_path, capsys):
    fill = {"run": str(run_dir), "tiny": str(tiny_bert), "data": str(sst2_dir), "missing": str(tmp_path / "x.txt"),
            "new": str(tmp_path / "run")}
    args = [a.format(**fill) for a in args]
    if args[0] == "evaluate":
        args += ["--data-dir", str(sst2_dir)]
    assert main(args) == 2
    assert expected in capsys.readouterr().err


def test_minilm_alias_resolves_to_the_packaged_checkpoint():
    from bertkit.models import resolve_model

    path, local = resolve_model("minilm-l6")
    assert local and path.endswith("model")


def test_help_has_examples():
    for command in ("finetune", "evaluate", "predict", "extract", "probe", "recipes"):
        proc = subprocess.run([sys.executable, "-m", "bertkit.cli", command, "--help"], capture_output=True,
                              text=True, cwd=REPO)
        assert proc.returncode == 0 and "example:" in proc.stdout


def test_report_to_tensorboard_writes_event_files_offline(tiny_bert, sst2_dir, tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--precision", "fp32",
                 "--max-steps", "4", "--eval-every", "2", "--report-to", "tensorboard", "--output-dir", str(out)]) == 0
    assert list((out / "trackers").rglob("events.out.tfevents.*"))


def test_report_to_an_unknown_tracker_is_a_clear_error(tiny_bert, sst2_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--max-steps", "2",
                 "--report-to", "nosuchtracker", "--output-dir", str(out)]) == 2
    assert "--report-to nosuchtracker" in capsys.readouterr().err


def test_recipes_command_lists_and_shows(capsys):
    assert main(["recipes"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in ("sst2", "mrpc", "conll2003", "squad")) and "question-answering" in listing
    assert "\nglue " in listing  # `finetune glue` too, though not a recipe of its own
    assert main(["recipes", "glue"]) == 0
    assert "it runs cola, mnli, mrpc, qnli, qqp, rte, sst2, stsb, wnli (`--tasks`" in capsys.readouterr().out
    assert main(["finetune", "sequence-classification"]) == 2  # a task's name: its recipes are the way in
    err = capsys.readouterr().err
    assert "'sequence-classification' is a task, not a recipe: start from one of its recipes (cola, mnli, mrpc, " \
           "qnli, qqp, rte, sst2, stsb, wnli) and name your files with --train-file and --validation-files" in err
    assert main(["recipes", "show", "squad"]) == 0
    assert "window_overlap: 128" in capsys.readouterr().out
    assert main(["recipes", "show", "sqaud"]) == 2
    assert "did you mean 'squad'" in capsys.readouterr().err
    assert main(["recipes", "squad"]) == 0  # the name alone shows it too
    assert "window_overlap: 128" in capsys.readouterr().out
    assert main(["recipes", "list", "squad"]) == 2
    assert "'list' takes no recipe name: bertkit recipes [list | [show] NAME]" in capsys.readouterr().err


@pytest.mark.parametrize("name", recipe_names())
def test_every_packaged_recipe_loads(name):
    """`bertkit recipes` reads the recipes without resolving them: here each one is resolved, its task's options
    checked."""
    cfg = load_recipe(name)
    assert cfg.name == name and cfg.task == recipe_task(name)


def test_recipes_are_listed_and_shown_without_a_model_library_and_a_file_of_ones_own_is_checked(tmp_path):
    """Listing and showing the packaged recipes import neither torch, transformers nor datasets (seconds of a
    command that prints text); a YAML file of one's own is loaded before it is printed, and refused in one line."""
    bad = tmp_path / "mine.yaml"
    bad.write_text("task: sequence-classification\nepohcs: 1\n")
    code = "\n".join([
        "import sys", "from bertkit.cli import main",
        "assert main(['recipes']) == 0 and main(['recipes', 'squad']) == 0",
        "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))",
        f"sys.exit(main(['recipes', 'show', {str(bad)!r}]))"])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout.splitlines()[-1] == "[]", proc.stdout[-300:] + proc.stderr
    assert proc.stderr.strip().endswith("mine.yaml: unknown key 'epohcs' (did you mean 'epochs'?)"), proc.stderr
    assert "epohcs: 1" not in proc.stdout


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    declared = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"bertkit {declared}"


def test_a_reader_that_stops_reading_ends_the_command_quietly():
    """`bertkit recipes | head -1`: the pipe's reader leaves; the command ends with SIGPIPE's status, no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "bertkit", "recipes"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader leaves before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == "", err


def test_data_file_flags_name_files_here_unless_a_data_dir_is_given(tmp_path, monkeypatch):
    from bertkit.cli import build_parser
    from bertkit.commands.finetune import overrides_from

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my").mkdir()
    for name in ("train.csv", "dev.csv"):
        (tmp_path / "my" / name).write_text("text,label\n")

    def overrides(*flags):
        argv = ["finetune", "sst2", *flags]
        return overrides_from(build_parser(argv).parse_args(argv))

    here = overrides("--train-file", "my/train.csv", "--validation-files", "my/dev.csv,test.tsv")
    assert here["train_file"] == str(tmp_path / "my" / "train.csv")
    assert here["validation_files"] == f"{tmp_path / 'my' / 'dev.csv'},test.tsv"  # not here: the data folder's
    given = overrides("--data-dir", "my", "--train-file", "train.csv", "--validation-files", "my/dev.csv")
    assert (given["train_file"], given["validation_files"]) == ("train.csv", "my/dev.csv")
    assert given["data_dir"] == str(tmp_path / "my")  # absolute, as config.yaml records it
    assert overrides("--data-dir", "nope")["data_dir"] == "nope"  # not a folder: said as given when the data loads


def test_a_run_made_with_a_relative_data_dir_is_evaluated_from_anywhere(tiny_bert, sst2_dir, tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.chdir(sst2_dir.parent)
    run = tmp_path / "run"
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", sst2_dir.name, "--max-steps", "1",
                 "--precision", "fp32", "--output-dir", str(run)]) == 0
    assert yaml.safe_load((run / "config.yaml").read_text())["data_dir"] == str(sst2_dir.resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["evaluate", "--model", str(run)]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["examples"] == 64  # sst2_dir's dev.tsv


def test_evaluate_reads_a_file_with_other_columns_by_the_tasks_read_flags(run_dir, sst2_dir, tmp_path, capsys):
    """A labelled file whose columns are not the run's: the reader's hint names a flag evaluate takes, and with it
    the file scores as the run's own dev file does."""
    lines = (sst2_dir / "dev.tsv").read_text().splitlines()
    other = tmp_path / "reviews.tsv"
    other.write_text("\n".join(["review\tstars", *lines[1:]]) + "\n")
    assert main(["evaluate", "--model", str(run_dir), "--file", str(other)]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert 'reviews.tsv, line 2, field "sentence"' in err, err
    assert "--text-column, --label-column name the columns to read" in err, err
    with pytest.raises(SystemExit):  # the task's flags, with --model
        main(["evaluate", "--model", str(run_dir), "--help"])
    usage = capsys.readouterr().out
    assert all(f in usage for f in ("--text-column", "--label-column", "--delimiter", "--columns")), usage
    assert main(["evaluate", "--model", str(run_dir), "--file", str(other), "--text-column", "review",
                 "--label-column", "stars", "--output", str(tmp_path / "other.json")]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--model", str(run_dir), "--file", str(sst2_dir / "dev.tsv"), "--output",
                 str(tmp_path / "dev.json")]) == 0
    own = json.loads(capsys.readouterr().out)
    assert scored["split"] == "reviews" and {**scored, "split": "dev"} == own
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())["task_options"]
    assert saved["text_column"] == "sentence"  # the run's config is read, not changed


def test_an_optional_fields_flag_takes_none(tmp_path, monkeypatch):
    """`--x none` clears a recipe's value of an optional field (a flag not given changes nothing); a folder flag
    keeps `none` as a folder's name; a number flag still refuses other words."""
    from bertkit.cli import build_parser
    from bertkit.commands.finetune import overrides_from

    monkeypatch.chdir(tmp_path)

    def overrides(recipe, *flags):
        argv = ["finetune", recipe, *flags]
        return overrides_from(build_parser(argv).parse_args(argv))

    assert overrides("swag", "--start-column", "none") == {"start_column": None}
    assert overrides("mrpc", "--text-pair-column", "NULL", "--max-steps", "none") == {"text_pair_column": None,
                                                                                        "max_steps": None}
    assert overrides("sst2", "--max-steps", "3") == {"max_steps": 3} and overrides("sst2") == {}
    assert overrides("sst2", "--output-dir", "none")["output_dir"] == "none"
    with pytest.raises(SystemExit):
        overrides("sst2", "--max-steps", "few")


def test_a_model_cards_base_model_is_a_hub_id_or_absent(tmp_path):
    from bertkit.models import hub_id

    assert hub_id("minilm-l6") == "sentence-transformers/all-MiniLM-L6-v2"  # the packaged checkpoint's own
    assert hub_id("bert-base-uncased") == "bert-base-uncased" and hub_id("google/electra-small-discriminator")
    assert hub_id(str(tmp_path)) is None and hub_id("./my-bert") is None and hub_id("~/models/x") is None


def test_evaluate_scores_the_whole_split_whatever_cap_the_run_evaluated_under(run_dir, tmp_path, capsys):
    import shutil

    run = shutil.copytree(run_dir, tmp_path / "run", ignore=shutil.ignore_patterns("checkpoints"))
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**recorded, "max_eval_samples": 5}))  # a run evaluated quickly
    for flags, n in (((), 64), (("--max-samples", "7"), 7)):  # sst2_dir's dev.tsv: 64 rows
        capsys.readouterr()
        assert main(["evaluate", "--model", str(run), *flags]) == 0
        assert json.loads(capsys.readouterr().out)["examples"] == n
    assert main(["evaluate", "--model", str(run), "--max-samples", "0"]) == 2
    assert "--max-samples must be positive" in capsys.readouterr().err


def test_a_logged_command_carries_no_progress_bars_of_the_libraries_unless_verbose(run_dir, tmp_path):
    env = {k: v for k, v in bertkit_env().items() if "PROGRESS_BARS" not in k}

    def bertkit(*command):
        return subprocess.run([sys.executable, "-m", "bertkit.cli", *command], capture_output=True, text=True,
                              env=env, timeout=300)

    proc = bertkit("evaluate", "--model", str(run_dir), "--output", str(tmp_path / "eval.json"))
    assert proc.returncode == 0 and json.loads(proc.stdout)["examples"] == 64, proc.stderr
    assert not re.search(r"Loading weights|Map|it/s\]", proc.stderr), proc.stderr  # transformers', datasets', tqdm's
    (tmp_path / "texts.txt").write_text("a fine film\n")
    proc = bertkit("predict", "--model", str(run_dir), "--input", str(tmp_path / "texts.txt"), "--verbose")
    assert proc.returncode == 0 and "Loading weights" in proc.stderr, proc.stderr  # --verbose keeps them


def test_predict_imports_none_of_the_scoring_libraries(run_dir, tmp_path):
    """predict, which loads every task's module to find the checkpoint's task, leaves evaluate (which imports
    transformers' pipelines) and seqeval (scikit-learn) unimported: seconds of start-up that only scoring needs.
    (scikit-learn is not asked after: transformers 5.6's generation utilities import it themselves.)"""
    (tmp_path / "texts.txt").write_text("a fine film\n")
    code = f"""import json, sys
from bertkit.cli import main
assert main(["predict", "--model", {str(run_dir)!r}, "--input", {str(tmp_path / "texts.txt")!r}]) == 0
print(json.dumps(sorted(m for m in ("evaluate", "seqeval") if m in sys.modules)))"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=bertkit_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_predict_and_evaluate_take_a_hub_id_from_the_hubs_cache(run_dir, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    snapshot = hub_cache_with(run_dir, tmp_path / "hub", "acme/tiny-sst2", monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "texts.txt").write_text("a fine film\n")
    lookups = []
    download = huggingface_hub.snapshot_download
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: lookups.append(a) or download(*a, **k))
    assert main(["predict", "--model", "acme/tiny-sst2", "--input", "texts.txt"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in ("negative", "positive")
    assert lookups == [("acme/tiny-sst2",)]  # once a process: online, each lookup is a call to the hub
    assert main(["evaluate", "--model", "acme/tiny-sst2"]) == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 64  # the run's own data, from its config.yaml
    assert (tmp_path / "eval_sst2_dev.json").is_file() and not list(snapshot.glob("eval_*"))  # here, not the cache
    assert main(["predict", "--model", "acme/not-cached", "--input", "texts.txt"]) == 2
    err = capsys.readouterr().err
    assert "cannot load model 'acme/not-cached'" in err and "offline: HF_HUB_OFFLINE" in err, err
    assert err.rstrip().endswith("nor is there a folder acme/not-cached here)")  # a run folder's name mistyped?
    assert main(["predict", "--model", "sst2-run", "--input", "texts.txt"]) == 2  # a name without a slash too
    assert capsys.readouterr().err.rstrip().endswith("nor is there a folder sst2-run here)")
    (tmp_path / "header.tsv").write_text("sentence\n")
    assert main(["predict", "--model", "acme/tiny-sst2", "--input", "header.tsv"]) == 2
    assert "header.tsv: no rows (a header only)" in capsys.readouterr().err


def test_a_hub_id_that_cannot_be_reached_is_said_after_one_attempt(tiny_bert, monkeypatch):
    """Without a network each fetch of a hub file waits out huggingface_hub's retries: `bertkit finetune sst2`
    (bert-base-uncased) made four such attempts before saying it could not load the model (the times:
    docs/reliability.md). The first one that cannot reach the hub now says so; a config.json found is fetched once a
    process."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    from bertkit import SequenceClassification
    from bertkit.errors import BertkitError

    calls = []

    def unreachable(repo, filename, **kwargs):
        calls.append((repo, filename))
        raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    with pytest.raises(BertkitError, match="cannot load model 'acme/bert': An error happened"):
        SequenceClassification.from_pretrained("acme/bert", label_names=["negative", "positive"])
    assert calls == [("acme/bert", "config.json")]
    calls.clear()
    from bertkit.extract import FeatureExtractor
    from bertkit.models import load_tokenizer

    for load in (FeatureExtractor, load_tokenizer):  # transformers' own loading made two attempts
        with pytest.raises(BertkitError, match="cannot load model 'acme/bert-2'"):
            load("acme/bert-2")
        assert calls == [("acme/bert-2", "config.json")]
        calls.clear()
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda repo, filename, **kw: calls.append(filename) or str(tiny_bert / filename))
    from bertkit.models import checkpoint_config

    assert checkpoint_config("acme/tiny") == checkpoint_config("acme/tiny") != {} and calls == ["config.json"]


def test_finetunes_wall_time_counts_from_the_commands_start(monkeypatch, tiny_bert, sst2_dir, tmp_path):
    """The line 'wall time N s' counted from after the parser had imported torch and transformers (5-6 s of a
    2-core machine's command); it counts from the command's start."""
    import time

    import bertkit.cli
    import bertkit.training.runs

    calls = {}
    build = bertkit.cli.build_parser
    monkeypatch.setattr(bertkit.cli, "build_parser", lambda argv: calls.setdefault("parser", time.perf_counter())
                        and build(argv))
    monkeypatch.setattr(bertkit.training.runs, "finetune", lambda cfg, **kw: calls.setdefault("started",
                                                                                                kw["started"]))
    before = time.perf_counter()
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir),
                 "--output-dir", str(tmp_path / "r")]) == 0
    assert before <= calls["started"] <= calls["parser"]


def test_the_command_freezes_its_objects_for_the_exit(monkeypatch):
    """`bertkit` (`cli.run`) freezes the process's objects once the command is done, so that Python's collections at
    exit do not walk them; `main`, which tests and notebooks call, does not."""
    import gc

    import bertkit.cli

    monkeypatch.setattr(bertkit.cli, "main", lambda: 0)
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        assert bertkit.cli.run() == 0 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("command", ["predict", "extract"])
def test_sigterm_while_writing_leaves_nothing_and_exits_143(command, run_dir, tmp_path):
    """SIGTERM's default ended the process where it stood, leaving the output's temporary beside it
    (`.out.jsonl.*.tmp`); it now unwinds as Ctrl-C does."""
    import signal
    import time

    inp = tmp_path / "in.txt"
    inp.write_text("".join(f"sentence {i} of a film that was fine\n" for i in range(60_000)))
    out = tmp_path / "out" / ("out.jsonl" if command == "predict" else "feats")
    args = ["--model", str(run_dir), "--input", str(inp), "--output", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "bertkit", command, *args, *(
        ["--layers", "last"] if command == "extract" else [])], stderr=subprocess.PIPE, text=True, cwd=REPO,
        env=bertkit_env())
    deadline = time.monotonic() + 300
    while not list(out.parent.glob(f".{out.name}*")):  # writing: its temporary is there
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert (proc.returncode, stderr.splitlines()[-1]) == (143, "terminated"), stderr[-3000:]
    assert list(out.parent.iterdir()) == []

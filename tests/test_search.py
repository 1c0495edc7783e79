"""`bertkit search`: an Optuna study of normal run folders, the best setting confirmed over seeds against the recipe's
own, a report; a search killed mid-trial goes on with the same command without repeating a finished trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO

optuna = pytest.importorskip("optuna")


def search_args(tiny_bert, data, out, *extra):
    return ["search", "sst2", "--model", str(tiny_bert), "--data-dir", str(data), "--precision", "fp32",
            "--max-steps", "6", "--eval-every", "3", "--max-length", "32", "--trials", "3", "--confirm-seeds", "2",
            "--output-dir", str(out), *extra]


def bertkit(args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "bertkit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO)


def finished_trials(out) -> list:
    study = optuna.load_study(study_name="sst2", storage=f"sqlite:///{out / 'study.db'}")
    return study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))


@pytest.mark.slow
def test_a_second_search_into_a_folder_in_use_stops_with_one_line(tiny_bert, sst2_dir, tmp_path):
    """It took the first one's running trial for a killed one and ran it again, in the same folder, beside it."""
    out = tmp_path / "search"
    first = bertkit(search_args(tiny_bert, sst2_dir, out, "--max-steps", "100000"))
    try:
        deadline = time.monotonic() + 300
        while not (out / "trial-000" / "config.yaml").is_file():  # the first trial is under way
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
            time.sleep(0.05)
        second = bertkit(search_args(tiny_bert, sst2_dir, out))
        _, stderr = second.communicate(timeout=300)
        assert second.returncode == 2 and stderr == (f"bertkit search: error: output folder {out} is in use by "
                                                     "another run; wait for it to end, or give a new --output-dir\n")
        assert first.poll() is None and [t.state.name for t in optuna.load_study(
            study_name="sst2", storage=f"sqlite:///{out / 'study.db'}").trials] == ["RUNNING"]
    finally:
        first.kill()
        first.wait()


@pytest.mark.slow
def test_a_search_killed_mid_trial_goes_on_without_repeating_a_finished_trial(tiny_bert, sst2_dir, tmp_path):
    out = tmp_path / "search"
    proc = bertkit(search_args(tiny_bert, sst2_dir, out))
    deadline = time.monotonic() + 300
    while not (out / "trial-001" / "checkpoints" / "latest").is_file():  # the second trial is under way
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = finished_trials(out)
    assert [t.number for t in first] == [0] and not (out / "trial-001" / "metrics.json").exists()
    kept = (out / "trial-000" / "metrics.json").stat().st_mtime_ns

    again = bertkit(search_args(tiny_bert, sst2_dir, out))
    stdout, stderr = again.communicate(timeout=600)
    assert again.returncode == 0, stderr[-3000:]
    assert "trial 1 was interrupted; its values are tried again, resuming its run folder" in stderr
    assert "resumed from" in stderr
    done = finished_trials(out)
    assert len(done) == 3 and (out / "trial-000" / "metrics.json").stat().st_mtime_ns == kept
    folders = [t.user_attrs["folder"] for t in done]
    assert sorted(folders) == ["trial-000", "trial-001", "trial-003"]  # trial 1's values again, in its folder
    interrupted = optuna.load_study(study_name="sst2", storage=f"sqlite:///{out / 'study.db'}").trials[1]
    retried = next(t for t in done if t.user_attrs["folder"] == "trial-001")
    assert interrupted.state == optuna.trial.TrialState.FAIL and retried.params == interrupted.params
    for t in done:  # each trial a normal run folder whose main metric is the trial's value
        metrics = json.loads((out / t.user_attrs["folder"] / "metrics.json").read_text())
        assert metrics["dev"]["accuracy"] == t.value

    summary = json.loads((out / "summary.json").read_text())
    assert summary["space"] == {"lr": {"choices": [5e-5, 3e-5, 2e-5]}, "batch_size": {"choices": [16, 32]},
                                "epochs": {"choices": [2, 3, 4]}}  # the BERT paper's grid
    best, default = summary["confirmation"]["best"], summary["confirmation"]["default"]
    assert best["seeds"] == default["seeds"] == [13, 42] and len(best["values"]) == 2
    for name, c in (("best", best), ("default", default)):
        for seed, value in zip(c["seeds"], c["values"], strict=True):
            run = json.loads((out / f"confirm-{name}" / f"seed-{seed}" / "metrics.json").read_text())
            assert run["dev"]["accuracy"] == value
    report = (out / "report.md").read_text()
    assert "| trial | state | lr | batch_size | epochs | accuracy |" in report
    assert "Verdict: the best setting" in report
    assert (out / "search_history.png").is_file()


def test_a_recipes_search_space_is_used_and_a_bad_one_refused(tmp_path):
    from bertkit.errors import BertkitError
    from bertkit.hpsearch import search_space, suggest

    recipe = tmp_path / "mine.yaml"
    recipe.write_text("task: sequence-classification\nsearch_space:\n  lr: {low: 1.0e-5, high: 1.0e-4, log: true}\n"
                      "  warmup_ratio: {low: 0.0, high: 0.2}\n  epochs: {low: 1, high: 3}\n"
                      "  doc_pooling: {choices: [truncate, mean]}\n")
    space = search_space(str(recipe))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(5):
        values = suggest(study.ask(), space)
        assert 1e-5 <= values["lr"] <= 1e-4 and 0 <= values["warmup_ratio"] <= 0.2
        assert values["epochs"] in (1, 2, 3) and isinstance(values["epochs"], int)
        assert values["doc_pooling"] in ("truncate", "mean")
    from bertkit.config_files import load_recipe

    assert load_recipe(str(recipe)).task == "sequence-classification"  # finetune ignores the search space
    recipe.write_text("task: sequence-classification\nsearch_space:\n  lr: {low: 1.0e-4, high: 1.0e-5}\n")
    with pytest.raises(BertkitError, match="search_space.lr must be"):
        search_space(str(recipe))


def test_a_pruned_trial_stops_its_run(tiny_bert, sst2_dir, tmp_path):
    from bertkit.config_files import load_recipe
    from bertkit.hpsearch import run_trial
    from bertkit.tasks import get_task
    from bertkit.training import launch
    from bertkit.training.runs import load_checked

    class Prunes:
        def __init__(self):
            self.reported = []

        def report(self, value, step):
            self.reported.append(step)

        def should_prune(self):
            return True

    cfg = load_recipe("sst2", {"model": str(tiny_bert), "data_dir": str(sst2_dir), "precision": "fp32",
                               "max_steps": 6, "eval_every": "3", "max_length": 32})
    task = get_task(cfg.task)
    changes, data = load_checked(task, cfg)
    cfg = cfg.replace("the training data", **changes)
    trial = Prunes()
    outcome = run_trial(cfg, {"lr": 3e-5}, tmp_path / "trial", data, task, trial, launch.start())
    assert outcome == ("pruned", None) and trial.reported == [3]  # stopped at its first evaluation
    assert not (tmp_path / "trial" / "metrics.json").exists()


def test_the_reports_plots_do_not_warn_of_optunas_experimental_figures(tmp_path, recwarn):
    from bertkit.search_report import plots

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: t.suggest_float("lr", 1e-5, 1e-4) + t.suggest_int("batch", 8, 32), n_trials=4)
    assert [Path(p).name for p in plots(tmp_path, study)] == [
        "search_history.png", "search_importance.png"]
    assert not [w for w in recwarn if issubclass(w.category, optuna.exceptions.ExperimentalWarning)]


def test_confirm_seeds_0_runs_no_confirmation_and_out_of_range_is_one_line(tiny_bert, sst2_dir, tmp_path, capsys):
    from bertkit.cli import main

    out = tmp_path / "search"
    args = search_args(tiny_bert, sst2_dir, out, "--trials", "1", "--confirm-seeds", "0")
    assert main(args) == 0, capsys.readouterr().err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["confirmation"] == {} and not list(out.glob("confirm-*"))
    assert "No confirmation over seeds (--confirm-seeds 0)" in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(search_args(tiny_bert, sst2_dir, tmp_path / "other", "--confirm-seeds", "9")) == 2
    assert "--confirm-seeds 9: from 0 (no confirmation) to 8" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_a_search_whose_trials_were_all_pruned_says_so_in_one_line(tiny_bert, sst2_dir, tmp_path, monkeypatch):
    import bertkit.hpsearch
    from bertkit.errors import BertkitError

    monkeypatch.setattr(bertkit.hpsearch, "run_trial", lambda *args: ("pruned", None))
    overrides = {"model": str(tiny_bert), "data_dir": str(sst2_dir), "precision": "fp32", "max_steps": 2}
    with pytest.raises(BertkitError, match=r"search: no trial completed \(2 tried\); more --trials or a longer"):
        bertkit.hpsearch.search("sst2", trials=2, confirm_seeds=0, overrides=overrides,
                              output_dir=str(tmp_path / "search"), log=lambda m: None)


def test_a_search_that_goes_on_draws_new_trials_and_keeps_its_settings(tiny_bert, sst2_dir, tmp_path, capsys):
    """Found by using bertkit: a search run again with more --trials asked its first trials again (a sampler seeded
    anew), took other settings silently (trials of two max lengths ranked together), and wrote into a fine-tuned run's
    folder (its report replaced)."""
    from bertkit.cli import main

    out = tmp_path / "search"
    assert main(search_args(tiny_bert, sst2_dir, out, "--trials", "2", "--confirm-seeds", "0")) == 0
    assert main(search_args(tiny_bert, sst2_dir, out, "--trials", "4", "--confirm-seeds", "0")) == 0
    params = [t.params for t in finished_trials(out)]
    assert len(params) == 4 and params[2:] != params[:2], params  # were trials 0 and 1 again
    capsys.readouterr()
    assert main(search_args(tiny_bert, sst2_dir, out, "--trials", "5", "--max-length", "16")) == 2
    assert (f"{out} holds a search with other settings (max_length 32 → 16): its trials would be ranked together"
            in capsys.readouterr().err) and len(finished_trials(out)) == 4
    assert main(search_args(tiny_bert, sst2_dir, tmp_path / "s2", "--trials", "1", "--confirm-seeds", "0", "--lr",
                            "1e-3")) == 0
    assert "search: lr, batch_size, epochs are searched: --lr 0.001 is the confirmation's default only" in \
        capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.md").write_text("a fine-tuned run's report")
    assert main(search_args(tiny_bert, sst2_dir, run)) == 2
    assert f"output folder {run} is not empty and holds no search (study.db)" in capsys.readouterr().err
    assert (run / "report.md").read_text() == "a fine-tuned run's report" and len(list(run.iterdir())) == 1

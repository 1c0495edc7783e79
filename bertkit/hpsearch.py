"""`bertkit search RECIPE`: hyper-parameter search with Optuna, then the best setting confirmed over seeds.

    the recipe (+ flags) ──► a study in <output>/study.db (SQLite): TPE sampler, median pruner on the evaluations
        each trial: the recipe with the trial's values, a normal run folder <output>/trial-NNN
    ──► the best trial's values and the recipe's own, each over --confirm-seeds seeds (<output>/confirm-*)
    ──► <output>/report.md: the trials, the optimisation history and the parameters' importance, best vs default
        (mean ± std): a best setting that does not beat the default by more than the seeds' spread is said to

The search space is the BERT paper's grid (Appendix A.3: lr ∈ {5e-5, 3e-5, 2e-5}, batch ∈ {16, 32}, epochs ∈
{2, 3, 4}) unless the recipe has a `search_space:` mapping of flat config keys to `{choices: [...]}` or
`{low: x, high: y, log: true|false}` (a float range; integers where both ends are). A killed search (kill -9) run again
with the same command goes on: finished trials are kept, the interrupted one is tried again in its own folder
(resumed from its checkpoint); more --trials draw new ones. Other settings than the search began with
(search_config.yaml) are refused: its trials are ranked together. Under a launcher (torchrun) the main process
drives the study and every process runs each trial.

Example:
```python
result = bertkit.search("sst2", trials=6, overrides={"model": "minilm-l6", "max_steps": 60})
result["best"]["params"], result["confirmation"]["best"]["mean"]
```
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from .errors import BertkitError, need_extra

BERT_GRID = {"lr": {"choices": [5e-5, 3e-5, 2e-5]}, "batch_size": {"choices": [16, 32]},
             "epochs": {"choices": [2, 3, 4]}}
SEEDS = (13, 42, 87, 21, 64, 7, 99, 3)  # the confirmation's seeds: the first N
STUDY = "study.db"
SETTINGS = "search_config.yaml"  # the settings the search began with


def search_space(recipe: str) -> dict:
    """The recipe's `search_space:` (checked), else the BERT paper's grid."""
    from .config_files import read_yaml, recipe_path

    path = recipe_path(recipe)
    space = read_yaml(path).get("search_space") or BERT_GRID
    if not isinstance(space, dict):
        raise BertkitError(f"{path}: search_space must map config keys to {{choices: [...]}} or {{low, high}}")
    for key, spec in space.items():
        ok = isinstance(spec, dict) and ("choices" in spec and isinstance(spec["choices"], list) and spec["choices"]
                                         or {"low", "high"} <= set(spec) and spec["low"] < spec["high"])
        if not ok:
            raise BertkitError(f"{path}: search_space.{key} must be {{choices: [...]}} or {{low: x, high: y}} with "
                               f"low < high, got {spec!r}")
    return space


def suggest(trial, space: dict) -> dict:
    values = {}
    for key, spec in space.items():
        if "choices" in spec:
            values[key] = trial.suggest_categorical(key, spec["choices"])
        elif isinstance(spec["low"], int) and isinstance(spec["high"], int):
            values[key] = trial.suggest_int(key, spec["low"], spec["high"], log=bool(spec.get("log")))
        else:
            values[key] = trial.suggest_float(key, float(spec["low"]), float(spec["high"]), log=bool(spec.get("log")))
    return values


def search(recipe: str, trials: int = 20, timeout: float | None = None, confirm_seeds: int = 3,
           overrides: dict | None = None, output_dir: str | None = None, log=None) -> dict | None:
    """Run the search, or go on with the one in the output folder; the summary on the main process, None on the
    others. `overrides`: flat config keys, as `bertkit finetune`'s flags."""
    need_extra("bertkit search", "search", "optuna")  # here to fail before the data loads; run_study uses it
    from .config_files import load_recipe
    from .tasks import get_task
    from .training import launch
    from .training.folder import RunFolder
    from .training.runs import load_checked

    if not 0 <= confirm_seeds <= len(SEEDS):
        raise BertkitError(f"--confirm-seeds {confirm_seeds}: from 0 (no confirmation) to {len(SEEDS)}")
    overrides = dict(overrides or {})
    state = launch.start()
    main = state.is_main_process
    say = (log or (lambda m: print(m, file=sys.stderr, flush=True))) if main else (lambda m: None)
    base = load_recipe(recipe, {k: v for k, v in overrides.items() if k != "output_dir"})
    out = Path(output_dir or overrides.get("output_dir") or f"runs/search-{base.name}")
    space = search_space(recipe)
    for key, spec in space.items():  # every key must be a config key: checked here, with its first value
        base.replace(f"search_space.{key}", **{key: spec["choices"][0] if "choices" in spec else spec["low"]})
    searched = [f"--{k.replace('_', '-')} {overrides[k]}" for k in space if k in overrides]
    if searched:
        say(f"search: {', '.join(space)} are searched: {', '.join(searched)} is the confirmation's default only")
    # a run's folder, say: refused by every process alike (the main one writes search_config.yaml before study.db)
    if out.is_dir() and any(out.iterdir()) and not any((out / f).is_file() for f in (STUDY, SETTINGS)):
        raise BertkitError(f"output folder {out} is not empty and holds no search ({STUDY}); give a new --output-dir")
    task_class = get_task(base.task).resolve(base.task_options)
    changes, data = load_checked(task_class, base, say)
    base = base.replace("the training data", **changes)
    # one search a folder: a second would take this one's running trial for a killed one and run it again beside it
    with RunFolder(out, resume=True) if main else nullcontext(out):
        same_settings(out / SETTINGS, base, write=main)  # every process: none goes on where the main one stops
        return run_study(recipe, base, out, space, task_class, data, trials, timeout, confirm_seeds, state, say)


def same_settings(recorded: Path, base, write: bool = True) -> None:
    """A search goes on with the settings it began with: its trials are ranked in one study. Recorded in
    <output>/search_config.yaml when it begins (a search of an older bertkit: from now on)."""
    from .config_files import to_yaml
    from .training.results import config_changes
    from .utils import atomic_path

    changed = config_changes(recorded, base)
    if changed:
        raise BertkitError(f"{recorded.parent} holds a search with other settings ({'; '.join(changed)}): its "
                           "trials would be ranked together; go on with the same settings, or give a new --output-dir")
    if write and not recorded.is_file():
        with atomic_path(recorded) as p:
            p.write_text(to_yaml(base))


def run_study(recipe, base, out: Path, space: dict, task_class, data, trials: int, timeout: float | None,
              confirm_seeds: int, state, say) -> dict | None:
    """The trials (the main process asks the study, every process runs them), the confirmation, the report."""
    import optuna

    from .training import launch

    main, study = state.is_main_process, None
    if main:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        lower = base.main_metric in task_class.lower_is_better
        study = optuna.create_study(study_name=base.name, storage=f"sqlite:///{out / STUDY}", load_if_exists=True,
                                    direction="minimize" if lower else "maximize",
                                    pruner=optuna.pruners.MedianPruner(n_startup_trials=2))
        # a search that goes on draws on from where it stopped: the same seed again would ask its first trials again
        study.sampler = optuna.samplers.TPESampler(seed=base.seed + len(study.trials))
        retry_interrupted(study, say)
    t0 = time.monotonic()
    while True:
        trial, plan = None, None
        if main:
            finished = [t for t in study.trials if t.state.is_finished() and t.state.name != "FAIL"]
            if len(finished) < trials and (timeout is None or time.monotonic() - t0 < timeout):
                trial = study.ask()
                values = suggest(trial, space)
                folder = trial.user_attrs.get("folder") or f"trial-{trial.number:03d}"
                trial.set_user_attr("folder", folder)
                plan = (trial.number, values, folder)
        plan = launch.main_value(state, plan)  # every process runs the trial the main process asked for
        if plan is None:
            break
        number, values, folder = plan
        say(f"search: trial {number}: {values}")
        outcome, value = run_trial(base, values, out / folder, data, task_class, trial, state)
        if main:
            study.tell(trial, value if outcome == "complete" else None,
                       state=None if outcome == "complete" else optuna.trial.TrialState.PRUNED)
            say(f"search: trial {number} {outcome}" + (f": {base.main_metric} {value:.4f}" if value is not None
                                                       else ""))
    complete = main and any(t.state.name == "COMPLETE" for t in study.trials)
    best, tried = launch.main_value(state, ((study.best_trial.params, study.best_trial.number, study.best_trial.value)
                                            if complete else None, len(study.trials)) if main else None)
    if best is None:  # every trial pruned, or --timeout spent before the first
        raise BertkitError(f"search: no trial completed ({tried} tried); more --trials or a longer --timeout")
    say(f"search: best trial {best[1]}: {base.main_metric} {best[2]:.4f} with {best[0]}")
    confirmation = confirm(base, best[0], out, confirm_seeds)
    if not main:
        return None
    from .search_report import trials_table, write_search_report

    summary = {"recipe": recipe, "name": base.name, "main_metric": base.main_metric,
               "direction": study.direction.name.lower(), "space": space,
               "best": {"number": best[1], "value": best[2], "params": best[0]}, "confirmation": confirmation,
               "trials": trials_table(study)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_search_report(out, study, summary)
    say(f"search: {out / 'report.md'}")
    return summary


def retry_interrupted(study, log=print) -> None:
    """A trial still 'running' when the search starts was killed with it: marked failed, and its values asked again
    first, in its own folder (so that it resumes from its checkpoint)."""
    import optuna

    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(t.params, user_attrs={"folder": t.user_attrs.get("folder", f"trial-{t.number:03d}")})
        log(f"search: trial {t.number} was interrupted; its values are tried again, resuming its run folder")


def run_trial(base, values: dict, folder: Path, data, task_class, trial, state) -> tuple[str, float | None]:
    """One trial as a normal run folder: ("complete", the main metric of its best checkpoint) or ("pruned", None).
    The median pruner sees every evaluation; the main process decides and every process stops together."""
    import optuna

    from .report import eval_splits
    from .training import launch
    from .training.runs import train_one

    cfg = base.replace(f"trial {folder.name}", output_dir=str(folder), **values)

    def prune(trainer, run_state, value):
        decision = None
        if trial is not None:
            trial.report(value, run_state["global_step"])
            decision = trial.should_prune()
        if launch.main_value(state, decision):
            raise optuna.TrialPruned()

    train, evals, test, label_names = data
    resume = (folder / "checkpoints").is_dir()
    try:
        result = train_one(task_class, cfg, train, evals, test, label_names, resume=resume, eval_callbacks=[prune])
    except optuna.TrialPruned:
        return "pruned", None
    return "complete", result[eval_splits(result)[0]][cfg.main_metric]


def confirm(base, best: dict, out: Path, n: int) -> dict:
    """The best values and the recipe's own, each over the first `n` of SEEDS (runs kept in <out>/confirm-best and
    <out>/confirm-default; finished seeds are not run again): {best, default: {values, mean, std}}; with `n` 0
    none is run: {}."""
    import numpy as np

    from .training.runs import finetune

    seeds = list(SEEDS[:n])
    out_of = {}
    if not seeds:
        return out_of
    for name, values in (("best", best), ("default", {})):
        cfg = base.replace(f"confirm-{name}", output_dir=str(out / f"confirm-{name}"), **values)
        folder = Path(cfg.output_dir)
        summary = finetune(cfg, seeds=seeds, resume=folder.is_dir() and any(folder.iterdir()))
        if summary is not None:
            key = next(k for k in summary["metrics"] if k.endswith(f"/{base.main_metric}"))
            got = summary["metrics"][key]["values"]
            out_of[name] = {"values": got, "mean": float(np.mean(got)),
                            "std": float(np.std(got, ddof=1)) if len(got) > 1 else 0.0, "seeds": seeds}
    if out_of:
        b, d = out_of["best"], out_of["default"]
        spread = max(b["std"], d["std"])
        sign = -1 if base.main_metric in _lower(base) else 1
        out_of["verdict"] = ("the best setting beats the default by more than the seeds' spread"
                             if sign * (b["mean"] - d["mean"]) > spread else
                             "the best setting does not beat the default by more than the seeds' spread")
    return out_of


def _lower(cfg) -> frozenset:
    from .tasks import get_task

    return get_task(cfg.task).resolve(cfg.task_options).lower_is_better

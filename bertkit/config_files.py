"""Configs in files: recipes (`recipes/NAME.yaml`: run fields, `task_options:`, per-model `model_overrides:`), and
the `config.yaml` a run folder keeps, in this layout or bertkit 0.2's flat one; each resolved by `config.resolve`
into one frozen `RunConfig`.

Example:
```python
>>> from bertkit import load_recipe
>>> cfg = load_recipe("sst2", overrides={"model": "minilm-l6", "epochs": 1})
>>> cfg.task, cfg.lr, cfg.batch_size, cfg.task_options.text_column
('sequence-classification', 0.0001, 64, 'sentence')
```
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from .config import DEFAULT_TASK, FLAT, GENERIC, NESTED, RunConfig, resolve, run_config, task_class
from .errors import BertkitError
from .tasks.registry import all_tasks
from .typed import check_type, option_names, unknown_key
from .utils import load_yaml

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"


def FinetuneConfig(**values) -> RunConfig:  # noqa: N802 (the 0.2 class name, kept for notebooks)
    """bertkit 0.2's flat config (`task="sst2"`, `adapter=...`, every option at the top) as a RunConfig."""
    return run_config(**upgrade_flat({"adapter": DEFAULT_TASK, **values}, strict=True))


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name: str) -> Path:
    """A recipe name (`sst2`) or a path to a YAML file."""
    import difflib

    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise BertkitError(f"recipe file not found: {path}")
        return path
    path = RECIPES_DIR / f"{name}.yaml"
    if not path.is_file():
        own = [r for r in recipe_names() if recipe_task(r) == name]
        if own:  # a task's name: its recipes are where its settings are
            raise BertkitError(f"'{name}' is a task, not a recipe: start from one of its recipes ({', '.join(own)}) "
                               "and name your files with --train-file and --validation-files (`bertkit finetune "
                               "RECIPE --help` lists the task's flags), or from a recipe file of your own")
        hint = difflib.get_close_matches(name, recipe_names(), n=1)
        raise BertkitError(f"unknown recipe '{name}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
                           + f"; available: {', '.join(recipe_names())}")
    return path


def read_yaml(path: Path) -> dict:
    values = load_yaml(path)
    if values is None:  # an empty file (was "No local data for '<its name>'", the defaults' data)
        raise BertkitError(f"{path}: the recipe is empty (a mapping of key: value: task, train_file, ...; `bertkit "
                           "recipes show sst2` shows one)")
    if not isinstance(values, dict):
        raise BertkitError(f"{path}: a recipe must be a mapping of key: value")
    return values


def recipe_task(name: str) -> str:
    """The task a recipe trains (read from its YAML only: nothing heavy is imported), for `--help`."""
    values = read_yaml(recipe_path(name))
    if "adapter" in values:  # a 0.2 recipe
        return values["adapter"]
    return values.get("task", DEFAULT_TASK)


def load_recipe(name: str, overrides: dict | None = None, source: str = "overrides") -> RunConfig:
    """Recipe `name` (or a YAML path) with its `model_overrides` for the chosen model, then `overrides` (flat:
    run fields, `hub_*`, compute fields and the task's options by name) on top; `source` names them in errors (the
    CLI's: "command line")."""
    path = recipe_path(name)
    values = upgrade_flat(read_yaml(path), strict=True)
    values.setdefault("name", path.stem)
    if path.parent != RECIPES_DIR and isinstance(values.get("data_dir"), str):
        values["data_dir"] = _data_dir_of(values["data_dir"], path)
    tuned = values.pop("model_overrides", None) or {}
    values.pop("search_space", None)  # `bertkit search`'s (bertkit/hpsearch.py), not a run's
    if not isinstance(tuned, dict) or not all(isinstance(v, dict) for v in tuned.values()):
        raise BertkitError(f"{path}: 'model_overrides' must map model names to mappings of fields")
    overrides = dict(overrides or {})
    recipe = (values, str(path), False)
    for model, fields in tuned.items():  # check every entry, not only the one used
        resolve([recipe, (fields, f"{path}: model_overrides.{model}", True)])
    model = overrides.get("model", values.get("model", RunConfig.model))
    chosen = {k: v for k, v in tuned.get(model, {}).items() if k not in overrides}
    metrics = overrides.get("metrics")
    if metrics and "main_metric" not in overrides:
        # --metrics without the recipe's main metric: the first of them, as a run without a recipe chooses
        listed = check_type("metrics", metrics, list[str])  # as `resolve` reads the flag: "f1, accuracy"
        for fields in (values, chosen):
            if fields.get("main_metric") not in listed:
                fields.pop("main_metric", None)
    return resolve([recipe, (chosen, f"{path}: model_overrides.{model}", True), (overrides, source, True)])


def _data_dir_of(data_dir: str, recipe: Path) -> str:
    """A recipe file's relative `data_dir`, made absolute (as `--data-dir`'s is): the working folder's where it is
    one, else the one beside the recipe file (a run started elsewhere: `bertkit finetune ../my.yaml`); as written
    where neither is (said when the data loads). It was kept relative, so evaluate found no data elsewhere."""
    if Path(data_dir).is_absolute() or Path(data_dir).is_dir():
        return str(Path(data_dir).resolve())
    beside = recipe.parent / data_dir
    return str(beside.resolve()) if beside.is_dir() else data_dir


# --- run folders ------------------------------------------------------------------------------------------------
# 0.2 fields that are no longer part of a run's config: command-line choices now
DROPPED_0_2 = frozenset({"seeds", "resume", "allow_pickle", "allow_hub_metrics"})


def upgrade_flat(values: dict, strict: bool) -> dict:
    """A config in bertkit 0.2's flat layout (`task: sst2`, `adapter: sequence-classification`, every option at the
    top) → this layout (`task: sequence-classification`, `name: sst2`, `hub:`, `compute:`, `task_options:`);
    anything else is returned as it is. Task options are found by the names each task's options declare (`legacy`
    or the field's own name); options of other tasks at their 0.2 defaults and the fields now given on the command
    line (`DROPPED_0_2`) are left out. `strict`: any other key is an error (recipes) rather than ignored (run
    folders)."""
    if "adapter" not in values:
        return values
    flat = dict(values)
    task_name = flat.pop("adapter")
    task = task_class(task_name)
    out = {"task": task_name, "name": flat.pop("task", "run"), "task_options": {}, **{g: {} for g in NESTED}}
    legacy = option_names(task.Options)
    fields = {f.name: f for f in dataclasses.fields(task.Options)}
    for key, value in flat.items():
        if key in legacy:
            field = legacy[key]
            if key == field and any(old in flat for old in fields[field].metadata.get("legacy", ())):
                continue  # 0.2 knew this option by its old name; this key was another 0.2 adapter's option
            out["task_options"][field] = value
        elif key in FLAT:
            group, field = FLAT[key]
            out[group][field] = value
        elif key in GENERIC or key in ("model_overrides", "search_space"):
            out[key] = value
        elif strict and key not in DROPPED_0_2 and key not in other_options(task):
            raise unknown_key(key, [*GENERIC, *FLAT, *legacy], "bertkit 0.2 config")
    return out


def other_options(task) -> set[str]:
    """The option names of every other task: a 0.2 config.yaml holds them all, at their defaults."""
    return {name for other in all_tasks() if other.Options is not task.Options for name in option_names(other.Options)}


def load_run_config(path) -> RunConfig:
    """The resolved config.yaml of a finished run: this version's layout or bertkit 0.2's flat one. Keys this
    version does not know are ignored (a run folder of a newer version still loads)."""
    path = Path(path)
    values = load_yaml(path) or {}
    if not isinstance(values, dict):
        raise BertkitError(f"{path}: expected a mapping of config fields")
    values = upgrade_flat(values, strict=False)
    task = task_class(values.get("task", DEFAULT_TASK))
    names = {f.name for f in dataclasses.fields(task.Options)}
    kept = {k: v for k, v in values.items() if k in GENERIC}
    for group, cls in NESTED.items():
        fields = {f.name for f in dataclasses.fields(cls)}
        kept[group] = {k: v for k, v in (values.get(group) or {}).items() if k in fields}
    kept["task_options"] = {k: v for k, v in (values.get("task_options") or {}).items() if k in names}
    return resolve([(kept, str(path), False)])


def to_yaml(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)

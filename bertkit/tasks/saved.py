"""What a bertkit run folder's config.yaml says of its task: the task's name, its options and the max length (and the
precision it trained in, which inference follows where it was fp32), read
by the task side itself (the run config, `bertkit.config`, stands above the tasks: it resolves their options through
the registry). Both layouts: this version's (`task:`, `task_options:`) and bertkit 0.2's flat one (`adapter:` names
the task, every option at the top, some under their 0.2 names). Option keys this version does not know are left out
(a run folder of a newer version still loads); the known ones are checked as a recipe's are."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import BertkitError
from ..typed import build, option_names
from ..utils import load_yaml
from .registry import get_task


@dataclass(frozen=True)
class SavedTask:
    task: type  # the task class (its variant for the options, e.g. a regression head)
    options: object  # an instance of its Options
    max_length: int | None


def saved_task(path) -> SavedTask | None:
    """The task of the run folder `path` as its config.yaml records it, or of a folder a task saved (`Task.save`:
    its config.json's `bertkit_task`, `bertkit_task_options`, `bertkit_max_length`); None when neither names a
    task."""
    run = Path(path) / "config.yaml"
    if not run.is_file():
        run = Path(path) / "config.json"
        try:
            values = json.loads(run.read_text()) if run.is_file() else {}
        except (OSError, UnicodeDecodeError, ValueError):
            return None  # (not this module's to say: the model's loading will)
        if not isinstance(values, dict) or "bertkit_task" not in values:
            return None
        values = {"task": values["bertkit_task"], "task_options": values.get("bertkit_task_options"),
                  "max_length": values.get("bertkit_max_length")}
    else:
        values = load_yaml(run) or {}
    if not isinstance(values, dict):
        raise BertkitError(f"{run}: expected a mapping of config fields")
    flat = "adapter" in values  # bertkit 0.2
    name = values.get("adapter" if flat else "task")
    if not isinstance(name, str):
        return None
    cls = get_task(name)
    given = _flat_options(cls.Options, values) if flat else dict(values.get("task_options") or {})
    names = option_names(cls.Options)
    known = {names[k]: v for k, v in given.items() if k in names}
    options = build(cls.Options, known, str(run))
    length = values.get("max_length")
    return SavedTask(cls.resolve(options), options, length if isinstance(length, int) else None)


def json_ready(values) -> bool:
    """A plugin task's options may hold what config.json cannot (a set, a Path): those are not recorded there."""
    try:
        json.dumps(values)
    except (TypeError, ValueError):
        return False
    return True


def inference_precision(requested: str, model) -> str:
    """`--precision` for evaluate, predict and serve: `auto` is fp32 for a run that asked for fp32 (its own numbers,
    not bf16's, on a machine where auto would choose bf16); otherwise as requested."""
    run = Path(model) / "config.yaml"
    values = load_yaml(run) if requested == "auto" and run.is_file() else None
    if not isinstance(values, dict):
        return requested
    compute = values.get("compute")  # (bertkit 0.2's config is flat)
    asked = compute.get("precision") if isinstance(compute, dict) else values.get("precision")
    return "fp32" if asked == "fp32" else requested


def _flat_options(options_class, values: dict) -> dict:
    """A 0.2 config's task options: the keys its options know, by their names or 0.2 names; a key that is this
    version's name of an option 0.2 knew by another name belonged to another 0.2 task, and is left out."""
    legacy = option_names(options_class)
    fields = {f.name: f for f in dataclasses.fields(options_class)}
    out = {}
    for key, value in values.items():
        if key in legacy:
            field = legacy[key]
            if key == field and any(old in values for old in fields[field].metadata.get("legacy", ())):
                continue
            out[field] = value
    return out

"""The task registry: task name → task class. Every command, the trainer, the reports, serve and export find a task
here and speak only to its class (`bertkit.tasks.base.Task`); none of them knows a task by name.

Three ways in, looked up lazily (the first time a task name is asked for, so `bertkit --help` stays light):
- bertkit's own tasks register themselves when their module is imported (`BUILTIN` lists the modules);
- `bertkit.register_task(MyTask)` from a notebook or a script;
- the entry-point group `bertkit.tasks` of installed packages: in a plugin's pyproject.toml,
  `[project.entry-points."bertkit.tasks"] my-task = "my_package.my_module:MyTask"` (or a module that registers its
  tasks when imported). A plugin that fails to load is named in the error of the task it was to provide, and the
  other tasks stay usable.

Example:
```python
>>> from bertkit.tasks import Task, register_task, get_task
>>> @register_task
... class Cloze(Task):
...     name = "cloze"
>>> get_task("cloze") is Cloze
True
```
"""

from __future__ import annotations

import difflib
import importlib
import json
from pathlib import Path

from ..errors import BertkitError

BUILTIN = ("classification", "token_classification", "question_answering", "multiple_choice")
ENTRY_POINTS = "bertkit.tasks"
_TASKS: dict[str, type] = {}
_BROKEN: dict[str, str] = {}  # entry-point name → why it did not load
_loaded = False


def register_task(cls=None, *, replace: bool = False):
    """Register a task class under its `name` (usable as a decorator). A second class under a taken name is an
    error unless `replace` (a notebook re-running its cell)."""
    def add(cls):
        name = getattr(cls, "name", "")
        if not name or not isinstance(name, str):
            raise BertkitError(f"task class {cls.__name__} has no `name`")
        old = _TASKS.get(name)
        if old is not None and old is not cls and not replace and old.__qualname__ != cls.__qualname__:
            raise BertkitError(f"task '{name}' is already registered ({old.__module__}.{old.__qualname__}); pass "
                               "replace=True to replace it")
        _TASKS[name] = cls
        return cls

    return add if cls is None else add(cls)


def _load() -> None:
    """Import the built-in task modules, then the plugins' entry points, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in BUILTIN:
        importlib.import_module(f"{__package__}.{module}")
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        try:
            obj = ep.load()
            if isinstance(obj, type):
                register_task(obj, replace=True)
        except Exception as e:  # a broken plugin must not take the built-in tasks down with it
            _BROKEN[ep.name] = f"the plugin {ep.value} ({ep.dist.name if ep.dist else '?'}) failed to load: " \
                               f"{type(e).__name__}: {e}"


def task_names() -> list[str]:
    _load()
    return sorted(_TASKS)


def get_task(name: str) -> type:
    """The task class registered as `name`; BertkitError naming the known tasks otherwise."""
    if name in _TASKS:
        return _TASKS[name]
    _load()
    if name in _TASKS:
        return _TASKS[name]
    if name in _BROKEN:
        raise BertkitError(f"task '{name}': {_BROKEN[name]}")
    close = difflib.get_close_matches(name, list(_TASKS), n=1)
    raise BertkitError(f"unknown task '{name}'" + (f" (did you mean '{close[0]}'?)" if close else "")
                       + f"; known tasks: {', '.join(sorted(_TASKS))}")


def checkpoint_task(name: str) -> tuple[type, str]:
    """(task class, local path) of a fine-tuned model folder (a bertkit run, an ONNX export, or any checkpoint with
    a task head): the task its config.yaml names, else the task whose head its config.json `architectures` has.
    Loads no weights."""
    from ..models import resolve_model

    path, local = resolve_model(name)
    if not local:
        raise BertkitError(f"model folder not found: {name}")
    run = Path(path) / "config.yaml"
    if run.is_file():
        from ..config import load_run_config

        cfg = load_run_config(run)
        return get_task(cfg.task).resolve(cfg.task_options), path
    cls = head_task(path)
    if cls is None:
        architectures = json.loads((Path(path) / "config.json").read_text()).get("architectures")
        _load()
        heads = sorted({f"*{c.architecture}" for c in _TASKS.values() if c.architecture})
        raise BertkitError(f"{path} is not a fine-tuned checkpoint of a known task (architectures: {architectures});"
                           f" expected one of: {', '.join(heads)}")
    return cls, path


def head_task(name: str) -> type | None:
    """The task class of a local checkpoint's head, from its config.json (architectures, problem_type); None for a
    base model or a hub id. Loads nothing."""
    from ..models import resolve_model

    path, local = resolve_model(name)
    if not local:
        return None
    config = json.loads((Path(path) / "config.json").read_text())
    _load()
    for cls in _TASKS.values():
        found = cls.for_checkpoint(config)
        if found is not None:
            return found
    return None

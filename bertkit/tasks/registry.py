"""The task registry: task name → task class. Every command, the trainer, the reports, serve and export find a task
here and speak only to its class (`bertkit.tasks.base.Task`); none of them knows a task by name.

Three ways in, looked up lazily (the first time a task name is asked for, so `bertkit --help` stays light):
- bertkit's own tasks, declared in `BUILTIN` as "module:Class" exactly as a plugin declares its entry point, and
  loaded the same way (their modules do not import this one, so there is no import circle);
- `bertkit.register_task(MyTask)` from a notebook or a script (also usable as a class decorator);
- the entry-point group `bertkit.tasks` of installed packages: in a plugin's pyproject.toml,
  `[project.entry-points."bertkit.tasks"] my-task = "my_package.my_module:MyTask"` (or a module that registers its
  tasks when imported). A plugin that fails to load is named in the error of the task it was to provide, and the
  other tasks stay usable; one whose class has a taken name (a built-in's, another plugin's) is not loaded, said.

Example:
```python
from bertkit.tasks import Task, get_task, register_task

@register_task
class Cloze(Task):
    name = "cloze"

assert get_task("cloze") is Cloze
```
(Not run as a doctest: a registration lasts for the whole process; tests/test_custom_task.py registers a task this
way and checks it.)
"""

from __future__ import annotations

import difflib
import importlib

from ..errors import BertkitError
from ..utils import say

BUILTIN = {"sequence-classification": "bertkit.tasks.classification:SequenceClassification",
           "token-classification": "bertkit.tasks.token_classification:TokenClassification",
           "question-answering": "bertkit.tasks.question_answering:QuestionAnswering",
           "multiple-choice": "bertkit.tasks.multiple_choice:MultipleChoice"}
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
        # a built-in's name is taken before its module is loaded too
        taken = f"{old.__module__}.{old.__qualname__}" if old is not None else BUILTIN.get(name, "").replace(":", ".")
        same = old is cls or f"{cls.__module__}.{cls.__qualname__}" == taken or (
            old is not None and old.__qualname__ == cls.__qualname__)  # a notebook's cell run again
        if taken and not replace and not same:
            raise BertkitError(f"task '{name}' is already registered ({taken}); pass replace=True to replace it")
        _TASKS[name] = cls
        return cls

    return add if cls is None else add(cls)


def _load() -> None:
    """Import the built-in task modules, then the plugins' entry points, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for value in BUILTIN.values():
        module, _, name = value.partition(":")
        cls = getattr(importlib.import_module(module), name)
        _TASKS.setdefault(cls.name, cls)  # one registered by hand in its place (replace=True) stays
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        plugin = f"the plugin {ep.value} ({ep.dist.name if ep.dist else '?'})"
        try:
            obj = ep.load()
        except Exception as e:  # a broken plugin must not take the built-in tasks down with it
            _BROKEN[ep.name] = f"{plugin} failed to load: {type(e).__name__}: {e}"
            continue
        if isinstance(obj, type):
            _add_plugin(obj, ep.name, plugin)


def _add_plugin(cls: type, entry: str, plugin: str) -> None:
    """A plugin's task class, under its `name`; one whose name is taken (a built-in's, another plugin's: a subclass
    that inherits its parent's) is not loaded, said on standard error, and a lookup of its entry point says why."""
    name, old = getattr(cls, "name", ""), None
    if isinstance(name, str) and name:
        old = _TASKS.get(name)
    if old is not None and old is not cls:
        inherited = " (inherited: give the class its own `name`)" if "name" not in vars(cls) else ""
        _BROKEN[entry] = (f"{plugin} was not loaded: its class's name '{name}' is taken by "
                          f"{old.__module__}.{old.__qualname__}{inherited}")
        say(f"bertkit: task '{entry}': {_BROKEN[entry]}")
        return
    try:
        register_task(cls)
    except BertkitError as e:
        _BROKEN[entry] = f"{plugin} was not loaded: {e}"
        return
    if name != entry:
        _BROKEN[entry] = f"{plugin} registers its task as '{name}', not as its entry point's name '{entry}'"


def task_names() -> list[str]:
    _load()
    return sorted(_TASKS)


def all_tasks() -> list[type]:
    """Every registered task class (built-ins first)."""
    _load()
    return list(_TASKS.values())


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

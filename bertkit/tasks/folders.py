"""Which task a model folder holds: a bertkit run (its config.yaml names the task), an ONNX export (the run's
config.yaml is copied into it), or any Hugging Face checkpoint with a task head (its config.json `architectures`).
Nothing but config files is read (a hub id's files are fetched into the hub's cache first, and read there)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import BertkitError
from ..models import checkpoint_config, hub_snapshot, resolve_model
from .registry import all_tasks
from .saved import saved_task


def checkpoint_task(name: str, allow_pickle: bool = False) -> tuple[type, str]:
    """(task class, local path) of a fine-tuned model folder: the task its config.yaml names, else the task whose
    head its config.json has. A hub id's path is its files in the hub's cache (pickles only with `allow_pickle`)."""
    path, local = resolve_model(name)
    if not local:
        path = hub_snapshot(name, allow_pickle)
    saved = saved_task(path)
    if saved is not None:
        return saved.task, path
    cls = head_task(path)
    if cls is None:
        architectures = json.loads((Path(path) / "config.json").read_text()).get("architectures")
        heads = sorted({f"*{c.architecture}" for c in all_tasks() if c.architecture})
        raise BertkitError(f"{path} is not a fine-tuned checkpoint of a known task (architectures: {architectures});"
                           f" expected one of: {', '.join(heads)}")
    return cls, path


def head_task(name: str) -> type | None:
    """The task class of a checkpoint's head (a folder or a hub id), from its config.json (architectures,
    problem_type); None for a base model, or a hub id whose config cannot be had (loading it then says why)."""
    config = checkpoint_config(name)
    for cls in all_tasks():
        found = cls.for_checkpoint(config)
        if found is not None:
            return found
    return None


def load_task(name: str, allow_pickle: bool = False):
    """The task of a fine-tuned model folder (a run, or any checkpoint with a known head), loaded with its
    weights, options and max length."""
    cls, path = checkpoint_task(name, allow_pickle)  # a hub id's: its cached folder
    return cls.from_pretrained(path, allow_pickle=allow_pickle)

"""Tasks: one module per task over the contract in `base.py`, found by name through the registry (`registry.py`).

Built in: sequence-classification (with its regression and multi-label heads), token-classification,
question-answering, multiple-choice. Add one with `bertkit.register_task` or a package's `bertkit.tasks` entry
point (docs/design.md, examples/custom_task.py). Names are imported on first use: `bertkit.tasks.registry` (what
`bertkit --help` and the config need) loads no task module, torch or transformers.
"""

import importlib

_PUBLIC = {
    "Task": "base", "Adapter": "base", "NoOptions": "base",
    "SequenceClassification": "classification", "ClassificationOptions": "classification",
    "SequenceRegression": "classification", "MultiLabelClassification": "classification",
    "TokenClassification": "token_classification", "TokenClassificationOptions": "token_classification",
    "QuestionAnswering": "question_answering", "QuestionAnsweringOptions": "question_answering",
    "MultipleChoice": "multiple_choice", "MultipleChoiceOptions": "multiple_choice",
    "register_task": "registry", "get_task": "registry", "task_names": "registry", "all_tasks": "registry",
    "checkpoint_task": "folders", "head_task": "folders", "load_task": "folders",
    "adapter_for_checkpoint": "folders",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'bertkit.tasks' has no attribute {name!r}")
    module = importlib.import_module(f".{_PUBLIC[name]}", __name__)
    value = getattr(module, "load_task" if name == "adapter_for_checkpoint" else name)  # the 0.2 name
    globals()[name] = value
    return value

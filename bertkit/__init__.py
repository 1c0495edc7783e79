"""bertkit: the BERT paper's recipes, one command each, on Hugging Face transformers + accelerate.

Notebook use:
```python
import bertkit
clf = bertkit.SequenceClassification.from_pretrained("minilm-l6", label_names=["negative", "positive"])
cfg = bertkit.run_config(name="sst2", epochs=1, output_dir="runs/demo", precision="auto")
bertkit.Trainer(clf, cfg).fit({"text": texts, "label": labels}, {"dev": {"text": dev, "label": dev_labels}})
clf.predict(["a gripping, funny film"])
ner = bertkit.load_task("runs/conll2003")  # a run of `bertkit finetune conll2003`
ner.predict([["EU", "rejects", "German", "call"]])  # [{tokens, tags, entities}]
qa = bertkit.load_task("runs/squad")  # a run of `bertkit finetune squad`
qa.predict(["Who won?"], ["The Denver Broncos won Super Bowl 50."])  # [{answer, score, start, end}]
mc = bertkit.load_task("runs/swag")  # a run of `bertkit finetune swag`
mc.predict("A man sits at a piano.", ["He plays.", "He eats it."])  # [{label, ending, score, probabilities}]
```
A task of one's own: subclass `bertkit.Task` and `bertkit.register_task` it (examples/custom_task.py).
"""

__version__ = "0.2.0"

import importlib  # noqa: E402

# Public names, imported on first use: `import bertkit` (and `bertkit --help`) stays light; torch, transformers and
# datasets load when a name that needs them is used.
_PUBLIC = {
    "RunConfig": "config", "run_config": "config", "FinetuneConfig": "config_files", "load_recipe": "config_files",
    "BertkitError": "errors", "DataError": "errors", "Stopped": "errors", "compute_metrics": "metrics",
    "resolve_metrics": "metrics",
    "Task": "tasks", "Adapter": "tasks", "register_task": "tasks", "get_task": "tasks", "task_names": "tasks",
    "load_task": "tasks", "adapter_for_checkpoint": "tasks", "SequenceClassification": "tasks",
    "SequenceRegression": "tasks", "MultiLabelClassification": "tasks", "TokenClassification": "tasks",
    "QuestionAnswering": "tasks", "MultipleChoice": "tasks", "casing_type_ids": "tasks.casing", "Trainer": "training",
    "search": "hpsearch",
}
__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))

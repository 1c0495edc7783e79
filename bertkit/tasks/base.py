"""The contract every task fulfils. The trainer, `evaluate`, `predict`, `serve`, `export` and the reports speak only
to this interface; a task is one class (with its options dataclass) and nothing outside `bertkit/tasks/` knows it
by name. docs/tasks.md ("The task contract") has the table of what follows.

What a task's author must write (examples/custom_task.py writes these and one optional hook):
- class attributes `name` (the registry key), `auto_model_class` and `architecture` (the head), `metric_builtins`
  and `default_metrics` (what it scores, the first choosing the best model), and, where the task has them,
  `Options` (a frozen dataclass: recipe keys under `task_options:`, flat flags), `input_fields`, `example_fields`
  and `text_fields`;
- `load_data(cfg)` and `load_split(cfg, split, label_names, file)`: the run's files (or the hub) read and checked
  into examples;
- `encode(examples)`: examples → model inputs with a `length` column;
- `score(outputs, examples, features, metric_hooks)`: model outputs → metrics and one prediction per example.

Everything else is an optional hook with a default that works for a sequence-level task on a BERT-like model:
`collate` and `compute_loss` (the tokenizer's padding, the model's own loss), `output_reducer`,
`write_predictions`, `save` (a plain Hugging Face folder its `auto_model_class` loads), `predict_rows` (rows of
`input_fields` → answers, for predict, serve and notebooks), the `bertkit predict` file hooks (`read_inputs`,
`check_row`, `format_rows`, `add_predict_flags`, `predict_options`, `predict_slices`, `output_whole`), the request
hooks (`request_body`, a plain dataclass in `requests.py`, `request_rows`, `request_example`, `describe`: `serve`
adapts them to HTTP), `export_inputs` (the ONNX graph's example inputs), `report_plots`, and the variants hooks
(`resolve`, `for_checkpoint`, `metrics_for`, `prepare_options`, `run_options`). The rest is machinery a task
inherits and does not override (`from_pretrained`, `from_config`, `examples`, `infer`, `pad_to_multiple_of`, ...).
The hooks outside training (predict, serve, export, the report) and their defaults are `TaskIO`'s (io.py), which
`Task` inherits; the built-in tasks write theirs the same way, as a mixin beside the task (`ClassificationIO` in
classification_io.py, ...): a task's own module reads as what it trains.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import datasets
import torch

from ..errors import BertkitError
from ..families import fit_tokenizer, max_positions
from ..inference import forward_all
from ..models import checkpoint_config, load_pretrained, load_tokenizer, resolve_model
from ..typed import build, to_dict
from ..utils import atomic_path, say, set_seed
from .inputs import as_dataset, by_names, check_inference, label_list
from .io import TaskIO
from .saved import json_ready, saved_task


@dataclass(frozen=True)
class NoOptions:
    """A task without options of its own."""


def head_labels(config: dict) -> list[str] | None:
    """The label names of a checkpoint's head from its config.json; None where it names none."""
    if "id2label" not in config:
        return None
    return [config["id2label"][str(i)] for i in range(len(config["id2label"]))]


POOLED_HEADS = ("AutoModelForSequenceClassification", "AutoModelForMultipleChoice")


class Task(TaskIO):
    # --- what the task is (class attributes a task sets) ------------------------------------------------------
    name = ""  # registry key, the `task` of a run config, e.g. "sequence-classification"
    Options = NoOptions  # the task's own options (recipe `task_options:`, flat flags)
    auto_model_class = None  # e.g. transformers.AutoModelForSequenceClassification
    architecture = ""  # config.json `architectures` suffix of this task's head, e.g. "ForSequenceClassification"
    pipeline_tag: str | None = None  # the Hub's name of the task (model card, export.json)
    output_keys: tuple[str, ...] = ("logits",)  # model outputs kept by inference (and the ONNX graph's outputs)
    sequence_outputs: tuple[str, ...] = ()  # those with a sequence axis (cut to each feature's length)
    label_keys: tuple[str, ...] = ("labels",)  # batch keys that are targets, not model inputs at inference
    default_max_length = 128  # word pieces per input when none is given
    named_labels = True  # the head's outputs are named classes (config id2label); QA's start/end are not
    metric_builtins: dict = {}  # metric name → what makes its evaluate module (a class), computed locally
    default_metrics: tuple[str, ...] = ()  # metrics when the recipe names none; the first selects the best model
    lower_is_better: frozenset = frozenset()  # metric names whose best value is the lowest
    uses_pooler = False  # the head reads the pooled [CLS] vector (reinit_pooler; LoRA trains it); unset: as its head
    input_fields: dict[str, type] = {}  # one prediction input: field → str or list (of texts) (JSONL rows, serve)
    example_fields: tuple[str, ...] = ()  # columns a training or evaluation example has (`Trainer.fit` checks them)
    text_fields: tuple[str, ...] = ()  # those (and optional ones) that hold texts or lists of words: strings only
    optional_fields: dict[str, type] = {"id": str | int}  # fields an input row may have
    runner = None  # None: the torch model through `forward_all`; else a callable with its contract (ONNX Runtime)

    def __init_subclass__(cls, **kwargs):
        """A task that does not set `uses_pooler` gets its head's: transformers' sequence-classification and
        multiple-choice heads read the pooled [CLS] vector (a plugin on those heads was told it had no pooler)."""
        super().__init_subclass__(**kwargs)
        if not any("uses_pooler" in vars(c) for c in cls.__mro__[:cls.__mro__.index(Task)]):
            cls.uses_pooler = getattr(cls.auto_model_class, "__name__", "") in POOLED_HEADS

    def __init__(self, model, tokenizer, label_names: list[str] | None = None, max_length: int | None = None,
                 options=None):
        self.model, self.tokenizer = model, fit_tokenizer(tokenizer, model.config)  # token type ids as it reads them
        self.options = options if options is not None else self.Options()
        self.source = getattr(model.config, "_name_or_path", "")  # what it was loaded from (from_pretrained: name)
        limit = max_positions(model.config)
        if max_length and limit and max_length > limit:
            raise BertkitError(f"max_length {max_length}: the model takes at most {limit} tokens in a sequence")
        default = self.default_max_length
        self.max_length = max_length or (min(default, limit) if default and limit else default)
        self.label_names = label_list(label_names) if label_names else self._labels_from_config(model.config)

    def _labels_from_config(self, config) -> list[str]:
        if not self.named_labels:
            return []  # config.num_labels sizes the head; it names no labels
        return [config.id2label[i] for i in range(len(config.id2label))]

    # --- which class (a task may have variants, e.g. heads chosen by problem_type) ----------------------------
    @classmethod
    def resolve(cls, options) -> type[Task]:
        """The class that runs with `options` (itself, unless the task has variants)."""
        return cls

    @classmethod
    def for_checkpoint(cls, config: dict) -> type[Task] | None:
        """This task's class for a checkpoint's config.json (its `architectures`), or None when it is not one."""
        if cls.architecture and any(a.endswith(cls.architecture) for a in config.get("architectures") or []):
            return cls
        return None

    @classmethod
    def metrics_for(cls, options) -> tuple[dict, tuple[str, ...]]:
        """(built-in metrics, default metric names) of the task with `options`."""
        task = cls.resolve(options)
        return task.metric_builtins, task.default_metrics

    @classmethod
    def check_metrics(cls, metrics: list, options, source: str) -> None:
        """Refuse a metric name that is not this task's and not a local metric script (the hub is never asked)."""
        builtins = cls.metrics_for(options)[0]
        for name in metrics:
            if name not in builtins and not Path(name).exists():
                raise BertkitError(f"{source}: metric {name!r} is not one of the {cls.name} task's "
                                   f"({', '.join(builtins)}) nor a local metric script")

    # --- construction ------------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, name: str, label_names: list[str] | None = None, max_length: int | None = None,
                        allow_pickle: bool = False, options=None, seed: int | None = None, **option_values):
        """A base checkpoint gets a new head for `label_names` (drawn from `seed`'s random numbers where one is
        given, as `bertkit finetune` draws it from the run's; otherwise from torch's as they stand); a fine-tuned one
        keeps its own labels. The task's
        options are `options` (an `Options` instance) or given by name (`doc_pooling="mean"`); a bertkit run folder
        brings its own options and max length (its config.yaml) under those given here, so that evaluate and
        predict encode exactly as the run did."""
        if not hasattr(cls.auto_model_class, "from_pretrained"):
            raise BertkitError(f"{cls.__name__} has no auto_model_class (its head: transformers' AutoModelFor...)")
        if not isinstance(name, (str, Path)):
            raise BertkitError(f"from_pretrained takes a checkpoint's name or folder, got a {type(name).__name__}; "
                               f"a model loaded already: {cls.__name__}(model, tokenizer, label_names)")
        name = str(name)
        label_names = label_list(label_names) if label_names else label_names  # before the model loads
        path, local = resolve_model(name)
        saved_length, base = cls.run_settings(path) if local else (None, None)
        max_length = max_length or saved_length
        if options is None:
            options = build(cls.Options, option_values, "options", base=base)
        elif option_values:
            options = build(cls.Options, option_values, "options", base=options)
        if isinstance(options, cls.Options) and cls.resolve(options) is not cls and \
                issubclass(cls.resolve(options), cls):  # a variant of cls; a variant asked for by name stays
            cls = cls.resolve(options)
        elif base is None:  # the head's variant (regression, multi-label) from its config.json, a hub id's too
            found = cls.for_checkpoint(checkpoint_config(name))
            cls = found if found is not None and issubclass(found, cls) else cls
        if seed is not None:
            set_seed(seed)
        model = cls._load_model(name, label_names, allow_pickle)
        task = cls(model, load_tokenizer(name), label_names, max_length, options)
        task.source = name
        return task

    @classmethod
    def _load_model(cls, name: str, label_names: list[str] | None, allow_pickle: bool):
        """The checkpoint under this task's head class. A head it lacks, or one for other labels (a run of MNLI before
        RTE) or of another task (SST-2's before CoNLL's), starts random, and a line says so."""
        config = checkpoint_config(name)
        architectures = config.get("architectures") or []
        ours = any(a.endswith(cls.architecture) for a in architectures)
        old = head_labels(config) if ours and label_names else None
        model, missing, resized = load_pretrained(cls.auto_model_class, name, allow_pickle=allow_pickle,
                                                  ignore_mismatched_sizes=True, **cls._head_kwargs(label_names))
        prefix = model.base_model_prefix + "."
        head = sorted({n.rsplit(".", 1)[0] for n, _ in model.named_parameters() if not n.startswith(prefix)})
        new = f" for {list(label_names)}" if label_names else ""
        if old is not None and old != list(label_names):
            cls._new_head(model)
            say(f"{name}: its head for {old} is replaced by a new one{new}")
        elif not ours and architectures and set(head) - set(missing):  # another task's head, named as ours
            cls._new_head(model)
            say(f"{name}: its {architectures[0]} head is replaced by a new one{new}")
        elif set(head) & set(missing + resized):
            say(f"{name}: a new head{new} ({', '.join(head)}), randomly initialised")
        return model

    @classmethod
    def run_settings(cls, path) -> tuple[int | None, object]:
        """(max length, options) recorded in a bertkit run folder's config.yaml, or by `save` in its config.json;
        (None, None) for other folders."""
        saved = saved_task(path)
        return (saved.max_length, saved.options) if saved and isinstance(saved.options, cls.Options) else (None, None)

    @classmethod
    def _head_kwargs(cls, label_names) -> dict:
        """`from_pretrained` arguments that size a new head for `label_names`."""
        if not label_names:
            return {}
        return dict(id2label=dict(enumerate(label_names)), label2id={n: i for i, n in enumerate(label_names)})

    @staticmethod
    def _new_head(model) -> None:
        """Re-initialise a head that kept its shape but now stands for other labels."""
        head = getattr(model, "classifier", None)
        if isinstance(head, torch.nn.Linear):
            torch.nn.init.normal_(head.weight, std=model.config.initializer_range)
            torch.nn.init.zeros_(head.bias)

    @classmethod
    def from_config(cls, cfg, label_names: list[str] | None = None, allow_pickle: bool = False):
        """The task a run config asks for: `cfg.model` with a head for `label_names` (from the run's seed) and the
        run's options."""
        return cls.resolve(cfg.task_options).from_pretrained(cfg.model, label_names=label_names,
                                                             max_length=cfg.max_length, allow_pickle=allow_pickle,
                                                             options=cfg.task_options, seed=cfg.seed)

    def run_options(self):
        """The options that describe this task as it is (what a run folder records). An option left to a default
        that follows from what the run records too (a window overlap from max_length) stays as given: the run's
        config is then the trainer's as it is, built once."""
        return self.options

    # --- data ------------------------------------------------------------------------------------------------
    @classmethod
    def load_data(cls, cfg) -> tuple[datasets.Dataset, dict[str, datasets.Dataset], list[str]]:
        """Read and validate the run's data: (train examples, {eval name: examples}, label names). Called before
        anything is written, so bad input leaves no run folder behind."""
        raise NotImplementedError(f"task {cls.name} reads no data files")

    @classmethod
    def load_split(cls, cfg, split: str, label_names: list[str], file: str | None = None) -> datasets.Dataset:
        """One labelled split by name ('dev', 'test', a validation file's stem) or an explicit file."""
        raise NotImplementedError(f"task {cls.name} reads no data files")

    @classmethod
    def main_split(cls, cfg) -> str:
        """The name of the split a run picks its best checkpoint on (`bertkit evaluate`'s default split): the first
        validation file's stem, or the hub's first evaluation split (`data.sources.main_split`)."""
        from ..data.sources import main_split

        return main_split(cfg)

    @classmethod
    def prepare_options(cls, options, train: datasets.Dataset, label_names: list[str], log=print):
        """The options a run records once its training data is known: the label names the data has, where the
        options name labels and none were given; a task adds its own (class weights 'balanced' → numbers)."""
        if getattr(options, "label_names", None) == [] and label_names:
            return replace(options, label_names=list(label_names))
        return options

    # --- features and training --------------------------------------------------------------------------------
    def examples(self, data) -> datasets.Dataset:
        """Training or evaluation examples as a Dataset (`inputs.as_dataset`: a Dataset, a dict of lists, a
        DataFrame, records; a missing value in a column the task reads refused, the row named); label names in a
        `label` column are mapped to ids, and a label that is neither one of the names nor an id is refused (the
        row named). A Dataset's ClassLabel column is read by its names."""
        ds = self._checked(data)
        if not self.named_labels or "label" not in ds.column_names or not len(ds):
            return ds
        names = self.label_names
        ds = by_names(ds, names)
        for i, x in enumerate(ds["label"]):
            if x not in names and not (type(x) is int and 0 <= x < len(names)):
                hint = " (-1 marks an unlabelled row, as in GLUE's test splits)" if x == -1 else ""
                raise BertkitError(f"row {i}: label {x!r} is neither one of {names} nor an id 0-{len(names) - 1}"
                                   + hint)
        if isinstance(ds[0]["label"], str):
            ds = ds.map(lambda ex: {"label": names.index(ex["label"])})
        return ds

    def _checked(self, data) -> datasets.Dataset:
        return as_dataset(data, read=self.example_fields, texts=self.text_fields)

    def encode(self, examples: datasets.Dataset) -> datasets.Dataset:
        raise NotImplementedError

    def collate(self, features: list[dict]) -> dict:
        """Padded model inputs (and targets) of a batch of feature rows."""
        from transformers import DataCollatorWithPadding

        if getattr(self, "_collator", None) is None:
            self._collator = DataCollatorWithPadding(self.tokenizer)
        keep = [k for k in features[0] if k in ("input_ids", "token_type_ids", "attention_mask", *self.label_keys)]
        return self._collator([{k: f[k] for k in keep} for f in features])

    def pad_to_multiple_of(self, multiple: int | None) -> None:
        """Pad batches to a multiple of `multiple` positions (8 on GPUs: tensor-core friendly shapes)."""
        collator = getattr(self, "_collator", None)
        if collator is not None and hasattr(collator, "pad_to_multiple_of"):
            collator.pad_to_multiple_of = multiple

    def fit_to(self, train: datasets.Dataset, log=print) -> None:
        """What the task takes from a run's training examples before its first step (`prepare_options`' part for a
        task built in a notebook: classification's class weights 'balanced')."""

    def compute_loss(self, model, batch: dict) -> torch.Tensor:
        """The training loss of one collated batch; `model` is the (possibly distributed) wrapper of `self.model`."""
        return model(**batch).loss

    def infer(self, features: datasets.Dataset, batch_size: int = 64, precision: str = "fp32") -> list[dict]:
        """Model outputs for tokenised `features`, one dict per feature in input order (`forward_all`'s contract);
        an adapter given another `runner` (an exported ONNX graph) answers the same way."""
        if self.runner is None:
            check_inference(batch_size, precision)
        return (self.runner or forward_all)(self, features, batch_size, precision)

    # --- answers ---------------------------------------------------------------------------------------------
    def output_reducer(self, features):
        """None, or f(feature index, its outputs) → what `score` needs of them, applied by inference as each batch
        comes back (QA keeps a window's answer candidates, not its logits)."""
        return None

    def score(self, outputs: list[dict], examples: datasets.Dataset, features: datasets.Dataset,
              metric_hooks) -> tuple[dict, list[dict]]:
        """(metrics, one prediction dict per example)."""
        raise NotImplementedError

    def write_predictions(self, directory, split: str, predictions: list[dict], main: bool = False) -> None:
        """One evaluation split's predictions in the run folder: `predictions_<split>.jsonl` (a task may add its
        own formats); `main` marks the split that selects the best model."""
        with atomic_path(Path(directory) / f"predictions_{split}.jsonl") as p:
            p.write_text("".join(json.dumps(x) + "\n" for x in predictions))

    def save(self, directory, state_dict: dict | None = None) -> Path:
        """A standard Hugging Face folder (safetensors, config with id2label, tokenizer), written atomically.
        `state_dict`: the weights to write (default: the model's own; a distributed run passes the gathered ones)."""
        with atomic_path(directory, is_dir=True) as tmp:
            if self.label_names:
                self.model.config.id2label = dict(enumerate(self.label_names))
                self.model.config.label2id = {n: i for i, n in enumerate(self.label_names)}
            options = to_dict(self.run_options())  # what load_task reads back where the folder has no run
            if json_ready(options):  # config.yaml (transformers keeps the keys, unread)
                self.model.config.bertkit_task, self.model.config.bertkit_max_length = self.name, self.max_length
                self.model.config.bertkit_task_options = options
            self.model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
            self.tokenizer.save_pretrained(tmp)
        return Path(directory)


Adapter = Task  # the 0.2 name

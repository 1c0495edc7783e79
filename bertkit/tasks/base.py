"""The contract every task adapter fulfils; the trainer and the CLI speak only to this interface.

An adapter owns a tokenizer, a Hugging Face model and the label names, and knows how to
1. `encode` raw examples (a `datasets.Dataset`) into model features (with a `length` column),
2. `collate` features into a padded batch,
3. `score` model outputs against the raw examples (metrics + predictions),
4. `save` itself as a plain Hugging Face folder that `AutoModelFor...` loads without bertkit,
5. `write_predictions` of an evaluation split into the run folder (JSONL; a task may add its own formats).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import datasets
import torch

from ..inference import forward_all
from ..models import load_pretrained, load_tokenizer, resolve_model
from ..utils import atomic_path


def head_labels(name: str) -> list[str] | None:
    """The label names of a fine-tuned local checkpoint's head; None for a base model or a hub id."""
    path, local = resolve_model(name)
    config = json.loads((Path(path) / "config.json").read_text()) if local else {}
    heads = ("ForSequenceClassification", "ForTokenClassification")
    if not any(a.endswith(heads) for a in config.get("architectures") or []) or "id2label" not in config:
        return None
    return [config["id2label"][str(i)] for i in range(len(config["id2label"]))]


class Adapter:
    name = ""  # the `adapter` field of a run config, e.g. "sequence-classification"
    auto_model_class = None  # e.g. transformers.AutoModelForSequenceClassification
    output_keys: tuple[str, ...] = ("logits",)  # model outputs kept by inference
    sequence_outputs: tuple[str, ...] = ()  # those with a sequence axis (cut to each feature's length)
    label_keys: tuple[str, ...] = ("labels",)  # batch keys that are targets, not model inputs at inference
    default_max_length: int = 128  # word pieces per input when none is given (e.g. loading a run for predict)
    metric_builtins: dict | None = None  # metric name → evaluate module class; None: the classification built-ins
    runner = None  # None: the torch model through `forward_all`; else a callable with its contract (ONNX Runtime)

    def __init__(self, model, tokenizer, label_names: list[str] | None = None, max_length: int | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.source = getattr(model.config, "_name_or_path", "")  # what it was loaded from (from_pretrained: the name)
        self.max_length = max_length or self.default_max_length
        self.label_names = list(label_names) if label_names else self._labels_from_config(model.config)

    @staticmethod
    def _labels_from_config(config) -> list[str]:
        return [config.id2label[i] for i in range(len(config.id2label))]

    @classmethod
    def from_pretrained(cls, name: str, label_names: list[str] | None = None, max_length: int | None = None,
                        allow_pickle: bool = False, **options):
        """A base checkpoint gets a new head for `label_names`; a fine-tuned one keeps its own labels.
        `options` are the adapter's own constructor settings (see `options_from_config`). A bertkit run folder
        (one with the run's config.yaml) brings its own max length and settings unless they are given here,
        so evaluate and predict encode exactly as the run did (e.g. the same NER or QA windows)."""
        path, local = resolve_model(name)
        if local:
            max_length, options = cls.run_settings(path, max_length, options)
        kwargs, old = {}, None
        if label_names:
            kwargs = dict(num_labels=len(label_names), id2label=dict(enumerate(label_names)),
                          label2id={n: i for i, n in enumerate(label_names)})
            old = head_labels(name)
            if old is not None and old != list(label_names):  # a run of another task (e.g. MNLI before RTE)
                kwargs["ignore_mismatched_sizes"] = True
        model = load_pretrained(cls.auto_model_class, name, allow_pickle=allow_pickle, **kwargs)
        if old is not None and old != list(label_names):
            head = getattr(model, "classifier", None)
            if isinstance(head, torch.nn.Linear):  # same size, other labels: still a new head
                torch.nn.init.normal_(head.weight, std=model.config.initializer_range)
                torch.nn.init.zeros_(head.bias)
            print(f"{name}: its head for {old} is replaced by a new one for {list(label_names)}", file=sys.stderr)
        adapter = cls(model, load_tokenizer(name), label_names, max_length, **options)
        adapter.source = name
        return adapter

    @classmethod
    def run_settings(cls, path, max_length: int | None = None, options: dict | None = None) -> tuple[int | None, dict]:
        """(max length, adapter settings) of a bertkit run folder (one with the run's config.yaml), under the ones
        given; a folder without config.yaml: those given."""
        run = Path(path) / "config.yaml"
        if not run.is_file():
            return max_length, dict(options or {})
        from ..config import load_run_config

        cfg = load_run_config(run)
        return max_length or cfg.max_length, {**cls.options_from_config(cfg), **(options or {})}

    @classmethod
    def options_from_config(cls, cfg) -> dict:
        """Task-specific constructor settings taken from a run config (QA: window overlap, answer length...)."""
        return {}

    def run_fields(self) -> dict:
        """The run-config fields that describe this adapter as it is (its model, max length, labels and task
        settings): what a run folder records, whichever config the trainer was given (CLI or notebook)."""
        return {"adapter": self.name, "model": self.source, "max_length": self.max_length,
                "label_names": list(self.label_names)}

    @classmethod
    def from_config(cls, cfg, label_names: list[str] | None = None):
        """The adapter a run config asks for: `cfg.model` with a head for `label_names` and the task's settings."""
        return cls.from_pretrained(cfg.model, label_names=label_names, max_length=cfg.max_length,
                                   allow_pickle=cfg.allow_pickle, **cls.options_from_config(cfg))

    # --- to implement per task -------------------------------------------------------------------
    data_loader = None  # staticmethod(cfg) -> (train examples, {eval name: examples}, label names)
    split_loader = None  # staticmethod(cfg, split, label_names, file) -> examples of one labelled split

    @classmethod
    def load_data(cls, cfg) -> tuple[datasets.Dataset, dict[str, datasets.Dataset], list[str]]:
        """Read and validate the recipe's data: (train examples, {eval name: examples}, label names).
        Called before anything is written, so bad input leaves no run folder behind."""
        return cls.data_loader(cfg)

    @classmethod
    def load_split(cls, cfg, split: str, label_names: list[str], file: str | None = None) -> datasets.Dataset:
        """One labelled split by name ('dev', 'test', a validation file's stem) or an explicit file."""
        return cls.split_loader(cfg, split, label_names, file)

    def encode(self, examples: datasets.Dataset) -> datasets.Dataset:
        raise NotImplementedError

    def collate(self, features: list[dict]) -> dict:
        raise NotImplementedError

    def score(self, outputs: list[dict], examples: datasets.Dataset, features: datasets.Dataset,
              metric_hooks) -> tuple[dict, list[dict]]:
        """Return (metrics, one prediction dict per example)."""
        raise NotImplementedError

    # --- shared ------------------------------------------------------------------------------------
    def examples(self, data) -> datasets.Dataset:
        """Training or evaluation examples as a Dataset: a Dataset as it is, or a dict of lists; label names in a
        `label` column are mapped to ids. A task whose labels are not class names (regression, several labels per
        example) converts them here."""
        ds = data if isinstance(data, datasets.Dataset) else datasets.Dataset.from_dict(dict(data))
        if "label" in ds.column_names and len(ds) and isinstance(ds[0]["label"], str):
            names = self.label_names
            ds = ds.map(lambda ex: {"label": names.index(ex["label"])})
        return ds

    def pad_to_multiple_of(self, multiple: int | None) -> None:
        """Pad batches to a multiple of `multiple` positions (8 on GPUs: tensor-core friendly shapes)."""
        collator = getattr(self, "_collator", None)
        if collator is not None and hasattr(collator, "pad_to_multiple_of"):
            collator.pad_to_multiple_of = multiple

    def infer(self, features: datasets.Dataset, batch_size: int = 64, precision: str = "fp32") -> list[dict]:
        """Model outputs for tokenised `features`, one dict per feature in input order (`forward_all`'s contract);
        `predict` goes through here, so an adapter given another `runner` (an exported ONNX graph) answers the same
        way from the same encoding and post-processing."""
        return (self.runner or forward_all)(self, features, batch_size, precision)

    def compute_loss(self, model, batch: dict) -> torch.Tensor:
        """The training loss of one collated batch; `model` is the (possibly distributed) wrapper of `self.model`.
        A task with its own loss (class weights, say) computes it from the outputs here."""
        return model(**batch).loss

    def save(self, directory, state_dict: dict | None = None) -> Path:
        """Write a standard Hugging Face folder (safetensors, config with id2label, tokenizer), atomically.
        An adapter without label names (QA) leaves the config's id2label as it is: it sizes the head.
        `state_dict`: the weights to write (default: the model's own; a distributed run passes the gathered ones)."""
        with atomic_path(directory, is_dir=True) as tmp:
            if self.label_names:
                self.model.config.id2label = dict(enumerate(self.label_names))
                self.model.config.label2id = {n: i for i, n in enumerate(self.label_names)}
            self.model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
            self.tokenizer.save_pretrained(tmp)
        return Path(directory)

    def write_predictions(self, directory, split: str, predictions: list[dict], main: bool = False) -> None:
        """Write one evaluation split's predictions into the run folder: `predictions_<split>.jsonl`.
        Tasks with their own formats (QA: `predictions.json` for the official script) add files here;
        `main` marks the split that selects the best model."""
        with atomic_path(Path(directory) / f"predictions_{split}.jsonl") as p:
            p.write_text("".join(json.dumps(x) + "\n" for x in predictions))

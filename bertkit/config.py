"""Typed run configuration: the single source of truth for recipes (YAML) and CLI flags.

A recipe in `recipes/NAME.yaml` sets fields of `FinetuneConfig`; unknown keys and wrong types are errors.
Command-line flags (`--lr 3e-5`) override the recipe. The resolved config is written into every run folder.

Example:
```python
>>> from bertkit import load_recipe
>>> cfg = load_recipe("sst2", overrides={"model": "minilm-l6", "epochs": 1})
>>> cfg.lr, cfg.batch_size
(2e-05, 32)
```
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import BertkitError
from .validation import _check_type, _validate

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"


def _f(default, help: str, **kw):
    if isinstance(default, dict):
        return field(default_factory=dict, metadata={"help": help, **kw})
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class FinetuneConfig:
    """Everything a fine-tuning run needs. Effective batch = batch_size × grad_accum × processes."""

    # what to train
    task: str = _f("sst2", "Task name; also the data sub-folder under BERTKIT_DATA_DIR.")
    adapter: str = _f("sequence-classification", "Task adapter: sequence-classification, token-classification, "
                                                 "question-answering.")
    model: str = _f("bert-base-uncased", "Base model: 'minilm-l6' (packaged), a local folder, or a hub id.")
    model_overrides: dict[str, dict] = _f({}, "Fields tuned for a particular --model (e.g. minilm-l6: {lr: 1e-4}); "
                                               "applied when that model is used, below command-line flags.")
    allow_pickle: bool = _f(False, "Also load pickle (.bin) weights of the base model; only for files you trust "
                                   "(safetensors are always preferred and otherwise required).")
    # data
    data_dir: str | None = _f(None, "Folder with the task's files (default: $BERTKIT_DATA_DIR/<task>).")
    train_file: str | None = _f("train.tsv", "Training file, relative to data_dir or absolute.")
    validation_files: list[str] = _f(["dev.tsv"], "Evaluation file(s); the first one selects the best model.")
    test_file: str | None = _f(None, "Optional labelled test file, scored once at the end.")
    text_column: str = _f("sentence", "Column with the text.")
    text_pair_column: str | None = _f(None, "Column with the second text of a pair.")
    label_column: str = _f("label", "Column with the label (a label name, or its index in label_names).")
    label_names: list[str] = _f([], "Label names in id order; they become id2label in the checkpoint.")
    skip_labels: list[str] = _f([], "Rows with these labels are skipped and counted (MultiNLI's '-': no majority).")
    hub_dataset: str | None = _f(None, "Hub dataset used when no local data is found (online only).")
    hub_config: str | None = _f(None, "Hub dataset configuration name.")
    hub_splits: list[str] = _f(["train", "validation"], "Hub split names: train, then evaluation split(s).")
    hub_columns: list[str] = _f([], "Hub column names for text, (text pair,) label when they differ from local.")
    hub_revision: str | None = _f(None, "Hub dataset revision (branch, tag or commit), e.g. refs/convert/parquet: "
                                        "the hub's parquet export of a dataset that only has a loading script.")
    columns: list[str] = _f([], "Delimited files without a header row (CoLA, the STS Benchmark): names of their "
                                "fields, in order; fields past these are ignored. A file whose first row names every "
                                "column read is taken to have a header (GLUE's STS-B TSV).")
    delimiter: str | None = _f(None, "Field separator of delimited files: one character, or 'tab' (default: tab for "
                                     ".tsv, comma for .csv).")
    quoting: str = _f("auto", "Delimited files: 'none' (GLUE: quote characters are text), 'csv' (quoted fields as "
                              "pandas and spreadsheets write them; texts may span lines), or 'auto' (.csv: csv; tab-"
                              "separated: none unless the file reads only as quoted; bertkit/data/readers.py).",
                      choices=["auto", "none", "csv"])
    carve_eval: int | None = _f(None, "Train and evaluate on one labelled file, the first validation file, cut by a "
                                      "fixed rule (for tasks whose training set is missing, QNLI here): rows whose "
                                      "first text's SHA-256 modulo 100 is below N form the evaluation split, named "
                                      "'<file stem>_carved<N>' in results; the others train (rows sharing a first "
                                      "text, e.g. a QNLI question, stay on one side). train_file is not read.")
    max_train_samples: int | None = _f(None, "Use only the first N training examples.")
    max_eval_samples: int | None = _f(None, "Use only the first N examples of each evaluation file.")
    # token classification (NER)
    tag_column: int = _f(-1, "CoNLL files: column of the tag, counted from 0 (-1 = the last); the token is column 0.")
    label_all_pieces: bool = _f(False, "Token classification: train on every word piece of a word (its tag; I- on "
                                       "the pieces after a B-), not only on its first piece.")
    ner_window_overlap: int | None = _f(None, "Token classification: word pieces shared by consecutive windows of a "
                                              "sentence longer than max_length (default: half a window).")
    ner_context: int = _f(0, "Token classification: document context, up to this many word pieces on each side of a "
                             "sentence from the text around it in its document (CoNLL -DOCSTART- blocks), filling "
                             "the window up to max_length; unlabelled. 0 = each sentence alone.")
    ner_casing: bool = _f(False, "Token classification: give the model each word's casing (no capital, Capitalised, "
                                 "ALL CAPS, mixed) as its token type id, for uncased checkpoints that lower-case "
                                 "the text; the token type table grows to 4 rows, each starting as a copy of row 0.")
    # sequence-classification heads
    problem_type: str = _f("single_label_classification",
                           "Sequence classification head, Hugging Face's problem_type (saved in the checkpoint): "
                           "single_label_classification (softmax, cross-entropy), regression (one output, MSE; "
                           "numeric labels), multi_label_classification (a sigmoid per label, binary cross-entropy; a "
                           "list of labels per row, or names joined by label_delimiter in CSV/TSV).",
                           choices=["single_label_classification", "regression", "multi_label_classification"])
    label_delimiter: str = _f(",", "Multi-label: separator of the label names in a text label field ('a,b').")
    threshold: float = _f(0.5, "Multi-label: a label is predicted when its sigmoid probability is at least this.")
    class_weights: list[float] | str | None = _f(None, "Loss weight per label (label_names order), or 'balanced': "
                                                       "n / (labels × count), scikit-learn's rule (multi-label: BCE "
                                                       "pos_weight = negatives / positives per label); computed from "
                                                       "the training labels, recorded as numbers in the run config.")
    doc_pooling: str = _f("truncate", "Texts longer than max_length: 'truncate' (BERT: keep the first max_length word "
                                      "pieces), or classify overlapping windows of the text (each a training example "
                                      "with the text's label) and pool their logits per text by 'mean' or 'max' for "
                                      "evaluation and prediction.", choices=["truncate", "mean", "max"])
    doc_window_overlap: int | None = _f(None, "doc_pooling mean/max: word pieces shared by consecutive windows of a "
                                              "long text (default: a quarter of max_length).")
    # optimisation (BERT paper defaults in the recipes)
    max_length: int = _f(128, "Maximum sequence length in word pieces.")
    batch_size: int = _f(32, "Examples per step and process (before gradient accumulation).")
    grad_accum: int = _f(1, "Gradient accumulation steps.")
    lr: float = _f(2e-5, "Peak learning rate (AdamW).")
    epochs: float = _f(3, "Training epochs (ignored when max_steps is set).")
    max_steps: int | None = _f(None, "Stop after this many optimiser steps.")
    warmup_ratio: float = _f(0.1, "Fraction of steps with linear warm-up; then linear decay to 0.")
    layer_lr_decay: float = _f(1.0, "Layer-wise learning-rate decay (ELECTRA's): the head trains at lr, the top "
                                    "transformer layer at lr × d, the one below at lr × d², ..., the embeddings "
                                    "at lr × d^(layers+1); 1 = off.")
    weight_decay: float = _f(0.01, "AdamW weight decay (not applied to biases and LayerNorm).")
    max_grad_norm: float = _f(1.0, "Gradient clipping norm.")
    seed: int = _f(42, "Random seed (data order, dropout, classifier init).")
    seeds: list[int] = _f([], "Run once per seed (into <output_dir>/seed-N) and summarise mean ± std.")
    precision: str = _f("auto", "auto, fp32, bf16 or fp16. auto: bf16 on GPUs that compute it natively (compute "
                                "capability 8.0+), fp16 on older ones; on a CPU bf16 only with native bf16 "
                                "(avx512_bf16, AMX) measured faster than fp32, else fp32 (docs/scaling.md).",
                        choices=["auto", "fp32", "bf16", "fp16"])
    group_by_length: bool = _f(True, "Batch examples of similar length together (fewer pad tokens).")
    compile: bool = _f(False, "torch.compile the model (inductor, dynamic shapes, per transformer block); the first "
                              "steps are slow while it compiles.")
    fast_dropout: bool = _f(True, "CPU training: draw dropout masks with a cheaper generator (same keep-and-rescale, "
                                  "drop probability exact to 1/65536) and compute attention unfused (faster "
                                  "backward than fused SDPA on CPU); see bertkit/cpu/dropout.py.")
    keep_heap: bool = _f(True, "bf16 CPU training (Linux, glibc): keep freed memory in the heap between steps, not "
                               "unmapped and faulted in again; peak memory can grow; see bertkit/cpu/heap.py.")
    dropout: float | None = _f(None, "Training: dropout rate on embeddings, sublayer outputs and the classifier input "
                                     "(default: the checkpoint's hidden_dropout_prob; saved configs keep it).")
    attention_dropout: float | None = _f(None, "Training: dropout rate on attention probabilities (default: the "
                                               "checkpoint's attention_probs_dropout_prob).")
    reinit_pooler: bool = _f(False, "Re-initialise the pooler (the dense+tanh over [CLS] that feeds the classifier) "
                                    "before training, as Zhang et al. 2021 do; for checkpoints whose pooler was never "
                                    "trained (sentence-embedding models such as all-MiniLM).")
    freeze_word_embeddings: bool = _f(False, "Keep the word-piece embedding matrix fixed (not trained, not in AdamW "
                                             "or clipping). For small models it is much of the parameter count "
                                             "(MiniLM-L6: 11.7 M of 22.7 M), so steps get cheaper.")
    eval_batch_size: int = _f(128, "Examples per evaluation batch.")
    # extractive question answering (SQuAD); "doc_stride" elsewhere means either of two things, so no such name here
    window_overlap: int = _f(128, "QA: word pieces shared by consecutive context windows of a long context (the "
                                  "overlap, Hugging Face's tokenizer `stride`; not the step between window starts).")
    max_question_length: int = _f(64, "QA: questions are cut to this many word pieces (BERT's max_query_length).")
    max_answer_length: int = _f(30, "QA: longest answer span considered, in word pieces.")
    n_best: int = _f(20, "QA: best start and end positions tried per window; answers kept per question.")
    train_answer: str = _f("first", "QA: which reference answer a training question with several is trained on: "
                                    "'first' (as run_squad.py), or 'consensus' (the one with the highest mean F1 "
                                    "against the others, ties to the earliest).", choices=["first", "consensus"])
    skip_bad_examples: bool = _f(False, "QA: skip (and count) questions whose answer_start does not index their "
                                        "answer text, instead of stopping with an error.")
    allow_no_answer: bool = _f(False, "QA: questions may have no answer (SQuAD 2.0): unanswerable ones train on the "
                                      "[CLS] span; a question gets no answer when the [CLS] score beats the best span "
                                      "by more than a threshold chosen on the main evaluation set (saved with the "
                                      "model).")
    # schedule of evaluation and checkpoints
    eval_every: str = _f("epoch", "Evaluate every 'epoch', or every N optimiser steps.")
    save_every: int | None = _f(None, "Save a resumable checkpoint every N steps (always at each evaluation).")
    keep_checkpoints: int = _f(2, "How many resumable checkpoints to keep.")
    early_stopping: int | None = _f(None, "Stop after N evaluations without improvement of the main metric.")
    metrics: list[str] = _f(["accuracy"], "Metrics: built-ins (accuracy, f1, mcc) or evaluate modules.")
    main_metric: str = _f("accuracy", "Metric that selects the best model.")
    allow_hub_metrics: bool = _f(False, "Metrics: also accept names that are neither built in nor a local metric "
                                        "script, and load them from the Hugging Face hub with evaluate.load (which "
                                        "downloads the metric's code and runs it).")
    # where to write
    output_dir: str | None = _f(None, "Run folder (default: runs/<task>-<model>-<time>).")
    resume: bool = _f(False, "Resume from the latest good checkpoint in output_dir.")
    report_to: list[str] = _f([], "Experiment trackers through accelerate, e.g. tensorboard (written under "
                                  "<output_dir>/trackers; offline), wandb, mlflow: whichever are installed.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# `bertkit finetune --help` lists the flags by concern, in this order (tests/test_cli_reference.py checks that every
# field is in exactly one group).
FLAG_GROUPS: dict[str, tuple[str, ...]] = {
    "model": ("task", "adapter", "model", "model_overrides", "allow_pickle"),
    "data": ("data_dir", "train_file", "validation_files", "test_file", "text_column", "text_pair_column",
             "label_column", "label_names", "skip_labels", "columns", "delimiter", "quoting", "carve_eval",
             "max_train_samples", "max_eval_samples", "hub_dataset", "hub_config", "hub_splits", "hub_columns",
             "hub_revision"),
    "optimisation": ("max_length", "batch_size", "grad_accum", "lr", "epochs", "max_steps", "warmup_ratio",
                     "layer_lr_decay", "weight_decay", "max_grad_norm", "seed", "seeds", "dropout",
                     "attention_dropout", "reinit_pooler", "freeze_word_embeddings"),
    "evaluation": ("eval_every", "eval_batch_size", "metrics", "main_metric", "allow_hub_metrics", "early_stopping"),
    "task-specific: sequence classification": ("problem_type", "label_delimiter", "threshold", "class_weights",
                                               "doc_pooling", "doc_window_overlap"),
    "task-specific: token classification (NER)": ("tag_column", "label_all_pieces", "ner_window_overlap",
                                                  "ner_context", "ner_casing"),
    "task-specific: question answering": ("window_overlap", "max_question_length", "max_answer_length", "n_best",
                                          "train_answer", "skip_bad_examples", "allow_no_answer"),
    "speed": ("precision", "group_by_length", "compile", "fast_dropout", "keep_heap"),
    "output": ("output_dir", "resume", "save_every", "keep_checkpoints", "report_to"),
}


def _fields():
    hints = typing.get_type_hints(FinetuneConfig)
    return {f.name: (f, hints[f.name]) for f in dataclasses.fields(FinetuneConfig)}


def apply(cfg: FinetuneConfig, values: dict, source: str) -> FinetuneConfig:
    """Set fields from `values`, strictly: unknown keys and wrong types raise BertkitError naming `source`."""
    known = _fields()
    for key, value in values.items():
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            raise BertkitError(f"{source}: unknown key '{key}'" + (f" (did you mean '{hint[0]}'?)" if hint else ""))
        f, tp = known[key]
        try:
            value = _check_type(key, value, tp)
        except BertkitError as e:
            raise BertkitError(f"{source}: {e}") from None
        choices = f.metadata.get("choices")
        if choices and value not in choices:
            raise BertkitError(f"{source}: '{key}' must be one of {', '.join(choices)}, got {value!r}")
        setattr(cfg, key, value)
    _validate(cfg, source)
    return cfg


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name: str) -> Path:
    """A recipe name (`sst2`) or a path to a YAML file."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise BertkitError(f"recipe file not found: {path}")
        return path
    path = RECIPES_DIR / f"{name}.yaml"
    if not path.is_file():
        hint = difflib.get_close_matches(name, recipe_names(), n=1)
        raise BertkitError(f"unknown recipe '{name}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
                           + f"; available: {', '.join(recipe_names())}")
    return path


def load_recipe(name: str, overrides: dict | None = None) -> FinetuneConfig:
    path = recipe_path(name)
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise BertkitError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(values, dict):
        raise BertkitError(f"{path}: a recipe must be a mapping of key: value")
    cfg = apply(FinetuneConfig(), values, str(path))
    overrides = overrides or {}
    for model, fields in cfg.model_overrides.items():  # check every entry (on the recipe), not only the one used
        apply(copy.deepcopy(cfg), fields, f"{path}: model_overrides.{model}")
    tuned = cfg.model_overrides.get(overrides.get("model", cfg.model), {})
    cfg = apply(cfg, {k: v for k, v in tuned.items() if k not in overrides}, f"{path}: model_overrides")
    return apply(cfg, overrides, "command line")


def load_run_config(path) -> FinetuneConfig:
    """The resolved config.yaml of a finished run (keys this version does not know are ignored)."""
    values = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(values, dict):
        raise BertkitError(f"{path}: expected a mapping of config fields")
    known = _fields()
    return apply(FinetuneConfig(), {k: v for k, v in values.items() if k in known}, str(path))


def to_yaml(cfg: FinetuneConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)

"""The run config: what every fine-tuning run has (model, data files, optimisation, evaluation, output), one frozen
dataclass; the task's own options are one nested dataclass of the task (`task_options`, see `bertkit/tasks`).

A recipe (`recipes/NAME.yaml`) sets fields of `RunConfig`, the task's options under `task_options:`, and per-model
settings under `model_overrides:`; command-line flags (`--lr 3e-5`, `--window-overlap 64`: flat, task options too)
override it. Unknown keys and wrong types are errors naming their source. `resolve` turns layers of settings into
one frozen config; `config_files.py` reads them from files (`load_recipe`: recipe, model overrides and flags; the
trainer writes the result to the run folder as `config.yaml`, and `load_run_config` reads such a file back).

"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .errors import BertkitError
from .tasks.registry import get_task
from .typed import build, checked, option, option_names, to_dict, unknown_key

DEFAULT_TASK = "sequence-classification"


@dataclass(frozen=True)
class HubSource:
    """Where the data comes from when there are no local files (online only)."""

    dataset: str | None = option(None, "Hub dataset used when no local data is found (online only).")
    config: str | None = option(None, "Hub dataset configuration name.")
    splits: list[str] = option(["train", "validation"], "Hub split names: train, then evaluation split(s).")
    revision: str | None = option(None, "Hub dataset revision (branch, tag or commit), e.g. refs/convert/parquet: "
                                        "the hub's parquet export of a dataset that only has a loading script.")


@dataclass(frozen=True)
class Compute:
    """How the run computes: precision, batching and the speed-ups (none of them changes what is learned beyond
    rounding)."""

    precision: str = option("auto", "auto, fp32, tf32, bf16 or fp16. auto: bf16 on GPUs that compute it natively "
                                    "(compute capability 8.0+), fp16 on older ones; on a CPU bf16 only with native "
                                    "bf16 (avx512_bf16, AMX) measured faster than fp32, else fp32. tf32: fp32 with "
                                    "CUDA matmuls on TF32 tensor cores (GPUs of capability 8.0+; docs/scaling.md).",
                            choices=["auto", "fp32", "tf32", "bf16", "fp16"])
    group_by_length: bool = option(True, "Batch examples of similar length together (fewer pad tokens).")
    pad_to_multiple: int | None = option(None, "Pad each training and evaluation batch to a multiple of this many "
                                               "word pieces (default: 8 on a GPU, for its tensor cores; on a CPU 32 "
                                               "when max_length is above 128, else none: fewer distinct batch "
                                               "shapes bound the memory that CPU kernels and the allocator keep per "
                                               "shape, docs/memory.md).")
    train_step: str = option("auto", "How a training step runs. auto: on one CUDA device (bf16, tf32 or fp32; no "
                                     "peft, FSDP or gradient checkpointing) a CUDA graph per batch shape, captured "
                                     "once and replayed; elsewhere eager, as accelerate's examples do. static: the "
                                     "graph's step run eagerly on any device (the same weights as eager on a CPU); "
                                     "eager; graphed: as auto, fp16 too, and says why when it cannot.",
                             choices=["auto", "eager", "static", "graphed"])
    length_buckets: int | None = option(None, "Pad training batches up to at most this many lengths, chosen from the "
                                              "data to add the fewest padded positions (the training line says how "
                                              "many); 0: each batch to its longest row. Default: 8 where each shape "
                                              "costs a capture or a compile (a graphed step, --compile), else 0.")
    device_data: str = option("auto", "Where training batches come from. off: collated per batch (on a GPU by two "
                                     "worker processes); auto: on one CUDA device, gathered from the training set "
                                     "collated onto it once (when it takes at most a tenth of the free memory and its "
                                     "first batches equal the collate's), else collated per batch; on: gathered on "
                                     "any device.", choices=["off", "auto", "on"])
    compile: bool = option(False, "torch.compile the model (inductor, dynamic shapes, per transformer block); the "
                                  "first steps are slow while it compiles.")
    fast_dropout: bool = option(True, "CPU training: draw dropout masks with a cheaper generator (same keep-and-"
                                      "rescale, drop probability exact to 1/65536) and compute attention unfused "
                                      "(faster backward than fused SDPA on CPU); see bertkit/cpu/dropout.py.")
    keep_heap: bool = option(True, "bf16 CPU training (Linux, glibc): keep freed memory in the heap between steps, "
                                   "not unmapped and faulted in again; only for micro-batches of at most 4096 "
                                   "positions (batch size × max length: above, it holds markedly more memory; "
                                   "docs/memory.md); see bertkit/cpu/heap.py.")
    gradient_checkpointing: bool = option(False, "Keep only each transformer layer's input for the backward pass and "
                                                 "compute the rest again (transformers' own, non-reentrant): less "
                                                 "memory, about a third more compute.")
    memory_budget: str | None = option(None, "Fit the run in this much memory (e.g. 8GB: resident memory on a CPU, "
                                             "GPU memory on a GPU): micro-batch, gradient accumulation and "
                                             "checkpointing are chosen from a short measured probe, keeping the "
                                             "effective batch; a run that cannot fit stops before training.")

    def validate(self, source: str) -> None:
        if self.length_buckets is not None and self.length_buckets < 0:
            raise BertkitError(f"{source}: 'length_buckets' must be 0 (off) or a positive count")
        if self.pad_to_multiple is not None and self.pad_to_multiple <= 0:
            raise BertkitError(f"{source}: 'pad_to_multiple' must be positive")
        if self.memory_budget is not None:
            from .memory import parse_size

            parse_size(self.memory_budget, source)


@dataclass(frozen=True)
class Peft:
    """Parameter-efficient fine-tuning through peft: only small added weights (and the task's head) are trained; the
    run folder keeps the adapter (adapter/) and the merged model, a plain checkpoint (bertkit/training/lora.py)."""

    method: str = option("none", "none (train every weight), lora (low-rank updates of chosen linear layers) or ia3 "
                                 "(learned rescaling vectors); the task's head is always trained in full.",
                         choices=["none", "lora", "ia3"], dest="peft")
    lora_r: int = option(8, "LoRA: rank of the update matrices.")
    lora_alpha: float = option(16, "LoRA: scale of the update (alpha / r).")
    lora_dropout: float = option(0.1, "LoRA: dropout on the update's input.")
    lora_target: list[str] = option([], "LoRA and IA³: names of the linear layers adapted (e.g. query,value; "
                                        "default: peft's choice for the model family).")

    def validate(self, source: str) -> None:
        if self.lora_r <= 0 or self.lora_alpha <= 0:
            raise BertkitError(f"{source}: 'lora_r' and 'lora_alpha' must be positive")
        if not 0 <= self.lora_dropout < 1:
            raise BertkitError(f"{source}: 'lora_dropout' must be in [0, 1)")


@dataclass(frozen=True)
class RunConfig:
    """Everything a fine-tuning run needs. Effective batch = batch_size × grad_accum × processes."""

    # what to train
    task: str = option(DEFAULT_TASK, "The task: what is predicted and how (`bertkit recipes` shows each recipe's; "
                                     "tasks of installed plugins too).")
    name: str = option("run", "Name of the data set and of the run: the data sub-folder under BERTKIT_DATA_DIR "
                              "(a recipe's name by default).")
    model: str = option("bert-base-uncased", "Base model: 'minilm-l6' (packaged), a local folder, or a hub id.")
    # data
    data_dir: str | None = option(None, "Folder with the data files (default: $BERTKIT_DATA_DIR/<name>).")
    train_file: str | None = option("train.tsv", "Training file, in data_dir (without --data-dir: a file here too).")
    validation_files: list[str] = option(["dev.tsv"], "Evaluation file(s), found as --train-file is; the first one "
                                         "selects the best model.")
    test_file: str | None = option(None, "Optional labelled test file, scored once at the end.")
    max_train_samples: int | None = option(None, "Use only the first N training examples.")
    max_eval_samples: int | None = option(None, "Use only the first N examples of each evaluation file.")
    hub: HubSource = option(None, "The hub copy of the data: dataset, config, splits, revision (flags --hub-*).",
                            flag=False)
    # optimisation (the BERT paper's settings are in the recipes)
    max_length: int = option(128, "Maximum sequence length in word pieces.")
    batch_size: int = option(32, "Examples per step and process (before gradient accumulation).")
    grad_accum: int = option(1, "Gradient accumulation steps.")
    lr: float = option(2e-5, "Peak learning rate (AdamW).")
    epochs: float = option(3, "Training epochs (ignored when max_steps is set).")
    max_steps: int | None = option(None, "Stop after this many optimiser steps.")
    warmup_ratio: float = option(0.1, "Fraction of steps with linear warm-up; then linear decay to 0.")
    layer_lr_decay: float = option(1.0, "Layer-wise learning-rate decay (ELECTRA's): the head trains at lr, the top "
                                        "transformer layer at lr × d, the one below at lr × d², ..., the embeddings "
                                        "at lr × d^(layers+1); 1 = off.")
    weight_decay: float = option(0.01, "AdamW weight decay (not applied to biases and LayerNorm).")
    max_grad_norm: float = option(1.0, "Gradient clipping norm.")
    seed: int = option(42, "Random seed (data order, dropout, head initialisation).")
    # what training changes in the model (bertkit/training/changes.py; saved files keep the checkpoint's config)
    dropout: float | None = option(None, "Training: dropout rate on embeddings, sublayer outputs and the classifier "
                                         "input (default: the checkpoint's hidden_dropout_prob).")
    attention_dropout: float | None = option(None, "Training: dropout rate on attention probabilities (default: the "
                                                   "checkpoint's attention_probs_dropout_prob).")
    reinit_pooler: bool = option(False, "Re-initialise the pooler (the dense+tanh over [CLS] that feeds the head) "
                                        "before training, as Zhang et al. 2021 do; for checkpoints whose pooler was "
                                        "never trained (sentence-embedding models such as all-MiniLM).")
    freeze_word_embeddings: bool = option(False, "Keep the word-piece embedding matrix fixed (not trained, not in "
                                                 "AdamW or clipping). For small models it is much of the parameter "
                                                 "count (MiniLM-L6: 11.7 M of 22.7 M), so steps get cheaper.")
    # evaluation
    eval_every: str = option("epoch", "Evaluate every 'epoch', or every N optimiser steps.")
    eval_batch_size: int = option(128, "Examples per evaluation batch.")
    metrics: list[str] = option([], "Metrics: the task's built-ins (default: the task's own), or local evaluate "
                                    "metric scripts.")
    main_metric: str = option("", "Metric that selects the best model (default: the first metric).")
    early_stopping: int | None = option(None, "Stop after N evaluations without improvement of the main metric.")
    # how it computes
    compute: Compute = option(None, "Precision, batching, memory and speed-ups (flags --precision, --compile, ...).",
                              flag=False)
    peft: Peft = option(None, "Parameter-efficient fine-tuning (flags --peft, --lora-r, ...).", flag=False)
    # where to write
    output_dir: str | None = option(None, "Run folder, one run at a time (default: runs/<name>-<model>-<time>, "
                                                     "then -2, -3 for runs started in the same second).")
    save_every: int | None = option(None, "Save a resumable checkpoint every N steps (always at each evaluation; 0: "
                                          "only there).")
    keep_checkpoints: int = option(2, "How many resumable checkpoints to keep.")
    report_to: list[str] = option([], "Experiment trackers through accelerate, e.g. tensorboard (written under "
                                      "<output_dir>/trackers; offline), wandb, mlflow: whichever are installed.")
    task_options: object = option(None, "The task's own options (a dataclass of the task; flags of `bertkit finetune "
                                        "RECIPE --help` under 'task options').", flag=False)

    def __post_init__(self):
        """Fill what depends on the task: its options (from a dict or its defaults), its default metrics."""
        task = task_class(self.task)
        set_ = object.__setattr__  # frozen: only here, while the instance is being made
        for name, cls in NESTED.items():
            value = getattr(self, name)
            if value is None or isinstance(value, dict):
                set_(self, name, build(cls, dict(value or {}), name))
        options = self.task_options
        if options is None or isinstance(options, dict):
            set_(self, "task_options", build(task.Options, dict(options or {}), "task_options"))
        elif not isinstance(options, task.Options):
            raise BertkitError(f"task_options: {type(options).__name__} is not the options of task {self.task} "
                               f"({task.Options.__name__})")
        if not self.metrics:
            set_(self, "metrics", list(task.metrics_for(self.task_options)[1]))
        if not self.main_metric and self.metrics:
            set_(self, "main_metric", self.metrics[0])

    def validate(self, source: str) -> None:
        if self.eval_every != "epoch" and not (self.eval_every.isdigit() and int(self.eval_every) > 0):
            raise BertkitError(f"{source}: 'eval_every' must be 'epoch' or a positive number of steps")
        for name in ("batch_size", "grad_accum", "max_length", "eval_batch_size", "keep_checkpoints"):
            if getattr(self, name) <= 0:
                raise BertkitError(f"{source}: '{name}' must be positive")
        for name, unset in (("max_train_samples", "every example"), ("max_eval_samples", "every example"),
                            ("early_stopping", "no early stop")):
            if getattr(self, name) is not None and getattr(self, name) <= 0:  # early_stopping 0 stopped at once
                raise BertkitError(f"{source}: '{name}' must be positive (or unset: {unset})")
        if self.save_every is not None and self.save_every < 0:
            raise BertkitError(f"{source}: 'save_every' must be 0 or more (0 or unset: at evaluations only)")
        if self.max_steps is not None and self.max_steps <= 0 or self.epochs <= 0:
            raise BertkitError(f"{source}: 'max_steps' and 'epochs' must be positive")
        if not self.lr >= 0 or not self.weight_decay >= 0:  # `not >=`: NaN too
            raise BertkitError(f"{source}: 'lr' and 'weight_decay' must be ≥ 0")
        if not self.max_grad_norm > 0:  # 0 would clip every gradient to nothing (the Trainer's 0: none)
            raise BertkitError(f"{source}: 'max_grad_norm' must be positive (to clip nothing, a large one: 1e9)")
        if not 0 <= self.warmup_ratio <= 1:
            raise BertkitError(f"{source}: 'warmup_ratio' must be in [0, 1] (a fraction of the steps)")
        for name in ("dropout", "attention_dropout"):
            if getattr(self, name) is not None and not 0 <= getattr(self, name) < 1:
                raise BertkitError(f"{source}: '{name}' must be in [0, 1)")
        if not 0 < self.layer_lr_decay <= 1:
            raise BertkitError(f"{source}: 'layer_lr_decay' must be in (0, 1]")
        if self.main_metric not in self.metrics:
            raise BertkitError(f"{source}: main_metric '{self.main_metric}' is not in metrics {self.metrics}")
        task = task_class(self.task).resolve(self.task_options)
        if self.reinit_pooler and not task.uses_pooler:
            raise BertkitError(f"{source}: 'reinit_pooler' applies to tasks whose head reads the pooled [CLS] vector; "
                               f"the {self.task} head does not use the pooler")
        task.check_metrics(self.metrics, self.task_options, source)

    def to_dict(self) -> dict:
        """Plain YAML-ready values; the nested groups and the task's options as mappings."""
        return {f.name: to_dict(getattr(self, f.name)) if f.name in (*NESTED, "task_options") else
                getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, source: str = "config", **changes) -> RunConfig:
        """A new config with `changes` (run fields, flat `hub_*` / compute fields, task options by name), checked
        like a command line; this one is not changed."""
        return resolve([(self.to_dict(), source, False), (changes, source, True)])


def task_class(name: str):
    return get_task(name)


NESTED = {"hub": HubSource, "compute": Compute, "peft": Peft}  # mappings in YAML, flat keys on the command line
GENERIC = tuple(f.name for f in dataclasses.fields(RunConfig) if f.name not in (*NESTED, "task_options"))
FLAT = {**{f"hub_{f.name}": ("hub", f.name) for f in dataclasses.fields(HubSource)},
        **{f.name: ("compute", f.name) for f in dataclasses.fields(Compute)},
        **{f.metadata.get("dest", f.name): ("peft", f.name) for f in dataclasses.fields(Peft)}}  # → (group, field)
# choices of one command line, not settings: a recipe, a run's config.yaml or load_recipe's overrides do not hold them
COMMAND_LINE = {"seeds": "--seeds", "resume": "--resume", "allow_pickle": "--allow-pickle"}


def split_layer(values: dict, task, source: str, flat_options: bool) -> tuple[dict, dict, dict]:
    """One layer of settings (a recipe, a model override, the command line) → (run fields, {group: fields}, task
    options), each checked against its dataclass. Groups and task options are nested mappings (`hub:`, `compute:`,
    `task_options:`), or flat keys where `flat_options` (flags, model overrides)."""
    def nested(key) -> bool:  # `peft: {...}` is the group; `peft: lora` on the command line is its method
        return isinstance(values.get(key), dict) or values.get(key) is None

    for key in (*NESTED, "task_options"):
        if not nested(key) and not (flat_options and key in FLAT):
            raise BertkitError(f"{source}: '{key}' must be a mapping of its fields, got {values[key]!r}")
    generic = {}
    groups = {g: dict(values.get(g) or {}) if nested(g) else {} for g in NESTED}
    names = option_names(task.Options)
    options = {names.get(k, k): v for k, v in (values.get("task_options") or {}).items()}  # 0.2 names too
    for key, value in values.items():
        if key in (*NESTED, "task_options") and nested(key):
            continue
        if key in GENERIC:
            generic[key] = value
        elif key in FLAT and flat_options:
            group, field = FLAT[key]
            groups[group][field] = value
        elif key in names and flat_options:
            options[names[key]] = value
        elif key in FLAT:
            raise BertkitError(f"{source}: '{key}' belongs under {FLAT[key][0]}: (a mapping)")
        elif key in names:
            raise BertkitError(f"{source}: '{key}' is an option of the {task.name} task: put it under task_options:")
        elif key in COMMAND_LINE:
            raise BertkitError(f"{source}: '{key}' is not a setting but a choice of the command line: give "
                               f"{COMMAND_LINE[key]} to bertkit finetune")
        else:
            raise unknown_key(key, [*GENERIC, *FLAT, *NESTED, "task_options", *names], source)
    return (checked(RunConfig, generic, source), {g: checked(NESTED[g], v, source) for g, v in groups.items()},
            checked(task.Options, options, source))


def resolve(layers: list[tuple[dict, str, bool]]) -> RunConfig:
    """Layers of settings, later ones winning, → one frozen RunConfig; the config is validated after each layer
    with that layer's source named in errors. A layer is (values, source, flat keys allowed)."""
    task_name, named_in = DEFAULT_TASK, None
    for values, source, _ in layers:
        if "task" in values:
            task_name, named_in = values["task"], source
    if not isinstance(task_name, str):
        raise BertkitError(f"{named_in}: 'task' must be a task name, got {task_name!r}")
    try:
        task = task_class(task_name)
    except BertkitError as e:  # named by the layer that set it (a recipe file, an override)
        raise BertkitError(f"{named_in}: {e}" if named_in else str(e)) from None
    generic, groups, options, cfg = {}, {g: {} for g in NESTED}, {}, None
    for values, source, flat in layers:
        g, n, o = split_layer(values, task, source, flat)
        generic, options = {**generic, **g}, {**options, **o}
        groups = {k: {**groups[k], **n[k]} for k in NESTED}
        try:
            cfg = RunConfig(**{**generic, "task": task_name},
                            **{k: build(NESTED[k], groups[k], source) for k in NESTED},
                            task_options=build(task.Options, options, source))
        except BertkitError as e:
            raise BertkitError(str(e) if str(e).startswith(source) else f"{source}: {e}") from None
        cfg.validate(source)
    return cfg


def run_config(**values) -> RunConfig:
    """A RunConfig from flat keyword arguments, as on the command line (notebooks): run fields, `hub_*`, compute
    fields (precision, ...) and the task's options by name.

    Example:
    ```python
    >>> cfg = run_config(name="sst2", epochs=1, precision="fp32", label_names=["negative", "positive"])
    >>> cfg.compute.precision, cfg.task_options.label_names
    ('fp32', ['negative', 'positive'])
    ```
    """
    return resolve([(values, "arguments", True)])

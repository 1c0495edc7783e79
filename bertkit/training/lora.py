"""Parameter-efficient fine-tuning through peft (`--peft lora` or `ia3`): the task's model is wrapped for training,
only the added weights and the task's head train, and the run ends with both forms of the result:

    <run>/adapter/            adapter_model.safetensors + adapter_config.json: peft's adapter
                              (`PeftModel.from_pretrained(base model, <run>/adapter)` loads it)
    <run>/model.safetensors   the merged model (merge_and_unload): a plain Hugging Face checkpoint that
                              `AutoModelFor...` loads without peft, and that predict, serve, export and extract use

The head (the classifier, the QA span layer; the pooler where the head reads it) is trained in full
(`modules_to_save`). Checkpoints during training (`checkpoints/best`) hold the adapter only.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

from .. import families
from ..errors import BertkitError, need_extra

ADAPTER = "adapter"  # the sub-folder of a run folder that keeps the adapter


def is_peft(model) -> bool:
    return type(model).__module__.startswith("peft.")


def head_modules(task, model) -> list[str]:
    """The layers of the task's head, trained in full: those with weights in the model's children outside the
    encoder, and the pooler's when the head reads the pooled [CLS] vector; named down to the layers that hold the
    weights (peft's IA³ merges only such layers)."""
    encoder = getattr(model, "base_model_prefix", "")
    parts = [(name, child) for name, child in model.named_children() if name != encoder]
    pooler = families.pooler(model)
    if task.uses_pooler and pooler is not None and all(child is not pooler for _, child in parts):
        parts.append(("pooler", pooler))
    return [f"{name}.{leaf}".rstrip(".") for name, child in parts for leaf, module in child.named_modules()
            if any(True for _ in module.parameters(recurse=False))]


def check_default_targets(path: str, local: bool, options) -> None:
    """`--peft` without `--lora-target` on a local model (`path`, as `models.resolve_model` gives it) whose type
    neither the families' table nor peft has default layers for (CamemBERT, MPNet; ELECTRA and XLM-R under IA³):
    said before the model loads (`wrap` says it after, where the model comes from the hub or peft's table cannot be
    read)."""
    if options.method == "none" or options.lora_target:
        return
    import json
    from types import SimpleNamespace

    try:
        model_type = json.loads((Path(path) / "config.json").read_text()).get("model_type") if local else None
        from peft.utils import TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING as IA3
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as LORA
    except (OSError, ValueError, AttributeError, ImportError):
        return
    if model_type is None or families.lora_targets(SimpleNamespace(model_type=model_type)) is not None:
        return
    if model_type not in (LORA if options.method == "lora" else IA3):
        raise BertkitError(f"--peft {options.method}: peft has no default layers to adapt in a '{model_type}' model "
                           "(choose the layers with --lora-target: the names of its attention's linear layers)")


def wrap(task, options, log=print):
    """The task's model wrapped for `options.method` (a PeftModel); the caller trains it in place of the model."""
    need_extra("--peft", "peft", "peft")
    import peft
    model = task.model
    targets = list(options.lora_target) or families.lora_targets(model.config)  # None: peft's default
    heads = head_modules(task, model)
    try:
        if options.method == "lora":
            config = peft.LoraConfig(r=options.lora_r, lora_alpha=options.lora_alpha,
                                     lora_dropout=options.lora_dropout, target_modules=targets, modules_to_save=heads)
        else:
            config = peft.IA3Config(target_modules=targets, feedforward_modules=[], modules_to_save=heads)
        with warnings.catch_warnings():  # peft asks transformers 5's deprecated name: peft's to change, not a user's
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
            wrapped = peft.get_peft_model(model, config)
    except ValueError as e:  # a target layer that the model does not have, a family peft has no default for
        raise BertkitError(f"--peft {options.method}: {e} (choose the layers with --lora-target)") from None
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    total = sum(p.numel() for p in wrapped.parameters())
    log(f"peft {options.method}: {trainable:,} of {total:,} parameters train ({100 * trainable / total:.2f} %); "
        f"adapted: {', '.join(sorted(wrapped.peft_config['default'].target_modules))}; in full: {', '.join(heads)}")
    return wrapped


def load_adapter_weights(model, directory: Path) -> bool:
    """The adapter saved in `directory` (a `checkpoints/best` of a peft run) into `model`; False if there is none."""
    path = Path(directory) / "adapter_model.safetensors"
    if not path.is_file():
        return False
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(path)))
    return True


def merged(wrapped):
    """The model with the trained adapter merged into its weights (peft's merge_and_unload): the model the task had
    before `wrap`, as a plain transformers model again."""
    return wrapped.merge_and_unload()


def keep_adapter(best: Path, run: Path) -> None:
    """The best adapter (and its config) copied into `<run>/adapter/`."""
    target = Path(run) / ADAPTER
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        shutil.copy(Path(best) / name, target / name)

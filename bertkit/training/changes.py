"""Every change training makes to the model, in one place, undone on the way out.

```python
with model_changes(model, cfg, cpu=True, precision="bf16", log=print) as applied:
    train(model)      # `applied` names what took effect
# here the model is as it was given: the same module types and dropout rates, every parameter trainable as before,
# the same attention implementation (and glibc's allocator settings are back), whether training returned or raised
```
What it changes, in this order (the order fixes which random numbers each one draws):
1. `reinit_pooler`: fresh N(0, initializer_range) pooler weights and zero bias, from the seeded generator. Weights
   are what training changes anyway, so this is the one change not undone;
2. `freeze_word_embeddings`: the word-piece embedding matrix gets `requires_grad=False` (undone: True again);
3. `dropout` / `attention_dropout`: training-time rates on the model's `nn.Dropout` modules; model.config is not
   changed, so saved files keep the checkpoint's rates (undone: the old rates);
4. `gradient_checkpointing`: transformers' own, non-reentrant (undone: off again);
5. on a CPU, not sharded: the CPU speed-ups (`bertkit.cpu.cpu_speedups`: fast dropout modules, unfused attention
   while training, the kept heap in bf16), each checked to have taken effect and undone by its own code; only those
   measured on the model's family (`bertkit.families`: BERT's), none for the others (one log line says so);
6. on a GPU, not sharded, without peft or --compile: BERT's query, key and value projected by one matmul
   (`qkv.fused_qkv`: the same parameters, fewer and larger kernels), checked to have taken effect; undone: the
   model's own linears again;
7. `--peft lora|ia3`: the model wrapped by peft (`lora.py`); undone: the model again (merged with the adapter when
   training finished), every parameter trainable as before.
Only public interfaces of torch and transformers are used (`set_attn_implementation` for the attention). The
autocast wrapper accelerate sets as the prepared model's `forward` (mixed precision) is taken off by
`restore_forward`, not by accelerate's `unwrap_model(keep_fp32_wrapper=False)`: that one unwraps through
transformers' own decorators of `forward` too, leaving another function than the class's
(tests/test_training_options.py pins it).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

import torch
from torch import nn

from .. import families
from ..errors import BertkitError

# The kept heap (bf16 CPU) only where a micro-batch holds at most this many positions (batch size × max length):
# at 8 × 384 it held about the memory of a run without it, at 16 × 384 and 32 × 384 markedly more (the measurements:
# docs/memory.md, "Why a CPU run's memory grew with its length").
KEEP_HEAP_POSITIONS = 4096


def reinit_pooler(model) -> None:
    """Fresh N(0, initializer_range) weights and zero bias for the pooler, from the seeded generator."""
    pooler = families.pooler(model)
    if pooler is None:
        raise BertkitError(f"reinit_pooler: {families.no_pooler_reason(model)}")
    for module in pooler.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data.normal_(0.0, model.config.initializer_range)
            module.bias.data.zero_()


def set_dropout(model: nn.Module, hidden: float | None = None, attention: float | None = None) -> dict[str, float]:
    """Training-time dropout rates: `attention` for the attention probabilities (the `dropout` of every
    `*SelfAttention` module), `hidden` for every other dropout (embeddings, sublayer outputs, classifier input);
    None leaves a rate as the checkpoint has it. model.config is not changed, so saved files keep the checkpoint's
    rates. Returns {module name: old rate} for `reset_dropout`."""
    old = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout):
            parent = model.get_submodule(name.rpartition(".")[0])
            rate = attention if type(parent).__name__.endswith("SelfAttention") else hidden
            if rate is not None:
                old[name], module.p = module.p, float(rate)
    return old


def reset_dropout(model: nn.Module, old: dict[str, float]) -> None:
    """Put back the rates `set_dropout` replaced (by module name, so after the CPU speed-ups swapped modules too)."""
    for name, p in old.items():
        model.get_submodule(name).p = p


def enable_checkpointing(model) -> None:
    """transformers' activation (gradient) checkpointing, non-reentrant (the random state is kept for the recomputed
    dropout masks); `activation_checkpointing_enable` from transformers 5.x where it exists, its older name before."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise BertkitError(f"{type(model).__name__} does not support gradient checkpointing")
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def disable_checkpointing(model) -> None:
    if hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    else:
        model.gradient_checkpointing_disable()


@contextmanager
def model_changes(task, cfg, cpu: bool = False, precision: str = "fp32", log=print, gpu: bool = False):
    """Apply the changes `cfg` asks for to `task.model` (module docstring); yield the names of those that took
    effect; undo them on exit, also when the block raises. `cpu` (`gpu`): the model trains on a CPU (a CUDA GPU),
    unsharded. With peft, `task.model` is the wrapped model inside the block; on exit it is the model again: merged
    with the trained adapter where the block merged it (`lora.merged`), else unwrapped without merging."""
    model = task.model
    applied = []
    with ExitStack() as undo:
        if cfg.reinit_pooler:
            reinit_pooler(model)
            applied.append("reinit_pooler")
        if cfg.freeze_word_embeddings:
            weight = model.get_input_embeddings().weight
            if weight.requires_grad:
                weight.requires_grad_(False)
                undo.callback(weight.requires_grad_, True)
                applied.append("freeze_word_embeddings")
        old = set_dropout(model, cfg.dropout, cfg.attention_dropout)
        undo.callback(reset_dropout, model, old)
        if old:
            applied.append("dropout")
        if cfg.compute.gradient_checkpointing:
            enable_checkpointing(model)
            undo.callback(disable_checkpointing, model)
            applied.append("gradient_checkpointing")
        measured, compute = families.cpu_speedups(model.config), cfg.compute
        wanted = {"fast_dropout": compute.fast_dropout, "keep_heap": compute.keep_heap and precision == "bf16"}
        if wanted["keep_heap"] and cfg.batch_size * cfg.max_length > KEEP_HEAP_POSITIONS:
            wanted["keep_heap"] = False
            if cpu and "keep_heap" in measured:
                log(f"cpu speed-ups: keep_heap left off for micro-batches of {cfg.batch_size} × {cfg.max_length} "
                    f"positions (over {KEEP_HEAP_POSITIONS} the kept heap costs more memory than it is worth; the "
                    "measurements: docs/memory.md)")
        if cpu and any(wanted.values()) and not measured:
            log(f"cpu speed-ups: none for {model.config.model_type} models (measured on BERT only, docs/speed.md)")
        elif cpu:
            from ..cpu import cpu_speedups

            applied += undo.enter_context(cpu_speedups(model, wanted["fast_dropout"] and "fast_dropout" in measured,
                                                       wanted["keep_heap"] and "keep_heap" in measured, log))
        if gpu and cfg.peft.method == "none" and not compute.compile:
            from .qkv import fused_qkv

            applied += undo.enter_context(fused_qkv(model, log))
        if cfg.peft.method != "none":
            from . import lora

            trainable = {name: p.requires_grad for name, p in model.named_parameters()}
            task.model = lora.wrap(task, cfg.peft, log)
            undo.callback(_unwrap, task, model, trainable)
            applied.append(cfg.peft.method)
        yield applied


def _unwrap(task, model, trainable: dict) -> None:
    """After peft: the task's model is `model` again (not merged if the block did not merge it), each parameter
    trainable as before."""
    from . import lora

    if lora.is_peft(task.model):
        task.model = task.model.unload()  # training stopped before the end: the adapter is dropped
    for name, p in task.model.named_parameters():
        p.requires_grad_(trainable.get(name, True))


@contextmanager
def heap_released(applied):
    """Inside `model_changes`, for evaluation and saving: the training step's kept heap (`keep_heap`, bf16 on a CPU)
    goes back to the system first, else the evaluation's own buffers come on top of it (the SQuAD recipe's MiniLM
    runs: docs/memory.md, "The SQuAD recipe over full epochs"); the heap is kept again for the next training steps."""
    kept = "keep_heap" in applied
    if kept:
        from ..cpu.heap import keep_heap, release_heap

        release_heap()
    try:
        yield
    finally:
        if kept:
            keep_heap()


def restore_forward(module, before) -> None:
    """Give `module` back the `forward` it had before accelerate prepared it (`before`: its instance attribute then;
    None: the class's): for mixed precision accelerate sets an autocast wrapper as an instance attribute."""
    if before is not None:
        module.forward = before
    elif "forward" in vars(module):
        del module.forward

"""Resumable training checkpoints: written to a temporary name, renamed, then the `latest` pointer is updated.

Layout under `<run>/checkpoints/`: `step-0000500/` (accelerate state: model.safetensors — or FSDP's
`pytorch_model_fsdp_0*` — optimizer, RNG states of every process; plus `trainer_state.json` with the step, the
schedule and the best metric), `latest` (a text file naming the newest complete checkpoint), and `best/` (a plain
Hugging Face folder of the best model so far). Every process takes part in saving (FSDP and ZeRO-3 gather the
full weights from all of them); the main process writes the files that are not per process.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from safetensors import safe_open

from ..utils import atomic_path, written

STATE_FILE = "trainer_state.json"


def save(accelerator, root: Path, step: int, state: dict, keep: int) -> Path:
    """Save on every process (accelerate writes per-process RNG files); rename and point on the main one."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:07d}"
    tmp = root / f".step-{step:07d}.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    try:  # a disk that fills: the command's one line, no partial checkpoint left; the earlier ones stay resumable
        with written(final):
            accelerator.save_state(str(tmp), safe_serialization=True)
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                (tmp / STATE_FILE).write_text(json.dumps(state, indent=2, default=float))  # tensor learning rates
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if accelerator.is_main_process:
        publish(tmp, final)
        point(root, final)
        for old in sorted(root.glob("step-*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def publish(tmp: Path, final: Path) -> None:
    """A complete checkpoint under its temporary name → its final name."""
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


def point(root: Path, final: Path) -> None:
    """The `latest` pointer moves last, atomically."""
    with atomic_path(root / "latest") as p:
        p.write_text(final.name + "\n")


def _is_complete(path: Path) -> str | None:
    """None if `path` is a loadable checkpoint, else the reason it is not."""
    try:
        json.loads((path / STATE_FILE).read_text())
        weights = list(path.glob("model*.safetensors"))
        if not weights and not list(path.glob("pytorch_model_fsdp*")):
            return "no model weights"
        for w in weights:
            with safe_open(str(w), framework="pt") as f:
                f.keys()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def find_resumable(root: Path, log=print) -> Path | None:
    """The newest complete checkpoint: normally the one `latest` names (a checkpoint renamed just before a crash,
    whose pointer was not yet updated, is complete too); a damaged one is skipped with a message."""
    if not root.is_dir():
        return None
    candidates = sorted(root.glob("step-*"), reverse=True)  # names sort by step: step-0000500
    for path in candidates:
        reason = _is_complete(path)
        if reason is None:
            return path
        log(f"checkpoint {path} is damaged ({reason}); falling back to an earlier one")
    return None


def load_state(path: Path) -> dict:
    return json.loads((path / STATE_FILE).read_text())


def save_best(accelerator, model, task, directory: Path) -> None:
    """The model's full weights as a plain Hugging Face folder: every process takes part in gathering them (sharded
    under FSDP or ZeRO-3), the main process writes."""
    state_dict = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        task.save(directory, state_dict=state_dict)
    accelerator.wait_for_everyone()


def load_weights(accelerator, model, directory: Path) -> None:
    """The weights of a folder written by `save_best` into `model` (prepared by accelerate), on every process."""
    from accelerate.utils import DistributedType
    from safetensors.torch import load_file

    from .lora import load_adapter_weights

    if load_adapter_weights(accelerator.unwrap_model(model), directory):  # a peft run's best holds its adapter
        return
    weights = {}
    for f in sorted(Path(directory).glob("model*.safetensors")):
        weights.update(load_file(str(f)))
    if accelerator.distributed_type == DistributedType.FSDP:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
    else:
        load_tied(accelerator.unwrap_model(model), weights)


def load_tied(model, weights: dict) -> None:
    """`weights` into `model`, where the saved file leaves out tied parameters (a masked-LM decoder that is the word
    embedding matrix): each missing one must share its storage with a loaded one; anything else missing is an
    error, as with strict loading."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    state = model.state_dict()
    loaded = {state[k].data_ptr() for k in weights if k in state}
    untied = [k for k in missing if state[k].data_ptr() not in loaded]
    if untied or unexpected:
        raise RuntimeError(f"loading the best weights: missing {untied}, unexpected {unexpected}")


def write_run_model(task, out: Path, best: Path) -> None:
    """The run folder itself becomes the best checkpoint: the best weights (as saved during training, so no process
    needs the full model in memory) with the task's config and tokenizer, each file replaced atomically."""
    from safetensors.torch import load_file

    from . import lora

    weights = None  # a peft run: the weights in memory are the best (the trainer loaded them); merged here
    if lora.is_peft(task.model):
        lora.keep_adapter(best, out)
        task.model = lora.merged(task.model)
    else:
        weights = {}
        for f in sorted(Path(best).glob("model*.safetensors")):
            weights.update(load_file(str(f)))
    tmp = task.save(Path(out) / ".model.tmp", state_dict=weights)
    for f in tmp.iterdir():
        f.replace(Path(out) / f.name)
    shutil.rmtree(tmp, ignore_errors=True)

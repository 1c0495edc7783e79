"""A fine-tuned run (or any BERT checkpoint) → ONNX graphs with dynamic batch and sequence axes, checked against
torch, optionally quantised to int8.

The graphs come from torch's own exporter, `torch.onnx.export(..., dynamo=True)` (needs `onnxscript`): it captures
the model with `torch.export`, so transformers' attention-mask code stays symbolic in the sequence length. The
older TorchScript exporter (`dynamo=False`) bakes the example's padding into the graph: 1e-2 off on padded
batches of another shape, so it is not used. Optimum's exporter (`optimum-onnx`) pins transformers < 4.58 and is
not used either. `--quantize int8` is onnxruntime's dynamic quantisation (`quantize_dynamic`): int8 weights of the
MatMul/Gemm layers with a scale per output channel, activations quantised per batch at run time; no calibration
data. Per-channel scales, because one scale per matrix is set by its few outlier channels
(`benchmarks/int8_accuracy.py` compares both; docs/speed.md).

Folder written (`OUTPUT`):
    model.onnx      the task head, absent for a base checkpoint. Inputs `input_ids`, `attention_mask`
                    [, `token_type_ids`], int64 [batch, sequence]; outputs the adapter's `output_keys`: `logits`
                    [batch, labels] (classification) or [batch, sequence, labels] (NER), or `start_logits`,
                    `end_logits` [batch, sequence] (QA)
    features.onnx   the encoder for feature extraction: the same inputs → `hidden_state_K` [batch, sequence, H] for
                    each exported hidden state K (0 = embeddings, L = last layer)
    config.json, the tokenizer's files, config.yaml (the run's), export.json (what is inside, checks, versions)

Example:
```python
info = export_onnx("runs/sst2", "runs/sst2-onnx", quantize="int8")  # runs/sst2: a run of `bertkit finetune sst2`
info["graphs"]["model.onnx"]["outputs"]  # the adapter's output_keys: ['logits'] for classification
```
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from ..errors import BertkitError, need_extra
from ..models import resolve_model
from ..utils import atomic_path, versions

OPSET = 18
SAMPLE = ["a short one", "and a somewhat longer example sentence to pad the first one against"]
CHECK = ["the film is good", "no", "EU rejects German call to boycott British lamb .", "what is it ?"]


def model_inputs(input_ids, attention_mask, token_type_ids=None) -> dict:
    """The model's keyword inputs; token type ids only where the graph has them (`bertkit.families`: a family that
    reads none is not given the argument)."""
    return dict(input_ids=input_ids, attention_mask=attention_mask,
                **({"token_type_ids": token_type_ids} if token_type_ids is not None else {}))


class Head(torch.nn.Module):
    """A task model with plain tensor outputs: (output_keys...) for ONNX."""

    def __init__(self, model, output_keys: tuple[str, ...]):
        super().__init__()
        self.model, self.keys = model, output_keys

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        out = self.model(**model_inputs(input_ids, attention_mask, token_type_ids))
        return tuple(out[k] for k in self.keys)  # logits [batch, (sequence,) labels] or start/end [batch, sequence]


class Features(torch.nn.Module):
    """A base model's chosen hidden states: (hidden_state_K for K in layers), each [batch, sequence, H]."""

    def __init__(self, model, layers: list[int]):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        hidden = self.model(**model_inputs(input_ids, attention_mask, token_type_ids),
                            output_hidden_states=True).hidden_states  # L+1 × [batch, sequence, H]
        return tuple(hidden[k] for k in self.layers)


@contextmanager
def quiet(logger: str):
    """Only errors from `logger` ("" = the root logger) inside the block; its level is restored after."""
    log = logging.getLogger(logger or None)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _inputs(tokenizer, texts: list[str], names: list[str]) -> dict[str, torch.Tensor]:
    enc = tokenizer(texts, padding=True, return_tensors="pt")  # [batch, sequence], the first row padded
    return {n: enc[n] if n in enc else torch.zeros_like(enc["input_ids"]) for n in names}


def export_graph(module: torch.nn.Module, path: Path, example: dict, output_names: list[str]) -> None:
    """`module` → ONNX at `path`, every axis of every input dynamic: [batch, sequence], or [batch, choices,
    sequence] for multiple choice."""
    import warnings

    names = list(example)
    axes = ["batch", "choices", "sequence"] if example[names[0]].dim() == 3 else ["batch", "sequence"]
    dims = {a: torch.export.Dim(a) for a in axes}
    with quiet("torch.onnx"), warnings.catch_warnings():  # "torchvision is not installed", axis-naming notes
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), tuple(example.values()), str(path), dynamo=True, opset_version=OPSET,
                          input_names=names, output_names=output_names, external_data=False, verbose=False,
                          dynamic_shapes={n: {i: dims[a] for i, a in enumerate(axes)} for n in names})


def check_graph(module: torch.nn.Module, path: Path, inputs: dict) -> float:
    """Largest |torch - onnxruntime| over the outputs on `inputs` (another batch and length than the export's), at
    the real tokens of outputs with a sequence axis: padding positions are never read, and a padding row that
    attends to nothing (ModernBERT's local attention far past the text) is a different number in each runtime."""
    import onnxruntime as ort

    with torch.no_grad():
        expected = [t.float().numpy() for t in module(**inputs)]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {k: v.numpy() for k, v in inputs.items()})
    mask = inputs["attention_mask"].numpy().astype(bool)  # [batch, (choices,) sequence]
    diffs = []
    for e, g in zip(expected, got, strict=True):
        diff = np.abs(e - g)
        if diff.shape[:mask.ndim] == mask.shape:
            diff = diff[mask]  # [real tokens, ...]
        diffs.append(float(diff.max()))
    return max(diffs)


def quantize_int8(path: Path, per_channel: bool = True) -> None:
    """Dynamic int8 quantisation of `path`, in place: int8 weights with a scale per output channel (or one per
    tensor), activations quantised per batch at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = path.with_suffix(".int8.onnx")
    with quiet(""):  # its hint to pre-process, logged on the root logger
        quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8, per_channel=per_channel)
    out.replace(path)


def export_onnx(model: str, output, quantize: str | None = None, layers: str = "embeddings,all",
                features: bool = True, tolerance: float = 1e-3, per_channel: bool = True) -> dict:
    """Export `model` (a run folder, a checkpoint folder or `minilm-l6`) into the folder `output`; returns what
    export.json records. `layers` picks the hidden states of features.onnx (`bertkit extract`'s --layers
    syntax); `features=False` leaves it out for a model with a task head. `per_channel=False` quantises with one
    scale per weight matrix instead of one per output channel (`benchmarks/int8_accuracy.py` compares them).
    Raises `BertkitError` when a graph differs from torch by more than `tolerance` (fp32, before quantisation)."""
    from transformers import AutoModel

    from ..extract.layers import parse_layers
    from ..models import hub_snapshot, load_pretrained, load_tokenizer
    from ..tasks import head_task

    if quantize not in (None, "int8"):
        raise BertkitError(f"--quantize {quantize!r}: only int8 (dynamic quantisation) is supported")
    need_extra("bertkit export", "onnx", "onnx", "onnxscript", "onnxruntime")  # before the model loads
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise BertkitError(f"output folder {output} is " + ("not empty" if output.is_dir() else "a file"))
    path, local = resolve_model(model)
    path = path if local else hub_snapshot(model)  # a hub id: its files in the hub's cache, read as a folder's
    head_cls = head_task(path)
    tokenizer = load_tokenizer(path)
    task = None
    if head_cls is not None:
        task = head_cls.from_pretrained(path)
        task_model, keys = task.model.float().eval(), task.output_keys
        base = task_model.base_model
    elif not features:
        raise BertkitError(f"{model} has no task head: there is nothing to export without features.onnx")
    else:
        task_model, keys, base = None, (), load_pretrained(AutoModel, path, skip=("pooler.",))[0].float().eval()
    chosen = parse_layers(layers, base.config.num_hidden_layers) if features else []
    chosen = list(dict.fromkeys(chosen))  # each hidden state once, in the order asked for
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if "token_type_ids" in tokenizer.model_input_names
                                               else [])
    graphs = {}
    with atomic_path(output, is_dir=True) as tmp, tempfile.TemporaryDirectory() as scratch:
        todo = ([("model.onnx", Head(task_model, keys), list(keys))] if task_model is not None else []) + \
               ([("features.onnx", Features(base, chosen), [f"hidden_state_{k}" for k in chosen])] if chosen else [])
        for name, module, outputs in todo:
            print(f"exporting {name} ({', '.join(outputs[:3])}{', ...' if len(outputs) > 3 else ''})", file=sys.stderr)
            inputs = task.export_inputs if name == "model.onnx" else lambda texts, n: _inputs(tokenizer, texts, n)
            example, check = inputs(SAMPLE, names), inputs(CHECK, names)
            target = Path(scratch) / name
            try:
                export_graph(module, target, example, outputs)
            except Exception as e:  # torch.export / the ONNX translation cannot take an operation of this model
                kind = (task_model or base).config.model_type
                raise BertkitError(f"{name}: torch's ONNX exporter cannot export this {kind} model ("
                                   f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]})") from None
            diff = check_graph(module, target, check)
            if diff > tolerance:
                raise BertkitError(f"{name}: ONNX Runtime differs from torch by {diff:.2e} (> {tolerance}); "
                                   "not exported")
            if quantize:
                quantize_int8(target, per_channel)
            shutil.move(str(target), tmp / name)
            graphs[name] = {"inputs": names, "outputs": outputs, "max_abs_diff_fp32": diff}
        (task_model or base).config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if (Path(path) / "config.yaml").is_file():
            shutil.copy(Path(path) / "config.yaml", tmp / "config.yaml")
        info = {"source": str(model), "format": "onnx", "opset": OPSET, "quantize": quantize,
                "per_channel": per_channel if quantize else None,
                "precision": quantize or "fp32", "task_head": head_cls.__name__ if head_cls else None,
                "task": head_cls.name if head_cls else None,
                "pipeline_tag": head_cls.pipeline_tag if head_cls else None,
                "layers": chosen, "graphs": graphs,
                "versions": versions("bertkit", "torch", "transformers", "onnx", "onnxruntime", "onnxscript")}
        (tmp / "export.json").write_text(json.dumps(info, indent=2) + "\n")
    return info

"""Running an ONNX export (`bertkit export`) with ONNX Runtime on CPU: the same adapters, encoding and
post-processing as with torch; only the forward pass is swapped.

- `load_onnx_task(folder)`: the export's task, with an `OnnxRunner` as its `runner`: `predict`, `infer` and
  `score` work as on the torch task. Its `model` is a weightless stand-in on torch's meta device, built from
  config.json: the adapter reads the config (labels, window length, casing) from it; the weights are in model.onnx.
- `OnnxFeatureExtractor(folder, ...)`: `FeatureExtractor` whose `hidden_states` come from features.onnx.

Example:
```python
clf = load_onnx_task("runs/sst2-onnx")  # a folder `bertkit export` wrote
clf.predict(["a gripping, funny film"])[0]["label"]  # one of the run's label names
```
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..batching import sorted_batches, take_rows, unbatch
from ..errors import BertkitError, need_extra
from ..extract.extractor import FeatureExtractor


def is_export(folder) -> bool:
    return (Path(folder) / "export.json").is_file()


def read_export(folder) -> dict:
    """export.json of an export folder; a clear error for anything else."""
    if not is_export(folder):
        raise BertkitError(f"{folder} is not an ONNX export (no export.json); make one with "
                           f"`bertkit export --model RUN_DIR --format onnx --output DIR` and pass DIR")
    return json.loads((Path(folder) / "export.json").read_text())


def session(path, threads: int | None = None):
    """An ONNX Runtime CPU session; `threads` intra-op threads (default: onnxruntime's, one per physical core)."""
    need_extra(f"{path} (ONNX Runtime)", "onnx", "onnxruntime")
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def feed(batch: dict, names: list[str]) -> dict[str, np.ndarray]:
    """A padded torch batch as the graph's int64 inputs; token type ids 0 where the batch has none (as in torch)."""
    ids = batch["input_ids"]  # [batch, sequence]
    return {n: np.asarray(batch[n] if n in batch else torch.zeros_like(ids), dtype=np.int64) for n in names}


class OnnxRunner:
    """`forward_all`'s contract on an ONNX Runtime session: batches of similar length, the adapter's `collate`, one
    dict of `output_keys` per feature, cut to its length on `sequence_outputs` (and reduced), in input order.
    `precision` is ignored: the graph is what it was exported as (fp32 or int8)."""

    def __init__(self, session):
        self.session = session
        self.inputs = [i.name for i in session.get_inputs()]

    def __call__(self, adapter, features, batch_size: int, precision: str = "fp32") -> list[dict[str, np.ndarray]]:
        lengths = features["length"][:]
        results: list = [None] * len(lengths)
        reduce = adapter.output_reducer(features)
        for idx in sorted_batches(lengths, batch_size):
            batch = adapter.collate(take_rows(features, idx))
            keys = list(adapter.output_keys)
            arrays = dict(zip(keys, self.session.run(keys, feed(batch, self.inputs)), strict=True))
            unbatch(adapter, arrays, idx, lengths, results, reduce)  # arrays: [batch, (sequence,) ...] padded
        return results


def load_onnx_task(folder, threads: int | None = None):
    """The task of an export folder, answering through model.onnx (`threads`: see `session`)."""
    from transformers import AutoConfig

    from ..models import load_tokenizer
    from ..tasks import checkpoint_task

    info = read_export(folder)
    if "model.onnx" not in info["graphs"]:
        raise BertkitError(f"{folder} holds no task head (model.onnx): it was exported from a base checkpoint, for "
                           "feature extraction only")
    cls, path = checkpoint_task(str(folder))
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with torch.device("meta"):  # shapes and config only: no memory, no initialisation
        model = cls.auto_model_class.from_config(config)
    max_length, options = cls.run_settings(path)
    task = cls(model, load_tokenizer(path), None, max_length, options)
    task.source = str(folder)
    task.runner = OnnxRunner(session(Path(path) / "model.onnx", threads))
    return task


load_onnx_adapter = load_onnx_task  # the 0.2 name


class OnnxFeatureExtractor(FeatureExtractor):
    """`FeatureExtractor` (same encoding, combining and pooling) over features.onnx; only the hidden states the
    export holds (export.json `layers`) can be asked for."""

    def __init__(self, folder, layers: str = "last4", combine: str = "concat", pool: str = "mean",
                 batch_size: int = 64, max_length: int = 512, threads: int | None = None):
        from transformers import AutoConfig

        from ..families import words_tokenizer
        from ..models import load_tokenizer

        info = read_export(folder)
        if "features.onnx" not in info["graphs"]:
            raise BertkitError(f"{folder} was exported without features.onnx (bertkit export --no-features)")
        self.folder, self.exported = str(folder), info["layers"]
        self.session = session(Path(folder) / "features.onnx", threads)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.config = AutoConfig.from_pretrained(folder, local_files_only=True)
        self.model, self.tokenizer = None, words_tokenizer(load_tokenizer(str(folder)), self.config)
        self.device, self.precision = torch.device("cpu"), info["precision"]
        self.batch_size, self.max_length = batch_size, max_length
        self.configure(layers, combine, pool)

    def configure(self, layers: str, combine: str, pool: str):
        super().configure(layers, combine, pool)
        missing = [k for k in self.layers if k not in self.exported]
        if missing:
            raise BertkitError(f"hidden states {missing} are not in {self.folder} (it has {self.exported}); "
                               "export them with bertkit export --layers")
        return self

    def hidden_states(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        names = [f"hidden_state_{k}" for k in self.layers]
        out = self.session.run(names, feed(batch, self.inputs))  # layers × [batch, pieces, H]
        return torch.from_numpy(np.stack(out))  # [layers, batch, pieces, H]

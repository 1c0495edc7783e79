"""The model behind `bertkit serve`: a task adapter and a feature extractor over the same encoder, with torch or
ONNX Runtime underneath, answering batches of requests.

A batch (`run`) holds the items of several requests. Requests with the same key (the task's input rows of one
kind, e.g. single texts or pairs; one embedding setting) are joined into one call of the task's `predict_rows` (or
the extractor), which sorts them by length into model batches and gives the answers back in order: exactly what
`bertkit predict` and `bertkit extract` compute. The engine knows no task: the task says how a request body becomes
rows (`request_rows`) and how an answer is written (`echo`). If a call fails on bad input (`BertkitError`), each
request is retried alone, so one bad request gets its 400 without failing the others.
"""

from __future__ import annotations

import logging
import platform
import traceback
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import BertkitError

log = logging.getLogger("bertkit.serve")


@dataclass
class Job:
    """One request's work: `key` says how to run it (items with the same key share a model call)."""

    key: tuple
    items: list
    options: dict = field(default_factory=dict)
    result: list | None = None
    error: tuple[int, str, str] | None = None  # (HTTP status, "[item]" or "", reason)

    def __post_init__(self):
        self.size = sum(map(_chars, self.items)) / max(1, len(self.items))  # characters per item: for batching


def _chars(x) -> int:
    """Characters of an item's text, wherever it is (a string, a row's values, a list of words)."""
    if isinstance(x, str):
        return len(x)
    if isinstance(x, dict):
        return sum(map(_chars, x.values()))
    if isinstance(x, list | tuple):
        return sum(map(_chars, x))
    return 0


class Engine:
    def __init__(self, model: str, backend: str = "torch", precision: str = "auto", batch_size: int | None = None,
                 embed_max_length: int = 512, allow_pickle: bool = False, threads: int | None = None):
        """Build, warm up and run it on one thread (`bertkit serve` keeps a single model thread): torch's OpenMP
        threads belong to the thread that starts them. `threads`: intra-op threads of torch / onnxruntime (None:
        their defaults); `batch_size`: items per model batch inside a call (None: `model_batch`'s choice)."""
        self.model, self.backend = model, backend
        if backend == "onnx":
            from ..export.runtime import OnnxFeatureExtractor, load_onnx_task, read_export

            info = read_export(model)
            if precision not in ("auto", "fp32"):
                raise BertkitError(f"--precision {precision} is for the torch backend; an ONNX export runs as "
                                   "exported (fp32 or int8)")
            self.precision, self.precision_reason = info["precision"], "as exported"
            self.device = "cpu"
            self.batch_size = batch_size = batch_size or model_batch(backend, self.precision, "cpu")
            self.task = load_onnx_task(model, threads) if "model.onnx" in info["graphs"] else None
            self.extractor = (OnnxFeatureExtractor(model, ",".join(map(str, info["layers"])), batch_size=batch_size,
                                                   max_length=embed_max_length, threads=threads)
                              if "features.onnx" in info["graphs"] else None)
        else:
            import torch

            from ..device import choose_precision, default_device, model_precision
            from ..extract import FeatureExtractor
            from ..precast import precast
            from ..tasks import head_task, load_task
            from ..tasks.saved import inference_precision

            if threads:
                torch.set_num_threads(threads)
            device = default_device()
            self.device = device.type
            asked = inference_precision(precision, model)
            self.task = load_task(model, allow_pickle) if head_task(model) else None
            self.extractor = None
            if self.task is None:  # a base model: its extractor checks the precision and casts its own weights
                self.extractor = FeatureExtractor(model, "last", precision=asked, max_length=embed_max_length,
                                                  device=str(device))
            checked = self.task.model.to(device).eval() if self.task is not None else self.extractor.model
            choice = model_precision(choose_precision(asked, device), asked, checked)  # (the reason, said at start)
            reason = "auto: the run trained in fp32" if asked != precision else choice.reason
            self.precision, self.precision_reason = choice.precision, reason
            self.batch_size = batch_size = batch_size or model_batch(backend, self.precision, device)
            if self.task is not None:
                precast(self.task.model, self.precision)  # the linear weights in bf16 once, not at every call
                base, tokenizer = self.task.model.base_model, self.task.tokenizer
                self.extractor = FeatureExtractor(base, "last", precision=self.precision, batch_size=batch_size,
                                                  max_length=embed_max_length, device=str(device), tokenizer=tokenizer)
            else:
                self.extractor.batch_size = batch_size
        self.task_name = self.task.name if self.task is not None else None

    def metadata(self) -> dict:
        from .. import __version__
        from ..utils import versions

        meta = {"model": self.model, "backend": self.backend, "task": self.task_name, "precision": self.precision,
                "model_batch": self.batch_size,
                "endpoints": (["/predict"] if self.task else []) + (["/embed"] if self.extractor else [])}
        if self.task is not None:
            meta.update(labels=self.task.label_names or None, max_length=self.task.max_length,
                        inputs={k: getattr(t, "__name__", str(t)) for k, t in self.task.input_fields.items()},
                        request=self.example_request(), **self.task.describe())
        if self.extractor is not None:
            meta["embed"] = {"hidden_layers": self.extractor.config.num_hidden_layers,
                             "hidden_size": self.extractor.config.hidden_size,
                             "max_length": self.extractor.max_length,
                             **({"exported_layers": self.extractor.exported} if self.backend == "onnx" else {})}
        names = ["torch", "transformers", "tokenizers", "fastapi", "uvicorn"] + (
            ["onnxruntime"] if self.backend == "onnx" else [])
        meta["versions"] = {"bertkit": __version__, **versions(*names), "python": platform.python_version()}
        return meta

    def example_request(self) -> dict | None:
        """A `POST /predict` body as JSON (the task's `request_example`, options left unset left out)."""
        import dataclasses

        def plain(x):
            if isinstance(x, dict):
                return {k: plain(v) for k, v in x.items() if v is not None}
            return [plain(v) for v in x] if isinstance(x, list | tuple) else x

        return None if self.task is None else plain(dataclasses.asdict(self.task.request_example()))

    def predict_job(self, body, limits) -> Job:
        """The job of a `POST /predict` body (the task's request dataclass); `RequestError` on bad input."""
        rows, key, options = self.task.request_rows(body, limits)
        return Job(("predict", *key), rows, options)

    def warm_up(self) -> None:
        """One small call of each endpoint's path, so that the first requests do not pay for lazy set-up."""
        if self.task is not None:
            self.run([self.predict_job(self.task.request_example(), _NO_LIMITS)])
        if self.extractor is not None:
            self.run([Job(("embed", ",".join(map(str, self.extractor.layers)), "concat", "mean"), ["warm up"])])

    # --- batches (on the model thread) ---------------------------------------------------------------------------
    def run(self, jobs: list[Job]) -> None:
        """Fill each job's `result` (one answer per item, in order) or `error`."""
        groups: dict[tuple, list[Job]] = defaultdict(list)
        for job in jobs:
            groups[job.key].append(job)
        for key, group in groups.items():
            try:
                answers = self._call(key, [item for job in group for item in job.items], group[0].options)
            except BertkitError as e:
                if len(group) > 1:  # find the request at fault: each alone
                    for job in group:
                        self.run([job])
                else:
                    group[0].error = (400, *_locate(e))
                continue
            except Exception:  # a bug, not the request's fault: 500 for the request it happened in only
                if len(group) > 1:  # each alone: the others get their answers
                    for job in group:
                        self.run([job])
                    continue
                log.error("model call failed:\n%s", traceback.format_exc())
                group[0].error = (500, "", "internal error while running the model (see the server log)")
                continue
            start = 0
            for job in group:
                job.result = [self._format(key, item, answer)
                              for item, answer in zip(job.items, answers[start:start + len(job.items)], strict=True)]
                start += len(job.items)

    def _call(self, key: tuple, items: list, options: dict) -> list:
        if key[0] == "predict":  # items: the task's input rows
            return self.task.predict_rows(items, self.batch_size, self.precision, **options)
        if key[0] == "embed":  # key: (embed, layers, combine, pool)
            from ..extract.inputs import as_words

            fx = self.extractor.with_settings(*key[1:])
            words = [as_words(x, fx.tokenizer) for x in items]  # split here: the answer echoes them
            return list(zip(words, fx(words), strict=True))
        raise ValueError(f"unknown job kind {key[0]!r}")

    def _format(self, key: tuple, item, answer) -> dict:
        """One answer as `bertkit predict` writes it (a JSONL row), or one embedding."""
        if key[0] == "embed":
            words, vectors = answer
            return {"words": words, "vectors": vectors}  # a numpy array: made a JSON list off the model thread
        return self.task.echo(item, answer)


def call_items(device: str) -> int:
    """Items per model call (`--max-batch`), when not given: 16 on a CPU, where under load a call chosen by length
    from the waiting requests pads less than one that takes them all (docs/speed.md, "Serving under load"); 64
    elsewhere (a GPU: not measured, so as before)."""
    return 16 if device == "cpu" else 64


def model_batch(backend: str, precision: str, device) -> int:
    """Items per forward pass inside a server's call, when not given: 8 for torch in fp32 on a CPU, else 16. A call
    holds the requests that arrived together (random lengths, sorted inside it), so a batch pads to its longest
    item: in fp32 on a CPU, where a batch's cost is its padded size, 8 pads less than 16 and costs less CPU per
    request under load (docs/speed.md, "Serving fp32 in model batches of 8"); in bf16 the larger matrix products are
    worth more than the padding; ONNX Runtime was not measured at 8."""
    cpu = getattr(device, "type", str(device)) == "cpu"
    return 8 if backend == "torch" and precision == "fp32" and cpu else 16


class _Unlimited:
    max_items = max_text_chars = max_body_bytes = 10**9


_NO_LIMITS = _Unlimited()


def _locate(e: BertkitError) -> tuple[str, str]:
    """("[i]", reason) for an error about item i of a request (`SentenceError`), else ("", message)."""
    index = getattr(e, "index", None)
    return (f"[{index}]", str(e).split(": ", 1)[-1]) if index is not None else ("", str(e))

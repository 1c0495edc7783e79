"""The model behind `bertkit serve`: a task adapter and a feature extractor over the same encoder, with torch or
ONNX Runtime underneath, answering batches of requests.

A batch (`run`) holds the items of several requests. Requests of one kind (single texts, pairs, NER, QA, one
embedding setting) are joined into one call of the adapter's own `predict` (or the extractor), which sorts them by
length into model batches and gives the answers back in order: exactly what `bertkit predict` and `bertkit
extract` compute. If a call fails on bad input (`BertkitError`), each request is retried alone, so one bad request
gets its 400 without failing the others.
"""

from __future__ import annotations

import logging
import platform
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

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


class Engine:
    def __init__(self, model: str, backend: str = "torch", precision: str = "auto", batch_size: int = 64,
                 embed_max_length: int = 512, allow_pickle: bool = False, threads: int | None = None):
        """Build, warm up and run it on one thread (`bertkit serve` keeps a single model thread): torch's OpenMP
        threads belong to the thread that starts them. `threads`: intra-op threads of torch / onnxruntime (None:
        their defaults); `batch_size`: items per model batch inside a call."""
        from ..models import resolve_model

        self.model, self.backend, self.batch_size = model, backend, batch_size
        path, local = resolve_model(model)
        self.run_config = Path(path) / "config.yaml" if local and (Path(path) / "config.yaml").is_file() else None
        if backend == "onnx":
            from ..export.runtime import OnnxFeatureExtractor, load_onnx_adapter, read_export

            info = read_export(model)
            if precision not in ("auto", "fp32"):
                raise BertkitError(f"--precision {precision} is for the torch backend; an ONNX export runs as "
                                   "exported (fp32 or int8)")
            self.precision = info["precision"]
            self.adapter = load_onnx_adapter(model, threads) if "model.onnx" in info["graphs"] else None
            self.extractor = (OnnxFeatureExtractor(model, ",".join(map(str, info["layers"])), batch_size=batch_size,
                                                   max_length=embed_max_length, threads=threads)
                              if "features.onnx" in info["graphs"] else None)
        else:
            import torch

            from ..device import choose_precision, default_device
            from ..extract import FeatureExtractor
            from ..tasks import adapter_for_checkpoint, head_class

            if threads:
                torch.set_num_threads(threads)
            device = default_device()
            self.precision = choose_precision(precision, device).precision
            self.adapter = adapter_for_checkpoint(model, allow_pickle) if head_class(model) else None
            if self.adapter is not None:
                self.adapter.model.to(device).eval()
                base, tokenizer = self.adapter.model.base_model, self.adapter.tokenizer
                self.extractor = FeatureExtractor(base, "last", precision=self.precision, batch_size=batch_size,
                                                  max_length=embed_max_length, device=str(device), tokenizer=tokenizer)
            else:
                self.extractor = FeatureExtractor(model, "last", precision=self.precision, batch_size=batch_size,
                                                  max_length=embed_max_length, device=str(device))
        from ..config import load_run_config
        from ..tasks import ADAPTERS

        cfg = load_run_config(self.run_config) if self.run_config else None
        self.task = next((name for name, cls in ADAPTERS.items() if isinstance(self.adapter, cls)), None)
        self.run_task = cfg.task if cfg else None  # the recipe: sst2, conll2003, ...
        # a classifier trained on pairs needs them, one trained on single texts refuses them; unknown: either
        self.pairs = cfg.text_pair_column is not None if cfg and self.task == "sequence-classification" else None

    def metadata(self) -> dict:
        from .. import __version__
        from ..utils import versions

        meta = {"model": self.model, "backend": self.backend, "task": self.task, "precision": self.precision,
                "endpoints": (["/predict"] if self.adapter else []) + (["/embed"] if self.extractor else [])}
        if self.adapter is not None:
            meta.update(run_task=self.run_task, labels=self.adapter.label_names or None,
                        max_length=self.adapter.max_length, pairs=self.pairs)
        if self.extractor is not None:
            meta["embed"] = {"hidden_layers": self.extractor.config.num_hidden_layers,
                             "hidden_size": self.extractor.config.hidden_size,
                             "max_length": self.extractor.max_length,
                             **({"exported_layers": self.extractor.exported} if self.backend == "onnx" else {})}
        names = ["torch", "transformers", "tokenizers", "fastapi", "uvicorn"] + (
            ["onnxruntime"] if self.backend == "onnx" else [])
        meta["versions"] = {"bertkit": __version__, **versions(*names), "python": platform.python_version()}
        return meta

    def warm_up(self) -> None:
        """One small call of each endpoint's path, so that the first requests do not pay for lazy set-up."""
        if self.task == "sequence-classification":
            self.run([Job(("classify", bool(self.pairs)), [("warm up", "warm up" if self.pairs else None)])])
        elif self.task == "token-classification":
            self.run([Job(("ner",), ["warm up"])])
        elif self.task == "question-answering":
            from .schemas import Question

            self.run([Job(("qa",), [Question(question="warm up ?", context="warm up")])])
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
                answers = self._call(key, [item for job in group for item in job.items])
            except BertkitError as e:
                if len(group) > 1:  # find the request at fault: each alone
                    for job in group:
                        self.run([job])
                else:
                    group[0].error = (400, *_locate(e))
                continue
            except Exception:  # a bug, not the request's fault: 500 for this call's requests only
                log.error("model call failed:\n%s", traceback.format_exc())
                for job in group:
                    job.error = (500, "", "internal error while running the model (see the server log)")
                continue
            start = 0
            for job in group:
                job.result = [self._format(key, item, answer, job.options)
                              for item, answer in zip(job.items, answers[start:start + len(job.items)])]
                start += len(job.items)

    def _call(self, key: tuple, items: list) -> list:
        kind, bs, precision = key[0], self.batch_size, self.precision
        if kind == "classify":  # items: (text, pair or None); key[1]: pairs or not
            return self.adapter.predict([t for t, _ in items], [p for _, p in items] if key[1] else None,
                                        batch_size=bs, precision=precision, with_probs=True)
        if kind == "ner":
            return self.adapter.predict(items, batch_size=bs, precision=precision)
        if kind == "qa":
            return self.adapter.predict([q.question for q in items], [q.context for q in items], batch_size=bs,
                                        precision=precision)
        if kind == "embed":  # key: (embed, layers, combine, pool)
            from ..extract.inputs import split_text

            fx = self.extractor.with_settings(*key[1:])
            words = [split_text(x, fx.tokenizer) if isinstance(x, str) else list(x) for x in items]
            return list(zip(words, fx(words)))
        raise ValueError(f"unknown job kind {kind!r}")

    @staticmethod
    def _format(key: tuple, item, answer, options: dict) -> dict:
        """One answer as `bertkit predict` writes it (a JSONL row), or one embedding."""
        kind = key[0]
        if kind == "classify":
            text, pair = item
            if not options.get("probs"):
                answer = {k: v for k, v in answer.items() if k != "probabilities"}
            return {"text": text, **({"text_pair": pair} if pair is not None else {}), **answer}
        if kind == "qa":
            return {**({"id": item.id} if item.id is not None else {}), **answer}
        if kind == "embed":
            words, vectors = answer
            return {"words": words, "vectors": vectors}  # a numpy array: made a JSON list off the model thread
        return answer


def _locate(e: BertkitError) -> tuple[str, str]:
    """("[i]", reason) for an error about item i of a request (`SentenceError`), else ("", message)."""
    index = getattr(e, "index", None)
    return (f"[{index}]", str(e).split(": ", 1)[-1]) if index is not None else ("", str(e))

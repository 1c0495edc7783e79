"""A task outside training: the hooks `bertkit predict`, `serve`, `export` and the run report ask of it, with
defaults that work for a task whose inputs are rows of its `input_fields` (JSONL to predict, `{"inputs": [rows]}` to
serve). `Task` (base.py) inherits them; a built-in task's own are a mixin in its `*_io.py`."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import torch

from ..errors import DataError
from ..utils import quiet_maps
from .contract import encoded, scored
from .requests import check_rows, plain_rows, rows_request


class TaskIO:
    PREDICT_SLICE = 4096  # rows `bertkit predict` answers and writes at a time: memory of a slice, not of the input

    # --- inference on rows: `bertkit predict`, `serve`, notebooks ------------------------------------------------
    @quiet_maps()
    def predict_rows(self, rows: list[dict], batch_size: int = 64, precision: str = "fp32", **options) -> list[dict]:
        """One answer (a JSON-ready dict) per input row, in order. Rows have the `input_fields`; `options` are
        per-call output choices (e.g. probabilities). The default encodes the rows as examples and scores them."""
        if not rows:
            return []
        examples = self.examples(datasets.Dataset.from_list([{k: r[k] for k in self.input_fields} for r in rows]))
        features = encoded(self, examples)
        _, predictions = scored(self, self.infer(features, batch_size, precision), examples, features, None)
        return predictions

    @classmethod
    def add_predict_flags(cls, group) -> None:
        """`bertkit predict` flags of this task (added to the command once the model's task is known)."""

    @classmethod
    def predict_options(cls, args) -> dict:
        """`predict_rows` options from this task's `bertkit predict` flags (e.g. probabilities)."""
        return {}

    @classmethod
    def add_read_flags(cls, group, exclude=()) -> None:
        """`bertkit predict` flags for the task's options that say how a file is read (`read=True`: columns, ...),
        as `finetune` and `evaluate` take them; `exclude`: those predict's input has no use for."""
        from ..typed import add_flags, read_options

        add_flags(group, cls.Options, names=[n for n in read_options(cls.Options) if n not in exclude])

    @classmethod
    def read_as_the_run(cls, args):
        """The task's options an input file is read with: the run's own (its config.yaml; else the defaults), with
        the read flags given (`add_read_flags`) on top, checked as a recipe's."""
        from ..typed import build, given, read_options
        from .folders import checkpoint_task
        from .saved import saved_task

        saved = saved_task(checkpoint_task(args.model)[1])
        base = saved.options if saved is not None and isinstance(saved.options, cls.Options) else None
        return build(cls.Options, given(args, cls.Options, names=read_options(cls.Options)), "the command line",
                     base=base)

    @classmethod
    def read_inputs(cls, source: str, args) -> list[dict]:
        """`bertkit predict --input`: rows with the `input_fields`, read and checked line by line (JSONL by
        default; `-` is standard input)."""
        from ..data.readers import iter_jsonl, source_name

        name, rows = source_name(source), []
        fields = ", ".join(f'"{f}"' for f in cls.input_fields)
        for line, row in iter_jsonl(source, f"; each line is one JSON object with {fields}"):
            rows.append(cls.check_row(row, name, line))
        if not rows:
            raise DataError("no input rows", file=name)
        return rows

    @classmethod
    def check_row(cls, row: dict, file=None, line=None) -> dict:
        """An input row checked against `input_fields` (non-empty text, or a non-empty list of texts); extra keys
        (an `id`) are kept."""
        for name, kind in cls.input_fields.items():
            value = row.get(name)
            if value is None:
                raise DataError("missing field", file=file, line=line, field=name)
            texts = value if kind is not str and isinstance(value, list) else [value]
            if kind is not str and not isinstance(value, list) or not texts:
                raise DataError(f"must be a non-empty list of texts, got {value!r:.40}", file=file, line=line,
                                field=name)
            for text in texts:
                if not isinstance(text, str) or not text.strip():
                    raise DataError("empty text" if isinstance(text, str) else f"must be text, got {text!r:.40}",
                                    file=file, line=line, field=name)
        if "id" in row and (not isinstance(row["id"], (str, int)) or isinstance(row["id"], bool)):
            raise DataError(f"id must be a string or a number, got {row['id']!r:.40}", file=file, line=line,
                            field="id")
        return row

    def predict_slices(self, rows: list[dict]):
        """`bertkit predict`'s rows in the slices it answers and writes one after another (`PREDICT_SLICE` rows each;
        a task whose answers depend on neighbouring rows cuts only between independent ones)."""
        for start in range(0, len(rows), self.PREDICT_SLICE):
            yield rows[start:start + self.PREDICT_SLICE]

    def output_whole(self, rows: list[dict], args) -> bool:
        """True where `bertkit predict`'s output is one whole, not written slice by slice (`format_rows` then gets
        every row and answer at once)."""
        return False

    def format_rows(self, rows: list[dict], answers: list[dict], args) -> str:
        """`bertkit predict`'s output: one JSON line per row, its `id` (if any) first."""
        return "".join(json.dumps(self.echo(r, a)) + "\n" for r, a in zip(rows, answers, strict=True))

    @staticmethod
    def echo(row: dict, answer: dict) -> dict:
        """One output line: the answer, with the row's `id` (if any) first."""
        return {**({"id": row["id"]} if "id" in row else {}), **answer}

    # --- requests (a body of inputs, as `serve`'s POST /predict takes it; `requests.py`) ---------------------------
    def request_body(self) -> tuple[type, str]:
        """(dataclass of a request body, its field of items). Default: `{"inputs": [row, ...]}` with rows as
        `predict` reads them (`input_fields`, `optional_fields`)."""
        return rows_request(type(self).__name__, tuple(self.input_fields.items()),
                            tuple(self.optional_fields.items())), "inputs"

    def request_rows(self, body, limits) -> tuple[list[dict], tuple, dict]:
        """(rows, key, options) of a request body (an instance of `request_body`'s dataclass), checked against
        `limits` (`RequestLimits`); a bad body raises `RequestError`. Requests with the same key share a model
        call."""
        rows = plain_rows(body.inputs)
        check_rows("inputs", rows, self.input_fields, limits)
        return rows, (), {}

    def request_example(self):
        """A small request body (run once before a server opens)."""
        body, _ = self.request_body()
        row = {k: "warm up" if t is str else ["warm up", "warm up"] for k, t in self.input_fields.items()}
        return body(inputs=[body.Row(**row)])

    def describe(self) -> dict:
        """What `serve`'s /metadata says of the task beyond its name, labels and inputs."""
        return {}

    # --- export -----------------------------------------------------------------------------------------------
    def export_inputs(self, texts: list[str], names: list[str]) -> dict[str, torch.Tensor]:
        """Example inputs of the ONNX graph (`names`: the model's input names), from a few texts: [batch, sequence]
        each. Their axes after the batch are dynamic too."""
        enc = self.tokenizer(texts, padding=True, return_tensors="pt")
        return {n: enc[n] if n in enc else torch.zeros_like(enc["input_ids"]) for n in names}

    # --- reports ----------------------------------------------------------------------------------------------
    @classmethod
    def report_plots(cls, run: Path, split: str, predictions: list[dict], metrics: dict,
                     label_names: list[str]) -> list[str]:
        """Figures of one evaluation split for report.md (PNG file names written into `run`)."""
        return []

"""Multiple choice (SWAG, the BERT paper's §4.4): which of N endings continues a context?

Each ending is paired with the context, `[CLS] sent1 [SEP] sent2 + " " + ending [SEP]` (SWAG's `sent2` is the start
that every ending continues), truncated to `max_length` word pieces per pair. BERT reads the N pairs of an example;
the pooled [CLS] vector of each (dense + tanh) goes through one shared linear layer to a score; a softmax over the
N scores gives the choice (Hugging Face's `BertForMultipleChoice`, so the run folder loads in
`AutoModelForMultipleChoice`). Loss: cross-entropy over the N scores; metric: accuracy.

Data: SWAG's own CSV files and column names (`train.csv`, `val.csv`, `test.csv` whose label is empty: `video-id,
fold-ind, startphrase, sent1, sent2, gold-source, ending0..ending3, label`), or the hub's `allenai/swag` (config
`regular`, the same columns) when online. `bertkit predict` reads the same CSV, or JSONL rows `{"context",
"endings": [...], "start"?, "id"?}`, and answers the chosen ending with every ending's probability; `serve` takes
`{"inputs": [such rows]}`.

Example:
```python
mc = MultipleChoice.from_pretrained("runs/swag")  # a run of `bertkit finetune swag`
mc.predict_rows([{"context": "A man sits at a piano.", "endings": ["He plays a tune.", "He eats the piano."]}])
# [{'label': the chosen ending's index, 'ending': its text, 'score', 'probabilities': one per ending}]
```
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
from transformers import AutoModelForMultipleChoice

from ..data.choices import load_choices_data, load_choices_split, read_choices
from ..errors import BertkitError, DataError
from ..feature_cache import cached_map
from ..metrics import BUILTIN, compute_metrics
from ..typed import option
from ..utils import as_list, quiet_maps
from .base import Task
from .inputs import check_unicode
from .requests import RequestError
from .scores import softmax

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


@dataclass(frozen=True)
class MultipleChoiceOptions:
    """Which columns hold the context, the start of the endings, the endings and the label (SWAG's by default)."""

    context_column: str = option("sent1", "Column of the context (the first segment of every pair).", read=True)
    start_column: str | None = option("sent2", "Column of the start that every ending continues (prefixed to each "
                                               "ending in the second segment); none: the endings alone.", read=True)
    ending_columns: list[str] = option(["ending0", "ending1", "ending2", "ending3"], "Columns of the endings (two or "
                                       "more), or one column that holds each row's list of endings (JSONL, Parquet).",
                                       read=True)
    label_column: str = option("label", "Column of the right ending's index (empty in an unlabelled test file).",
                               read=True)

    def validate(self, source: str) -> None:
        if not self.ending_columns:
            raise BertkitError(f"{source}: 'ending_columns' must name the endings' columns")


class MultipleChoice(Task):
    name = "multiple-choice"
    Options = MultipleChoiceOptions
    auto_model_class = AutoModelForMultipleChoice
    architecture = "ForMultipleChoice"
    pipeline_tag = "multiple-choice"
    named_labels = False  # one score per choice: no label names
    metric_builtins = {"accuracy": BUILTIN["accuracy"]}
    default_metrics = ("accuracy",)
    input_fields = {"context": str, "endings": list}
    example_fields = ("context", "endings", "label")
    text_fields = ("context", "start", "endings")
    optional_fields = {"id": str | int, "start": str}

    def __init__(self, model, tokenizer, *args, **kwargs):
        super().__init__(model, tokenizer, *args, **kwargs)
        if getattr(model.base_model, "pooler", ...) is None:  # its head reads a pooler the model was built without
            import transformers

            raise BertkitError(f"{type(model).__name__} of transformers {transformers.__version__} is built without "
                               "the pooler its head reads (XLM-RoBERTa before transformers 5.14): upgrade "
                               "transformers (pip install 'transformers>=5.14')")

    # --- data ------------------------------------------------------------------------------------------------
    @classmethod
    def load_data(cls, cfg):
        return load_choices_data(cfg)

    @classmethod
    def load_split(cls, cfg, split, label_names, file=None):
        return load_choices_split(cfg, split, file)

    # --- features and training --------------------------------------------------------------------------------
    def examples(self, data) -> datasets.Dataset:
        """Questions as a Dataset (`context`, `start`, `endings`, `label`: the index of the right ending)."""
        ds = self._checked(data)
        if {"endings", "label"} <= set(ds.column_names):
            for i, (endings, label) in enumerate(zip(ds["endings"], ds["label"], strict=True)):
                if type(label) is not int or not 0 <= label < len(endings):
                    raise BertkitError(f"row {i}: label {label!r} is not the index of one of its {len(endings)} "
                                       f"endings (0-{len(endings) - 1})")
        return ds

    def encode(self, examples: datasets.Dataset) -> datasets.Dataset:
        """Examples → one feature each: N pairs (context, start + ending) of model inputs, `length` (the longest
        pair), `example_index`, and `labels` (the right ending) when the examples have one."""

        def pairs(batch, indices):
            firsts, seconds, counts = [], [], []
            for context, start, endings in zip(batch["context"], batch["start"], batch["endings"], strict=True):
                firsts += [context] * len(endings)
                seconds += [f"{start} {e}".strip() for e in endings]
                counts.append(len(endings))
            enc = self.tokenizer(firsts, seconds, truncation=True, max_length=self.max_length)
            out = {k: [] for k in (*[k for k in MODEL_INPUTS if k in enc], "length", "example_index")}
            at = 0
            for i, n in enumerate(counts):
                for k in MODEL_INPUTS:
                    if k in enc:
                        out[k].append(enc[k][at:at + n])  # [choices][pieces]
                out["length"].append(max(len(ids) for ids in enc["input_ids"][at:at + n]))
                out["example_index"].append(indices[i])
                at += n
            if "label" in batch:
                out["labels"] = list(batch["label"])
            return out

        if "start" not in examples.column_names:
            examples = examples.add_column("start", [""] * len(examples))
        identity = {"task": type(self).__name__, "max_length": self.max_length}
        return cached_map(examples, pairs, self.tokenizer, identity, with_indices=True,
                          desc="tokenize" if len(examples) > 10_000 else None)

    def collate(self, features: list[dict]) -> dict:
        """[batch, choices, pieces] inputs, each pair padded to the longest in the batch; `labels` [batch]."""
        n = len(features[0]["input_ids"])
        if any(len(f["input_ids"]) != n for f in features):
            raise BertkitError("examples of one batch must have the same number of endings")
        keys = [k for k in MODEL_INPUTS if k in features[0]]
        flat = [{k: f[k][c] for k in keys} for f in features for c in range(n)]  # [batch × choices] pairs
        batch = self.tokenizer.pad(flat, return_tensors="pt", pad_to_multiple_of=getattr(self, "_multiple", None))
        out = {k: v.view(len(features), n, -1) for k, v in batch.items()}  # [batch, choices, pieces]
        if "labels" in features[0]:
            out["labels"] = torch.tensor([f["labels"] for f in features])  # [batch]
        return out

    def pad_to_multiple_of(self, multiple: int | None) -> None:
        self._multiple = multiple

    # --- answers ---------------------------------------------------------------------------------------------
    def score(self, outputs, examples, features, metric_hooks):
        predictions = []
        for out, endings in zip(outputs, examples["endings"], strict=True):
            probs = softmax(out["logits"])  # [choices]
            k = int(probs.argmax())
            predictions.append({"label": k, "ending": endings[k], "score": float(probs[k]),
                                "probabilities": [float(p) for p in probs]})
        labelled = "label" in examples.column_names
        if labelled:
            for p, gold in zip(predictions, examples["label"], strict=True):
                p["gold"] = gold
        metrics = compute_metrics(metric_hooks, [p["label"] for p in predictions], list(examples["label"])) \
            if metric_hooks and labelled else {}
        return metrics, predictions

    def predict(self, contexts: list[str], endings: list[list[str]], batch_size: int = 64,
                precision: str = "fp32") -> list[dict]:
        """The likeliest ending of each context (notebook use), in input order: `endings` holds each context's
        candidates (two or more). A single str is one context, with `endings` its own candidates."""
        if isinstance(contexts, str):
            contexts, endings = [contexts], [endings]
        contexts, endings = list(contexts), [as_list(e) for e in endings]
        if len(contexts) != len(endings):
            raise BertkitError(f"{len(contexts)} contexts but {len(endings)} lists of endings")
        for i, (c, e) in enumerate(zip(contexts, endings, strict=True)):
            texts = [c, *e]
            if len(e) < 2 or not all(isinstance(x, str) and x.strip() for x in texts):
                raise BertkitError(f"context {i}: give a non-empty text and two or more non-empty endings")
        check_unicode(contexts, "contexts"), check_unicode(endings, "endings")
        return self.predict_rows([{"context": c, "endings": e} for c, e in zip(contexts, endings, strict=True)],
                                 batch_size, precision)

    @quiet_maps()
    def predict_rows(self, rows, batch_size=64, precision="fp32", **_):
        """Rows {context, endings, start?}; rows with different numbers of endings are run in separate groups."""
        answers: list = [None] * len(rows)
        for n in sorted({len(r["endings"]) for r in rows}):
            idx = [i for i, r in enumerate(rows) if len(r["endings"]) == n]
            examples = datasets.Dataset.from_dict({
                "context": [rows[i]["context"] for i in idx], "start": [rows[i].get("start", "") for i in idx],
                "endings": [list(rows[i]["endings"]) for i in idx]})
            features = self.encode(examples)
            _, predictions = self.score(self.infer(features, batch_size, precision), examples, features, None)
            for i, p in zip(idx, predictions, strict=True):
                answers[i] = p
        return answers

    # --- bertkit predict: SWAG CSV, or JSONL rows --------------------------------------------------------------
    @classmethod
    def add_predict_flags(cls, group) -> None:
        cls.add_read_flags(group, exclude=("label_column",))  # predict's CSV is unlabelled
        group.add_argument("--id-column", default="", help="a CSV's column echoed as each answer's id (default: id, "
                                                            "idx, index or fold-ind, where the file has one)")

    @classmethod
    def read_inputs(cls, source, args):
        if source != "-" and Path(source).suffix.lower() in (".csv", ".tsv"):  # its columns as the run's, or flags'
            data = read_choices(Path(source), cls.read_as_the_run(args), labelled=False, id_column=args.id_column)
            return [{**({"id": data["id"][i]} if "id" in data.column_names else {}), "context": data["context"][i],
                     "start": data["start"][i], "endings": data["endings"][i]} for i in range(len(data))]
        return super().read_inputs(source, args)

    @classmethod
    def check_row(cls, row, file=None, line=None):
        row = super().check_row(row, file, line)
        if "start" in row and not isinstance(row["start"], str):
            raise DataError(f"must be text, got {row['start']!r:.40}", file=file, line=line, field="start")
        if len(row["endings"]) < 2:
            raise DataError("give at least two endings", file=file, line=line, field="endings")
        return row

    def request_rows(self, body, limits):
        rows, key, options = super().request_rows(body, limits)
        for i, row in enumerate(rows):
            if len(row["endings"]) < 2:
                raise RequestError(f"inputs[{i}].endings", "give at least two endings")
        return rows, key, options

    def export_inputs(self, texts, names):
        """[batch, 2 choices, pieces] example inputs: each text paired with itself and with the next one."""
        firsts = [t for t in texts for _ in range(2)]
        seconds = [x for i in range(len(texts)) for x in (texts[i], texts[(i + 1) % len(texts)])]
        enc = self.tokenizer(firsts, seconds, padding=True, return_tensors="pt")
        inputs = {n: enc[n] if n in enc else torch.zeros_like(enc["input_ids"]) for n in names}
        return {n: v.view(len(texts), 2, -1) for n, v in inputs.items()}

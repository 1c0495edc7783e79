"""Extractive question answering (SQuAD v1.1): the answer is a span of the context, found by a start and an end
classifier over the context's tokens.

Input windows `[CLS] question [SEP] piece of the context [SEP]`: only the context is truncated ("only_second"), a
long context gives several windows of `max_length` word pieces, consecutive ones sharing `window_overlap` of them.
BERT → one linear layer → start and end logits per token. Training target of a window: the answer's first and
last token, or [CLS] (position 0) for both when the window does not hold the whole answer (the first reference
answer is the training answer). Prediction: the best span over all windows of the question (see `qa_spans.py`),
cut from the original context by character offsets.

Example:
```python
>>> qa = QuestionAnswering.from_pretrained("runs/squad")
>>> qa.predict(["Which team won Super Bowl 50?"], ["The Denver Broncos defeated the Carolina Panthers 24-10."])[0]
{'answer': 'Denver Broncos', 'score': 0.93, 'start': 4, 'end': 18}
```
"""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
from transformers import AutoModelForQuestionAnswering, DataCollatorWithPadding

from ..data.squad import load_squad_data, load_squad_split
from ..errors import BertkitError
from ..feature_cache import cached_map
from ..metrics import SQUAD_BUILTIN, compute_metrics
from ..utils import write_json
from .base import Adapter
from .qa_spans import Window, label_window, rank_answers

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
NO_ANSWER = {"text": "", "score": 0.0, "logit": 0.0, "start": 0, "end": 0}  # a context without any token


class QuestionAnswering(Adapter):
    auto_model_class = AutoModelForQuestionAnswering
    output_keys = ("start_logits", "end_logits")
    sequence_outputs = ("start_logits", "end_logits")
    label_keys = ("start_positions", "end_positions")
    default_max_length = 384
    metric_builtins = SQUAD_BUILTIN

    def __init__(self, model, tokenizer, label_names=None, max_length: int | None = None, window_overlap: int = 128,
                 max_question_length: int = 64, max_answer_length: int = 30, n_best: int = 20):
        super().__init__(model, tokenizer, [], max_length)  # no label names: the head is start/end
        self.window_overlap, self.max_question_length = window_overlap, max_question_length
        self.max_answer_length, self.n_best = max_answer_length, n_best
        if not getattr(tokenizer, "is_fast", False):
            raise BertkitError("question answering needs a fast (Rust) tokenizer for character offsets; "
                               f"{type(tokenizer).__name__} is not one")
        room = self.max_length - max_question_length - tokenizer.num_special_tokens_to_add(pair=True)
        if window_overlap >= room:
            raise BertkitError(f"window_overlap {window_overlap} must be smaller than the context room of a window: "
                               f"max_length {self.max_length} - max_question_length {max_question_length} - "
                               f"special tokens = {room}")
        self._collator = DataCollatorWithPadding(tokenizer)

    @staticmethod
    def _labels_from_config(config) -> list[str]:
        return []  # config.num_labels (2) sizes the start/end head; it names no labels

    @classmethod
    def options_from_config(cls, cfg) -> dict:
        return dict(window_overlap=cfg.window_overlap, max_question_length=cfg.max_question_length,
                    max_answer_length=cfg.max_answer_length, n_best=cfg.n_best)

    @classmethod
    def load_data(cls, cfg):
        return load_squad_data(cfg)

    @classmethod
    def load_split(cls, cfg, split, label_names, file=None):
        return load_squad_split(cfg, split, file)

    # --- features -------------------------------------------------------------------------------------
    def _cut_questions(self, questions: list[str]) -> list[str]:
        """Strip questions and cut them after `max_question_length` word pieces (at a token's last character)."""
        questions = [q.strip() for q in questions]
        enc = self.tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
        return [q if len(offs) <= self.max_question_length else q[: offs[self.max_question_length - 1][1]]
                for q, offs in zip(questions, enc["offset_mapping"])]

    def encode(self, examples: datasets.Dataset) -> datasets.Dataset:
        """Questions → windows (usually one per question; several for a long context). Columns: model inputs,
        `length`, `example_index` (row of the question), `offsets`, `context_start`/`context_end`, and for
        questions with answers `start_positions`/`end_positions`."""
        labelled = "answers" in examples.column_names
        cls_id = self.tokenizer.cls_token_id

        def windows(batch, indices):
            enc = self.tokenizer(self._cut_questions(batch["question"]), batch["context"], truncation="only_second",
                                 max_length=self.max_length, stride=self.window_overlap,
                                 return_overflowing_tokens=True, return_offsets_mapping=True)
            owner = enc["overflow_to_sample_mapping"]  # [windows] → question in this batch
            out = {k: enc[k] for k in MODEL_INPUTS if k in enc}
            out.update(length=[len(ids) for ids in enc["input_ids"]], example_index=[indices[q] for q in owner],
                       offsets=enc["offset_mapping"], context_start=[], context_end=[])
            if labelled:
                out.update(start_positions=[], end_positions=[])
            for w, q in enumerate(owner):
                context = [i for i, s in enumerate(enc.sequence_ids(w)) if s == 1]  # token indices of the piece
                start, end = (context[0], context[-1]) if context else (1, 0)  # (1, 0): an empty range
                out["context_start"].append(start)
                out["context_end"].append(end)
                if labelled:
                    answer = batch["answers"][q]
                    first = answer["answer_start"][0]
                    ids = enc["input_ids"][w]
                    s, e = label_window(np.asarray(enc["offset_mapping"][w]), start, end, first,
                                        first + len(answer["text"][0]), ids.index(cls_id) if cls_id in ids else 0)
                    out["start_positions"].append(s)
                    out["end_positions"].append(e)
            return out

        identity = {"adapter": type(self).__name__, "max_length": self.max_length, "overlap": self.window_overlap,
                    "max_question_length": self.max_question_length, "labelled": labelled}
        return cached_map(examples, windows, self.tokenizer, identity, with_indices=True,
                          desc="windows" if len(examples) > 5_000 else None)

    def collate(self, features: list[dict]) -> dict:
        keep = MODEL_INPUTS + self.label_keys
        return self._collator([{k: f[k] for k in keep if k in f} for f in features])  # pad to the longest

    # --- answers --------------------------------------------------------------------------------------
    def answers(self, outputs: list[dict], examples: datasets.Dataset, features: datasets.Dataset) -> list[dict]:
        """One prediction per question: {id, answer, score, start, end, nbest}, character offsets into its context."""
        windows: list[list[Window]] = [[] for _ in range(len(examples))]
        for out, q, offsets, start, end in zip(outputs, features["example_index"], features["offsets"],
                                               features["context_start"], features["context_end"]):
            windows[q].append(Window(out["start_logits"], out["end_logits"], np.asarray(offsets), start, end))
        ids = examples["id"] if "id" in examples.column_names else range(len(examples))
        predictions = []
        for qid, context, wins in zip(ids, examples["context"], windows):
            nbest = rank_answers(wins, context, self.n_best, self.max_answer_length)
            top = nbest[0] if nbest else NO_ANSWER
            predictions.append({"id": qid, "answer": top["text"], "score": top["score"], "start": top["start"],
                                "end": top["end"], "nbest": nbest})
        return predictions

    def score(self, outputs, examples, features, metric_hooks):
        predictions = self.answers(outputs, examples, features)
        metrics = {}
        if metric_hooks and "answers" in examples.column_names:
            for p, q, a in zip(predictions, examples["question"], examples["answers"]):
                p.update(question=q, gold=list(a["text"]))  # for the run report's breakdown by question type
            preds = [{"id": p["id"], "prediction_text": p["answer"]} for p in predictions]
            refs = [{"id": i, "answers": a} for i, a in zip(examples["id"], examples["answers"])]
            metrics = compute_metrics(metric_hooks, preds, refs)
        return metrics, predictions

    def write_predictions(self, directory, split, predictions, main=False):
        """`predictions_<split>.jsonl` (without the n-best lists), plus for the official v1.1 evaluation script
        `predictions.json` ({id: answer}) and `nbest_predictions.json` ({id: [{text, score, logit, start, end}]});
        splits other than the main one get a `_<split>` suffix on these two."""
        super().write_predictions(directory, split, [{k: v for k, v in p.items() if k != "nbest"}
                                                     for p in predictions], main)
        suffix = "" if main else f"_{split}"
        write_json(Path(directory) / f"predictions{suffix}.json", {p["id"]: p["answer"] for p in predictions})
        write_json(Path(directory) / f"nbest_predictions{suffix}.json", {p["id"]: p["nbest"] for p in predictions})

    def predict(self, questions: list[str], contexts: list[str], batch_size: int = 64, precision: str = "fp32",
                with_nbest: bool = False) -> list[dict]:
        """The answer to each question in its context (notebook use): {answer, score, start, end} with character
        offsets into the context (`context[start:end] == answer`) and score the answer's probability among the
        n best; `with_nbest` adds the list of alternatives. Order of the input is kept."""
        questions, contexts = list(questions), list(contexts)
        if len(questions) != len(contexts):
            raise BertkitError(f"{len(questions)} questions but {len(contexts)} contexts")
        for i, (q, c) in enumerate(zip(questions, contexts)):
            if not isinstance(q, str) or not q.strip() or not isinstance(c, str) or not c.strip():
                raise BertkitError(f"question {i}: the question and the context must be non-empty text")
        examples = datasets.Dataset.from_dict({"question": questions, "context": contexts})
        features = self.encode(examples)
        outputs = self.infer(features, batch_size, precision)
        keys = ("answer", "score", "start", "end") + (("nbest",) if with_nbest else ())
        return [{k: p[k] for k in keys} for p in self.answers(outputs, examples, features)]

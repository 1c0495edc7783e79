"""Extractive question answering (SQuAD v1.1 and 2.0): the answer is a span of the context, found by a start and an
end classifier over the context's tokens.

Input windows `[CLS] question [SEP] piece of the context [SEP]`: only the context is truncated ("only_second"), a
long context gives several windows of `max_length` word pieces, consecutive ones sharing `window_overlap` of them.
BERT → one linear layer → start and end logits per token. Training target of a window: the answer's first and
last token, or [CLS] (position 0) for both when the window does not hold the whole answer (the first reference
answer is the training answer). Prediction: the best span over all windows of the question (see `qa_spans.py`),
cut from the original context by character offsets.

SQuAD 2.0 (`allow_no_answer`): an unanswerable question's windows target [CLS] too (BERT §4.3). Its no-answer score
is start + end logit at [CLS] (the minimum over its windows); null odds = that score − the best span's. The answer is
"" (`no_answer: true`) when the null odds exceed a threshold: in training, the official `evaluate-v2.0.py`'s
`best_f1_thresh` on each evaluation set, and the main set's is saved in the checkpoint's config.json
(`bertkit_null_threshold`), which `bertkit evaluate`, `predict` and `QuestionAnswering.predict` then use.

Example:
```python
qa = QuestionAnswering.from_pretrained("runs/squad")  # a run of `bertkit finetune squad`
qa.predict(["Which team won Super Bowl 50?"], ["The Denver Broncos defeated the Carolina Panthers 24-10."])[0]
# {'answer': the span's text, 'score', 'start', 'end': its characters in the context}
QuestionAnswering.from_pretrained("runs/squad_v2").predict(["Who lost Super Bowl 51?"], [context])[0]
# SQuAD 2.0 also: 'no_answer' (True: 'answer' is '') and 'null_odds'
```
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import datasets
import numpy as np
from transformers import AutoModelForQuestionAnswering, DataCollatorWithPadding

from ..data.squad import check_rows, load_squad_data, load_squad_split
from ..errors import BertkitError
from ..feature_cache import cached_map
from ..metrics import SQUAD_BUILTIN, SQUAD_V2_BUILTIN, compute_metrics
from ..typed import option
from ..utils import as_list, quiet_maps
from .base import Task
from .inputs import check_unicode
from .qa_spans import (
    candidates,
    decide,
    label_window,
    null_logit,
    question_windows,
    rank_candidates,
    say_unreachable,
    training_answers,
    with_null,
)
from .question_answering_io import QuestionAnsweringIO

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
NO_ANSWER = {"text": "", "score": 0.0, "logit": 0.0, "start": 0, "end": 0}  # a context without any token


@dataclass(frozen=True)
class QuestionAnsweringOptions:
    """Options of extractive QA: context windows, question and answer lengths, SQuAD 2.0's no-answer."""

    window_overlap: int = option(128, "Word pieces shared by consecutive context windows of a long context (the "
                                      "overlap, Hugging Face's tokenizer `stride`; not the step between window "
                                      "starts).")
    max_question_length: int = option(64, "Questions are cut to this many word pieces (BERT's max_query_length).")
    max_answer_length: int = option(30, "Longest answer span considered, in word pieces.")
    n_best: int = option(20, "Best start and end positions tried per window; answers kept per question.")
    train_answer: str = option("first", "Which reference answer a training question with several is trained on: "
                                        "'first' (as run_squad.py), or 'consensus' (the one with the highest mean F1 "
                                        "against the others, ties to the earliest).", choices=["first", "consensus"])
    skip_bad_examples: bool = option(False, "Skip (and count) questions whose answer_start does not index their "
                                            "answer text, instead of stopping with an error.")
    allow_no_answer: bool = option(False, "Questions may have no answer (SQuAD 2.0): unanswerable ones train on the "
                                          "[CLS] span; a question gets no answer when the [CLS] score beats the best "
                                          "span by more than a threshold chosen on the main evaluation set (saved "
                                          "with the model).")

    def validate(self, source: str) -> None:
        for name in ("max_question_length", "max_answer_length", "n_best"):
            if getattr(self, name) <= 0:
                raise BertkitError(f"{source}: '{name}' must be positive")
        if self.window_overlap < 0:
            raise BertkitError(f"{source}: 'window_overlap' must be 0 or more")


class QuestionAnswering(QuestionAnsweringIO, Task):
    name = "question-answering"
    Options = QuestionAnsweringOptions
    auto_model_class = AutoModelForQuestionAnswering
    architecture = "ForQuestionAnswering"
    pipeline_tag = "question-answering"
    output_keys = ("start_logits", "end_logits")
    sequence_outputs = ("start_logits", "end_logits")
    label_keys = ("start_positions", "end_positions")
    default_max_length = 384
    named_labels = False  # config.num_labels (2) sizes the start/end head; it names no labels
    metric_builtins = SQUAD_BUILTIN
    default_metrics = ("exact_match", "f1")
    input_fields = {"question": str, "context": str}
    example_fields = ("question", "context", "answers")
    text_fields = ("question", "context")

    def __init__(self, model, tokenizer, label_names=None, max_length: int | None = None, options=None):
        super().__init__(model, tokenizer, [], max_length, options)  # no label names: the head is start/end
        o = self.options
        self.window_overlap, self.max_question_length = o.window_overlap, o.max_question_length
        self.max_answer_length, self.n_best = o.max_answer_length, o.n_best
        # SQuAD 2.0: the threshold on the null odds; None = choose it on each evaluation set (training)
        self.null_threshold = getattr(model.config, "bertkit_null_threshold", None)
        self.allow_no_answer = o.allow_no_answer or self.null_threshold is not None
        if self.allow_no_answer:
            self.metric_builtins = SQUAD_V2_BUILTIN
        if not getattr(tokenizer, "is_fast", False):
            raise BertkitError("question answering needs a fast (Rust) tokenizer for character offsets; "
                               f"{type(tokenizer).__name__} is not one")
        room = self.max_length - self.max_question_length - tokenizer.num_special_tokens_to_add(pair=True)
        if self.window_overlap >= room:
            special = tokenizer.num_special_tokens_to_add(pair=True)
            raise BertkitError(f"window_overlap {self.window_overlap} must be smaller than the context room of a "
                               f"window: max_length {self.max_length} - max_question_length "
                               f"{self.max_question_length} - {special} special tokens = {room}; lower "
                               "--window-overlap or --max-question-length, or raise --max-length")
        self._collator = DataCollatorWithPadding(tokenizer)

    @classmethod
    def metrics_for(cls, options):
        if options.allow_no_answer:
            return SQUAD_V2_BUILTIN, ("squad_v2", "best_f1")
        return SQUAD_BUILTIN, cls.default_metrics

    @classmethod
    def from_config(cls, cfg, label_names=None, allow_pickle: bool = False):
        """For training: the recipe says whether questions may have no answer, and a SQuAD 2.0 threshold is chosen
        again on this run's evaluation set, even when the base checkpoint carries one."""
        task = super().from_config(cfg, label_names, allow_pickle)
        task.null_threshold, task.allow_no_answer = None, cfg.task_options.allow_no_answer
        task.metric_builtins = cls.metrics_for(cfg.task_options)[0]
        if hasattr(task.model.config, "bertkit_null_threshold"):
            del task.model.config.bertkit_null_threshold
        return task

    def run_options(self):
        return replace(self.options, allow_no_answer=self.allow_no_answer)

    @classmethod
    def load_data(cls, cfg):
        train, evals, labels = load_squad_data(cfg, cfg.task_options)
        return training_answers(train, cfg.task_options.train_answer), evals, labels

    @classmethod
    def load_split(cls, cfg, split, label_names, file=None):
        return load_squad_split(cfg, cfg.task_options, split, file)

    def examples(self, data) -> datasets.Dataset:
        """Questions as a Dataset. A dict of lists or a Dataset in the datasets layout (`question`, `context`,
        `answers` as `{"text": [...], "answer_start": [...]}`, `id`?) is checked as a hub split is
        (`data.squad.check_rows`: an answer_start that does not index its answer is refused, the row named, or
        skipped with the option `skip_bad_examples`) and numbered where it has no ids; a Dataset that passes whole
        is kept as it is."""
        ds = self._checked(data)
        if not {"question", "context", "answers"} <= set(ds.column_names):
            return ds  # `Trainer.fit` names the missing column
        checked = check_rows(ds, None, self.allow_no_answer, self.options.skip_bad_examples)
        whole = isinstance(data, datasets.Dataset) and len(checked) == len(ds) and "id" in ds.column_names
        return ds if whole else checked

    # --- features -------------------------------------------------------------------------------------
    def _cut_questions(self, questions: list[str]) -> list[str]:
        """Strip questions and cut them after `max_question_length` word pieces (at a token's last character)."""
        questions = [q.strip() for q in questions]
        enc = self.tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
        return [q if len(offs) <= self.max_question_length else q[: offs[self.max_question_length - 1][1]]
                for q, offs in zip(questions, enc["offset_mapping"], strict=True)]

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
                    answer, ids = batch["answers"][q], enc["input_ids"][w]
                    cls_index = ids.index(cls_id) if cls_id in ids else 0
                    s = e = cls_index  # an unanswerable question (SQuAD 2.0) targets [CLS]
                    if answer["text"]:
                        first = answer["answer_start"][0]
                        s, e = label_window(np.asarray(enc["offset_mapping"][w]), start, end, first,
                                            first + len(answer["text"][0]), cls_index)
                    out["start_positions"].append(s)
                    out["end_positions"].append(e)
            return out

        identity = {"adapter": type(self).__name__, "max_length": self.max_length, "overlap": self.window_overlap,
                    "max_question_length": self.max_question_length, "labelled": labelled}
        features = cached_map(examples, windows, self.tokenizer, identity, with_indices=True,
                              desc="windows" if len(examples) > 5_000 else None)
        if labelled:
            say_unreachable(examples, features)
        return features

    def collate(self, features: list[dict]) -> dict:
        keep = MODEL_INPUTS + self.label_keys
        return self._collator([{k: f[k] for k in keep if k in f} for f in features])  # pad to the longest

    # --- answers --------------------------------------------------------------------------------------
    def _decide(self, p: dict, threshold: float | None) -> dict:
        """The answer fields of prediction `p` (v1.1: its best span; 2.0: the best span or no answer)."""
        if not self.allow_no_answer:
            top = p["nbest"][0] if p["nbest"] else NO_ANSWER
            return {"answer": top["text"], "score": top["score"], "start": top["start"], "end": top["end"]}
        d = decide(p["nbest"], p["null_odds"], p["null_probability"], 0.0 if threshold is None else threshold)
        return {"answer": d.pop("text"), **d}

    def output_reducer(self, features):
        """Evaluation keeps of each window only its answer `Candidates` (n_best start and end positions and logits,
        the [CLS] logits), not its start/end logits: what `answers` gives from them is the same."""
        starts, ends, n_best = list(features["context_start"]), list(features["context_end"]), self.n_best
        return lambda i, out: candidates(out["start_logits"], out["end_logits"], starts[i], ends[i], n_best)._asdict()

    def answers(self, outputs: list[dict], examples: datasets.Dataset, features: datasets.Dataset,
                threshold: float | None = None) -> list[dict]:
        """One prediction per question: {id, answer, score, start, end, nbest}, character offsets into its context;
        SQuAD 2.0 adds {no_answer, null_odds, null_probability}, decided at `threshold` (default: the adapter's,
        else 0.0). `outputs`: per window its start/end logits, or its `Candidates` (`output_reducer`). A question's
        windows are consecutive features; their token offsets are read a chunk of windows at a time."""
        ids = list(examples["id"]) if "id" in examples.column_names else range(len(examples))
        contexts = list(examples["context"])
        threshold = self.null_threshold if threshold is None else threshold
        predictions: list[dict] = []
        for q, wins in enumerate(question_windows(outputs, features, len(examples), self.n_best)):
            p = {"nbest": rank_candidates(wins, contexts[q], self.n_best, self.max_answer_length)}
            if self.allow_no_answer:
                p["nbest"], p["null_probability"], p["null_odds"] = with_null(p["nbest"],
                                                                              null_logit([c for c, _ in wins]))
            predictions.append({"id": ids[q], **self._decide(p, threshold), **p})
        return predictions

    @staticmethod
    def choose_threshold(predictions: list[dict]) -> float:
        """SQuAD 2.0: the official script's `best_f1_thresh` (a tie answered whole, `metrics.squad_v2`) for these
        predictions (with `gold`), each question answered by its best span: no answer where the null odds exceed it
        maximises F1 on them."""
        from ..metrics.squad_v2 import best_threshold, raw_scores  # (with evaluate: only where a run scores)

        spans = {p["id"]: p["nbest"][0]["text"] if p["nbest"] else "" for p in predictions}
        refs = {p["id"]: p["gold"] for p in predictions}
        f1 = raw_scores(spans, refs)[1]
        return best_threshold(spans, f1, {p["id"]: p["null_odds"] for p in predictions},
                              {q: bool(g) for q, g in refs.items()})[1]

    def score(self, outputs, examples, features, metric_hooks):
        """Metrics and predictions. SQuAD 2.0 without a saved threshold: the threshold is chosen on these examples
        (`choose_threshold`); the metrics are the official script's for the answers and null odds."""
        predictions = self.answers(outputs, examples, features)
        labelled = "answers" in examples.column_names
        if self.allow_no_answer and labelled:
            for p, a in zip(predictions, examples["answers"], strict=True):
                p["gold"] = list(a["text"])  # [] = unanswerable
            if self.null_threshold is None:
                threshold = self.choose_threshold(predictions)
                for p in predictions:
                    p.update(self._decide(p, threshold))
        metrics = {}
        if metric_hooks and labelled:
            if not self.allow_no_answer:  # for the run report's breakdown by question type (v1.1 scores)
                for p, q, a in zip(predictions, examples["question"], examples["answers"], strict=True):
                    p.update(question=q, gold=list(a["text"]))
            preds = [{"id": p["id"], "prediction_text": p["answer"], **({"no_answer_probability": p["null_odds"]}
                                                                         if self.allow_no_answer else {})}
                     for p in predictions]
            refs = [{"id": i, "answers": a} for i, a in zip(examples["id"], examples["answers"], strict=True)]
            metrics = compute_metrics(metric_hooks, preds, refs)
        return metrics, predictions

    def save(self, directory, state_dict=None):
        """The Hugging Face folder; a SQuAD 2.0 model's config also records its no-answer threshold
        (`bertkit_null_threshold`; plain transformers ignores the extra key)."""
        if self.allow_no_answer and self.null_threshold is not None:
            self.model.config.bertkit_null_threshold = float(self.null_threshold)
        return super().save(directory, state_dict)

    @quiet_maps()
    def predict(self, questions: list[str], contexts: list[str], batch_size: int = 64, precision: str = "fp32",
                with_nbest: bool = False) -> list[dict]:
        """The answer to each question in its context (notebook use): {answer, score, start, end} with character
        offsets into the context (`context[start:end] == answer`) and score the answer's probability among the
        n best; `with_nbest` adds the list of alternatives. Order of the input is kept. A SQuAD 2.0 model adds
        `no_answer` (then answer "", start = end = 0, score the no-answer probability) and `null_odds`. A single str
        is one question (or context)."""
        questions, contexts = as_list(questions), as_list(contexts)
        if len(questions) != len(contexts):
            raise BertkitError(f"{len(questions)} questions but {len(contexts)} contexts")
        for i, (q, c) in enumerate(zip(questions, contexts, strict=True)):
            if not isinstance(q, str) or not q.strip() or not isinstance(c, str) or not c.strip():
                raise BertkitError(f"question {i}: the question and the context must be non-empty text")
        check_unicode(questions, "questions"), check_unicode(contexts, "contexts")
        if not questions:
            return []
        examples = datasets.Dataset.from_dict({"question": questions, "context": contexts})
        features = self.encode(examples)
        outputs = self.infer(features, batch_size, precision)
        keys = ("answer", "score", "start", "end") + (("no_answer", "null_odds") if self.allow_no_answer else ()) \
            + (("nbest",) if with_nbest else ())
        return [{k: p[k] for k in keys} for p in self.answers(outputs, examples, features)]


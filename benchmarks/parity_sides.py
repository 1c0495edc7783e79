"""The Trainer side of benchmarks/trainer_parity.py, one function per kind of task: the model class and its
keyword arguments, the encoding of the training and the evaluation split, the collator and the metrics, each as
transformers' own example script for that kind of task does it (run_glue.py, run_ner.py, run_qa.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Side:
    model_class: type
    model_kwargs: dict
    encode_train: Callable
    encode_eval: Callable
    collator: object
    metrics: Callable
    notes: dict = field(default_factory=dict)  # figures for the table's notes, e.g. truncated evaluation sentences
    eval_in_order: bool = False  # metrics that map predictions to examples by position (QA's windows)

    def trainer_class(self):
        """transformers' Trainer, or where `eval_in_order` one that evaluates in the dataset's order. With
        `train_sampling_strategy="group_by_length"`, transformers 5 groups the evaluation set by length too
        (`Trainer._get_eval_sampler`), which reorders the predictions; run_qa.py's post-processing reads them by
        position, so with grouping it pairs windows with the wrong questions (docs/results.md, the SQuAD parity
        section)."""
        from torch.utils.data import SequentialSampler
        from transformers import Trainer

        class InOrder(Trainer):
            def _get_eval_sampler(self, eval_dataset):
                return SequentialSampler(eval_dataset)

        return InOrder if self.eval_in_order else Trainer


def sequence_side(cfg, tok, labels, dev) -> Side:
    """Sequence classification or regression (CoLA, STS-B, and the pair tasks MRPC, RTE, MNLI), as run_glue.py:
    one text or a pair, truncated to max_length (`truncation=True`: the longer text loses a token at a time); F1
    of label 1 where there are two labels (MRPC's paraphrase class, as GLUE's metric)."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding

    problem_type = cfg.task_options.problem_type
    regression = problem_type == "regression"

    def encode(ds):
        pair = "text_pair" in ds.column_names
        ds = ds.map(lambda b: tok(b["text"], b["text_pair"] if pair else None, truncation=True,
                                  max_length=cfg.max_length), batched=True,
                    remove_columns=[c for c in ds.column_names if c != "label"])
        return ds.rename_column("label", "labels")

    def metrics(p):
        if regression:
            pred = p.predictions.reshape(-1)
            return {"pearson": float(pearsonr(pred, p.label_ids)[0]),
                    "spearman": float(spearmanr(pred, p.label_ids)[0])}
        pred = p.predictions.argmax(-1)
        scores = {"mcc": float(matthews_corrcoef(p.label_ids, pred)),
                  "accuracy": float(accuracy_score(p.label_ids, pred))}
        return {**scores, "f1": float(f1_score(p.label_ids, pred))} if len(labels) == 2 else scores

    return Side(AutoModelForSequenceClassification, {"problem_type": problem_type, "num_labels": len(labels),
                                                     "id2label": dict(enumerate(labels))},
                encode, encode, DataCollatorWithPadding(tok), metrics)


def token_side(cfg, tok, labels, dev) -> Side:
    """NER as run_ner.py does it: the first piece of each word labelled, the rest -100, truncated at max_length;
    seqeval's entity scores (its default mode, conlleval's rules) over the labelled pieces."""
    from seqeval.metrics import f1_score, precision_score, recall_score
    from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification

    label2id = {name: i for i, name in enumerate(labels)}

    def encode(ds):
        def pieces(batch):
            out = tok(batch["tokens"], is_split_into_words=True, truncation=True, max_length=cfg.max_length)
            out["labels"] = []
            for i, tags in enumerate(batch["tags"]):
                ids = [label2id[t] if isinstance(t, str) else t for t in tags]
                row, previous = [], None
                for word in out.word_ids(i):
                    row.append(-100 if word is None or word == previous else ids[word])
                    previous = word
                out["labels"].append(row)
            return out

        return ds.map(pieces, batched=True, remove_columns=ds.column_names)

    def metrics(p):
        gold, pred = [], []
        for scores, ids in zip(p.predictions, p.label_ids, strict=True):  # scores: [positions, labels]
            keep = ids != -100
            gold.append([labels[k] for k in ids[keep]])
            pred.append([labels[k] for k in scores.argmax(-1)[keep]])
        return {"f1": f1_score(gold, pred), "precision": precision_score(gold, pred),
                "recall": recall_score(gold, pred)}

    # evaluation sentences longer than max_length word pieces: the Trainer cuts them, bertkit windows them
    cut = sum(len(tok(words, is_split_into_words=True)["input_ids"]) > cfg.max_length for words in dev["tokens"])
    return Side(AutoModelForTokenClassification, {"label2id": label2id, "num_labels": len(labels),
                                                  "id2label": dict(enumerate(labels))},
                encode, encode, DataCollatorForTokenClassification(tok), metrics,
                {"truncated_eval_sentences": cut, "eval_sentences": len(dev)})


def qa_windows(cfg, tok, ds, keep_offsets: bool):
    """run_qa.py's prepare_train_features (and, with `keep_offsets`, prepare_validation_features): question and
    context in windows of max_length that overlap by the recipe's window_overlap (the tokenizer's `stride`), each
    labelled with the first answer's first and last token, or [CLS] where that answer is not wholly inside."""
    def windows(batch):
        enc = tok([q.lstrip() for q in batch["question"]], batch["context"], truncation="only_second",
                  max_length=cfg.max_length, stride=cfg.task_options.window_overlap,
                  return_overflowing_tokens=True, return_offsets_mapping=True)
        owner = enc.pop("overflow_to_sample_mapping")  # [windows] → question in this batch
        enc["start_positions"], enc["end_positions"], enc["example_id"] = [], [], []
        for w, offsets in enumerate(enc["offset_mapping"]):
            ids, sequence = enc["input_ids"][w], enc.sequence_ids(w)
            cls_index = ids.index(tok.cls_token_id)
            answer = batch["answers"][owner[w]]
            start_char = answer["answer_start"][0] if answer["answer_start"] else None  # None: unanswerable (2.0)
            end_char = start_char + len(answer["text"][0]) if answer["answer_start"] else None
            first = sequence.index(1)
            last = len(sequence) - 1 - sequence[::-1].index(1)
            if start_char is None or not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
                start = end = cls_index
            else:
                while first < len(offsets) and offsets[first][0] <= start_char:
                    first += 1
                while offsets[last][1] >= end_char:
                    last -= 1
                start, end = first - 1, last + 1
            enc["start_positions"].append(start)
            enc["end_positions"].append(end)
            enc["example_id"].append(batch["id"][owner[w]])
            enc["offset_mapping"][w] = [o if s == 1 else None for o, s in zip(offsets, sequence, strict=True)]
        if not keep_offsets:
            del enc["offset_mapping"], enc["example_id"]
        return enc

    return ds.map(windows, batched=True, remove_columns=ds.column_names)


def postprocess(examples, windows, start_logits, end_logits, n_best: int = 20, max_answer_length: int = 30,
                with_null: bool = False):
    """run_qa.py's postprocess_qa_predictions. SQuAD v1.1: {question id: answer text}. With `with_null` (its
    `version_2_with_negative`): ({question id: best non-null answer}, {question id: null odds}), the null odds being
    its `score_diff` (what it writes to null_odds.json): the null score (start + end logit at position 0, the minimum
    over the question's windows) minus the best non-null answer's start and end logits; run_qa answers "" where they
    exceed its `null_score_diff_threshold`. `windows`: the evaluation windows of `qa_windows(..., keep_offsets=True)`;
    logits: [windows, positions], padded with -100."""
    candidates = defaultdict(list)  # question id → [(score, start char, end char, start logit, end logit)]
    null = {}  # question id → (score, 0, 0, start logit, end logit) of its window with the lowest null score
    for w, (qid, offsets) in enumerate(zip(windows["example_id"], windows["offset_mapping"], strict=True)):
        window_null = (start_logits[w][0] + end_logits[w][0], 0, 0, start_logits[w][0], end_logits[w][0])
        if qid not in null or null[qid][0] > window_null[0]:
            null[qid] = window_null
        starts = np.argsort(start_logits[w])[-1:-n_best - 1:-1]
        ends = np.argsort(end_logits[w])[-1:-n_best - 1:-1]
        for s in starts:
            for e in ends:
                if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                    continue
                if e < s or e - s + 1 > max_answer_length:
                    continue
                candidates[qid].append((start_logits[w][s] + end_logits[w][e], offsets[s][0], offsets[e][1],
                                        start_logits[w][s], end_logits[w][e]))
    answers, odds = {}, {}
    for qid, context in zip(examples["id"], examples["context"], strict=True):
        best = sorted(candidates[qid] + ([null[qid]] if with_null else []), key=lambda c: c[0], reverse=True)
        best = best[:n_best]
        if with_null and not any(c[1:3] == (0, 0) for c in best):
            best.append(null[qid])  # the null answer stays among the n best
        texts = [context[c[1]:c[2]] for c in best]
        if not best or (len(best) == 1 and not texts[0]):
            texts.insert(0, "empty")
            best.insert(0, (0.0, 0, 0, 0.0, 0.0))
        if not with_null:
            answers[qid] = texts[0]
            continue
        i = next(i for i, text in enumerate(texts) if text)  # the best non-null answer
        answers[qid] = texts[i]
        odds[qid] = float(null[qid][0] - best[i][3] - best[i][4])
    return (answers, odds) if with_null else answers


def squad_v2_decided(spans: dict, odds: dict, references: dict) -> dict:
    """SQuAD 2.0 scored as bertkit scores its own runs: the official script's best F1 threshold on the null odds
    chosen for these questions (the best non-null `spans`), the answers decided at it ("" where the odds exceed it),
    and the official metrics of those answers with the null odds as the no-answer scores (`--na-prob-file`)."""
    from bertkit.metrics.squad_v2 import best_threshold, raw_scores, squad_v2_scores

    has_answer = {q: bool(r) for q, r in references.items()}
    threshold = best_threshold(spans, raw_scores(spans, references)[1], odds, has_answer)[1]
    answers = {q: "" if odds[q] > threshold else text for q, text in spans.items()}
    return {**squad_v2_scores(answers, references, odds), "threshold": threshold}


def qa_side(cfg, tok, labels, dev) -> Side:
    """Extractive QA as run_qa.py does it: windows as `qa_windows`; answers by `postprocess` (run_qa's
    postprocess_qa_predictions: the 20 best starts × 20 best ends of each window over all its positions, kept where
    both lie in the context, end ≥ start and at most max_answer_length tokens, ranked by start + end logit over the
    question's windows; "empty" where none is left); SQuAD v1.1 scored by the v1.1 script's rules (bertkit's local
    copy of evaluate's `squad`, in percent); SQuAD 2.0 (the recipe's allow_no_answer) by `squad_v2_decided`, the
    official script's metrics at the best F1 threshold on run_qa's null odds. The evaluation windows carry labels
    too, so that the Trainer calls `compute_metrics` (it does not without labels): they change only the reported
    evaluation loss. The post-processing finds each window's question by its position, so the Trainer must evaluate
    in order (`eval_in_order`)."""
    from transformers import AutoModelForQuestionAnswering, DataCollatorWithPadding

    from bertkit.metrics.squad import squad_scores

    o = cfg.task_options
    v2 = o.allow_no_answer
    dev_windows = qa_windows(cfg, tok, dev, keep_offsets=True)
    references = dict(zip(dev["id"], (list(a["text"]) for a in dev["answers"]), strict=True))

    def encode_eval(ds):
        assert ds is dev, "the QA side evaluates the split it was built for"
        return dev_windows.remove_columns(["example_id", "offset_mapping"])

    def metrics(p):
        start_logits, end_logits = p.predictions  # [windows, positions] each, padded with -100
        answers = postprocess(dev, dev_windows, start_logits, end_logits, o.n_best, o.max_answer_length, v2)
        if v2:
            return squad_v2_decided(*answers, references)
        scores = squad_scores(answers, references)
        return {"f1": scores["f1"], "exact_match": scores["exact_match"]}

    return Side(AutoModelForQuestionAnswering, {}, lambda ds: qa_windows(cfg, tok, ds, keep_offsets=False),
                encode_eval, DataCollatorWithPadding(tok), metrics,
                {"eval_windows": len(dev_windows), "eval_questions": len(dev)}, eval_in_order=True)


SIDES = {"sequence-classification": sequence_side, "token-classification": token_side,
         "question-answering": qa_side}

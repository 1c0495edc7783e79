"""Extractive QA outside training, the `QuestionAnsweringIO` half of `QuestionAnswering` (question_answering.py):
what `bertkit predict` reads and writes, the predictions files a run writes for the official scorers, `serve`'s
request body (`QARequest`) and the run report's figure of exact match and F1 by question word.

`bertkit predict` reads JSONL rows {question, context, id?} (`Task.read_inputs`), or a SQuAD JSON file (`.json`:
every question of its articles, with its id; answers are not read) and writes JSONL, one answer a line (after its
id and question); or, with `--output-format squad`, one JSON object {id: answer text} ("" for no answer): the
official scorer's predictions file.

Example:
```
bertkit predict --model runs/squad --input dev-v1.1.json --output-format squad --output predictions.json
python evaluate-v1.1.py dev-v1.1.json predictions.json
```
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..utils import write_json
from .requests import body_field, check_count, check_text, plain_rows


@dataclass
class Question:
    question: str
    context: str
    id: str | int | None = None


@dataclass
class QARequest:
    """A request: questions, each with its context (`requests.py`; `serve`'s POST /predict)."""

    questions: list[Question] = body_field("questions, each with the context holding its answer")


class QuestionAnsweringIO:
    """`QuestionAnswering`'s hooks outside training (`Task`'s, base.py): `bertkit predict`'s rows and files, a
    run's predictions files, `serve`'s request body, the report's figure."""

    def predict_rows(self, rows, batch_size=64, precision="fp32", **_):
        return self.predict([r["question"] for r in rows], [r["context"] for r in rows], batch_size, precision)

    @staticmethod
    def echo(row: dict, answer: dict) -> dict:
        """An answer line: the row's id (if any) and question, then the answer (as the run's predictions file)."""
        return {**({"id": row["id"]} if "id" in row else {}), "question": row["question"], **answer}

    @classmethod
    def add_predict_flags(cls, group) -> None:
        group.add_argument("--output-format", default="jsonl", choices=["jsonl", "squad"],
                           help="jsonl: one answer a line (default); squad: one object {id: answer}, as the official "
                                "SQuAD scorer reads predictions (every input needs an id)")

    @classmethod
    def read_inputs(cls, source: str, args) -> list[dict]:
        from ..data.squad import read_squad_questions

        rows = read_squad_questions(source) if is_squad_file(source) else super().read_inputs(source, args)
        return check_ids(rows, getattr(args, "output_format", "jsonl"), source)

    def output_whole(self, rows, args) -> bool:
        return getattr(args, "output_format", "jsonl") == "squad"  # one object {id: answer}

    def format_rows(self, rows, answers, args) -> str:
        if getattr(args, "output_format", "jsonl") != "squad":
            return super().format_rows(rows, answers, args)
        return squad_predictions(rows, answers)

    def request_body(self):
        return QARequest, "questions"

    def request_rows(self, body: QARequest, limits):
        check_count("questions", len(body.questions), limits)
        for i, q in enumerate(body.questions):
            check_text(f"questions[{i}].question", q.question, limits)
            check_text(f"questions[{i}].context", q.context, limits)
        return plain_rows(body.questions), (), {}

    def request_example(self):
        return QARequest([Question("warm up ?", "warm up")])

    def write_predictions(self, directory, split, predictions, main=False):
        """`predictions_<split>.jsonl` (without the n-best lists), plus for the official evaluation scripts
        `predictions.json` ({id: answer}, "" for no answer), `nbest_predictions.json` ({id: [{text, score, logit,
        start, end}]}) and for SQuAD 2.0 `null_odds.json` ({id: null odds}, the v2.0 script's `--na-prob-file`);
        splits other than the main one get a `_<split>` suffix on these. SQuAD 2.0: the main split's chosen
        threshold becomes the adapter's (and so the saved model's) unless it has one already."""
        super().write_predictions(directory, split, [{k: v for k, v in p.items() if k != "nbest"}
                                                     for p in predictions], main)
        suffix = "" if main else f"_{split}"
        write_json(Path(directory) / f"predictions{suffix}.json", {p["id"]: p["answer"] for p in predictions})
        write_json(Path(directory) / f"nbest_predictions{suffix}.json", {p["id"]: p["nbest"] for p in predictions})
        if self.allow_no_answer:
            write_json(Path(directory) / f"null_odds{suffix}.json", {p["id"]: p["null_odds"] for p in predictions})
            if main and self.null_threshold is None and predictions and "gold" in predictions[0]:
                self.null_threshold = self.choose_threshold(predictions)

    @classmethod
    def report_plots(cls, run, split, predictions, metrics, label_names):
        image = plot_question_types(run, split, predictions)
        return [image] if image else []


def is_squad_file(source: str) -> bool:
    """A `.json` input is a SQuAD file ({"data": [articles]}, or run_qa.py's {"data": [questions]}) unless it holds
    a JSON object a line (`question_lines`); anything else JSONL."""
    from ..data.squad import question_lines

    return source != "-" and Path(source).suffix.lower() == ".json" and not question_lines(source)


def check_ids(rows: list[dict], output_format: str, source: str = "-") -> list[dict]:
    """`--output-format squad` keys answers by id: every row needs one, and no two the same (a SQuAD file's were
    checked as read; a JSONL file is read again for the line of a row that fails)."""
    if output_format != "squad":
        return rows
    from ..data.readers import iter_jsonl, source_name

    def at(i: int) -> tuple[int | None, str]:  # (its line, where it is in words)
        line = None if source == "-" else next(n for k, (n, _) in enumerate(iter_jsonl(source)) if k == i)
        return line, f"line {line}" if line else f"row {i + 1}"

    why = "--output-format squad keys each answer by its question's id"
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        line, place = at(i) if "id" not in row or str(row["id"]) in seen else (None, "")
        if "id" not in row:
            raise DataError(f"missing field ({why})" + ("" if line else f" on {place}"), file=source_name(source),
                            line=line, field="id")
        if str(row["id"]) in seen:
            raise DataError(f"id {row['id']!r} again (first on {at(seen[str(row['id'])])[1]}); {why}",
                            file=source_name(source), line=line, field="id")
        seen[str(row["id"])] = i
    return rows


def squad_predictions(rows: list[dict], answers: list[dict]) -> str:
    """{id: answer text} as one JSON object (the official scorer's predictions file)."""
    predictions = {str(r["id"]): a["answer"] for r, a in zip(rows, answers, strict=True)}
    return json.dumps(predictions, ensure_ascii=False) + "\n"


QUESTION_WORDS = ("what", "who", "when", "where", "which", "how", "why")


def plot_question_types(run: Path, split: str, preds: list[dict]) -> str | None:
    """Exact match and F1 (official v1.1 definitions) by the question's wh-word."""
    if not preds or "gold" not in preds[0] or "question" not in preds[0]:
        return None
    from ..metrics.squad import exact_match_score, f1_score
    from ..plots import plt, save_figure

    groups: dict[str, list] = {}
    for p in preds:
        words = p["question"].lower().split()
        kind = next((w for w in QUESTION_WORDS if w in words), "other")
        em = max(exact_match_score(p["answer"], g) for g in p["gold"])
        f1 = max(f1_score(p["answer"], g) for g in p["gold"])
        groups.setdefault(kind, []).append((em, f1))
    kinds = [k for k in (*QUESTION_WORDS, "other") if k in groups]
    fig, ax = plt().subplots(figsize=(1.0 * len(kinds) + 3, 3.4))
    x = range(len(kinds))
    ax.bar([i - 0.2 for i in x], [100 * sum(e for e, _ in groups[k]) / len(groups[k]) for k in kinds], 0.4,
           label="exact match")
    ax.bar([i + 0.2 for i in x], [100 * sum(f for _, f in groups[k]) / len(groups[k]) for k in kinds], 0.4, label="F1")
    ax.set(xticks=list(x), xticklabels=[f"{k}\n(n={len(groups[k])})" for k in kinds], ylabel="score (%)",
           ylim=(0, 110), title=f"EM and F1 by question word ({split})")
    ax.legend()
    return save_figure(fig, run / f"report_question_types_{split}.png")

"""SQuAD v1.1 and 2.0 data → `datasets.Dataset` of questions with columns `id`, `question`, `context`, `answers`.

`answers` has the hub format `{"text": [...], "answer_start": [...]}` (character offsets into the context). Sources:
the official JSON layout (`{"data": [{"paragraphs": [{"context", "qas": [{"id", "question", "answers"}]}]}]}`)
or JSONL in the Hugging Face datasets layout (a question a line: `{"id", "question", "context", "answers": {"text":
[...], "answer_start": [...]}}`; run_qa.py's: such lines in a `.json` file, or `{"data": [such questions]}`) under
`data_dir`, or, without local data, the recipe's hub dataset
(`rajpurkar/squad`, `rajpurkar/squad_v2`, online only).

SQuAD 2.0 (`no_answer=True`; the recipe's `allow_no_answer`): a question may be unanswerable, marked
`"is_impossible": true` with `"answers": []` (its `plausible_answers` are ignored); its `answers` column is then
empty. An unanswerable question with answers, or an answerable one (`is_impossible` false) without any, is an error.
Without `is_impossible` (the hub's layout) empty answers mean unanswerable. SQuAD v1.1 questions all need answers.

Everything is validated before a run starts; an error names the file (or hub split), the line of the question's id
in the JSON text, the field (its path in the file) and the question id: malformed JSON, missing fields, an empty
question or context, a duplicate id, answers that do not fit `is_impossible`, and an `answer_start` that does not
index its answer text. The last one alone can be skipped (`skip_bad_examples`, `--skip-bad-examples`): such
questions are dropped and counted in a warning. Questions keep their text minus leading/trailing whitespace;
contexts are kept byte for byte, since answer offsets point into them.

Example:
```python
questions, skipped = read_squad_file("data/squad/validation.json")  # an official-layout SQuAD file
questions[0]["answers"]  # {'text': [each reference answer], 'answer_start': [its character offset in the context]}
```
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from pathlib import Path

import datasets

from ..errors import BertkitError, DataError
from ..utils import LONE_SURROGATE, SURROGATE_ESCAPE, lone_surrogate
from .json_lines import lines_in_errors, object_line
from .readers import _text, first_lines, read_jsonl
from .sources import eval_paths, load_hub_splits, resolve_data_dir, split_path, training_file

logger = logging.getLogger("bertkit")
SKIP_HINT = "fix the file, or pass --skip-bad-examples to skip such questions"
NOTEBOOK_SKIP_HINT = "fix the row, or give the task skip_bad_examples=True to skip such questions"
FEATURES = datasets.Features({"id": datasets.Value("string"), "question": datasets.Value("string"),
                              "context": datasets.Value("string"), "answers": {
                                  "text": datasets.Sequence(datasets.Value("string")),
                                  "answer_start": datasets.Sequence(datasets.Value("int64"))}})  # as v1.1 infers


class AnswerMismatch(DataError):
    """An `answer_start` that does not point at its answer text in the context (skippable)."""


def _in(where: str, field: str) -> str:
    """A field's path: `field` inside the object at `where` (a JSONL line's own fields: `where` is empty)."""
    return f"{where}.{field}" if where else field


def _get(obj, key: str, kind: type, source, where: str):
    if not isinstance(obj, dict):
        raise DataError(f"expected a JSON object, got {type(obj).__name__}", file=source, field=where)
    if key not in obj:
        raise DataError(f"missing field '{key}'", file=source, field=_in(where, key))
    if not isinstance(obj[key], kind) or isinstance(obj[key], bool):
        raise DataError(f"'{key}' must be a {kind.__name__}, got {obj[key]!r:.80}", file=source,
                        field=_in(where, key))
    return obj[key]


def _impossible(qa: dict, qid: str, answers, source, where: str, no_answer: bool) -> bool:
    """Whether the question is unanswerable; raises DataError when its answers do not fit that."""
    flag = qa.get("is_impossible")
    if not isinstance(answers, list) and (answers is not None or no_answer):
        raise DataError(f"question {qid}: 'answers' must be a list of {{\"text\", \"answer_start\"}} objects"
                        + (" ([] for an unanswerable question)" if no_answer else "") + f", got {answers!r:.60}",
                        file=source, field=_in(where, "answers"))
    if not no_answer:
        if not isinstance(answers, list) or not answers:
            hint = ") (this one is marked is_impossible: SQuAD 2.0 data needs the squad_v2 recipe)" if flag is True \
                else "; unanswerable ones, SQuAD 2.0: the squad_v2 recipe, or --allow-no-answer)" if answers == [] \
                else ")"
            raise DataError(f"question {qid}: no answers (a SQuAD v1.1 question has at least one{hint}",
                            file=source, field=_in(where, "answers"))
        return False
    if flag is not None and not isinstance(flag, bool):
        raise DataError(f"question {qid}: 'is_impossible' must be true or false, got {flag!r:.40}", file=source,
                        field=_in(where, "is_impossible"))
    if flag and answers:
        raise DataError(f"question {qid}: is_impossible is true but it has {len(answers)} answer(s) (an unanswerable "
                        'SQuAD 2.0 question has "answers": []; candidate spans go in "plausible_answers")',
                        file=source, field=_in(where, "answers"))
    if flag is False and not answers:
        raise DataError(f"question {qid}: no answers, but is_impossible is false (an answerable SQuAD 2.0 question "
                        "has at least one; an unanswerable one is marked is_impossible: true)", file=source,
                        field=_in(where, "answers"))
    return not answers


def check_question(qa, context: str, source, where: str, no_answer: bool = False, with_answers: bool = True) -> dict:
    """One question as a row (`id`, `question`, `context`, `answers`); raises DataError naming its id. With
    `no_answer` (SQuAD 2.0) an unanswerable question gets empty answers; without `with_answers` (questions to
    answer) its answers are not read and the row has none."""
    qid = _get(qa, "id", str, source, where)
    if not qid.strip():
        raise DataError("empty question id", file=source, field=_in(where, "id"))
    if not isinstance(context, str) or not context.strip():
        raise DataError(f"question {qid}: empty context", file=source,
                        field=_in(where.rsplit(".qas", 1)[0], "context"))
    question = qa.get("question")
    if question is None:
        raise DataError(f"question {qid}: missing field 'question'", file=source, field=_in(where, "question"))
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"question {qid}: " + ("empty question" if isinstance(question, str) else
                                               f"the question must be text, got {question!r:.80}"),
                        file=source, field=_in(where, "question"))
    if not with_answers:
        return {"id": qid, "question": question.strip(), "context": context}
    answers = qa.get("answers")
    if _impossible(qa, qid, answers, source, where, no_answer):
        return {"id": qid, "question": question.strip(), "context": context, "answers": {"text": [],
                                                                                         "answer_start": []}}
    texts, starts = [], []
    for k, answer in enumerate(answers):
        text, start = (answer.get("text"), answer.get("answer_start")) if isinstance(answer, dict) else (None, None)
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"question {qid}: answer {k} has no text", file=source,
                            field=_in(where, f"answers[{k}].text"))
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise DataError(f"question {qid}: answer {k} needs a character offset 'answer_start' (an integer "
                            f"≥ 0), got {start!r}", file=source, field=_in(where, f"answers[{k}].answer_start"))
        found = context[start:start + len(text)]
        if found != text:
            raise AnswerMismatch(f"question {qid}: answer_start {start} does not index the answer {text!r} (the "
                                 f"context there reads {found!r})", file=source,
                                 field=_in(where, f"answers[{k}].answer_start"))
        texts.append(text)
        starts.append(start)
    return {"id": qid, "question": question.strip(), "context": context,
            "answers": {"text": texts, "answer_start": starts}}


def _id_lines(text: str):
    """`line_of(qid, nth)`: the line of the `nth` `"id": "<qid>"` in a JSON text (None when not found)."""
    def line_of(qid, nth: int = 0) -> int | None:
        if not isinstance(qid, str):
            return None
        for dumped in {json.dumps(qid), json.dumps(qid, ensure_ascii=False)}:
            found = list(itertools.islice(re.finditer(r'"id"\s*:\s*' + re.escape(dumped), text), nth + 1))
            if len(found) > nth:
                return text.count("\n", 0, found[nth].start()) + 1
        return None
    return line_of


def _at_line(e: DataError, line: int | None) -> DataError:
    return e if line is None or e.line is not None else type(e)(e.reason, file=e.file, line=line, field=e.field)


def collect_questions(records, source, skip_bad: bool = False, max_samples: int | None = None,
                      no_answer: bool = False, line_of=None, with_answers: bool = True,
                      skip_hint: str = SKIP_HINT) -> tuple[dict, int]:
    """Validate `(where, qa, context)` records into columns; returns (columns, number of skipped questions).
    `line_of(qid, nth)` (see `_id_lines`) puts the line of the question into errors, unless a record carries its line
    as a fourth item (JSONL); `with_answers`: as `check_question`'s; `skip_hint` ends the error of an answer that
    could be skipped (how to skip it where the questions come from)."""
    columns: dict[str, list] = {"id": [], "question": [], "context": [], **({"answers": []} if with_answers else {})}
    seen: dict[str, str] = {}
    skipped = 0
    line_of = line_of or (lambda qid, nth=0: None)
    for where, qa, context, *line in records:
        qid = qa.get("id") if isinstance(qa, dict) else None
        at = line[0] if line else line_of(qid)  # a JSONL question's own line
        try:
            row = check_question(qa, context, source, where, no_answer, with_answers)
        except AnswerMismatch as e:
            if not skip_bad:
                raise _at_line(AnswerMismatch(f"{e.reason}; {skip_hint}", file=e.file, line=e.line, field=e.field),
                               at) from None
            skipped += 1
            continue
        except DataError as e:
            raise _at_line(e, at) from None
        if row["id"] in seen:
            raise DataError(f"question {row['id']}: duplicate id (first at {seen[row['id']]})", file=source,
                            line=line[0] if line else line_of(qid, nth=1), field=_in(where, "id"))
        seen[row["id"]] = where or f"line {line[0]}"
        for key, value in row.items():
            columns[key].append(value)
    if skipped:
        logger.warning(f"{source or 'the questions given'}: skipped {skipped} question(s) whose answer_start does not "
                       f"index the answer text (skip_bad_examples); {len(columns['id'])} kept")
    if not columns["id"]:
        raise DataError("no questions" + (" left after skipping bad ones" if skipped else ""), file=source)
    if max_samples is not None:
        columns = {k: v[:max_samples] for k, v in columns.items()}
    return columns, skipped


def _records(obj, path: Path):
    """(where, qa, context) for every question of a parsed SQuAD JSON file, checking the outer structure: a "data"
    list of articles, or of questions in the datasets layout (run_qa.py's files: {"data": [{id, question, context,
    answers: {text, answer_start}}]})."""
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        raise DataError('not SQuAD JSON: expected an object with a "data" list of articles', file=path)
    first = obj["data"][0] if obj["data"] else None
    if isinstance(first, dict) and "paragraphs" not in first and "context" in first:  # a question per item
        for i, row in enumerate(obj["data"]):
            where = f"data[{i}]"
            if not isinstance(row, dict):
                raise DataError(f"expected a JSON object, got {type(row).__name__}", file=path, field=where)
            yield where, {**row, "answers": _listed(row.get("answers"), path, where)}, row.get("context")
        return
    for a, article in enumerate(obj["data"]):
        for p, paragraph in enumerate(_get(article, "paragraphs", list, path, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            context = _get(paragraph, "context", str, path, where)
            for q, qa in enumerate(_get(paragraph, "qas", list, path, where)):
                yield f"{where}.qas[{q}]", qa, context


def question_lines(path) -> bool:
    """Whether a file holds a question a line: `.jsonl`, or a `.json` file whose first line with text is a whole JSON
    object that is a question ({id, question, context, ...}: run_qa.py's and `Dataset.to_json`'s files are JSON
    lines named .json)."""
    path = Path(path)
    if path.suffix.lower() == ".jsonl":
        return True
    lines = first_lines(path, 1) if path.is_file() else []
    try:
        first = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        return False
    return isinstance(first, dict) and "data" not in first and bool({"id", "question", "context"} & first.keys())


def read_squad_file(path, skip_bad: bool = False, max_samples: int | None = None,
                    no_answer: bool = False) -> tuple[datasets.Dataset, int]:
    """Read and validate a SQuAD JSON file (v1.1, or 2.0 with `no_answer`), or a file of questions in the Hugging
    Face datasets layout, a question a line (`question_lines`, `_jsonl_records`): (questions, number skipped). All
    questions are validated, then the first `max_samples` are kept."""
    path = Path(path)
    if question_lines(path):  # the Hugging Face datasets layout, a question a line
        columns, skipped = collect_questions(_jsonl_records(path), path, skip_bad, max_samples, no_answer)
    else:
        text, obj = _json_file(path)
        with lines_in_errors(text):
            columns, skipped = collect_questions(_records(obj, path), path, skip_bad, max_samples, no_answer,
                                                 _id_lines(text))
    return datasets.Dataset.from_dict(columns, features=FEATURES), skipped


def read_squad_questions(path) -> list[dict]:
    """The questions of a SQuAD JSON file as rows {id, question, context}, in file order (`bertkit predict`): their
    answers, if any, are not read (an official test file has none)."""
    path = Path(path)
    text, obj = _json_file(path)
    with lines_in_errors(text):
        columns, _ = collect_questions(_records(obj, path), path, line_of=_id_lines(text), with_answers=False)
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _json_file(path: Path) -> tuple[str, object]:
    text = _text(path)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON: {e.msg} (column {e.colno})", file=path, line=e.lineno) from None
    if re.search(SURROGATE_ESCAPE, text) and (where := lone_surrogate(obj)) is not None:
        raise DataError(LONE_SURROGATE, file=path, line=object_line(text, where), field=where)
    return text, obj


def _listed(answers, source, where: str, line: int | None = None):
    """The datasets layout's answers, {text: [...], answer_start: [...]}, as SQuAD's list of {text, answer_start}
    (a list is kept as it is, anything else left for `check_question` to refuse)."""
    if not isinstance(answers, dict):
        return answers
    texts, starts = answers.get("text"), answers.get("answer_start")
    if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
        raise DataError("'answers' must hold lists 'text' and 'answer_start' of one length", file=source, line=line,
                        field=_in(where, "answers"))
    return [{"text": t, "answer_start": s} for t, s in zip(texts, starts, strict=True)]


def _jsonl_records(path: Path):
    """(where, qa, context, line) of a JSONL file, a question a line as the datasets layout has it: {id, question,
    context, answers: {text: [...], answer_start: [...]}} (SQuAD's list of answers, and 2.0's is_impossible, too)."""
    for n, row in read_jsonl(path):
        yield "", {**row, "answers": _listed(row.get("answers"), path, "", n)}, row.get("context"), n


def _hub_records(ds: datasets.Dataset, source):
    for i, row in enumerate(ds):
        qa = {"id": row.get("id", str(i)), "question": row.get("question"),
              "answers": _listed(row.get("answers") or {"text": [], "answer_start": []}, source, f"rows[{i}]")}
        yield f"rows[{i}]", qa, row.get("context") or ""


def check_rows(ds: datasets.Dataset, source, no_answer: bool, skip_bad: bool = False) -> datasets.Dataset:
    """Questions in the datasets layout (a notebook's lists) checked as a file's are; rows without an `id` are
    numbered."""
    columns, _ = collect_questions(_hub_records(ds, source), source, skip_bad, no_answer=no_answer,
                                   skip_hint=NOTEBOOK_SKIP_HINT)
    return datasets.Dataset.from_dict(columns, features=FEATURES)


def _from_hub(cfg, o, splits: list[str], limits: list[int | None]) -> list[datasets.Dataset]:
    out = []
    for name, ds, n in zip(splits, load_hub_splits(cfg, splits), limits, strict=True):
        source = f"{cfg.hub.dataset} ({name})"
        columns, _ = collect_questions(_hub_records(ds, source), source, o.skip_bad_examples, n, o.allow_no_answer)
        out.append(datasets.Dataset.from_dict(columns, features=FEATURES))
    return out


def load_squad_data(cfg, options) -> tuple[datasets.Dataset, dict[str, datasets.Dataset], list[str]]:
    """Train questions, evaluation questions by name (file stem or hub split), and no label names, as the files have
    them. `options`: the QA task's (`skip_bad_examples`, `allow_no_answer`)."""
    o, splits = options, list(cfg.hub.splits)
    data_dir = resolve_data_dir(cfg)
    if data_dir is None and not Path(cfg.train_file or "").is_absolute():
        limits = [cfg.max_train_samples] + [cfg.max_eval_samples] * (len(splits) - 1)
        train, *evals = _from_hub(cfg, o, splits, limits)
        return train, dict(zip(splits[1:], evals, strict=True)), []
    if not cfg.train_file:
        raise BertkitError("a SQuAD run needs a train_file (e.g. train.json)")
    read, eval_at = dict(skip_bad=o.skip_bad_examples, no_answer=o.allow_no_answer), eval_paths(cfg, data_dir)
    train, _ = read_squad_file(training_file(cfg, data_dir), max_samples=cfg.max_train_samples, **read)
    evals = {}
    for path in eval_at:
        evals[path.stem], _ = read_squad_file(path, max_samples=cfg.max_eval_samples, **read)
    return train, evals, []


def load_squad_split(cfg, options, split: str, file: str | None = None) -> datasets.Dataset:
    """One labelled split: an explicit file, the recipe's validation file whose stem is `split`, its test file
    ('test'), or (no local data) the hub split of that name."""
    o = options
    read = dict(skip_bad=o.skip_bad_examples, max_samples=cfg.max_eval_samples, no_answer=o.allow_no_answer)
    if file:
        return read_squad_file(Path(file), **read)[0]
    path = split_path(cfg, split)
    if path is None:
        return _from_hub(cfg, o, [split], [cfg.max_eval_samples])[0]
    return read_squad_file(path, **read)[0]

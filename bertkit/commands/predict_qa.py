"""`bertkit predict` for a question-answering checkpoint: JSONL {question, context[, id]} in, JSONL
{[id,] answer, score, start, end} out, with `start`/`end` character offsets into the context (end exclusive) and
`score` the answer's probability among the n best spans. A SQuAD 2.0 run (`finetune squad_v2`) may answer "no
answer": its lines add `no_answer` (true: answer "", start = end = 0, score the no-answer probability) and
`null_odds` (the [CLS] score minus the best span's; no answer when it exceeds the threshold saved with the run).

`predict.py` hands a run over here when the checkpoint's head is `*ForQuestionAnswering`.

Example:
```
echo '{"id": "q1", "question": "Who won?", "context": "The Denver Broncos won Super Bowl 50."}' \\
  | bertkit predict --model runs/squad --input -
{"id": "q1", "answer": "Denver Broncos", "score": 0.91, "start": 4, "end": 18}
```
"""

from __future__ import annotations

import argparse
import json

from ..data.readers import iter_jsonl, source_name
from ..errors import DataError
from .common import load_for_inference, write_output

EXAMPLE = """  echo '{"question": "Who won?", "context": "The Broncos won."}' \\
    | bertkit predict --model runs/squad --input -                # question answering: JSONL in, answers out
"""


def read_qa_inputs(source: str) -> list[dict]:
    """Rows {question, context, id?} of a JSONL file (or standard input for `-`), validated line by line."""
    name, rows = source_name(source), []
    for line, row in iter_jsonl(source):
        for field in ("question", "context"):
            value = row.get(field)
            if not isinstance(value, str) or not value.strip():
                raise DataError("missing field" if value is None else "empty text" if isinstance(value, str) else
                                f"must be text, got {value!r:.40}", file=name, line=line, field=field)
        if "id" in row and not isinstance(row["id"], (str, int)):
            raise DataError(f"id must be a string or a number, got {row['id']!r:.40}", file=name, line=line,
                            field="id")
        rows.append(row)
    if not rows:
        raise DataError("no input questions", file=name)
    return rows


def run(args: argparse.Namespace) -> int:
    rows = read_qa_inputs(args.input)
    adapter, precision = load_for_inference(args)
    preds = adapter.predict([r["question"] for r in rows], [r["context"] for r in rows], batch_size=args.batch_size,
                            precision=precision)
    lines = "".join(json.dumps({**({"id": r["id"]} if "id" in r else {}), **p}) + "\n" for r, p in zip(rows, preds))
    write_output(lines, args.output, f"{len(preds)} answers")
    return 0

"""Sequence classification outside training, the `ClassificationIO` half of `SequenceClassification`
(classification.py): the rows and files `bertkit predict` reads and writes, `serve`'s request body
(`ClassifyRequest`) and the run report's confusion matrix (matplotlib imported only to draw it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..data.readers import ID_COLUMNS, TEXT_COLUMNS
from ..errors import BertkitError, DataError
from .requests import RequestError, body_field, check_count, check_text

PAIR_COLUMNS = {"sentence1": "sentence2", "premise": "hypothesis", "#1 String": "#2 String"}


@dataclass
class ClassifyRequest:
    """A request: texts (and their pairs) to label (`requests.py`; `serve`'s POST /predict)."""

    texts: list[str] = body_field("texts to label", examples=[["a gripping, funny film"]])
    text_pairs: list[str] | None = body_field("the second text of each pair, for a model trained on pairs (MRPC, "
                                              "RTE, MNLI); one per text", default=None)
    probs: bool = body_field("add the probability of every label", default=False)


class ClassificationIO:
    """`SequenceClassification`'s hooks outside training (`Task`'s, base.py): `bertkit predict`'s rows and files,
    `serve`'s request body, the report's figure."""

    def predict_rows(self, rows, batch_size=64, precision="fp32", probs: bool = False, **_):
        pairs = [r["text_pair"] for r in rows] if rows and "text_pair" in rows[0] else None
        return self.predict([r["text"] for r in rows], pairs, batch_size, precision, with_probs=probs)

    @staticmethod
    def echo(row: dict, answer: dict) -> dict:
        return {**({"id": row["id"]} if "id" in row else {}), "text": row["text"],
                **({"text_pair": row["text_pair"]} if "text_pair" in row else {}), **answer}

    @classmethod
    def add_predict_flags(cls, group) -> None:
        group.add_argument("--input-format", "--format", dest="format", default="auto",
                           choices=["auto", "text", "table"],
                           help="text = one text per line (a pair model: text, tab, second text); table = "
                                "TSV/CSV/JSONL/parquet (auto: by file extension; standard input: JSONL where its "
                                "first line is a JSON object, else text; --format: the same)")
        group.add_argument("--text-column", help="column with the text (default: the one the run trained on, where "
                                                   "the table has it, else text, sentence, sentence1, ...)")
        group.add_argument("--text-pair-column", help="column with the second text of a pair (default: as "
                                                      "--text-column's)")
        group.add_argument("--id-column", help="column echoed as each answer's id (default: id, idx or index, where "
                                               "the table has one)")
        group.add_argument("--quoting", choices=["auto", "none", "csv"],
                           help="a delimited table's quote characters: none (text, as in GLUE files), csv (quoted "
                                "fields) or auto (default: as the run read its files, else quoting off unless the "
                                "file needs it)")
        group.add_argument("--probs", action="store_true", help="add the probability of every label")

    @classmethod
    def predict_options(cls, args) -> dict:
        return {"probs": args.probs}

    @classmethod
    def read_inputs(cls, source: str, args) -> list[dict]:
        from .folders import checkpoint_task
        from .saved import saved_task

        saved = saved_task(checkpoint_task(args.model)[1])  # a run's config.yaml (a hub id's too): pairs, columns
        pairs = None if saved is None else saved.options.text_pair_column is not None
        trained_on = (None, None) if saved is None else (saved.options.text_column, saved.options.text_pair_column)
        layout = None
        if saved is not None and (saved.options.columns or saved.options.delimiter  # the STS Benchmark, CoLA, a
                                  or saved.options.quoting != "auto"):  # TSV quoted throughout (R's write.table)
            o = saved.options
            layout = {"delimiter": o.separator, "quoting": o.quoting, "columns": list(o.columns)}
        return read_texts(source, args.format, args.text_column, args.text_pair_column, pairs, args.id_column,
                          trained_on, layout, args.quoting)

    def format_rows(self, rows, answers, args) -> str:
        return "".join(json.dumps(self.echo(r, a)) + "\n" for r, a in zip(rows, answers, strict=True))

    def request_body(self):
        return ClassifyRequest, "texts"

    def request_rows(self, body: ClassifyRequest, limits):
        """Rows {text, (text_pair)}: pairs for a model trained on pairs, single texts for one trained on single texts,
        either for a checkpoint without bertkit's run config (`pairs` None)."""
        check_count("texts", len(body.texts), limits)
        for i, t in enumerate(body.texts):
            check_text(f"texts[{i}]", t, limits)
        if body.text_pairs is None:
            if self.pairs:
                raise RequestError("text_pairs", "this model classifies pairs of texts: give text_pairs, one per text")
            rows = [{"text": t} for t in body.texts]
        elif self.pairs is False:
            raise RequestError("text_pairs", "this model classifies single texts: leave out text_pairs")
        elif len(body.text_pairs) != len(body.texts):
            raise RequestError("text_pairs", f"{len(body.text_pairs)} pairs for {len(body.texts)} texts")
        else:
            for i, t in enumerate(body.text_pairs):
                check_text(f"text_pairs[{i}]", t, limits)
            rows = [{"text": t, "text_pair": p} for t, p in zip(body.texts, body.text_pairs, strict=True)]
        return rows, (body.text_pairs is not None, body.probs), {"probs": body.probs}

    def request_example(self):
        return ClassifyRequest(["warm up"], ["warm up"] if self.pairs else None)

    def describe(self) -> dict:
        return {"pairs": self.pairs, "problem_type": self.problem_type}

    @cached_property
    def pairs(self) -> bool | None:
        """Trained on pairs (True), on single texts (False), unknown (None: a checkpoint without a run config or a
        saved task's record, `saved_task`), as `read_inputs` tells it for predict."""
        from .saved import saved_task

        if self.source and saved_task(self.source) is not None:
            return self.options.text_pair_column is not None
        return None

    @classmethod
    def report_plots(cls, run, split, predictions, metrics, label_names):
        image = plot_confusion(run, split, predictions, label_names)
        return [image] if image else []


def read_texts(source: str, fmt: str, text_column: str | None, pair_column: str | None,
               pairs: bool | None = None, id_column: str | None = None,
               trained_on: tuple[str | None, str | None] = (None, None), layout: dict | None = None,
               quoting: str | None = None) -> list[dict]:
    """Rows {(id), text, (text_pair)} from plain text (one per line; for a model trained on pairs, `pairs`, the two
    texts split by a tab), TSV, CSV, JSONL or parquet (with an id from `id_column`, else from the first of
    `ID_COLUMNS` the table has). A model trained on pairs gets pairs and one trained on single texts single texts, as
    `bertkit serve` does (`pairs` None: a checkpoint without a run config takes either). Without --text-column
    (--text-pair-column), a table's text is the column the run trained on (`trained_on`) where the table has it.
    `layout`: how the run read its delimited files (`delimiter`, `quoting`, header-less `columns`); a delimited
    file whose first line holds that delimiter is read so (a first row naming the text columns is its header).
    `quoting` (--quoting): a delimited file's quoting, whatever the run's."""
    from ..data import read_classification_file, read_rows
    from ..data.readers import first_line, read_jsonl, source_name

    if fmt == "auto" and source == "-":  # a JSON object first: JSONL (its line kept for the reading)
        fmt = "table" if (first_line(source) or "").lstrip().startswith("{") else "text"
    elif fmt == "auto":
        fmt = "text" if Path(source).suffix.lower() in ("", ".txt") else "table"
    if fmt == "text":
        from ..data.readers import read_lines

        lines = read_lines(source, "text")
        if not pairs:
            return [{"text": line.strip()} for _, line in lines]
        rows = []
        for n, line in lines:
            text, tab, pair = line.strip("\r\n").partition("\t")
            if not tab or not text.strip() or not pair.strip() or "\t" in pair:  # a third field was in the second
                raise DataError("this model classifies pairs of texts: give each line as a text, a tab, the second "
                                f"text{f' (found {pair.count(chr(9)) + 2} fields)' if chr(9) in pair else ''}",
                                file=source_name(source), line=n)
            rows.append({"text": text.strip(), "text_pair": pair.strip()})
        return rows
    if pair_column and pairs is False:
        raise BertkitError("--text-pair-column: this model classifies single texts")
    trained_text, trained_pair = trained_on
    options = _as_trained(Path(source), layout, (text_column or trained_text, pair_column or trained_pair))
    table = read_jsonl(source) if source == "-" else \
        read_rows(Path(source), **{**options, **({"quoting": quoting} if quoting else {})})  # (standard input: JSONL)
    if not table:
        raise DataError("no rows (a header only)", file=source_name(source))
    header = table[0][1]
    tried = list(dict.fromkeys(c for c in (trained_text, *TEXT_COLUMNS) if c))
    column = text_column or next((c for c in tried if c in header), None)
    if column is None:
        raise DataError(f"no text column found (tried {', '.join(tried)}); pass --text-column",
                        file=source_name(source), line=1)
    found = PAIR_COLUMNS.get(column) if PAIR_COLUMNS.get(column) in header and pairs is not False else None
    pair = pair_column or (trained_pair if trained_pair in header and pairs is not False else found)
    if pairs and not pair:
        raise DataError(f"this model classifies pairs of texts and no column of second texts was found (after "
                        f"'{column}'); pass --text-pair-column", file=source_name(source), line=1)
    data = read_classification_file(Path(source_name(source)), column, None, None, text_pair_column=pair, rows=table)
    if pair:
        rows = [{"text": t, "text_pair": p} for t, p in zip(data["text"], data["text_pair"], strict=True)]
    else:
        rows = [{"text": t} for t in data["text"]]
    ids = id_column or next((c for c in ID_COLUMNS if c in header), None)
    if ids is None:
        return rows
    if ids not in header:
        raise DataError(f"missing column (found: {', '.join(map(str, header))})", file=source_name(source), line=1,
                        field=ids)
    for (line, values), row in zip(table, rows, strict=True):  # read_classification_file keeps every row, in order
        if values.get(ids) is None:
            raise DataError("missing id", file=source_name(source), line=line, field=ids)
        row["id"] = values[ids]
    return rows


def plot_confusion(run: Path, split: str, preds: list[dict], labels: list[str]) -> str | None:
    """The confusion matrix of one split (one class per example only), as report_confusion_<split>.png."""
    if not preds or not isinstance(preds[0].get("gold"), str) or not labels:
        return None
    import numpy as np

    from ..plots import plt, save_figure

    index = {n: i for i, n in enumerate(labels)}
    m = np.zeros((len(labels), len(labels)), dtype=int)  # [gold, predicted]
    for p in preds:
        m[index[p["gold"]], index[p["label"]]] += 1
    fig, ax = plt().subplots(figsize=(1.2 * len(labels) + 2.5, 1.1 * len(labels) + 1.8))
    ax.imshow(m, cmap="Blues")
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, str(v), ha="center", va="center", color="white" if v > m.max() / 2 else "black")
    ax.set(xticks=range(len(labels)), yticks=range(len(labels)), xticklabels=labels, yticklabels=labels,
           xlabel="predicted label", ylabel="gold label", title=f"Confusion matrix ({split})")
    return save_figure(fig, run / f"report_confusion_{split}.png")


def _as_trained(path: Path, layout: dict | None, text_columns) -> dict:
    """`read_rows`'s options for a delimited file read as the run read its own (`layout`), where the file's first line
    holds the run's delimiter; else none (read by the file's extension)."""
    from ..data.readers import DELIMITERS

    suffix = path.suffix.lower()
    if not layout or suffix not in DELIMITERS or not path.is_file():
        return {}
    delimiter = layout["delimiter"] or DELIMITERS[suffix]
    with path.open(encoding="utf-8", errors="replace") as f:
        first = next((line for line in f if line.strip()), "")
    if delimiter not in first:
        return {}
    return {**layout, "delimiter": delimiter, "required": [c for c in text_columns if c]}

"""Sequence classification's inputs and outputs outside training: the files `bertkit predict` reads and the
confusion-matrix figure of the run report (a request body: `ClassifyRequest`, classification.py). Imported only
where used (matplotlib is not needed to train)."""

from __future__ import annotations

from pathlib import Path

from ..errors import BertkitError, DataError

TEXT_COLUMNS = ("text", "sentence", "sentence1", "premise", "#1 String")
ID_COLUMNS = ("id", "idx", "index")  # GLUE's test files: index
PAIR_COLUMNS = {"sentence1": "sentence2", "premise": "hypothesis", "#1 String": "#2 String"}


def read_texts(source: str, fmt: str, text_column: str | None, pair_column: str | None,
               pairs: bool | None = None, id_column: str | None = None,
               trained_on: tuple[str | None, str | None] = (None, None)) -> list[dict]:
    """Rows {(id), text, (text_pair)} from plain text (one per line; for a model trained on pairs, `pairs`, the two
    texts split by a tab), TSV, CSV, JSONL or parquet (with an id from `id_column`, else from the first of
    `ID_COLUMNS` the table has). A model trained on pairs gets pairs and one trained on single texts single texts, as
    `bertkit serve` does (`pairs` None: a checkpoint without a run config takes either). Without --text-column
    (--text-pair-column), a table's text is the column the run trained on (`trained_on`) where the table has it."""
    from ..data import read_classification_file, read_rows
    from ..data.readers import source_name

    if fmt == "auto":
        fmt = "text" if source == "-" or Path(source).suffix.lower() in ("", ".txt") else "table"
    if fmt == "text":
        from ..data.readers import read_lines

        lines = read_lines(source, "text")
        if not pairs:
            return [{"text": line.strip()} for _, line in lines]
        rows = []
        for n, line in lines:
            text, tab, pair = line.strip("\r\n").partition("\t")
            if not tab or not text.strip() or not pair.strip():
                raise DataError("this model classifies pairs of texts: give each line as a text, a tab, the second "
                                "text", file=source_name(source), line=n)
            rows.append({"text": text.strip(), "text_pair": pair.strip()})
        return rows
    if source == "-":
        raise BertkitError("reading a table from standard input is not supported; give a file")
    if pair_column and pairs is False:
        raise BertkitError("--text-pair-column: this model classifies single texts")
    table = read_rows(Path(source))
    header = table[0][1] if table else {}
    trained_text, trained_pair = trained_on
    tried = list(dict.fromkeys(c for c in (trained_text, *TEXT_COLUMNS) if c))
    column = text_column or next((c for c in tried if c in header), None)
    if column is None:
        raise DataError(f"no text column found (tried {', '.join(tried)}); pass --text-column",
                        file=source, line=1)
    found = PAIR_COLUMNS.get(column) if PAIR_COLUMNS.get(column) in header and pairs is not False else None
    pair = pair_column or (trained_pair if trained_pair in header and pairs is not False else found)
    if pairs and not pair:
        raise DataError(f"this model classifies pairs of texts and no column of second texts was found (after "
                        f"'{column}'); pass --text-pair-column", file=source, line=1)
    data = read_classification_file(Path(source), column, None, None, text_pair_column=pair)
    if pair:
        rows = [{"text": t, "text_pair": p} for t, p in zip(data["text"], data["text_pair"], strict=True)]
    else:
        rows = [{"text": t} for t in data["text"]]
    ids = id_column or next((c for c in ID_COLUMNS if c in header), None)
    if ids is None:
        return rows
    if ids not in header:
        raise DataError(f"missing column (found: {', '.join(map(str, header))})", file=source, line=1, field=ids)
    for (line, values), row in zip(table, rows, strict=True):  # read_classification_file keeps every row, in order
        if values.get(ids) is None:
            raise DataError("missing id", file=source, line=line, field=ids)
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

"""Token classification outside training, the `TokenClassificationIO` half of `TokenClassification`
(token_classification.py): what `bertkit predict` reads and writes, `serve`'s request body (`TokenRequest`) and the
run report's per-type F1 figure.

`bertkit predict` input: one sentence per line, as raw text (split into words by `split_words`, entities get character
offsets) or, with `--pretokenized`, as words separated by white space; or a CoNLL file (`--input-format conll`;
auto-detected for `.conll`/`.iob`/`.bio` files, files that begin with `-DOCSTART-` and files whose first lines are
columns ending in a tag): the first column is the word and, when there are two or more columns, the last one is the
gold tag; or JSONL (`--input-format jsonl`, auto for `.jsonl` and for a first line that is a JSON object), a sentence a
line as {"tokens": [words]} (the datasets layout, its "ner_tags" by name the gold tags) or {"text": raw text}, with an
"id" that the answer echoes. A model trained with document context reads a CoNLL file's sentences with their
`-DOCSTART-` documents around them; other inputs are read sentence by sentence.
Output: JSONL, one object per sentence {[id,] [text,] tokens, tags, [gold,] entities}; or, with `--output-format
conll`, a CoNLL file `token gold pred` (readable by the conlleval script), or `token pred` when there are no gold
tags.

Example:
```
echo "Peter Blackburn flew to Brussels ." | bertkit predict --model runs/conll2003 --input - --pretokenized
{"tokens": ["Peter", "Blackburn", ...], "tags": ["B-PER", "I-PER", ...], "entities": [{"type": "PER", ...}]}
bertkit predict --model runs/conll2003 --input test.txt --input-format conll --output-format conll --output test.conll
```
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from .requests import body_field, check_count, check_text, check_words

CONLL_SUFFIXES = (".conll", ".iob", ".iob2", ".bio")


@dataclass
class TokenRequest:
    """A request: sentences to tag (`requests.py`; `serve`'s POST /predict)."""

    sentences: list[str | list[str]] = body_field(
        "raw text (split into words; entities get character offsets) or a list of words",
        examples=[["Peter Blackburn flew to Brussels.", ["EU", "rejects", "German", "call"]]])


class TokenClassificationIO:
    """`TokenClassification`'s hooks outside training (`Task`'s, base.py): `bertkit predict`'s rows {sentence (text
    or words), doc?, gold?} and files, `serve`'s request body, the report's figure."""

    def predict_rows(self, rows, batch_size=64, precision="fp32", **_):
        docs = [r["doc"] for r in rows] if rows and "doc" in rows[0] else None
        return self.predict([r["sentence"] for r in rows], batch_size, precision, documents=docs)

    @staticmethod
    def echo(row: dict, answer: dict) -> dict:
        gold = {"gold": row["gold"]} if "gold" in row else {}
        return {**({"id": row["id"]} if "id" in row else {}), **answer, **gold}

    @classmethod
    def add_predict_flags(cls, group) -> None:
        group.add_argument("--input-format", "--format", dest="format", default="auto",
                           choices=["auto", "text", "conll", "jsonl"],
                           help="text = one sentence per line; conll = one word per line; jsonl = {tokens} or {text} "
                                "a line (auto: by file extension, else by the first lines: -DOCSTART- or columns "
                                "ending in a tag are conll, a JSON object jsonl; --format: the same)")
        group.add_argument("--pretokenized", action="store_true",
                           help="each input line is words separated by white space (no splitting)")
        group.add_argument("--output-format", default="jsonl", choices=["jsonl", "conll"],
                           help="JSONL (tags and entities) or CoNLL 'token gold pred' (default jsonl)")
        cls.add_read_flags(group, exclude=("tag_column",))  # JSONL's fields; a CoNLL input's tags are its last column

    @classmethod
    def read_inputs(cls, source, args):
        columns = cls.read_as_the_run(args).hub_columns  # JSONL's: the run's, or --hub-columns
        return read_sentences(source, args.format, args.pretokenized, tuple(columns) if columns else None)

    def predict_slices(self, rows):
        """Slices of whole documents: a model trained with document context reads a sentence's neighbours."""
        if not rows or "doc" not in rows[0]:
            yield from super().predict_slices(rows)
            return
        start = 0
        for end in range(1, len(rows) + 1):
            if end == len(rows) or end - start >= self.PREDICT_SLICE and rows[end]["doc"] != rows[end - 1]["doc"]:
                yield rows[start:end]
                start = end

    def output_whole(self, rows, args) -> bool:
        """CoNLL output has a gold column only where every row has gold tags: decided once, over the whole input."""
        return args.output_format == "conll" and 0 < sum("gold" in r for r in rows) < len(rows)

    def format_rows(self, rows, answers, args) -> str:
        return format_answers([self.echo(r, a) for r, a in zip(rows, answers, strict=True)], args.output_format)

    def request_body(self):
        return TokenRequest, "sentences"

    def request_rows(self, body: TokenRequest, limits):
        check_count("sentences", len(body.sentences), limits)
        for i, s in enumerate(body.sentences):
            (check_text if isinstance(s, str) else check_words)(f"sentences[{i}]", s, limits)
        return [{"sentence": s} for s in body.sentences], (), {}

    def request_example(self):
        return TokenRequest(["warm up"])

    @classmethod
    def report_plots(cls, run, split, predictions, metrics, label_names):
        return [plot_per_type(run, split, metrics["per_type"])] if "per_type" in metrics else []


def input_format(source: str, fmt: str) -> str:
    """`--input-format` decided: as given, else conll for a CoNLL suffix, a first line -DOCSTART-, or first lines
    that are columns ending in a tag (`_columns_with_tags`); jsonl for `.jsonl` or a first line that is a JSON
    object; else text. Standard input is read by its first lines, as a file without a known suffix is."""
    if fmt != "auto":
        return fmt
    suffix = Path(source).suffix.lower() if source != "-" else ""
    if suffix in CONLL_SUFFIXES:
        return "conll"
    if suffix == ".jsonl":
        return "jsonl"
    from ..data.readers import first_lines

    lines = first_lines(source, 3)
    if lines and lines[0].startswith("-DOCSTART-") or _columns_with_tags(lines):
        return "conll"
    return "jsonl" if lines and lines[0].lstrip().startswith("{") else "text"


def _columns_with_tags(lines: list[str]) -> bool:
    """Lines of a CoNLL file without its -DOCSTART- (a word, maybe more columns, and a tag): at least two, all of as
    many columns (two or more), each ending in O, B-TYPE or I-TYPE. Sentences to tag are rarely all that."""
    from ..data.tags import TAG

    fields = [line.split() for line in lines]
    return len(fields) >= 2 and len({len(f) for f in fields}) == 1 and len(fields[0]) >= 2 and all(
        TAG.match(f[-1]) for f in fields)


def read_sentences(source: str, fmt: str, pretokenized: bool, columns: tuple[str, str] | None = None) -> list[dict]:
    """Rows {sentence (a list of words, or raw text to be split), doc?, gold?}; only CoNLL files have documents;
    CoNLL files and JSONL have gold tags (JSONL: its `columns`, words and tags, the run's)."""
    from ..data.conll import read_conll_file, report_file
    from ..data.readers import source_name

    if source != "-" and not Path(source).is_file():
        raise DataError("file not found", file=source)
    fmt = input_format(source, fmt)
    if fmt == "conll":
        data = read_conll_file(source, tagged=None)
        if data.get("tags") is not None:
            report_file(source_name(source), data)  # the tag scheme found (IOB1 is read as IOB2)
        rows = [{"sentence": words, "doc": doc} for words, doc in zip(data["tokens"], data["docs"], strict=True)]
        if data.get("tags") is not None:
            for row, tags in zip(rows, data["tags"], strict=True):
                row["gold"] = tags
        return rows
    if fmt == "jsonl":
        return read_jsonl_sentences(source, columns)
    from ..data.readers import read_lines

    lines = read_lines(source, "sentence", "; a CoNLL file, a word a line: --input-format conll")
    return [{"sentence": line.split() if pretokenized else line.strip()} for _, line in lines]


def read_jsonl_sentences(source: str, columns: tuple[str, str] | None = None) -> list[dict]:
    """Rows {sentence, id?, gold?} from JSONL lines {"tokens": [words]} or {"text": "raw text"} (one of the two),
    with "ner_tags" (`columns`: other names of the words and the tags) as gold tags where a line has them by name
    (O, B-TYPE, I-TYPE: IOB1 or IOB2, echoed as IOB2; tag ids are not echoed, their names' order being the data's)."""
    from ..data.conll import JSONL_COLUMNS
    from ..data.readers import read_jsonl, source_name
    from ..data.tags import sentence_tags

    token_field, tag_field = columns or JSONL_COLUMNS
    name, rows, ids = source_name(source), [], 0
    for line, obj in read_jsonl(source):
        given = [k for k in dict.fromkeys((token_field, "tokens", "text")) if k in obj][:1]
        if not given or "text" in obj and given != ["text"]:
            raise DataError(f'give either "{token_field}" (a list of words) or "text"', file=name, line=line,
                            field=token_field if not given else None)
        key = given[0]
        value = obj[key]
        words = value if key != "text" and isinstance(value, list) else None
        if key != "text" and (not words or not all(isinstance(w, str) and w.strip() and w.split() == [w]
                                                   for w in words)):
            raise DataError("must be a non-empty list of words (non-empty strings without white space)", file=name,
                            line=line, field=key)
        if key == "text" and (not isinstance(value, str) or not value.strip()):
            raise DataError("empty text" if isinstance(value, str) else f"must be text, got {value!r:.40}",
                            file=name, line=line, field=key)
        row = {**({"id": obj["id"]} if "id" in obj else {}), "sentence": words or value.strip()}
        tags = obj.get(tag_field) if words else None
        if isinstance(tags, list) and any(isinstance(t, int) and not isinstance(t, bool) for t in tags):
            ids += 1
        elif tags is not None:
            if not isinstance(tags, list) or len(tags) != len(words):
                raise DataError(f"expected a list of {len(words)} tags, one per word", file=name, line=line,
                                field=tag_field)
            row["gold"] = sentence_tags(tags, None, name, line, tag_field)[0]
        rows.append(row)
    if ids:
        print(f"{name}: tags given as ids ({ids} sentences) are not echoed as gold (their names' order is the "
              "data's, unknown here)", file=sys.stderr)
    return rows


def format_answers(answers: list[dict], output_format: str) -> str:
    if output_format == "conll":
        from ..data.conll import conll_lines

        gold = [a["gold"] for a in answers] if answers and all("gold" in a for a in answers) else None
        columns = ([gold] if gold is not None else []) + [[a["tags"] for a in answers]]
        return conll_lines([a["tokens"] for a in answers], *columns)
    return "".join(json.dumps(a) + "\n" for a in answers)


def plot_per_type(run: Path, split: str, per_type: dict) -> str:
    """Entity F1 (and support) per entity type, as report_per_type_<split>.png."""
    from ..plots import plt, save_figure

    types = list(per_type)
    fig, ax = plt().subplots(figsize=(1.1 * len(types) + 2.5, 3.4))
    bars = ax.bar(types, [100 * per_type[t]["f1"] for t in types], color="tab:green")
    for bar, t in zip(bars, types, strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{100 * per_type[t]['f1']:.1f}\n"
                f"n={per_type[t]['support']}", ha="center", va="bottom", fontsize=8)
    ax.set(xlabel="entity type", ylabel="entity F1 (%)", ylim=(0, 110), title=f"F1 per entity type ({split})")
    return save_figure(fig, run / f"report_per_type_{split}.png")

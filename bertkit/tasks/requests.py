"""A task's inference requests, with no web framework in them. A request body is a plain dataclass (its fields,
their types, defaults, descriptions and examples); the task turns one into input rows (`Task.request_rows`) with
the checks below, which refuse a bad body with a `RequestError` naming its field (`texts[2]`, `questions[0].context`)
and one over a size limit with an `OverLimit`.

`bertkit serve` adapts them (bertkit/serve/schemas.py): it validates the JSON body of `POST /predict` against a
pydantic model made from the dataclass (strict types, unknown fields refused; the same model writes the OpenAPI
schema), hands the task the dataclass, and answers `RequestError` with 400 and `OverLimit` with 413.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, make_dataclass
from functools import cache

from ..errors import BertkitError


@dataclass
class RequestLimits:
    max_items: int = 256  # texts (sentences, questions) per request
    max_text_chars: int = 20_000  # characters of one text (a sentence's words together, a question, a context)


class RequestError(BertkitError):
    """A bad request body: the `field` at fault (e.g. `texts[2]`) and the `reason`."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


class OverLimit(RequestError):
    """A request body over a size limit (items per request, characters per text)."""


def body_field(description: str | None = None, default=MISSING, examples: list | None = None):
    """A field of a request dataclass with its description (and examples) for the API's schema."""
    meta = {k: v for k, v in (("description", description), ("examples", examples)) if v is not None}
    return field(default=default, metadata=meta)


def plain_rows(items) -> list[dict]:
    """Dataclass items as rows (dicts), the fields left empty (None) dropped."""
    return [{k: v for k, v in asdict(item).items() if v is not None} for item in items]


# --- checks beyond the types ----------------------------------------------------------------------------------------
def check_count(field: str, n: int, limits) -> None:
    if n == 0:
        raise RequestError(field, "empty list: give at least one item")
    if n > limits.max_items:
        raise OverLimit(field, f"{n} items; this server takes at most {limits.max_items} per request")


def check_text(field: str, text: str, limits) -> None:
    if not text.strip():
        raise RequestError(field, "empty text")
    if len(text) > limits.max_text_chars:
        raise OverLimit(field, f"{len(text)} characters; this server takes at most {limits.max_text_chars}")


def check_words(field: str, words: list[str], limits) -> None:
    if not words:
        raise RequestError(field, "no words")
    for j, w in enumerate(words):
        if not w.strip():
            raise RequestError(f"{field}[{j}]", "empty word")
    if sum(len(w) + 1 for w in words) - 1 > limits.max_text_chars:
        raise OverLimit(field, f"over {limits.max_text_chars} characters; the server's limit")


def check_rows(field: str, rows: list[dict], fields: dict, limits) -> None:
    """Count, and every text of every row non-empty and within the limits."""
    check_count(field, len(rows), limits)
    for i, row in enumerate(rows):
        for name, kind in fields.items():
            where = f"{field}[{i}].{name}"
            if kind is str:
                check_text(where, row[name], limits)
            else:
                if not row[name]:
                    raise RequestError(where, "empty list")
                for j, text in enumerate(row[name]):
                    check_text(f"{where}[{j}]", text, limits)


# --- the default body: rows as `bertkit predict` reads them ---------------------------------------------------------
@cache
def rows_request(name: str, fields: tuple, optional: tuple = ()) -> type:
    """The dataclass of a body `{"inputs": [row, ...]}` whose rows (`{name}Input`) have `fields` ((name, str or list
    of texts) pairs) and the `optional` ones: the default body of a task's requests. Its `Row` is the rows' class."""
    kinds = {str: str, list: list[str]}
    row = make_dataclass(f"{name}Input", [(k, kinds.get(t, t)) for k, t in fields] +
                         [(k, kinds.get(t, t) | None, field(default=None)) for k, t in optional])
    return make_dataclass(f"{name}Request", [("inputs", list[row], body_field("input rows"))], namespace={"Row": row})

"""Request and response bodies of `bertkit serve` that are not a task's (pydantic: they are also the OpenAPI schema):
`/embed`, errors, and the default `{"inputs": [rows]}` body of a task's `/predict` (`rows_request`); and the checks
a schema cannot express: empty texts (400), item counts and text sizes over the server's limits (413). Every error
names its field, e.g. `texts[2]`. A task's own body lives with the task (`bertkit/tasks/*_serve.py`).

Requests are strict: unknown fields, and values of another JSON type (a number for a text, "true" for true), are
errors rather than guesses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


@dataclass
class Limits:
    max_items: int = 256  # texts (sentences, questions) per request
    max_text_chars: int = 20_000  # characters of one text (a sentence's words together, a question, a context)
    max_body_bytes: int = 2 * 1024 * 1024  # a request body


class ApiError(Exception):
    """An answer other than 200: `status`, and (field, reason) pairs."""

    def __init__(self, status: int, field: str, reason: str, headers: dict | None = None):
        super().__init__(f"{field}: {reason}")
        self.status, self.errors, self.headers = status, [{"field": field, "reason": reason}], headers or {}

    def body(self) -> dict:
        return {"detail": str(self), "errors": self.errors}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class EmbedRequest(Strict):
    texts: list[str] | None = Field(None, description="raw text, split into words as `bertkit extract` does")
    words: list[list[str]] | None = Field(None, description="pre-tokenised sentences (instead of texts)")
    layers: str = Field("last4", description="hidden states: embeddings, last, second-to-last, lastN, firstN, all, or "
                                             "numbers/ranges (0 = embeddings, -1 = last layer): -1,-2 or 1-6")
    combine: Literal["concat", "mean", "sum", "none"] = "concat"
    pool: Literal["first", "last", "mean", "cls", "sentence-mean", "none"] = "mean"


# --- responses ----------------------------------------------------------------------------------------------------
class Predictions(BaseModel):
    predictions: list[dict] = Field(description="one answer per input, as `bertkit predict` writes them (JSONL rows)")


class Embedding(BaseModel):
    words: list[str]
    vectors: list = Field(description="[words, dim] (first/last/mean), [dim] (cls, sentence-mean), [pieces, dim] "
                                      "(none); combine none adds a layer axis before dim")


class Embeddings(BaseModel):
    layers: list[int]
    dim: int
    embeddings: list[Embedding]


class ErrorBody(BaseModel):
    detail: str
    errors: list[dict[str, str]]


# --- checks beyond the schema -------------------------------------------------------------------------------------
def check_count(field: str, n: int, limits: Limits) -> None:
    if n == 0:
        raise ApiError(400, field, "empty list: give at least one item")
    if n > limits.max_items:
        raise ApiError(413, field, f"{n} items; this server takes at most {limits.max_items} per request")


def check_text(field: str, text: str, limits: Limits) -> None:
    if not text.strip():
        raise ApiError(400, field, "empty text")
    if len(text) > limits.max_text_chars:
        raise ApiError(413, field, f"{len(text)} characters; this server takes at most {limits.max_text_chars}")


def check_words(field: str, words: list[str], limits: Limits) -> None:
    if not words:
        raise ApiError(400, field, "no words")
    for j, w in enumerate(words):
        if not w.strip():
            raise ApiError(400, f"{field}[{j}]", "empty word")
    if sum(len(w) + 1 for w in words) - 1 > limits.max_text_chars:
        raise ApiError(413, field, f"over {limits.max_text_chars} characters; the server's limit")


def rows_request(name: str, fields: dict, optional: dict | None = None) -> type[BaseModel]:
    """A request model `{"inputs": [row, ...]}` whose rows have `fields` (text, or a list of texts) and the
    `optional` ones: the default body of a task's `POST /predict` (rows as `bertkit predict` reads them)."""
    from pydantic import create_model

    kinds = {str: str, list: list[str]}
    row = create_model(f"{name}Input", __base__=Strict, **{k: (kinds.get(t, t), ...) for k, t in fields.items()},
                       **{k: (kinds.get(t, t) | None, None) for k, t in (optional or {}).items()})
    return create_model(f"{name}Request", __base__=Strict, inputs=(list[row], Field(description="input rows")))


def check_rows(field: str, rows: list[dict], fields: dict, limits: Limits) -> None:
    """Count, and every text of every row non-empty and within the limits."""
    check_count(field, len(rows), limits)
    for i, row in enumerate(rows):
        for name, kind in fields.items():
            where = f"{field}[{i}].{name}"
            if kind is str:
                check_text(where, row[name], limits)
            else:
                if not row[name]:
                    raise ApiError(400, where, "empty list")
                for j, text in enumerate(row[name]):
                    check_text(f"{where}[{j}]", text, limits)


def embed_items(body: EmbedRequest, limits: Limits) -> list[str | list[str]]:
    """Raw texts or word lists (split into words on the model thread, with the tokenizer)."""
    if (body.texts is None) == (body.words is None):
        raise ApiError(400, "texts", "give either texts (raw text) or words (pre-tokenised sentences)")
    field, items = ("texts", body.texts) if body.texts is not None else ("words", body.words)
    check_count(field, len(items), limits)
    for i, item in enumerate(items):
        (check_text if isinstance(item, str) else check_words)(f"{field}[{i}]", item, limits)
    return list(items)

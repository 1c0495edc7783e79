"""Request and response bodies of `bertkit serve` (pydantic: they are also the OpenAPI schema): `/embed`'s, the
answers, the errors; and the pydantic model of a task's request body (`request_model`), made from the plain
dataclass the task declares (`Task.request_body`, bertkit/tasks/requests.py). Checks a schema cannot express are
the tasks' (`tasks/requests.py`: empty texts, item counts and text sizes over the server's limits); their
`RequestError` answers 400 and their `OverLimit` 413 (`ApiError.of`). Every error names its field, e.g. `texts[2]`.

Requests are strict: unknown fields, and values of another JSON type (a number for a text, "true" for true), are
errors rather than guesses.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..tasks.requests import OverLimit, RequestError, RequestLimits, check_count, check_text, check_words


@dataclass
class Limits(RequestLimits):  # max_items, max_text_chars: the tasks' checks
    max_body_bytes: int = 2 * 1024 * 1024  # a request body


class ApiError(Exception):
    """An answer other than 200: `status`, and (field, reason) pairs."""

    def __init__(self, status: int, field: str, reason: str, headers: dict | None = None):
        super().__init__(f"{field}: {reason}")
        self.status, self.errors, self.headers = status, [{"field": field, "reason": reason}], headers or {}

    def body(self) -> dict:
        return {"detail": str(self), "errors": self.errors}

    @classmethod
    def of(cls, e: RequestError) -> ApiError:
        """A task's refusal of a request body: 413 over a limit, else 400."""
        return cls(413 if isinstance(e, OverLimit) else 400, e.field, e.reason)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# --- a task's request body: its dataclass → a pydantic model, and a validated model back to the dataclass ----------
_DATACLASS: dict[type[BaseModel], type] = {}  # the model → the dataclass it was made from


class TaskRequest(Strict):
    """A task's request body as validated; `plain()` is the task's dataclass."""

    def plain(self):
        return _plain(self)


@cache
def request_model(cls: type) -> type[TaskRequest]:
    """The strict pydantic model of a task's request dataclass, of the same name, fields, types, defaults and
    descriptions (field metadata `description`, `examples`); nested dataclasses (in lists, unions) get theirs."""
    hints, fields = typing.get_type_hints(cls), {}
    for f in dataclasses.fields(cls):
        default = {"default": ...} if f.default is dataclasses.MISSING else {"default": f.default}
        if f.default_factory is not dataclasses.MISSING:
            default = {"default_factory": f.default_factory}
        fields[f.name] = (_modelled(hints[f.name]), Field(**default, description=f.metadata.get("description"),
                                                          examples=f.metadata.get("examples")))
    model = create_model(cls.__name__, __base__=TaskRequest, __module__=cls.__module__, **fields)
    _DATACLASS[model] = cls
    return model


def _modelled(tp):
    """A type with its dataclasses replaced by their models (list[Question] → list[model of Question])."""
    if dataclasses.is_dataclass(tp):
        return request_model(tp)
    args = typing.get_args(tp)
    if not args:
        return tp
    new = tuple(_modelled(a) for a in args)
    if new == args:
        return tp
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[new]  # noqa: UP007 (built from a tuple)
    return origin[new[0] if len(new) == 1 else new]


def _plain(value):
    """A validated request (a model of `request_model`) as the task's dataclass, nested ones included."""
    if isinstance(value, TaskRequest):
        return _DATACLASS[type(value)](**{name: _plain(getattr(value, name)) for name in type(value).model_fields})
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


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



def embed_items(body: EmbedRequest, limits: Limits) -> list[str | list[str]]:
    """Raw texts or word lists (split into words on the model thread, with the tokenizer); the checks are the
    tasks' (`RequestError`)."""
    if (body.texts is None) == (body.words is None):
        raise ApiError(400, "texts", "give either texts (raw text) or words (pre-tokenised sentences)")
    field, items = ("texts", body.texts) if body.texts is not None else ("words", body.words)
    check_count(field, len(items), limits)
    for i, item in enumerate(items):
        (check_text if isinstance(item, str) else check_words)(f"{field}[{i}]", item, limits)
    return list(items)

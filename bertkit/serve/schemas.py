"""Request and response bodies of `bertkit serve` (pydantic: they are also the OpenAPI schema), and the checks the
schema cannot express: empty texts (400), item counts and text sizes over the server's limits (413), pairs given to
a single-text model or missing for a pair model (400). Every error names its field, e.g. `texts[2]`.

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


class ClassifyRequest(Strict):
    texts: list[str] = Field(description="texts to label", examples=[["a gripping, funny film"]])
    text_pairs: list[str] | None = Field(None, description="the second text of each pair, for a model trained on "
                                                           "pairs (MRPC, RTE, MNLI); one per text")
    probs: bool = Field(False, description="add the probability of every label")


class TokenRequest(Strict):
    sentences: list[str | list[str]] = Field(
        description="raw text (split into words; entities get character offsets) or a list of words",
        examples=[["Peter Blackburn flew to Brussels.", ["EU", "rejects", "German", "call"]]])


class Question(Strict):
    question: str
    context: str
    id: str | int | None = None


class QARequest(Strict):
    questions: list[Question] = Field(description="questions, each with the context holding its answer")


class EmbedRequest(Strict):
    texts: list[str] | None = Field(None, description="raw text, split into words as `bertkit extract` does")
    words: list[list[str]] | None = Field(None, description="pre-tokenised sentences (instead of texts)")
    layers: str = Field("last4", description="hidden states: embeddings, last, second-to-last, last4, all, or "
                                             "numbers/ranges (0 = embeddings, -1 = last layer): -1,-2 or 1-6")
    combine: Literal["concat", "mean", "sum", "none"] = "concat"
    pool: Literal["first", "last", "mean", "cls", "sentence-mean", "none"] = "mean"


# --- responses (documentation: answers are the rows `bertkit predict` writes) ----------------------------------
class ClassifyPrediction(BaseModel):
    text: str
    text_pair: str | None = Field(None, description="present for pairs")
    label: str
    score: float
    probabilities: dict[str, float] | None = Field(None, description="present with probs: true")


class Entity(BaseModel):
    type: str
    text: str
    word_start: int
    word_end: int = Field(description="exclusive")
    start: int | None = Field(None, description="character offset (raw-text input)")
    end: int | None = Field(None, description="character offset, exclusive (raw-text input)")


class TokenPrediction(BaseModel):
    text: str | None = Field(None, description="present for raw-text input")
    tokens: list[str]
    tags: list[str]
    entities: list[Entity]


class Answer(BaseModel):
    id: str | int | None = Field(None, description="present when the question had one")
    answer: str
    score: float = Field(description="the answer's probability among the n best spans")
    start: int = Field(description="character offset into the context")
    end: int = Field(description="exclusive")


class Predictions(BaseModel):
    predictions: list[ClassifyPrediction] | list[TokenPrediction] | list[Answer]


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


def classify_items(body: ClassifyRequest, limits: Limits, pairs: bool | None) -> list[tuple[str, str | None]]:
    """(text, text pair or None) per item. `pairs`: the model was trained on pairs (True), single texts (False),
    unknown (None: a checkpoint without bertkit's run config takes either)."""
    check_count("texts", len(body.texts), limits)
    for i, t in enumerate(body.texts):
        check_text(f"texts[{i}]", t, limits)
    if body.text_pairs is None:
        if pairs:
            raise ApiError(400, "text_pairs", "this model classifies pairs of texts: give text_pairs, one per text")
        return [(t, None) for t in body.texts]
    if pairs is False:
        raise ApiError(400, "text_pairs", "this model classifies single texts: leave out text_pairs")
    if len(body.text_pairs) != len(body.texts):
        raise ApiError(400, "text_pairs", f"{len(body.text_pairs)} pairs for {len(body.texts)} texts")
    for i, t in enumerate(body.text_pairs):
        check_text(f"text_pairs[{i}]", t, limits)
    return list(zip(body.texts, body.text_pairs))


def token_items(body: TokenRequest, limits: Limits) -> list[str | list[str]]:
    check_count("sentences", len(body.sentences), limits)
    for i, s in enumerate(body.sentences):
        (check_text if isinstance(s, str) else check_words)(f"sentences[{i}]", s, limits)
    return list(body.sentences)


def qa_items(body: QARequest, limits: Limits) -> list[Question]:
    check_count("questions", len(body.questions), limits)
    for i, q in enumerate(body.questions):
        check_text(f"questions[{i}].question", q.question, limits)
        check_text(f"questions[{i}].context", q.context, limits)
    return list(body.questions)


def embed_items(body: EmbedRequest, limits: Limits) -> list[str | list[str]]:
    """Raw texts or word lists (split into words on the model thread, with the tokenizer)."""
    if (body.texts is None) == (body.words is None):
        raise ApiError(400, "texts", "give either texts (raw text) or words (pre-tokenised sentences)")
    field, items = ("texts", body.texts) if body.texts is not None else ("words", body.words)
    check_count(field, len(items), limits)
    for i, item in enumerate(items):
        (check_text if isinstance(item, str) else check_words)(f"{field}[{i}]", item, limits)
    return list(items)

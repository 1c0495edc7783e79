"""The body of `serve`'s `POST /predict` for token classification (pydantic: imported by `serve` alone)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    sentences: list[str | list[str]] = Field(
        description="raw text (split into words; entities get character offsets) or a list of words",
        examples=[["Peter Blackburn flew to Brussels.", ["EU", "rejects", "German", "call"]]])


def token_rows(body: TokenRequest, limits) -> list[dict]:
    from ..serve.schemas import check_count, check_text, check_words

    check_count("sentences", len(body.sentences), limits)
    for i, s in enumerate(body.sentences):
        (check_text if isinstance(s, str) else check_words)(f"sentences[{i}]", s, limits)
    return [{"sentence": s} for s in body.sentences]

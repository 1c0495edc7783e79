"""The body of `serve`'s `POST /predict` for sequence classification (pydantic: imported by `serve` alone)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    texts: list[str] = Field(description="texts to label", examples=[["a gripping, funny film"]])
    text_pairs: list[str] | None = Field(None, description="the second text of each pair, for a model trained on "
                                                           "pairs (MRPC, RTE, MNLI); one per text")
    probs: bool = Field(False, description="add the probability of every label")


def classify_rows(body: ClassifyRequest, limits, pairs: bool | None) -> list[dict]:
    """Rows {text, (text_pair)} of a request. `pairs`: the model was trained on pairs (True), single texts (False),
    unknown (None: a checkpoint without bertkit's run config takes either)."""
    from ..serve.schemas import ApiError, check_count, check_text

    check_count("texts", len(body.texts), limits)
    for i, t in enumerate(body.texts):
        check_text(f"texts[{i}]", t, limits)
    if body.text_pairs is None:
        if pairs:
            raise ApiError(400, "text_pairs", "this model classifies pairs of texts: give text_pairs, one per text")
        return [{"text": t} for t in body.texts]
    if pairs is False:
        raise ApiError(400, "text_pairs", "this model classifies single texts: leave out text_pairs")
    if len(body.text_pairs) != len(body.texts):
        raise ApiError(400, "text_pairs", f"{len(body.text_pairs)} pairs for {len(body.texts)} texts")
    for i, t in enumerate(body.text_pairs):
        check_text(f"text_pairs[{i}]", t, limits)
    return [{"text": t, "text_pair": p} for t, p in zip(body.texts, body.text_pairs, strict=True)]

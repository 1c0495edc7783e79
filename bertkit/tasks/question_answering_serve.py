"""The body of `serve`'s `POST /predict` for extractive QA (pydantic: imported by `serve` alone)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    question: str
    context: str
    id: str | int | None = None


class QARequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    questions: list[Question] = Field(description="questions, each with the context holding its answer")


def qa_rows(body: QARequest, limits) -> list[dict]:
    from ..serve.schemas import check_count, check_text

    check_count("questions", len(body.questions), limits)
    for i, q in enumerate(body.questions):
        check_text(f"questions[{i}].question", q.question, limits)
        check_text(f"questions[{i}].context", q.context, limits)
    return [q.model_dump(exclude_none=True) for q in body.questions]

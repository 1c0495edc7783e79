"""Extractive QA's outputs outside training: the run report's figure of exact match and F1 by question word.
(`bertkit predict` reads JSONL rows {question, context, id?}, the default of `Task.read_inputs`; a request body:
`QARequest`, question_answering.py.)"""

from __future__ import annotations

from pathlib import Path

QUESTION_WORDS = ("what", "who", "when", "where", "which", "how", "why")


def plot_question_types(run: Path, split: str, preds: list[dict]) -> str | None:
    """Exact match and F1 (official v1.1 definitions) by the question's wh-word."""
    if not preds or "gold" not in preds[0] or "question" not in preds[0]:
        return None
    from ..metrics.squad import exact_match_score, f1_score
    from ..plots import plt, save_figure

    groups: dict[str, list] = {}
    for p in preds:
        words = p["question"].lower().split()
        kind = next((w for w in QUESTION_WORDS if w in words), "other")
        em = max(exact_match_score(p["answer"], g) for g in p["gold"])
        f1 = max(f1_score(p["answer"], g) for g in p["gold"])
        groups.setdefault(kind, []).append((em, f1))
    kinds = [k for k in (*QUESTION_WORDS, "other") if k in groups]
    fig, ax = plt().subplots(figsize=(1.0 * len(kinds) + 3, 3.4))
    x = range(len(kinds))
    ax.bar([i - 0.2 for i in x], [100 * sum(e for e, _ in groups[k]) / len(groups[k]) for k in kinds], 0.4,
           label="exact match")
    ax.bar([i + 0.2 for i in x], [100 * sum(f for _, f in groups[k]) / len(groups[k]) for k in kinds], 0.4, label="F1")
    ax.set(xticks=list(x), xticklabels=[f"{k}\n(n={len(groups[k])})" for k in kinds], ylabel="score (%)",
           ylim=(0, 110), title=f"EM and F1 by question word ({split})")
    ax.legend()
    return save_figure(fig, run / f"report_question_types_{split}.png")

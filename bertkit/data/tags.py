"""IOB tags: the schemes bertkit reads (`O`, `B-TYPE`, `I-TYPE`; IOB1 or IOB2, always returned as IOB2), their
checks and the label order (conll.py's docstring has the rules)."""

from __future__ import annotations

import re

from ..errors import DataError

TAG = re.compile(r"(?:O|[BI]-\S+)\Z")


def _tag_error(tag: str) -> str:
    hint = (" (IOBES/BILOU tags are not supported: convert them to IOB2)" if re.match(r"[ESLU]-", tag) else
            " (an entity tag needs a type, e.g. B-PER)" if tag in ("B", "I") else "")
    return f"unknown tag {tag!r}: expected O, B-TYPE or I-TYPE (IOB1 or IOB2){hint}"


def to_iob2(tags: list[str]) -> tuple[list[str], int]:
    """IOB1 (or IOB2) tags → IOB2: an `I-T` that starts an entity (after `O` or another type) becomes `B-T`.
    Returns the new tags and how many were changed (0 for IOB2 input).

    Example:
    ```python
    >>> to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC"])
    (['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC'], 2)
    ```
    """
    out, changed, prev = [], 0, "O"
    for tag in tags:
        if tag.startswith("I-") and (prev == "O" or prev[2:] != tag[2:]):
            tag, changed = "B-" + tag[2:], changed + 1
        out.append(tag)
        prev = tag
    return out, changed


def label_names_for(tag_lists) -> list[str]:
    """`O`, then `B-T`, `I-T` for each entity type T (alphabetical): the documented id2label order."""
    types = sorted({t[2:] for tags in tag_lists for t in tags if t != "O"})
    return ["O"] + [f"{prefix}-{t}" for t in types for prefix in "BI"]


def sentence_tags(tags: list, label_names: list[str] | None, file, line, field) -> tuple[list[str], int]:
    """One sentence's tags (a JSONL line's, a hub row's) checked (O, B-T or I-T; one of `label_names` where given)
    and in IOB2, with how many were converted."""
    for tag in tags:
        if not isinstance(tag, str) or not TAG.match(tag):
            raise DataError(_tag_error(str(tag)), file=file, line=line, field=field)
    iob2, converted = to_iob2(tags)
    bad = next((t for t in iob2 if label_names is not None and t not in label_names), None)
    if bad is not None:
        raise DataError(f"tag {bad!r} is not in the label set ({', '.join(label_names)})", file=file, line=line,
                        field=field)
    return iob2, converted

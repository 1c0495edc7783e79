"""An independent Python port of the counting logic of conlleval (the CoNLL-2000/2003 shared-task scorer, a Perl
script, version 2004-01-26), for checking bertkit's seqeval-based metric. It deliberately uses no seqeval.

Input: the script's format, one `token ... gold guess` line per word (the last two fields are the gold and the
guessed tag), a blank line between sentences. Output: the counts and precision / recall / FB1 in percent, overall
and per type, as the script prints them. Not ported: the options -d (delimiter), -r (raw tags), -o (boundary token)
and the LaTeX output.

Example:
```python
>>> evaluate(["EU B-ORG B-ORG", "rejects O O", "", "Peter B-PER B-PER", "Blackburn I-PER O"])["overall"]["fb1"]
50.0
```
"""

from __future__ import annotations

BOUNDARY = "-X-"  # the script's sentence-boundary token; a blank line is read as `-X- O O`


def _split(tag: str) -> tuple[str, str]:
    """Perl's `($tag, $type) = split(/-/, $field)`: the part before the first '-', then the part up to the next."""
    parts = tag.split("-")
    return parts[0], parts[1] if len(parts) > 1 else ""


def end_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """The script's endOfChunk: does a chunk end between the previous word and this one?"""
    end = False
    if prev_tag == "B" and tag in ("B", "O"):
        end = True
    if prev_tag == "I" and tag in ("B", "O"):
        end = True
    if prev_tag == "E" and tag in ("E", "I", "O"):
        end = True
    if prev_tag not in ("O", ".") and prev_type != type_:
        end = True
    if prev_tag in ("]", "["):  # chunks of length 1 (1998-12-22 correction)
        end = True
    return end


def start_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """The script's startOfChunk: does a chunk start at this word?"""
    start = False
    if tag == "B" and prev_tag in ("B", "I", "O"):
        start = True
    if prev_tag == "O" and tag in ("I", "E"):
        start = True
    if prev_tag == "E" and tag in ("E", "I"):
        start = True
    if tag not in ("O", ".") and prev_type != type_:
        start = True
    if tag in ("[", "]"):
        start = True
    return start


def _ratios(correct: int, guessed: int, gold: int) -> dict:
    precision = 100.0 * correct / guessed if guessed else 0.0
    recall = 100.0 * correct / gold if gold else 0.0
    fb1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "fb1": fb1, "correct": correct, "guessed": guessed,
            "gold": gold}


def evaluate(lines) -> dict:
    """Score conlleval-format lines. Returns {overall: {...}, types: {type: {...}}, accuracy, tokens}."""
    correct_chunk = found_correct = found_guessed = correct_tags = tokens = 0
    by_type = {"correct": {}, "gold": {}, "guessed": {}}
    in_correct = False
    last_correct, last_guessed, last_correct_type, last_guessed_type = "O", "O", "", ""
    width = None

    def bump(counter, key):
        counter[key] = counter.get(key, 0) + 1

    for line in lines:
        features = line.split()
        if features and width is None:
            width = len(features)
        elif features and len(features) != width:
            raise ValueError(f"unexpected number of features: {len(features)} ({width})")
        if not features or features[0] == BOUNDARY:
            features = [BOUNDARY, "O", "O"]
        if len(features) < 2:
            raise ValueError(f"unexpected number of features in line {line}")
        guessed, guessed_type = _split(features[-1])
        correct, correct_type = _split(features[-2])
        first_item = features[0]
        if first_item == BOUNDARY:
            guessed = "O"

        if in_correct:
            correct_ends = end_of_chunk(last_correct, correct, last_correct_type, correct_type)
            guessed_ends = end_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type)
            if correct_ends and guessed_ends and last_guessed_type == last_correct_type:
                in_correct = False
                correct_chunk += 1
                bump(by_type["correct"], last_correct_type)
            elif correct_ends != guessed_ends or guessed_type != correct_type:
                in_correct = False

        correct_starts = start_of_chunk(last_correct, correct, last_correct_type, correct_type)
        guessed_starts = start_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type)
        if correct_starts and guessed_starts and guessed_type == correct_type:
            in_correct = True
        if correct_starts:
            found_correct += 1
            bump(by_type["gold"], correct_type)
        if guessed_starts:
            found_guessed += 1
            bump(by_type["guessed"], guessed_type)
        if first_item != BOUNDARY:
            if correct == guessed and guessed_type == correct_type:
                correct_tags += 1
            tokens += 1
        last_guessed, last_correct, last_guessed_type, last_correct_type = (guessed, correct, guessed_type,
                                                                            correct_type)
    if in_correct:
        correct_chunk += 1
        bump(by_type["correct"], last_correct_type)

    types = sorted(set(by_type["gold"]) | set(by_type["guessed"]))
    return {"overall": _ratios(correct_chunk, found_guessed, found_correct),
            "types": {t: _ratios(by_type["correct"].get(t, 0), by_type["guessed"].get(t, 0), by_type["gold"].get(t, 0))
                      for t in types},
            "accuracy": 100.0 * correct_tags / tokens if tokens else 0.0, "tokens": tokens}

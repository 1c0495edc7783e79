"""Long sentences for token classification: overlapping windows of whole words, and merging their predictions.

A sentence whose word pieces do not fit in one input is not truncated. It is cut into windows of whole words, each
at most `budget` pieces (max_length minus [CLS] and [SEP]); consecutive windows share up to `overlap` pieces of
whole words. After the forward pass each word takes its prediction from the window where it has the most context:
the largest min(pieces left of the word, pieces right of it) inside the window; on a tie the earlier window wins.
This is the "maximum context" rule of BERT's SQuAD windows, applied to words. Every word is in some window, so
every word gets a prediction.

Example:
```python
>>> word_windows([1, 2, 1, 3, 1, 1], budget=4, overlap=2)   # pieces per word
[(0, 3), (2, 4), (4, 6)]
```
"""

from __future__ import annotations

import numpy as np


def word_windows(piece_counts: list[int], budget: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) word ranges covering the sentence, each of at most `budget` pieces (every count ≤ budget);
    a sentence that fits is one window. An empty sentence has none."""
    n, windows, start = len(piece_counts), [], 0
    while start < n:
        end, used = start, 0
        while end < n and used + piece_counts[end] <= budget:
            used += piece_counts[end]
            end += 1
        windows.append((start, end))
        if end == n:
            break
        # the next window starts back inside this one: at most `overlap` shared pieces, always leaving room for
        # word `end`, and always after this window's start (so the loop ends)
        room = min(overlap, budget - piece_counts[end])
        nxt, shared = end, 0
        while nxt - 1 > start and shared + piece_counts[nxt - 1] <= room:
            nxt -= 1
            shared += piece_counts[nxt]
        start = nxt
    return windows


def merge_windows(word_ids: list[list[int]], example_ids: list[int], logits: list[np.ndarray],
                  num_words: list[int]) -> list[np.ndarray]:
    """Per example, a [num_words, num_labels] array: each word's logits from its first piece in the window where the
    word has the most context.

    `word_ids[f]` gives, for each position of feature f, the index of its word in the sentence (-1 for special
    tokens); `example_ids[f]` the sentence; `logits[f]` is [positions, num_labels].
    """
    num_labels = logits[0].shape[-1] if logits else 0
    merged = [np.zeros((n, num_labels), dtype=np.float32) for n in num_words]
    best = [np.full(n, -1) for n in num_words]  # context of the window each word's row came from
    for ids, ex, scores in zip(word_ids, example_ids, logits, strict=True):
        ids = np.asarray(ids)  # [positions]
        pieces = np.flatnonzero(ids >= 0)  # positions of word pieces, in order
        if not pieces.size:
            continue
        words = ids[pieces]
        new_word = np.r_[True, words[1:] != words[:-1]]
        first, last = pieces[new_word], pieces[np.r_[new_word[1:], True]]  # [words in window]
        context = np.minimum(first - pieces[0], pieces[-1] - last)
        w = ids[first]
        better = context > best[ex][w]
        best[ex][w[better]] = context[better]
        merged[ex][w[better]] = scores[first[better]]
    for ex, b in enumerate(best):
        if (b < 0).any():  # cannot happen with word_windows; guards the contract "every word gets a prediction"
            raise RuntimeError(f"sentence {ex}: words {np.flatnonzero(b < 0).tolist()} are in no window")
    return merged

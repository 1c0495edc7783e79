"""Long sentences for token classification: overlapping windows of whole words, a batch of sentences encoded into
them (`encode_windows`, with the document's words around each window as context), and merging their predictions.

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

from ..errors import BertkitError
from .casing import word_casing


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


def _word_pieces(enc, i: int, num_words: int, budget: int, unk_id: int) -> list[list[int]]:
    """Piece ids of each word of sentence i; a word the tokenizer drops (e.g. a zero-width space) becomes [UNK],
    and a word longer than a window keeps its first `budget` pieces."""
    pieces = [[] for _ in range(num_words)]
    for piece, word in zip(enc["input_ids"][i], enc.word_ids(i), strict=True):
        pieces[word].append(piece)
    return [p[:budget] or [unk_id] for p in pieces]


def context_words(tokens: list[list[str]], docs: list, n: int) -> tuple[list[list[str]], list[list[str]]]:
    """For each sentence, the last n words before it and the first n after it within its document (consecutive
    sentences with equal `docs`): at least n word pieces each side, where the document has them."""
    left, right = [], []
    for i in range(len(tokens)):
        before, j = [], i - 1
        while j >= 0 and docs[j] == docs[i] and len(before) < n:
            before, j = tokens[j] + before, j - 1
        after, j = [], i + 1
        while j < len(tokens) and docs[j] == docs[i] and len(after) < n:
            after, j = after + tokens[j], j + 1
        left.append(before[len(before) - n:] if len(before) > n else before)
        right.append(after[:n])
    return left, right


def _split_room(room: int, left: int, right: int, context: int) -> tuple[int, int]:
    """Context pieces (left, right) for a window with `room` free places: up to `context` a side, shared evenly,
    a side with less to give leaving its share to the other."""
    n_left = min(left, context, room // 2)
    n_right = min(right, context, room - n_left)
    return min(left, context, room - n_right), n_right


def _tag_id(tag, label2id: dict) -> int:
    if isinstance(tag, int):
        return tag
    if tag not in label2id:
        raise BertkitError(f"tag {tag!r} is not one of the model's labels ({', '.join(label2id)})")
    return label2id[tag]


def encode_windows(batch, indices, tokenizer, budget: int, overlap: int, label2id: dict, rest: list[int] | None,
                   context: int = 0, casing: bool = False, marker: int | None = None):
    """`TokenClassification.encode` on a batch of sentences: [CLS] [left context] pieces [right context] [SEP] per
    window of whole words; the context pieces have no word and no label. Token type ids: 0, or with `casing`
    each piece's word's casing (0 on [CLS] and [SEP]). `marker`: the id of the family's bare word-start piece
    (sentencepiece '▁', byte-level 'Ġ'): where a word begins with it and has more pieces, it has no word and no
    label either, and the word's next piece is its first."""
    has_tags = "tags" in batch
    segments = "token_type_ids" in tokenizer.model_input_names  # BERT: all 0 (one segment)
    enc = tokenizer(batch["tokens"], is_split_into_words=True, add_special_tokens=False, verbose=False)
    if context:
        around, around_types = {}, {}
        for side in ("left", "right"):
            words = batch[f"context_{side}"]
            side_enc = tokenizer(words, is_split_into_words=True, add_special_tokens=False, verbose=False)
            around[side] = side_enc["input_ids"]
            around_types[side] = [[word_casing(words[i][w]) if casing else 0 for w in side_enc.word_ids(i)]
                                  for i in range(len(words))]
    out = {k: [] for k in ("input_ids", *(("token_type_ids",) if segments else ()), "attention_mask", "word_ids",
                           "example_id", "length", *(("labels",) if has_tags else ()))}
    for i, words in enumerate(batch["tokens"]):
        pieces = _word_pieces(enc, i, len(words), budget, tokenizer.unk_token_id)
        lead = [int(marker is not None and len(p) > 1 and p[0] == marker) for p in pieces]  # a bare '▁' first
        tags = [_tag_id(t, label2id) for t in batch["tags"][i]] if has_tags else None
        word_type = [word_casing(w) if casing else 0 for w in words]
        for start, end in word_windows([len(p) for p in pieces], budget, overlap):
            words_in = range(start, end)
            ids = [p for w in words_in for p in pieces[w]]
            types = [word_type[w] for w in words_in for _ in pieces[w]]
            n_left = n_right = 0
            if context:  # the sentence's own words outside the window come first, then the document's
                left = around["left"][i] + [p for w in range(start) for p in pieces[w]]
                left_types = around_types["left"][i] + [word_type[w] for w in range(start) for _ in pieces[w]]
                right = [p for w in range(end, len(words)) for p in pieces[w]] + around["right"][i]
                right_types = [word_type[w] for w in range(end, len(words)) for _ in pieces[w]] + around_types[
                    "right"][i]
                n_left, n_right = _split_room(budget - len(ids), len(left), len(right), context)
                ids = left[len(left) - n_left:] + ids + right[:n_right]
                types = left_types[len(left) - n_left:] + types + right_types[:n_right]
            ids = [tokenizer.cls_token_id, *ids, tokenizer.sep_token_id]
            out["input_ids"].append(ids)
            if segments:
                out["token_type_ids"].append([0, *types, 0])
            out["attention_mask"].append([1] * len(ids))
            word_ids = [-1 if k < lead[w] else w for w in words_in for k in range(len(pieces[w]))]
            out["word_ids"].append([-1] * (1 + n_left) + word_ids + [-1] * (1 + n_right))
            out["example_id"].append(indices[i])
            out["length"].append(len(ids))
            if has_tags:  # the tag on a word's first piece; -100 (left out of the loss) or `rest` on the others
                labels = [x for w in words_in for x in [-100] * lead[w] + [tags[w]] +
                          [rest[tags[w]] if rest else -100] * (len(pieces[w]) - 1 - lead[w])]
                out["labels"].append([-100] * (1 + n_left) + labels + [-100] * (1 + n_right))
    return out

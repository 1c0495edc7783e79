"""Which hidden layers to take (`--layers`), how to combine them (`--combine`) and pool pieces (`--pool`).

Hidden states are numbered as transformers' `output_hidden_states` returns them: 0 is the input embeddings,
1..L the transformer layers (L = `num_hidden_layers`); negative numbers count from the end (-1 = layer L).
"""

from __future__ import annotations

import re

import torch

from ..errors import BertkitError

NAMES = ("embeddings", "last", "second-to-last", "lastN", "firstN", "all")
COMBINE = ("concat", "mean", "sum", "none")
POOL = ("first", "last", "mean", "cls", "sentence-mean", "none")


def parse_layers(spec: str, num_layers: int) -> list[int]:
    """`last4` → [L-3, L-2, L-1, L] (`lastN`, `firstN` = layers 1..N, for any N); `-1,-2` → [L, L-1]; `1-6` →
    [1..6]; `embeddings,all` → [0..L].

    Example:
    ```python
    >>> parse_layers("last4", 6), parse_layers("first2", 6), parse_layers("-1,-2", 6), parse_layers("2-4", 6)
    ([3, 4, 5, 6], [1, 2], [6, 5], [2, 3, 4])
    ```
    """
    named = {"embeddings": [0], "last": [num_layers], "second-to-last": [num_layers - 1],
             "all": list(range(1, num_layers + 1))}
    out = []
    for part in spec.split(","):
        part = part.strip()
        if part in named:  # names combine with commas too: "embeddings,all" = every hidden state
            out.extend(named[part])
            continue
        counted = re.fullmatch(r"(last|first)(\d+)", part)
        if counted:
            n = int(counted.group(2))
            if not 1 <= n <= num_layers:
                raise BertkitError(f"--layers {part}: the model has {num_layers} layers (choose {counted.group(1)}1 "
                                   f"to {counted.group(1)}{num_layers})")
            out.extend(range(num_layers - n + 1, num_layers + 1) if counted.group(1) == "last" else range(1, n + 1))
            continue
        try:
            if "-" in part[1:]:  # a range a-b (a may be negative: -4--1)
                cut = part.index("-", 1)
                a, b = _index(int(part[:cut]), num_layers, spec), _index(int(part[cut + 1:]), num_layers, spec)
                out.extend(range(a, b + 1) if a <= b else range(a, b - 1, -1))
            else:
                out.append(_index(int(part), num_layers, spec))
        except ValueError:
            raise BertkitError(f"--layers {spec!r}: {part!r} is not a layer number, a range a-b, or one of "
                               f"{', '.join(NAMES)}") from None
    if not out:
        raise BertkitError(f"--layers {spec!r} selects no layer")
    return out


def _index(i: int, num_layers: int, spec: str) -> int:
    if -(num_layers + 1) <= i < 0:
        return num_layers + 1 + i
    if 0 <= i <= num_layers:
        return i
    raise BertkitError(f"--layers {spec!r}: layer {i} does not exist; the model has {num_layers} layers "
                       f"(0 = embeddings, 1..{num_layers}, or -1..-{num_layers + 1} from the end)")


def combine_layers(hidden: torch.Tensor, mode: str) -> torch.Tensor:
    """hidden: [layers, tokens, H] → concat [tokens, layers*H] | mean/sum [tokens, H] | none [tokens, layers, H];
    a batch [layers, batch, tokens, H] alike, with the batch axis first."""
    if mode == "concat":
        return torch.cat(list(hidden), dim=-1)  # [(batch,) tokens, layers*H], layers in the order asked for
    if mode == "mean":
        return hidden.mean(0)  # [(batch,) tokens, H]
    if mode == "sum":
        return hidden.sum(0)  # [(batch,) tokens, H]
    if mode == "none":
        return hidden.movedim(0, -2)  # [(batch,) tokens, layers, H]
    raise BertkitError(f"--combine {mode!r}: expected one of {', '.join(COMBINE)}")


def pool_pieces(vectors: torch.Tensor, word_ids: list[int | None], n_words: int, mode: str) -> torch.Tensor:
    """vectors: [pieces, ...] of one sentence (with [CLS]/[SEP]); word_ids[i]: the word of piece i or None.

    first/last/mean → [n_words, ...] (one row per input word); cls → [...] ([CLS] vector);
    sentence-mean → [...] (mean of the text's pieces, special tokens excluded); none → [text pieces, ...].
    """
    text = [i for i, w in enumerate(word_ids) if w is not None]
    if mode == "cls":
        return vectors[0]
    if mode == "sentence-mean":
        return vectors[text].mean(0)
    if mode == "none":
        return vectors[text]
    if mode not in ("first", "last", "mean"):
        raise BertkitError(f"--pool {mode!r}: expected one of {', '.join(POOL)}")
    pieces = torch.tensor(text, dtype=torch.long, device=vectors.device)  # [text pieces]
    words = torch.tensor([word_ids[i] for i in text], dtype=torch.long, device=vectors.device)  # each one's word
    count = torch.bincount(words, minlength=n_words)  # [words]
    if (count[:n_words] == 0).any():
        missing = int((count[:n_words] == 0).nonzero()[0])
        raise BertkitError(f"word {missing} has no word piece (truncated or empty); cannot pool it")
    if mode == "mean":  # the pieces of each word summed in order, over their count
        out = vectors.new_zeros((n_words, *vectors.shape[1:])).index_add_(0, words, vectors[pieces])  # [words, ...]
        return out / count.to(vectors.dtype).view(-1, *[1] * (vectors.dim() - 1))
    # first: the first piece of each word; last: its last one
    reduce, start = ("amin", len(word_ids)) if mode == "first" else ("amax", -1)
    chosen = torch.full((n_words,), start, dtype=torch.long, device=vectors.device)
    chosen.scatter_reduce_(0, words, pieces, reduce)  # [words]: each one's first (last) piece
    return vectors[chosen]  # [words, ...]

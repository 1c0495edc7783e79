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
                default = ", or all; last4 is the default of extract, probe and /embed" if part == "last4" else ""
                raise BertkitError(f"--layers {part}: the model has {num_layers} layers (choose {counted.group(1)}1 "
                                   f"to {counted.group(1)}{num_layers}{default})")
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
    twice = sorted({i for i in out if out.count(i) > 1})
    if twice:  # its features would be in the output twice (concat), or weigh double (mean)
        raise BertkitError(f"--layers {spec!r} selects layer {', '.join(map(str, twice))} more than once")
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


WORD_POOLS = ("first", "last", "mean")  # one row per input word


def pool_pieces(vectors: torch.Tensor, word_ids: list[int | None], n_words: int, mode: str) -> torch.Tensor:
    """vectors: [pieces, ...] of one sentence (with [CLS]/[SEP]); word_ids[i]: the word of piece i or None.

    first/last/mean → [n_words, ...] (one row per input word); cls → [...] ([CLS] vector);
    sentence-mean → [...] (mean of the text's pieces, special tokens excluded); none → [text pieces, ...].
    """
    if mode in WORD_POOLS:
        return pool_words(vectors[None], [word_ids], [n_words], mode)
    text = [i for i, w in enumerate(word_ids) if w is not None]
    if mode == "cls":
        return vectors[0]
    if mode == "sentence-mean":
        return vectors[text].mean(0)
    if mode == "none":
        return vectors[text]
    raise BertkitError(f"--pool {mode!r}: expected one of {', '.join(POOL)}")


class WordError(BertkitError):
    """A word without a piece; `sentence` is its sentence's position in the batch."""

    def __init__(self, sentence: int, message: str):
        self.sentence = sentence
        super().__init__(message)


def pool_words(vectors: torch.Tensor, word_ids: list[list[int | None]], n_words: list[int], mode: str
               ) -> torch.Tensor:
    """vectors: [batch, pieces, ...] (each sentence's pieces from position 0, [CLS]/[SEP] included, then padding);
    word_ids[j][i]: the word of sentence j's piece i or None. → [sum(n_words), ...]: every sentence's words in
    order (sentence j's from row sum(n_words[:j])), pooled for the whole batch at once (a few tensor operations,
    not a few a sentence): the first / last piece of each word, or the mean of its pieces summed in order.
    WordError names the first sentence with a word without a piece."""
    if mode not in WORD_POOLS:
        raise BertkitError(f"--pool {mode!r}: expected one of {', '.join(WORD_POOLS)}")
    flat = vectors.reshape(-1, *vectors.shape[2:])  # [batch * pieces, ...]
    width, rows, words, offset = vectors.shape[1], [], [], 0
    for j, ids in enumerate(word_ids):
        for i, w in enumerate(ids):
            if w is not None:
                rows.append(j * width + i)
                words.append(offset + w)
        offset += n_words[j]
    rows_t = torch.tensor(rows, dtype=torch.long, device=vectors.device)  # [text pieces]: their place in `flat`
    words_t = torch.tensor(words, dtype=torch.long, device=vectors.device)  # [text pieces]: their word, batch-wide
    count = torch.bincount(words_t, minlength=offset)[:offset]  # [words]
    if (count == 0).any():
        missing = int((count == 0).nonzero()[0])
        j = next(j for j in range(len(n_words)) if missing < sum(n_words[:j + 1]))
        raise WordError(j, f"word {missing - sum(n_words[:j])} has no word piece (truncated or empty); cannot "
                           "pool it")
    if mode == "mean":
        out = flat.new_zeros((offset, *flat.shape[1:])).index_add_(0, words_t, flat[rows_t])  # [words, ...]
        out = out / count.to(flat.dtype).view(-1, *[1] * (flat.dim() - 1))
    else:  # first: each word's first piece; last: its last one
        reduce, start = ("amin", len(flat)) if mode == "first" else ("amax", -1)
        chosen = torch.full((offset,), start, dtype=torch.long, device=vectors.device)
        out = flat[chosen.scatter_reduce_(0, words_t, rows_t, reduce)]  # [words, ...]
    return out

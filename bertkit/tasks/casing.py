"""Word casing as token type ids (`ner_casing`), for uncased checkpoints: their tokenizer lower-cases the text, and
capitals are much of what marks a name. Each word piece's token type id becomes its word's casing class; the
token type table grows to CASING_TYPES rows and every row starts as a copy of row 0 (segment A; segment B's row
becomes "Capitalised": single-sentence tagging never uses it), so training starts from the uncased model's
behaviour. The checkpoint records `bertkit_casing: true` in its config and loads in plain transformers,
which, given no token type ids, reads every word as class 0: `casing_type_ids` gives them there.
"""

from __future__ import annotations

import torch

from ..errors import BertkitError
from ..families import FAMILIES, token_types

CASING_TYPES = 4  # word casing as a token type id: 0 no capital, 1 Capitalised, 2 ALL CAPS (2+ letters), 3 mixed


def word_casing(word: str) -> int:
    """0 no upper-case letter (also numbers, punctuation), 1 Capitalised (or a single capital), 2 all capitals
    (two letters or more), 3 other mixed case.

    Example:
    ```python
    >>> [word_casing(w) for w in ["call", "German", "EU", "U.S.", "McDonald", "1996", "I"]]
    [0, 1, 2, 2, 3, 0, 1]
    ```
    """
    letters = [c for c in word if c.isalpha()]
    if not any(c.isupper() for c in letters):
        return 0
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return 2
    return 1 if letters[0].isupper() and not any(c.isupper() for c in letters[1:]) else 3


def casing_type_ids(tokenizer, words: list[str]) -> list[int]:
    """Token type ids for `tokenizer(words, is_split_into_words=True)` (with [CLS] and [SEP]) for a model trained
    with `ner_casing`, to use it from plain transformers."""
    enc = tokenizer(words, is_split_into_words=True)
    return [0 if w is None else word_casing(words[w]) for w in enc.word_ids()]


def add_casing_types(model, tokenizer) -> None:
    """Grow the token type table to CASING_TYPES rows, each a copy of row 0 (no-op when it has them already),
    and mark the config."""
    table = getattr(getattr(model.base_model, "embeddings", None), "token_type_embeddings", None)
    if not token_types(model.config) or table is None or "token_type_ids" not in tokenizer.model_input_names:
        readers = ", ".join(n for n, f in FAMILIES.items() if f.token_types)
        raise BertkitError(f"casing gives each word's casing as its token type id, and {model.config.model_type} "
                           f"models ({type(model).__name__}) read no token type ids; casing is for uncased "
                           f"checkpoints of families that do ({readers})")
    if table.num_embeddings < CASING_TYPES:
        grown = torch.nn.Embedding(CASING_TYPES, table.embedding_dim, device=table.weight.device,
                                   dtype=table.weight.dtype)
        with torch.no_grad():
            grown.weight.copy_(table.weight[:1].expand(CASING_TYPES, -1))  # [types, hidden]
        model.base_model.embeddings.token_type_embeddings = grown
        model.config.type_vocab_size = CASING_TYPES
    model.config.bertkit_casing = True

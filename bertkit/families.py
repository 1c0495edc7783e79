"""What differs between encoder families, in one place, keyed by the checkpoint's `config.model_type`.

The tasks, the tokenizer loading, the training changes, LoRA and export ask these functions; no other module
compares model types. A model type that is not in the table gets `UNKNOWN`: its tokenizer is used as it is (but
for a space before each pre-split word where it is byte-level BPE, `words_tokenizer`), it gets no CPU speed-ups,
peft chooses its LoRA layers, and its position table is counted from after padding's (as RoBERTa's kin, CamemBERT
and MPNet, count it; at worst one position short).

| family | token types | pre-split words | pre-trained pooled [CLS] | first token | CPU speed-ups | LoRA layers |
|---|---|---|---|---|---|---|
| bert | 2 | as they are | `bert.pooler` | [CLS] | measured: all | peft: query, value |
| distilbert | none | as they are | none (head: `pre_classifier`) | [CLS] | none | q_lin, v_lin |
| electra | 2 | as they are | none (head: `classifier.dense`) | [CLS] | none | peft: query, value |
| roberta | none | `add_prefix_space` (byte BPE) | multiple choice only (else `classifier.dense`) | <s> | none | peft |
| xlm-roberta | none | as they are | multiple choice only (else `classifier.dense`) | <s> | none | peft |
| deberta-v2 | `type_vocab_size` (v3: 0) | as they are | `pooler` (ContextPooler) | [CLS] | none | peft |
| albert | 2 | as they are | `albert.pooler` | [CLS] | none | query, value |
| modernbert | none | `add_prefix_space` (byte BPE) | none (head: `head.dense`) | [CLS] | none | Wqkv |

Facts, one each:
- `token_types(config)`: how many token types (segments) the model reads, 0 when it takes no `token_type_ids`;
  `fit_tokenizer` makes the tokenizer give them exactly then (transformers 5's ALBERT tokenizer leaves them out,
  ModernBERT and DistilBERT read none), and NER's `casing` needs them;
- `prefix_space`: the tokenizer is byte-level BPE, where a word is its own pre-token only with a space before it:
  words given pre-split (NER, `bertkit extract`) are tokenized with `add_prefix_space` (`words_tokenizer`), as in
  running text (RoBERTa's documentation; ModernBERT's tokenizer class ignores the option, so the pre-tokenizer
  itself is set);
- `pooler`: where the pre-trained pooled-[CLS] layer (dense + tanh) is, for heads that read one (`reinit_pooler`,
  and LoRA trains it in full); families without one put a dense layer of their own in the head;
- `cls_token`: the first token, whose vector is the "[CLS]" vector (`--pool cls`); position 0 in every family here;
- `word_marker`: the piece that alone only marks where a word starts (sentencepiece '▁', byte-level 'Ġ'; WordPiece
  has none): a word whose first piece it is (a rare first letter: '▁' 'Z' 'q' ...) is labelled and predicted by
  NER at its next piece, the bare marker being context (`word_marker_id`);
- `cpu_speedups`: the CPU training speed-ups of `bertkit/cpu` measured on this family (docs/speed.md measured them
  on BERT only: every other family gets none);
- `lora_targets`: the layers LoRA adapts by default where peft has no default for the family;
- `max_positions`: the most tokens a sequence may have where a learned table of `max_position_embeddings` rows gives
  each position its vector (BERT, DistilBERT, ELECTRA, ALBERT; RoBERTa's and XLM-R's rows start after the padding
  token's id), None where positions are relative (DeBERTa-v2 without `position_biased_input`) or rotary (ModernBERT)
  and any length runs; a longer sequence through a table is a size error inside the model, not a message.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

SPEEDUPS = ("fast_dropout", "keep_heap")  # bertkit/cpu's, by their compute option names


@dataclass(frozen=True)
class Family:
    name: str  # config.model_type
    token_types: bool  # reads token_type_ids (how many: the config's type_vocab_size)
    prefix_space: bool = False  # byte-level BPE: pre-split words need add_prefix_space
    pooler: str | None = None  # the pooled-[CLS] layer under the task model, where its head reads one
    head_dense: str = ""  # where the head's own dense layer is, for families without a pooler (error messages)
    cls_token: str = "[CLS]"  # the first token (position 0): the sentence vector of `--pool cls`
    word_marker: str | None = None  # the piece that only marks a word's start (sentencepiece '▁', byte-level 'Ġ')
    cpu_speedups: tuple[str, ...] = ()  # measured on this family
    lora_targets: tuple[str, ...] | None = None  # None: peft's default for the family
    positions: str = "table"  # a learned table ("table"), one whose rows start after padding's, "relative", "rotary"
    # ("unknown": a family not in the table, counted as after padding's: RoBERTa's kin, CamemBERT and MPNet, are)
    known: bool = True


FAMILIES = {f.name: f for f in (
    Family("bert", token_types=True, pooler="base_model.pooler", cpu_speedups=SPEEDUPS),
    Family("electra", token_types=True, head_dense="classifier.dense"),
    Family("albert", token_types=True, pooler="base_model.pooler", word_marker="▁", lora_targets=("query", "value")),
    Family("deberta-v2", token_types=True, pooler="pooler", word_marker="▁", positions="relative"),
    Family("roberta", token_types=False, prefix_space=True, pooler="base_model.pooler",
           head_dense="classifier.dense", cls_token="<s>", word_marker="Ġ", positions="after padding"),
    Family("xlm-roberta", token_types=False, pooler="base_model.pooler", head_dense="classifier.dense",
           cls_token="<s>", word_marker="▁", positions="after padding"),
    Family("distilbert", token_types=False, head_dense="pre_classifier", lora_targets=("q_lin", "v_lin")),
    Family("modernbert", token_types=False, prefix_space=True, head_dense="head.dense", word_marker="Ġ",
           lora_targets=("Wqkv",), positions="rotary"),
)}
UNKNOWN = Family("", token_types=True, pooler="base_model.pooler", positions="unknown", known=False)


def family(config) -> Family:
    """The family of a transformers config (or of a model: its config)."""
    config = getattr(config, "config", config)
    name = getattr(config, "model_type", "")
    return FAMILIES.get(name) or replace(UNKNOWN, name=name)


def token_types(config) -> int:
    """How many token types the model reads: 0 when it takes no token_type_ids."""
    config = getattr(config, "config", config)
    return int(getattr(config, "type_vocab_size", 0) or 0) if family(config).token_types else 0


def max_positions(config) -> int | None:
    """The most tokens a sequence may have: a learned position table's rows for it; None for relative or rotary
    positions (DeBERTa-v2's are relative unless `position_biased_input` adds a table)."""
    config = getattr(config, "config", config)
    kind, rows = family(config).positions, getattr(config, "max_position_embeddings", None)
    if rows is None or (kind in ("relative", "rotary") and not getattr(config, "position_biased_input", False)):
        return None
    padding = getattr(config, "pad_token_id", None)
    after = kind == "after padding" or (kind == "unknown" and padding is not None)  # at worst a position short
    return rows - (padding + 1 if after else 0)


def fit_tokenizer(tokenizer, config):
    """The tokenizer gives `token_type_ids` exactly when the model reads them (in place; `save_pretrained` keeps
    it). A family not in the table keeps its tokenizer as it is. Returns the tokenizer."""
    if not family(config).known or not hasattr(tokenizer, "model_input_names"):
        return tokenizer
    names = [n for n in tokenizer.model_input_names if n != "token_type_ids"]
    if token_types(config):
        names.insert(1, "token_type_ids")
    if names != list(tokenizer.model_input_names):
        tokenizer.model_input_names = names
        tokenizer.init_kwargs["model_input_names"] = names
    return tokenizer


def words_tokenizer(tokenizer, config):
    """The tokenizer for words given pre-split (`is_split_into_words`): for byte-level BPE families a copy with a
    space before every word (`add_prefix_space`), so that a word is tokenized as in running text; else the
    tokenizer itself. A family not in the table is asked its tokenizer: byte-level BPE (DeBERTa v1's GPT-2 one) gets
    the space as well."""
    f = family(config)
    if (f.known and not f.prefix_space) or getattr(tokenizer, "backend_tokenizer", None) is None:
        return tokenizer
    byte_level = [p for p in _pre_tokenizers(tokenizer.backend_tokenizer.pre_tokenizer)
                  if type(p).__name__ == "ByteLevel" and not p.add_prefix_space]
    if not byte_level:
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)
    for p in _pre_tokenizers(tokenizer.backend_tokenizer.pre_tokenizer):
        if type(p).__name__ == "ByteLevel":
            p.add_prefix_space = True
    tokenizer.add_prefix_space = True
    tokenizer.init_kwargs["add_prefix_space"] = True
    return tokenizer


def _pre_tokenizers(pre) -> list:
    """A pre-tokenizer and, for a Sequence, its parts."""
    if pre is None:
        return []
    if type(pre).__name__ == "Sequence":
        parts, i = [], 0
        while True:
            try:
                parts.append(pre[i])
            except IndexError:
                return parts
            i += 1
    return [pre]


def word_marker_id(tokenizer, config) -> int | None:
    """The id of the family's bare word-start piece ('▁' alone, 'Ġ' alone) in `tokenizer`, None where the family
    has none (WordPiece) or the vocabulary lacks it. NER does not read a word from it (`token_classification`)."""
    marker = family(config).word_marker
    if marker is None:
        return None
    found = tokenizer.convert_tokens_to_ids(marker)
    return None if found is None or found == tokenizer.unk_token_id else found


def pooler(model):
    """The pre-trained pooled-[CLS] layer of a task model (dense + tanh) where its head reads one, else None."""
    path = family(model).pooler
    if path is None:
        return None
    owner = model.base_model if path.startswith("base_model.") else model
    return getattr(owner, path.rpartition(".")[2], None)


def no_pooler_reason(model) -> str:
    """Why `reinit_pooler` does not apply to this model (its family has no pooler, or this head does not read it)."""
    f = family(model)
    if f.head_dense:
        return (f"{f.name} models have no pre-trained pooler under this head: the head's own dense layer "
                f"({f.head_dense}) is new with the head")
    return f"{type(model).__name__} has no pooler (only heads that read the pooled [CLS] use one)"


def cpu_speedups(config) -> tuple[str, ...]:
    """The CPU speed-ups measured on this family (compute option names); () for every family but BERT."""
    return family(config).cpu_speedups


def lora_targets(config) -> list[str] | None:
    """The layers LoRA adapts by default: the family's where peft has no default for it, else None (peft's)."""
    targets = family(config).lora_targets
    return list(targets) if targets else None

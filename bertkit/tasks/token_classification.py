"""Token classification (named-entity recognition, CoNLL-2003): a linear layer over BERT's output at every piece.

Input `[CLS] w1.p1 w1.p2 w2.p1 ... [SEP]` → BERT → dropout → linear → logits per word piece. As in the BERT paper
(§5.3), a word is trained on and predicted from its first word piece; the word's other pieces get label -100 (left
out of the loss), or, with `label_all_pieces`, the word's tag (`I-T` on the continuation pieces of a `B-T` word).
A sentencepiece '▁' or byte-level 'Ġ' piece alone, which only marks where a word starts (`bertkit.families`), is
not the word's first piece: it is read as context, as [CLS] is, and the word's next piece is its first.

Sentences longer than `max_length` pieces are not truncated: they are cut into overlapping windows of whole words,
and each word takes its prediction from the window where it has the most context (`windows.py`); every input word
gets a tag. With `context=N` (config `ner_context`) each window is filled, up to max_length, with at most N word
pieces on each side from the text around it in the same document (the BERT paper's "maximal document context",
§5.3; FLERT, Schweter & Akbik 2020, uses 64): unlabelled, and not predicted from that window.
With `casing=True` (config `ner_casing`) each piece's token type id is its word's casing (`casing.py`), for
uncased checkpoints.
Tags are the raw argmax per word, not repaired into valid IOB2: that is what conlleval scores, reading an
`I-T` after `O` as the start of an entity. Entity spans are read by the same rule (seqeval's `get_entities`).

Example:
```python
ner = TokenClassification.from_pretrained("runs/conll2003")  # a run of `bertkit finetune conll2003`
ner.predict([["EU", "rejects", "German", "call"]])[0]["tags"]  # one tag per word
ner.predict(["Peter Blackburn flew to Brussels."])[0]["entities"][0]
# {'type', 'text', 'word_start', 'word_end', and for a text input 'start', 'end': characters}
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import datasets
from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification

from ..data.conll import load_conll_data, load_conll_split
from ..errors import BertkitError
from ..families import word_marker_id, words_tokenizer
from ..feature_cache import cached_map
from ..metrics import NER_BUILTIN, compute_metrics
from ..typed import option
from ..utils import as_list, quiet_maps
from .base import Task
from .casing import add_casing_types
from .inputs import check_unicode
from .token_classification_io import TokenClassificationIO
from .windows import context_words, encode_windows, merge_windows

# Raw text → words: abbreviations (U.S.), numbers with . , : - / (1996-08-22, 3.5), words with inner hyphens or
# apostrophes (Jean-Marie, O'Neill), else any single non-space character (punctuation). Close to CoNLL's tokens;
# pass pre-split words for full control.
WORD = re.compile(r"(?:[^\W\d_]\.){2,}|\d+(?:[.,:/-]\d+)*|\w+(?:[-'’]\w+)*|\S")
MODEL_KEYS = ("input_ids", "token_type_ids", "attention_mask", "labels")


def split_words(text: str) -> list[tuple[str, int, int]]:
    """(word, start, end) character spans of the words of raw text.

    Example:
    ```python
    >>> [w for w, _, _ in split_words("EU rejects German call, U.S. says.")]
    ['EU', 'rejects', 'German', 'call', ',', 'U.S.', 'says', '.']
    ```
    """
    return [(m.group(), m.start(), m.end()) for m in WORD.finditer(text)]


@dataclass(frozen=True)
class TokenClassificationOptions:
    """Options of token classification (NER): the tag column, labels, windows, document context, casing."""

    tag_column: int = option(-1, "CoNLL files: column of the tag, counted from 0 (-1 = the last); the token is "
                                 "column 0.", read=True)
    label_names: list[str] = option([], "Tags in id order (default: from the training file: O, then B-T, I-T for "
                                        "each entity type T in alphabetical order).")
    hub_columns: list[str] = option(["tokens", "ner_tags"], "Column names of the words and of the tags in JSONL "
                                                            "files and hub datasets (empty: tokens, ner_tags).",
                                      read=True)
    label_all_pieces: bool = option(False, "Train on every word piece of a word (its tag; I- on the pieces after a "
                                           "B-), not only on its first piece.")
    window_overlap: int | None = option(None, "Word pieces shared by consecutive windows of a sentence longer than "
                                              "max_length (default: half a window).", legacy=("ner_window_overlap",),
                                        aliases=("--ner-window-overlap",))
    context: int = option(0, "Document context: up to this many word pieces on each side of a sentence from the text "
                             "around it in its document (CoNLL -DOCSTART- blocks), filling the window up to "
                             "max_length; unlabelled. 0 = each sentence alone.", legacy=("ner_context",),
                          aliases=("--ner-context",))
    casing: bool = option(False, "Give the model each word's casing (no capital, Capitalised, ALL CAPS, mixed) as its "
                                 "token type id, for uncased checkpoints that lower-case the text; the token type "
                                 "table grows to 4 rows, each starting as a copy of row 0.", legacy=("ner_casing",),
                          aliases=("--ner-casing",))

    def validate(self, source: str) -> None:
        if self.context < 0:
            raise BertkitError(f"{source}: 'context' (document context) must be 0 or more word pieces")
        if self.window_overlap is not None and self.window_overlap < 0:
            raise BertkitError(f"{source}: 'window_overlap' must be 0 or more")
        if self.hub_columns and len(self.hub_columns) != 2:
            raise BertkitError(f"{source}: 'hub_columns' names two columns: words, tags")


class TokenClassification(TokenClassificationIO, Task):
    name = "token-classification"
    Options = TokenClassificationOptions
    auto_model_class = AutoModelForTokenClassification
    architecture = "ForTokenClassification"
    pipeline_tag = "token-classification"
    sequence_outputs = ("logits",)  # [length, num_labels] per feature
    metric_builtins = NER_BUILTIN
    default_metrics = ("precision", "recall", "f1", "per_type")
    default_max_length = None  # the checkpoint's own (`save` records it), else 128
    input_fields = {"sentence": str}
    example_fields = ("tokens", "tags")
    text_fields = ("tokens",)

    def __init__(self, model, tokenizer, label_names=None, max_length: int | None = None, options=None):
        super().__init__(model, tokenizer, label_names, max_length, options)
        o = self.options
        self.max_length = self.max_length or getattr(self.model.config, "bertkit_max_length", 128)
        if not self.tokenizer.is_fast:
            raise BertkitError("token classification needs a fast (Rust) tokenizer to map word pieces to words")
        self.tokenizer = words_tokenizer(self.tokenizer, model.config)  # words are given pre-split
        self.budget = self.max_length - 2  # pieces per window, without [CLS] and [SEP]
        self.window_overlap = self.budget // 2 if o.window_overlap is None else o.window_overlap
        if self.budget < 1 or not 0 <= self.window_overlap < self.budget:
            raise BertkitError(f"window_overlap must be between 0 and max_length - 3 = {self.budget - 1} "
                               f"(got {self.window_overlap} with max_length {self.max_length})")
        if o.context < 0:
            raise BertkitError(f"context must be 0 or more word pieces (got {o.context})")
        self.label_all_pieces, self.context = o.label_all_pieces, o.context
        self.casing = o.casing or getattr(self.model.config, "bertkit_casing", False)  # a casing checkpoint: always
        if self.casing:
            add_casing_types(self.model, self.tokenizer)
        self.label2id = {name: i for i, name in enumerate(self.label_names)}
        self._collator = DataCollatorForTokenClassification(self.tokenizer)  # pads labels with -100

    def run_options(self):  # window_overlap as given: None is half a window at the max_length the run records
        return replace(self.options, label_names=list(self.label_names), casing=bool(self.casing))

    @classmethod
    def load_data(cls, cfg):
        return load_conll_data(cfg, cfg.task_options)

    @classmethod
    def load_split(cls, cfg, split, label_names, file=None):
        return load_conll_split(cfg, cfg.task_options, split, label_names, file)

    def examples(self, data) -> datasets.Dataset:
        """Sentences as a Dataset (a dict of lists: `tokens`, `tags` as names or ids, `doc`?); a sentence whose tags
        are not one per word is refused (the row named)."""
        ds = self._checked(data)
        if {"tokens", "tags"} <= set(ds.column_names):
            names = self.label_names
            for i, (words, tags) in enumerate(zip(ds["tokens"], ds["tags"], strict=True)):
                if isinstance(words, str) or isinstance(tags, str):
                    raise BertkitError(f"row {i}: tokens and tags are lists (one tag per word), got a string")
                if len(words) != len(tags):
                    raise BertkitError(f"row {i}: {len(words)} words but {len(tags)} tags")
                odd = next((t for t in tags if t not in names and not (type(t) is int and 0 <= t < len(names))),
                           None) if names else None
                if odd is not None:
                    raise BertkitError(f"row {i}: tag {odd!r} is neither one of {names} nor an id 0-{len(names) - 1}")
        return ds

    # --- features -----------------------------------------------------------------------------------------------
    def encode(self, examples: datasets.Dataset) -> datasets.Dataset:
        """One feature per window (usually one per sentence): model inputs, `labels` when the examples have
        `tags`, and `word_ids` / `example_id` to map each position back to its word. With document context, the
        sentences around each one come from the `doc` column (consecutive equal numbers; no column: one document)."""
        # pieces after a word's first: -100, or with label_all_pieces the word's tag (B-T → I-T)
        rest = None
        if self.label_all_pieces:
            rest = [self.label2id.get("I-" + n[2:], i) if n.startswith("B-") else i
                    for i, n in enumerate(self.label_names)]
        if self.context and len(examples):
            left, right = context_words(examples["tokens"], examples["doc"] if "doc" in examples.column_names
                                        else [0] * len(examples), self.context)
            examples = examples.add_column("context_left", left).add_column("context_right", right)
        settings = dict(tokenizer=self.tokenizer, budget=self.budget, overlap=self.window_overlap,
                        label2id=self.label2id, rest=rest, context=self.context,
                        casing=self.casing, marker=word_marker_id(self.tokenizer, self.model.config))
        # (passed, not captured: `self` holds the model)
        identity = {"adapter": type(self).__name__, **{k: v for k, v in settings.items() if k != "tokenizer"}}
        return cached_map(examples, encode_windows, self.tokenizer, identity, with_indices=True, fn_kwargs=settings,
                          desc="tokenize" if len(examples) > 10_000 else None)

    def collate(self, features: list[dict]) -> dict:
        keys = [k for k in MODEL_KEYS if k in features[0]]
        return self._collator([{k: f[k] for k in keys} for f in features])  # padded to the longest in the batch

    # --- predictions --------------------------------------------------------------------------------------------
    def word_tags(self, outputs, features, num_words: list[int]) -> list[list[str]]:
        """The predicted tag of every word of every example, merged over windows (raw argmax)."""
        logits = merge_windows(features["word_ids"], features["example_id"], [o["logits"] for o in outputs],
                               num_words)
        return [[self.label_names[k] for k in scores.argmax(-1)] for scores in logits]  # scores: [words, labels]

    def score(self, outputs, examples, features, metric_hooks):
        tokens = examples["tokens"]
        tags = self.word_tags(outputs, features, [len(t) for t in tokens])
        gold = examples["tags"] if "tags" in examples.column_names else None
        if gold is not None:
            gold = [[self.label_names[t] if isinstance(t, int) else t for t in g] for g in gold]
        metrics = compute_metrics(metric_hooks, tags, gold) if metric_hooks and gold is not None else {}
        predictions = [sentence_prediction(w, t, g)
                       for w, t, g in zip(tokens, tags, gold or [None] * len(tags), strict=True)]
        return metrics, predictions

    def save(self, directory, state_dict=None):
        """The Hugging Face folder; its config also records the window length, so that `bertkit evaluate` and
        `predict` cut long sentences as training did (plain transformers ignores the extra key)."""
        self.model.config.bertkit_max_length = self.max_length
        return super().save(directory, state_dict)

    def write_predictions(self, directory, split: str, predictions: list[dict], main: bool = False) -> None:
        """`predictions_<split>.jsonl`, and `predictions_<split>.conll` (`token gold pred`, for conlleval)."""
        from ..data.conll import conll_lines
        from ..utils import atomic_path

        super().write_predictions(directory, split, predictions)
        if predictions and "gold" in predictions[0]:
            with atomic_path(Path(directory) / f"predictions_{split}.conll") as p:
                p.write_text(conll_lines([x["tokens"] for x in predictions], [x["gold"] for x in predictions],
                                         [x["tags"] for x in predictions]))

    @quiet_maps()
    def predict(self, sentences: list, batch_size: int = 64, precision: str = "fp32",
                documents: list[int] | None = None) -> list[dict]:
        """Tags and entities for each sentence (notebook use), in input order. A sentence is a list of words, or
        raw text (a string), which is split into words by `split_words`; its entities then also carry character
        offsets `start`, `end` (end exclusive) into the text. `documents` (a document number per sentence, equal
        for consecutive sentences of one text) gives a model trained with document context its context; without
        it each sentence is read alone. A single str is one sentence."""
        sentences = as_list(sentences)
        spans = [split_words(s) if isinstance(s, str) else None for s in sentences]
        tokens = [[w for w, _, _ in sp] if sp is not None else list(s) for s, sp in zip(sentences, spans, strict=True)]
        if any(not isinstance(w, str) or not w.strip() for words in tokens for w in words):
            raise BertkitError("a word must be a non-empty string (give each sentence as a list of words or a str)")
        check_unicode(tokens, "sentences")
        if not tokens:
            return []
        for i, words in enumerate(tokens):
            if not words:
                raise BertkitError(f"sentence {i}: no words")
        if documents is not None and len(documents) != len(tokens):
            raise BertkitError(f"documents: {len(documents)} numbers for {len(tokens)} sentences")
        docs = list(documents) if documents is not None else list(range(len(tokens)))
        features = self.encode(datasets.Dataset.from_dict({"tokens": tokens, "doc": docs}, features=datasets.Features(
            {"tokens": datasets.Sequence(datasets.Value("string")), "doc": datasets.Value("int64")})))
        outputs = self.infer(features, batch_size, precision)
        tags = self.word_tags(outputs, features, [len(t) for t in tokens])
        return [sentence_prediction(w, t, text=s if sp is not None else None, spans=sp)
                for s, sp, w, t in zip(sentences, spans, tokens, tags, strict=True)]


def sentence_prediction(tokens: list[str], tags: list[str], gold: list[str] | None = None, text: str | None = None,
                        spans: list[tuple[str, int, int]] | None = None) -> dict:
    """{[text,] tokens, tags, [gold,] entities}; an entity is {type, text, word_start, word_end[, start, end]}
    with `word_end` exclusive, and character offsets `start`/`end` (end exclusive) when the input was raw text."""
    from seqeval.metrics.sequence_labeling import get_entities  # (seqeval imports scikit-learn: only for NER)

    entities = []
    for etype, first, last in get_entities(list(tags)):  # last is inclusive
        entity = {"type": etype, "text": " ".join(tokens[first:last + 1]), "word_start": first, "word_end": last + 1}
        if spans is not None:
            entity.update(text=text[spans[first][1]:spans[last][2]], start=spans[first][1], end=spans[last][2])
        entities.append(entity)
    return {**({"text": text} if text is not None else {}), "tokens": list(tokens), "tags": list(tags),
            **({"gold": list(gold)} if gold is not None else {}), "entities": entities}

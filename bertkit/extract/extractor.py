"""ELMo-style contextual features from any BERT checkpoint: chosen hidden layers, combined, pooled to words.

Example:
```python
>>> fx = FeatureExtractor("minilm-l6", layers="last4", combine="concat", pool="mean")
>>> vecs = fx(["EU rejects German call".split()])      # one [words, 4*384] array per sentence
>>> vecs[0].shape
(4, 1536)
```
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from transformers import AutoModel

from ..batching import sorted_batches
from ..device import autocast, choose_precision, default_device, model_precision
from ..errors import BertkitError
from ..families import max_positions, words_tokenizer
from ..graphs import GraphedForward, bucket_batch, budget_batches, on_gpu
from ..models import load_pretrained, load_tokenizer
from ..precast import precast
from ..utils import as_list
from .layers import COMBINE, POOL, WORD_POOLS, WordError, combine_layers, parse_layers, pool_pieces, pool_words


class SentenceError(BertkitError):
    """A sentence the model cannot take; `index` is its position in the call's input."""

    def __init__(self, index: int, message: str):
        self.index = index
        super().__init__(f"sentence {index}: {message}")


class FeatureExtractor:
    """Frozen BERT → hidden states of `layers` → `combine` → `pool`. Inputs are lists of words (pre-tokenised).

    `model` is a checkpoint name, or an already loaded base model (e.g. a fine-tuned run's `model.base_model`)
    given with its `tokenizer`. `hidden_states` is the only step that runs the model: the ONNX Runtime extractor
    (`bertkit.export.runtime.OnnxFeatureExtractor`) replaces just that.
    """

    def __init__(self, model, layers: str = "last4", combine: str = "concat", pool: str = "mean",
                 precision: str = "auto", batch_size: int = 64, max_length: int = 512, device: str | None = None,
                 tokenizer=None):
        if isinstance(model, str):
            self.model, self.tokenizer = load_pretrained(AutoModel, model, skip=("pooler.",))[0], load_tokenizer(model)
        elif tokenizer is None:
            raise BertkitError("FeatureExtractor: a loaded model needs its tokenizer")
        else:
            self.model, self.tokenizer = model, tokenizer
        self.model.eval()
        self.config = self.model.config
        self.tokenizer = words_tokenizer(self.tokenizer, self.config)  # sentences come as lists of words
        self.device = torch.device(device) if device else default_device()
        self.model.to(self.device)
        self.precision = model_precision(choose_precision(precision, self.device), precision, self.model).precision
        if isinstance(model, str):  # its own model, only for inference: the linear weights in bf16 once
            precast(self.model, self.precision)
        self.batch_size, self.max_length = batch_size, min(max_length, max_positions(self.config) or max_length)
        self._graphs: dict = {}  # (layers, precision) → GraphedForward, on a GPU
        self.configure(layers, combine, pool)

    def configure(self, layers: str, combine: str, pool: str):
        """Set (and check) which layers, how they are combined and how pieces are pooled; returns self."""
        self.layers = parse_layers(layers, self.config.num_hidden_layers)
        if combine not in COMBINE:
            raise BertkitError(f"--combine {combine!r}: expected one of {', '.join(COMBINE)}")
        if pool not in POOL:
            raise BertkitError(f"--pool {pool!r}: expected one of {', '.join(POOL)}")
        self.combine, self.pool = combine, pool
        return self

    def with_settings(self, layers: str, combine: str, pool: str) -> FeatureExtractor:
        """A copy sharing the model, with other layers / combine / pool (e.g. per request of a server)."""
        return copy.copy(self).configure(layers, combine, pool)

    @property
    def dim(self) -> int:
        h = self.config.hidden_size
        return h * len(self.layers) if self.combine == "concat" else h

    def hidden_states(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The chosen layers of a padded batch: [layers, batch, pieces, H], float32. On a GPU replayed from a CUDA
        graph per shape (`bertkit.graphs`): the tensor is the graph's own, to be read before the next call."""
        batch = {k: v.to(self.device) for k, v in batch.items()}
        if not on_gpu(self.device):
            return self._chosen(batch, tuple(self.layers), True)
        layers = tuple(self.layers)
        if (layers, self.precision) not in self._graphs:  # shared with `with_settings` copies (the same model)
            self._graphs[layers, self.precision] = GraphedForward(lambda b: self._chosen(b, layers, False))
        return self._graphs[layers, self.precision](batch)

    def _chosen(self, batch: dict, layers: tuple, cache: bool) -> torch.Tensor:
        with autocast(self.precision, self.device, cache):
            hidden = self.model(**batch, output_hidden_states=True).hidden_states  # L+1 × [batch, pieces, H]
        return torch.stack([hidden[i] for i in layers]).float()

    def encode(self, sentences: list[list[str]]):
        return self.tokenizer(sentences, is_split_into_words=True, truncation=False)

    def __call__(self, sentences: list[list[str]] | list[str] | str, dtype=np.float32) -> list[np.ndarray]:
        """One array per sentence, in input order: [words, dim] (word pooling), [dim] (sentence pooling),
        [pieces, dim] (pool none); with combine none an extra layer axis before dim. A sentence is a list of words,
        or raw text (a str, one sentence where given alone), split into words as `bertkit extract` splits a text
        line (`inputs.as_words`)."""
        return self.extract(sentences, dtype)[0]

    @torch.no_grad()
    def extract(self, sentences, dtype=np.float32) -> tuple[list[np.ndarray], list[list[int]]]:
        """(`__call__`'s arrays, each sentence's word pieces as the index of their word): with pool none, the
        word of each row."""
        from .inputs import as_words  # here: inputs.py's readers bring datasets, which extraction needs not

        sentences = [as_words(s, self.tokenizer) for s in as_list(sentences)]
        if not sentences:
            return [], []
        enc = self.encode(sentences)
        lengths = [len(ids) for ids in enc["input_ids"]]
        for i, n in enumerate(lengths):
            if n > self.max_length:
                raise SentenceError(i, f"{n} word pieces; the model takes at most {self.max_length}")
            if not sentences[i]:
                raise SentenceError(i, "empty sentence")
        out: list = [None] * len(sentences)
        gpu = on_gpu(self.device)  # by token budget over a few lengths (`bertkit.graphs`)
        batches = budget_batches(lengths) if gpu else [(idx, 0, 0) for idx in sorted_batches(lengths, self.batch_size)]
        for idx, length, rows in batches:  # similar lengths together; order restored below
            batch = self.tokenizer.pad({"input_ids": [enc["input_ids"][i] for i in idx]}, return_tensors="pt")
            if gpu:
                batch = bucket_batch(batch, length, rows, self.tokenizer.pad_token_id or 0)
            chosen = self.hidden_states(batch)  # [layers, batch, pieces, H]
            if gpu:  # the batch's own rows; pooled to words on the device, else copied here once a batch
                chosen = chosen[:, :len(idx)] if self.pool in WORD_POOLS else chosen[:, :len(idx)].cpu()
            combined = combine_layers(chosen, self.combine)  # [batch, pieces, (layers,) dim]
            if self.pool in WORD_POOLS:  # the whole batch at once, one array cast and copy, a view a sentence
                try:
                    pooled = pool_words(combined, [enc.word_ids(i) for i in idx],
                                        [len(sentences[i]) for i in idx], self.pool)
                except WordError as e:  # e.g. a word of characters the tokenizer drops
                    raise SentenceError(idx[e.sentence], str(e)) from None
                arrays = pooled.to(torch.from_numpy(np.zeros(0, dtype)).dtype).cpu().numpy()  # [batch's words, ...]
                ends = np.cumsum([len(sentences[i]) for i in idx])[:-1]
                for i, part in zip(idx, np.split(arrays, ends), strict=True):
                    out[i] = part
                continue
            for j, i in enumerate(idx):
                vectors = combined[j, : lengths[i]]  # [pieces, (layers,) dim]
                try:
                    pooled = pool_pieces(vectors, enc.word_ids(i), len(sentences[i]), self.pool)
                except BertkitError as e:
                    raise SentenceError(i, str(e)) from None
                out[i] = pooled.cpu().numpy().astype(dtype, copy=False)
        return out, [[w for w in enc.word_ids(i) if w is not None] for i in range(len(sentences))]

"""Frozen-feature probes (the BERT paper's feature-based NER, Table 7): a small tagger on extracted features.

Features come from a frozen model (`FeatureExtractor`, first word piece of each word); only the tagger learns:
a linear layer, or the paper's two-layer BiLSTM before it. `combine="scalar-mix"` keeps the chosen layers apart
and learns ELMo's softmax-normalised layer weights and scale jointly with the tagger.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .scalar_mix import ScalarMix


class Tagger(nn.Module):
    def __init__(self, dim: int, num_labels: int, kind: str = "bilstm", hidden: int = 256, mix_layers: int = 0):
        super().__init__()
        self.mix = ScalarMix(mix_layers) if mix_layers else None
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, bidirectional=True, batch_first=True) if kind == "bilstm" \
            else None
        self.out = nn.Linear(2 * hidden if self.lstm else dim, num_labels)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """x: [batch, words, (layers,) dim] → logits [batch, words, labels]."""
        if self.mix is not None:
            x = self.mix(x)  # [batch, words, dim]
        if self.lstm is not None:
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            x, _ = self.lstm(packed)
            x, _ = nn.utils.rnn.pad_packed_sequence(x, batch_first=True, total_length=lengths.max().item())
        return self.out(x)


def _batches(n: int, lengths: list[int], batch_size: int, rng: np.random.Generator | None):
    """Length-sorted batches (shuffled order when training)."""
    order = np.argsort(lengths, kind="stable")
    batches = [order[i:i + batch_size] for i in range(0, n, batch_size)]
    if rng is not None:
        rng.shuffle(batches)
    return batches


def _pad(features: list[np.ndarray], idx) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(features[i]) for i in idx])
    x = torch.zeros((len(idx), int(lengths.max()), *features[idx[0]].shape[1:]))  # [batch, words, (layers,) dim]
    for j, i in enumerate(idx):
        x[j, : lengths[j]] = torch.from_numpy(features[i].astype(np.float32))
    return x, lengths


def predict_tags(tagger: Tagger, features: list[np.ndarray], label_names: list[str], batch_size: int = 64):
    tagger.eval()
    out: list = [None] * len(features)
    with torch.no_grad():
        for idx in _batches(len(features), [len(f) for f in features], batch_size, None):
            x, lengths = _pad(features, idx)
            pred = tagger(x, lengths).argmax(-1)  # [batch, words]
            for j, i in enumerate(idx):
                out[i] = [label_names[k] for k in pred[j, : lengths[j]].tolist()]
    return out


def train_probe(train_x, train_tags, valid_x, valid_tags, label_names, kind="bilstm", hidden=256, mix_layers=0,
                epochs=4, lr=1e-3, batch_size=32, seed=42, log=print) -> tuple[Tagger, dict, list[dict]]:
    """Train on frozen features; keep the epoch with the best validation entity F1."""
    from ..metrics import NER_BUILTIN, compute_metrics, resolve_metrics

    torch.manual_seed(seed)
    hooks = resolve_metrics(["precision", "recall", "f1"], builtins=NER_BUILTIN)
    label2id = {n: i for i, n in enumerate(label_names)}
    dim = train_x[0].shape[-1]
    tagger = Tagger(dim, len(label_names), kind, hidden, mix_layers)
    optimizer = torch.optim.Adam(tagger.parameters(), lr=lr)
    rng, best, best_state, history = np.random.default_rng(seed), None, None, []
    targets = [np.array([label2id[t] for t in tags]) for tags in train_tags]
    for epoch in range(1, epochs + 1):
        tagger.train()
        total, count = 0.0, 0
        for idx in _batches(len(train_x), [len(f) for f in train_x], batch_size, rng):
            x, lengths = _pad(train_x, idx)
            y = torch.full(x.shape[:2], -100, dtype=torch.long)  # [batch, words]; -100: padding
            for j, i in enumerate(idx):
                y[j, : lengths[j]] = torch.from_numpy(targets[i])
            loss = nn.functional.cross_entropy(tagger(x, lengths).flatten(0, 1), y.flatten(), ignore_index=-100)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + loss.item(), count + 1
        metrics = compute_metrics(hooks, predict_tags(tagger, valid_x, label_names), valid_tags)
        weights = tagger.mix.normalized_weights() if tagger.mix else None
        history.append({"epoch": epoch, "loss": total / max(count, 1), **metrics,
                        **({"layer_weights": weights, "gamma": float(tagger.mix.gamma.detach())} if weights else {})})
        log(f"epoch {epoch}: loss {total / max(count, 1):.4f}, valid F1 {100 * metrics['f1']:.2f}"
            + (f", layer weights {[round(w, 3) for w in weights]}" if weights else ""))
        if best is None or metrics["f1"] > best["f1"]:
            best, best_state = {**history[-1]}, {k: v.clone() for k, v in tagger.state_dict().items()}
    tagger.load_state_dict(best_state)
    return tagger, best, history

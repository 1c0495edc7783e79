"""Shared start of the SST-2 micro-benchmarks: the recipe, the packaged MiniLM task and the encoded train set,
and bertkit's training step as a plain function (what the Trainer does per step, without its bookkeeping)."""

from __future__ import annotations

import os
import time

import torch

import bertkit
from bertkit.config_files import load_recipe
from bertkit.device import autocast
from bertkit.training.optim import build_optimizer


def sst2_features(data_dir: str | None = None):
    """(recipe config, SequenceClassification task, encoded SST-2 training features)."""
    data_dir = data_dir or os.path.join(os.environ.get("BERTKIT_DATA_DIR", "../shared/data"), "sst2")
    cfg = load_recipe("sst2", {"data_dir": data_dir, "model": "minilm-l6"})
    train, _, labels = bertkit.SequenceClassification.load_data(cfg)
    clf = bertkit.SequenceClassification.from_config(cfg, labels)
    return cfg, clf, clf.encode(train)


def make_step(model, cfg, precision: str = "bf16"):
    """bertkit's step on `model` as set up by the caller (dropout, QKV, frozen weights): forward and backward under
    `precision`'s autocast, clipping at cfg.max_grad_norm, AdamW with bertkit's groups. step(batch) returns the
    seconds of forward+backward and of clip+AdamW."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = build_optimizer(model, cfg)

    def step(batch) -> tuple[float, float]:
        t0 = time.perf_counter()
        with autocast(precision, torch.device("cpu")):
            loss = model(**batch).loss
        loss.backward()
        t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return t1 - t0, time.perf_counter() - t1

    return step

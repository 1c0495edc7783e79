"""Shared start of the SST-2 micro-benchmarks: the recipe, the packaged MiniLM adapter and the encoded train set."""

from __future__ import annotations

import os

import bertkit
from bertkit.config import load_recipe
from bertkit.data import load_classification_data


def sst2_features(data_dir: str | None = None):
    """(recipe config, SequenceClassification adapter, encoded SST-2 training features)."""
    data_dir = data_dir or os.path.join(os.environ.get("BERTKIT_DATA_DIR", "../shared/data"), "sst2")
    cfg = load_recipe("sst2", {"data_dir": data_dir, "model": "minilm-l6"})
    train, _, labels = load_classification_data(cfg)
    clf = bertkit.SequenceClassification.from_pretrained("minilm-l6", label_names=labels)
    return cfg, clf, clf.encode(train)

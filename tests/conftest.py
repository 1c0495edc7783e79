"""Shared fixtures: a tiny random BERT with the real bert-base-uncased vocab, and tiny synthetic SST-2 files."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before datasets/transformers are imported: tests never need the hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "BERTKIT_CACHE" not in os.environ:  # tokenised-feature cache: a throw-away folder, never the user's ~/.cache
    import atexit
    import shutil
    import tempfile

    os.environ["BERTKIT_CACHE"] = tempfile.mkdtemp(prefix="bertkit-test-cache-")
    atexit.register(shutil.rmtree, os.environ["BERTKIT_CACHE"], True)

import random  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("BERTKIT_DATA_DIR", REPO.parent / "shared" / "data"))

POSITIVE = ["good", "great", "wonderful", "funny", "moving", "brilliant", "charming", "superb"]
NEGATIVE = ["bad", "dull", "boring", "awful", "tedious", "weak", "clumsy", "lifeless"]
FILLER = ["the", "film", "movie", "story", "is", "was", "a", "very", "quite", "and", "its", "cast", "plot", "really"]


def vocab_path() -> Path:
    from bertkit.models import resolve_model

    return Path(resolve_model("minilm-l6")[0]) / "vocab.txt"


def make_tiny_bert(directory: Path, seed: int = 0, layers: int = 2) -> Path:
    """A 2-layer (or `layers`), 32-wide random BertModel saved with the real uncased vocabulary (a 'pretrained'
    base)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertModel(config).save_pretrained(directory)
    BertTokenizerFast(vocab=str(vocab_path()), do_lower_case=True).save_pretrained(directory)
    return directory


def sentence(rng: random.Random, label: int) -> str:
    words = [rng.choice(FILLER) for _ in range(rng.randint(3, 14))]
    for _ in range(rng.randint(1, 2)):
        words.insert(rng.randrange(len(words) + 1), rng.choice(POSITIVE if label else NEGATIVE))
    return " ".join(words)


def write_sst2(directory: Path, n_train: int = 256, n_dev: int = 64, seed: int = 0) -> Path:
    """GLUE-format SST-2 files whose label is decided by a sentiment word: learnable by a tiny model."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        rows = ["sentence\tlabel"]
        for i in range(n):
            label = i % 2
            rows.append(f"{sentence(rng, label)} \t{label}")
        (directory / name).write_text("\n".join(rows) + "\n")
    return directory


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def sst2_dir(tmp_path_factory) -> Path:
    return write_sst2(tmp_path_factory.mktemp("data") / "sst2")


@pytest.fixture
def fast_args(tiny_bert, sst2_dir):
    """CLI flags for a quick, deterministic fp32 run of the tiny model on the tiny data."""
    return ["--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--precision", "fp32", "--lr", "1e-2",
            "--batch-size", "16", "--epochs", "2", "--warmup-ratio", "0.1"]

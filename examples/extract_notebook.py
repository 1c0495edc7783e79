"""Notebook-style example: ELMo-style features from a frozen BERT, in memory and streamed to disk.

Knobs (used by the test that runs this file on a tiny model): BERTKIT_EXAMPLE_MODEL (default `minilm-l6`),
BERTKIT_EXAMPLE_LAYERS (default last4), BERTKIT_EXAMPLE_OUT (feature folder).
"""

# %% Settings
import os
import tempfile

from bertkit.extract import FeatureExtractor, FeatureReader

model_name = os.environ.get("BERTKIT_EXAMPLE_MODEL", "minilm-l6")
layers = os.environ.get("BERTKIT_EXAMPLE_LAYERS", "last4")
out_dir = os.environ.get("BERTKIT_EXAMPLE_OUT") or os.path.join(tempfile.mkdtemp(prefix="bertkit-feats-"), "feats")

# %% One vector per word: the last four layers concatenated, word pieces averaged into words
fx = FeatureExtractor(model_name, layers=layers, combine="concat", pool="mean", precision="fp32")
sentences = [["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."], ["Peter", "Blackburn"]]
vectors = fx(sentences)  # one [words, 4 × hidden] array per sentence, in input order
print([v.shape for v in vectors])

# %% One vector per sentence: the [CLS] vector of the second-to-last layer
cls = FeatureExtractor(model_name, layers="second-to-last", pool="cls", precision="fp32")(sentences)
print([v.shape for v in cls])

# %% The same from a file, streamed to shards on disk (what `bertkit extract` does), then read back
path = os.path.join(os.path.dirname(out_dir), "sentences.txt")
with open(path, "w") as f:
    f.write("\n".join(" ".join(s) for s in sentences) + "\n")
from bertkit.cli import main  # noqa: E402

main(["extract", "--model", model_name, "--input", path, "--output", out_dir, "--layers", layers, "--pool", "mean",
      "--input-format", "pretokenized"])
for words, rows in FeatureReader(out_dir):
    print(words[:3], rows.shape)

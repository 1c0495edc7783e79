"""Notebook-style example: named-entity recognition on CoNLL-2003 with the token-classification task.

Run as a script (`python examples/ner_notebook.py`) or paste the cells into a notebook. Knobs (used by the test
that runs this file on a tiny model): BERTKIT_EXAMPLE_MODEL (default `minilm-l6`), BERTKIT_EXAMPLE_DATA (a folder
with CoNLL train.txt/valid.txt; default $BERTKIT_DATA_DIR/conll2003), BERTKIT_EXAMPLE_TRAIN (sentences, default
2000), BERTKIT_EXAMPLE_EPOCHS, BERTKIT_EXAMPLE_LR, BERTKIT_EXAMPLE_OUT (run folder).
"""

# %% Settings
import os
import tempfile
from pathlib import Path

import bertkit
from bertkit.data.conll import label_names_for, read_conll_file

env = os.environ.get
model_name = env("BERTKIT_EXAMPLE_MODEL", "minilm-l6")
data_dir = Path(env("BERTKIT_EXAMPLE_DATA", Path(env("BERTKIT_DATA_DIR", "data")) / "conll2003"))
out_dir = env("BERTKIT_EXAMPLE_OUT") or tempfile.mkdtemp(prefix="bertkit-ner-")

# %% Data: lists of words and their IOB2 tags (IOB1 files are converted on reading)
train = read_conll_file(data_dir / "train.txt", max_samples=int(env("BERTKIT_EXAMPLE_TRAIN", "2000")))
valid = read_conll_file(data_dir / "valid.txt", max_samples=500)
labels = label_names_for(train["tags"])  # O, B-LOC, I-LOC, ... (a stable, documented order)
print(len(train["tokens"]), "training sentences; labels:", labels)

# %% The task: BERT + a linear tagger on the first word piece of every word
ner = bertkit.TokenClassification.from_pretrained(model_name, label_names=labels)

# %% Train; entity-level precision / recall / F1 as conlleval counts them
cfg = bertkit.run_config(task="token-classification", name="conll2003", output_dir=out_dir,
                         epochs=float(env("BERTKIT_EXAMPLE_EPOCHS", "1")), lr=float(env("BERTKIT_EXAMPLE_LR", "5e-5")),
                         metrics=["precision", "recall", "f1"], main_metric="f1")
metrics = bertkit.Trainer(ner, cfg).fit({"tokens": train["tokens"], "tags": train["tags"]},
                                        {"valid": {"tokens": valid["tokens"], "tags": valid["tags"]}})
print("valid entity F1:", round(metrics["valid"]["f1"], 4))

# %% Predict on word lists, or on raw text (entities then carry character offsets)
for sentence in (["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
                 "Peter Blackburn flew from Brussels to London."):
    print(ner.predict([sentence])[0])

"""Notebook-style example: fine-tune a sentiment classifier on in-memory data, then predict.

Run it as a script (`python examples/sst2_notebook.py`) or paste the cells into a notebook.
Environment knobs (used by the test that runs this file): BERTKIT_EXAMPLE_MODEL (default `minilm-l6`),
BERTKIT_EXAMPLE_DATA (a folder with SST-2 train.tsv/dev.tsv; default $BERTKIT_DATA_DIR/sst2),
BERTKIT_EXAMPLE_TRAIN (training sentences to use, default 2000), BERTKIT_EXAMPLE_OUT (run folder),
BERTKIT_EXAMPLE_EPOCHS (default 1) and BERTKIT_EXAMPLE_LR (default 5e-5).
"""

# %% Imports and settings
import os
import tempfile
from pathlib import Path

import transformers

import bertkit

model_name = os.environ.get("BERTKIT_EXAMPLE_MODEL", "minilm-l6")
data_dir = Path(os.environ.get("BERTKIT_EXAMPLE_DATA", Path(os.environ.get("BERTKIT_DATA_DIR", "data")) / "sst2"))
n_train = int(os.environ.get("BERTKIT_EXAMPLE_TRAIN", "2000"))
out_dir = os.environ.get("BERTKIT_EXAMPLE_OUT") or tempfile.mkdtemp(prefix="bertkit-example-")
epochs = float(os.environ.get("BERTKIT_EXAMPLE_EPOCHS", "1"))
lr = float(os.environ.get("BERTKIT_EXAMPLE_LR", "5e-5"))


# %% Data as plain Python lists (any list of texts and labels works the same way)
def read_tsv(path, limit=None):
    rows = [line.rstrip("\n").split("\t") for line in open(path, encoding="utf-8").readlines()[1:]]
    rows = rows[:limit]
    return {"text": [r[0].strip() for r in rows], "label": ["positive" if r[1] == "1" else "negative" for r in rows]}


train = read_tsv(data_dir / "train.tsv", n_train)
dev = read_tsv(data_dir / "dev.tsv")
print(f"{len(train['text'])} training and {len(dev['text'])} dev sentences")

# %% The task: a pretrained BERT with a new classification head on [CLS] (seeded: a reproducible start)
transformers.set_seed(42)
clf = bertkit.SequenceClassification.from_pretrained(model_name, label_names=["negative", "positive"])

# %% Train with the accelerate-based trainer (the run's settings as flat keywords; see `bertkit finetune --help`)
cfg = bertkit.run_config(name="sst2", output_dir=out_dir, epochs=epochs, lr=lr)
metrics = bertkit.Trainer(clf, cfg).fit(train, {"dev": dev})
print("dev accuracy:", round(metrics["dev"]["accuracy"], 4))

# %% Predict on new text (the model now holds the best weights)
for p in clf.predict(["a gripping , funny and moving film", "a dull , lifeless mess"], with_probs=True):
    print(p)

# %% The run folder is a plain Hugging Face checkpoint: bertkit loads it back as its task, transformers as a model
print(bertkit.load_task(out_dir).predict(["a gripping , funny and moving film"]))
print(transformers.AutoModelForSequenceClassification.from_pretrained(out_dir).config.id2label)

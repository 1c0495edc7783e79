"""Notebook-style example: multiple choice (SWAG) with the multiple-choice task, then choosing endings.

Knobs (used by the test that runs this file on a tiny model): BERTKIT_EXAMPLE_MODEL (default `minilm-l6`),
BERTKIT_EXAMPLE_DATA (a folder with SWAG's train.csv/val.csv; default $BERTKIT_DATA_DIR/swag),
BERTKIT_EXAMPLE_TRAIN (questions, default 2000), BERTKIT_EXAMPLE_EPOCHS, BERTKIT_EXAMPLE_LR, BERTKIT_EXAMPLE_OUT.
"""

# %% Settings
import os
import tempfile
from pathlib import Path

import bertkit

env = os.environ.get
model_name = env("BERTKIT_EXAMPLE_MODEL", "minilm-l6")
data_dir = Path(env("BERTKIT_EXAMPLE_DATA", Path(env("BERTKIT_DATA_DIR", "data")) / "swag"))
out_dir = env("BERTKIT_EXAMPLE_OUT") or tempfile.mkdtemp(prefix="bertkit-mc-")

# %% The recipe's settings and data: SWAG's CSV (context, the start every ending continues, four endings, label)
cfg = bertkit.load_recipe("swag", {"model": model_name, "data_dir": str(data_dir), "output_dir": out_dir,
                                   "max_train_samples": int(env("BERTKIT_EXAMPLE_TRAIN", "2000")),
                                   "epochs": float(env("BERTKIT_EXAMPLE_EPOCHS", "1")),
                                   "lr": float(env("BERTKIT_EXAMPLE_LR", "2e-5")), "max_length": 64})
train, evals, labels = bertkit.MultipleChoice.load_data(cfg)
print(len(train), "training questions, e.g.", train[0]["context"], "→", train[0]["endings"])

# %% The task: each ending paired with the context, one score per pair from the pooled [CLS], a softmax over them
mc = bertkit.MultipleChoice.from_config(cfg, labels)

# %% Train; accuracy: the share of questions whose likeliest ending is the right one
metrics = bertkit.Trainer(mc, cfg).fit(train, evals)
print("val accuracy:", round(metrics["val"]["accuracy"], 4))

# %% Choose endings: one context with its endings, or a list of contexts with a list of endings each
question = evals["val"][0]
print(mc.predict(question["context"], [f"{question['start']} {e}" for e in question["endings"]])[0],
      "| gold:", question["label"])
print(bertkit.load_task(out_dir).predict_rows([{"context": question["context"], "start": question["start"],
                                                 "endings": question["endings"]}]))

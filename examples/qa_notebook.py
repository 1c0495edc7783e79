"""Notebook-style example: extractive question answering (SQuAD v1.1) with the question-answering task.

Knobs (used by the test that runs this file on a tiny model): BERTKIT_EXAMPLE_MODEL (default `minilm-l6`),
BERTKIT_EXAMPLE_DATA (a folder with SQuAD train.json/validation.json; default $BERTKIT_DATA_DIR/squad),
BERTKIT_EXAMPLE_TRAIN (questions, default 1000), BERTKIT_EXAMPLE_EPOCHS, BERTKIT_EXAMPLE_LR, BERTKIT_EXAMPLE_OUT.
"""

# %% Settings
import os
import tempfile
from pathlib import Path

import bertkit
from bertkit.data.squad import read_squad_file

env = os.environ.get
model_name = env("BERTKIT_EXAMPLE_MODEL", "minilm-l6")
data_dir = Path(env("BERTKIT_EXAMPLE_DATA", Path(env("BERTKIT_DATA_DIR", "data")) / "squad"))
out_dir = env("BERTKIT_EXAMPLE_OUT") or tempfile.mkdtemp(prefix="bertkit-qa-")

# %% Data: every answer_start is checked against its context on reading
train, _ = read_squad_file(data_dir / "train.json", max_samples=int(env("BERTKIT_EXAMPLE_TRAIN", "1000")))
valid, _ = read_squad_file(data_dir / "validation.json", max_samples=300)
print(len(train), "training questions, e.g.", train[0]["question"])

# %% The task: BERT + start/end logits over the context's word pieces, windows of 384 overlapping by 128
qa = bertkit.QuestionAnswering.from_pretrained(model_name)

# %% Train; exact match and F1 exactly as the official v1.1 script computes them
cfg = bertkit.run_config(task="question-answering", name="squad", output_dir=out_dir, max_length=384,
                         epochs=float(env("BERTKIT_EXAMPLE_EPOCHS", "1")), lr=float(env("BERTKIT_EXAMPLE_LR", "5e-5")),
                         metrics=["exact_match", "f1"], main_metric="f1")
metrics = bertkit.Trainer(qa, cfg).fit(train, {"validation": valid})
print("validation EM / F1:", round(metrics["validation"]["exact_match"], 2), round(metrics["validation"]["f1"], 2))

# %% Ask questions (answers come with character offsets into the context)
context = valid[0]["context"]
print(qa.predict([valid[0]["question"]], [context])[0], "| gold:", valid[0]["answers"]["text"][0])

"""A task of one's own, outside bertkit: cloze (fill in the blank). Each text has one [MASK]; the model's masked-LM
head picks the word. Not a copy of a built-in task: another head (`AutoModelForMaskedLM`), its own loss (cross-
entropy at the blank only), its own data format and answers.

What a task author writes is this class (and its options dataclass): the data reader, `encode`, the loss and
`score`. Registered (here with `register_task`, or through a package's `bertkit.tasks` entry point), it works with
`bertkit finetune`, `evaluate`, `predict`, `serve`, `export` and the run reports, which know nothing else of it:

    # in a package's pyproject.toml:  [project.entry-points."bertkit.tasks"]  cloze = "custom_task:Cloze"
    bertkit finetune cloze.yaml --model minilm-l6       # a recipe with `task: cloze`
    echo '{"text": "paris is the capital of [MASK] ."}' | bertkit predict --model runs/cloze --input -

Data: JSONL rows {"text": "... [MASK] ...", "answer": "word"}; the answer must be one word piece.
"""

from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM

from bertkit.data.readers import read_jsonl
from bertkit.data.sources import local_path, resolve_data_dir
from bertkit.errors import BertkitError, DataError
from bertkit.metrics import Accuracy, compute_metrics
from bertkit.tasks import Task, register_task
from bertkit.typed import option


@dataclass(frozen=True)
class ClozeOptions:
    top_k: int = option(3, "Candidate words returned for each blank.")


@register_task
class Cloze(Task):
    name = "cloze"
    Options = ClozeOptions
    auto_model_class = AutoModelForMaskedLM
    architecture = "ForMaskedLM"
    pipeline_tag = "fill-mask"
    named_labels = False  # the head scores the vocabulary, it names no labels
    sequence_outputs = ("logits",)  # [length, vocabulary] per text
    label_keys = ("labels", "blank")  # targets: the answer's id, and where the blank is
    metric_builtins = {"accuracy": Accuracy}
    default_metrics = ("accuracy",)
    input_fields = {"text": str}

    @staticmethod
    def read(path: Path, max_samples=None) -> datasets.Dataset:
        rows = read_jsonl(path)[:max_samples]
        for line, row in rows:
            if row.get("text", "").count("[MASK]") != 1:
                raise DataError("the text must hold exactly one [MASK]", file=path, line=line, field="text")
        return datasets.Dataset.from_dict({"text": [r["text"] for _, r in rows],
                                           "answer": [r.get("answer", "") for _, r in rows]})

    @classmethod
    def load_data(cls, cfg):
        folder = resolve_data_dir(cfg)
        evals = {Path(f).stem: cls.read(local_path(folder, f), cfg.max_eval_samples)
                 for f in cfg.validation_files}
        return cls.read(local_path(folder, cfg.train_file), cfg.max_train_samples), evals, []

    @classmethod
    def load_split(cls, cfg, split, label_names, file=None):
        return cls.read(Path(file) if file else local_path(resolve_data_dir(cfg), f"{split}.jsonl"))

    def encode(self, examples):
        enc = self.tokenizer(list(examples["text"]), truncation=True, max_length=self.max_length)
        mask = self.tokenizer.mask_token_id
        blank = []
        for i, ids in enumerate(enc["input_ids"]):
            if mask not in ids:  # a notebook's row (a file's are checked as read), or one cut before its blank
                raise BertkitError(f"row {i}: no [MASK] in its first {self.max_length} word pieces")
            blank.append(ids.index(mask))
        answers = list(examples["answer"]) if "answer" in examples.column_names else [""] * len(examples)
        labels = [self.tokenizer.convert_tokens_to_ids(a) if a else -100 for a in answers]
        return datasets.Dataset.from_dict({**enc, "length": [len(i) for i in enc["input_ids"]], "blank": blank,
                                           "labels": labels})

    def compute_loss(self, model, batch):
        logits = model(**{k: v for k, v in batch.items() if k not in self.label_keys}).logits  # [batch, seq, vocab]
        at_blank = logits[torch.arange(len(logits), device=logits.device), batch["blank"]]  # [batch, vocab]
        return F.cross_entropy(at_blank.float(), batch["labels"])

    def score(self, outputs, examples, features, metric_hooks):
        predictions = []
        for out, blank in zip(outputs, features["blank"], strict=True):
            top = torch.from_numpy(out["logits"][blank]).softmax(-1).topk(self.options.top_k)  # over the vocabulary
            words = self.tokenizer.convert_ids_to_tokens(top.indices.tolist())
            predictions.append({"answer": words[0], "candidates": dict(zip(words, top.values.tolist(), strict=True))})
        if not metric_hooks or not any(examples["answer"]):
            return {}, predictions
        ids = self.tokenizer.convert_tokens_to_ids  # the metric compares word-piece ids
        return compute_metrics(metric_hooks, ids([p["answer"] for p in predictions]), ids(list(examples["answer"]))), \
            predictions


if __name__ == "__main__":  # the command line, with this task registered: python examples/custom_task.py predict ...
    import sys

    from bertkit.cli import main

    sys.exit(main())

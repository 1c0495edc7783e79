"""Parity of method: `bertkit finetune` against transformers' own `Trainer` on SST-2, CoLA, STS-B, the sentence pairs
of MRPC, RTE, MNLI (its matched dev set) and WNLI, CoNLL-2003 NER, SQuAD v1.1 and SQuAD 2.0, with the same model, data,
hyper-parameters (the recipe's values resolved for the model, e.g. MiniLM's lr 1e-4), maximum length, precision and
seeds. Prints, per task and metric, both sides' mean ± std over the seeds and whether bertkit's mean lies within the
spread of the Trainer's seeds (between its lowest and highest value).

    python benchmarks/trainer_parity.py                     # cola and stsb, minilm-l6, seeds 13,42,87
    python benchmarks/trainer_parity.py --tasks mrpc,rte,mnli
    python benchmarks/trainer_parity.py --tasks sst2 --epochs 1   # the quickstart's one epoch
    python benchmarks/trainer_parity.py --tasks cola --seeds 13 --model PATH --max-train-samples 64 --epochs 1  # smoke
    python benchmarks/trainer_parity.py --tasks conll2003 --set layer_lr_decay=1.0 --set casing=false --epochs 3
    python benchmarks/trainer_parity.py --tasks squad --set layer_lr_decay=1.0 --epochs 1
    python benchmarks/trainer_parity.py --tasks squad_v2 --set layer_lr_decay=1.0 --epochs 2

bertkit runs as the real command in a subprocess (`bertkit finetune TASK --model M --seeds S ...`); then the
Trainer runs in this process, seed after seed: one configuration at a time, never two at once. Both read the data
through bertkit's loaders (the same examples), tokenise pairs the same way (truncation to max_length), group
batches by length, evaluate every epoch and keep the best epoch by the recipe's main metric (Trainer:
load_best_model_at_end), with AdamW, linear warm-up and decay, weight decay off for biases and LayerNorm, gradient
clipping at max_grad_norm. Results go to <output-dir>/parity.json and parity.md; finished pieces are not re-run.

Length grouping is the one step the two do differently: both sort shuffled examples by length inside megabatches
of (up to) 50 batches, but bertkit then shuffles the batches, while the Trainer's LengthGroupedSampler keeps each
megabatch's batches in order, longest to shortest (its longest batch first). `--no-group-by-length` turns grouping
off on both sides (plain shuffling), which compares the rest of the method without that difference.

NER (conll2003) on the Trainer side is transformers' run_ner.py method: words tokenised with `is_split_into_words`,
truncated at max_length, each word's first piece labelled (the others -100), DataCollatorForTokenClassification,
seqeval's entity scores over the labelled pieces. bertkit cuts a sentence longer than max_length into windows and
tags every word; the table's notes count the evaluation sentences the Trainer truncates (their cut words are in
neither its gold nor its predictions). Settings the Trainer lacks (MiniLM's layer-wise decay and casing ids) are set
to their defaults on both sides with `--set NAME=VALUE`, or the script stops.

SQuAD v1.1 (squad) on the Trainer side is run_qa.py's method (benchmarks/parity_sides.py): windows of max_length
overlapping by the recipe's window_overlap, labelled with the first answer (or [CLS] where it is not wholly
inside), dynamic padding, and run_qa's postprocess_qa_predictions, scored by the SQuAD v1.1 rules.
SQuAD 2.0 (squad_v2) adds run_qa's `version_2_with_negative`: unanswerable questions labelled [CLS], and its null
odds (null_odds.json); both sides are scored as bertkit scores a run, by the official script's metrics at the
threshold on the null odds that maximises F1 on the evaluation set (run_qa itself answers at a threshold of 0 and
hands the metric no-answer probabilities of 0). benchmarks/qa_decode_parity.py compares that post-processing with
bertkit's on one checkpoint's logits.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
from parity_sides import SIDES  # noqa: E402  (beside this script)

METRICS = {"sst2": ["accuracy", "f1"], "cola": ["mcc", "accuracy"], "stsb": ["pearson", "spearman"],
           "mrpc": ["f1", "accuracy"], "rte": ["accuracy"], "mnli": ["accuracy"], "wnli": ["accuracy"],
           "conll2003": ["f1", "precision", "recall"],
           "squad": ["f1", "exact_match"], "squad_v2": ["best_f1", "best_exact", "HasAns_f1", "NoAns_f1"]}
PERCENT = {"squad", "squad_v2"}  # tasks whose metrics both sides report in percent (the others: fractions)


def recipe(task: str, args):
    from bertkit.config_files import load_recipe

    overrides = {"model": args.model, "data_dir": str(Path(args.data_dir) / task), "precision": args.precision}
    for name in ("max_train_samples", "max_eval_samples", "epochs", "group_by_length"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    return load_recipe(task, {**overrides, **args.set})


def set_flags(values: dict) -> list[str]:
    """`--set` values as bertkit's flags: --name value, or --name / --no-name for a yes-or-no setting."""
    flags = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        flags += [flag if value else "--no-" + flag[2:]] if isinstance(value, bool) else [flag, str(value)]
    return flags


def same_method(cfg) -> None:
    """Stop unless the resolved settings are ones the Trainer side reproduces: settings bertkit has and this script
    does not give the Trainer (model changes, layer-wise decay, class weights, long-text windows, peft, a memory
    budget's micro-batches, early stopping) must be at their defaults."""
    o = cfg.task_options
    differ = {name: value for name, value, default in (
        ("layer_lr_decay", cfg.layer_lr_decay, 1.0), ("dropout", cfg.dropout, None),
        ("attention_dropout", cfg.attention_dropout, None), ("reinit_pooler", cfg.reinit_pooler, False),
        ("freeze_word_embeddings", cfg.freeze_word_embeddings, False), ("early_stopping", cfg.early_stopping, None),
        ("peft", cfg.peft.method, "none"), ("memory_budget", cfg.compute.memory_budget, None),
        ("class_weights", getattr(o, "class_weights", None), None),
        ("doc_pooling", getattr(o, "doc_pooling", "truncate"), "truncate"),
        ("casing", getattr(o, "casing", False), False), ("context", getattr(o, "context", 0), 0),
        ("label_all_pieces", getattr(o, "label_all_pieces", False), False),
        ("train_answer", getattr(o, "train_answer", "first"), "first"),
        ("eval_every", cfg.eval_every, "epoch")) if value != default}
    if differ:
        raise SystemExit(f"{cfg.name}: the Trainer side does not reproduce {differ}; parity needs them at their "
                         "defaults (--set NAME=VALUE)")


def run_bertkit(task: str, args, out: Path) -> dict:
    cfg = recipe(task, args)
    same_method(cfg)
    cmd = [sys.executable, "-m", "bertkit.cli", "finetune", task, "--model", args.model, "--seeds", args.seeds,
           "--data-dir", cfg.data_dir, "--precision", args.precision, "--output-dir", str(out), *set_flags(args.set)]
    for name in ("max_train_samples", "max_eval_samples", "epochs"):
        if getattr(args, name) is not None:
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if args.group_by_length is not None:
        cmd.append("--group-by-length" if args.group_by_length else "--no-group-by-length")
    if (out / "summary.json").is_file():
        print(f"{out}: finished before")
    else:
        print("$", " ".join(cmd[2:]), flush=True)
        subprocess.run(cmd + (["--resume"] if out.is_dir() else []), check=True)
    summary = json.loads((out / "summary.json").read_text())
    split = next(iter(summary["metrics"])).split("/")[0]  # the main evaluation split
    return {"values": {m: summary["metrics"][f"{split}/{m}"]["values"] for m in METRICS[task]},
            "wall_seconds": summary["wall_seconds"], "split": split}


def trainer_seed(task: str, args, seed: int) -> dict:
    """One Trainer run with the recipe's resolved settings; the best epoch's metrics on the recipe's first split."""
    from transformers import TrainingArguments, set_seed

    from bertkit.device import choose_precision, default_device
    from bertkit.models import load_tokenizer, resolve_model
    from bertkit.tasks import get_task

    t0 = time.perf_counter()
    cfg = recipe(task, args)
    same_method(cfg)
    task_class = get_task(cfg.task).resolve(cfg.task_options)  # e.g. SequenceRegression for STS-B
    train, evals, labels = task_class.load_data(cfg)
    split, dev = next(iter(evals.items()))
    tok = load_tokenizer(cfg.model)
    side = SIDES[cfg.task](cfg, tok, labels, dev)
    device = default_device()
    precision = choose_precision(cfg.compute.precision, device).precision
    set_seed(seed)  # before the new head is initialised, as bertkit does
    model = side.model_class.from_pretrained(resolve_model(cfg.model)[0], **side.model_kwargs)
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(
            output_dir=out, per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
            per_device_eval_batch_size=cfg.eval_batch_size, learning_rate=cfg.lr, num_train_epochs=cfg.epochs,
            warmup_steps=cfg.warmup_ratio, weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm,
            lr_scheduler_type="linear", eval_strategy="epoch", save_strategy="epoch", load_best_model_at_end=True,
            metric_for_best_model=cfg.main_metric, save_only_model=True,
            greater_is_better=cfg.main_metric not in task_class.lower_is_better,
            bf16=precision == "bf16", fp16=precision == "fp16", use_cpu=device.type == "cpu", seed=seed,
            data_seed=seed, report_to="none", logging_strategy="epoch", disable_tqdm=True,
            train_sampling_strategy="group_by_length" if cfg.compute.group_by_length else "random")
        trainer = side.trainer_class()(model=model, args=targs, train_dataset=side.encode_train(train),
                                       eval_dataset=side.encode_eval(dev), data_collator=side.collator,
                                       compute_metrics=side.metrics)
        trainer.train()
        result = trainer.evaluate()
    return {"split": split, **{m: result[f"eval_{m}"] for m in METRICS[task]},
            "wall_seconds": round(time.perf_counter() - t0, 1), **side.notes}


def run_trainer(task: str, args, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        path = out / f"seed-{seed}.json"
        if not path.is_file():
            print(f"Trainer: {task}, seed {seed}", flush=True)
            path.write_text(json.dumps(trainer_seed(task, args, seed), indent=2))
        runs.append(json.loads(path.read_text()))
    return {"values": {m: [r[m] for r in runs] for m in METRICS[task]}, "split": runs[0]["split"],
            "wall_seconds": round(sum(r["wall_seconds"] for r in runs), 1),
            **{k: runs[0][k] for k in ("truncated_eval_sentences", "eval_sentences", "eval_windows", "eval_questions")
               if k in runs[0]}}


def mean_std(values: list[float], scale: float = 100) -> str:
    std = np.std(values, ddof=1) if len(values) > 1 else 0.0
    return f"{scale * np.mean(values):.2f} ± {scale * std:.2f}"


def table(results: dict, args) -> str:
    from bertkit.utils import hardware

    grouping = {None: "the recipe's length grouping", True: "length grouping", False: "no length grouping"}
    lines = [f"model {args.model}, seeds {args.seeds}, precision {args.precision}, "
             f"{grouping[args.group_by_length]}; {time.strftime('%Y-%m-%d')}; {hardware()}", "",
             "| task | metric | bertkit | Trainer | bertkit per seed | Trainer per seed | "
             "bertkit mean within the Trainer seeds' range |", "|---|---|---|---|---|---|---|"]
    for task, r in results.items():
        scale = 1 if task in PERCENT else 100
        for m in METRICS[task]:
            ours, theirs = r["bertkit"]["values"][m], r["trainer"]["values"][m]
            inside = min(theirs) <= np.mean(ours) <= max(theirs)
            lines.append(f"| {task} ({r['bertkit']['split']}) | {m} | {mean_std(ours, scale)} | "
                         f"{mean_std(theirs, scale)} | {', '.join(f'{scale * v:.2f}' for v in ours)} | "
                         f"{', '.join(f'{scale * v:.2f}' for v in theirs)} | {'yes' if inside else 'no'} |")
    lines.append("")
    lines += [f"- {task}: wall time bertkit {r['bertkit']['wall_seconds']:.0f} s (its own clock, all seeds), "
              f"Trainer {r['trainer']['wall_seconds']:.0f} s (all seeds)" for task, r in results.items()]
    lines += [f"- {task}: the Trainer truncated {r['trainer']['truncated_eval_sentences']} of "
              f"{r['trainer']['eval_sentences']} evaluation sentences at max_length (bertkit windows them)"
              for task, r in results.items() if "truncated_eval_sentences" in r["trainer"]]
    lines += [f"- {task}: {r['trainer']['eval_questions']} evaluation questions in {r['trainer']['eval_windows']} "
              "windows on the Trainer side" for task, r in results.items() if "eval_windows" in r["trainer"]]
    if args.set:
        lines.append(f"- set on both sides: {', '.join(f'{k}={v}' for k, v in args.set.items())}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="cola,stsb")
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--seeds", default="13,42,87")
    parser.add_argument("--precision", default="auto", help="bertkit's --precision; resolved once, used by both")
    parser.add_argument("--data-dir", default=os.environ.get("BERTKIT_DATA_DIR", "../shared/data"),
                        help="folder with one sub-folder per task (cola/, stsb/, conll2003/, ...)")
    parser.add_argument("--output-dir", default="runs/parity")
    parser.add_argument("--max-train-samples", type=int, help="smoke tests only")
    parser.add_argument("--max-eval-samples", type=int, help="smoke tests only")
    parser.add_argument("--epochs", type=float, help="default: the recipe's (for the model)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a recipe setting on both sides (YAML value), e.g. layer_lr_decay=1.0 casing=false")
    parser.add_argument("--group-by-length", action=argparse.BooleanOptionalAction,
                        help="length grouping on both sides (default: the recipe's); --no-group-by-length: "
                             "plain shuffling on both")
    args = parser.parse_args()
    import yaml

    args.set = {name.strip(): yaml.safe_load(value) for name, _, value in (item.partition("=") for item in args.set)}

    from bertkit.device import choose_precision, default_device

    args.precision = choose_precision(args.precision, default_device()).precision
    if unknown := set(args.tasks.split(",")) - set(METRICS):
        raise SystemExit(f"--tasks: no Trainer side for {', '.join(sorted(unknown))}; known: {', '.join(METRICS)}")
    out = Path(args.output_dir)
    results = {}
    for task in args.tasks.split(","):
        results[task] = {"bertkit": run_bertkit(task, args, out / f"bertkit-{task}"),
                         "trainer": run_trainer(task, args, out / f"trainer-{task}")}
    text = table(results, args)
    (out / "parity.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    (out / "parity.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

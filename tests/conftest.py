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

import contextlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from itertools import islice  # noqa: E402
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


# `bertkit finetune` flags of a quick, deterministic run of the tiny model (fp32, a high rate, small batches)
TINY = ["--precision", "fp32", "--lr", "1e-2", "--batch-size", "16"]


def tiny_args(model, recipe: str, data, out, *extra: str) -> list[str]:
    """The arguments of `bertkit finetune RECIPE` (a name or a recipe file) for the tiny model `model` on the files
    in `data`, with the TINY flags and `extra` (which win over them)."""
    return ["finetune", str(recipe), "--model", str(model), "--data-dir", str(data), *TINY, "--output-dir", str(out),
            *extra]


def tiny_finetune(model, recipe: str, data, out, *extra: str) -> Path:
    """Run `bertkit finetune` in this process with `tiny_args`; the run folder."""
    from bertkit.cli import main

    assert main(tiny_args(model, recipe, data, out, *extra)) == 0
    return Path(out)


# --- synthetic data in each recipe's own format (tests share these; `write_recipe_data` picks one) --------------
def words(rng: random.Random, n_pos: int, n_neg: int, n_filler: int = 6) -> str:
    ws = [rng.choice(FILLER) for _ in range(n_filler)] + [rng.choice(POSITIVE) for _ in range(n_pos)] + \
         [rng.choice(NEGATIVE) for _ in range(n_neg)]
    rng.shuffle(ws)
    return " ".join(ws)


def write_sts(directory: Path, n_train: int = 192, n_dev: int = 48, seed: int = 0) -> Path:
    """The original STS Benchmark layout (no header, tab-separated); the score grows with the positive words."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for name, n in (("sts-train.csv", n_train), ("sts-dev.csv", n_dev)):
        lines = []
        for i in range(n):
            k = i % 4
            lines.append(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{1.5 * k:.3f}\t{words(rng, k, 0)}\t"
                         f"{words(rng, 0, 0, 3)}")
        (directory / name).write_text("\n".join(lines) + "\n")
    return directory


def write_rte(d: Path, n_train: int = 256, n_dev: int = 48, seed: int = 0) -> Path:
    """Entailment decided by a sentiment word in the hypothesis: learnable by the tiny model."""
    rng = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        rows = ["index\tsentence1\tsentence2\tlabel"]
        for i in range(n):
            label = i % 2
            premise = " ".join(rng.choice(FILLER) for _ in range(rng.randint(4, 10)))
            hyp = " ".join([rng.choice(FILLER), rng.choice(NEGATIVE if label else POSITIVE), rng.choice(FILLER)])
            rows.append(f"{i}\t{premise}\t{hyp}\t{['entailment', 'not_entailment'][label]}")
        (d / name).write_text("\n".join(rows) + "\n")
    return d


def _pair_rows(rng: random.Random, n: int):
    """(first text, second text, 0/1) with the label decided by the second text's sentiment word."""
    for i in range(n):
        label = i % 2
        yield (" ".join(rng.choice(FILLER) for _ in range(rng.randint(4, 10))),
               " ".join([rng.choice(FILLER), rng.choice(POSITIVE if label else NEGATIVE), rng.choice(FILLER)]), label)


MNLI_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
               "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label")
MNLI_LABELS = ["entailment", "neutral", "contradiction"]


def write_glue_pairs(task: str, d: Path, n_train: int = 128, n_dev: int = 48, seed: int = 0) -> Path:
    """Files in the format of GLUE task `task` (cola, mrpc, wnli, qnli, qqp, mnli), with learnable labels."""
    import json

    rng = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    if task == "cola":  # no header: source, label, original mark, sentence
        for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
            (d / name).write_text("".join(f"gj04\t{i % 2}\t{'' if i % 2 else '*'}\t{sentence(rng, i % 2)}\n"
                                          for i in range(n)))
    elif task == "mnli":
        rows = [{"sentence1": a, "sentence2": b, "gold_label": "-" if i % 17 == 5 else MNLI_LABELS[2 * y]}
                for i, (a, b, y) in enumerate(_pair_rows(rng, n_train))]
        (d / "train_sample10k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
            lines = [MNLI_HEADER] + ["\t".join([str(i), "1", "1n", "slate", "x", "x", "x", "x", a, b,
                                               MNLI_LABELS[2 * y], "", "", "", "", MNLI_LABELS[2 * y]])
                                     for i, (a, b, y) in enumerate(_pair_rows(rng, n_dev))]
            (d / name).write_text("\n".join(lines) + "\n")
    else:
        head, row = {
            "mrpc": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", lambda i, a, b, y: f"{y}\t{i}\t{i + 1}\t{a}\t{b}"),
            "wnli": ("index\tsentence1\tsentence2\tlabel", lambda i, a, b, y: f"{i}\t{a}\t{b}\t{y}"),
            "qnli": ("index\tquestion\tsentence\tlabel",
                     lambda i, a, b, y: f"{i}\t{a} ?\t{b}\t{['not_entailment', 'entailment'][y]}"),
            "qqp": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                    lambda i, a, b, y: f"{i}\t{2 * i}\t{2 * i + 1}\t{a} ?\t{b} ?\t{y}"),
        }[task]
        files = (("dev.tsv", n_train + n_dev),) if task == "qnli" else (("train.tsv", n_train), ("dev.tsv", n_dev))
        for name, n in files:  # QNLI here has a dev file only: runs carve it (--carve-eval)
            (d / name).write_text("\n".join([head] + [row(i, *r) for i, r in enumerate(_pair_rows(rng, n))]) + "\n")
    return d


# CoNLL-2003-like sentences whose entities are decided by the words themselves
NER_LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
NER_FIRST = ["Peter", "Mary", "John", "Anna", "Carlos", "Yuki"]
NER_LAST = ["Blackburn", "Kowalczyk", "Smith", "Okonkwo", "Brown"]  # Kowalczyk, Okonkwo: 4 word pieces each
NER_LOC = ["Paris", "London", "Berlin", "Tokyo", "Nairobi"]
NER_ORG = [["Reuters"], ["NASA"], ["United", "Nations"], ["Fifa"]]
NER_MISC = ["German", "British", "French"]
NER_FILLER = ["the", "said", "on", "in", "visited", "with", "met", "today", "and", "a", "report", "was", "of", "to"]


def synthetic_sentence(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """Entities decided by the word itself (learnable by the tiny model), except 'Jordan', a person or a place at
    random, so predictions are never all correct."""
    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.12:
            out += [(rng.choice(NER_FIRST), "B-PER"), (rng.choice(NER_LAST), "I-PER")]
        elif r < 0.2:
            out.append((rng.choice(NER_LOC), "B-LOC"))
        elif r < 0.26:
            out += [(w, ("B-" if i == 0 else "I-") + "ORG") for i, w in enumerate(rng.choice(NER_ORG))]
        elif r < 0.3:
            out.append((rng.choice(NER_MISC), "B-MISC"))
        elif r < 0.34:
            out.append(("Jordan", rng.choice(["B-PER", "B-LOC"])))
        else:
            out.append((rng.choice(NER_FILLER), "O"))
    return out


def write_conll(path: Path, n: int, seed: int, long_every: int) -> Path:
    rng = random.Random(seed)
    lines = ["-DOCSTART- -X- -X- O", ""]
    for i in range(n):
        ws = synthetic_sentence(rng, 40 if i % long_every == 0 else rng.randint(3, 12))
        lines += [f"{w} NNP I-NP {t}" for w, t in ws] + [""]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_conll_dir(d: Path, n_train: int = 256, n_dev: int = 64) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    write_conll(d / "train.txt", n_train, seed=0, long_every=16)
    write_conll(d / "valid.txt", n_dev, seed=1, long_every=8)
    write_conll(d / "test.txt", n_dev, seed=2, long_every=8)
    return d


COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white"]
QUESTIONS = ["which colour is mentioned ?", "what color appears in the text ?", "name the colour ."]


def squad_json(rng: random.Random, n: int, prefix: str, references: int = 1) -> dict:
    """Paragraphs of 10-70 filler words with one colour; the question asks for the colour (learnable by a tiny
    model; the longer paragraphs need two windows at --max-length 64)."""
    paragraphs = []
    for i in range(n):
        ws = [rng.choice(FILLER) for _ in range(rng.randint(10, 70))]
        at = rng.randrange(len(ws) + 1)
        colour = rng.choice(COLOURS)
        context = " ".join(ws[:at] + [colour.capitalize() if i % 3 == 0 else colour] + ws[at:])
        start = len(" ".join(ws[:at])) + (1 if at else 0)
        answers = [{"text": context[start:start + len(colour)], "answer_start": start}] * references
        paragraphs.append({"context": context, "qas": [{"id": f"{prefix}{i:04d}", "question": rng.choice(QUESTIONS),
                                                        "answers": answers}]})
    return {"version": "1.1", "data": [{"title": "Colours", "paragraphs": paragraphs}]}


def write_squad(directory: Path, n_train: int = 240, n_dev: int = 48, bad_train_ids=(), seed: int = 0) -> Path:
    import json

    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    train = squad_json(rng, n_train, "t")
    for p in train["data"][0]["paragraphs"]:
        if p["qas"][0]["id"] in bad_train_ids:
            p["qas"][0]["answers"][0]["answer_start"] += 1
    (directory / "train.json").write_text(json.dumps(train))
    (directory / "validation.json").write_text(json.dumps(squad_json(rng, n_dev, "v", references=2)))
    return directory


def squad_v2_json(rng: random.Random, n: int, prefix: str) -> dict:
    """Paragraphs of 10-70 filler words; every other one has a colour (the answer), the rest none (unanswerable,
    with a `plausible_answers` span as in the official files)."""
    paragraphs = []
    for i in range(n):
        ws = [rng.choice(FILLER) for _ in range(rng.randint(10, 70))]
        qa = {"id": f"{prefix}{i:04d}", "question": rng.choice(QUESTIONS)}
        if i % 2:
            context = " ".join(ws)
            qa.update(answers=[], is_impossible=True, plausible_answers=[{"text": ws[0], "answer_start": 0}])
        else:
            at, colour = rng.randrange(len(ws) + 1), rng.choice(COLOURS)
            context = " ".join(ws[:at] + [colour] + ws[at:])
            start = len(" ".join(ws[:at])) + (1 if at else 0)
            qa.update(answers=[{"text": colour, "answer_start": start}], is_impossible=False)
        paragraphs.append({"context": context, "qas": [qa]})
    return {"version": "v2.0", "data": [{"title": "Colours", "paragraphs": paragraphs}]}


def write_squad_v2(directory: Path, n_train: int = 240, n_dev: int = 48, seed: int = 0) -> Path:
    import json

    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for name, n, prefix in (("train.json", n_train, "t"), ("validation.json", n_dev, "v")):
        (directory / name).write_text(json.dumps(squad_v2_json(rng, n, prefix), indent=1))  # one field a line
    return directory


def write_recipe_data(recipe: str, directory: Path) -> Path:
    """Small learnable files in the format recipe `recipe` reads, in `directory` (its --data-dir)."""
    if recipe == "sst2":
        return write_sst2(directory, n_train=128, n_dev=48)
    if recipe == "stsb":
        return write_sts(directory, n_train=128, n_dev=48)
    if recipe == "rte":
        return write_rte(directory, n_train=128, n_dev=48)
    if recipe == "conll2003":
        return write_conll_dir(directory, n_train=96, n_dev=32)
    if recipe == "squad":
        return write_squad(directory, n_train=96, n_dev=32)
    if recipe == "squad_v2":
        return write_squad_v2(directory, n_train=96, n_dev=32)
    if recipe == "swag":
        return write_swag(directory, n_train=96, n_dev=32)
    return write_glue_pairs(recipe, directory)


def make_fixed_tiny_bert(directory: Path) -> Path:
    """A 2-layer, 32-wide BertModel whose weights come from numpy's seeded generator, not from transformers'
    initialisation code, so it is the same model under every transformers version (recipe parity test)."""
    import numpy as np
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    model = BertModel(config)
    rng = np.random.default_rng(1234)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "LayerNorm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.from_numpy(rng.normal(0.0, 0.02, tuple(p.shape)).astype(np.float32)))
    model.save_pretrained(directory)
    BertTokenizerFast(vocab=str(vocab_path()), do_lower_case=True).save_pretrained(directory)
    return directory


# The recipes the parity test runs, and the flags each needs beyond the shared ones (all generic or the task's own)
PARITY_RECIPES = {"sst2": [], "cola": [], "stsb": [], "mrpc": [], "rte": [], "wnli": [],
                  "qnli": ["--carve-eval", "20"], "mnli": [], "qqp": [], "conll2003": [],
                  "squad": ["--max-question-length", "16", "--window-overlap", "16"],
                  "squad_v2": ["--max-question-length", "16", "--window-overlap", "16"]}


def parity_key() -> str:
    """This machine's record in tests/data/recipe_metrics.json, compared bit for bit: the torch and transformers
    versions, the CPU's model name and cores, and the vector instructions torch's kernels use (an AMD EPYC with
    AVX-512 and one with AVX2 only share a model name, not the last bits of their sums)."""
    import torch
    import transformers

    from bertkit.utils import hardware

    return (f"torch {torch.__version__}, transformers {transformers.__version__}, {hardware()}, "
            f"{torch.backends.cpu.get_cpu_capability()}")


def recipe_fingerprint(recipe: str, model: Path, root: Path) -> dict:
    """Train `recipe` for 12 steps of the fixed tiny model on its synthetic files (fp32, seed 42) through the CLI;
    return every numeric metric of metrics.json (per split) and the last logged training loss."""
    import json

    from bertkit.cli import main

    data, out = write_recipe_data(recipe, root / "data" / recipe), root / "runs" / recipe
    code = main(["finetune", recipe, "--model", str(model), "--data-dir", str(data), "--precision", "fp32", "--lr",
                 "1e-2", "--batch-size", "16", "--max-steps", "12", "--max-length", "64", "--seed", "42",
                 "--output-dir", str(out), *PARITY_RECIPES[recipe]])
    assert code == 0, recipe
    metrics = json.loads((out / "metrics.json").read_text())
    from bertkit.report import eval_splits

    splits = {s: {k: v for k, v in metrics[s].items() if isinstance(v, (int, float))} for s in eval_splits(metrics)}
    loss = [json.loads(line)["loss"] for line in (out / "train_log.jsonl").read_text().splitlines()][-1]
    return {"metrics": splits, "last_loss": loss, "steps": metrics["train"]["steps"]}


SWAG_HEADER = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source", "ending0", "ending1",
               "ending2", "ending3", "label"]


def swag_rows(rng: random.Random, n: int, labelled: bool = True) -> list[list[str]]:
    """SWAG rows whose right ending is the one with a positive word (the others have negative ones): learnable by
    the tiny model. Texts with commas and quotes, as SWAG's CSV has them."""
    rows = []
    for i in range(n):
        right = rng.randrange(4)
        sent1 = " ".join(rng.choice(FILLER) for _ in range(rng.randint(4, 9))) + ', "so" it goes'
        sent2 = rng.choice(["someone", "the man", "she"])
        endings = [" ".join([rng.choice(FILLER), rng.choice(POSITIVE if k == right else NEGATIVE), "."])
                   for k in range(4)]
        rows.append([f"anetv_{i:05d}", str(i), f"{sent1} {sent2}", sent1, sent2, "gold", *endings,
                     str(right) if labelled else ""])
    return rows


def write_swag(directory: Path, n_train: int = 160, n_dev: int = 40, seed: int = 0) -> Path:
    """train.csv, val.csv and an unlabelled test.csv in SWAG's own CSV format (a header, quoted fields)."""
    import csv

    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for name, n, labelled in (("train.csv", n_train, True), ("val.csv", n_dev, True), ("test.csv", 12, False)):
        with open(directory / name, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(SWAG_HEADER)
            writer.writerows(swag_rows(rng, n, labelled))
    return directory


@pytest.fixture(autouse=True)
def feature_cache_on(monkeypatch):
    """`bertkit serve` turns the feature cache off for the rest of its process; a test that runs serve in-process
    must not turn it off for the tests after it."""
    from bertkit import feature_cache

    monkeypatch.setattr(feature_cache, "_OFF", [False])


@pytest.fixture(autouse=True)
def one_precision_per_test():
    """accelerate keeps one mixed precision per process (bertkit says so and stops, as a notebook must restart to
    change it); tests train in several precisions in one process, so each test starts with accelerate's state
    forgotten (its test utilities do the same)."""
    yield
    import sys

    if "accelerate" in sys.modules:
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=False)


# A subprocess that must run on the CPU on any machine: training (accelerate) and inference (`default_device`)
CPU_ENV = {"ACCELERATE_USE_CPU": "1", "CUDA_VISIBLE_DEVICES": ""}


@contextlib.contextmanager
def on_the_cpu(monkeypatch: pytest.MonkeyPatch | None = None):
    """Training and inference on the CPU on any machine, as a GPU-less one runs them. Training: accelerate's device
    comes from its process-wide PartialState, made once per process (by `launch.start`, reading ACCELERATE_USE_CPU),
    so it is forgotten on entry, to be made again on the CPU, and on exit, so that what follows gets the machine's own
    device again. Inference and anything else asking torch: no GPU is available. Nothing changes on a machine
    without a GPU. `monkeypatch`: a test's own, undone with its other patches (by default, undone on exit)."""
    import torch
    from accelerate.state import AcceleratorState

    with contextlib.ExitStack() as stack:
        patch = monkeypatch or stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("ACCELERATE_USE_CPU", "1")
        patch.setattr(torch.cuda, "is_available", lambda: False)
        AcceleratorState._reset_state(reset_partial_state=True)
        try:
            yield
        finally:
            AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture
def cpu_only(monkeypatch):
    """The test runs on the CPU on any machine (`on_the_cpu`): for tests of CPU-only features (the CPU speed-ups and
    kept heap, the CPU precision choice, the resident-memory budget, CPU defaults) and of numbers recorded on a CPU,
    or compared exactly with a CPU's."""
    with on_the_cpu(monkeypatch):
        yield


class ReplayCapture:
    """A CPU stand-in for `bertkit.graphs.GraphCapture` in inference: a "graph" that calls the captured forward again
    on its static inputs, as a replay does; counts its captures."""

    def __init__(self):
        self.captures = 0

    def __call__(self, fn, inputs):
        self.captures += 1
        return lambda: fn(inputs)


@contextlib.contextmanager
def gpu_inference_path(monkeypatch):
    """While the block runs, inference on a CPU takes its GPU path (`bertkit.graphs`: batches by a token budget over
    a few lengths, a graph per shape) with `ReplayCapture` for its captures."""
    from bertkit import graphs, inference
    from bertkit.extract import extractor

    with monkeypatch.context() as m:
        m.setattr(inference, "on_gpu", lambda device: True)
        m.setattr(extractor, "on_gpu", lambda device: True)
        m.setattr(graphs, "GraphCapture", ReplayCapture)
        yield


# --- deploy runs: tiny fine-tuned runs of every head, a real `bertkit serve` process, CLI references ---------------
# (shared by test_contract.py, test_serve.py, test_export.py and the tests of each task)
from contextlib import contextmanager, nullcontext  # noqa: E402

SENTENCES = ["the film was good and funny", "a dull , boring plot", "wonderful cast", "the story is quite weak",
             "Peter Blackburn visited Paris with the United Nations today .", "Jordan met Smith in London"]

# cloze, the task of examples/custom_task.py: its recipe and files
CLOZE_RECIPE = """# cloze: fill in the blank (the custom task of examples/custom_task.py)
task: cloze
train_file: train.jsonl
validation_files: [dev.jsonl]
max_length: 32
batch_size: 16
lr: 1.0e-2
warmup_ratio: 0.1
metrics: [accuracy]
task_options:
  top_k: 2
compute:
  precision: fp32
"""


def cloze_rows(n: int, seed: int) -> str:
    """JSONL '... so it was [MASK] .' with a sentiment word earlier in the text: the answer is good or bad."""
    import json

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        good = i % 2 == 0
        ws = [rng.choice(FILLER) for _ in range(4)] + [rng.choice(POSITIVE if good else NEGATIVE)]
        rows.append({"text": " ".join(ws) + " , so it was [MASK] .", "answer": "good" if good else "bad"})
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_cloze(directory: Path, n_train: int = 96, n_dev: int = 24) -> Path:
    """train.jsonl, dev.jsonl and the recipe cloze.yaml in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train.jsonl").write_text(cloze_rows(n_train, seed=0))
    (directory / "dev.jsonl").write_text(cloze_rows(n_dev, seed=1))
    (directory / "cloze.yaml").write_text(CLOZE_RECIPE)
    return directory


class Cut(Exception):
    """A run ended by `cut_training` (as an interrupted one ends); args: the optimiser step it ended after."""


@contextmanager
def cut_training(when):
    """Every Trainer made in the block raises Cut(step) after the first optimiser step at which `when(state)` is true
    (its checkpoints so far kept, as a kill leaves them)."""
    from bertkit.training.loop import Trainer

    init = Trainer.__init__

    def stop(trainer, state):
        if when(state):
            raise Cut(state["global_step"])

    def with_cut(self, *args, **kw):
        init(self, *args, **kw)
        self.callbacks.append(stop)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "__init__", with_cut)
        yield


@contextmanager
def cloze_registered():
    """The cloze task of examples/custom_task.py registered in this process while the block runs, as a plugin's
    entry point would register it; afterwards the registry holds the built-in tasks only again (tests of
    `task_names()` see no plugin)."""
    import importlib.util
    import sys

    from bertkit.tasks import registry

    registry.task_names()  # the built-ins loaded first, as without the plugin
    before = registry._TASKS.get("cloze")
    try:
        module = sys.modules.get("custom_task")
        if module is None:
            spec = importlib.util.spec_from_file_location("custom_task", REPO / "examples" / "custom_task.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules["custom_task"] = module
            spec.loader.exec_module(module)  # registers Cloze
        registry._TASKS["cloze"] = module.Cloze
        yield module.Cloze
    finally:
        if before is None:
            registry._TASKS.pop("cloze", None)
        else:
            registry._TASKS["cloze"] = before


def write_ner(data: Path) -> Path:
    """CoNLL-2003 train/valid/test files (one long sentence in 16: several windows at --max-length 24)."""
    data.mkdir(parents=True, exist_ok=True)
    for split, n, seed in (("train", 256, 0), ("valid", 32, 1), ("test", 32, 2)):
        write_conll(data / f"{split}.txt", n, seed, long_every=16)
    return data


QA_WINDOWS = ["--max-length", "64", "--max-question-length", "16", "--window-overlap", "16"]  # several per context
# The session's tiny runs: name → (recipe, its files' writer, flags beyond TINY). Each trains through a checkpoint
# before its end (an evaluation or --save-every), so that a run cut after it can resume (tests/test_contract.py).
TINY_RUNS = {
    "sst2": ("sst2", write_sst2, ["--epochs", "2"]),  # single texts
    "rte": ("rte", write_rte, ["--epochs", "2"]),  # pairs
    "ner": ("conll2003", write_ner, ["--epochs", "2", "--max-length", "24", "--casing"]),  # windows, casing
    "qa": ("squad", lambda d: write_squad(d, bad_train_ids=("t0007",)),  # several windows a context
           ["--epochs", "1", "--skip-bad-examples", "--save-every", "8", *QA_WINDOWS]),
    "qa_v2": ("squad_v2", write_squad_v2, ["--epochs", "2", *QA_WINDOWS]),  # unanswerable questions
    "swag": ("swag", write_swag, ["--epochs", "3", "--max-length", "32"]),  # multiple choice
    "cloze": ("cloze.yaml", write_cloze, ["--max-steps", "24", "--eval-every", "12"]),  # the plugin task
}


def tiny_run_data(tmp_path_factory, name: str) -> Path:
    """The data folder of the tiny run `name` (TINY_RUNS), its files written once per session."""
    data = tmp_path_factory.getbasetemp() / "deploy-runs" / f"data-{name}"
    if not data.is_dir():
        TINY_RUNS[name][1](data)
    return data


def tiny_run_args(tmp_path_factory, tiny_bert, name: str, out) -> list[str]:
    """`bertkit finetune` arguments of the tiny run `name` (TINY_RUNS) into `out`."""
    recipe, _, flags = TINY_RUNS[name]
    data = tiny_run_data(tmp_path_factory, name)
    if recipe.endswith(".yaml"):
        recipe = str(data / recipe)
    return tiny_args(tiny_bert, recipe, data, out, *flags)


@contextlib.contextmanager
def host_tensors_in_loss():
    """Yields a list that fills, while the block runs, with the tensors a task's `compute_loss` makes with a torch
    factory (`torch.arange(n)`, `torch.tensor(x)`, ...) and no device ("file:line torch.NAME"): on a CPU they land on
    the batch's device by chance, on a GPU they are host tensors, and copying one during a CUDA-graph capture fails
    (the graphed step then runs eagerly; tests/test_gpu.py saw it happen). A torch function mode, as
    `torch.device(...)` is one."""
    import torch
    from torch.overrides import TorchFunctionMode

    factories = {torch.arange, torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.full, torch.empty,
                 torch.eye, torch.linspace, torch.rand, torch.randn, torch.randint}
    seen: list[str] = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in factories and kwargs.get("device") is None:
                caller = sys._getframe(1)  # the factory's caller: the task's code, or a library's below it
                if "site-packages" not in caller.f_code.co_filename and any(
                        f.f_code.co_name == "compute_loss" for f, _ in islice(traceback.walk_stack(caller), 8)):
                    seen.append(f"{Path(caller.f_code.co_filename).name}:{caller.f_lineno} torch.{func.__name__}")
            return func(*args, **kwargs)

    with Watch():
        yield seen


def tiny_run(tmp_path_factory, tiny_bert, name: str) -> Path:
    """A fine-tuned tiny run (TINY_RUNS), made once per session and shared by the test modules, trained on the CPU on
    any machine (tests compare what it recorded with CPU arithmetic exactly; tests/test_gpu.py trains each on the GPU
    itself); its data folder is `data-NAME` beside it, what it wrote to standard error and the `bertkit` logger
    `NAME.log`."""
    import io
    import logging

    from bertkit.cli import main

    root = tmp_path_factory.getbasetemp() / "deploy-runs"
    out = root / name
    if (out / "config.json").is_file():
        return out
    args = tiny_run_args(tmp_path_factory, tiny_bert, name, out)
    err = io.StringIO()
    handler = logging.StreamHandler(err)
    logging.getLogger("bertkit").addHandler(handler)
    host: list[str] = []
    try:
        with contextlib.redirect_stderr(err), cloze_registered() if name == "cloze" else nullcontext(), on_the_cpu(), \
                host_tensors_in_loss() as host:
            code = main(args)
    finally:
        logging.getLogger("bertkit").removeHandler(handler)
        (root / f"{name}.log").write_text(err.getvalue())
        (root / f"{name}.host-tensors.json").write_text(json.dumps(sorted(set(host))))
    assert code == 0, err.getvalue()[-3000:]
    return out


def exported(tmp_path_factory, tiny_bert, name: str, *flags: str) -> tuple:
    """(run, export folder) of a tiny run, exported to ONNX once per session and set of `bertkit export` flags."""
    from bertkit.cli import main

    run = tiny_run(tmp_path_factory, tiny_bert, name)
    out = tmp_path_factory.getbasetemp() / "deploy-exports" / "-".join([name, *[f.strip("-") for f in flags]])
    if not (out / "export.json").is_file():
        with cloze_registered() if name == "cloze" else nullcontext():
            assert main(["export", "--model", str(run), "--format", "onnx", "--output", str(out), *flags]) == 0
    return run, out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_path(*first) -> str:
    """A child's PYTHONPATH: `first`, then this process's own (a machine may bring packages through it)."""
    return os.pathsep.join([*map(str, first), *filter(None, [os.environ.get("PYTHONPATH")])])


def bertkit_env() -> dict:
    return {**os.environ, "PYTHONPATH": python_path(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def hub_cache_with(run: Path, root: Path, repo: str, monkeypatch) -> Path:
    """A hub cache under `root`, made this process's, holding `run`'s files as the hub id `repo` (as a download
    leaves them; read offline: the tests run with HF_HUB_OFFLINE=1); its snapshot folder."""
    import shutil

    from huggingface_hub import constants

    snapshot = root / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
    shutil.copytree(run, snapshot, ignore=shutil.ignore_patterns("checkpoints", "*.png", "*.jsonl", "eval_*.json"))
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)  # offline, main is this snapshot
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))  # read at each call, by huggingface_hub and transformers
    return snapshot


def _log_tail(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()[-3000:]


@contextmanager
def server(model, *flags: str, startup_s: float = 120, cpu: bool = False):
    """A `bertkit serve` process on a free port (with `cpu`, on the CPU on any machine); yields (base url, process).
    Stopped with SIGTERM on exit (killed if it does not stop within 30 s)."""
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    import httpx

    port = free_port()
    log = tempfile.TemporaryFile("w+")  # the server's output; gone when closed
    proc = subprocess.Popen([sys.executable, "-m", "bertkit.cli", "serve", "--model", str(model), "--port", str(port),
                             "--precision", "fp32", "--log-level", "warning", *flags], stdout=log,
                            stderr=subprocess.STDOUT, env={**bertkit_env(), **(CPU_ENV if cpu else {})}, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            assert proc.poll() is None, f"server exited with {proc.returncode}: {_log_tail(log)}"
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"server not up after {startup_s} s: {_log_tail(log)}"
            time.sleep(0.25)
        proc.log = log
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()


def server_output(proc) -> str:
    return _log_tail(proc.log)


def cli_predict(model, rows: list, tmp_path: Path, *flags: str) -> list[dict]:
    """`bertkit predict` on `rows` (texts; or dicts for JSONL input: pairs, QA), as its JSONL rows."""
    import json
    import time

    from bertkit.cli import main

    path = tmp_path / f"in-{time.monotonic_ns()}.{'jsonl' if isinstance(rows[0], dict) else 'txt'}"
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in rows))
    out = tmp_path / f"out-{time.monotonic_ns()}.jsonl"
    assert main(["predict", "--model", str(model), "--input", str(path), "--output", str(out), "--precision", "fp32",
                 *flags]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def cli_extract(model, sentences: list[str], tmp_path: Path, *flags: str):
    """`bertkit extract` of raw-text lines, float32, as (words, array) per sentence."""
    import time

    from bertkit.cli import main
    from bertkit.extract import FeatureReader

    path = tmp_path / f"sentences-{time.monotonic_ns()}.txt"
    path.write_text("\n".join(sentences) + "\n")
    out = tmp_path / f"features-{time.monotonic_ns()}"
    assert main(["extract", "--model", str(model), "--input", str(path), "--output", str(out), "--dtype", "float32",
                 "--precision", "fp32", *flags]) == 0
    return list(FeatureReader(out))


# --- a fake hub copy of SQuAD (shared by the v1.1 and v2.0 hub tests) ---------------------------------------------
def use_fake_hub_squad(monkeypatch, tmp_path: Path, data: Path, repo: str) -> None:
    """`datasets.load_dataset` answers `repo` (the hub's rajpurkar/squad layout) from `data`/train.json, offline."""
    import json

    import datasets

    def fake_load_dataset(name, config, split, revision=None):
        assert (name, config) == (repo, None)
        rows = json.loads((data / "train.json").read_text())["data"][0]["paragraphs"]
        return datasets.Dataset.from_list([{"id": f"{split}-{p['qas'][0]['id']}", "title": "Colours",
                                            "context": p["context"], "question": p["qas"][0]["question"],
                                            "answers": {"text": [a["text"] for a in p["qas"][0]["answers"]],
                                                        "answer_start": [a["answer_start"] for a in
                                                                         p["qas"][0]["answers"]]}} for p in rows])

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("BERTKIT_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)


# --- a quick SST-2 run through the Python API: run_config → task → Trainer (trainer tests share these) -------------
def small_config(sst2_dir: Path, out: Path, **kw):
    """A quick, deterministic fp32 run config of the tiny SST-2 files; `kw`: flat keys, as `run_config` takes."""
    from bertkit.config import run_config

    base = dict(name="sst2", data_dir=str(sst2_dir), output_dir=str(out), precision="fp32", lr=1e-2, batch_size=16,
                epochs=2, label_names=["negative", "positive"], metrics=["accuracy", "f1"], eval_every="8")
    return run_config(**{**base, **kw})


def fit(tiny_bert: Path, cfg, callbacks=(), resume: bool = False):
    """Train the tiny BERT with `cfg` (a SequenceClassification task); (task, the fit's result)."""
    import torch

    from bertkit import SequenceClassification, Trainer

    torch.manual_seed(cfg.seed)
    train, evals, names = SequenceClassification.load_data(cfg)
    task = SequenceClassification.from_pretrained(str(tiny_bert), label_names=names)
    return task, Trainer(task, cfg, callbacks=callbacks, resume=resume).fit(train, evals)


# --- multi-label files (test_heads.py, test_families.py) ------------------------------------------------------------
def multi_label_row(rng: random.Random, i: int, none: bool = False) -> tuple[str, list[str]]:
    """SST-2-like sentences labelled by their sentiment words: 'pos', 'neg', both (every 4th row: two sentences),
    or with `none` every 8th row no label (only filler words)."""
    if none and i % 8 == 5:
        return " ".join(rng.choice(FILLER) for _ in range(6)), []
    label = i % 2
    text, labels = sentence(rng, label), ["pos"] if label else ["neg"]
    if i % 4 == 3:
        text, labels = f"{text} {sentence(rng, 0)}", ["neg", "pos"]
    return text, labels


def write_multi_label(directory: Path, n_train: int = 256, n_dev: int = 64, seed: int = 0) -> Path:
    """Training labels as JSON lists (JSONL); evaluation labels joined by '|' in a TSV, some rows without any."""
    import json

    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    rows = [multi_label_row(rng, i) for i in range(n_train)]
    (directory / "train.jsonl").write_text("".join(json.dumps({"text": t, "topics": ls}) + "\n" for t, ls in rows))
    rows = [multi_label_row(rng, i, none=True) for i in range(n_dev)]
    (directory / "dev.tsv").write_text("text\ttopics\n" + "".join(f"{t}\t{'|'.join(ls)}\n" for t, ls in rows))
    return directory


# `bertkit finetune sst2` flags that make it a multi-label run on write_multi_label's files
MULTI = ["--problem-type", "multi_label_classification", "--train-file", "train.jsonl", "--validation-files",
         "dev.tsv", "--text-column", "text", "--label-column", "topics", "--label-names", "", "--label-delimiter", "|",
         "--metrics", "micro_f1,macro_f1,subset_accuracy", "--main-metric", "micro_f1"]

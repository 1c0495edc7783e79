"""The GPU benchmark of issue 40: one command, one table (markdown, and JSON), within 5 minutes on one H100/H200.

    source .gpu/setup.sh && python3 benchmarks/gpu.py     # GPU machine: $BB, BERTKIT_DATA_DIR and $OUT from setup.sh
    python benchmarks/gpu.py --quick                      # CPU rehearsal: a tiny random BERT, 200 sentences, 5 steps

SST-2 train, max length 128; an epoch is ceil(examples / batch) steps (2,105 at batch 32). MFU = useful FLOP of the
epoch (per example 6·P·s + 12·L·s²·h over its real token count s, P = L·(4h² + 2h·ff)) / epoch seconds / the bf16
matmul rate measured in this run. Rows (`--only` takes names or numbers):
  1 matmul   bf16 matmul rate, 8192³ (the line above the table)
  2 bare     a bare transformers step, random bert-base, 32 × 32 positions, bf16 autocast, fused AdamW, clipping:
             eager, and torch.compile'd (its warm-up in the notes); epoch = ms/step × steps per epoch
  3 trainer  transformers' Trainer, random bert-base, batch 32, bf16, length-grouped: the last 90 % of
             --trainer-steps timed (its set-up and first steps are not) → an epoch
  4 eager    bertkit --train-step eager, random bert-base, batch 32: --trainer-steps steps → an epoch
  5 graphed  bertkit --train-step graphed, random bert-base, batch 32, one full epoch (target ≤ 10 s, ≥ 5× Trainer);
             `--graphed-args` adds flags to it (e.g. '--precision tf32', '--compile')
  6 minilm   packaged MiniLM (the recipe's settings), one epoch eager and one graphed, seed 42 (target: graphed
             ≤ 4 s, dev ≥ 89.0 % and within the seed spread of eager)
  7 infer    extract (MiniLM, last4 concat mean) and predict (the graphed MiniLM run) of the first 20,000 training
             sentences, in process: sentences/s of the call, for extract also of the model forward (≥ 20,000)
  8 graphed64  row 5 at batch 64 (1,053 steps): not the recipe's batch (the BERT paper fine-tunes at 16 or 32),
             measured for the issue's author, who decides whether bert-base's 10 s may be reached this way
Each row runs in processes of its own with a timeout, all within --budget seconds; a failed row says why and the
others go on. Logs (*.log) and the table (gpu.md, gpu.json) go to --out (default $OUT/gpu-bench).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import inspect
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
    os.environ.setdefault(_k, "false" if _k.startswith("TOK") else "1")
os.environ.setdefault("BERTKIT_DATA_DIR", str(ROOT.parent / "shared" / "data"))  # setup.sh sets it on the GPU

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from bertkit.commands.common import load_for_inference  # noqa: E402
from bertkit.commands.extract import CHUNK  # noqa: E402
from bertkit.extract import FeatureExtractor  # noqa: E402
from bertkit.extract.inputs import split_text  # noqa: E402
from bertkit.models import resolve_model  # noqa: E402

ROWS = ["matmul", "bare", "trainer", "eager", "graphed", "minilm", "infer", "graphed64"]
RUN_ORDER = ["matmul", "graphed", "trainer", "eager", "minilm", "infer", "graphed64", "bare"]  # the compile last
CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sst2(n: int | None) -> list[dict]:
    with open(Path(os.environ["BERTKIT_DATA_DIR"]) / "sst2" / "train.tsv", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:n]


# ---- workers: each runs in a process of its own (`--worker NAME`), writing OUT/NAME.json as results come


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def peak_gib(reset: bool = False) -> float:
    """Peak CUDA memory allocated since the last reset; on a CPU the process's peak resident set."""
    if not CUDA:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB
    if reset:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return torch.cuda.max_memory_allocated() / 2**30


def w_matmul(a, put) -> None:
    n, reps = (1024, 3) if a.quick else (8192, 10)
    x, y = (torch.randn(n, n, device=DEV, dtype=torch.bfloat16) for _ in range(2))
    for i in range(3 + reps):
        if i == 3:
            sync()
            t = time.perf_counter()
        x @ y
    sync()
    put(n=n, tflops=reps * 2 * n**3 / (time.perf_counter() - t) / 1e12)


def w_bare(a, put) -> None:  # the eager result stays if the compiled one runs out of time
    def step(fwd, model, opt, batch):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = fwd(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    warm, n = (2, 5) if a.quick else (10, 100)
    for name in ("eager",) if a.quick else ("eager", "compiled"):
        peak_gib(reset=True)
        torch.manual_seed(0)
        cfg = transformers.AutoConfig.from_pretrained(a.bert_base)
        model = transformers.BertForSequenceClassification(cfg).to(DEV).train()
        opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)
        fwd = torch.compile(model) if name == "compiled" else model
        ids = torch.randint(1000, cfg.vocab_size, (32, 32), device=DEV)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[:, 0] % 2}
        t = time.perf_counter()
        for i in range(warm + n):
            if i == warm:
                sync()
                t, warm_s = time.perf_counter(), time.perf_counter() - t
            step(fwd, model, opt, batch)
        sync()
        put(**{name: {"ms": (time.perf_counter() - t) / n * 1e3, "warm_s": warm_s, "mem": peak_gib()}})
        del model, opt, fwd  # before the next one's peak is measured


def w_trainer(a, put) -> None:  # ../shared/gpu/hf_trainer.py --grouped --max-steps N
    from datasets import Dataset

    rows, tok = sst2(a.samples), transformers.AutoTokenizer.from_pretrained(a.bert_base)
    train = Dataset.from_dict({"text": [r["sentence"] for r in rows], "labels": [int(r["label"]) for r in rows]})
    train = train.map(lambda b: tok(b["text"], truncation=True, max_length=128), batched=True, remove_columns=["text"])
    torch.manual_seed(42)
    params = inspect.signature(transformers.TrainingArguments).parameters
    kw = dict(output_dir=str(Path(a.tmp) / "trainer"), per_device_train_batch_size=32, learning_rate=2e-5,
              weight_decay=0.01, max_steps=a.trainer_steps, bf16=CUDA, save_strategy="no", eval_strategy="no",
              report_to="none", logging_steps=10_000, seed=42, disable_tqdm=True)
    kw["warmup_ratio" if "warmup_ratio" in params else "warmup_steps"] = 0.1
    if "train_sampling_strategy" in params:
        kw["train_sampling_strategy"] = "group_by_length"
    else:
        kw["group_by_length"] = True
    settled = max(1, a.trainer_steps // 10)  # steps before the clock starts: the Trainer's set-up and first steps
    clock: dict = {}

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step in (settled, a.trainer_steps):
                sync()
                clock[state.global_step] = time.perf_counter()

    model = transformers.AutoModelForSequenceClassification.from_pretrained(a.bert_base, num_labels=2)
    res = transformers.Trainer(model=model, args=transformers.TrainingArguments(**kw), train_dataset=train,
                               data_collator=transformers.DataCollatorWithPadding(tok), callbacks=[Clock()]).train()
    steps = a.trainer_steps - settled
    put(seconds=clock[a.trainer_steps] - clock[settled], steps=steps, ex_s=32 * steps / (clock[a.trainer_steps] -
        clock[settled]), runtime=res.metrics["train_runtime"], all_steps=res.global_step, mem=peak_gib())


def w_infer(a, put) -> None:
    if a.cudnn_attention:  # the A/B's other side: short forwards' attention as PyTorch chooses (cuDNN's on an H100)
        from bertkit import graphs

        graphs.attention_for = lambda batch: contextlib.nullcontext()
    texts = [r["sentence"] for r in sst2(a.sentences)]
    fx = FeatureExtractor("minilm-l6", layers="last4", combine="concat", pool="mean")  # else the CLI's defaults
    words = [split_text(t, fx.tokenizer) for t in texts]  # as `bertkit extract` reads a text line
    fx(words[:64])  # warm-up
    model_s, forward = [0.0], fx.hidden_states

    def timed(batch):  # the model forward alone, synchronised on both sides
        sync()
        t = time.perf_counter()
        out = forward(batch)
        sync()
        model_s[0] += time.perf_counter() - t
        return out

    fx.hidden_states = timed
    peak_gib(reset=True)
    t = time.perf_counter()
    for i in range(0, len(words), CHUNK):  # chunks as the CLI: sorted by length within each
        fx(words[i:i + CHUNK], dtype=np.float16)
    put(extract={"n": len(words), "seconds": time.perf_counter() - t, "model_s": model_s[0], "mem": peak_gib()})
    del fx
    run = Path(a.tmp) / "minilm-graphed"
    if not (run / "model.safetensors").is_file():
        return put(predict={"error": "SKIPPED: needs the minilm row's graphed run"})
    task, precision = load_for_inference(argparse.Namespace(model=str(run), precision="auto", backend="torch",
                                                            allow_pickle=False))
    rows = [{"text": t} for t in texts]
    task.predict_rows(rows[:64], 128, precision)  # warm-up; 128: the CLI's batch
    peak_gib(reset=True)
    t = time.perf_counter()
    task.predict_rows(rows, 128, precision)
    put(predict={"n": len(rows), "seconds": time.perf_counter() - t, "mem": peak_gib()})


# ---- the driver: a function per row, each returning its table rows


def run(a, name: str, cmd: list[str], timeout: float) -> str | None:
    """Run `cmd`, its output into OUT/name.log; None when it succeeded, else why not (the row's note)."""
    asked, timeout = timeout, min(timeout, a.deadline - time.monotonic())
    if timeout < 15:
        log(f"{name}: skipped, the --budget is spent")
        return "SKIPPED: the --budget is spent"
    log(f"{name}: start (timeout {timeout:.0f} s)")
    t, path = time.monotonic(), a.out / f"{name}.log"
    with open(path, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            rc = f"timed out after {timeout:.0f} s"
            if timeout < asked:  # the budget's end, not the row's own limit: its log's last line says nothing of it
                log(f"{name}: cut at the --budget's end, {timeout:.0f} s")
                return f"CUT after {timeout:.0f} s: the --budget is spent"
    log(f"{name}: {'done' if rc == 0 else 'FAILED'} in {time.monotonic() - t:.0f} s")
    last = ([x for x in path.read_text(errors="replace").splitlines() if x.strip()] or [""])[-1][:160]
    return None if rc == 0 else f"FAILED ({rc if isinstance(rc, str) else f'rc {rc}'}): {last}"


def worker(a, name: str, timeout: float) -> tuple[dict, str | None]:
    path = a.out / f"{name}.json"
    path.unlink(missing_ok=True)
    why = run(a, name, [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--bert-base", a.bert_base,
                        "--out", str(a.out), "--tmp", a.tmp, "--trainer-steps", str(a.trainer_steps),
                        *["--quick"] * a.quick, *["--cudnn-attention"] * a.cudnn_attention], timeout)
    return (json.loads(path.read_text()) if path.is_file() else {}), why


def row(label, seconds=None, steps=None, epoch_steps=None, ex_s=None, flop=None, a=None, mem=None, acc=None,
        note="") -> dict:
    """A table row; `seconds` over `steps` is extrapolated to `epoch_steps` (the same when a full epoch ran)."""
    ms = seconds / steps * 1e3 if seconds and steps else None
    epoch = ms * epoch_steps / 1e3 if ms and epoch_steps else None
    mfu = 100 * flop / epoch / (a.rate * 1e12) if epoch and flop and a and a.rate else None
    return {"row": label, "epoch_s": epoch, "ms_step": ms, "examples_s": ex_s, "mfu_pct": mfu, "peak_gib": mem,
            "dev_acc_pct": None if acc is None else 100 * acc, "note": note}


def finetune(a, label: str, name: str, model: str, step: str, extra: list[str], target: str) -> dict:
    """A `bertkit finetune sst2` run's row, from its metrics.json; a full epoch unless --max-steps is in `extra`."""
    out, mini = Path(a.tmp) / name, model == "minilm-l6"
    small = ["--max-train-samples", "200", "--max-eval-samples", "100"] if a.quick else ["--precision", "bf16"]
    more = shlex.split(a.graphed_args) if name == "graphed" else []  # after bf16: a --precision here wins
    why = run(a, name, [sys.executable, "-m", "bertkit.cli", "finetune", "sst2", "--model", model, "--train-step",
                        step, "--seed", "42", "--output-dir", str(out), *extra, *small, *more], 150)
    if why:
        return row(label, note=why)
    m = json.loads((out / "metrics.json").read_text())
    t, s, phase = m["train"], m["train"]["step"], m["memory"]["phases"].get("training", {})
    note = f"{t['precision']}, {t['steps']} steps{', extrapolated' if '--max-steps' in extra else ''}; "
    note += f"step {s['kind']} ({s['reason']})" + "".join(f"; {k} {v}" for k, v in s.items()
                                                          if k not in ("kind", "reason") and v not in (None, []))
    note += f"; model changes {', '.join(t.get('model_changes', [])) or 'none'}"
    return row(label, t["train_seconds"], t["steps"], a.spe if "--max-steps" in extra else t["steps"],
               t["examples_per_s"], a.flop_mini if mini else a.flop, a,
               phase.get("cuda_allocated_gib", phase.get("peak_rss_gib")), m["dev"]["accuracy"], note + target)


def row_matmul(a) -> list[dict]:
    r, why = worker(a, "matmul", 60)
    a.rate, a.matmul = r.get("tflops"), f"bf16 matmul {r['n']}³: {r['tflops']:.3g} TFLOP/s" if r else why
    return []


def row_bare(a) -> list[dict]:
    r, why, out = *worker(a, "bare", 240), []
    for kind in ("eager", "compiled"):
        b, label = r.get(kind), f"bare step 32×32, {kind}"
        if b is None:
            out.append(row(label, note="SKIPPED (--quick)" if a.quick and kind == "compiled" else why or "FAILED"))
            continue
        warm = f"; compile warm-up (first 10 steps) {b['warm_s']:.1f} s" if kind == "compiled" else ""
        out.append(row(label, b["ms"] * a.spe / 1e3, a.spe, a.spe, 32e3 / b["ms"], a.flop, a, b["mem"],
                       note=f"bf16 autocast, fused AdamW, clipping; epoch = ms × {a.spe}{warm}"))
    return out


def row_trainer(a) -> list[dict]:
    r, why = worker(a, "trainer", 120)
    note = why or (f"{'bf16' if CUDA else 'fp32'}, length-grouped; steps {a.trainer_steps // 10 or 1}-"
                   f"{a.trainer_steps} timed (its train_runtime of all {r.get('all_steps')}, set-up included: "
                   f"{r.get('runtime', 0):.1f} s), extrapolated")
    return [row(f"Trainer ({r.get('steps', a.trainer_steps)} steps → epoch)", r.get("seconds"), r.get("steps"),
                a.spe, r.get("ex_s"), a.flop, a, r.get("mem"), note=note)]


def row_bertkit(a, name: str) -> list[dict]:
    """Rows 4-6: `bertkit finetune sst2` runs (label, run name, model, step, flags, its targets)."""
    bb, b32 = a.bert_base, ["--batch-size", "32"]
    runs = {"eager": [(f"bertkit eager ({a.trainer_steps} steps → epoch)", "eager", bb, "eager",
                       ["--max-steps", str(a.trainer_steps), *b32], "")],
            "graphed": [("bertkit graphed (1 epoch)", "graphed", bb, "graphed", ["--epochs", "1", *b32],
                         "; target ≤ 10 s, ≥ 5× Trainer's examples/s")],
            "graphed64": [("bertkit graphed at batch 64 (1 epoch)", "graphed64", bb, "graphed",
                           ["--epochs", "1", "--batch-size", "64"], "; not the recipe's batch: for the author")],
            "minilm": [(f"MiniLM {k} (1 epoch)", f"minilm-{k}", "minilm-l6", k, ["--epochs", "1"], target)
                       for k, target in (("eager", ""), ("graphed", "; target ≤ 4 s, dev ≥ 89.0 %"))]}
    return [finetune(a, *spec) for spec in runs[name]]


def row_infer(a) -> list[dict]:
    r, why, out = *worker(a, "infer", 120), []
    for name in ("extract", "predict"):
        b = r.get(name) or {"error": why or "FAILED"}
        if "error" in b:
            out.append(row(f"{name} MiniLM", note=b["error"]))
            continue
        model = f"; model forward {b['n'] / b['model_s']:,.0f}/s (target ≥ 20,000)" if "model_s" in b else ""
        out.append(row(f"{name} MiniLM ({b['n']} sentences)", ex_s=b["n"] / b["seconds"], mem=b["mem"],
                       note=f"examples/s = sentences/s of the call ({b['seconds']:.2f} s){model}"))
    return out


def prepare(a) -> None:
    """The bert-base folder (--quick: a tiny random BERT), the epoch's steps and its useful FLOP per model."""
    from transformers import AutoConfig, AutoTokenizer, BertConfig, BertModel

    minilm = resolve_model("minilm-l6")[0]
    if a.quick and not a.bert_base:
        a.bert_base = str(Path(a.tmp) / "tiny-bert")
        torch.manual_seed(0)
        BertModel(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)) \
            .save_pretrained(a.bert_base)
        AutoTokenizer.from_pretrained(minilm).save_pretrained(a.bert_base)
    texts = [r["sentence"] for r in sst2(a.samples)]
    lengths = [len(x) for x in AutoTokenizer.from_pretrained(a.bert_base)(texts, truncation=True,
                                                                          max_length=128)["input_ids"]]
    for attr, model in (("flop", a.bert_base), ("flop_mini", minilm)):
        cfg = AutoConfig.from_pretrained(model)
        h, L, P = cfg.hidden_size, cfg.num_hidden_layers, cfg.num_hidden_layers * (
            4 * cfg.hidden_size**2 + 2 * cfg.hidden_size * cfg.intermediate_size)
        setattr(a, attr, float(sum(6 * P * s + 12 * L * s * s * h for s in lengths)))
    a.examples, a.spe = len(texts), math.ceil(len(texts) / 32)
    log(f"SST-2 train: {len(texts)} examples, {sum(lengths)} tokens, {a.spe} steps/epoch at batch 32; useful "
        f"FLOP/epoch {a.flop:.3g} (bert-base), {a.flop_mini:.3g} (MiniLM)")


def table(rows: list[dict]) -> str:
    def f(v, d):
        return "-" if v is None else f"{v:,.{d}f}"

    out = ["| row | epoch s | ms/step | examples/s | MFU % | peak GiB | dev acc % | notes |", "|" + "---|" * 8]
    out += [f"| {r['row']} | {f(r['epoch_s'], 1)} | {f(r['ms_step'], 2)} | {f(r['examples_s'], 0)} | "
            f"{f(r['mfu_pct'], 2)} | {f(r['peak_gib'], 2)} | {f(r['dev_acc_pct'], 2)} | {r['note']} |" for r in rows]
    return "\n".join(out)


def main(a) -> int:
    if not CUDA and not a.quick:
        print("benchmarks/gpu.py needs a CUDA GPU (or --quick for a CPU rehearsal on this machine)")
        return 2
    if not (a.quick and not a.bert_base or a.bert_base and Path(a.bert_base, "config.json").is_file()):
        print(f"no bert-base folder at {a.bert_base}: source .gpu/setup.sh (it sets $BB) or pass --bert-base")
        return 2
    t0, on = time.monotonic(), {ROWS[int(x) - 1] if x.isdigit() else x for x in a.only.split(",")}
    a.deadline, a.out, a.tmp, a.rate = t0 + a.budget, Path(a.out), tempfile.mkdtemp("-gpu-bench"), None
    a.matmul = "bf16 matmul: not measured (--only)"
    a.out.mkdir(parents=True, exist_ok=True)
    git = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "bertkit": git.stdout.strip() or "(no git)",
                "gpu": torch.cuda.get_device_name() if CUDA else "none (CPU rehearsal)"}
    top = " ".join(f"{k} {v};" for k, v in versions.items())
    print(top, flush=True)
    try:
        prepare(a)
        done = {n: row_bertkit(a, n) if n in ("eager", "graphed", "minilm", "graphed64") else globals()[f"row_{n}"](a)
                for n in RUN_ORDER if n in on}
    finally:
        shutil.rmtree(a.tmp, ignore_errors=True)
    rows = [r for name in ROWS for r in done.get(name, [])]
    by = {r["row"].split(" (")[0]: r for r in rows}  # the targets that compare two rows
    for key, base, col, say in (("bertkit graphed", "Trainer", "examples_s", "; here {:.1f}×"),
                                ("MiniLM graphed", "MiniLM eager", "dev_acc_pct", "; dev {:+.2f} pt vs eager")):
        x, y = (by.get(k, {}).get(col) for k in (key, base))
        if x is not None and y:
            by[key]["note"] += say.format(x / y if col == "examples_s" else x - y)
    head = f"{a.matmul}; peak GiB = CUDA allocated (CPU: resident set); wall {time.monotonic() - t0:.0f} s"
    text = f"{top}\n\n{head}\n\n{table(rows)}\n"
    print("\n" + text, flush=True)
    (a.out / "gpu.md").write_text(text)
    (a.out / "gpu.json").write_text(json.dumps({"versions": versions, "matmul_tflops": a.rate, "epoch_flop": a.flop,
                                                "epoch_flop_minilm": a.flop_mini, "examples": a.examples,
                                                "steps_per_epoch": a.spe, "rows": rows}, indent=1))
    log(f"wrote {a.out}/gpu.md and gpu.json; logs {a.out}/*.log")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CPU rehearsal: tiny settings")
    p.add_argument("--only", default=",".join(ROWS), help=f"rows, by name or number ({','.join(ROWS)})")
    p.add_argument("--out", default=str(Path(os.environ.get("OUT", "/tmp/gpu-out")) / "gpu-bench"))
    p.add_argument("--bert-base", default=os.environ.get("BB"), help="random bert-base folder (default $BB)")
    p.add_argument("--trainer-steps", type=int, default=200, help="steps of rows 3 and 4 (default 200)")
    p.add_argument("--budget", type=float, default=280, help="seconds for all rows together (default 280)")
    p.add_argument("--cudnn-attention", action="store_true", help="an A/B's side: graphed inference's attention "
                   "as PyTorch chooses at every length (cuDNN's on an H100), not PyTorch's own up to 128 positions")
    p.add_argument("--graphed-args", default="", help="more `bertkit finetune` flags for row 5 (bert-base's graphed "
                   "epoch), e.g. '--precision tf32' or '--compile'; every row is bf16 otherwise")
    p.add_argument("--worker", choices=["matmul", "bare", "trainer", "infer"], help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    a = p.parse_args()
    a.samples, a.sentences = (200, 200) if a.quick else (None, 20_000)
    a.trainer_steps = min(a.trainer_steps, 5) if a.quick else a.trainer_steps
    if a.worker:
        results: dict = {}

        def put(**kw):
            results.update(kw)
            (Path(a.out) / f"{a.worker}.json").write_text(json.dumps(results))

        sys.exit(globals()[f"w_{a.worker}"](a, put))
    sys.exit(main(a))

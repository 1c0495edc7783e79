"""The training loop: a plain accelerate loop you can read top to bottom.

    for each epoch: batches in a (seed, epoch)-determined, length-grouped order
        forward → loss / accumulation → backward → (every `grad_accum`) clip, AdamW, linear schedule
        every `eval_every`: evaluate all validation files, log, keep the best, save a resumable checkpoint

Resume replays the same batch order and skips the steps already done, so an interrupted run ends with the same
metrics and weights as an uninterrupted one. Only the main process writes files.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import datasets
import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from . import checkpoints
from .batching import train_batches
from .config import FinetuneConfig, to_yaml
from .errors import BertkitError
from .inference import forward_all
from .metrics import resolve_metrics
from .models import resolve_precision
from .utils import append_jsonl, atomic_path, package_versions, set_seed, write_json

LOG_EVERY = 50  # steps between loss read-outs (each one synchronises host and device)


def _as_dataset(data, label_names) -> datasets.Dataset:
    """Accept a Dataset or a dict of lists; label names are mapped to ids."""
    ds = data if isinstance(data, datasets.Dataset) else datasets.Dataset.from_dict(dict(data))
    if "label" in ds.column_names and len(ds) and isinstance(ds[0]["label"], str):
        ds = ds.map(lambda ex: {"label": label_names.index(ex["label"])})
    return ds


def _optimizer(model, cfg: FinetuneConfig):
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
    params = list(model.named_parameters())
    groups = [{"params": [p for n, p in params if not n.endswith(no_decay)], "weight_decay": cfg.weight_decay},
              {"params": [p for n, p in params if n.endswith(no_decay)], "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=cfg.lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=cfg.lr)


class Trainer:
    """Fine-tune a task adapter.

    Example:
    ```python
    >>> clf = SequenceClassification.from_pretrained("minilm-l6", label_names=["negative", "positive"])
    >>> trainer = Trainer(clf, FinetuneConfig(epochs=1, output_dir="runs/demo"))
    >>> metrics = trainer.fit({"text": texts, "label": labels}, {"dev": {"text": dev_texts, "label": dev_labels}})
    ```
    """

    def __init__(self, adapter, config: FinetuneConfig, metric_hooks=None, accelerator: Accelerator | None = None,
                 callbacks=()):
        self.adapter, self.cfg, self.callbacks = adapter, config, list(callbacks)  # callback(trainer, state)
        self.output_dir = Path(config.output_dir or "runs/bertkit-run")
        self.metric_hooks = metric_hooks if metric_hooks is not None else resolve_metrics(
            config.metrics, builtins=adapter.metric_builtins, num_labels=len(adapter.label_names))
        probe = accelerator.device if accelerator else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.precision = resolve_precision(config.precision, probe)
        self.accelerator = accelerator or Accelerator(
            mixed_precision={"fp32": "no"}.get(self.precision, self.precision))

    def log(self, msg: str) -> None:
        if self.accelerator.is_main_process:
            tqdm.write(msg)

    # --- evaluation ---------------------------------------------------------------------------------
    def evaluate(self, evals: dict) -> tuple[dict, dict]:
        """Metrics and predictions for each evaluation set: {name: (examples, features)}."""
        metrics, predictions = {}, {}
        for name, (examples, features) in evals.items():
            outputs = forward_all(self.adapter, features, self.cfg.eval_batch_size, self.precision, self.accelerator,
                                  model=self.model)
            metrics[name], predictions[name] = self.adapter.score(outputs, examples, features, self.metric_hooks)
        return metrics, predictions

    # --- training -----------------------------------------------------------------------------------
    def fit(self, train, evals: dict, test=None) -> dict:
        cfg, acc, out = self.cfg, self.accelerator, self.output_dir
        labels = self.adapter.label_names
        train = _as_dataset(train, labels)
        evals = {k: _as_dataset(v, labels) for k, v in evals.items()}
        if not evals:
            raise BertkitError("at least one evaluation set is needed (validation_files)")
        features = self.adapter.encode(train)
        eval_sets = {k: (v, self.adapter.encode(v)) for k, v in evals.items()}
        main_split = next(iter(eval_sets))

        rank, world = acc.process_index, acc.num_processes
        batches_per_epoch = math.ceil(len(features) / cfg.batch_size) // world  # per process
        if batches_per_epoch == 0:
            raise BertkitError(f"{len(features)} training examples is fewer than one batch per process")
        steps_per_epoch = math.ceil(batches_per_epoch / cfg.grad_accum)
        total_steps = cfg.max_steps or math.ceil(cfg.epochs * steps_per_epoch)
        eval_every = steps_per_epoch if cfg.eval_every == "epoch" else int(cfg.eval_every)

        set_seed(cfg.seed)
        optimizer = _optimizer(self.adapter.model, cfg)
        scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(cfg.warmup_ratio * total_steps), total_steps)
        self.model, optimizer, scheduler = acc.prepare(self.adapter.model, optimizer, scheduler)

        state = {"global_step": 0, "epoch": 0, "step_in_epoch": 0, "best_metric": None, "best_step": None,
                 "bad_evals": 0, "train_seconds": 0.0, "examples_seen": 0, "seed": cfg.seed}
        ckpt_dir = out / "checkpoints"
        resume_from = checkpoints.find_resumable(ckpt_dir, self.log) if cfg.resume else None
        if cfg.resume and resume_from is None:
            self.log(f"--resume: no checkpoint in {ckpt_dir}; starting from scratch")
        if resume_from is not None:
            acc.load_state(str(resume_from))
            state = checkpoints.load_state(resume_from)
            self.log(f"resumed from {resume_from} (step {state['global_step']})")
        if acc.is_main_process:
            out.mkdir(parents=True, exist_ok=True)
            for name in ("eval_metrics.jsonl", "train_log.jsonl"):  # drop lines written after the checkpoint
                _truncate_log(out / name, state["global_step"])
            with atomic_path(out / "config.yaml") as p:
                p.write_text(to_yaml(cfg))
            write_json(out / "versions.json", {**package_versions(), "precision": self.precision,
                                                 "processes": world, "device": str(acc.device)})
        self.log(f"training: {len(features)} examples, {total_steps} steps ({steps_per_epoch}/epoch), "
                 f"batch {cfg.batch_size}×{cfg.grad_accum}×{world}, precision {self.precision}")

        def run_eval():
            metrics, _ = self.evaluate(eval_sets)
            value = metrics[main_split][cfg.main_metric]
            improved = state["best_metric"] is None or value > state["best_metric"]
            if improved:
                state.update(best_metric=value, best_step=state["global_step"], bad_evals=0)
                if acc.is_main_process:
                    self.adapter.model = acc.unwrap_model(self.model)
                    self.adapter.save(ckpt_dir / "best")
            else:
                state["bad_evals"] += 1
            if acc.is_main_process:
                append_jsonl(out / "eval_metrics.jsonl", {"step": state["global_step"], "epoch": round(
                    state["global_step"] / steps_per_epoch, 3), **{f"{k}/{m}": v for k, d in metrics.items()
                                                                    for m, v in d.items()}})
            flat = ", ".join(f"{k} {m} {v:.4f}" for k, d in metrics.items() for m, v in d.items())
            self.log(f"step {state['global_step']}: {flat}" + (" (best)" if improved else ""))
            self.model.train()

        bar = tqdm(total=total_steps, initial=state["global_step"], desc="train", unit="step",
                   disable=not acc.is_main_process or None)
        self.model.train()
        running, running_n, t_log, done = torch.zeros((), device=acc.device), 0, time.perf_counter(), False
        lengths = features["length"]
        while not done:
            order = train_batches(lengths, cfg.batch_size, cfg.seed, state["epoch"], cfg.group_by_length)
            mine = order[: batches_per_epoch * world][rank::world]
            micro = mine[state["step_in_epoch"] * cfg.grad_accum:]
            t0 = time.perf_counter()
            for i, idx in enumerate(micro):
                is_step = (i + 1) % cfg.grad_accum == 0 or i == len(micro) - 1
                batch = {k: v.to(acc.device) for k, v in self.adapter.collate([features[j] for j in idx]).items()}
                with acc.no_sync(self.model) if not is_step else _null():
                    loss = self.model(**batch).loss
                    acc.backward(loss / cfg.grad_accum)
                running += loss.detach()
                running_n += 1
                state["examples_seen"] += len(idx) * world
                if not is_step:
                    continue
                acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                state["global_step"] += 1
                state["step_in_epoch"] += 1
                bar.update(1)
                step = state["global_step"]
                for callback in self.callbacks:
                    callback(self, state)
                if step % LOG_EVERY == 0 or step == total_steps:
                    mean_loss = (running / running_n).item()  # the only host sync in the loop
                    if not math.isfinite(mean_loss):
                        raise BertkitError(f"loss is {mean_loss} at step {step}; stopping. The last good checkpoint "
                                           f"is kept in {ckpt_dir}. Try a lower --lr or --precision fp32.")
                    now = time.perf_counter()
                    rate = running_n * cfg.batch_size * world / (now - t_log)
                    bar.set_postfix(loss=f"{mean_loss:.4f}", ex_s=f"{rate:.0f}")
                    if acc.is_main_process:
                        append_jsonl(out / "train_log.jsonl", {"step": step, "loss": mean_loss, "examples_per_s": rate,
                                                               "lr": scheduler.get_last_lr()[0]})
                    running.zero_()
                    running_n, t_log = 0, now
                end_of_epoch = i == len(micro) - 1
                done = step >= total_steps
                if step % eval_every == 0 or done or (cfg.eval_every == "epoch" and end_of_epoch):
                    state["train_seconds"] += time.perf_counter() - t0
                    run_eval()
                    t0 = time.perf_counter()
                    stop = cfg.early_stopping is not None and state["bad_evals"] >= cfg.early_stopping
                    done = done or stop
                    if stop:
                        self.log(f"early stopping: {state['bad_evals']} evaluations without improvement")
                    checkpoints.save(acc, ckpt_dir, step, state, cfg.keep_checkpoints)
                    t_log = time.perf_counter()
                elif cfg.save_every and step % cfg.save_every == 0:
                    state["train_seconds"] += time.perf_counter() - t0
                    checkpoints.save(acc, ckpt_dir, step, state, cfg.keep_checkpoints)
                    t0 = t_log = time.perf_counter()
                if done:
                    break
            else:
                state["train_seconds"] += time.perf_counter() - t0
                state.update(epoch=state["epoch"] + 1, step_in_epoch=0)
        bar.close()
        return self._finish(state, eval_sets, test)

    def _finish(self, state: dict, eval_sets: dict, test) -> dict:
        """Reload the best weights, score validation (and test), write predictions, model and metrics."""
        acc, out = self.accelerator, self.output_dir
        best = out / "checkpoints" / "best"
        model = acc.unwrap_model(self.model)
        if best.is_dir():
            from safetensors.torch import load_file

            model.load_state_dict(load_file(str(best / "model.safetensors")))
        self.adapter.model = model
        if test is not None:
            test = _as_dataset(test, self.adapter.label_names)
            eval_sets = {**eval_sets, "test": (test, self.adapter.encode(test))}
        metrics, predictions = self.evaluate(eval_sets)
        result = {"task": self.cfg.task, "main_metric": self.cfg.main_metric, "best_step": state["best_step"],
                  **{name: m for name, m in metrics.items()},
                  "train": {"steps": state["global_step"], "examples_seen": state["examples_seen"],
                            "train_seconds": round(state["train_seconds"], 1),
                            "examples_per_s": round(state["examples_seen"] / max(state["train_seconds"], 1e-9), 1),
                            "precision": self.precision, "processes": acc.num_processes, "seed": self.cfg.seed}}
        if acc.is_main_process:
            main_split = next(iter(eval_sets))
            for name, preds in predictions.items():
                self.adapter.write_predictions(out, name, preds, main=name == main_split)
            _save_into(self.adapter, out)
            write_json(out / "metrics.json", result)
        acc.wait_for_everyone()
        return result


def _save_into(adapter, out: Path) -> None:
    """Put the Hugging Face files in the run folder itself, each file replaced atomically."""
    tmp = adapter.save(out / ".model.tmp")
    for f in tmp.iterdir():
        f.replace(out / f.name)
    shutil.rmtree(tmp, ignore_errors=True)


def _truncate_log(path: Path, step: int) -> None:
    import json

    if not path.is_file():
        return
    keep = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
    with atomic_path(path) as p:
        p.write_text("".join(line + "\n" for line in keep))


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

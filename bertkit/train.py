"""The training loop: a plain accelerate loop you can read top to bottom.

    for each epoch: batches in a (seed, epoch)-determined, length-grouped order, sharded across processes
        forward → loss / accumulation → backward → (every `grad_accum`) clip, AdamW, linear schedule
        every `eval_every`: evaluate all validation files, log, keep the best, save a resumable checkpoint

Resume replays the same batch order and skips the steps already done, so an interrupted run ends with the same
metrics and weights as an uninterrupted one. Only the main process writes files.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import TorchDynamoPlugin
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from . import checkpoints
from .batching import shard, take_rows, train_batches
from .config import FinetuneConfig, to_yaml
from .distributed import check_launch
from .errors import BertkitError
from .fast_dropout import fast_dropout, reset_dropout, restore_dropout, set_dropout
from .fused_qkv import fuse_qkv, unfuse_qkv
from .heap import keep_heap, release_heap
from .inference import forward_all
from .metrics import resolve_metrics
from .models import resolve_precision
from .optim import build_optimizer, reinit_pooler
from .report import write_report
from .trackers import check_trackers
from .utils import append_jsonl, atomic_path, fault_point, package_versions, set_seed, truncate_jsonl, write_json

LOG_EVERY = 50  # steps between loss read-outs (each one synchronises host and device)


class Trainer:
    """Fine-tune a task adapter.

    Example:
    ```python
    >>> clf = SequenceClassification.from_pretrained("minilm-l6", label_names=["negative", "positive"])
    >>> trainer = Trainer(clf, FinetuneConfig(epochs=1, output_dir="runs/demo"))
    >>> metrics = trainer.fit({"text": texts, "label": labels}, {"dev": {"text": dev_texts, "label": dev_labels}})
    ```
    `callbacks` are called as `callback(trainer, state)` after every optimiser step.
    """

    def __init__(self, adapter, config: FinetuneConfig, metric_hooks=None, accelerator: Accelerator | None = None,
                 callbacks=()):
        self.adapter, self.cfg, self.callbacks = adapter, config, list(callbacks)
        self.output_dir = Path(config.output_dir or "runs/bertkit-run")
        self.metric_hooks = metric_hooks if metric_hooks is not None else resolve_metrics(
            config.metrics, builtins=adapter.metric_builtins, num_labels=len(adapter.label_names))
        probe = accelerator.device if accelerator else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.precision = resolve_precision(config.precision, probe)
        check_trackers(config.report_to)
        dynamo = TorchDynamoPlugin(backend="inductor", dynamic=True, use_regional_compilation=True) \
            if config.compile else None
        self.accelerator = accelerator or Accelerator(
            mixed_precision={"fp32": "no"}.get(self.precision, self.precision), dynamo_plugin=dynamo,
            log_with=config.report_to or None, project_dir=str(self.output_dir / "trackers"))
        check_launch(self.accelerator)

    def log(self, msg: str) -> None:
        if self.accelerator.is_main_process:
            tqdm.write(msg, file=sys.stderr)

    def evaluate(self, eval_sets: dict) -> tuple[dict, dict]:
        """Metrics and predictions for each evaluation set: {name: (examples, features)}."""
        metrics, predictions = {}, {}
        for name, (examples, features) in eval_sets.items():
            outputs = forward_all(self.adapter, features, self.cfg.eval_batch_size, self.precision, self.accelerator,
                                  model=self.model)
            metrics[name], predictions[name] = self.adapter.score(outputs, examples, features, self.metric_hooks)
        return metrics, predictions

    # --- set-up ---------------------------------------------------------------------------------------
    def _start(self, total_steps: int) -> dict:
        """Optimizer, schedule, accelerate wrapping; then resume state or a fresh one; then the run folder."""
        cfg, acc, out = self.cfg, self.accelerator, self.output_dir
        set_seed(cfg.seed)
        if cfg.reinit_pooler:  # on --resume the checkpoint's weights and RNG states replace these below
            reinit_pooler(self.adapter.model)
        if cfg.freeze_word_embeddings:
            self.adapter.model.get_input_embeddings().weight.requires_grad_(False)
        optimizer = build_optimizer(self.adapter.model, cfg)
        scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(cfg.warmup_ratio * total_steps), total_steps)
        self._dropout = set_dropout(self.adapter.model, cfg.dropout, cfg.attention_dropout)  # reset in _finish
        if cfg.fast_dropout and acc.device.type == "cpu":
            fast_dropout(self.adapter.model)  # undone in _finish; saved files are unaffected
        if cfg.fused_qkv:
            fuse_qkv(self.adapter.model)  # likewise
        self._heap_kept = cfg.keep_heap and acc.device.type == "cpu" and keep_heap()  # released in _finish
        # The schedule is not given to accelerate.prepare: it would step it once per process, but our step
        # count is already per process (each process takes its own shard of the batches).
        self.model, self.optimizer = acc.prepare(self.adapter.model, optimizer)
        self._trained = [p for p in self.model.parameters() if p.requires_grad]
        self.scheduler = scheduler  # its state goes into trainer_state.json (JSON, not a pickle)
        state = {"global_step": 0, "epoch": 0, "step_in_epoch": 0, "best_metric": None, "best_step": None,
                 "bad_evals": 0, "train_seconds": 0.0, "examples_seen": 0, "seed": cfg.seed}
        resume_from = checkpoints.find_resumable(self.ckpt_dir, self.log) if cfg.resume else None
        if cfg.resume and resume_from is None:
            self.log(f"--resume: no usable checkpoint in {self.ckpt_dir}; starting from scratch")
        if resume_from is not None:
            acc.load_state(str(resume_from))  # weights, optimizer, schedule and every RNG
            state = checkpoints.load_state(resume_from)
            self.scheduler.load_state_dict(state.pop("scheduler"))
            self.log(f"resumed from {resume_from} (step {state['global_step']})")
        if acc.is_main_process:
            out.mkdir(parents=True, exist_ok=True)
            for name in ("eval_metrics.jsonl", "train_log.jsonl"):  # drop lines written after the checkpoint
                truncate_jsonl(out / name, state["global_step"])
            with atomic_path(out / "config.yaml") as p:
                p.write_text(to_yaml(cfg))
            write_json(out / "versions.json", {**package_versions(), "precision": self.precision,
                                                 "processes": acc.num_processes, "device": str(acc.device)})
        return state

    # --- training -----------------------------------------------------------------------------------
    def fit(self, train, evals: dict, test=None) -> dict:
        cfg, acc = self.cfg, self.accelerator
        train = self.adapter.examples(train)
        if not evals:
            raise BertkitError("at least one evaluation set is needed (validation_files)")
        features, self._n_train = self.adapter.encode(train), len(train)
        eval_sets = {k: (v, self.adapter.encode(v)) for k, v in
                     ((k, self.adapter.examples(v)) for k, v in evals.items())}
        rank, world = acc.process_index, acc.num_processes
        batches_per_epoch = math.ceil(len(features) / cfg.batch_size) // world  # per process
        if batches_per_epoch == 0:
            raise BertkitError(f"{len(features)} training examples is fewer than one batch per process")
        steps_per_epoch = math.ceil(batches_per_epoch / cfg.grad_accum)
        total_steps = cfg.max_steps or math.ceil(cfg.epochs * steps_per_epoch)
        eval_every = steps_per_epoch if cfg.eval_every == "epoch" else int(cfg.eval_every)
        self.ckpt_dir, self._last_eval = self.output_dir / "checkpoints", None
        state = self._start(total_steps)
        if cfg.report_to:
            try:
                acc.init_trackers(self.output_dir.name, config={k: str(v) for k, v in cfg.to_dict().items()})
            except Exception as e:  # a tracker that is not installed or not configured
                raise BertkitError(f"--report-to {','.join(cfg.report_to)}: {e}") from None
        self.log(f"training: {len(features)} examples, {total_steps} steps ({steps_per_epoch}/epoch), "
                 f"batch {cfg.batch_size}×{cfg.grad_accum}×{world}, precision {self.precision}")

        bar = tqdm(total=total_steps, initial=state["global_step"], desc="train", unit="step",
                   disable=not acc.is_main_process or None)
        self.model.train()
        loss_sum = torch.zeros((), device=acc.device)  # summed on device: no per-step host synchronisation
        self._grad_stats = torch.zeros(3, device=acc.device)  # Σ gradient norm, steps clipped, steps
        lengths, done = features["length"], state["global_step"] >= total_steps
        self._since_log = (0, time.perf_counter())
        while not done:
            order = train_batches(lengths, cfg.batch_size, cfg.seed, state["epoch"], cfg.group_by_length)
            micro = shard(order, world, rank)[state["step_in_epoch"] * cfg.grad_accum:]
            t0 = time.perf_counter()
            for i, idx in enumerate(micro):
                is_step = (i + 1) % cfg.grad_accum == 0 or i == len(micro) - 1
                batch = {k: v.to(acc.device) for k, v in self.adapter.collate(take_rows(features, idx)).items()}
                with acc.no_sync(self.model) if not is_step else nullcontext():
                    loss = self.adapter.compute_loss(self.model, batch)
                    acc.backward(loss / cfg.grad_accum)
                loss_sum += loss.detach()
                self._since_log = (self._since_log[0] + 1, self._since_log[1])
                state["examples_seen"] += len(idx) * world
                if not is_step:
                    continue
                norm = acc.clip_grad_norm_(self._trained, cfg.max_grad_norm)  # the norm before clipping
                if norm is not None:  # None from some sharded set-ups
                    self._grad_stats += torch.stack([norm, norm > cfg.max_grad_norm, torch.ones_like(norm)]).float()
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                state["global_step"] += 1
                state["step_in_epoch"] += 1
                step = state["global_step"]
                bar.update(1)
                fault_point("step", step)
                for callback in self.callbacks:
                    callback(self, state)
                done = step >= total_steps
                evaluate = step % eval_every == 0 or done or (cfg.eval_every == "epoch" and i == len(micro) - 1)
                save = evaluate or (cfg.save_every and step % cfg.save_every == 0)
                if step % LOG_EVERY == 0 or save:
                    self._log_loss(state, loss_sum, bar)
                if save:
                    state["train_seconds"] += time.perf_counter() - t0
                    if evaluate:
                        done = self._evaluate(state, eval_sets, steps_per_epoch) or done
                    checkpoints.save(acc, self.ckpt_dir, step, {**state, "scheduler": self.scheduler.state_dict()},
                                     cfg.keep_checkpoints)
                    self.model.train()
                    t0 = time.perf_counter()
                    self._since_log = (0, t0)
                if done:
                    break
            else:
                state["train_seconds"] += time.perf_counter() - t0
                state.update(epoch=state["epoch"] + 1, step_in_epoch=0)
        bar.close()
        return self._finish(state, eval_sets, test)

    def _log_loss(self, state: dict, loss_sum: torch.Tensor, bar) -> None:
        """Read the summed loss and gradient norms (host reads once per log interval), stop on NaN/inf before any
        checkpoint can keep it, log: mean loss, learning rate, examples/s, mean gradient norm (before clipping)
        and how many steps were clipped."""
        n, since = self._since_log
        if n == 0:
            return
        mean_loss = (loss_sum / n).item()
        step = state["global_step"]
        if not math.isfinite(mean_loss):
            raise BertkitError(f"the training loss became {mean_loss} before step {step}; stopping. The last good "
                               f"checkpoint is kept in {self.ckpt_dir}. Try a lower --lr or --precision fp32.")
        now = time.perf_counter()
        lr = max(self.scheduler.get_last_lr())  # the head's rate when layer_lr_decay gives layers lower ones
        rate = n * self.cfg.batch_size * self.accelerator.num_processes / (now - since)
        norm_sum, clipped, steps = self._grad_stats.tolist()
        grads = {"grad_norm": norm_sum / steps, "clipped_steps": int(clipped)} if steps else {}
        bar.set_postfix(loss=f"{mean_loss:.4f}", ex_s=f"{rate:.0f}")
        if self.accelerator.is_main_process:
            append_jsonl(self.output_dir / "train_log.jsonl", {"step": step, "loss": mean_loss, "lr": lr,
                                                               "examples_per_s": rate, **grads})
        if self.cfg.report_to:
            self.accelerator.log({"train/loss": mean_loss, "train/lr": lr, "train/examples_per_s": rate,
                                  **{f"train/{k}": v for k, v in grads.items()}}, step=step)
        loss_sum.zero_()
        self._grad_stats.zero_()
        self._since_log = (0, now)

    def _evaluate(self, state: dict, eval_sets: dict, steps_per_epoch: int) -> bool:
        """Evaluate, log, keep the best model; return True when early stopping says stop."""
        acc, cfg = self.accelerator, self.cfg
        fault_point("eval", state["global_step"])
        metrics, predictions = self.evaluate(eval_sets)
        self._last_eval = (state["global_step"], metrics, predictions)  # reused by _finish if it stays the best
        value = metrics[next(iter(eval_sets))][cfg.main_metric]
        improved = state["best_metric"] is None or value > state["best_metric"]
        if improved:
            state.update(best_metric=value, best_step=state["global_step"], bad_evals=0)
            if acc.is_main_process:
                self.adapter.model = acc.unwrap_model(self.model)
                self.adapter.save(self.ckpt_dir / "best")
        else:
            state["bad_evals"] += 1
        flat = {f"{k}/{m}": v for k, d in metrics.items() for m, v in d.items() if isinstance(v, (int, float))}
        if acc.is_main_process:
            append_jsonl(self.output_dir / "eval_metrics.jsonl", {
                "step": state["global_step"], "epoch": round(state["global_step"] / steps_per_epoch, 3), **flat})
        if cfg.report_to:
            acc.log(flat, step=state["global_step"])
        self.log(f"step {state['global_step']}: " + ", ".join(f"{k} {v:.4f}" for k, v in flat.items())
                 + (" (best)" if improved else ""))
        stop = cfg.early_stopping is not None and state["bad_evals"] >= cfg.early_stopping
        if stop:
            self.log(f"early stopping: {state['bad_evals']} evaluations without improvement")
        return stop

    def _finish(self, state: dict, eval_sets: dict, test) -> dict:
        """Reload the best weights, score validation (and test), write predictions, model and metrics."""
        acc, out = self.accelerator, self.output_dir
        model = unfuse_qkv(restore_dropout(acc.unwrap_model(self.model)))
        reset_dropout(model, self._dropout)
        if self._heap_kept:
            release_heap()
        if self.cfg.freeze_word_embeddings:  # undo it, so the adapter trains normally later
            model.get_input_embeddings().weight.requires_grad_(True)
        last = self._last_eval
        if last is not None and last[0] == state["best_step"]:  # the weights in memory are the best: no re-scoring
            metrics, predictions = dict(last[1]), dict(last[2])
        else:
            from safetensors.torch import load_file

            model.load_state_dict(load_file(str(self.ckpt_dir / "best" / "model.safetensors")))
            metrics, predictions = self.evaluate(eval_sets)
        self.adapter.model = model
        if test is not None:
            test = self.adapter.examples(test)
            test_set = {"test": (test, self.adapter.encode(test))}
            test_metrics, test_predictions = self.evaluate(test_set)
            metrics.update(test_metrics)
            predictions.update(test_predictions)
            eval_sets = {**eval_sets, **test_set}
        seconds = state["train_seconds"]
        result = {"task": self.cfg.task, "main_metric": self.cfg.main_metric, "best_step": state["best_step"],
                  **metrics, "data": {"train": self._n_train, **{k: len(v[0]) for k, v in eval_sets.items()}},
                  "train": {"steps": state["global_step"], "examples_seen": state["examples_seen"],
                            "train_seconds": round(seconds, 1),
                            "examples_per_s": round(state["examples_seen"] / max(seconds, 1e-9), 1),
                            "precision": self.precision, "processes": acc.num_processes, "seed": self.cfg.seed}}
        if acc.is_main_process:
            main_split = next(iter(eval_sets))
            for name, preds in predictions.items():
                self.adapter.write_predictions(out, name, preds, main=name == main_split)
            _save_into(self.adapter, out)
            write_json(out / "metrics.json", result)
            write_report(out)
        if self.cfg.report_to:
            acc.end_training()
        acc.wait_for_everyone()
        return result


def _save_into(adapter, out: Path) -> None:
    """Put the Hugging Face files in the run folder itself, each file replaced atomically."""
    tmp = adapter.save(out / ".model.tmp")
    for f in tmp.iterdir():
        f.replace(out / f.name)
    shutil.rmtree(tmp, ignore_errors=True)

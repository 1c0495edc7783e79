"""What a run records, called by `Trainer` (loop.py): the run folder's first files (`open_run`), a line per loss
read-out (`record_loss`) and per evaluation (`record_eval`), and its end (`finish`): the best weights back in the
model, the validation (and test) sets scored with them, and the run folder written by the main process:
predictions, the best model as a plain Hugging Face folder, metrics.json (scores, what was trained and how, the peak
memory of every phase) and report.md.
"""

from __future__ import annotations

import math
import time

from ..config_files import to_yaml
from ..errors import BertkitError
from ..report import write_report
from ..tasks.contract import encoded
from ..utils import append_jsonl, atomic_path, package_versions, truncate_jsonl, write_json
from . import checkpoints


def open_run(trainer, step: int) -> None:
    """The run folder's first files (main process): the log lines written after `step` dropped (a resumed run's
    checkpoint), config.yaml (what is trained) and versions.json."""
    acc, out = trainer.accelerator, trainer.output_dir
    if not acc.is_main_process:
        return
    out.mkdir(parents=True, exist_ok=True)
    for name in ("eval_metrics.jsonl", "train_log.jsonl"):
        truncate_jsonl(out / name, step)
    changed = config_changes(out / "config.yaml", trainer.cfg) if step else []
    if changed:  # a resumed run given other settings (or data) than it started with: said, then as asked
        trainer.log(f"--resume: this run's config differs from the one it started with ({'; '.join(changed)}); it "
                    "goes on with this one, from its checkpoint")
    with atomic_path(out / "config.yaml") as p:
        p.write_text(to_yaml(trainer.cfg))
    write_json(out / "versions.json", {**package_versions(), "precision": trainer.precision,
                                         "precision_choice": trainer.precision_choice.to_dict(),
                                         "processes": acc.num_processes, "device": str(acc.device),
                                         "distributed_type": str(acc.distributed_type)})


def config_changes(recorded, cfg) -> list[str]:
    """'key old → new' for each setting of `cfg` that differs from the run's recorded config.yaml (the output folder
    aside: a run folder may be moved)."""
    from ..utils import load_yaml

    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    try:
        old = flat(load_yaml(recorded) or {}) if recorded.is_file() else {}
    except (BertkitError, AttributeError):  # a damaged one: written anew below
        return []
    new = flat(yaml_values(cfg))
    return [f"{k} {old.get(k)!r} → {new.get(k)!r}" for k in new | old
            if k != "output_dir" and old and old.get(k) != new.get(k)]


def yaml_values(cfg) -> dict:
    import yaml

    return yaml.safe_load(to_yaml(cfg))


def record_loss(trainer, state: dict, bar) -> None:
    """Read the summed loss and gradient norms (host reads once per log interval), averaged over processes; stop
    every process together on NaN/inf before any checkpoint can keep it; log: mean loss, learning rate, examples/s,
    mean finite gradient norm (before clipping), how many steps were clipped, how many had an inf or NaN gradient
    (fp16's overflows, skipped; none: the key is left out) and the peak memory since the last line."""
    n, since = trainer.since_log
    if n == 0:
        return
    acc, step, loss_sum = trainer.accelerator, state["global_step"], trainer.step.loss_sum
    mean_loss = (acc.reduce(loss_sum.clone(), reduction="mean") / n).item()  # the same on every process
    if not math.isfinite(mean_loss):
        kept = f"The last good checkpoint is kept in {trainer.ckpt_dir}" if (trainer.ckpt_dir / "latest").is_file() \
            else "No checkpoint was written yet"  # (a first evaluation's)
        raise BertkitError(f"the training loss became {mean_loss} before step {step}; stopping. {kept}. Try a lower "
                           f"--lr{'' if trainer.precision == 'fp32' else ' or --precision fp32'}.")
    now = time.perf_counter()
    lr = float(max(trainer.scheduler.get_last_lr()))  # the head's rate when layer_lr_decay gives layers lower ones
    rate = n * trainer.cfg.batch_size * acc.num_processes / (now - since)
    norm_sum, clipped, finite, nonfinite = trainer.step.grad_stats.tolist()
    grads = {"grad_norm": norm_sum / finite, "clipped_steps": int(clipped)} if finite else {}
    if nonfinite:  # fp16: steps whose scaled gradients overflowed, skipped (the loss scale then backs off)
        grads["nonfinite_grad_steps"] = int(nonfinite)
    peak = trainer.memory.record("training")  # this stretch's peak: memory that grows with the run shows here
    trainer.memory.reset_peak()
    bar.set_postfix(loss=f"{mean_loss:.4f}", ex_s=f"{rate:.0f}")
    if acc.is_main_process:
        append_jsonl(trainer.output_dir / "train_log.jsonl", {"step": step, "loss": mean_loss, "lr": lr,
                                                              "examples_per_s": rate, **grads, **peak})
    if trainer.cfg.report_to:
        acc.log({"train/loss": mean_loss, "train/lr": lr, "train/examples_per_s": rate,
                 **{f"train/{k}": v for k, v in grads.items()}}, step=step)
    loss_sum.zero_()
    trainer.step.grad_stats.zero_()
    trainer.since_log = [0, now]


def record_eval(trainer, state: dict, metrics: dict, improved: bool, steps_per_epoch: int) -> None:
    """An evaluation's line: eval_metrics.jsonl (main process), the trackers, and the log."""
    acc, step = trainer.accelerator, state["global_step"]
    flat = {f"{k}/{m}": v for k, d in metrics.items() for m, v in d.items() if isinstance(v, (int, float))}
    if acc.is_main_process:
        append_jsonl(trainer.output_dir / "eval_metrics.jsonl",
                     {"step": step, "epoch": round(step / steps_per_epoch, 3), **flat})
    if trainer.cfg.report_to:
        acc.log(flat, step=step)
    shown = (f"{k} {v:.0f}" if k.endswith("total") else f"{k} {v:.4f}" for k, v in flat.items())  # QA: counts
    trainer.log(f"step {step}: " + ", ".join(shown) + (" (best)" if improved else ""))


def finish(trainer, state: dict, eval_sets: dict, test) -> dict:
    """Score the best weights (reusing the last evaluation where it was the best), then `write_run`."""
    acc, task = trainer.accelerator, trainer.task
    last = trainer.last_eval
    if last is not None and last[0] == state["best_step"]:  # the weights in memory are the best: no re-scoring
        metrics, predictions = dict(last[1]), dict(last[2])
    else:
        checkpoints.load_weights(acc, trainer.model, trainer.ckpt_dir / "best")
        metrics, predictions = trainer.evaluate(eval_sets)
    if test is not None:
        test = task.examples(test)
        with acc.main_process_first():
            test_set = {"test": (test, encoded(task, test))}
        test_metrics, test_predictions = trainer.evaluate(test_set)
        metrics.update(test_metrics)
        predictions.update(test_predictions)
        eval_sets = {**eval_sets, **test_set}
    trainer.memory.reset_peak()
    return write_run(trainer, state, eval_sets, metrics, predictions)


def write_run(trainer, state: dict, eval_sets: dict, metrics: dict, predictions: dict) -> dict:
    """Predictions, the best model, metrics.json (with the peak memory of every phase) and the report; returns what
    metrics.json holds."""
    acc, cfg, out, task = trainer.accelerator, trainer.cfg, trainer.output_dir, trainer.task
    plan, seconds = trainer.step_plan, state["train_seconds"]
    result = {"name": cfg.name, "task": cfg.task, "main_metric": cfg.main_metric, "best_step": state["best_step"],
              **metrics, "data": {"train": trainer.n_train, **{k: len(v[0]) for k, v in eval_sets.items()}},
              "train": {"steps": state["global_step"], "examples_seen": state["examples_seen"],
                        "train_seconds": round(seconds, 1),
                        "examples_per_s": round(state["examples_seen"] / max(seconds, 1e-9), 1),
                        "precision": trainer.precision, "processes": acc.num_processes, "seed": cfg.seed,
                        "model_changes": list(trainer.applied),
                        "step": {"kind": plan.kind, "reason": plan.reason, "buckets": list(plan.buckets),
                                 **trainer.step.summary(), "device_data": trainer.resident.describe()}}}
    if acc.is_main_process:
        main_split = next(iter(eval_sets))
        for name, preds in predictions.items():
            task.write_predictions(out, name, preds, main=name == main_split)
        checkpoints.write_run_model(task, out, trainer.ckpt_dir / "best")  # after write_predictions: QA v2's threshold
    trainer.memory.record("save")
    result["memory"] = trainer.memory.summary_of_every_process(acc)
    if trainer.budget_plan is not None:
        result["memory"]["budget_plan"] = trainer.budget_plan
    if acc.is_main_process:
        write_json(out / "metrics.json", result)
        write_report(out)
    if cfg.report_to:
        acc.end_training()
    acc.wait_for_everyone()
    return result

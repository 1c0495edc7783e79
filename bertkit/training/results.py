"""A run's end (`finish`, called by `Trainer.fit`): the best weights back in the model, the validation (and test)
sets scored with them, and the run folder written by the main process: predictions, the best model as a plain
Hugging Face folder, metrics.json (scores, what was trained and how, the peak memory of every phase) and report.md.
"""

from __future__ import annotations

from ..report import write_report
from ..utils import write_json
from . import checkpoints


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
            test_set = {"test": (test, task.encode(test))}
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

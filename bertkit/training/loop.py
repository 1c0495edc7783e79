"""The training loop: a plain accelerate loop you can read top to bottom.

    fit: encode → (memory budget plan) → batches and the step's plan (step.py) → model changes → _train →
        finish (results.py: the best weights scored, the run folder written)
    _train_epoch: a prepared DataLoader of (seed, epoch)-ordered, length-grouped batches, sharded by accelerate;
        per batch, with accelerator.accumulate: step.backward (forward, loss, backward), and on the accumulation
        boundary step.update (clip, AdamW, zero gradients) and the schedule
        every LOG_EVERY steps: record_loss (results.py);  every `eval_every`: _evaluate_and_save (evaluate with
        gather_for_metrics, keep the best, record_eval, save a resumable checkpoint)

The step is eager (accelerate's pieces), static, or replayed from CUDA graphs (`step.py`, `graphed.py`): the loop
does not know which.

Resume replays the same batch order and skips the steps already done (`skip_first_batches`), so an interrupted
run ends with the same metrics and weights as an uninterrupted one; SIGTERM stops a run after its step with a
checkpoint to resume from (`launch.StopSignal`, `Stopped`). Every process takes part in evaluation and
saving; only the main process writes files other than its own random state. Precision is decided once, for the
device that runs, before the Accelerator exists (`bertkit.device`). Every change training makes to the model
(dropout rates, pooler re-initialisation, freezing, CPU speed-ups) goes through one context manager and is undone
however training ends (`changes.py`). The task is spoken to only through its contract (`bertkit.tasks.base`).
"""

from __future__ import annotations

import math
import shutil
import signal
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from ..batching import train_batches
from ..config import RunConfig
from ..device import matmul_precision
from ..errors import BertkitError, Stopped
from ..memory import MemoryLog
from ..metrics import resolve_metrics
from ..tasks.contract import encoded, scored
from ..tasks.inputs import named_sets
from ..trackers import check_trackers
from ..utils import set_seed
from . import checkpoints, launch
from .changes import heap_released, model_changes, restore_forward
from .data import train_loader
from .evaluation import predict_features
from .prepare import default_pad_multiple, make_accelerator, make_step, prepare, trained_config
from .results import finish, open_run, record_eval, record_loss
from .step import plan_step

LOG_EVERY = 50  # steps between loss read-outs (each one synchronises host and device, and the processes)


class Trainer:
    """Fine-tune a task adapter.

    Example:
    ```python
    clf = SequenceClassification.from_pretrained("minilm-l6", label_names=["negative", "positive"])
    trainer = Trainer(clf, run_config(epochs=1, output_dir="runs/demo"))
    metrics = trainer.fit({"text": texts, "label": labels}, {"dev": {"text": dev_texts, "label": dev_labels}})
    ```
    `callbacks` are called as `callback(trainer, state)` after every optimiser step, `eval_callbacks` as
    `callback(trainer, state, value)` after every evaluation (the main metric's value). `resume`: continue from the
    newest complete checkpoint in the output folder. The run folder's config.yaml records the task as it is (its
    name, model, max length and options, labels included), whatever `config` says of them (`trained_config`).
    """

    def __init__(self, task, config: RunConfig, metric_hooks=None, accelerator=None, callbacks=(),
                 resume: bool = False, memory: MemoryLog | None = None, eval_callbacks=()):
        self.task, self.callbacks, self.resume = task, list(callbacks), resume
        self.eval_callbacks = list(eval_callbacks)
        self.cfg = trained_config(config, task)  # what is actually trained (fit adds what the task takes from train)
        self.output_dir = Path(config.output_dir or "runs/bertkit-run")
        self.metric_hooks = metric_hooks if metric_hooks is not None else resolve_metrics(
            self.cfg.metrics, builtins=task.metric_builtins, num_labels=len(task.label_names))
        check_trackers(config.report_to)
        accelerator, choice = make_accelerator(self.cfg, self.output_dir, accelerator, task.model)
        self.accelerator, self.precision_choice, self.precision = accelerator, choice, choice.precision
        self.memory = memory or MemoryLog(accelerator.device)  # peak memory per phase, into metrics.json

    @property
    def adapter(self):  # the 0.2 name
        return self.task

    def log(self, msg: str) -> None:
        if self.accelerator.is_main_process:
            tqdm.write(msg, file=sys.stderr)

    def evaluate(self, eval_sets: dict) -> tuple[dict, dict]:
        """Metrics and predictions for each evaluation set {name: (examples, features)}; every process calls it. It
        computes in the run's precision (bf16's or fp16's autocast, tf32's switches) whether called by `fit` or after
        it (when accelerate's autocasting forward is gone)."""
        metrics, predictions = {}, {}
        for name, (examples, features) in eval_sets.items():
            with self.memory.phase("evaluation"), matmul_precision(self.precision):
                outputs = self._outputs(features)
            with self.memory.phase("post-processing"):
                metrics[name], predictions[name] = scored(self.task, outputs, examples, features, self.metric_hooks)
        return metrics, predictions

    def _outputs(self, features) -> list[dict]:
        """The model's outputs for every feature, through accelerate: every process its share."""
        plan = getattr(self, "step_plan", None)
        buckets = plan.buckets if plan and self.cfg.compute.compile else ()  # the compiled shapes only
        with self.accelerator.autocast():  # accelerate's own (after `fit` its autocasting forward is gone)
            return predict_features(self.accelerator, self.model, self.task, features, self.cfg.eval_batch_size,
                                    buckets)

    # --- set-up ---------------------------------------------------------------------------------------
    def _start(self, total_steps: int, loader) -> dict:
        """Optimizer, schedule and accelerate wrapping; then resume state or a fresh one; then the run folder (main
        process). The model changes are in place already (`fit`); on resume the checkpoint's weights and random
        states replace what they drew."""
        cfg, acc, model = self.cfg, self.accelerator, self.task.model
        before = vars(model).get("forward")  # None: the class's; `prepare` may set one (mixed precision)
        self._restore_forward = lambda: restore_forward(model, before)
        self.model, self.optimizer, self.train_loader, self.scheduler = prepare(acc, model, loader, cfg, total_steps)
        state = {"global_step": 0, "epoch": 0, "step_in_epoch": 0, "best_metric": None, "best_step": None,
                 "bad_evals": 0, "train_seconds": 0.0, "examples_seen": 0, "seed": cfg.seed}
        if not self.resume and acc.is_main_process and self.ckpt_dir.is_dir():  # a notebook's second fit into
            # one folder (the CLI refuses it): the earlier run's later steps were resumed from, or pruned this run's
            self.log(f"{self.output_dir} held a run: its checkpoints give way to this one's (resume=True "
                     "continues it)")
            shutil.rmtree(self.ckpt_dir)
        found = checkpoints.find_resumable(self.ckpt_dir, self.log) if self.resume and acc.is_main_process else None
        resume_from = launch.main_value(acc.state, found)  # one decision, read by every process
        if self.resume and resume_from is None:
            self.log(f"--resume: no usable checkpoint in {self.ckpt_dir}; starting from scratch")
        if resume_from is not None:
            acc.load_state(str(resume_from))  # weights, optimizer and every process's RNG states
            state = checkpoints.load_state(resume_from)
            self.scheduler.load_state_dict(state.pop("scheduler"))
            self.log(f"resumed from {resume_from} (step {state['global_step']})")
        # after a resume's load: what a captured step holds is the loaded optimizer state
        self.step = make_step(self.step_plan, acc, self.model, self.optimizer, self.task, cfg, self.log)
        open_run(self, state["global_step"])
        return state

    # --- training -----------------------------------------------------------------------------------
    def fit(self, train, evals: dict, test=None) -> dict:
        cfg, acc = self.cfg, self.accelerator
        if evals is None or (isinstance(evals, dict) and not evals):
            raise BertkitError("at least one evaluation set is needed (validation_files)")
        train = _examples(self.task, train, "train")
        self.task.fit_to(train, self.log)  # a notebook task's class weights 'balanced': the numbers config.yaml keeps
        self.cfg = cfg = trained_config(cfg, self.task)
        evals = {k: _examples(self.task, v, f"evals[{k!r}]") for k, v in named_sets(evals).items()}
        with acc.main_process_first(), self.memory.phase("encode"):  # the main process fills the feature cache
            features = encoded(self.task, train)
            eval_sets = {k: (v, encoded(self.task, v)) for k, v in evals.items()}
        multiple = cfg.compute.pad_to_multiple or default_pad_multiple(acc.device.type, cfg.max_length)
        if multiple:
            self.task.pad_to_multiple_of(multiple)
        unsharded = acc.distributed_type.name not in ("FSDP", "DEEPSPEED")
        cpu, gpu = unsharded and acc.device.type == "cpu", unsharded and acc.device.type == "cuda"
        self.budget_plan = None
        if cfg.compute.memory_budget:  # micro-batch, accumulation, checkpointing: the resolved config records them
            from .budget import agreed_plan, kept_plan

            kept = self.resume and launch.main_value(acc.state, kept_plan(self.output_dir / "config.yaml", cfg,
                                                                          self.log))  # all take the main's, or probe
            self.cfg, self.budget_plan = kept or agreed_plan(acc.state, self.task, cfg, features, self.precision,
                                                             acc.device, cpu, self.log)
            cfg = self.cfg
            if not unsharded:
                self.log(f"memory budget under {acc.distributed_type.name}: the probe trained the whole model, where "
                         "each process holds a share of it: the plan leaves room to spare")
        acc.gradient_accumulation_steps = cfg.grad_accum  # the plan's, not the recipe's the Accelerator was made with
        self.n_train = len(train)
        lengths = features["length"][:]  # a list: a datasets column reads one row at a time
        first = train_batches(lengths, cfg.batch_size, cfg.seed, 0, cfg.compute.group_by_length)
        self.step_plan = plan_step(cfg, acc, self.precision, lengths, first, multiple)
        loader, self._order, self.resident = train_loader(
            features, self.task, cfg.batch_size, cfg.seed, cfg.compute.group_by_length, acc.device,
            self.step_plan.buckets, lengths, multiple, cfg.compute.device_data, acc.num_processes)
        batches_per_epoch = len(self._order) // acc.num_processes  # per process
        if batches_per_epoch == 0:
            raise BertkitError(f"{len(features)} training examples is fewer than one batch per process")
        steps_per_epoch = math.ceil(batches_per_epoch / cfg.grad_accum)
        total_steps = cfg.max_steps or math.ceil(cfg.epochs * steps_per_epoch)
        self.ckpt_dir, self.last_eval = self.output_dir / "checkpoints", None
        set_seed(cfg.seed)  # before the changes that draw random numbers (a re-initialised pooler)
        self._restore_forward = None
        try:
            with matmul_precision(self.precision), \
                    model_changes(self.task, cfg, cpu, self.precision, self.log, gpu) as applied:
                self.applied = applied
                state = self._start(total_steps, loader)
                inputs = "" if len(features) == len(train) else f" in {len(features)} windows"
                self.log(f"training: {len(train)} examples{inputs}, {total_steps} steps ({steps_per_epoch}/epoch), "
                         f"batch {cfg.batch_size}×{cfg.grad_accum}×{acc.num_processes}, precision {self.precision} "
                         f"({self.precision_choice.reason}); {self.step_plan.describe()}; {self.resident.describe()}"
                         + (f"; model changes: {', '.join(applied)}" if applied else ""))
                self._train(state, eval_sets, total_steps, steps_per_epoch)
                with heap_released(self.applied):
                    return finish(self, state, eval_sets, test)
        finally:  # the prepared model's own forward again, however training ended
            if self._restore_forward:
                self._restore_forward()

    def _train(self, state: dict, eval_sets: dict, total_steps: int, steps_per_epoch: int) -> None:
        cfg, acc = self.cfg, self.accelerator
        if cfg.report_to:
            try:
                acc.init_trackers(self.output_dir.name, config={k: str(v) for k, v in cfg.to_dict().items()})
            except Exception as e:  # a tracker that is not installed or not configured
                raise BertkitError(f"--report-to {','.join(cfg.report_to)}: {e}") from None
        eval_every = steps_per_epoch if cfg.eval_every == "epoch" else int(cfg.eval_every)
        bar = tqdm(total=total_steps, initial=state["global_step"], desc="train", unit="step",
                   disable=not acc.is_main_process or None)
        self.model.train()
        done = state["global_step"] >= total_steps or self._stopped_early(state)
        self.since_log = [0, time.perf_counter()]
        with launch.StopSignal(acc, LOG_EVERY) as self._stop:  # SIGTERM, Ctrl-C: a checkpoint, then stop
            while not done:
                done = self._train_epoch(state, eval_sets, total_steps, steps_per_epoch, eval_every, bar)
        bar.close()

    def _stopped_early(self, state: dict) -> bool:
        """A resumed run that early stopping had ended stays ended (it trained on to the next evaluation)."""
        patience = self.cfg.early_stopping
        if patience is None or state["bad_evals"] < patience or state["global_step"] == 0:
            return False
        self.log(f"early stopping had ended the run at step {state['global_step']} ({state['bad_evals']} evaluations "
                 "without improvement)")
        return True

    def _train_epoch(self, state: dict, eval_sets: dict, total_steps: int, steps_per_epoch: int, eval_every: int,
                     bar) -> bool:
        """One epoch (on resume: the rest of one), step by step; True when training is done."""
        cfg, acc = self.cfg, self.accelerator
        self._order.set_epoch(state["epoch"])
        self.train_loader.set_epoch(state["epoch"])
        skip = state["step_in_epoch"] * cfg.grad_accum
        batches = acc.skip_first_batches(self.train_loader, skip) if skip else self.train_loader
        self._stretch_start()
        for batch in batches:
            with acc.accumulate(self.model):
                self.step.backward(batch)  # forward, loss, backward; the loss summed on the device
                stepped = self.step.update() if acc.sync_gradients else False  # clip, AdamW, zero gradients
            self.since_log[0] += 1
            state["examples_seen"] += len(batch["input_ids"]) * acc.num_processes
            if not acc.sync_gradients:
                continue
            if stepped:  # fp16: a step skipped for overflow on the host keeps its rate (`EagerStep.update`)
                self.scheduler.step()
            state["global_step"] += 1
            state["step_in_epoch"] += 1
            step = state["global_step"]
            bar.update(1)
            for callback in self.callbacks:
                callback(self, state)
            done = step >= total_steps
            stop = not done and self._stop.due(step)
            evaluate = step % eval_every == 0 or done or (cfg.eval_every == "epoch" and
                                                          acc.gradient_state.end_of_dataloader)
            save = evaluate or (cfg.save_every and step % cfg.save_every == 0) or stop
            if step % LOG_EVERY == 0 or save:
                record_loss(self, state, bar)
            if save:
                done = self._evaluate_and_save(state, eval_sets, steps_per_epoch, evaluate) or done
            if stop:
                self._stopped(state, total_steps)
            if done:
                return True
        self._stretch_end(state)
        state.update(epoch=state["epoch"] + 1, step_in_epoch=0)
        return False

    def _stopped(self, state: dict, total_steps: int) -> None:
        """Training was asked to stop (`launch.StopSignal`) and its checkpoint is written: say how to go on."""
        signum = self._stop.signum or signal.SIGTERM  # a process not signalled itself stops with the others
        raise Stopped(f"stopped by {signal.Signals(signum).name} at step {state['global_step']} of {total_steps}, "
                      f"checkpoint {self.last_checkpoint} written", signum)

    def _stretch_start(self) -> None:
        """A stretch of training steps begins: its clock and its peak memory (until the next evaluation, checkpoint
        or epoch end)."""
        self._t0 = time.perf_counter()
        self.memory.reset_peak()

    def _stretch_end(self, state: dict) -> None:
        state["train_seconds"] += time.perf_counter() - self._t0
        self.memory.record("training")

    def _evaluate_and_save(self, state: dict, eval_sets: dict, steps_per_epoch: int, evaluate: bool) -> bool:
        """Evaluate (when due) and keep the best, then a resumable checkpoint, outside the training clock; True when
        early stopping says stop."""
        self._stretch_end(state)
        stop = False
        with heap_released(self.applied):
            if evaluate:
                stop = self._evaluate(state, eval_sets, steps_per_epoch)
            with self.memory.phase("checkpoint"):
                self.last_checkpoint = checkpoints.save(self.accelerator, self.ckpt_dir, state["global_step"],
                                                        {**state, "scheduler": self.scheduler.state_dict()},
                                                        self.cfg.keep_checkpoints)
        self.model.train()
        self._stretch_start()
        self.since_log = [0, self._t0]
        return stop

    def _evaluate(self, state: dict, eval_sets: dict, steps_per_epoch: int) -> bool:
        """Evaluate, log, keep the best model; return True when early stopping says stop (the same everywhere:
        every process scores the same gathered outputs)."""
        acc, cfg = self.accelerator, self.cfg
        metrics, predictions = self.evaluate(eval_sets)
        self.last_eval = (state["global_step"], metrics, predictions)  # reused by `finish` if it stays the best
        value = metrics[next(iter(eval_sets))][cfg.main_metric]
        best = state["best_metric"]
        lower = cfg.main_metric in self.task.lower_is_better
        improved = best is None or (value < best if lower else value > best)
        if improved:
            state.update(best_metric=value, best_step=state["global_step"], bad_evals=0)
            checkpoints.save_best(acc, self.model, self.task, self.ckpt_dir / "best")
        else:
            state["bad_evals"] += 1
        record_eval(self, state, metrics, improved, steps_per_epoch)
        stop = cfg.early_stopping is not None and state["bad_evals"] >= cfg.early_stopping
        if stop:
            self.log(f"early stopping: {state['bad_evals']} evaluations without improvement")
        for callback in self.eval_callbacks:  # e.g. a search's pruner; may raise to end the run
            callback(self, state, value)
        return stop


def _examples(task, data, name: str):
    """`task.examples(data)`, its errors and an empty set named as `fit` was given them (a notebook's lists)."""
    try:
        examples = task.examples(data)
    except BertkitError as e:
        raise BertkitError(f"{name}: {e}") from None
    if not len(examples):
        raise BertkitError(f"{name}: no examples")
    missing = [f for f in task.example_fields if f not in examples.column_names]
    if missing:
        raise BertkitError(f"{name}: no {', '.join(map(repr, missing))} column (a {task.name} example has "
                           f"{', '.join(task.example_fields)})")
    return examples

"""A fine-tuning run from a resolved config, as `bertkit finetune` (and `finetune glue`) starts it: read and check
the data, claim the run folder (made and locked: one run at a time), then train once, or once per seed with a
mean ± std summary.

    config (frozen) → the task's data (checked before anything is written) → the task's options completed from the
    training data (`prepare_options`) → Trainer(task, config).fit → run folder; per seed: <output>/seed-N
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from pathlib import Path

from ..errors import BertkitError, need_extra
from ..trackers import check_trackers
from ..utils import say
from .folder import RunFolder, not_empty, resumable


def default_output_dir(cfg) -> str:
    model = Path(cfg.model.rstrip("/")).name
    return f"runs/{cfg.name}-{model}-{time.strftime('%Y%m%d-%H%M%S')}"


def finetune(cfg, seeds: list[int] | None = None, resume: bool = False, allow_pickle: bool = False,
             started: float | None = None) -> dict | None:
    """Validate the data, then train once, or once per seed of `seeds` with a summary; return the metrics (a seed
    summary with `seeds`) on the main process, None on the others. `started`: the `time.perf_counter()` the wall
    time counts from (the CLI's: the command's start, its imports included; by default this call's)."""
    from ..device import check_precision
    from ..memory import MemoryLog
    from ..tasks import get_task
    from . import launch

    if seeds and len(set(seeds)) < len(seeds):
        raise BertkitError(f"--seeds {','.join(map(str, seeds))}: each seed once (a seed's run folder is seed-N)")
    if cfg.peft.method != "none":  # before the model loads (its new head's line was said first)
        need_extra("--peft", "peft", "peft")
    check_trackers(cfg.report_to)
    t0 = time.perf_counter() if started is None else started
    processes = launch.start()  # joins the process group a launcher set up (torchrun, accelerate launch)
    check_precision(cfg.compute.precision, processes.device)  # a precision this device lacks: refused before loading
    memory = MemoryLog(processes.device)
    out = Path(cfg.output_dir or launch.main_value(processes, default_output_dir(cfg)))  # one name for all
    if resume and not cfg.output_dir:
        raise BertkitError("--resume needs --output-dir: the folder of the run to continue")
    if resume:
        resumable(out, seeds)
    if not resume and cfg.output_dir and out.exists() and any(out.iterdir()):  # the default name moves on
        raise BertkitError(not_empty(out))
    task = get_task(cfg.task).resolve(cfg.task_options)
    with memory.phase("load"):  # everything the user gave is read and checked before the run folder is created
        changes, data = load_checked(task, cfg, say)  # notes from the main process only
    folder = RunFolder(out, resume, renamable=not cfg.output_dir) if launch.is_main_process() else nullcontext(out)
    with launch.main_enters(processes, folder) as out:  # made and locked by the main process; the others wait
        cfg = cfg.replace("the run", output_dir=str(out), **changes)  # the run's config, built once, frozen
        if not seeds:
            result = train_one(task, cfg, *data, resume, allow_pickle, memory)
            if launch.is_main_process():
                print(json.dumps({k: v for k, v in result.items() if k != "train"}, indent=2))
                print(f"wall time {time.perf_counter() - t0:.0f} s; run folder: {out}")
                return result
            return None
        return train_seeds(task, cfg, data, seeds, resume, allow_pickle, memory, t0)


def train_seeds(task, cfg, data, seeds, resume, allow_pickle, memory, t0) -> dict | None:
    """One run per seed into <output>/seed-N (a finished one kept on --resume), then their mean ± std summary."""
    from . import launch

    out, results = Path(cfg.output_dir), {}
    for seed in seeds:
        seed_cfg = cfg.replace("--seeds", seed=seed, output_dir=str(out / f"seed-{seed}"))
        done = Path(seed_cfg.output_dir) / "metrics.json"
        if resume and done.is_file():  # finished before the interruption
            results[seed] = json.loads(done.read_text())
            continue
        again = resume and (Path(seed_cfg.output_dir) / "checkpoints").is_dir()
        results[seed] = train_one(task, seed_cfg, *data, again, allow_pickle, memory)
    if not launch.is_main_process():
        return None
    from ..report import write_seed_report
    from ..utils import write_json

    summary = summarize(results)
    summary["wall_seconds"] = round(time.perf_counter() - t0, 1)
    write_json(out / "summary.json", summary)
    write_seed_report(out, summary)
    print(format_summary(summary))
    print(f"wall time {summary['wall_seconds']:.0f} s; run folders: {out}/seed-*; summary: {out / 'summary.json'}")
    return summary


def load_checked(task, cfg, log=print):
    """(the run config's changes: the task's options completed from the training data, and no test file where the
    recipe's is not this data's (`recipe_test_file_absent`); (train, {name: evaluation examples}, test examples or
    None, label names)): the run's data read and checked."""
    from ..data.sources import recipe_test_file_absent
    from ..models import resolve_model
    from .lora import check_default_targets

    path, local = resolve_model(cfg.model)  # a mistyped --model fails before the data is read
    check_default_targets(path, local, cfg.peft)  # --peft on a model type without default layers: before it loads
    train, evals, label_names = task.load_data(cfg)
    changes = {}
    if recipe_test_file_absent(cfg):
        log(f"no test set: the recipe's test file {cfg.test_file} is not in the working folder and there is no data "
            "folder (--test-file FILE names one)")
        changes["test_file"] = None
    test = task.load_split(cfg, "test", label_names) if cfg.test_file and not changes else None
    options = task.prepare_options(cfg.task_options, train, label_names, log)
    return {**vars(options), **changes}, (train, evals, test, label_names)


def train_one(task_class, cfg, train, evals, test, label_names, resume: bool = False, allow_pickle: bool = False,
              memory=None, eval_callbacks=()) -> dict:
    from ..utils import set_seed
    from . import Trainer, launch

    set_seed(cfg.seed)  # before the new head is initialised
    if memory is not None:
        memory.reset_peak()
    task = task_class.from_config(cfg, label_names, allow_pickle=allow_pickle)
    if memory is not None:
        memory.record("load")
    trainer = Trainer(task, cfg, resume=resume, memory=memory, eval_callbacks=eval_callbacks)
    result = trainer.fit(train, evals, test)
    t = result["train"]
    if launch.is_main_process():
        print(f"seed {cfg.seed}: trained {t['steps']} steps in {t['train_seconds']} s ({t['examples_per_s']} "
              f"examples/s, {t['precision']}); {trainer.memory.line()}")
    return result


def summarize(results: dict[int, dict]) -> dict:
    """Mean ± sample standard deviation (ddof=1) of every evaluation metric over the seeds."""
    import numpy as np

    from ..report import eval_splits

    first = next(iter(results.values()))
    metrics = {}
    for split in eval_splits(first):
        for name in first[split]:
            values = [r[split][name] for r in results.values() if isinstance(r[split].get(name), (int, float))]
            if len(values) == len(results):
                metrics[f"{split}/{name}"] = {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1))
                                              if len(values) > 1 else 0.0, "values": values}
    train_seconds = [r["train"]["train_seconds"] for r in results.values()]
    return {"name": first.get("name", first["task"]), "task": first["task"], "seeds": list(results),
            "metrics": metrics, "train_seconds": train_seconds}


def format_summary(summary: dict) -> str:
    lines = [f"{summary['name']}: {len(summary['seeds'])} seeds ({', '.join(map(str, summary['seeds']))})"]
    for name, m in summary["metrics"].items():
        # fractions in percent; SQuAD's are percent already, a squared error stays as it is
        scale = 1 if name.endswith("mse") or any(abs(v) > 1 for v in m["values"]) else 100
        lines.append(f"  {name:<28} {scale * m['mean']:6.2f} ± {scale * m['std']:.2f}   "
                     f"[{', '.join(f'{scale * v:.2f}' for v in m['values'])}]")
    return "\n".join(lines)

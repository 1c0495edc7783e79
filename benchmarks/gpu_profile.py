"""Where a training step's time goes, on the GPU: is the step bound by the device or by the host?

    source .gpu/setup.sh && python3 benchmarks/gpu_profile.py --model "$BB"          # GPU machine (about 60 s)
    python benchmarks/gpu_profile.py --quick                                         # CPU rehearsal

Runs `bertkit finetune sst2` in this process for --warm + --steps steps (batch 32, bf16 on a GPU) and measures:
  loop      ms per step of the loop over --steps steps (synchronised at both ends)
  profile   torch.profiler over those steps: device time per step (kernels, all streams), and the kernels and host
            ops that take most of it
  replays   (graphed step) each captured graph replayed alone --replays times: the device's own time for one step
            of each batch shape and for the update (clip + AdamW), with nothing on the host between replays
A step whose replays take about the loop's time is bound by the device (fewer or fused kernels, less memory
traffic help); one whose loop takes much longer is bound by the host. The report goes to stdout and --out.

--split-graphs takes, with no accumulation, the graphs an accumulating run takes (forward + backward per shape, and
one update graph) instead of one whole-step graph per shape; --no-fold-clip scales the gradients before AdamW (as
the eager step does) instead of inside the fused AdamW; --no-fused-qkv keeps BERT's three query, key and value
matmuls; --no-profile times the loop alone; --finetune-args adds
flags (e.g. '--device-data on'). `--arms whole,split,nofold --rounds 2` alternates such runs in this one process
(benchmarks/gpu_session.sh, step `ab`): the A/Bs of the whole-step graph, of clipping inside AdamW, of the fused
query/key/value projection and of data resident on the device. With --epoch, each run is one epoch and its measure
the training seconds (set-up included): `--epoch --arms capture2 --rounds 1`, one process an arm and round
(benchmarks/gpu_session.sh, step `setup`), since a process plans and loads kernels once; the `timed` arm prints
every warm-up, capture and first replay with the device synchronised around it. The epoch's other arms (step
`epoch`): `compile` (inductor's regions under the graphed step), `tf32` (`--precision tf32`: no mixed
precision's casts), `warm0` (a later shape captured without its eager warm-up), `nosync` (captures without
synchronising the device), `lean` (both), `buckets4`/`buckets12`. fp16 (what auto chooses on a V100 or T4), eager as
auto trains it against graphed (`--train-step graphed`): `--arms fp16,fp16graphed` (step `fp16`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from unittest import mock

for _k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_k, "1")
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("BERTKIT_DATA_DIR", str(ROOT.parent / "shared" / "data"))

import torch  # noqa: E402

CUDA = torch.cuda.is_available()


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def device_us(event) -> float:
    """An averaged profiler event's own device time, µs (the attribute's name changed across torch versions)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(event, name):
            return float(getattr(event, name))
    return 0.0


def replay_times(step, n: int) -> dict:
    """ms per replay of each captured graph of a GraphedStep, replayed back to back (the model trains on: these are
    extra updates, after the measured run)."""
    out = {}
    shapes = [next(shape for name, shape, _ in key if name == "input_ids") for key in step.graphs]  # signatures
    held = "forward, backward, clip, AdamW" if step.whole else "forward+backward"
    graphs = [(f"{held} {'x'.join(map(str, shape))}", replay)
              for shape, (replay, _) in zip(shapes, step.graphs.values(), strict=True)]
    graphs += [("update (clip, AdamW, zero)", step.update_graph)] if step.update_graph else []
    for name, replay in graphs:
        replay()
        sync()
        t = time.perf_counter()
        for _ in range(n):
            replay()
        sync()
        out[name] = (time.perf_counter() - t) / n * 1e3
    return out


def run(a) -> dict | None:
    """One `bertkit finetune sst2` run in this process with the A/B switches of `a` in force for it alone; its
    report, or None when it failed or ended before the measured steps."""
    from bertkit import graphs
    from bertkit.cli import main as cli
    from bertkit.training import graphed, loop, qkv

    report: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if CUDA else "none (CPU)"}
    window = {"start": a.warm, "end": a.warm + a.steps}
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]
                                      + ([torch.profiler.ProfilerActivity.CUDA] if CUDA else []))

    def watch(trainer, state) -> None:  # after every optimiser step
        step = state["global_step"]
        if step == window["start"]:
            sync()
            if not a.no_profile:
                profiler.__enter__()
            window["t"] = time.perf_counter()
        elif step == window["end"]:
            sync()
            report["loop_ms_per_step"] = (time.perf_counter() - window["t"]) / a.steps * 1e3
            report["step"] = {"kind": trainer.step.kind, "buckets": list(trainer.step_plan.buckets)}
            report["step"]["changes"] = list(trainer.applied)  # what the arm changed
            if trainer.step.kind == "graphed":
                report["step"].update(whole=trainer.step.whole, fold_clip=trainer.step.fold_clip)
            if not a.no_profile:
                profiler.__exit__(None, None, None)
                if hasattr(trainer.step, "graphs"):
                    report["replay_ms"] = replay_times(trainer.step, a.replays)

    graphed_init, trainer_init = graphed.GraphedStep.__init__, loop.Trainer.__init__

    def split(self, *args, **kw):
        graphed_init(self, *args, **kw)
        self.whole, self.keep_gradients = False, True

    def with_watch(self, *args, **kw):
        trainer_init(self, *args, **kw)
        self.callbacks.append(watch)

    with ExitStack() as patches:
        if not a.epoch:
            patches.enter_context(mock.patch.object(loop.Trainer, "__init__", with_watch))
        if a.old_capture:  # as before the set-up's A/B: two warm-ups a shape, torch.cuda.graph emptying the caches
            patches.enter_context(mock.patch.object(graphed, "WARMUP", (2, 2)))
            patches.enter_context(mock.patch.object(graphs.GraphCapture, "__call__", old_capture))
        if a.cudnn_sdp:  # a short step's attention as PyTorch chooses (cuDNN's on an H100), not PyTorch's own
            patches.enter_context(mock.patch.object(graphed, "attention_for", lambda batch: nullcontext()))
        if a.timed_setup:
            patches.enter_context(timed_setup(report))
        if a.no_later_warmup:  # a later shape's capture without an eager run of it first
            patches.enter_context(mock.patch.object(graphed, "WARMUP", (graphed.WARMUP[0], 0)))
        if a.no_capture_sync:  # the host captures while the device works through the replays queued before (capturing
            # runs nothing; a new graph's first replay follows them on the same stream)
            patches.enter_context(mock.patch.object(graphs.GraphCapture, "sync", False))
        if a.split_graphs:
            patches.enter_context(mock.patch.object(graphed.GraphedStep, "__init__", split))
        if a.no_fold_clip:  # clip as the eager step does: the gradients scaled first, then AdamW
            patches.enter_context(mock.patch.object(graphed, "fold_clipping", lambda optimizer: False))
        if a.no_fused_qkv:  # BERT's three projections as the model has them
            patches.enter_context(mock.patch.object(qkv, "_attentions", lambda model: []))
        rc = cli(finetune_args(a))
    if rc == 0 and a.epoch:  # the epoch's training time and its step's set-up, from the run's metrics.json
        train = json.loads((Path(a.output_dir) / "metrics.json").read_text())["train"]
        report.update(train_seconds=train["train_seconds"], step=train["step"], precision=train["precision"])
        return report
    if rc != 0 or "loop_ms_per_step" not in report:
        return None
    report["events"] = profiler.key_averages() if not a.no_profile else None
    return report


def finetune_args(a) -> list[str]:
    a.output_dir = tempfile.mkdtemp("-profile")
    length = ["--epochs", "1"] if a.epoch else ["--max-steps", str(a.warm + a.steps)]
    args = ["finetune", "sst2", "--model", a.model, "--train-step", a.train_step, "--batch-size", "32", *length,
            "--eval-every", "100000", "--save-every", "0", "--seed", "42",
            "--max-eval-samples", "64", "--output-dir", a.output_dir, *(["--precision", "bf16"] if CUDA else [])]
    args += shlex.split(a.finetune_args)
    if a.quick:
        args += ["--max-train-samples", str(32 * (a.warm + a.steps + 2))]
    return args


def old_capture(self, fn, inputs: dict):
    """GraphCapture's capture as it was before the set-up's A/B: through `torch.cuda.graph`, which empties the
    device's (and, in newer PyTorch, the pinned host memory's) caches first."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    try:
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
            outputs = fn(inputs)
    finally:
        torch.cuda.synchronize()
    return lambda: (graph.replay(), outputs)[1]


@contextmanager
def timed_setup(report: dict):
    """Each warm-up, capture and first replay of a graph timed with the device synchronised on both sides (slower
    than a run, but says which costs): report["setup_phases"] = [(phase, seconds)]."""
    from bertkit import graphs

    phases = report.setdefault("setup_phases", [])
    run, call = graphs.GraphCapture.run, graphs.GraphCapture.__call__

    def timed(name, fn, *args):
        sync()
        t = time.perf_counter()
        out = fn(*args)
        sync()
        phases.append((name, time.perf_counter() - t))
        return out

    def timed_call(self, fn, inputs):
        replay = timed("capture", call, self, fn, inputs)
        first = []

        def replay_once():
            if first:
                return replay()
            first.append(1)
            return timed("first replay", replay)
        return replay_once

    def timed_run(self, fn, *args):
        return timed("warm-up", run, self, fn, *args)

    with mock.patch.object(graphs.GraphCapture, "run", timed_run), \
            mock.patch.object(graphs.GraphCapture, "__call__", timed_call):
        yield


ARMS = {  # an A/B's sides: what each changes of the run `a` describes
    "whole": {},  # as bertkit runs: a whole-step graph a shape, clipping inside the fused AdamW
    "split": {"split_graphs": True},  # forward + backward graphs beside an update graph, as under accumulation
    "nofold": {"no_fold_clip": True},  # the gradients scaled by the clipping coefficient before AdamW
    "noqkv": {"no_fused_qkv": True},  # query, key and value projected by three matmuls, not one
    "data-on": {"device_data": "on"},  # the training set collated once on the device
    "data-off": {"device_data": "off"},  # batches from worker processes
    "capture2": {"old_capture": True},  # two warm-ups a shape, and torch.cuda.graph (which empties caches) captures
    "cudnn": {"cudnn_sdp": True},  # short steps' attention as PyTorch chooses (cuDNN's), not flash/efficient/math
    "compile": {"flags": "--compile"},  # torch.compile'd regions (inductor, dynamic lengths) under the graphed step
    "timed": {"timed_setup": True},  # as bertkit runs, with every warm-up, capture and first replay timed (synced)
    "tf32": {"flags": "--precision tf32"},  # fp32 weights and activations, matmuls on TF32 tensor cores
    "warm0": {"no_later_warmup": True},  # a later shape captured at once, without its eager warm-up
    "nosync": {"no_capture_sync": True},  # a capture without the device synchronised before and after it
    "lean": {"no_later_warmup": True, "no_capture_sync": True},  # the set-up with both of the above
    "buckets4": {"flags": "--length-buckets 4"},  # 4 length buckets, not 8: fewer set-ups, more padding
    "buckets12": {"flags": "--length-buckets 12"},  # 12: more set-ups, less padding
    "fp16": {"flags": "--precision fp16 --train-step eager"},  # fp16 as auto trains it (V100, T4): accelerate's step
    "fp16graphed": {"flags": "--precision fp16 --train-step graphed"},  # fp16, its loss scaling inside the graphs
}


def alternate(a) -> int:
    """The arms of `--arms` in turn, `--rounds` times, in this one process (no start-up between them); the loop's
    ms a step of each run, then each arm's median and its ratio to the first arm's."""
    arms = a.arms.split(",")
    if unknown := [arm for arm in arms if arm not in ARMS]:
        print(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
        return 2
    times: dict = {arm: [] for arm in arms}
    for i in range(a.rounds):
        for arm in arms:
            change = dict(ARMS[arm])
            extra = f" --device-data {change.pop('device_data')}" if "device_data" in change else ""
            extra += f" {change.pop('flags')}" if "flags" in change else ""
            b = argparse.Namespace(**{**vars(a), "no_profile": True, "finetune_args": a.finetune_args + extra,
                                      **change})
            t = time.perf_counter()
            report = run(b)
            step = report["step"] if report else "FAILED"
            if a.epoch:
                times[arm].append(report["train_seconds"] if report else float("nan"))
                brief = ", ".join(f"{k} {step[k]}" for k in ("kind", "graphs", "replays", "setup_seconds",
                                                              "capture_seconds", "capture_failed") if k in step)
                rest = ""  # the training seconds less the set-up, per replay (the eager short batch counted in)
                if report and step.get("replays"):
                    rest = (f"; the rest {times[arm][-1] - step['setup_seconds']:.2f} s, "
                            f"{(times[arm][-1] - step['setup_seconds']) / step['replays'] * 1e3:.2f} ms a replay")
                print(f"ab round {i + 1} {arm}: epoch {times[arm][-1]:.1f} s of training (run "
                      f"{time.perf_counter() - t:.0f} s; {Path(a.model).name} {b.finetune_args.strip()}; "
                      f"{report.get('precision') if report else ''}; step {brief or step}{rest})", flush=True)
                for phase, seconds in (report or {}).get("setup_phases", []):
                    print(f"   {phase}: {seconds * 1e3:.1f} ms")
                continue
            ms = report["loop_ms_per_step"] if report else float("nan")
            times[arm].append(ms)
            print(f"ab round {i + 1} {arm}: {ms:.2f} ms/step over {a.steps} steps (run {time.perf_counter() - t:.0f} "
                  f"s; {a.model} {b.finetune_args.strip()}; step {step})", flush=True)
    first, unit = statistics.median(times[arms[0]]), "s an epoch" if a.epoch else "ms/step"
    for arm in arms:
        median = statistics.median(times[arm])
        print(f"ab {arm}: median {median:.2f} {unit} ({', '.join(f'{t:.2f}' for t in times[arm])}); "
              f"{median / first:.3f} × {arms[0]}")
    return 0


def main(a) -> int:
    if a.arms:
        return alternate(a)
    report = run(a)
    if report is None:
        print("the run failed or ended before the profiled steps")
        return 1
    if a.no_profile:
        print(f"loop: {report['loop_ms_per_step']:.2f} ms/step over {a.steps} steps; step {report['step']}; "
              f"{'split' if a.split_graphs else 'whole-step'} graphs; clipping "
              f"{'first' if a.no_fold_clip else 'in AdamW'}; {a.model} {a.finetune_args}")
        return 0
    events = report.pop("events")
    kernels = sorted((e for e in events if device_us(e) > 0), key=device_us, reverse=True)
    report["device_ms_per_step"] = sum(device_us(e) for e in kernels) / 1e3 / a.steps
    report["top_device"] = [(e.key[:90], e.count / a.steps, device_us(e) / 1e3 / a.steps) for e in kernels[:a.top]]
    host = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
    report["top_host"] = [(e.key[:90], e.count / a.steps, e.self_cpu_time_total / 1e3 / a.steps) for e in host[:a.top]]
    lines = [f"{report['gpu']}, torch {report['torch']}; {a.model}; step {report['step']}",
             f"loop: {report['loop_ms_per_step']:.2f} ms/step over {a.steps} steps; profiled device time "
             f"{report['device_ms_per_step']:.2f} ms/step"]
    lines += [f"replay alone: {k}: {v:.2f} ms" for k, v in report.get("replay_ms", {}).items()]
    for title, rows in (("device", report["top_device"]), ("host (self)", report["top_host"])):
        lines.append(f"top {title} time per step (calls/step, ms/step):")
        lines += [f"  {ms:8.3f}  {calls:6.1f}  {name}" for name, calls, ms in rows]
    print("\n".join(lines))
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "profile.json").write_text(json.dumps(report, indent=1))
    (Path(a.out) / "profile.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=os.environ.get("BB", "minilm-l6"), help="model (default $BB, else minilm-l6)")
    p.add_argument("--train-step", default="auto", choices=["auto", "eager", "static", "graphed"])
    p.add_argument("--warm", type=int, default=100, help="steps before the measured ones (captures happen here)")
    p.add_argument("--steps", type=int, default=100, help="measured steps")
    p.add_argument("--replays", type=int, default=50, help="replays of each graph, timed alone")
    p.add_argument("--top", type=int, default=15, help="rows of each top list")
    p.add_argument("--quick", action="store_true", help="CPU rehearsal: a few steps on few examples")
    p.add_argument("--split-graphs", action="store_true", help="graphs as under accumulation (the A/B's other side)")
    p.add_argument("--no-fold-clip", action="store_true", help="clip before AdamW, not inside it (an A/B's side)")
    p.add_argument("--no-fused-qkv", action="store_true", help="three query/key/value matmuls (an A/B's side)")
    p.add_argument("--old-capture", action="store_true", help="two warm-ups a shape, torch.cuda.graph's capture")
    p.add_argument("--cudnn-sdp", action="store_true", help="short steps' attention as PyTorch chooses (cuDNN's)")
    p.add_argument("--timed-setup", action="store_true", help="each warm-up, capture and first replay timed, synced")
    p.add_argument("--no-later-warmup", action="store_true", help="later shapes captured without an eager warm-up")
    p.add_argument("--no-capture-sync", action="store_true", help="captures without synchronising the device")
    p.add_argument("--no-profile", action="store_true", help="time the loop only")
    p.add_argument("--epoch", action="store_true", help="with --arms: one epoch each, its training seconds (set-up "
                   "included; run each arm in a process of its own, as a user's run starts: kernels load and shapes "
                   "are planned once a process)")
    p.add_argument("--arms", default="", help=f"an A/B in one process: arms in turn, e.g. whole,split,nofold "
                                              f"(of {', '.join(ARMS)}); the loop timed alone")
    p.add_argument("--rounds", type=int, default=2, help="rounds of --arms")
    p.add_argument("--finetune-args", default="", help="more `bertkit finetune` flags, e.g. '--device-data on'")
    p.add_argument("--out", default=str(Path(os.environ.get("OUT", "/tmp/gpu-out")) / "profile"))
    a = p.parse_args()
    if a.quick:
        a.warm, a.steps = min(a.warm, 3), min(a.steps, 4)
    sys.exit(main(a))

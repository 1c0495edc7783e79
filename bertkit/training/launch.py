"""Processes: start (or join) the launcher's process group, catch the silent multi-process failure modes before any
work is done, and share decisions that must be the same on every process (the main process's value wins).

Right commands (each process sees distinct batches; evaluation gathers every example once):
- one CPU machine:   ACCELERATE_USE_CPU=1 torchrun --standalone --nproc_per_node 2 -m bertkit.cli finetune ...
- one GPU machine:   accelerate launch --multi_gpu --num_processes 8 -m bertkit.cli finetune ...
                     (or: torchrun --standalone --nproc_per_node 8 -m bertkit.cli finetune ...)
- FSDP:              accelerate launch --config_file examples/accelerate/fsdp2.yaml -m bertkit.cli finetune ...
- several nodes:     torchrun --nnodes 2 --node_rank R --nproc_per_node 8 --rdzv_backend c10d \\
                       --rdzv_endpoint HOST:29500 -m bertkit.cli finetune ...   (same command on every node)
Several nodes need a filesystem they all see at the output folder: the main process writes the run folder and
checkpoints there, every process writes its own random-number state into each checkpoint and reads it on --resume.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import ExitStack, contextmanager

from ..errors import BertkitError

CPU_COMMAND = "ACCELERATE_USE_CPU=1 torchrun --standalone --nproc_per_node {n} -m bertkit.cli finetune ..."


def start():
    """accelerate's process state (joins the process group a launcher set up), after checking the launch."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # as Accelerator() reads it
    check_launch(state)
    return state


def check_launch(state) -> None:
    """Stop with the right command when the launcher's process count and accelerate's disagree."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != state.num_processes:
        hint = CPU_COMMAND.format(n=world) if state.device.type == "cpu" else \
            f"torchrun --nproc_per_node {world} -m bertkit.cli finetune ..."
        raise BertkitError(
            f"the launcher started {world} processes but each one runs alone ({state.num_processes} process "
            f"in its group), so every process would repeat the same work. On CPU, torch.distributed must be "
            f"told to use gloo: run\n    {hint}")
    if "MASTER_PORT" in os.environ and "WORLD_SIZE" not in os.environ and state.num_processes == 1:
        raise BertkitError(
            "this looks like `accelerate launch --cpu --num_processes N`, which starts ONE process on CPU "
            f"(a known accelerate limitation). For N processes on one CPU machine run\n"
            f"    {CPU_COMMAND.format(n='N')}")


def leave() -> None:
    """Leave the process group this process joined (`start`), if any: its gloo or NCCL threads stopped before the
    interpreter exits, as torch asks of a program's end, rather than torn down during the exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main_value(state, value):
    """The main process's `value`, on every process (a collective: every process calls it)."""
    if state.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box, from_process=0)
    return box[0]


@contextmanager
def main_enters(state, context):
    """`with main_enters(state, ctx) as value:` `ctx` entered on every process (the main process's own, the others' a
    stand-in) and the main process's value given to all; an error in the main process's entering stops every process
    with its line, rather than leaving the others waiting for the value (a collective: every process calls it)."""
    with ExitStack() as stack:
        try:
            value, error = stack.enter_context(context), None
        except BertkitError as e:
            value, error = None, str(e)
        value, error = main_value(state, (value, error))
        if error is not None:
            raise BertkitError(error)
        yield value


def is_main_process() -> bool:
    """Rank 0 of a torchrun/accelerate launch (or a plain single process); only it prints results."""
    return int(os.environ.get("RANK", "0")) == 0


class StopSignal:
    """SIGTERM (a scheduler's preemption or time limit, `kill`) or SIGINT (Ctrl-C) asks training to stop at its next
    optimiser step, after a resumable checkpoint, rather than die where it stands: the loop asks `due(step)` after
    every step. The same signal again ends the process at once, as the first would have. One process reads its flag;
    several agree at chosen steps (a collective: each may have been signalled at a different step), so all stop at
    one step: about every `seconds` of training, at most `most` steps apart (`agreement_interval`, from the time
    the processes measured together, so every process chooses the same next step). Installed only from the main
    thread (Python's rule for signal handlers); elsewhere both signals keep their handlers."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, accelerator, most: int, seconds: float = 2.0):
        self.accelerator, self.most, self.seconds, self.signum, self._previous = accelerator, most, seconds, None, {}
        self._next = self._last = None  # the next step to agree at, the last one agreed at
        self._clock = time.perf_counter()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS  # one ignored stays so (a
                              if signal.getsignal(s) is not signal.SIG_IGN}  # script's background job and Ctrl-C)
        self._clock = time.perf_counter()
        return self

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
        return False

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:  # asked twice: stop now, as the signal's own handler would
            for s, handler in self._previous.items():
                signal.signal(s, handler)
            self._previous = {}
            os.kill(os.getpid(), signum)
            return
        self.signum = signum
        if is_main_process():  # os.write: a handler may run while the main thread is inside a write to stderr
            again = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            os.write(2, f"\n{signal.Signals(signum).name}: stopping at the end of a step, with a checkpoint to go "
                        f"on from; {again} again stops at once\n".encode())

    def due(self, step: int) -> bool:
        acc = self.accelerator
        if acc.num_processes == 1:
            return self.signum is not None
        if self._next is None:  # the first step this run (or this resume) makes: agree there
            self._next = step
        if step < self._next:
            return False
        import torch

        now = time.perf_counter()
        # [2]: processes signalled, seconds since the last agreement (summed over the processes)
        mine = torch.tensor([0.0 if self.signum is None else 1.0, now - self._clock], device=acc.device)
        signalled, seconds = acc.reduce(mine, reduction="sum").tolist()
        steps = step - self._last if self._last is not None else 1
        self._next = step + agreement_interval(seconds / acc.num_processes, steps, self.seconds, self.most)
        self._last, self._clock = step, now
        return signalled > 0


def agreement_interval(seconds: float, steps: int, target: float, most: int) -> int:
    """Steps until the processes next agree on a stop: about `target` seconds at the pace of the last `steps` steps,
    which took `seconds`; at least 1, at most `most`."""
    per_step = seconds / max(1, steps)
    return max(1, min(most, int(target / per_step) if per_step > 0 else most))

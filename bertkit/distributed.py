"""Launch checks: catch the silent multi-process failure modes before any work is done.

Right commands (each process sees distinct batches; evaluation gathers every example once):
- one CPU machine:   ACCELERATE_USE_CPU=1 torchrun --standalone --nproc_per_node 2 -m bertkit.cli finetune ...
- one GPU machine:   accelerate launch --multi_gpu --num_processes 8 -m bertkit.cli finetune ...
                     (or: torchrun --standalone --nproc_per_node 8 -m bertkit.cli finetune ...)
- several nodes:     torchrun --nnodes 2 --node_rank R --nproc_per_node 8 --rdzv_backend c10d \\
                       --rdzv_endpoint HOST:29500 -m bertkit.cli finetune ...   (same command on every node)
"""

from __future__ import annotations

import os

from .errors import BertkitError

CPU_COMMAND = "ACCELERATE_USE_CPU=1 torchrun --standalone --nproc_per_node {n} -m bertkit.cli finetune ..."


def check_launch(accelerator) -> None:
    """Stop with the right command when the launcher's process count and accelerate's disagree."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != accelerator.num_processes:
        hint = CPU_COMMAND.format(n=world) if accelerator.device.type == "cpu" else \
            f"torchrun --nproc_per_node {world} -m bertkit.cli finetune ..."
        raise BertkitError(
            f"the launcher started {world} processes but each one runs alone ({accelerator.num_processes} process "
            f"in its group), so every process would repeat the same work. On CPU, torch.distributed must be "
            f"told to use gloo: run\n    {hint}")
    if "MASTER_PORT" in os.environ and "WORLD_SIZE" not in os.environ and accelerator.num_processes == 1:
        raise BertkitError(
            "this looks like `accelerate launch --cpu --num_processes N`, which starts ONE process on CPU "
            f"(a known accelerate limitation). For N processes on one CPU machine run\n"
            f"    {CPU_COMMAND.format(n='N')}")


def is_main_process() -> bool:
    """Rank 0 of a torchrun/accelerate launch (or a plain single process); only it prints results."""
    return int(os.environ.get("RANK", "0")) == 0

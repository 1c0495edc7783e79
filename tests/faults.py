"""Test-only crash injection: run `bertkit` with a SIGKILL at one point of training, the way a power cut or the OOM
killer would stop it. The hooks are monkeypatched onto bertkit's own functions here; bertkit itself has none.

    python tests/faults.py POINT bertkit-arguments...      e.g.  python tests/faults.py eval:16 finetune sst2 ...

Points (N is the optimiser step):
- `step:N`        after optimiser step N (a Trainer callback);
- `term:N`        SIGTERM (not SIGKILL: a scheduler's preemption) after optimiser step N;
- `int:N`         SIGINT (Ctrl-C) after optimiser step N;
- `eval:N`        as the evaluation at step N starts;
- `checkpoint:N`  checkpoint N written under its temporary name, not yet renamed (`checkpoints.publish`);
- `pointer:N`     checkpoint N renamed, the `latest` pointer not yet moved (`checkpoints.point`);
- `full:N`        the disk fills after optimiser step N: no file may grow past 64 KiB from then on (RLIMIT_FSIZE;
                  Python ignores SIGXFSZ, so a write past it fails with EFBIG, as one on a full disk with ENOSPC);
- `fsize:B`       no file may grow past B bytes from the command's start.
Both come after torch._dynamo is imported: torch 2.8 writes a generated module into the temporary folder when it is
first imported (a disk full from the start stops torch itself there).
"""

from __future__ import annotations

import os
import signal
import sys


def kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install(point: str) -> None:
    from bertkit.training import checkpoints
    from bertkit.training.loop import Trainer

    name, _, step = point.partition(":")
    step = int(step)
    if name in ("full", "fsize"):
        import resource

        import torch._dynamo  # noqa: F401  (see above)

        fill = lambda size=64 * 1024: resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))  # noqa: E731
    if name == "fsize":
        fill(step)
    elif name == "full":
        init = Trainer.__init__

        def filling(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.callbacks.append(lambda trainer, state: fill() if state["global_step"] == step else None)

        Trainer.__init__ = filling
    elif name in ("step", "term", "int"):
        init = Trainer.__init__
        sent = {"step": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT}[name]
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a test worker may ignore it)
        stop = lambda: os.kill(os.getpid(), sent)  # noqa: E731

        def with_callback(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.callbacks.append(lambda trainer, state: stop() if state["global_step"] == step else None)

        Trainer.__init__ = with_callback
    elif name == "eval":
        evaluate = Trainer._evaluate

        def killed_evaluate(self, state, *args, **kwargs):
            if state["global_step"] == step:
                kill()
            return evaluate(self, state, *args, **kwargs)

        Trainer._evaluate = killed_evaluate
    elif name in ("checkpoint", "pointer"):
        target = "publish" if name == "checkpoint" else "point"
        original = getattr(checkpoints, target)

        def killed(tmp_or_root, final):
            if final.name == f"step-{step:07d}":
                kill()
            return original(tmp_or_root, final)

        setattr(checkpoints, target, killed)
    else:
        raise SystemExit(f"unknown fault point {point!r}")


if __name__ == "__main__":
    install(sys.argv[1])
    from bertkit.cli import main

    sys.exit(main(sys.argv[2:]))

"""Training: the accelerate loop (loop.py), its batches (data.py), evaluation across processes (evaluation.py),
wrapping (prepare.py), optimizer groups (optim.py), model options (options.py), checkpoints (checkpoints.py) and
process launch checks (launch.py)."""

from .loop import Trainer

__all__ = ["Trainer"]

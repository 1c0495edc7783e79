"""Training: runs (runs.py: data checked, the run folder, seeds), the accelerate loop (loop.py), its set-up
(prepare.py: the trained config, the Accelerator, wrapping, the step), one step (step.py, graphed.py), its batches
(data.py), evaluation across processes (evaluation.py), the run's end (results.py), model changes and their undoing
(changes.py), optimizer groups (optim.py), memory budgets (budget.py), peft (lora.py), checkpoints (checkpoints.py),
process launch checks (launch.py) and the run folder's claim (folder.py)."""

from .loop import Trainer

__all__ = ["Trainer"]

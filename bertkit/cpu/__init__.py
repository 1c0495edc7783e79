"""CPU-only training speed-ups, applied together by one context manager and undone together on the way out.

```python
with cpu_speedups(model, fast_dropout=True, keep_heap=True, log=print) as applied:
    train(model)            # `applied` names the speed-ups that took effect
# here the model is as it was (nn.Dropout modules, its attention implementation) and glibc's allocator settings are
# back, whether training returned or raised
```
- `fast_dropout` (dropout.py): dropout masks from cheaper random numbers, and BERT's attention computed unfused
  while training (faster than torch's fused SDPA backward on CPU);
- `keep_heap` (heap.py): glibc keeps freed memory in the heap instead of unmapping it every step. The trainer asks
  for it in bf16 only: it met the 3 % rule below there and not in fp32 (docs/speed.md, "Which CPU speed-ups stay").
Each one is checked to have taken effect: one forward pass of the model in training mode on a dummy input (under
`torch.random.fork_rng`, so no random state moves) must go through the patched code. What the installed
transformers does not support is undone and skipped with one message. A speed-up is kept only if it gains at
least 3 % end to end in the setting it is applied to; docs/speed.md has the measurements, and those of the one
removed (fused QKV projections).
"""

from __future__ import annotations

from contextlib import contextmanager

from ..device import probe_forward
from . import dropout as _dropout
from . import heap as _heap


@contextmanager
def cpu_speedups(model, fast_dropout: bool = True, keep_heap: bool = False, log=print):
    """Apply the chosen speed-ups to `model` (a Hugging Face BERT-family model on the CPU); yield the names of those
    that took effect; undo all of them on exit, also when the block raises."""
    undo, applied = [], []
    try:
        calls = {}
        if fast_dropout:
            swapped = _dropout.swap_dropout(model)
            undo.append(lambda: _dropout.restore_dropout(model))
            routed = _dropout.route_attention(model)
            if swapped:
                calls["fast_dropout"] = ("dropout", _dropout.CALLS)
            if routed:
                calls["unfused_attention"] = ("attention", _dropout.CALLS)
            elif getattr(model.config, "_attn_implementation", None) == "sdpa":
                log("cpu speed-ups: the installed transformers has no attention registry; attention stays fused")
        if calls:
            before = {name: counter[key] for name, (key, counter) in calls.items()}
            probe_forward(model)
            for name, (key, counter) in calls.items():
                if counter[key] > before[name]:
                    applied.append(name)
                else:
                    log(f"cpu speed-ups: {name} did not take effect with this model and transformers; skipped")
        if keep_heap and _heap.keep_heap():
            undo.append(_heap.release_heap)
            applied.append("keep_heap")
        yield applied
    finally:
        for step in reversed(undo):
            step()

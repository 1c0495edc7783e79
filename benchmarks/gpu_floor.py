"""What a bert-base training step costs whatever its batch's length, and how much one flat buffer could save of it.

    source .gpu/setup.sh && python3 benchmarks/gpu_floor.py      # GPU machine (about 20 s)
    python benchmarks/gpu_floor.py --quick                        # CPU rehearsal (a tiny BERT, eager)

A graphed step of 32 × 8 tokens replays in about as long as the epoch's average step (docs/speed.md, "On one GPU"):
most of its time does not depend on the tokens. Per parameter tensor, as bertkit trains today, each step pays:
AdamW (fused, clipping folded in), the gradients' norm, mixed precision's casts of the linear layers' weights to bf16
(forward) and of their bf16 gradients back to fp32 (backward). Each is timed here alone, on bert-base's own
parameter tensors (`transformers.BertConfig()`'s sizes, random values; speed does not depend on them), and again on
one flat buffer of the same numbers: AdamW and the norm over a decay and a no-decay buffer (what a flat-parameter
design could reach at best), the casts as a flat design would make them (one multi-tensor copy of the
linear layers' weights into one bf16 buffer, and of their bf16 gradients into one fp32 buffer). Each piece
is captured in a CUDA graph and replayed --replays times between CUDA events; on a CPU (--quick) it runs eagerly, a
rehearsal of the plumbing only. The last line: the most the flat buffers could take off an epoch of --steps steps.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from transformers import BertConfig, BertForSequenceClassification

CUDA = torch.cuda.is_available()


def timed(fn, replays: int) -> float:
    """ms per call of `fn`: replays of its CUDA graph (after two eager warm-ups on a side stream), or eager calls."""
    if not CUDA:
        fn()
        t0 = time.perf_counter()
        for _ in range(replays):
            fn()
        return (time.perf_counter() - t0) * 1e3 / replays
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(), fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays


def adamw(params: list[list[torch.Tensor]], device) -> tuple:
    """Fused AdamW over the groups (decay 0.01, none) as bertkit builds it for a graph: capturable, tensor learning
    rates, the clipping folded in through `grad_scale`; and a function that steps it."""
    groups = [{"params": ps, "weight_decay": wd} for ps, wd in zip(params, (0.01, 0.0), strict=True)]
    opt = torch.optim.AdamW(groups, lr=torch.tensor(2e-5, device=device), fused=True, capturable=CUDA)
    opt.grad_scale = torch.ones((), device=device)
    return opt, opt.step


def main(a) -> int:
    device = torch.device("cuda" if CUDA else "cpu")
    cfg = BertConfig(**({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                         "intermediate_size": 128} if a.quick else {}))
    model = BertForSequenceClassification(cfg).to(device)
    params = [p for p in model.parameters()]
    linear = [p for m in model.modules() if isinstance(m, nn.Linear) for p in m.parameters()]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    split = [[p for p in params if p.ndim >= 2], [p for p in params if p.ndim < 2]]  # bertkit's decay, no decay
    flat = [torch.cat([p.detach().flatten() for p in ps]) for ps in split]  # [n_decay], [n_no_decay]
    for f in flat:
        f.grad = torch.randn_like(f) * 1e-3
    low = torch.empty(sum(p.numel() for p in linear), dtype=torch.bfloat16, device=device)  # [n_linear]
    low_views = [v.view_as(p) for v, p in zip(low.split([p.numel() for p in linear]), linear, strict=True)]
    detached = [p.detach() for p in linear]
    lin_grads16 = [torch.randn_like(p, dtype=torch.bfloat16) for p in linear]  # backward's bf16 weight gradients
    full = torch.empty(sum(p.numel() for p in linear), device=device)  # [n_linear] fp32
    full_views = [v.view_as(p) for v, p in zip(full.split([p.numel() for p in linear]), linear, strict=True)]
    pieces = {  # name: (as bertkit does it, per tensor; on one flat buffer)
        "AdamW": (adamw(split, device)[1], adamw([[flat[0]], [flat[1]]], device)[1]),
        "gradient norm": (lambda: torch.nn.utils.get_total_norm([p.grad for p in params]),
                          lambda: torch.nn.utils.get_total_norm([f.grad for f in flat])),
        "weights to bf16": (lambda: [p.to(torch.bfloat16) for p in detached],  # autocast's casts; one flat copy
                            lambda: torch._foreach_copy_(low_views, detached)),
        "gradients to fp32": (lambda: [g.float() for g in lin_grads16],
                              lambda: torch._foreach_copy_(full_views, lin_grads16)),
    }
    name = torch.cuda.get_device_name() if CUDA else "CPU (eager calls: a rehearsal)"
    print(f"{name}, torch {torch.__version__}; {sum(p.numel() for p in params) / 1e6:.2f} M parameters in "
          f"{len(params)} tensors, {sum(p.numel() for p in linear) / 1e6:.2f} M of them in {len(linear)} linear ones")
    saved = 0.0
    for piece, (per_tensor, flat_fn) in pieces.items():
        ms = [timed(per_tensor, a.replays), timed(flat_fn, a.replays)]
        saved += ms[0] - ms[1]
        print(f"floor {piece}: {ms[0]:.3f} ms a step per tensor, {ms[1]:.3f} ms on one flat buffer")
    print(f"floor: the flat buffers' most off an epoch of {a.steps} steps: {saved * a.steps / 1e3:.2f} s "
          f"({saved:.3f} ms a step)")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replays", type=int, default=200, help="timed replays (calls on a CPU) of each piece")
    p.add_argument("--steps", type=int, default=2105, help="an epoch's steps (SST-2 at batch 32)")
    p.add_argument("--quick", action="store_true", help="CPU rehearsal: a tiny BERT, a few calls")
    a = p.parse_args()
    if a.quick:
        a.replays = min(a.replays, 3)
    raise SystemExit(main(a))

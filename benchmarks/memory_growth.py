"""Why the resident set of a CPU training run grows with its length: a plain torch + transformers loop (no bertkit)
training MiniLM's QA head in bf16 on random inputs of varying length, printing the resident set, its peak and
glibc's heap (mallinfo2: arena, mmapped, in use, free) every 10 steps. Run it under different allocators and
shapes to tell the causes apart (docs/memory.md has the table):

    python benchmarks/memory_growth.py                                      # glibc as it is
    MALLOC_MMAP_THRESHOLD_=1048576 python benchmarks/memory_growth.py       # large blocks always mmapped (returned)
    ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 python benchmarks/memory_growth.py    # no oneDNN primitive cache
    ROUND=64 python benchmarks/memory_growth.py                             # lengths rounded up to a multiple of 64
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 python benchmarks/memory_growth.py   # jemalloc
    KEEP_HEAP=1 TRIM_EVERY=10 python benchmarks/memory_growth.py            # bertkit's kept heap, trimmed every 10

Environment: STEPS (default 70), BS (batch, default 16), DTYPE (bf16 or fp32), ROUND (default 1), KEEP_HEAP
(bertkit/cpu/heap.py's keep_heap, default 0), TRIM_EVERY (malloc_trim every N steps, default 0: never).
"""

import ctypes
import os
import random
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForQuestionAnswering

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bertkit.cpu import heap as bertkit_heap  # noqa: E402
from bertkit.memory import process_peak_gib, rss_gib  # noqa: E402
from bertkit.models import resolve_model  # noqa: E402


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                                "uordblks", "fordblks", "keepcost")]


def heap() -> tuple:
    """glibc's (arena, mmapped, in use, free) in GiB; zeros under another allocator."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    m, g = libc.mallinfo2(), 1024**3
    return tuple(round(v / g, 3) for v in (m.arena, m.hblkhd, m.uordblks, m.fordblks))


def main() -> None:
    steps, batch = int(os.environ.get("STEPS", "70")), int(os.environ.get("BS", "16"))
    round_to, bf16 = int(os.environ.get("ROUND", "1")), os.environ.get("DTYPE", "bf16") == "bf16"
    trim_every = int(os.environ.get("TRIM_EVERY", "0"))
    if os.environ.get("KEEP_HEAP") == "1":
        assert bertkit_heap.keep_heap()
    torch.manual_seed(0)
    random.seed(0)
    model = AutoModelForQuestionAnswering.from_pretrained(resolve_model("minilm-l6")[0]).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    t0 = time.time()
    print("step length rss_gib peak_gib seconds heap(arena,mmapped,in_use,free)")
    for step in range(steps):
        length = min(384, -(-random.randint(150, 384) // round_to) * round_to)
        ids = torch.randint(1000, 20000, (batch, length))
        pos = torch.randint(0, length, (batch,))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), start_positions=pos,
                         end_positions=pos).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if trim_every and (step + 1) % trim_every == 0:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        if step % 10 == 0:
            print(step, length, rss_gib(), process_peak_gib(), round(time.time() - t0), heap(), flush=True)


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()

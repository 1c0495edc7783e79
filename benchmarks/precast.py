"""Inference in bf16 with the linear weights cast once (`bertkit.precast`) against autocast casting them at every
call, interleaved in one process, one torch thread: CPU ms per text of a run folder's `predict_rows` on SST-2 dev
sentences, in calls of 1, 8 and 32 texts (as a server's model calls hold them), and whether the answers are equal.

    python benchmarks/precast.py --model runs/sst2
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from onnx_setup import default_data_dir, dev_sentences  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a fine-tuned sequence-classification run folder")
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import torch

    from bertkit.precast import precast
    from bertkit.tasks import load_task

    torch.set_num_threads(1)
    rows = [{"text": t} for t in dev_sentences(args.data_dir, args.texts)]
    autocast_each_call, cast_once = load_task(args.model), load_task(args.model)
    autocast_each_call.model.eval()
    cast_once.model.eval()
    print(f"linear layers cast once: {precast(cast_once.model, 'bf16')}")

    def run(task, group: int):
        t0, answers = time.process_time(), []
        for k in range(0, len(rows), group):
            answers += task.predict_rows(rows[k:k + group], 16, "bf16")
        return 1000 * (time.process_time() - t0) / len(rows), answers

    print("| texts per call | autocast at every call, ms per text | weights cast once, ms per text | same answers |")
    print("|---|---|---|---|")
    for group in (1, 8, 32):
        run(autocast_each_call, group), run(cast_once, group)  # warm-up
        a, b, same = [], [], True
        for _ in range(args.rounds):  # interleaved
            ms, answers_a = run(autocast_each_call, group)
            a.append(ms)
            ms, answers_b = run(cast_once, group)
            b.append(ms)
            same &= answers_a == answers_b
        print(f"| {group} | {' / '.join(f'{x:.2f}' for x in a)} | {' / '.join(f'{x:.2f}' for x in b)} | {same} |")


if __name__ == "__main__":
    main()

"""Inference in bf16 with the linear weights cast once (`bertkit.precast`), and cast once and laid out for oneDNN
(its default on a CPU), against autocast casting them at every call, interleaved in one process, one torch thread:
CPU ms per text of a run folder's `predict_rows` on SST-2 dev sentences, in calls of 1, 8 and 32 texts (as a
server's model calls hold them), and whether the answers are equal.

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

    from bertkit.precast import PACKED_CALLS, precast
    from bertkit.tasks import load_task

    torch.set_num_threads(1)
    rows = [{"text": t} for t in dev_sentences(args.data_dir, args.texts)]
    tasks = {"autocast at every call": load_task(args.model), "weights cast once": load_task(args.model),
             "cast once, laid out for oneDNN": load_task(args.model)}
    for task in tasks.values():
        task.model.eval()
    print(f"linear layers cast once: {precast(tasks['weights cast once'].model, 'bf16', pack=False)}")
    calls = PACKED_CALLS[0]
    print(f"cast once and laid out: {precast(tasks['cast once, laid out for oneDNN'].model, 'bf16')} "
          f"(packed layers ran: {PACKED_CALLS[0] > calls})")

    def run(task, group: int):
        t0, answers = time.process_time(), []
        for k in range(0, len(rows), group):
            answers += task.predict_rows(rows[k:k + group], 16, "bf16")
        return 1000 * (time.process_time() - t0) / len(rows), answers

    print(f"| texts per call | {' | '.join(f'{name}, ms per text' for name in tasks)} | same answers |")
    print("|---|" + "---|" * (len(tasks) + 1))
    for group in (1, 8, 32):
        for task in tasks.values():  # warm-up
            run(task, group)
        ms: dict[str, list[float]] = {name: [] for name in tasks}
        same = True
        for _ in range(args.rounds):  # interleaved
            answers = []
            for name, task in tasks.items():
                t, a = run(task, group)
                ms[name].append(t)
                answers.append(a)
            same &= all(a == answers[0] for a in answers)
        print(f"| {group} | {' | '.join(' / '.join(f'{x:.2f}' for x in v) for v in ms.values())} | {same} |")


if __name__ == "__main__":
    main()

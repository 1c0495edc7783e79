"""What a QA evaluation holds and costs after the model: the outputs kept per window (array bytes, and what
tracemalloc sees allocated while the forward passes run), the post-processing's time and tracemalloc peak, the
metrics, and the predictions written to a file (to compare two checkouts byte for byte). One process, bf16.

    python benchmarks/qa_eval_memory.py --model runs/squad_v2 --recipe squad_v2 --predictions a.json
    python benchmarks/qa_eval_memory.py --model runs/squad_v2 --recipe squad --file ../shared/data/squad/train.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
import tracemalloc

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a fine-tuned question-answering run folder")
    parser.add_argument("--recipe", default="squad_v2", help="squad (best span always) or squad_v2")
    parser.add_argument("--data-dir", help="default: ../shared/data/<recipe>")
    parser.add_argument("--file", help="evaluate this SQuAD JSON file instead of the recipe's validation split")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--predictions", help="write the predictions (with their n-best lists) here")
    args = parser.parse_args()

    import bertkit
    from bertkit.config_files import load_recipe
    from bertkit.inference import forward_all
    from bertkit.metrics import SQUAD_BUILTIN, resolve_metrics
    from bertkit.tasks import load_task

    task = load_task(args.model, False)
    if args.recipe == "squad":  # a SQuAD 2.0 model read as v1.1: its best span, always
        task.allow_no_answer, task.null_threshold, task.metric_builtins = False, None, SQUAD_BUILTIN
    data_dir = args.data_dir or os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", args.recipe)
    cfg = load_recipe(args.recipe, {"data_dir": data_dir})
    examples = task.load_split(cfg, "validation", task.label_names, file=args.file)
    features = task.encode(examples)

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    outputs = forward_all(task, features, args.batch_size, args.precision)
    forward_s = time.perf_counter() - t0
    traced = tracemalloc.get_traced_memory()[0] - before  # numpy's own allocations (torch's buffers are not seen)
    tracemalloc.reset_peak()
    hooks = resolve_metrics(cfg.metrics, builtins=task.metric_builtins, num_labels=0)
    t0 = time.perf_counter()
    metrics, predictions = task.score(outputs, examples, features, hooks)
    score_s = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    if args.predictions:
        with open(args.predictions, "w") as f:
            json.dump(predictions, f)
    mib = 2**20
    print(json.dumps({"bertkit": os.path.dirname(bertkit.__file__), "recipe": args.recipe,
                      "questions": len(examples), "windows": len(features), "forward_s": round(forward_s, 1),
                      "outputs_array_MB": round(sum(a.nbytes for o in outputs for a in o.values()) / mib, 2),
                      "outputs_traced_MB": round(traced / mib, 2), "score_s": round(score_s, 2),
                      "score_traced_peak_MB": round(peak / mib, 1),
                      "max_rss_GiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                      "metrics": {k: v for k, v in metrics.items() if isinstance(v, float)}}))


if __name__ == "__main__":
    main()

"""How the run folders beside this file were made: with bertkit 0.2.0 (commit d26f4fc), tiny runs of its three
adapters on a 1-layer, 16-wide BERT with a small word-piece vocabulary, so that the folders stay small. Then the
0.2.0 `bertkit predict` answers on INPUTS are recorded in expected.json; tests/test_compat.py checks that this
version loads the folders and answers the same.

    git worktree add /tmp/bertkit-0.2.0 d26f4fc
    cd /tmp/bertkit-0.2.0 && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 BERTKIT_CACHE=off \\
        PYTHONPATH=/tmp/bertkit-0.2.0 /path/to/.venv/bin/python /path/to/tests/data/runs-0.2.0/make.py
"""

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent.parent
INPUTS = {"sst2": ("text", ["the film was good and funny\n", "a dull , boring plot\n"]),
          "conll2003": ("text", ["Peter Blackburn visited Paris with the United Nations today .\n"]),
          "squad": ("jsonl", [json.dumps({"id": "q1", "question": "which colour is mentioned ?",
                                          "context": "the film was red and long"}) + "\n"])}


KEEP = {"config.json", "config.yaml", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "metrics.json",
        "versions.json", "train_log.jsonl", "eval_metrics.jsonl"}


def conftest():
    spec = importlib.util.spec_from_file_location("bertkit_tests_conftest", TESTS / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_model(directory: Path, words: list[str]) -> Path:
    import numpy as np
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(words))]
    directory.mkdir(parents=True)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=128)
    model = BertModel(config)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "LayerNorm" in name or name.endswith("bias"):
                p.fill_(1.0 if name.endswith("LayerNorm.weight") else 0.0)
            else:
                p.copy_(torch.from_numpy(rng.normal(0.0, 0.02, tuple(p.shape)).astype(np.float32)))
    model.save_pretrained(directory)
    BertTokenizerFast(vocab_file=str(directory / "vocab.txt"), do_lower_case=True).save_pretrained(directory)
    return directory


def main() -> None:
    import bertkit

    assert bertkit.__version__ == "0.2.0", bertkit.__version__
    c = conftest()
    words = [w.lower() for w in c.FILLER + c.POSITIVE + c.NEGATIVE + c.NER_FILLER + c.NER_FIRST + c.NER_LAST
             + c.NER_LOC + c.NER_MISC + [w for org in c.NER_ORG for w in org] + c.COLOURS + ["jordan"]
             + " ".join(c.QUESTIONS).split() + [",", ".", "?"]]
    expected = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = tiny_model(tmp / "tiny", words)
        runs = {"sst2": ["--max-length", "32"], "conll2003": ["--max-length", "16", "--ner-casing"],
                "squad": ["--max-length", "48", "--max-question-length", "8", "--window-overlap", "8"]}
        for recipe, flags in runs.items():
            data = c.write_recipe_data(recipe, tmp / "data" / recipe)
            out = HERE / recipe
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "bertkit.cli", "finetune", recipe, "--model", str(model),
                            "--data-dir", str(data), "--precision", "fp32", "--lr", "1e-2", "--batch-size", "16",
                            "--max-steps", "6", "--seed", "42", "--output-dir", str(out), *flags], check=True)
            shutil.rmtree(out / "checkpoints")
            for f in out.iterdir():  # keep what loading, predicting and reporting read
                if f.name not in KEEP:
                    f.unlink()
            kind, lines = INPUTS[recipe]
            suffix = ".jsonl" if kind == "jsonl" else ".txt"
            (tmp / f"in-{recipe}{suffix}").write_text("".join(lines))
            proc = subprocess.run([sys.executable, "-m", "bertkit.cli", "predict", "--model", str(out), "--input",
                                   str(tmp / f"in-{recipe}{suffix}"), "--precision", "fp32"], check=True,
                                  capture_output=True, text=True)
            expected[recipe] = {"input": lines, "suffix": suffix,
                                "output": [json.loads(line) for line in proc.stdout.splitlines()]}
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Packaging: `finetune`, `evaluate`, `predict` and `extract` run on the core dependencies alone (issue 40, item 8),
and so does a task's request body → rows (tasks/requests.py: plain dataclasses; issue 41).
The optional extras (serve, onnx, peft, search, trackers, the dev tools) are hidden in a fresh process before
anything imports them."""

import subprocess
import sys

from .conftest import REPO, bertkit_env

# httpx is not among them: huggingface_hub (under transformers and datasets) requires it, and imports it at start-up
# in the floors' versions
EXTRAS = ["pydantic", "fastapi", "starlette", "uvicorn", "onnx", "onnxruntime", "onnxscript", "peft", "optuna",
          "tensorboard"]

RUNNER = """
import importlib, json, pkgutil, sys
from pathlib import Path

EXTRAS = {extras!r}
for name in EXTRAS:
    sys.modules[name] = None  # `import name` now raises ImportError, as where the extra is not installed
for name in EXTRAS:
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"{{name}} is not hidden")

from bertkit.cli import main

model, data, out = (Path(a) for a in sys.argv[1:])
run, texts = out / "run", out / "texts.txt"
texts.write_text("a wonderful , funny film\\nthe plot was dull\\n")
assert main(["finetune", "sst2", "--model", str(model), "--data-dir", str(data), "--precision", "fp32", "--lr", "1e-2",
             "--batch-size", "16", "--epochs", "1", "--output-dir", str(run)]) == 0
assert (run / "model.safetensors").is_file() and (run / "report_confusion_dev.png").is_file()
assert main(["evaluate", "--model", str(run), "--data-dir", str(data)]) == 0
assert "accuracy" in json.loads((run / "eval_sst2_dev.json").read_text())
assert main(["predict", "--model", str(run), "--input", str(texts), "--output", str(out / "pred.jsonl")]) == 0
assert len((out / "pred.jsonl").read_text().splitlines()) == 2
assert main(["extract", "--model", str(model), "--input", str(texts), "--output", str(out / "features"),
             "--layers", "last", "--dtype", "float32", "--precision", "fp32"]) == 0
assert (out / "features" / "meta.json").is_file()
import bertkit.tasks
for m in pkgutil.iter_modules(bertkit.tasks.__path__):  # every task's predict and report I/O and requests too
    importlib.import_module("bertkit.tasks." + m.name)
from bertkit.tasks import load_task
from bertkit.tasks.requests import RequestError, RequestLimits
task = load_task(str(run))  # a request body (a plain dataclass) → rows, with no web framework
body, field = task.request_body()
assert task.request_rows(body(texts=["a film"], probs=True), RequestLimits())[0] == [{{"text": "a film"}}]
try:
    task.request_rows(body(texts=[" "]), RequestLimits())
except RequestError as e:
    assert e.field == "texts[0]", e
else:
    raise AssertionError("an empty text passed")
imported = [m for m in sys.modules if m.split(".")[0] in EXTRAS and sys.modules[m] is not None]
assert not imported, imported
print("ok")
"""


def test_finetune_evaluate_predict_extract_need_no_extras(tiny_bert, sst2_dir, tmp_path):
    script = tmp_path / "runner.py"
    script.write_text(RUNNER.format(extras=EXTRAS))
    proc = subprocess.run([sys.executable, str(script), str(tiny_bert), str(sst2_dir), str(tmp_path)], cwd=REPO,
                          env=bertkit_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]

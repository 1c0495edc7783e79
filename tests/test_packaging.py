"""Packaging: `finetune`, `evaluate`, `predict` and `extract` run on the core dependencies alone (issue 40, item 8),
and so does a task's request body → rows (tasks/requests.py: plain dataclasses; issue 41); a command or flag that needs
an extra says which, in one line, before it writes anything.
The optional extras (serve, onnx, peft, search, trackers, the dev tools) are hidden in a fresh process before
anything imports them."""

import subprocess
import sys

import pytest

from .conftest import REPO, bertkit_env, exported

# httpx is not among them: huggingface_hub (under transformers and datasets) requires it, and imports it at start-up
# in the floors' versions
EXTRAS = ["pydantic", "fastapi", "starlette", "uvicorn", "onnx", "onnxruntime", "onnxscript", "peft", "optuna",
          "tensorboard"]

HIDE = """
import sys

EXTRAS = {extras!r}
for name in EXTRAS:
    sys.modules[name] = None  # `import name` now raises ImportError, as where the extra is not installed
for name in EXTRAS:
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"{{name}} is not hidden")
"""

RUNNER = HIDE + """
import importlib, json, pkgutil
from pathlib import Path

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


NEEDS = HIDE + """
import contextlib, io, json
from pathlib import Path

from bertkit.cli import main

model, data, run, export, out = (Path(a) for a in sys.argv[1:])
(out / "texts.txt").write_text("a wonderful , funny film\\n")
train = ["finetune", "sst2", "--model", str(model), "--data-dir", str(data), "--max-steps", "1"]
cases = [  # (argv, what the error line says, what must not be written)
    (["serve", "--model", str(run), "--port", "0"], "bertkit serve needs fastapi, starlette, pydantic, uvicorn: "
     "pip install 'bertkit[serve]'", None),
    (["export", "--model", str(run), "--output", str(out / "onnx")], "bertkit export needs onnx, onnxscript, "
     "onnxruntime: pip install 'bertkit[onnx]'", out / "onnx"),
    (["predict", "--model", str(export), "--input", str(out / "texts.txt"), "--output", str(out / "p.jsonl")],
     "(ONNX Runtime) needs onnxruntime: pip install 'bertkit[onnx]'", out / "p.jsonl"),
    (train + ["--peft", "lora", "--output-dir", str(out / "lora")], "--peft needs peft: pip install 'bertkit[peft]'",
     out / "lora"),
    (["search", "sst2", "--model", str(model), "--data-dir", str(data), "--trials", "1", "--output-dir",
      str(out / "search")], "bertkit search needs optuna: pip install 'bertkit[search]'", out / "search"),
    (train + ["--report-to", "tensorboard", "--output-dir", str(out / "tb")], "the tensorboard package is not "
     "installed", out / "tb"),
]
for argv, says, unwritten in cases:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    lines = err.getvalue().strip().splitlines()
    assert code == 2 and says in lines[-1] and "Traceback" not in err.getvalue(), (argv, code, err.getvalue()[-2000:])
    assert len(lines) == 1, (argv, lines)  # said before anything else: --peft after the new head's line
    assert unwritten is None or not unwritten.exists(), (argv, sorted(p.name for p in unwritten.parent.iterdir()))
print("ok")
"""


def test_what_needs_an_extra_names_it_in_one_line_and_writes_nothing(tmp_path_factory, tiny_bert, sst2_dir,
                                                                      tmp_path):
    run, export = exported(tmp_path_factory, tiny_bert, "sst2")
    script = tmp_path / "needs.py"
    script.write_text(NEEDS.format(extras=EXTRAS))
    proc = subprocess.run([sys.executable, str(script), str(tiny_bert), str(sst2_dir), str(run), str(export),
                           str(tmp_path)], cwd=REPO, env=bertkit_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_the_wheel_holds_every_recipe_and_its_licence(tmp_path):
    """`python -m build` / `pip install .` build a wheel from the source tree, where bertkit/recipes is a link to
    ../recipes: the wheel must hold the files themselves, and `bertkit recipes` run from the unpacked wheel, away from
    the clone, must list every one. The build needs setuptools 77 or newer (pyproject's `license` is an SPDX string);
    pip's build isolation installs it, here the environment's own is used (no network)."""
    import importlib.metadata
    import shutil
    import zipfile

    try:
        found = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:  # a venv of Python 3.12 or newer has none of its own
        found = "0 (none)"
    if tuple(int(p) for p in found.split()[0].split(".")[:2]) < (77, 0):
        pytest.skip(f"setuptools {found} here; building the wheel needs 77 or newer (pip's build isolation gets it)")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("bertkit", "recipes"):  # links kept, as in a clone
        shutil.copytree(REPO / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                           str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("bertkit-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        z.extractall(tmp_path / "site")
    recipes = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))
    packed = sorted(n.removeprefix("bertkit/recipes/").removesuffix(".yaml") for n in names
                    if n.startswith("bertkit/recipes/"))
    assert packed == recipes
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {**bertkit_env(), "PYTHONPATH": str(tmp_path / "site")}
    proc = subprocess.run([sys.executable, "-c", "import bertkit, sys; print(bertkit.__file__); "
                           "from bertkit.cli import main; sys.exit(main(['recipes']))"], cwd=away, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, *rows = proc.stdout.splitlines()
    assert where.startswith(str(tmp_path / "site"))
    assert sorted(r.split()[0] for r in rows if r.strip()) == sorted([*recipes, "glue"])  # glue: the GLUE recipes

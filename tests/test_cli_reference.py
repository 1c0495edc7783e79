"""The command line starts fast, `python -m bertkit` works, `finetune --help` is grouped, docs/cli.md is current."""

import dataclasses
import json
import subprocess
import sys

from bertkit.cli import reference
from bertkit.config import FLAG_GROUPS, FinetuneConfig

from .conftest import REPO

HEAVY = ("torch", "transformers", "datasets", "accelerate", "evaluate", "sklearn", "numpy", "pandas", "uvicorn",
         "fastapi", "onnxruntime")


def test_help_and_version_import_none_of_the_heavy_libraries():
    code = f"""import json, sys
from bertkit.cli import main
for argv in (["--help"], ["--version"], ["finetune", "--help"], ["predict", "--help"], ["serve", "--help"]):
    try:
        main(argv)
    except SystemExit:
        pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_python_dash_m_bertkit():
    proc = subprocess.run([sys.executable, "-m", "bertkit", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("bertkit ")


def test_every_finetune_field_is_in_exactly_one_help_group():
    grouped = [name for names in FLAG_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(f.name for f in dataclasses.fields(FinetuneConfig))


def test_finetune_help_lists_flags_by_concern():
    text = reference()
    section = text[text.index("## bertkit finetune"):text.index("## bertkit evaluate")]
    positions = [section.index(f"\n{title}:\n") for title in FLAG_GROUPS]
    assert positions == sorted(positions)
    assert section.index("\n  --lr X") > section.index("\noptimisation:\n") > section.index("\n  --data-dir X")


def test_the_cli_reference_in_docs_is_current():
    assert (REPO / "docs" / "cli.md").read_text() == reference(), \
        "docs/cli.md is stale: regenerate it with the command at its top"

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


def test_quickstart_reads_local_data_offline_else_the_hub_else_says_how(tmp_path):
    import pytest

    from bertkit.errors import BertkitError
    from bertkit.quickstart import decide

    from .conftest import write_sst2

    unreachable, reachable = (lambda: False), (lambda: True)
    write_sst2(tmp_path / "data" / "sst2", n_train=8, n_dev=4)
    source, flags, env, _ = decide(str(tmp_path / "data"), unreachable)
    assert source == "local" and flags == ["--data-dir", str(tmp_path / "data" / "sst2")]
    assert env == {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    for data_dir in (None, str(tmp_path / "elsewhere")):
        source, flags, env, message = decide(data_dir, reachable)
        assert source == "hub" and flags == [] and set(env.values()) == {""} and "nyu-mll/glue" in message
        with pytest.raises(BertkitError, match="BERTKIT_DATA_DIR=/path/to/data"):
            decide(data_dir, unreachable)

"""The command line starts fast, `python -m bertkit` works, `finetune --help` is grouped, docs/cli.md is current."""

import dataclasses
import json
import re
import subprocess
import sys

from bertkit.cli import reference
from bertkit.commands.finetune import FLAG_GROUPS, NOT_FLAGS, REFERENCE_RECIPES
from bertkit.config import Compute, HubSource, RunConfig

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


def finetune_groups() -> dict[str, set[str]]:
    """{group title: the destinations of its flags} of `bertkit finetune`'s parser (no recipe: no task options)."""
    import argparse

    from bertkit.cli import build_parser

    parser = build_parser(["finetune"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["finetune"]
    return {g.title: {a.dest for a in g._group_actions} for g in sub._action_groups}


def test_every_finetune_field_is_in_exactly_one_help_group():
    """Every run field is a flag in one group, except the task type and the nested groups (hub and compute: flags
    of their own groups; task_options: the task's own flags)."""
    grouped = [name for names in FLAG_GROUPS.values() for name in names]
    assert sorted(grouped + list(NOT_FLAGS)) == sorted(f.name for f in dataclasses.fields(RunConfig))
    assert len(set(grouped)) == len(grouped) and not set(grouped) & set(NOT_FLAGS)
    groups = finetune_groups()
    assert all(groups[title] == set(names) for title, names in FLAG_GROUPS.items())
    hub = next(dests for dests in groups.values() if "hub_dataset" in dests)
    compute = next(dests for dests in groups.values() if "precision" in dests)
    assert hub == {f"hub_{f.name}" for f in dataclasses.fields(HubSource)}
    assert compute == {f.name for f in dataclasses.fields(Compute)}


def test_finetune_help_lists_flags_by_concern():
    text = reference()
    section = text[text.index("## bertkit finetune"):text.index("## bertkit evaluate")]
    positions = [section.index(f"\n{title}:\n") for title in FLAG_GROUPS]
    assert positions == sorted(positions)
    assert section.index("\n  --lr X") > section.index("\noptimisation:\n") > section.index("\n  --data-dir X")


def test_the_reference_shows_each_built_in_tasks_options():
    """`finetune` without a recipe has no task options; the reference adds each built-in task's, from one recipe."""
    from bertkit.config_files import recipe_task
    from bertkit.tasks import task_names

    text = reference()
    plain = text[text.index("## bertkit finetune\n"):text.index("### bertkit finetune")]
    assert "task options (" not in plain and "--text-column" not in plain
    assert sorted(recipe_task(r) for r in REFERENCE_RECIPES) == sorted(task_names())
    sections = {part.split("\n", 1)[0]: part for part in re.split(r"\n(?=#)", text)}  # heading line → its text
    for recipe, own, other in (("sst2", "--doc-pooling", "--casing"), ("conll2003", "--casing", "--doc-pooling"),
                               ("squad", "--max-question-length", "--ending-columns"),
                               ("swag", "--ending-columns", "--max-question-length")):
        part = sections[f"### bertkit finetune {recipe} (task options)"]
        assert f"task options ({recipe_task(recipe)}; recipe: task_options)" in part, recipe
        assert own in part and other not in part, recipe


def test_the_reference_names_a_flags_value_once_after_its_aliases_whatever_the_python():
    """Python 3.13's argparse writes `--recipe, --task RECIPE` where 3.11 wrote `--recipe RECIPE, --task RECIPE`:
    the reference is written the 3.13 way by both, help text on the same line keeping its column."""
    from bertkit.cli import _aliases_once

    assert _aliases_once("  --a X, --b X, --c X  help\n  --d Y\n  -q, --quiet  h\n  --x A_B, --yy A_B\n") == \
        "  --a, --b, --c X      help\n  --d Y\n  -q, --quiet  h\n  --x, --yy A_B\n"
    assert _aliases_once("  --a X, --b Y\n") == "  --a X, --b Y\n"  # two values named apart: not aliases of one
    assert "--recipe, --task RECIPE" in reference()


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


def test_every_option_of_every_command_says_what_it_does():
    import argparse

    from bertkit.cli import build_parser

    parsers = [build_parser()] + [build_parser(["finetune", recipe]) for recipe in REFERENCE_RECIPES]
    silent = set()
    for parser in parsers:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for name, command in sub.choices.items():
            silent |= {f"{name} {a.option_strings[-1] if a.option_strings else a.dest}" for a in command._actions
                       if not isinstance(a, argparse._HelpAction) and not a.help}
    assert not silent, sorted(silent)

"""The docstring examples written with `>>>` prompts run, as doctests, so their printed results are checked claims.
Examples that need a trained run folder, a data file or a global registration are written as plain code (no
prompts) and are not run here; the README's quickstarts (tests/test_readme.py) and each command's tests run those
paths."""

from __future__ import annotations

import doctest
import importlib
import re

import pytest

from .conftest import REPO

MODULES = [
    "bertkit.config",
    "bertkit.config_files",
    "bertkit.data.conll",
    "bertkit.data.tags",
    "bertkit.device",
    "bertkit.errors",
    "bertkit.extract.extractor",
    "bertkit.extract.layers",
    "bertkit.extract.scalar_mix",
    "bertkit.memory",
    "bertkit.metrics",
    "bertkit.metrics.classification",
    "bertkit.metrics.multi_label",
    "bertkit.metrics.ner",
    "bertkit.metrics.regression",
    "bertkit.metrics.squad",
    "bertkit.metrics.squad_v2",
    "bertkit.tasks.casing",
    "bertkit.tasks.qa_spans",
    "bertkit.tasks.token_classification",
    "bertkit.tasks.windows",
    "bertkit.typed",
]
FENCE = re.compile(r"^[ \t]*```\w*[ \t]*$", re.M)


class FencedParser(doctest.DocTestParser):
    """The docstrings fence their examples in Markdown (```python ... ```): a fence line is not expected output."""

    def parse(self, string, name="<string>"):
        return super().parse(FENCE.sub("", string), name)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    tests = [t for t in doctest.DocTestFinder(parser=FencedParser()).find(importlib.import_module(name)) if t.examples]
    assert tests, f"{name} has no `>>>` example left: take it off MODULES"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.summarize(verbose=False).failed == 0, "".join(report)


def test_every_prompt_in_bertkit_is_run_here():
    """A `>>>` example is a claim of output: each module that has one is in MODULES (or the example is plain code)."""
    with_prompts = {".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
                    for path in (REPO / "bertkit").rglob("*.py") if ">>> " in path.read_text(encoding="utf-8")}
    assert with_prompts <= set(MODULES), sorted(with_prompts - set(MODULES))

"""The shape the code keeps: no import circles, no task known by name outside bertkit/tasks/, a run config of at most
40 fields, tests that share helpers through conftest only."""

from __future__ import annotations

import ast
import dataclasses

from .conftest import REPO

PACKAGE = REPO / "bertkit"
TASK_NAMES = {"sequence-classification", "token-classification", "question-answering", "multiple-choice"}
TASK_CLASSES = {"SequenceClassification", "SequenceRegression", "MultiLabelClassification", "TokenClassification",
                "QuestionAnswering", "MultipleChoice"}


def module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lazy_map(tree: ast.Module) -> dict[str, str]:
    """A package `__init__`'s `_PUBLIC = {name: submodule}` (names imported on first use)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_PUBLIC" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def runtime_nodes(tree: ast.AST):
    """Every node of `tree` but those under `if TYPE_CHECKING:` (imports for annotations only)."""
    for node in ast.iter_child_nodes(tree):
        test = getattr(node, "test", None) if isinstance(node, ast.If) else None
        if test is not None and "TYPE_CHECKING" in ast.unparse(test):
            yield from (n for other in node.orelse for n in [other, *runtime_nodes(other)])
            continue
        yield node
        yield from runtime_nodes(node)


def external_imports(tree: ast.AST) -> set[str]:
    """The top-level names of the packages outside bertkit that a module imports (TYPE_CHECKING aside)."""
    names = set()
    for node in runtime_nodes(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module.split(".")[0])
    return names - {"bertkit"}


def import_graph() -> dict[str, set[str]]:
    """bertkit module → the bertkit modules it imports, at module level or inside functions (a lazy import is an
    import all the same; one under `if TYPE_CHECKING:` is not); `from pkg import name` counts the submodule that
    `name` is, or that pkg's lazy `_PUBLIC` maps it to."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    trees = {m: ast.parse(p.read_text()) for m, p in files.items()}
    packages = {m for m, p in files.items() if p.name == "__init__.py"}
    graph = {m: set() for m in files}
    for module, tree in trees.items():
        here = module if module in packages else module.rpartition(".")[0]
        for node in runtime_nodes(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
                targets = []
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in files:
                        targets.append(sub)
                    else:
                        targets.append(base)
                        lazy = lazy_map(trees[base]) if base in trees else {}
                        if alias.name in lazy:
                            targets.append(f"{base}.{lazy[alias.name]}")
            else:
                continue
            graph[module] |= {t for t in targets if t in files and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_among_bertkit_modules():
    graph = import_graph()
    assert graph["bertkit.commands.glue"] and graph["bertkit.config"]  # the graph is really built
    assert "bertkit.tasks.registry" in graph["bertkit.config"]
    assert cycles(graph) == []


# The floors of docs/design.md, top to bottom: a module imports its own floor and those below, never one above.
FLOORS = [
    ["bertkit.__main__", "bertkit.cli", "bertkit.commands"],
    ["bertkit.hpsearch", "bertkit.serve", "bertkit.export"],
    ["bertkit.training", "bertkit.report", "bertkit.search_report"],
    ["bertkit.config", "bertkit.config_files", "bertkit.quickstart"],
    ["bertkit.tasks"],
    ["bertkit.inference", "bertkit.graphs", "bertkit.precast", "bertkit.extract", "bertkit.data", "bertkit.cpu",
     "bertkit.metrics", "bertkit.feature_cache", "bertkit.models", "bertkit.device", "bertkit.plots",
     "bertkit.trackers"],
    ["bertkit.typed", "bertkit.memory", "bertkit.batching", "bertkit.buckets", "bertkit.families", "bertkit.utils",
     "bertkit.errors", "bertkit"],
]


def floor(module: str) -> int | None:
    """The index in FLOORS (0 = the top) of the longest prefix that holds `module`."""
    found = [(len(p), i) for i, prefixes in enumerate(FLOORS) for p in prefixes
             if module == p or module.startswith(p + ".")]
    return max(found)[1] if found else None


def test_no_import_climbs_to_a_higher_floor():
    """Lazy imports count (an import is an import); a new module must be given its floor here and in the docs."""
    graph = import_graph()
    assert [m for m in graph if floor(m) is None] == []
    climbing = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets if floor(t) < floor(m))
    assert climbing == []
    assert floor("bertkit.tasks.base") > floor("bertkit.config") > floor("bertkit.training.loop")  # the rule bites


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


WEB = {"pydantic", "fastapi", "starlette", "uvicorn"}


def test_tasks_import_neither_serve_nor_export_nor_a_web_framework():
    """A task's requests are plain dataclasses (tasks/requests.py): serve and export adapt them, tasks never reach up
    to them (TYPE_CHECKING aside)."""
    graph = import_graph()
    assert "bertkit.tasks.requests" in graph["bertkit.serve.schemas"]  # the arrow down is seen
    tasks = sorted(m for m in graph if m == "bertkit.tasks" or m.startswith("bertkit.tasks."))
    assert len(tasks) > 10
    up = {m: sorted(t for t in graph[m] if t.split(".")[1] in ("serve", "export")) for m in tasks}
    assert {m: t for m, t in up.items() if t} == {}
    web = {str(p.relative_to(REPO)): sorted(external_imports(ast.parse(p.read_text())) & WEB)
           for p in (PACKAGE / "tasks").rglob("*.py")}
    assert {k: v for k, v in web.items() if v} == {}
    assert external_imports(ast.parse((PACKAGE / "serve" / "app.py").read_text())) >= {"fastapi"}  # it sees them


def test_imports_under_type_checking_do_not_count():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pydantic\n"
                     "else:\n    import json\ndef f():\n    import fastapi\n")
    assert external_imports(tree) == {"typing", "json", "fastapi"}


def string_constants(path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def names_used(path) -> set[str]:
    """Identifiers a module reads (a task class compared with isinstance/issubclass, or imported, would be one)."""
    tree = ast.parse(path.read_text())
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(tree)
                                                                       if isinstance(n, ast.Attribute)} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def test_no_module_outside_tasks_knows_a_task_by_name():
    """Every command, the trainer, serve, export and the reports reach a task through the registry. The one
    exception: the run config's default task (a notebook's `run_config()` without a task)."""
    outside = [p for p in PACKAGE.rglob("*.py") if "tasks" not in p.relative_to(PACKAGE).parts]
    assert len(outside) > 30
    found = {str(p.relative_to(REPO)): sorted(string_constants(p) & TASK_NAMES | names_used(p) & TASK_CLASSES)
             for p in outside}
    found = {k: v for k, v in found.items() if v}
    assert found == {"bertkit/config.py": ["sequence-classification"]}
    config = (PACKAGE / "config.py").read_text()
    assert config.count('"sequence-classification"') == 1 and 'DEFAULT_TASK = "sequence-classification"' in config


def test_run_config_has_at_most_40_fields_and_is_frozen():
    from bertkit.config import RunConfig, run_config

    assert len(dataclasses.fields(RunConfig)) <= 40
    cfg = run_config(epochs=1)
    try:
        cfg.lr = 1.0
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("RunConfig is not frozen")


def test_tests_do_not_import_each_other():
    for path in (REPO / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level:
                assert not node.module.startswith("test_"), f"{path.name} imports {node.module}"


def test_every_bertkit_name_that_scripts_and_tests_import_exists():
    """benchmarks/, examples/ and tests/ import bertkit names that exist (a module split that leaves a script
    importing the old place fails here, not when someone runs the script)."""
    import importlib
    import importlib.util

    missing = []
    for folder in ("benchmarks", "examples", "tests"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("bertkit"):
                    module = importlib.import_module(node.module)
                    missing += [f"{path.relative_to(REPO)}:{node.lineno}: {node.module}.{a.name}"
                                for a in node.names if not hasattr(module, a.name) and not (
                                    hasattr(module, "__path__")  # a package's submodule, not imported yet
                                    and importlib.util.find_spec(f"{node.module}.{a.name}"))]
    assert not missing, missing


def test_no_public_name_is_shadowed_by_a_submodule_of_its_name():
    """`bertkit.search` was the function until its module (bertkit/search.py) was imported, by the search command or
    by a user's `from bertkit.search import ...`; then the module, and `bertkit.search("sst2")` a TypeError."""
    import importlib
    import pkgutil

    import bertkit

    modules = {m.name.rpartition(".")[2] for m in pkgutil.walk_packages(bertkit.__path__, "bertkit.")
               if m.name.count(".") == 1}
    assert "tasks" in modules and "training" in modules  # really walked
    assert sorted(set(bertkit.__all__) & modules) == []
    importlib.import_module("bertkit.hpsearch")
    assert callable(bertkit.search) and bertkit.search.__module__ == "bertkit.hpsearch"

"""pyproject.toml's floors are the versions constraints-min.txt pins, which `make test-min` runs the suite on."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement

from .conftest import REPO

TRANSITIVE = {"pyarrow"}  # pinned in constraints-min.txt for another package's sake (the comment there says why)


def floors() -> dict[str, str]:
    """{name: floor} of the runtime dependencies (torch included), the optional runtime extras and the build's own
    (setuptools: tests/test_packaging.py builds the wheel with the environment's)."""
    toml = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = toml["project"]
    extras = [r for name, reqs in project["optional-dependencies"].items() if name != "dev" for r in reqs]
    out = {}
    for line in project["dependencies"] + extras + toml["build-system"]["requires"]:
        req = Requirement(line)
        if not req.specifier:  # an unversioned extra (the packaged model) has no floor
            continue
        (spec,) = req.specifier
        assert spec.operator == ">=", line
        out[req.name.lower()] = spec.version
    return out


def pins() -> dict[str, str]:
    out = {}
    for line in (REPO / "constraints-min.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[name.strip().lower()] = version.strip()
    return out


def test_every_floor_is_pinned_for_make_test_min_and_nothing_else():
    found, pinned = floors(), pins()
    assert found and found == {k: v for k, v in pinned.items() if k not in TRANSITIVE}
    assert TRANSITIVE <= pinned.keys()

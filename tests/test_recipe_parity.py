"""Every recipe gives the same metrics as bertkit 0.2.0 at the same seed on the fixed tiny model: 12 steps of each
recipe on its synthetic files (conftest.recipe_fingerprint), against the values recorded from 0.2.0 itself
(tests/data/recipe_metrics.json, by tests/record_recipe_metrics.py run with 0.2.0 importable). Under the torch and
transformers versions and the kind of CPU they were recorded with, equal to the last bit; under others, to 1e-3."""

from __future__ import annotations

import json

import pytest

from .conftest import PARITY_RECIPES, REPO, make_fixed_tiny_bert, parity_key, recipe_fingerprint

RECORDED = json.loads((REPO / "tests" / "data" / "recipe_metrics.json").read_text())


@pytest.fixture(scope="module")
def fixed_tiny(tmp_path_factory):
    return make_fixed_tiny_bert(tmp_path_factory.mktemp("fixed-tiny"))


def recorded_values():
    """(0.2.0's values, whether they were recorded with these torch/transformers versions on this kind of CPU): the
    last bits of a float differ between CPU kinds (their matrix kernels sum in other orders), so only a record of
    the same versions and CPU kind (`parity_key`) is compared bit for bit."""
    key = parity_key()
    if key in RECORDED:
        return RECORDED[key], True
    return next(iter(RECORDED.values())), False


def test_the_record_is_0_2_0s_and_covers_every_recipe():
    from bertkit.config_files import recipe_names

    for entry in RECORDED.values():
        assert entry["bertkit"] == "0.2.0"
        assert sorted(entry["recipes"]) == sorted(PARITY_RECIPES)
    assert set(recipe_names()) - set(PARITY_RECIPES) == {"swag"}  # the one recipe 0.2.0 did not have


@pytest.mark.usefixtures("cpu_only")  # recorded on CPUs, with the CPU speed-ups' dropout masks
@pytest.mark.parametrize("recipe", list(PARITY_RECIPES))
def test_recipe_metrics_equal_0_2_0(recipe, fixed_tiny, tmp_path):
    entry, same_versions = recorded_values()
    expected = entry["recipes"][recipe]
    got = recipe_fingerprint(recipe, fixed_tiny, tmp_path)
    if same_versions:
        assert got == expected
    else:
        assert close(got, expected)


def close(got, want) -> bool:
    """Nested dicts of numbers equal to 1e-3 (pytest.approx takes no nested dicts)."""
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(close(got[k], want[k]) for k in want)
    return got == pytest.approx(want, rel=1e-3, abs=1e-3)


def test_close_compares_nested_values():
    assert close({"a": {"b": 1.0}, "c": 2}, {"a": {"b": 1.0005}, "c": 2})
    assert not close({"a": {"b": 1.0}}, {"a": {"b": 1.1}}) and not close({"a": 1}, {"b": 1})

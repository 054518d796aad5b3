"""`manage.py bench_steps` (bench/steps.py) for real: effects through Django's handler
against the demo downstream. Every step it names is still a function an effect goes through
(each took time: a step moved off the path would read 0, a renamed one fails to patch), the
top-level steps do not overlap, and every patched function is put back after."""

import importlib

import pytest

from bench.steps import STEPS, measure

pytestmark = pytest.mark.django_db(transaction=True)


def _function(module_name: str, path: str):
    owner = importlib.import_module(module_name)
    for part in path.split("."):
        owner = getattr(owner, part)
    return owner


def test_every_step_is_on_an_effect_s_path_and_the_parts_add_up():
    before = {(m, p): _function(m, p) for _, m, p in STEPS}
    said = []
    rows = dict(measure(20, 2, say=said.append))
    assert len(said) == 2
    for label, _, _ in STEPS:
        assert rows[label] > 0, f"{label.strip()}: never called on an effect's path"
    # The top-level steps do not overlap: together they are less than the whole request.
    assert rows["the rest"] > 0
    assert rows["  its lookup, the token's and the proposal's"] <= rows["authentication"]
    assert rows["  the tool call"] + rows["  the settle"] <= rows["the dispatch"]
    assert {(m, p): _function(m, p) for _, m, p in STEPS} == before

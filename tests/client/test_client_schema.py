"""The typed client is the schema: `client/generate.py --check` (run by `make test`) finds
no difference between the committed `takeover_client.models`/`.api` and what the API's
schema generates, covers every operation, and fails, naming the field, on a renamed one."""

import copy
import importlib.util

import pytest
import yaml
from django.core.management import call_command
from takeover_client import api

from ..conftest import ROOT


@pytest.fixture(scope="module")
def generate():
    spec = importlib.util.spec_from_file_location("generate", ROOT / "client" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def document(tmp_path_factory):
    path = tmp_path_factory.mktemp("schema") / "openapi.yaml"
    call_command("spectacular", "--file", str(path))
    return yaml.safe_load(path.read_text())


def test_the_client_matches_the_schema_and_covers_every_operation(generate, document):
    assert generate.differences(document) == ""
    operations = [
        op["operationId"]
        for item in document["paths"].values()
        for method, op in item.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]
    assert len(api.OPERATIONS) == len(operations)
    assert all(hasattr(api.Api, name) and hasattr(api.AsyncApi, name) for name in api.OPERATIONS)


def test_a_renamed_field_fails_the_check_and_names_the_field(generate, document):
    renamed = copy.deepcopy(document)
    action = renamed["components"]["schemas"]["ActionOut"]
    action["properties"]["action_id"] = action["properties"].pop("id")
    action["required"] = [("action_id" if f == "id" else f) for f in action["required"]]
    diff = generate.differences(renamed)
    assert "-    id: str\n" in diff and "+    action_id: str\n" in diff
    assert "client/src/takeover_client/models/resources.py (from the schema)" in diff

"""core.rows: the JSON a hand-written statement's rows are written as."""

import datetime
import decimal
import json
import uuid

import pytest
from django.utils.translation import gettext_lazy

from core import rows
from runs.models import Action
from runs.states import ActionState


@pytest.fixture
def w(world):
    world.tool("update_ticket")
    world.run = world.start_run()
    return world


def test_a_row_is_the_json_the_stdlib_encoder_wrote():
    """orjson writes a row as Django's encoder (with full microseconds) did, value for
    value: what it writes itself and what it hands back."""
    row = {
        "id": uuid.uuid4(),
        "at": datetime.datetime(2026, 12, 2, 21, 5, 7, 123456, tzinfo=datetime.UTC),
        "whole_second": datetime.datetime(2026, 12, 2, 21, 5, 7, tzinfo=datetime.UTC),
        "day": datetime.date(2026, 12, 2),
        "state": ActionState.QUEUED,
        "amount": decimal.Decimal("12.50"),
        "lease": datetime.timedelta(seconds=31, microseconds=5),
        "label": gettext_lazy("queued"),
        "desired_state": {"status": "done", "nested": [1, 2.5, None, True, "é\u2028"]},
    }
    written = rows._dumps(row)
    assert isinstance(written, bytes)  # orjson's, not the fallback
    assert json.loads(written) == json.loads(rows._encode(row))


def test_an_integer_past_64_bits_is_written_too(w):
    """orjson refuses it; the stdlib encoder writes it, through the real proposal."""
    text = json.dumps({"tool": "update_ticket", "target": "t-big", "desired_state": {"n": 2**70}})
    response = w.agent.client().post(
        f"/api/v1/runs/{w.run['id']}/actions",
        text,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=f"k-{uuid.uuid4().hex}",
    )
    assert response.status_code == 201, response.content
    action = Action.objects.get(pk=response.json()["id"])
    assert action.desired_state == {"n": 2**70}

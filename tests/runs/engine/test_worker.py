"""The broker is only a wake-up call: with it down, proposals still succeed (the row is the
outbox), and the sweeper dispatches them once a worker can hear again."""

import logging
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings

from runs.models import Action
from runs.wakeup import wakeup_taken

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(
        not settings.CELERY_BROKER_URL.startswith("filesystem://"),
        reason="the outage is staged by removing the default broker's directory; with "
        "CELERY_BROKER_URL set there is no directory to remove",
    ),
]


@contextmanager
def broker_down(settings):
    """Take the default broker away for real: its queue directory disappears, so every
    publish fails (for this process and the worker alike) until it is put back."""
    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_out"])
    away = folder.with_name(folder.name + ".away")
    folder.rename(away)
    try:
        yield
    finally:
        away.rename(folder)


@pytest.mark.parametrize("listening", [True, False], ids=["listening", "broker-wakeups"])
def test_proposal_succeeds_while_the_broker_is_down_and_a_listening_worker_takes_it(
    world, worker, caplog, settings, listening
):
    # `listening` is this (web) process's WORKER_LISTEN: on, a proposal wakes workers by
    # its notification alone; off, it also sends the broker's wake-up, which fails here.
    settings.WORKER_LISTEN = listening
    world.tool("update_ticket")
    run = world.start_run()
    target = f"ticket:{uuid.uuid4().hex[:8]}"
    # No wake-up pending from earlier tests (proposals nobody drained): this proposal's
    # wake-up must really be attempted, and fail, for the log line below to exist.
    wakeup_taken()
    with broker_down(settings), caplog.at_level(logging.ERROR):
        response = world.propose(
            run["id"],
            f"k-{uuid.uuid4().hex}",
            tool="update_ticket",
            target=target,
            desired_state={"status": "open"},
        )
        assert response.status_code == 201
        # Off: the wake-up call really failed, and was logged; on: none was attempted.
        assert ("on_commit" in caplog.text) is not listening
        action_id = response.json()["id"]
        # The worker listens (runs.engine.listen): it heard of the row from PostgreSQL, not
        # from the broker, and works it while the broker is still down.
        final = world.wait_action(action_id, timeout=10)
        assert final["state"] == "succeeded"
        assert Action.objects.get(pk=action_id).state == "succeeded"
    assert world.downstream.mutations(target) == 1

    # With the broker back, a new proposal wakes a worker at once, not at the next sweep.
    later = world.propose(
        run["id"],
        f"k-{uuid.uuid4().hex}",
        tool="update_ticket",
        target=target,
        desired_state={"status": "closed"},
    )
    assert world.wait_action(later.json()["id"], timeout=4)["state"] == "succeeded"

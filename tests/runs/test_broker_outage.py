"""The broker is only a wake-up call: with it down, proposals still succeed (the row is the
outbox), and the sweeper dispatches them once a worker can hear again."""

import logging
import uuid
from contextlib import contextmanager

import pytest

from console.celery import app
from runs.models import Action

pytestmark = pytest.mark.worker


@contextmanager
def broker_at(url):
    """Point this process's Celery app at another broker, and back, with fresh pools."""

    def fresh_pools():
        if app._pool is not None:
            app._pool.force_close_all()
        app._pool = None
        app.amqp._producer_pool = None

    saved = app.conf.broker_url
    app.conf.broker_url = url
    fresh_pools()
    try:
        yield
    finally:
        app.conf.broker_url = saved
        fresh_pools()


def test_proposal_succeeds_while_the_broker_is_down_and_is_swept_later(world, worker, caplog):
    world.tool("update_ticket")
    run = world.start_run()
    target = f"ticket:{uuid.uuid4().hex[:8]}"
    saved = app.conf.broker_url
    app.conf.broker_url = "amqp://guest:guest@127.0.0.1:1//"  # nothing listens there
    app.pool.force_close_all()
    try:
        with caplog.at_level(logging.ERROR, logger="django.db.backends.base"):
            response = world.propose(
                run["id"],
                f"k-{uuid.uuid4().hex}",
                tool="update_ticket",
                target=target,
                desired_state={"status": "open"},
            )
    finally:
        app.conf.broker_url = saved
        app.pool.force_close_all()
    assert response.status_code == 201
    action_id = response.json()["id"]
    assert "on_commit" in caplog.text  # the wake-up call really failed, and was only logged
    assert Action.objects.get(pk=action_id).state == "queued"
    # The worker's own sweeper (beat) re-sends it after QUEUED_REENQUEUE_AFTER_SECONDS.
    final = world.wait_action(action_id, timeout=40)
    assert final["state"] == "succeeded"
    assert world.downstream.mutations(target) == 1

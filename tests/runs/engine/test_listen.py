"""The worker that listens (`runs/engine/listen.py`), on the real server's LISTEN/NOTIFY: it
drains when a notification commits, never for one rolled back, and only the queued actions
when that is all it was told of. The drain itself is the worker's (tests/runs/engine/
test_worker.py runs it in a real worker process, with the broker down)."""

import threading

import pytest
from django.db import transaction

from runs.engine import listen
from runs.wakeup import QUEUED, notify_work, queued_note


@pytest.fixture
def listener(live_db, monkeypatch):
    drains: list[bool] = []
    drained = threading.Event()

    def fake_drain(*, take_wakeup=True, queued_only=False, only=None, **kwargs):
        assert take_wakeup is False  # the broker's flag is the broker path's alone
        drains.append(queued_only if only is None else only)
        drained.set()
        return 0

    monkeypatch.setattr("runs.engine.worker.drain", fake_drain)
    subject = listen.WorkListener()
    subject.start()
    # The first drain is for whatever came while it was not listening: everything.
    assert drained.wait(10)
    assert drains == [False]
    drained.clear()
    yield drains, drained
    subject.stop()


def test_a_committed_proposal_notification_drains_the_queued_actions_only(listener):
    drains, drained = listener
    with transaction.atomic():
        notify_work(QUEUED)
    assert drained.wait(10)
    assert drains[-1] is True


def test_a_proposal_that_names_its_action_is_leased_by_its_key(listener):
    drains, drained = listener
    with transaction.atomic():
        notify_work(queued_note("4b1e7c1e-0000-4000-8000-000000000001"))
    assert drained.wait(10)
    assert drains[-1] == ["4b1e7c1e-0000-4000-8000-000000000001"]


def test_any_other_wake_up_drains_everything(listener):
    drains, drained = listener
    notify_work()  # autocommit: an unknown due, a notification to deliver
    assert drained.wait(10)
    assert drains[-1] is False


def test_a_rolled_back_notification_is_never_heard(listener):
    drains, drained = listener

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        notify_work(QUEUED)
        raise Rollback
    assert not drained.wait(2)
    assert drains == [False]  # only the start-up drain

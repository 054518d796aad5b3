"""The worker that listens (`runs/engine/listen.py`), on the real server's LISTEN/NOTIFY: it
drains when a notification commits, never for one rolled back, and only the queued actions
when that is all it was told of. The drain itself is the worker's (tests/runs/engine/
test_worker.py runs it in a real worker process, with the broker down)."""

import threading
import time
import uuid

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


def _listeners(n, monkeypatch):
    """n listening processes' worth of listeners in this one, each recording what it drains
    by key."""
    drains: list[tuple[int, list]] = []
    lock = threading.Lock()
    subjects = [listen.WorkListener() for _ in range(n)]

    def fake_drain(*, take_wakeup=True, queued_only=False, only=None, **kwargs):
        me = next(i for i, s in enumerate(subjects) if s.threads[1] is threading.current_thread())
        with lock:
            drains.append((me, only))
        return 0

    monkeypatch.setattr("runs.engine.worker.drain", fake_drain)
    return subjects, drains


def _until(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_each_named_action_is_leased_by_one_listener_only(live_db, monkeypatch):
    """Two listening processes hear every proposal; the key's share decides which one
    leases it, so a proposal costs one lease, not two."""
    subjects, drains = _listeners(2, monkeypatch)
    for subject in subjects:
        subject.start()
    try:
        _until(lambda: all(s.share.members == 2 for s in subjects))
        places = sorted(s.share.place for s in subjects)
        assert places == [0, 1]
        keys = [str(uuid.uuid4()) for _ in range(40)]
        for key in keys:
            with transaction.atomic():
                notify_work(queued_note(key))
        by_key = lambda: {k: [me for me, only in drains if only and k in only] for k in keys}  # noqa: E731
        _until(lambda: all(by_key().values()))
        time.sleep(listen.PEER_GRACE_SECONDS + 0.5)  # none of them is queued: no second look
        leased = by_key()
        assert all(len(who) == 1 for who in leased.values()), leased
        # Both took a share (40 random keys split 40/0 with probability 2**-39).
        assert {who[0] for who in leased.values()} == {0, 1}
    finally:
        for subject in subjects:
            subject.stop()


def test_a_peers_key_still_queued_after_the_grace_is_leased_here(world, monkeypatch):
    """A member that never leases (a worker hung, or the members changing): its keys wait
    the grace, then the listener that heard them leases those still queued."""
    import psycopg

    from runs.wakeup import listen_conninfo

    from ...builders import propose, start_run, tool

    subjects, drains = _listeners(1, monkeypatch)
    (subject,) = subjects
    silent = psycopg.connect(listen_conninfo(listen.NAME_PREFIX + "0" * 16), autocommit=True)
    try:
        subject.start()
        _until(lambda: subject.share.members == 2)
        run, tool_ = start_run(world), tool(world)
        actions = [propose(world, run, tool_, f"ticket:{i}", {"status": "x"}) for i in range(12)]
        # The notifications were sent in the proposals' transactions; the keys are queued.
        mine = {str(a.pk) for a in actions if subject.share.owns(str(a.pk))}
        theirs = {str(a.pk) for a in actions} - mine
        assert mine and theirs  # 12 random keys all on one side: probability 2**-11
        drained = lambda: {k for _, only in drains if only for k in only}  # noqa: E731
        _until(lambda: drained() >= mine | theirs, seconds=10)
    finally:
        subject.stop()
        silent.close()

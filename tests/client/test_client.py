"""takeover_client against a running server: every outcome a runtime meets (docs/design.md,
"The action lifecycle")."""

import asyncio
import hashlib
import itertools
import threading
import time

import httpx
import pytest
from takeover_client import (
    AsyncTakeover,
    Blocked,
    Conflict,
    Failed,
    IdempotencyConflict,
    NeedsHuman,
    Pending,
    Run,
    RunNotRunning,
    Takeover,
    Unavailable,
    current_run,
    idempotency_key,
)

from ..api.test_unavailable import database_down
from .conftest import event, ticket

pytestmark = pytest.mark.worker


def test_succeeded_and_the_context_manager_reports_tools_called(w, agent):
    target = ticket()
    with agent.start_run("webhook", {"ticket": target}, event_id=event()) as run:
        assert current_run() is run
        outcome = run.propose("update_ticket", target, {"status": "open"})
        assert outcome.state == "queued" and not outcome.replayed
        assert outcome.wait(30) is outcome
        assert outcome.state == "succeeded" and outcome.action.resolution == "applied"
    assert current_run() is None
    finished = agent.run(run.id)
    assert finished.status == "success"
    assert finished.data.tools_executed == ["update_ticket"]
    assert w.downstream.mutations(target) == 1


def test_a_proposal_that_waits_brings_its_outcome_in_one_request(w, live_server):
    sent = []

    class Counting(httpx.HTTPTransport):
        def handle_request(self, request):
            sent.append((request.method, request.url.path, request.url.query.decode()))
            return super().handle_request(request)

    target = ticket()
    with Takeover(live_server.url, w.agent.token, transport=Counting()) as client:
        run = client.start_run("api", {}, event_id=event())
        sent.clear()
        outcome = run.propose("update_ticket", target, {"status": "open"}, wait=20)
        assert outcome.state == "succeeded" and not outcome.replayed
        assert outcome.wait(5) is outcome
        # Held within the client's 10 s timeout; nothing asked again.
        assert sent == [("POST", f"/api/v1/runs/{run.id}/actions", "wait=8.0")]
        run.finish()
    assert w.downstream.mutations(target) == 1


def test_the_same_key_is_replayed_from_the_ledger_and_content_changes_are_flagged(w, agent):
    recipient = f"{ticket().lower()}@example.com"
    with agent.start_run("schedule", {}, event_id=event()) as run:
        first = run.propose("send_email", recipient, {"campaign": "c1", "body": "Hello"})
        first.wait(30)
        assert run.key("send_email", recipient.upper()) == run.key("send_email", recipient)
        again = run.propose("send_email", recipient, {"campaign": "c1", "body": "Hi!"})
        assert again.replayed and again.content_changed and again.id == first.id
        assert again.wait(5).state == "succeeded"
        same = run.propose("send_email", recipient, {"campaign": "c1", "body": "Hello"})
        assert same.replayed and not same.content_changed
    assert w.downstream.received(run.key("send_email", recipient)) == 1


def test_a_key_reused_for_another_intent_is_an_idempotency_conflict(w, agent):
    target = ticket()
    with agent.start_run("api", {}, event_id=event()) as run:
        run.propose("update_ticket", target, {"status": "open"}).wait(30)
        with pytest.raises(IdempotencyConflict) as caught:
            run.propose("update_ticket", target, {"status": "closed"})
    assert caught.value.status == 422
    assert caught.value.type == "/problems/idempotency-conflict"


def test_an_unknown_approval_is_blocked(w, agent):
    with agent.start_run("chat", {}, event_id=event()) as run:
        outcome = run.propose(
            "close_ticket",
            ticket(),
            {"status": "closed"},
            approval_id="00000000-0000-4000-8000-000000000000",
        )
        with pytest.raises(Blocked) as caught:
            outcome.wait(10)
    assert caught.value.reason == "approval_not_found"
    assert run.tools_called == []  # a blocked action is not a call
    assert agent.run(run.id).data.tools_executed == []


def test_a_rejected_effect_is_failed_and_a_stale_version_is_a_conflict(w, agent):
    rejected, guarded = ticket(), ticket()
    w.downstream.seed(guarded, {"status": "new"}, version=3)
    w.downstream.fault("reject", prefix="tickets", target=rejected)
    with agent.start_run("workflow", {}, event_id=event()) as run:
        with pytest.raises(Failed) as failed:
            run.propose("update_ticket", rejected, {"status": "open"}).wait(30)
        with pytest.raises(Conflict) as conflict:
            run.propose("update_ticket", guarded, {"status": "x"}, expected_version=1).wait(30)
    assert type(failed.value) is Failed and failed.value.reason == "rejected"
    assert conflict.value.reason == "version_conflict"
    assert isinstance(conflict.value, Failed)


def test_an_unknown_outcome_that_cannot_be_proven_needs_a_human(w, agent):
    target = ticket()
    w.downstream.seed(target, {"status": "new"})
    w.downstream.fault("error_before_commit", prefix="tickets", target=target)
    run = agent.start_run("webhook", {}, event_id=event())
    with run, pytest.raises(NeedsHuman) as caught:
        run.propose("update_ticket", target, {"status": "open"}).wait(30)
    [diff] = caught.value.diff
    assert (diff.field, diff.desired, diff.actual) == ("status", "open", "new")


def test_an_unknown_outcome_is_reconciled_to_succeeded(w, agent):
    target = ticket()
    w.downstream.fault("drop_after_commit", prefix="tickets", target=target)
    with agent.start_run("webhook", {}, event_id=event()) as run:
        outcome = run.propose("update_ticket", target, {"status": "open"}).wait(30)
    assert outcome.action.resolution == "reconciled"
    assert [a.outcome for a in outcome.action.attempts] == ["unknown"]
    assert w.downstream.mutations(target) == 1


def test_awaiting_approval_is_pending_until_granted(w, agent, operator):
    target = ticket()
    with agent.start_run("chat", {}, event_id=event()) as run:
        outcome = run.propose("close_ticket", target, {"status": "closed"})
        with pytest.raises(Pending) as caught:
            outcome.wait(1.5, poll_approval=0.5)
        assert caught.value.state == "awaiting_approval"
        with operator("approver") as approver:
            approver.api.approval_requests_grant(
                outcome.action.approval_request_id, ttl_seconds=600
            )
        assert outcome.wait(30, poll_approval=0.5).state == "succeeded"


def test_503_with_retry_after_is_retried_until_the_database_is_back(w, agent, caplog):
    caplog.set_level("INFO", logger="takeover_client")
    target = ticket()
    with agent.start_run("api", {}, event_id=event()) as run:
        # A new HTTP connection, so a new server thread that must open a database connection
        # (an open keep-alive connection would carry on with its healthy session).
        fresh = Run(Takeover(agent.url, w.agent.token, retry_for=10), run.data)
        with database_down():
            restored = threading.Event()

            def propose():
                try:
                    propose.result = fresh.propose("update_ticket", target, {"status": "open"})
                except Exception as exc:
                    propose.result = exc
                restored.set()

            thread = threading.Thread(target=propose)
            started = time.monotonic()
            thread.start()
            time.sleep(2.5)  # at least one 503 answered, with Retry-After: 2
        thread.join(20)  # the database is back: the client's next try gets through
        assert restored.is_set()
        assert not isinstance(propose.result, Exception), propose.result
        assert time.monotonic() - started >= 2
        retries = [r.getMessage() for r in caplog.records if r.name == "takeover_client"]
        assert retries and all("503, Retry-After 2; retry" in m for m in retries)
        assert all("in 2.0 s" in m and "/api/v1/runs/" in m for m in retries)
        assert propose.result.wait(30).state == "succeeded"
    assert w.downstream.mutations(target) == 1


def test_503_beyond_the_retry_budget_is_unavailable_with_retry_after(w, live_server):
    client = Takeover(live_server.url, w.agent.token, retry_for=1)
    with database_down(), pytest.raises(Unavailable) as caught:
        client.me()
    assert caught.value.retry_after == 2
    assert client.me().kind == "principal"


def test_a_connection_refused_is_retried_then_unavailable():
    client = Takeover("http://127.0.0.1:9", "token", retry_for=1.2)
    started = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        client.start_run("api", {})
    assert caught.value.retry_after is None
    assert 1.1 < time.monotonic() - started < 3  # tried, 0.5 s, tried, 0.7 s, tried


def test_an_exception_in_the_block_finishes_the_run_as_error(w, agent):
    target = ticket()
    with pytest.raises(ZeroDivisionError), agent.start_run("api", {}, event_id=event()) as run:
        run.propose("update_ticket", target, {"status": "open"}).wait(30)
        1 / 0
    data = agent.run(run.id).data
    assert data.status == "error"
    assert data.error_message == "ZeroDivisionError: division by zero"
    assert data.tools_executed == ["update_ticket"]
    with pytest.raises(RunNotRunning):
        run.propose("update_ticket", ticket(), {"status": "open"})


def test_heartbeats_are_sent_in_the_background(w, live_server):
    client = Takeover(live_server.url, w.agent.token, heartbeat_every=0.3)
    with client.start_run("api", {}) as run:
        first = client.run(run.id).data.heartbeat_at
        time.sleep(1.2)
        later = client.run(run.id).data.heartbeat_at
    assert later and later != first


def test_a_replay_is_claimed_and_proposes_the_same_keys(w, agent, operator):
    target = ticket()
    run = agent.start_run("webhook", {"ticket": target}, event_id=event())
    with pytest.raises(RuntimeError), run:
        first = run.propose("update_ticket", target, {"status": "open"}).wait(30)
        raise RuntimeError("crashed after the first effect")
    assert agent.claim() is None  # nothing waiting
    with operator("admin") as admin:
        replay = admin.api.runs_replay(run.id, force=True, reason="the crash was ours")
    claimed = agent.claim()
    assert claimed.id == replay.id and claimed.replay_of == run.id
    with claimed:
        again = claimed.propose("update_ticket", claimed.config["ticket"], {"status": "open"})
        assert again.replayed and again.id == first.id
    assert agent.run(claimed.id).status == "success"
    assert w.downstream.mutations(target) == 1


def test_the_async_client_waits_and_raises_the_same_way(w, live_server):
    good, bad = ticket(), ticket()
    w.downstream.seed(bad, {"status": "new"})
    w.downstream.fault("error_before_commit", prefix="tickets", target=bad)

    async def scenario():
        async with AsyncTakeover(live_server.url, w.agent.token) as client:
            async with await client.start_run("api", {}, event_id=event()) as run:
                ok = await run.propose("update_ticket", good, {"status": "open"}, wait=10)
                assert ok.state == "succeeded"
                with pytest.raises(NeedsHuman):
                    await (await run.propose("update_ticket", bad, {"status": "open"})).wait(30)
            return ok, (await client.run(run.id)).data

    ok, data = asyncio.run(scenario())
    assert ok.state == "succeeded"
    assert data.status == "success" and data.tools_executed == ["update_ticket"]


def test_an_input_file_is_uploaded_and_copied_at_start(w, agent, tmp_path):
    path = tmp_path / "ticket.json"
    path.write_bytes(b'{"ticket": "T-1", "text": "It works now"}')
    with agent.start_run("webhook", {"a": 1}, path, event_id=event()) as run:
        pass
    data = agent.run(run.id).data
    assert data.input_file.name == "ticket.json"
    assert data.input_file.size == path.stat().st_size
    assert data.input_file.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert data.config == {"a": 1, "event_id": run.event_id}


def test_idempotency_keys_come_from_stable_intent():
    assert idempotency_key("evt_1", "send_email", "  Alice@Example.COM ") == (
        "evt_1:send_email:alice@example.com"
    )
    assert idempotency_key("evt_1", "update_ticket", " T-1042 ") == "evt_1:update_ticket:T-1042"
    assert idempotency_key("slot 09:00", "t", "café") == "slot%2009:00:t:caf%C3%A9"
    long = idempotency_key("evt", "t", "x" * 400)
    assert len(long) <= 255 and long == idempotency_key("evt", "t", "x" * 400)
    assert long != idempotency_key("evt", "t", "x" * 399)
    with pytest.raises(ValueError):
        idempotency_key("", "t", "x")


def test_a_refused_wait_is_asked_again_after_retry_after(w, live_server, settings):
    """Over the server's cap of concurrent waits, `?wait=` answers at once with
    `Retry-After: 1`; `wait()` keeps going, asking again no sooner than that."""
    settings.WAIT_MAX_PER_PRINCIPAL = 0  # the live server runs in this process
    asked = []

    class Recording(httpx.HTTPTransport):
        def handle_request(self, request):
            response = super().handle_request(request)
            if "wait=" in str(request.url):
                asked.append((time.monotonic(), response.headers.get("Retry-After")))
            return response

    target = ticket()
    w.downstream.fault("slow_after_commit", prefix="tickets", target=target, seconds=3)
    client = Takeover(live_server.url, w.agent.token, transport=Recording())
    with client.start_run("api", {}, event_id=event()) as run:
        outcome = run.propose("update_ticket", target, {"status": "open"}).wait(30)
    assert outcome.state == "succeeded" and outcome.action.resolution == "reconciled"
    assert len(asked) >= 2 and all(header == "1" for _, header in asked[:-1])
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(asked)]
    assert min(gaps) >= 0.95, gaps

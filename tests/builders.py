"""The one builder of test data, shared by every test: personas in a fresh tenant (`World`,
`make_world`) and helpers that put runs and actions into a given state through the real
engine (services, dispatch over HTTP to the demo downstream, reconciliation), never by
writing a state column (docs/design.md, "Other state machines").
"""

import threading
import time
import uuid
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connections
from rest_framework.test import APIClient

from core.audit import DISPATCHER, Actor
from core.models import Role
from core.services import operator_create, principal_create, tenant_create, tool_create
from runs import runtime
from runs.engine import dispatch, reconcile
from runs.models import Action
from runs.propose import action_propose

SETUP = Actor("system", "tests")
PASSWORD = "correct horse"


# --- personas ------------------------------------------------------------------------------


@dataclass
class Persona:
    username: str
    token: str

    def client(self, tenant=None) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.token}")
        if tenant:
            client.defaults["HTTP_X_TAKEOVER_TENANT"] = tenant
        return client


@dataclass
class World:
    """Tenant A with an agent, an approver, an on-call and an admin; tenant B's outsider."""

    tenant: object
    other_tenant: object
    principal: object
    agent: Persona
    approver: Persona
    oncall: Persona
    admin: Persona
    outsider: Persona
    other_agent: Persona
    downstream: object = None  # tests.conftest.Downstream

    def tool(self, name="update_ticket", prefix="tickets", **options):
        options.setdefault("timeout_seconds", 2)
        if "base_url" not in options:
            options["base_url"] = self.downstream.base(prefix)
        return tool_create(tenant=self.tenant, name=name, actor=SETUP, **options)

    def start_run(self, client=None, **body):
        client = client or self.agent.client()
        response = client.post("/api/v1/runs", {"trigger": "api", **body}, format="json")
        assert response.status_code == 201, response.content
        return response.json()

    def propose(self, run_id, key, client=None, **body):
        client = client or self.agent.client()
        return client.post(
            f"/api/v1/runs/{run_id}/actions", body, format="json", HTTP_IDEMPOTENCY_KEY=key
        )

    def wait_action(self, action_id, client=None, until=None, timeout=30):
        """Poll through ?wait= until the action leaves queued/dispatching/unknown (or
        reaches `until`)."""
        client = client or self.agent.client()
        deadline = time.monotonic() + timeout
        while True:
            body = client.get(f"/api/v1/actions/{action_id}?wait=5").json()
            done = (
                body["state"] in until
                if until
                else body["state"] not in {"queued", "dispatching", "unknown"}
            )
            if done or time.monotonic() > deadline:
                return body
            time.sleep(0.1)


def long_text(prefix: str, n: int = 200) -> str:
    """n characters with no space or break in them: a key, a target, a token in a reason
    that a page must wrap rather than widen for."""
    return (prefix + "0123456789abcdefghij" * (n // 20 + 1))[:n]


def make_world(
    downstream=None,
    *,
    tenant_slug="a",
    tenant_name="",
    other_slug="b",
    agent="agent",
    names=("approver", "oncall", "admin", "outsider"),
    separator="-",
) -> World:
    """Tenant A with an agent, an approver, an on-call and an admin; tenant B's outsider.
    Names may be chosen (the screenshots use people's names); a random suffix keeps each
    world apart from every other in the shared test database."""
    suffix = uuid.uuid4().hex[:8]
    tenant = tenant_create(
        slug=f"{tenant_slug}-{suffix}", name=tenant_name or f"{tenant_slug}-{suffix}", actor=SETUP
    )
    other = tenant_create(slug=f"{other_slug}-{suffix}", actor=SETUP)
    principal, agent_token = principal_create(tenant=tenant, name=agent, actor=SETUP)
    _, other_agent_token = principal_create(tenant=other, name=agent, actor=SETUP)

    def operator(name, role, t=tenant):
        username = f"{name}{separator}{suffix}"
        _, token = operator_create(
            tenant=t, username=username, role=role, password=PASSWORD, actor=SETUP
        )
        return Persona(username, token)

    approver, oncall, admin, outsider = names
    return World(
        tenant=tenant,
        other_tenant=other,
        principal=principal,
        agent=Persona(agent, agent_token),
        approver=operator(approver, Role.APPROVER),
        oncall=operator(oncall, Role.ONCALL),
        admin=operator(admin, Role.ADMIN),
        outsider=operator(outsider, Role.ADMIN, other),
        other_agent=Persona(agent, other_agent_token),
        downstream=downstream,
    )


# --- people and data ----------------------------------------------------------------------------


def add_operator(world, name: str, role: str, tenant=None) -> Persona:
    username = f"{name}-{uuid.uuid4().hex[:6]}"
    _, token = operator_create(
        tenant=tenant or world.tenant, username=username, role=role, password=PASSWORD, actor=SETUP
    )
    return Persona(username, token)


def agent_of(world) -> Actor:
    return Actor("principal", world.principal.name)


def user(persona):
    return get_user_model().objects.get(username=persona.username)


def operator_actor(persona) -> Actor:
    """The operator as the services see them: with the roles their memberships give."""
    from core.models import Membership

    roles = set()
    for membership in Membership.objects.filter(user__username=persona.username):
        roles |= set(membership.roles)
    return Actor("operator", persona.username, roles=frozenset(roles))


def start_run(world, **options):
    return runtime.run_start(
        principal=world.principal,
        trigger="api",
        config=options.pop("config", {"n": 1}),
        actor=agent_of(world),
        **options,
    )


def tool(world, name="update_ticket", prefix="tickets", **options):
    from core.models import Tool

    existing = Tool.objects.filter(tenant=world.tenant, name=name).first()
    return existing or world.tool(name, prefix=prefix, **options)


def propose(
    world, run, tool_, target, desired, expected_version=None, key=None, reason="", **claim
):
    """A new action, proposed by the world's agent; with `claimer` and `lease` (`claim`),
    leased to its proposer as it is written, as a request that dispatches its own does."""
    action, created, _ = action_propose(
        run=run,
        tool=tool_,
        target=target,
        desired_state=desired,
        expected_version=expected_version,
        idempotency_key=key or f"k-{uuid.uuid4().hex}",
        reason=reason,
        actor=agent_of(world),
        **claim,
    )
    assert created
    return action


def propose_claimed(world, lease) -> Action:
    """An effect proposed already leased to its proposer for `lease` (a timedelta), as a
    request that waits for its own dispatch writes it, and left `dispatching`: no call."""
    action = propose(
        world,
        start_run(world),
        tool(world),
        target_name(),
        {"status": "closed"},
        claimer=DISPATCHER,
        lease=lease,
    )
    assert action.state == "dispatching"
    return action


def wait_state(action_id, states, timeout=20.0) -> Action:
    states = {states} if isinstance(states, str) else set(states)
    deadline = time.monotonic() + timeout
    while True:
        action = Action.objects.get(pk=action_id)
        if action.state in states or time.monotonic() > deadline:
            assert action.state in states, f"action is {action.state}, wanted {states}"
            return action
        time.sleep(0.1)


def target_name(prefix="T") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def make_unknown(world, *, stay_unknown=True, run=None, target=None):
    """An action whose dispatch got a 503: sent, outcome unknown. With `stay_unknown`, reads
    of its target keep failing, so reconciliation (ours or a worker's) leaves it unknown."""
    ds = world.downstream
    target = target or target_name()
    t = tool(world)
    if stay_unknown:
        ds.fault("error_on_read", prefix="tickets", target=target, times=1000)
    ds.fault("error_before_commit", prefix="tickets", target=target)
    run = run or start_run(world)
    action = propose(world, run, t, target, {"status": "closed"}, None)
    dispatch.action_dispatch(action.pk)  # None if a running worker claimed it first
    return wait_state(action.pk, {"unknown", "needs_human"} if not stay_unknown else "unknown")


def make_needs_human(world, *, run=None, target=None, key=None, reason=""):
    """An action whose outcome was lost and whose target, read back, differs in `status`."""
    ds = world.downstream
    target = target or target_name()
    ds.seed(target, {"status": "open", "priority": "high"}, version=3)
    t = tool(world)
    ds.fault("error_before_commit", prefix="tickets", target=target)
    run = run or start_run(world)
    desired = {"status": "closed", "priority": "high"}
    action = propose(world, run, t, target, desired, 3, key=key, reason=reason)
    dispatch.action_dispatch(action.pk)
    action = wait_state(action.pk, {"unknown", "needs_human"})
    if action.state == "unknown":
        # Not `manual`: this takes the reconcile lease, so a running worker's reconcile of
        # the same action does not read too (the tests count reads).
        reconcile.action_reconcile(action.pk)
    return wait_state(action.pk, "needs_human")


def make_awaiting(world, *, run=None, target=None, reason="", key=None):
    """An e-mail that needs an approver: awaiting_approval with a pending request."""
    t = tool(world, "send_email", prefix="email", requires_approval=True)
    run = run or start_run(world)
    target = target or f"{uuid.uuid4().hex[:6]}@example.com"
    return propose(
        world,
        run,
        t,
        target,
        {"subject": "Refund", "body": "Your refund is on its way."},
        key=key,
        reason=reason,
    )


def make_blocked(world, run=None, target=None):
    """An e-mail proposed with an approval that does not exist: blocked at once
    (approval_not_found), in the queue until on-call acknowledges it. The cheapest row the
    on-call queue shows (approval requests are on Approvals, not in the queue)."""
    action, _, _ = action_propose(
        run=run or start_run(world),
        tool=tool(world, "send_email", prefix="email", requires_approval=True),
        target=target or f"{uuid.uuid4().hex[:6]}@example.com",
        desired_state={"subject": "Refund"},
        expected_version=None,
        idempotency_key=f"k-{uuid.uuid4().hex}",
        approval_id=uuid.uuid4(),
        actor=agent_of(world),
    )
    assert action.state == "blocked"
    return action


def make_failed_run_with_tools(world):
    """A run that called a tool and then failed: replay is refused without force."""
    run = start_run(world, config={"order": 1042})
    t = tool(world)
    target = target_name()
    action = propose(world, run, t, target, {"status": "closed"}, None)
    dispatch.action_dispatch(action.pk)
    wait_state(action.pk, {"succeeded", "failed", "unknown", "needs_human"})
    return runtime.run_finish(
        run,
        status="error",
        error_message="model timed out",
        tools_called=["update_ticket"],
        actor=agent_of(world),
    )


def make_failed_run_without_tools(world):
    run = start_run(world, config={"order": 7})
    return runtime.run_finish(
        run, status="error", error_message="bad input", tools_called=[], actor=agent_of(world)
    )


def declared_tool(world, name="notify_customer", prefix="email", **declarations):
    """A tool with declarations; the demo outbox is idempotent with lookup."""
    declarations.setdefault("effect", "idempotent")
    declarations.setdefault("lookup", True)
    return tool(world, name, prefix=prefix, **declarations)


def _reconcile_until(action_id, states, timeout=20.0) -> Action:
    """Reconcile in this process (or let a running worker do it) until `states`."""
    deadline = time.monotonic() + timeout
    while Action.objects.get(pk=action_id).state not in states:
        if time.monotonic() > deadline:
            break
        reconcile.action_reconcile(action_id)  # no-op unless due and unclaimed
        time.sleep(0.2)
    return wait_state(action_id, states, timeout=1)


def make_settled_by_lookup(world, *, run=None, target=None):
    """An e-mail whose answer was lost; the outbox's lookup says it applied the key."""
    target = target or f"{uuid.uuid4().hex[:6]}@example.com"
    t = declared_tool(world)
    world.downstream.fault("drop_after_commit", prefix="email", target=target)
    run = run or start_run(world)
    action = propose(world, run, t, target, {"subject": "Your refund", "body": "On its way."})
    dispatch.action_dispatch(action.pk)
    return _reconcile_until(action.pk, {"succeeded"})


def make_resent(world, *, run=None, target=None):
    """An e-mail the outbox never received (503): its lookup says so, and it is sent again
    with the same key, attempt 2."""
    target = target or f"{uuid.uuid4().hex[:6]}@example.com"
    t = declared_tool(world)
    world.downstream.fault("error_before_commit", prefix="email", target=target)
    run = run or start_run(world)
    action = propose(world, run, t, target, {"subject": "Renewal", "body": "Hello again."})
    dispatch.action_dispatch(action.pk)
    return _reconcile_until(action.pk, {"succeeded"})


# --- races ---------------------------------------------------------------------------------


def race(n, fn):
    """Run fn(i) in n threads released together; each thread uses its own DB connection."""
    barrier = threading.Barrier(n)
    results = [None] * n
    errors = []

    def body(i):
        try:
            barrier.wait(10)
            results[i] = fn(i)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def claimed_as_proposed(action_id) -> bool:
    """Whether the transaction that proposed the action also leased it: its request
    claimed it (other tests' workers may be running and dispatch what is queued)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT verb, xmin::text FROM core_auditevent WHERE object_type = 'action' "
            "AND object_id = %s AND verb IN ('action.propose', 'action.dispatching')",
            [str(action_id)],
        )
        xmins = dict(cursor.fetchall())
    proposed = xmins.get("action.propose")
    return proposed is not None and proposed == xmins.get("action.dispatching")

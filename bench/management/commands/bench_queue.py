"""``manage.py bench_queue`` (``make bench``): the queue page's server time at scale.

It works in a database of its own, ``<your database>_bench`` on the same server, created and
migrated on the first run, so 100,000 rows never land in the demo database. The outer command
prepares that database and runs itself again (``--inner``) with ``DATABASE_URL`` pointing at
it; the inner one fills it once and times the page.

The data: one tenant with 100,000 actions, of which 10,000 are open (needs a person) and the
rest settled, spread over 30 days, with the attempts and reconciliation reads an open action
would have; written set-based (``INSERT … SELECT generate_series``, a million rows a
statement), so that ``--actions 10000000 --open 100000`` loads in minutes. It is a load, not a
history: no audit events, and attempts and reads only for the open actions the page shows.
A second tenant holds 50 open actions: the same page
with 50 rows is the baseline, measured in the same run, together with a bare ``SELECT 1``.

Timing: the real view through the whole middleware stack (Django's test client, signed in as
an on-call operator), warm-up first, then the median of N runs. Known quirk: the test
client's own overhead (building the request, a signed session cookie) is included; it is
the same for both pages, which is why the baseline is printed next to the figure.
"""

import os
import statistics
import subprocess
import sys
import time
import uuid
from urllib.parse import quote

from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction
from django.test import Client

from bench.own_database import InOwnDatabase
from core.models import Membership, Principal, Role, Tenant, Tool
from runs.models import Action, Run
from runs.states import OPEN_FOR_HUMANS

BENCH_USER = "bench-oncall"
TARGET_MS = 30  # the queue page at 10,000,000 actions with 100,000 open, filtered or not


def database_url(settings_dict, name) -> str:
    s = settings_dict
    auth = quote(s.get("USER") or "")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    host = s.get("HOST") or ""
    if host.startswith("/") or not host:
        query = f"?host={quote(host)}" if host else ""
        if s.get("PORT"):
            query += ("&" if query else "?") + f"port={s['PORT']}"
        return f"postgresql://{auth}@/{name}{query}"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{name}"


ROWS = """
    SELECT g, now() - interval '30 days' + (g * interval '30 days') / %(n)s AS created,
        CASE WHEN g %% %(every)s = 0 AND g / %(every)s < %(n_open)s
            THEN (%(open_states)s::text[])[1 + (g / %(every)s) %% 4]
            WHEN g %% 7 <> 0 THEN 'succeeded' ELSE 'failed' END AS state
    FROM generate_series(%(lo)s, %(hi)s - 1) AS g
"""
LOAD_LEDGER = f"""
INSERT INTO ledger_ledgerentry (id, key, generation, fingerprint, tool, action_id, status,
    created_at, updated_at, revoked_reason, tenant_id)
SELECT md5(%(seed)s || 'l' || g)::uuid, 'bench-' || g, 1, repeat('0', 64),
    (%(tool_names)s::text[])[1 + (g / 3) %% 10], md5(%(seed)s || 'a' || g)::uuid,
    CASE WHEN state IN ('succeeded', 'failed') THEN 'applied' ELSE 'unknown' END,
    created, created, '', %(tenant)s
FROM ({ROWS}) AS r
"""  # noqa: S608 -- ROWS is a constant
LOAD_ACTIONS = f"""
INSERT INTO runs_action (id, target, desired_state, expected_version, idempotency_key,
    fingerprint, state, block_reason, failure_reason, resolution, resolution_reason, created_at,
    updated_at, reconcile_failures, principal_id, tenant_id, tool_id, run_id, request_id,
    acknowledge_note, reason, effect, ledger_entry_id)
SELECT md5(%(seed)s || 'a' || g)::uuid, 'T-' || g,
    jsonb_build_object('status', 'closed', 'note', 'n' || g), g %% 5, 'bench-' || g,
    repeat('0', 64), state,
    CASE WHEN state = 'blocked' THEN 'approval_denied' ELSE '' END,
    CASE WHEN state = 'failed' THEN 'rejected' ELSE '' END, '', '', created, created, 0,
    %(principal)s, %(tenant)s, (%(tools)s::uuid[])[1 + (g / 3) %% 10],
    (%(runs)s::uuid[])[1 + g %% cardinality(%(runs)s::uuid[])], '', '', '', 'unsafe',
    md5(%(seed)s || 'l' || g)::uuid
FROM ({ROWS}) AS r
"""  # noqa: S608 -- ROWS is a constant
LOAD_ATTEMPTS = """
INSERT INTO runs_attempt (action_id, number, started_at, finished_at, outcome, http_status,
    detail, kind)
SELECT id, 1, created_at, created_at, 'unknown', 503, '', 'send' FROM runs_action
WHERE tenant_id = %(tenant)s AND state IN ('unknown', 'needs_human') AND acknowledged_at IS NULL
"""
LOAD_READS = """
INSERT INTO runs_reconciliation (action_id, at, verdict, diff, authoritative, detail, kind)
SELECT id, created_at, 'mismatch',
    '[{"field": "status", "desired": "closed", "actual": "open"}]'::jsonb,
    '{"state": {"status": "open"}, "version": 1}'::jsonb, '', 'state'
FROM runs_action
WHERE tenant_id = %(tenant)s AND state = 'needs_human' AND acknowledged_at IS NULL
"""


def filled_tenant(slug, user, role, what, fill, *, say, then=None) -> Tenant:
    """The bench's tenant `slug`, made with `user` in `role` and filled (`fill(tenant)`) in
    one transaction the first time, so that present means complete; `then()` after the
    commit (an ANALYZE), inside the time said."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is not None:
        return tenant
    say(f"Loading {what} into {slug} …")
    started = time.monotonic()
    with transaction.atomic():
        tenant = Tenant.objects.create(slug=slug, name=slug)
        Membership.objects.create(user=user, tenant=tenant, role=role)
        fill(tenant)
    if then is not None:
        then()
    say(f"  loaded in {time.monotonic() - started:.1f} s")
    return tenant


def in_kept_database(command: str, suffix: str, argv: list[str], *, say) -> None:
    """Run `manage.py <command> --inner <argv>` on a migrated database of its own
    (`<your database>_<suffix>`), kept between runs: what it loaded is there next time. The
    owner creates it when missing (the application's role may not), and the bench runs as
    that single role in it."""
    owner = connections["owner"]
    name = f"{owner.settings_dict['NAME']}_{suffix}"
    with owner.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if not cursor.fetchone():
            say(f"Creating the bench database {name} …")
            cursor.execute(f'CREATE DATABASE "{name}"')
    url = database_url(owner.settings_dict, name)
    # The owner's alias too: an inherited DATABASE_OWNER_URL names another database.
    env = {**os.environ, "DATABASE_URL": url, "DATABASE_OWNER_URL": url}
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--no-input", "-v0"], env=env, check=True)
    subprocess.run([*manage, command, "--inner", *argv], env=env, check=True)


class Command(InOwnDatabase):
    help = "Time the console's queue page with 100,000 actions (10,000 open) in a bench database."
    knobs = {"actions": 100_000, "open": 10_000, "runs": 50}
    helps = {
        "runs": "timed requests per page",
        "inner": "internal: load and time, in the bench database",
    }

    def outer(self, argv, **opts):
        in_kept_database("bench_queue", "bench", argv, say=self.stdout.write)

    def inner(self, *, actions, open, runs, **opts):
        return self.bench(actions, open, runs)

    # --- the inner run, on the bench database ----------------------------------------------

    def bench(self, n_actions, n_open, n_runs):
        user = self.bench_user()
        big = self.tenant(f"bench-{n_actions}-{n_open}", n_actions, n_open, user)
        small = self.tenant("bench-50-50", 50, 50, user)
        with connection.cursor() as cursor:
            # A loaded table as autovacuum leaves it in steady state: statistics, and the
            # visibility map that lets the counts read the open-queue index alone (right after
            # a 10,000,000-row load, without it, every count visits the table's pages).
            cursor.execute("VACUUM (ANALYZE)")

        client = Client()
        client.force_login(user)
        open_big = Action.objects.filter(tenant=big, state__in=OPEN_FOR_HUMANS).count()
        total_big = Action.objects.filter(tenant=big).count()

        def page(path):
            response = client.get(path)
            assert response.status_code in (200, 204), (path, response.status_code)
            return response

        def timed(path, runs=n_runs):
            for _ in range(5):
                page(path)
            samples = []
            for _ in range(runs):
                started = time.perf_counter()
                page(path)
                samples.append((time.perf_counter() - started) * 1000)
            return samples

        def select_one(runs=n_runs * 4):
            samples = []
            with connection.cursor() as cursor:
                for _ in range(runs):
                    started = time.perf_counter()
                    cursor.execute("SELECT 1")
                    cursor.fetchone()
                    samples.append((time.perf_counter() - started) * 1000)
            return samples

        # A page deep into the queue, by keyset cursor, to show the cost does not grow.
        first = page(f"/?tenant={big.slug}")
        deep_cursor = self.deep_cursor(big, 5_000)
        refresh = first.content.decode().split("refresh=1&amp;v=")[1].split('"')[0]

        results = [
            (
                f"queue page, {total_big:,} actions ({open_big:,} open), first page of 50",
                timed(f"/?tenant={big.slug}"),
            ),
            (
                "  same, page after the 5,000 oldest (keyset cursor)",
                timed(f"/?tenant={big.slug}&after={deep_cursor}"),
            ),
            (
                "  same, filtered: needs_human, one tool",
                timed(f"/?tenant={big.slug}&state=needs_human&tool=tool_3"),
            ),
            (
                "  live refresh with nothing new (204)",
                timed_htmx(client, f"/?tenant={big.slug}&refresh=1&v={refresh}", n_runs),
            ),
            (
                "baseline: queue page, a tenant with 50 actions (50 open)",
                timed(f"/?tenant={small.slug}"),
            ),
            ("baseline: SELECT 1 round trip", select_one()),
        ]
        plan = self.plan(big)
        self.stdout.write("")
        self.stdout.write(f"Queue page server time, median of {n_runs} (after 5 warm-up requests):")
        for label, samples in results:
            median = statistics.median(samples)
            p90 = statistics.quantiles(samples, n=10)[-1]
            self.stdout.write(f"  {label:<68} median {median:7.2f} ms   p90 {p90:7.2f} ms")
        # The target holds for the big tenant's pages, filtered or not: the slowest median.
        headline = max(statistics.median(samples) for _label, samples in results[:4])
        verdict = "under" if headline < TARGET_MS else "OVER"
        self.stdout.write(
            f"\nTarget < {TARGET_MS} ms (every page of the big tenant): slowest median "
            f"{headline:.1f} ms, {verdict} target."
        )
        self.stdout.write(f"Rows query plan: {plan}")

    def bench_user(self):
        User = get_user_model()
        user, created = User.objects.get_or_create(username=BENCH_USER)
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        return user

    def tenant(self, slug, n_actions, n_open, user) -> Tenant:
        def fill(tenant):
            principal = Principal.objects.create(tenant=tenant, name="bench-agent")
            tools = [
                Tool.objects.create(
                    tenant=tenant, name=f"tool_{i}", base_url="http://127.0.0.1:9/t"
                )
                for i in range(10)
            ]
            runs = Run.objects.bulk_create(
                Run(
                    tenant=tenant,
                    principal=principal,
                    trigger="api",
                    session_id=uuid.uuid4().hex,
                    status="error",
                )
                for _ in range(max(n_actions // 1000, 1))
            )
            self.load_actions(tenant, principal, tools, runs, n_actions, n_open)

        what = f"{n_actions:,} actions ({n_open:,} open)"
        return filled_tenant(slug, user, Role.ONCALL, what, fill, say=self.stdout.write)

    def load_actions(self, tenant, principal, tools, runs, n_actions, n_open):
        """Set-based: one INSERT … SELECT generate_series per table and chunk of a million
        rows (10,000,000 actions load in minutes, not hours). Open actions are spread evenly
        through the settled ones, as a real backlog is; each open one that a read or an
        attempt explains has them (the page's subqueries read them)."""
        every = max(n_actions // max(n_open, 1), 1)
        params = {
            "tenant": tenant.pk,
            "principal": principal.pk,
            "tools": [t.pk for t in tools],
            "tool_names": [t.name for t in tools],
            "runs": [r.pk for r in runs],
            "n": n_actions,
            "n_open": n_open,
            "every": every,
            "open_states": list(OPEN_FOR_HUMANS),
            "seed": tenant.slug,
        }
        with connection.cursor() as cursor:
            # Deferred foreign-key checks would queue an event per row until commit: check
            # them row by row, or (as a superuser) not at all, since the load is consistent
            # by construction.
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            if cursor.fetchone()[0]:
                cursor.execute("SET LOCAL session_replication_role = replica")
            else:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            # Millions of rows into a dozen btrees of random UUIDs is slow row by row: the
            # indexes that back no constraint are dropped and built again after the load,
            # in this transaction, exactly as the migrations define them.
            rebuild = drop_plain_indexes(cursor) if n_actions >= 1_000_000 else []
            for lo in range(0, n_actions, 1_000_000):
                chunk = {**params, "lo": lo, "hi": min(lo + 1_000_000, n_actions)}
                cursor.execute(LOAD_LEDGER, chunk)
                cursor.execute(LOAD_ACTIONS, chunk)
                self.stdout.write(f"  {chunk['hi']:,} actions")
            cursor.execute("SET LOCAL maintenance_work_mem = '512MB'")
            for definition in rebuild:
                cursor.execute(definition)
            if rebuild:
                self.stdout.write(f"  {len(rebuild)} indexes built again")
            cursor.execute(LOAD_ATTEMPTS, params)
            cursor.execute(LOAD_READS, params)

    def deep_cursor(self, tenant, skip) -> str:
        from core.pagination import encode_cursor

        row = (
            Action.objects.filter(tenant=tenant, state__in=OPEN_FOR_HUMANS)
            .order_by("created_at", "pk")
            .values_list("created_at", "pk")[skip : skip + 1]
            .first()
        )
        return encode_cursor(*row) if row else ""

    def plan(self, tenant) -> str:
        from console.selectors import QueueFilters, queue_rows_queryset

        qs = queue_rows_queryset(QueueFilters(tenant_ids=[tenant.pk])).order_by("created_at", "pk")
        text = qs[:51].explain()
        found = "uses the partial index action_open_queue" if "action_open_queue" in text else text
        tool = Tool.objects.get(tenant=tenant, name="tool_3")
        filters = QueueFilters(tenant_ids=[tenant.pk], state="needs_human", tool_ids=[tool.pk])
        text = queue_rows_queryset(filters).order_by("created_at", "pk")[:51].explain()
        index = "action_open_by_state"
        return found + ("; filtered, " + index if index in text else "; filtered:\n" + text)


def drop_plain_indexes(cursor) -> list[str]:
    """Drop the indexes of the action and ledger tables that back no constraint; return
    their definitions."""
    cursor.execute(
        "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
        "WHERE i.indrelid IN ('runs_action'::regclass, 'ledger_ledgerentry'::regclass) "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)"
    )
    found = cursor.fetchall()
    for name, _definition in found:
        cursor.execute(f'DROP INDEX "{name}"')
    return [definition for _name, definition in found]


def timed_htmx(client, path, runs):
    for _ in range(5):
        client.get(path, HTTP_HX_REQUEST="true")
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(path, HTTP_HX_REQUEST="true")
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 204, response.status_code
    return samples

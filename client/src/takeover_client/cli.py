"""`takeover`: the operator's command line, speaking only HTTP API v1.

    export TAKEOVER_URL=http://127.0.0.1:8000 TAKEOVER_TOKEN=$(cat var/demo-oncall.token)
    takeover queue                      # what needs a person
    takeover show ACTION                # the intent, attempts, reconciliations and the diff
    takeover recheck ACTION             # re-read the authoritative state now
    takeover resolve ACTION --succeeded --reason "checked in the CRM"
    takeover tokens issue --name laptop --expires-in 30d   # your own token, shown once

Tables for people; `--json` on every command prints the API's JSON (one document; lists
as an array) for scripts. Exit status: 0 done, 1 the API refused (the problem's detail is
printed), 2 usage or authentication, 3 Takeover unavailable.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from functools import wraps
from pathlib import Path
from typing import Any

import click

from ._model import UNSET, Model
from .client import Takeover
from .errors import ApiError, Unauthenticated, Unavailable, field_errors


class Context:
    def __init__(self, url: str, token: str | None, tenant: str | None, retry_for: float) -> None:
        self.url, self.token, self.tenant, self.retry_for = url, token, tenant, retry_for
        self._client: Takeover | None = None

    @property
    def client(self) -> Takeover:
        if self._client is None:
            if not self.token:
                raise click.UsageError(
                    "No token: set TAKEOVER_TOKEN, or pass --token/--token-file."
                )
            # A person is waiting: by default 10 s of retries, not the library's 30.
            self._client = Takeover(
                self.url, self.token, tenant=self.tenant, retry_for=self.retry_for
            )
            # So that Takeover records what this CLI proposes as coming from the CLI.
            self._client._http.headers["User-Agent"] = "takeover-cli/1"
        return self._client


def _token(token: str | None, token_file: Path | None) -> str | None:
    if token_file is not None:
        return token_file.read_text().strip()
    return token


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="TAKEOVER_URL",
    default="http://127.0.0.1:8000",
    show_default=True,
    help="Takeover's base URL (TAKEOVER_URL).",
)
@click.option("--token", envvar="TAKEOVER_TOKEN", help="An operator API token (TAKEOVER_TOKEN).")
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="TAKEOVER_TOKEN_FILE",
    help="A file holding the token.",
)
@click.option(
    "--tenant",
    envvar="TAKEOVER_TENANT",
    help="Tenant slug, for an operator in several (TAKEOVER_TENANT).",
)
@click.option(
    "--retry-for",
    envvar="TAKEOVER_RETRY_FOR",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds to retry a 503 or a refused connection (TAKEOVER_RETRY_FOR).",
)
@click.pass_context
def main(
    ctx: click.Context,
    url: str,
    token: str | None,
    token_file: Path | None,
    tenant: str | None,
    retry_for: float,
) -> None:
    """Work Takeover's queue, approvals, runs, ledger and audit log from a terminal."""
    ctx.obj = Context(url, _token(token, token_file), tenant, retry_for)


RENDERERS: dict[str, Callable[[Any], None]] = {}  # command path → how a person sees it


def plain(result: Any) -> Any:
    """Typed results as the API's JSON, for tables and `--json`."""
    if isinstance(result, Model):
        return result.to_dict()
    if isinstance(result, Iterable) and not isinstance(result, dict | list | str):
        result = list(result)
    if isinstance(result, list):
        return [plain(item) for item in result]
    return result


def command(name: str | None = None, group: Any = None) -> Callable:
    """A subcommand with `--json`, API errors turned into messages and exit codes."""

    def decorate(fn: Callable) -> Callable:
        @(group or main).command(name)
        @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
        @click.pass_obj
        @wraps(fn)
        def wrapper(obj: Context, as_json: bool, **kwargs: Any) -> None:
            try:
                result = plain(fn(obj.client, **kwargs))
                # "queue", "tokens issue": the path below the program's own name.
                path = click.get_current_context().command_path.split(" ", 1)[-1]
                render = RENDERERS.get(path)
                if as_json:
                    click.echo(json.dumps(result, indent=2, ensure_ascii=False))
                elif render is not None:
                    render(result)
            except Unauthenticated as exc:
                click.echo(f"error: {exc.detail}", err=True)
                sys.exit(2)
            except ApiError as exc:
                click.echo(f"error: {exc.status} {exc.slug}: {exc.detail}", err=True)
                for field, message in field_errors(exc.errors):
                    click.echo(f"  {field}: {message}", err=True)
                sys.exit(1)
            except Unavailable as exc:
                click.echo(f"error: {exc}", err=True)
                sys.exit(3)

        wrapper.__doc__ = fn.__doc__
        return wrapper

    return decorate


# --- output -------------------------------------------------------------------------------


def _cell(value: Any, width: int) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def table(rows: list[dict], columns: list[tuple]) -> None:
    """columns: (key, max width) or (key, max width, heading); the heading is the key's
    words when not given (`replay_of`: REPLAY OF). Empty lists say so."""
    if not rows:
        click.echo("(nothing)")
        return
    headings = [c[2] if len(c) > 2 else c[0].strip("_").replace("_", " ") for c in columns]
    cells = [[_cell(_get(r, c[0]), c[1]) for c in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headings)]
    header = "  ".join(h.upper().ljust(w) for h, w in zip(headings, widths, strict=True))
    click.echo(header.rstrip())
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _get(row: dict, key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _age(iso: str | None) -> str:
    if not iso:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(iso)).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _why(action: dict) -> str | None:
    return action.get("block_reason") or action.get("failure_reason") or action.get("resolution")


def _with_age(rows: list[dict], field: str = "created_at") -> list[dict]:
    return [{**r, "_age": _age(r.get(field))} for r in rows]


def echo_action(a: dict) -> None:
    click.echo(f"action   {a['id']}  ({a['state']}{', ' + _why(a) if _why(a) else ''})")
    click.echo(f"run      {a['run']}")
    click.echo(f"intent   {a['principal']} → {a['tool']} on {a['target']!r}")
    if a.get("origin"):
        client = f" (client {a['client']})" if a.get("client") else ""
        click.echo(f"from     {a['origin'].upper()}{client}")
    click.echo(f"desired  {json.dumps(a['desired_state'], ensure_ascii=False)}")
    click.echo(f"expected version {a['expected_version']}   key {a['idempotency_key']}")
    if a.get("approval_request_id"):
        click.echo(f"approval request {a['approval_request_id']}")
    if a.get("claimed_by"):
        click.echo(f"claimed by {a['claimed_by']} in the console")
    for t in a.get("attempts", []):
        status = f" HTTP {t['http_status']}" if t.get("http_status") else ""
        click.echo(
            f"attempt {t['number']}  {t['started_at']}  {t['outcome'] or 'in flight'}"
            f"{status}  {t.get('detail') or ''}".rstrip()
        )
    for r in a.get("reconciliations", []):
        click.echo(
            f"read     {r['at']}  {r['verdict']}  expected v{r['expected_version']}, "
            f"actual v{r['actual_version']}"
        )
        for d in r.get("diff") or []:
            click.echo(
                f"  ≠ {d['field']}: wanted {json.dumps(d['desired'])}, "
                f"found {json.dumps(d['actual'])}"
            )


ACTION_COLUMNS = [
    ("id", 36),
    ("state", 17),
    ("_why", 22),
    ("tool", 20),
    ("target", 30),
    ("_age", 5),
]


def action_rows(rows: list[dict]) -> None:
    table([{**r, "_why": _why(r)} for r in _with_age(rows)], ACTION_COLUMNS)


# --- on-call ------------------------------------------------------------------------------


@command("queue")
@click.option("--state", help="Comma-separated: unknown, needs_human, blocked, awaiting_approval.")
@click.option("--tool", help="Comma-separated tool names.")
@click.option("--oldest", is_flag=True, help="Oldest first (the console's order).")
@click.option("--limit", type=int, default=50, show_default=True)
def queue(client: Takeover, state, tool, oldest, limit):
    """Actions waiting for a person."""
    api = client.api
    return api.every(
        api.queue_list,
        state=state or UNSET,
        tool=tool or UNSET,
        order="oldest" if oldest else UNSET,
        limit=limit,
    )


RENDERERS["queue"] = action_rows


@command("show")
@click.argument("action_id")
def show(client: Takeover, action_id):
    """One action: intent, attempts, reconciliations and the diff."""
    return client.api.actions_retrieve(action_id)


RENDERERS["show"] = echo_action


@command("recheck")
@click.argument("action_id")
def recheck(client: Takeover, action_id):
    """Re-read the authoritative state of an unknown or needs_human action now."""
    return client.api.actions_reconcile(action_id)


RENDERERS["recheck"] = echo_action


@command("resolve")
@click.argument("action_id")
@click.option("--succeeded", "outcome", flag_value="succeeded", help="It was applied.")
@click.option("--failed", "outcome", flag_value="failed", help="It was not applied.")
@click.option("--reason", required=True, help="Why: what you checked, where.")
@click.option(
    "--take-over", is_flag=True, help="Resolve it although another operator has claimed it."
)
def resolve(client: Takeover, action_id, outcome, reason, take_over):
    """Settle an unknown or needs_human action, with a reason. The server decides; its
    refusal (a claim, a stale read, the state) is printed in its words."""
    if outcome is None:
        raise click.UsageError("Say --succeeded or --failed.")
    body = {"take_over": True} if take_over else {}
    return client.api.actions_resolve(action_id, outcome=outcome, reason=reason, **body)


RENDERERS["resolve"] = echo_action


# --- approver -----------------------------------------------------------------------------


@command("approvals")
@click.option(
    "--state",
    default="pending",
    show_default=True,
    help="Comma-separated: pending, granted, denied, expired.",
)
@click.option("--limit", type=int, default=50, show_default=True)
def approvals(client: Takeover, state, limit):
    """Approval requests, with their exact binding."""
    return client.api.every(client.api.approval_requests_list, state=state, limit=limit)


RENDERERS["approvals"] = lambda rows: table(
    _with_age(rows),
    [
        ("id", 36),
        ("state", 8),
        ("principal", 16),
        ("tool", 18),
        ("target", 24),
        ("desired_state", 40, "desired"),
        ("_age", 5),
    ],
)


def echo_approval(a: dict) -> None:
    click.echo(
        f"approval {a['id']} ({a['state']}) for {a['principal']} → {a['tool']} on "
        f"{a['target']!r}, expires {a['expires_at']}"
    )


@command("grant")
@click.argument("request_id")
@click.option("--ttl", type=float, help="Seconds the one-shot approval stays valid (default 3600).")
def grant(client: Takeover, request_id, ttl):
    """Grant an approval request (a one-shot approval bound to its exact intent)."""
    return client.api.approval_requests_grant(
        request_id, ttl_seconds=ttl if ttl is not None else UNSET
    )


RENDERERS["grant"] = echo_approval


@command("deny")
@click.argument("request_id")
@click.option("--reason", required=True)
def deny(client: Takeover, request_id, reason):
    """Deny an approval request; its action is blocked."""
    return client.api.approval_requests_deny(request_id, reason=reason)


RENDERERS["deny"] = lambda r: click.echo(f"request {r['id']} denied: {r['reason']}")


# --- admin --------------------------------------------------------------------------------


@command("runs")
@click.option("--status", help="Comma-separated: pending, running, success, error, cancelled.")
@click.option("--limit", type=int, default=50, show_default=True)
def runs(client: Takeover, status, limit):
    """Runs, newest first, with what they called."""
    return client.api.every(client.api.runs_list, status=status or UNSET, limit=limit)


RENDERERS["runs"] = lambda rows: table(
    _with_age(rows),
    [
        ("id", 36),
        ("status", 9),
        ("trigger", 8),
        ("principal", 16),
        ("tools_executed", 30),
        ("replay_of", 36),
        ("_age", 5),
    ],
)


@command("replay")
@click.argument("run_id")
@click.option("--force", is_flag=True, help="Admin: replay although tools may repeat.")
@click.option("--reason", default="", help="Required with --force.")
def replay(client: Takeover, run_id, force, reason):
    """Replay a run as a new pending run (the replay rule decides; --force overrides, for an
    admin with a reason: the server says so when not)."""
    return client.api.runs_replay(run_id, force=force, reason=reason)


RENDERERS["replay"] = lambda r: click.echo(
    f"run {r['id']} created ({r['status']}), a replay of {r['replay_of']}: "
    "the runtime will claim it"
)


@command("ledger")
@click.option("--key", help="One Idempotency-Key (every generation).")
@click.option("--tool")
@click.option("--limit", type=int, default=50, show_default=True)
def ledger(client: Takeover, key, tool, limit):
    """The effect ledger."""
    return client.api.every(
        client.api.ledger_list, key=key or UNSET, tool=tool or UNSET, limit=limit
    )


RENDERERS["ledger"] = lambda rows: table(
    _with_age(rows),
    [
        ("id", 36),
        ("key", 48),
        ("generation", 3, "gen"),
        ("tool", 18),
        ("status", 9),
        ("revoked", 7),
        ("_age", 5),
    ],
)

_RELATIVE = re.compile(r"^(\d+)([smhd])$")


def since_time(text: str) -> datetime:
    """`30m`, `2h`, `7d` ago, or an ISO 8601 timestamp (UTC when it names no zone)."""
    if match := _RELATIVE.match(text.strip()):
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        return datetime.now(UTC) - timedelta(**{unit: int(match.group(1))})
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter("30m, 2h, 7d or an ISO 8601 time", param_hint="--since") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@command("audit")
@click.option("--verb", help="A verb, or a prefix ending in a dot (action.).")
@click.option("--actor", help="kind:name (operator:alice) or a name.")
@click.option("--object", "object_id", help="An object id.")
@click.option("--since", help="Only events since: 30m, 2h, 7d or an ISO 8601 time.")
@click.option("--limit", type=int, default=100, show_default=True)
def audit(client: Takeover, verb, actor, object_id, since, limit):
    """The append-only audit log, newest first."""
    cutoff = since_time(since) if since else None
    events = []
    api = client.api
    pages = api.every(
        api.audit_list, verb=verb or UNSET, actor=actor or UNSET, object=object_id or UNSET
    )
    for event in pages:
        # Newest first: the first event older than the cutoff ends the listing.
        if cutoff and event.at < cutoff:
            break
        events.append(event)
        if len(events) >= limit:
            break
    return events


def _who(party: dict) -> str:
    """An actor or an owner as the API names it: `kind:name`."""
    return f"{party['kind']}:{party['name']}"


RENDERERS["audit"] = lambda rows: table(
    [{**r, "_actor": _who(r["actor"])} for r in rows],
    [
        ("at", 25),
        ("_actor", 28),
        ("verb", 28),
        ("object_type", 14, "object"),
        ("object_id", 36, "id"),
        ("reason", 40),
    ],
)


# --- tokens -------------------------------------------------------------------------------


@main.group("tokens")
def tokens() -> None:
    """API tokens: issue your own, list, revoke."""


@command("issue", group=tokens)
@click.option("--name", default="", help="What it is for (a laptop, a script).")
@click.option(
    "--expires-in",
    "expires_in",
    help="How long it is valid: 3600s, 90m, 12h, 30d (default: the server's).",
)
def tokens_issue(client: Takeover, name, expires_in):
    """Issue a new API token for yourself (the caller). It is shown once: keep it."""
    seconds = duration(expires_in) if expires_in else UNSET
    return client.api.tokens_create(name=name, expires_in_seconds=seconds)


RENDERERS["tokens issue"] = lambda t: click.echo(
    f"token {t['id']} ({t['label']}…) for {t['owner']['kind']} {t['owner']['name']}, "
    f"expires {t['expires_at'] or 'never'}:\n{t['token']}\n"
    "Shown once: Takeover keeps only its hash."
)


@command("list", group=tokens)
@click.option("--state", help="Comma-separated: active, expired, revoked.")
@click.option("--limit", type=int, default=100, show_default=True)
def tokens_list(client: Takeover, state, limit):
    """Tokens: an admin sees the tenant's, anyone else their own."""
    return client.api.every(client.api.tokens_list, state=state or UNSET, limit=limit)


RENDERERS["tokens list"] = lambda rows: table(
    [{**r, "_owner": _who(r["owner"])} for r in _with_age(rows)],
    [
        ("id", 36),
        ("label", 10),
        ("name", 20),
        ("_owner", 28),
        ("state", 8),
        ("expires_at", 25, "expires"),
        ("last_used_at", 25, "last used"),
        ("_age", 5),
    ],
)


@command("revoke", group=tokens)
@click.argument("token_id")
@click.option("--reason", required=True, help="Why (audited).")
def tokens_revoke(client: Takeover, token_id, reason):
    """Revoke a token at once (yours, or, for an admin, anyone's)."""
    return client.api.tokens_revoke(token_id, reason=reason)


RENDERERS["tokens revoke"] = lambda t: click.echo(
    f"token {t['id']} ({t['label']}…) of {t['owner']['kind']} {t['owner']['name']}: {t['state']}"
)

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")


def duration(text: str) -> float:
    """`3600`, `3600s`, `90m`, `12h`, `30d` as seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise click.BadParameter("a number of seconds, or 90m, 12h, 30d", param_hint="--expires-in")
    factor = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    return float(match.group(1)) * factor


if __name__ == "__main__":
    main()

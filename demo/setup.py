"""Demo data for `make run`, created idempotently on every launch.

- tenant ``demo``;
- principal ``demo-agent``, its token in ``var/demo-agent.token``;
- operators ``approver``, ``oncall`` and ``admin`` (password ``<name>-demo``), each with an
  API token in ``var/demo-<name>.token`` for trying the operator API with curl;
- three tools against the demo downstream (``demo/downstream.py``):

  ``update_ticket`` → ``/tickets``, identity = every field it sets (``identity_fields`` empty):
  setting ``status=open`` and setting ``status=solved`` on one ticket are different effects.
  ``close_ticket`` → ``/tickets``, ``requires_approval``; identity ``["status"]``: the
  generated ``resolution_note`` is not what makes two closes the same close.
  ``send_email`` → ``/email``, identity ``["campaign"]``: one e-mail per recipient (the
  target) per campaign, whatever subject and body the model writes this time. Declared
  ``idempotent`` with ``lookup``: the outbox applies a key once and answers "did you apply
  key K?", so its unknown outcomes settle without a person.
  ``search_tickets`` → ``/search``, declared ``read_only``: the ticket search.

The ticket tools stay ``unsafe`` (the ticket system keeps no record of keys). Declarations
that drifted from these are repaired only while nobody but this set-up has declared them:
an admin's own declaration (``POST /api/v1/tools/{name}/declaration``) is left alone.

Tokens are stored hashed and shown once, so a token file is kept while it still
authenticates and re-issued otherwise (a fresh ``var/`` with an existing database, say).

Quirk: an operator's password is set when the operator is created and never reset afterwards: if
someone changed it, :func:`demo_setup` says so instead of printing a password that no
longer works.
"""

from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model

from core.audit import Actor
from core.models import ApiToken, Membership, Principal, Role, Tenant, Tool, hash_token
from core.services import (
    operator_create,
    principal_create,
    tenant_create,
    token_issue,
    tool_create,
    tool_declare,
    tool_update,
)

DEMO = Actor("system", "demo-setup")
TENANT = "demo"
AGENT = "demo-agent"
OPERATORS = [("approver", Role.APPROVER), ("oncall", Role.ONCALL), ("admin", Role.ADMIN)]


def tool_specs(downstream_url: str) -> list[dict]:
    base = downstream_url.rstrip("/")
    return [
        {
            "name": "update_ticket",
            "base_url": f"{base}/tickets",
            "effect": "unsafe",
            "identity_fields": [],
            "timeout_seconds": 3,
        },
        {
            "name": "close_ticket",
            "base_url": f"{base}/tickets",
            "effect": "unsafe",
            "requires_approval": True,
            "identity_fields": ["status"],
            "timeout_seconds": 3,
        },
        {
            "name": "send_email",
            "base_url": f"{base}/email",
            "effect": "idempotent",
            "lookup": True,
            "identity_fields": ["campaign"],
            "timeout_seconds": 3,
        },
        {
            "name": "search_tickets",
            "base_url": f"{base}/search",
            "effect": "read_only",
            "timeout_seconds": 3,
        },
    ]


def demo_password(username: str) -> str:
    return f"{username}-demo"


@dataclass
class DemoLogin:
    username: str
    role: str
    password: str | None  # None: changed since the demo set it
    token_file: Path


@dataclass
class DemoSetup:
    tenant: str
    agent_token_file: Path
    logins: list[DemoLogin] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    # The signing secrets of the demo's tools at the demo downstream, which `make run` hands
    # to it: it refuses calls that do not carry Takeover's signature.
    tool_secrets: list[str] = field(default_factory=list)


def _token_valid(path: Path, **owner) -> bool:
    try:
        raw = path.read_text().strip()
    except OSError:
        return False
    return ApiToken.objects.filter(
        key_hash=hash_token(raw), revoked_at__isnull=True, **owner
    ).exists()


def _write_token(path: Path, raw: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(raw + "\n")


def _reissue_token(path: Path, *, tenant: Tenant, **owner) -> None:
    _token, raw = token_issue(tenant=tenant, actor=DEMO, **owner)
    _write_token(path, raw)


MCP_TOOL = "ticket_status"  # the demo MCP server's update_ticket, through Takeover


def _register_mcp_tool(tenant, mcp_url: str) -> None:
    """One MCP tool for `make run`: the demo MCP server's `update_ticket` (demo/mcp_server.py),
    read back through its `get_ticket`. Registered from the server's own listing (the module
    is importable: no network at set-up), so its hints are kept as a suggestion."""
    from demo.mcp_server import TOOLS
    from runs.mcp_tools import mcp_tool_register

    listing = next(t for t in TOOLS if t.name == "update_ticket")
    mcp_tool_register(
        tenant=tenant,
        name=MCP_TOOL,
        base_url=mcp_url,
        config={"tool": "update_ticket", "target_argument": "ticket_id", "read_tool": "get_ticket"},
        listing=listing.model_dump(by_alias=True, exclude_none=True),
        actor=DEMO,
    )


def demo_setup(*, downstream_url: str, var_dir: Path, mcp_url: str | None = None) -> DemoSetup:
    """Create what is missing, repair what drifted, leave the rest alone."""
    result = DemoSetup(tenant=TENANT, agent_token_file=var_dir / "demo-agent.token")

    tenant = Tenant.objects.filter(slug=TENANT).first()
    if tenant is None:
        tenant = tenant_create(slug=TENANT, name="Demo", actor=DEMO)
        result.created.append(f"tenant {TENANT}")

    principal = Principal.objects.filter(tenant=tenant, name=AGENT).first()
    if principal is None:
        principal, raw = principal_create(tenant=tenant, name=AGENT, actor=DEMO)
        _write_token(result.agent_token_file, raw)
        result.created.append(f"principal {AGENT}")
    elif not _token_valid(result.agent_token_file, principal=principal):
        _reissue_token(result.agent_token_file, tenant=tenant, principal=principal)

    User = get_user_model()
    for username, role in OPERATORS:
        token_file = var_dir / f"demo-{username}.token"
        password = demo_password(username)
        membership = (
            Membership.objects.select_related("user")
            .filter(tenant=tenant, user__username=username)
            .first()
        )
        if membership is None or membership.role != role:
            user, raw = operator_create(
                tenant=tenant,
                username=username,
                role=role,
                password=password if not User.objects.filter(username=username).exists() else None,
                actor=DEMO,
            )
            _write_token(token_file, raw)
            result.created.append(f"operator {username} ({role})")
        else:
            user = membership.user
            if not _token_valid(token_file, user=user):
                _reissue_token(token_file, tenant=tenant, user=user)
        usable = user.check_password(password)
        result.logins.append(DemoLogin(username, role, password if usable else None, token_file))

    for spec in tool_specs(downstream_url):
        tool = Tool.objects.filter(tenant=tenant, name=spec["name"]).first()
        if tool is None:
            tool_create(tenant=tenant, actor=DEMO, **spec)
            result.created.append(f"tool {spec['name']}")
        else:
            if tool.base_url != spec["base_url"]:
                tool_update(
                    tool,
                    base_url=spec["base_url"],
                    actor=DEMO,
                    reason="make run: the demo downstream listens elsewhere (DOWNSTREAM_PORT)",
                )
            declared = {"effect": spec.get("effect", "unsafe"), "lookup": spec.get("lookup", False)}
            ours = tool.declared_by in (None, DEMO.as_dict())
            if ours and (tool.effect, tool.lookup) != (declared["effect"], declared["lookup"]):
                tool_declare(
                    tool,
                    actor=DEMO,
                    reason="make run: what the demo downstream offers",
                    **declared,
                )
    if mcp_url and not Tool.objects.filter(tenant=tenant, name=MCP_TOOL).exists():
        _register_mcp_tool(tenant, mcp_url)
        result.created.append(f"tool {MCP_TOOL} (MCP)")
    elif mcp_url:
        Tool.objects.filter(tenant=tenant, name=MCP_TOOL, kind="mcp").exclude(
            base_url=mcp_url
        ).update(base_url=mcp_url)
    base = downstream_url.rstrip("/") + "/"
    for tool in Tool.objects.filter(tenant=tenant, base_url__startswith=base):
        result.tool_secrets.extend(tool.signing_secrets())
    return result

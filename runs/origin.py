"""Where a proposal came from (docs/mcp.md: the console shows API, MCP or CLI, and the audit
names the MCP client). A context variable, set by whoever receives the request — the MCP
gateway (`mcp` and the client's name), a request whose User-Agent is the takeover CLI
(`cli`) — and read by `runs.propose` when it builds the action and its audit event. The
API's default is `api`."""

import contextvars
from contextlib import contextmanager

API, MCP, CLI = "api", "mcp", "cli"
ORIGINS = (API, MCP, CLI)

origin_var: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar(
    "takeover_origin", default=(API, "")
)


@contextmanager
def proposing_from(origin: str, client: str = ""):
    token = origin_var.set((origin, client[:200]))
    try:
        yield
    finally:
        origin_var.reset(token)


def action_fields() -> dict:
    """Where the proposal being made comes from, as its action's `origin` and `client`."""
    origin, client = origin_var.get()
    return {"origin": origin, "client": client}


def as_dict() -> dict:
    """The same for an audit event (a client not named is null)."""
    origin, client = origin_var.get()
    return {"origin": origin, "client": client or None}


class OriginMiddleware:
    """Every request's proposals are the API's, unless its User-Agent is the takeover CLI's
    (`takeover-cli/...`, client/src/takeover_client/cli.py). /mcp sets its own."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        agent = request.headers.get("User-Agent", "")
        source = CLI if agent.startswith("takeover-cli/") else API
        token = origin_var.set((source, agent[:200] if source == CLI else ""))
        try:
            return self.get_response(request)
        finally:
            origin_var.reset(token)

"""MCP servers as tools (docs/mcp.md): what an MCP tool's
registration holds, how a call's arguments become an intent and back, and the import of the
upstream's annotations as *suggested* declarations that an admin confirms.

A tool of `kind: "mcp"` keeps in `Tool.mcp`:

- `tool`: the upstream tool that applies the effect (`tools/call`, key in `_meta`);
- `target_argument`: which of its arguments names the target (the rest are the
  `desired_state`; the apply sends them all back, the target under this name);
- `read_tool` and `read_arguments`: the side-effect-free tool that reads the authoritative
  state, and its arguments, where a string `"{target}"` is replaced by the target. Its
  `structuredContent` is `{"state": {...}, "version": int}` (or the state itself, with its
  `version` among the fields); `{"state": null}` or `{"found": false}` means the target does
  not exist;
- optionally `lookup_tool` and `lookup_arguments` (`"{key}"` and `"{target}"` replaced):
  `{"applied": true, "state", "version"}` when the upstream applied that key, `{"applied":
  false}` when it never saw it;
- `input_schema` and `annotations`, as the upstream's `tools/list` gave them, and
  `suggested`: the declaration the annotations suggest (`readOnlyHint` → `read_only`,
  `idempotentHint` → `idempotent`), which never applies by itself: the tool stays what an
  admin declared (`unsafe` until then) and the suggestion waits for an admin to confirm it
  (`tool_declare`, API `POST /tools/{name}/declaration` or the console).
"""

from core.audit import Actor
from core.egress import validate_base_url
from core.errors import ValidationFailed
from core.models import Role, Tool, ToolEffect, ToolKind
from core.services import tool_insert

from .engine.mcp import listing_for

KEYS = {
    "tool",
    "target_argument",
    "read_tool",
    "read_arguments",
    "lookup_tool",
    "lookup_arguments",
}


def suggested_effect(annotations: dict | None) -> str | None:
    """The declaration an upstream's hints suggest, or None (a hint never lowers safety on
    its own: this is only ever shown, and applied when an admin confirms it)."""
    hints = annotations or {}
    if hints.get("readOnlyHint") is True:
        return ToolEffect.READ_ONLY
    if hints.get("idempotentHint") is True:
        return ToolEffect.IDEMPOTENT
    return None


def check_config(config) -> dict:
    """A registration's `mcp` object, checked; a 400 naming the field otherwise."""
    if not isinstance(config, dict):
        raise ValidationFailed("Bad mcp.", {"mcp": ["An object."]})
    unknown = sorted(set(config) - KEYS)
    if unknown:
        raise ValidationFailed("Bad mcp.", {f"mcp.{unknown[0]}": ["Not a known field."]})
    errors = {}
    for name in ("tool", "target_argument", "read_tool"):
        value = config.get(name)
        if not isinstance(value, str) or not value.strip() or len(value) > 128:
            errors[f"mcp.{name}"] = ["A name of 1 to 128 characters."]
    lookup = config.get("lookup_tool")
    if lookup is not None and (not isinstance(lookup, str) or not lookup.strip()):
        errors["mcp.lookup_tool"] = ["A tool name, or leave it out."]
    for name in ("read_arguments", "lookup_arguments"):
        value = config.get(name, {})
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            errors[f"mcp.{name}"] = ['An object of arguments ("{target}", "{key}" replaced).']
    if errors:
        raise ValidationFailed("Bad mcp.", errors)
    return {
        "tool": config["tool"],
        "target_argument": config["target_argument"],
        "read_tool": config["read_tool"],
        "read_arguments": config.get("read_arguments") or {config["target_argument"]: "{target}"},
        "lookup_tool": lookup,
        "lookup_arguments": config.get("lookup_arguments") or {"key": "{key}"},
    }


def mcp_tool_register(
    *,
    tenant,
    name: str,
    base_url: str,
    config: dict,
    requires_approval: bool = False,
    identity_fields=(),
    timeout_seconds: float = 10,
    listing: dict | None = None,
    actor: Actor,
) -> Tool:
    """Register an MCP server's tool. `listing` is the upstream's `tools/list` entry for
    `config["tool"]` (read by the caller, `runs.engine.mcp.list_tools`): its input schema
    and annotations are kept, and its hints become a suggestion, never a declaration."""
    actor.require(Role.ADMIN)
    config = check_config(config)
    validate_base_url(base_url)
    listing = listing or {}
    annotations = listing.get("annotations") or {}
    config["input_schema"] = listing.get("inputSchema") or {"type": "object"}
    config["annotations"] = annotations
    config["suggested"] = suggested_effect(annotations)
    facts = {
        "kind": ToolKind.MCP,
        "mcp": {k: config[k] for k in ("tool", "read_tool", "lookup_tool")},
        "suggested": config["suggested"],
        "annotations": annotations,
    }
    return tool_insert(
        tenant=tenant,
        name=name,
        base_url=base_url,
        kind=ToolKind.MCP,
        mcp=config,
        effect=ToolEffect.UNSAFE,  # until an admin confirms what the hints suggest
        lookup=config["lookup_tool"] is not None,
        requires_approval=requires_approval,
        identity_fields=identity_fields,
        timeout_seconds=timeout_seconds,
        actor=actor,
        facts=facts,
    )


def register_listed(
    *, tenant, name, base_url, mcp, actor: Actor, effect=None, lookup=None, **options
):
    """`mcp_tool_register` with the upstream listed first (`POST /tools` with `kind: mcp`,
    `manage.py register_mcp_tool`). A server that cannot be listed, or lists no such tool, is
    a 400 naming `mcp.tool`; nothing is written."""
    actor.require(Role.ADMIN)
    config = check_config(mcp)
    validate_base_url(base_url)
    try:
        listing = listing_for(base_url, config["tool"], timeout=options.get("timeout_seconds", 10))
    except ValueError as exc:
        raise ValidationFailed("Bad mcp.", {"mcp.tool": [str(exc)]}) from exc
    return mcp_tool_register(
        tenant=tenant,
        name=name,
        base_url=base_url,
        config=mcp,
        listing=listing,
        actor=actor,
        **options,
    )

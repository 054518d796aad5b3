"""The console's Tools page: each tool of the tenant with what it declares, and for an MCP
server's tool (docs/mcp.md) its upstream and the declaration its annotations suggest, which
an admin confirms here (the same audited `tool_declare` as the API's)."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse

from core.models import Role, Tool
from core.services import tool_declare

from .web import decision, go, operator_required


@operator_required()
def tools(request):
    scope = request.scope
    rows = Tool.objects.filter(tenant=scope.tenant).order_by("name")
    return render(
        request,
        "console/tools.html",
        {
            "tools": [
                {
                    "tool": t,
                    "suggested": (t.mcp or {}).get("suggested"),
                    "hints": (t.mcp or {}).get("annotations") or {},
                }
                for t in rows
            ],
            "section": "tools",
        },
    )


def _tool_of(scope, pk) -> Tool:
    tool = Tool.objects.filter(pk=pk, tenant_id__in=scope.tenant_ids).first()
    if tool is None:
        raise Http404
    return tool


def _back(tool) -> str:
    return reverse("console:tools")


@decision(_tool_of, Role.ADMIN, back=_back, refused="Not confirmed")
def confirm_suggestion(request, tool):
    suggested = (tool.mcp or {}).get("suggested")
    if not suggested:
        messages.error(request, f"{tool.name} has no suggested declaration to confirm.")
        return go(request, _back(tool))
    hints = (tool.mcp or {}).get("annotations") or {}
    tool_declare(
        tool,
        actor=request.actor,
        effect=suggested,
        reason=f"confirmed the MCP server's hints {hints} as effect={suggested}",
    )
    messages.success(request, f"{tool.name} now declares effect={suggested}.")
    return go(request, _back(tool))

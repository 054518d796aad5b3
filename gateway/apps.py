from django.apps import AppConfig


class GatewayConfig(AppConfig):
    """Takeover as an MCP server (`/mcp`, docs/mcp.md)."""

    name = "gateway"
    default_auto_field = "django.db.models.BigAutoField"

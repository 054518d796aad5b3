from django.contrib import admin
from django.urls import include, path

from gateway.views import mcp_endpoint

from . import errors

urlpatterns = [
    path("api/v1/", include(("api.urls", "api"), namespace="api")),
    path("mcp", mcp_endpoint, name="mcp"),  # Takeover as an MCP server (docs/mcp.md)
    path("admin/", admin.site.urls),
    path("", include("console.urls", namespace="console")),
]

handler400 = errors.bad_request
handler403 = errors.permission_denied
handler404 = errors.not_found
handler500 = errors.server_error

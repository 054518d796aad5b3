"""OpenAPI descriptions of our authenticators (drf-spectacular discovers these on import)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "core.api.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A principal's or operator's API token. Operators in several "
            "tenants add `X-Takeover-Tenant: <slug>`.",
        }


class ConsoleSessionScheme(OpenApiAuthenticationExtension):
    target_class = "core.api.auth.ConsoleSessionAuthentication"
    name = "consoleSession"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}

"""`/mcp`: principal bearer auth, then the SDK (gateway/server.py) through the bridge.

Authentication happens here, before the body is read or anything MCP is parsed: no token,
a token that is not a live principal token (an operator's included), or another scheme is
a 401 problem+json with `WWW-Authenticate`. The principal's tenant is the scope of
everything the call sees."""

import json

from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from core.access import principal_viewer, token_lookup
from core.models import hash_token

from .calls import Caller
from .server import gateway

CHALLENGE = 'Bearer realm="takeover", error="invalid_token"'


def unauthenticated(detail: str) -> HttpResponse:
    body = {
        "type": "/problems/unauthenticated",
        "title": "Unauthenticated",
        "status": 401,
        "detail": detail,
    }
    response = HttpResponse(json.dumps(body), status=401, content_type="application/problem+json")
    response["WWW-Authenticate"] = CHALLENGE
    return response


def principal_of(request):
    header = request.headers.get("Authorization", "")
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return None
    token = token_lookup(hash_token(raw.strip()), timezone.now())
    if token is None or token.principal is None:
        return None
    return token.principal


@csrf_exempt
def mcp_endpoint(request):
    principal = principal_of(request)
    if principal is None:
        return unauthenticated(
            "/mcp takes 'Authorization: Bearer <principal token>' (an agent's token from "
            "manage.py create_principal); this one is missing, invalid, expired or revoked."
        )
    principal_viewer(principal).into_log_context()
    caller = Caller(
        principal=principal,
        client=(request.headers.get("User-Agent") or "")[:200],
        console=request.build_absolute_uri("/").rstrip("/"),
    )
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in request.headers.items()
        ],
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
        "server": (request.get_host(), 0),
    }
    status, headers, body = gateway.handle(scope, request.body, caller)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        key = name.decode("latin-1")
        if key.lower() != "content-length":
            response[key] = value.decode("latin-1")
    return response

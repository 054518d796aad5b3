"""The agent's hot requests without DRF's per-request machinery.

A runtime proposes an action and reads (or waits for) it over and over, with a bearer token
and a JSON body. For such a request `fast` runs the view's own function with what it reads
of DRF's Request (`Call`): the bearer token's caller, the body parsed by the same strict
parser, the query; its errors go through the same exception handler, and the answer is
rendered with orjson. What is left out is what these requests never use: content
negotiation, parser selection, the session authenticator, per-request view instances.

Anything else (another method, a session instead of a token, an `Accept` or a body that is
not plain JSON, an unknown query parameter such as DRF's `format`) goes to the DRF view, so
that every such request is answered exactly as before. The DRF view also stays the one the
schema describes (its attributes are copied onto the fast one).
"""

import functools
import io

import orjson
from django.utils.functional import cached_property
from rest_framework.renderers import JSONRenderer

from api.auth import BearerTokenAuthentication
from api.parsers import StrictJSONParser
from api.problems import exception_handler

# What DRF's negotiation answers with the JSON renderer alone; anything else goes to DRF.
ACCEPTS = frozenset({"", "*/*", "application/json", "application/*"})
_authenticator = BearerTokenAuthentication()
_parser = StrictJSONParser()
_renderer = JSONRenderer()


class Call:
    """What the API's views read of DRF's Request, for a request `fast` serves."""

    def __init__(self, request):
        self._request = request
        self.user = None

    @property
    def headers(self):
        return self._request.headers

    @property
    def query_params(self):
        return self._request.GET

    @cached_property
    def data(self):
        # As DRF parses it: a ParseError or ValidationFailed surfaces where it is first read.
        return _parser.parse(io.BytesIO(self._request.body))

    def __getattr__(self, name):
        return getattr(self._request, name)


def render(response, allow: str):
    """A DRF Response rendered as DRF's JSONRenderer would (compact UTF-8, U+2028 and U+2029
    escaped), with DRF's Allow header."""
    try:
        body = orjson.dumps(response.data)
    except TypeError:  # what orjson does not take (an int past 64 bits): DRF's renderer
        body = _renderer.render(response.data)
    else:
        if b"\xe2\x80\xa8" in body or b"\xe2\x80\xa9" in body:
            body = body.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
    response.content = body
    response["Content-Type"] = response.content_type or "application/json"
    response["Allow"] = allow
    return response


def _served(request, method: str, params: frozenset) -> bool:
    meta = request.META
    if request.method != method or not meta.get("HTTP_AUTHORIZATION"):
        return False
    if meta.get("HTTP_ACCEPT", "") not in ACCEPTS:
        return False
    if request.GET and not params.issuperset(request.GET):
        return False
    if method == "POST":
        return request.content_type == "application/json" and meta.get("CONTENT_LENGTH") not in (
            None,
            "",
            "0",
        )
    return True


def fast(*params: str, lookup=None):
    """Serve an `endpoint` view's plain requests (its one method, a bearer token, these
    query `params`) without DRF; the rest through DRF. `lookup(call, *args, **kwargs)`: the
    token's lookup for authentication to use on this request (or None, for the plain one),
    when the view reads more in the same statement."""
    allowed = frozenset(params)

    def wrap(view):
        func, operations = view.endpoint
        ((method, _),) = operations
        allow = ", ".join(view.cls().allowed_methods)

        @functools.wraps(view)
        def served(request, *args, **kwargs):
            if not _served(request, method, allowed):
                return view(request, *args, **kwargs)
            call = Call(request)
            try:
                caller, _token = _authenticator.authenticate(  # a header: never None
                    request, lookup and lookup(call, *args, **kwargs)
                )
                call.user = request.user = caller
                response = func(call, *args, **kwargs)
            except Exception as exc:
                response = exception_handler(exc, {"request": call})
                response.exception = True
            return render(response, allow)

        return served

    return wrap

"""The console's middleware, skipped by the machine interfaces.

Sessions, CSRF, the signed-in user, the operator's time zone, messages, X-Frame-Options,
htmx and the sign-in lockout serve pages a person opens in a browser. An agent calling
/api/v1/ with a bearer token, or /mcp, needs none of them, and passing through them cost
the hot API requests about a tenth of their CPU. settings.MIDDLEWARE brackets them between
`ConsoleOnly` and `ConsoleOnlyEnd`, and a machine request goes from the one straight to
what follows the other. The headers every response needs (SecurityMiddleware, the CSP, the
request id) sit outside the brackets.

They stay listed in settings.MIDDLEWARE, in their order, so that Django's, the admin's and
axes' checks (`check --deploy` among them) still see them.

An API request that carries the console's session cookie goes through them as before:
operators may call the API with their session (api/auth.py, ConsoleSessionAuthentication),
which needs the session, the user and the CSRF check.

Also here: django-csp's middleware with its policy built once (`CSPMiddleware`).
"""

import threading

import csp.middleware
import csp.utils
from csp.constants import HEADER, HEADER_REPORT_ONLY
from django.conf import settings

API_PREFIX = "/api/v1/"
# Under the API prefix but pages (and their schema) a person opens in a browser.
API_PAGES = ("/api/v1/docs", "/api/v1/schema")


def machine_request(request) -> bool:
    """/mcp, or the API without the console's session cookie (its docs pages excepted)."""
    path = request.path_info
    if path == "/mcp":
        return True
    return (
        path.startswith(API_PREFIX)
        and not path.startswith(API_PAGES)
        and settings.SESSION_COOKIE_NAME not in request.COOKIES
    )


# Django builds a handler's chain from the last middleware to the first, in one thread:
# `ConsoleOnlyEnd` leaves what follows it here, and `ConsoleOnly`, built after it, takes it.
_built = threading.local()


class ConsoleOnlyEnd:
    """Closes the bracket; a console request passes through."""

    def __init__(self, get_response):
        self.get_response = _built.after_console = get_response

    def __call__(self, request):
        return self.get_response(request)


class ConsoleOnly:
    """Opens the bracket: a `machine_request` skips to what follows `ConsoleOnlyEnd`."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.after_console = _built.__dict__.pop("after_console")

    def __call__(self, request):
        if not machine_request(request):
            return self.get_response(request)
        # What CommonMiddleware, skipped, does for every request: a Host not in
        # ALLOWED_HOSTS is refused (DisallowedHost, a 400), and a Content-Length is set.
        request.get_host()
        response = self.after_console(request)
        if not response.streaming and not response.has_header("Content-Length"):
            response.headers["Content-Length"] = str(len(response.content))
        return response


class CSPMiddleware(csp.middleware.CSPMiddleware):
    """django-csp's, with the policy built once per configuration rather than per response
    (building it deep-copies the settings' directives twice: a tenth of a ledger hit's CPU).
    A response or request that carries its own policy parts or a nonce is built as before."""

    _OWN_PARTS = (
        "_csp_config",
        "_csp_update",
        "_csp_replace",
        "_csp_exempt",
        "_csp_config_ro",
        "_csp_update_ro",
        "_csp_replace_ro",
        "_csp_exempt_ro",
    )

    def __init__(self, get_response):
        super().__init__(get_response)
        self._policies: dict = {}

    def _built(self) -> list[tuple[str, str, str]]:
        """(header, policy, setting) for the settings as they are now."""
        enforced = getattr(settings, "CONTENT_SECURITY_POLICY", None)
        report_only = getattr(settings, "CONTENT_SECURITY_POLICY_REPORT_ONLY", None)
        key = (id(enforced), id(report_only))
        if key not in self._policies:
            self._policies = {
                key: [
                    (HEADER, csp.utils.build_policy(), "CONTENT_SECURITY_POLICY"),
                    (
                        HEADER_REPORT_ONLY,
                        csp.utils.build_policy(report_only=True),
                        "CONTENT_SECURITY_POLICY_REPORT_ONLY",
                    ),
                ]
            }
        return self._policies[key]

    def process_response(self, request, response):
        if getattr(request, "_csp_nonce", None) is not None or any(
            hasattr(response, name) for name in self._OWN_PARTS
        ):
            return super().process_response(request, response)
        if response.status_code in (500, 404) and settings.DEBUG:
            return response
        for header, policy, setting in self._built():
            if not policy or header in response:
                continue
            prefixes = (getattr(settings, setting, None) or {}).get("EXCLUDE_URL_PREFIXES") or ()
            if not request.path_info.startswith(tuple(prefixes)):
                response[header] = policy
        request.csp_nonce = csp.middleware.CheckableLazyObject(self._csp_nonce_post_response)
        return response

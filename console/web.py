"""The operator console (README, "The console, for people"): server-rendered pages, HTMX
for the live parts.

Shape of every view: a scope check at the top (signed in, member of a tenant, the role the
page needs), a getter that 404s across tenants, a service call for any change (never a state
write here), and then a page, a partial of that page for an HTMX request, or a redirect.

- Mutations are POST only, CSRF-checked (the token rides in `hx-headers` on <body> for HTMX
  and in a hidden field for plain forms), and answer an HTMX request with `HX-Location`, a
  plain one with a 303 redirect. Every page works without JavaScript.
- Roles are checked against the membership of the *object's* tenant (admin implies the
  other two), and the templates show a button only to someone the view would let through.
- Live regions poll with a signature of what they show; an unchanged region gets a 204 and
  the browser leaves the DOM — focus, selection, scroll — alone.
"""

import csv
from functools import wraps

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect, HttpResponseLocation

from core.access import console_viewer
from core.errors import DomainError

# --- scope and roles -----------------------------------------------------------------------


def operator_required(role: str | None = None):
    """Signed in (else the sign-in page), member of a tenant (else 403), and — for pages of
    the current tenant — holding `role` there (else 403). Sets `request.scope`."""

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.user.is_authenticated:
                if request.htmx:
                    # Back to the page the browser shows, not to the poll that found out.
                    here = request.htmx.current_url_abs_path or reverse("console:queue")
                    return HttpResponseClientRedirect(
                        reverse("console:login") + "?" + urlencode({"next": here})
                    )
                return redirect_to_login(request.get_full_path())
            scope = console_viewer(request.user, request.session)
            if scope is None:
                raise PermissionDenied("You are not a member of any tenant.")
            request.scope = scope
            if role and not scope.has_role(role):
                raise PermissionDenied(f"This page needs the {role} role in {scope.tenant.slug}.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def go(request, url: str):
    """After a POST: HTMX navigates with HX-Location, a plain form follows a 303."""
    if request.htmx:
        return HttpResponseLocation(url)
    response = HttpResponseRedirect(url)
    response.status_code = 303  # See Other: the browser follows with a GET
    return response


def decision(get=None, role: str | None = None, *, back, refused: str = "Not done", inline=None):
    """The console's decisions, in one shape (every POST that changes something goes
    through it): POST only; signed in (`operator_required`); the object through its scoped
    getter `get(scope, pk)`, so another tenant's is a 404; the role in the object's tenant
    (the current tenant's when there is no object: `get` None), else 403. The view gets
    the object (unless `get` is None) and `request.actor` (who acts, with their roles
    there), validates its form and calls one service. A refusal by the service (a
    DomainError: a state conflict, a missing reason, a role) becomes an error message in
    words, nothing changed, and the browser goes `back(obj)`: HX-Location for htmx, a 303
    otherwise (`go`). With `inline(request, obj, text)`, an htmx request gets the refusal
    next to the control that caused it instead (the view's fresh controls, swapped in place).
    """

    def decorator(view):
        @require_POST
        @operator_required()
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if get is None:
                obj, objects, tenant_id = None, (), request.scope.tenant.pk
            else:
                obj = get(request.scope, kwargs.pop("pk"))
                objects = (obj,)
                tenant_id = getattr(obj, "tenant_id", None) or request.scope.tenant.pk
            if role:
                request.scope.require_role(role, tenant_id)
            request.actor = request.scope.actor_for(tenant_id)
            try:
                return view(request, *objects, *args, **kwargs)
            except DomainError as exc:
                if inline is not None and request.htmx:
                    return inline(request, obj, f"{refused}: {exc.detail}")
                messages.error(request, f"{refused}: {exc.detail}")
                return go(request, next_or(request, back(obj)))

        return wrapped

    return decorator


def live_poll(request, flag: str, signature: str, partial: str, context: dict, **extra):
    """The live-poll skeleton. Not a poll (`?<flag>=1` from htmx): None, the view renders its
    page. A poll whose signature (`v`) is unchanged: 204, and the browser leaves the DOM
    (focus, selection, scroll) alone. Otherwise the live partial, swapped out of band."""
    if not (request.htmx and request.GET.get(flag)):
        return None
    if request.GET.get("v") == signature:
        return HttpResponse(status=204)
    return render(request, partial, {**context, "oob": True, **extra})


def list_page(request, template: str, page, **context):
    """The list-page skeleton: `page` is `(rows, next_cursor)` from a keyset read; the
    template gets the rows and the links to the first and the next page (the query string
    kept, the cursor changed)."""
    rows, next_cursor = page
    return render(
        request,
        template,
        {
            "rows": rows,
            "paged": bool(request.GET.get("after")),
            "next_query": query_with(request, after=next_cursor) if next_cursor else "",
            "first_query": query_with(request, after=None),
            **context,
        },
    )


def action_url(action) -> str:
    return reverse("console:action", args=[action.pk])


def run_url(run) -> str:
    return reverse("console:run", args=[run.pk])


def approvals_url(req) -> str:
    return reverse("console:approvals")


def next_or(request, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def query_with(request, **changes) -> str:
    """The current query string with some parameters changed (None drops one)."""
    params = request.GET.copy()
    for name in ("refresh", "v", "live", "c", "poll"):
        params.pop(name, None)
    for name, value in changes.items():
        params.pop(name, None)
        if value is not None:
            params[name] = value
    return params.urlencode()


def remember_form(request, key: str, form) -> None:
    """Post/Redirect/Get for a plain form with errors: what was typed and what was wrong
    are kept in the session for the page the browser is sent back to (a reload of that page
    is a harmless GET, not a 405 on the POST URL)."""
    data = {k: v for k, v in form.data.items() if k != "csrfmiddlewaretoken"}
    errors = {name: [str(e) for e in errs] for name, errs in form.errors.items()}
    request.session[f"form:{key}"] = {"data": data, "errors": errors}


def recall_form(request, key: str, make):
    """The form remembered by `_remember_form`, bound and with its errors; or None."""
    saved = request.session.pop(f"form:{key}", None)
    if not saved:
        return None
    form = make(saved["data"])
    form.is_valid()
    for name, messages_ in saved["errors"].items():
        if name not in form.errors:
            for message in messages_:
                form.add_error(None if name == "__all__" else name, message)
    return form


class _Echo:
    def write(self, value):
        return value


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str:
    # Reasons and names are free text, some of it written by agents: a cell that a
    # spreadsheet would run as a formula gets a leading apostrophe (OWASP's CSV advice).
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def csv_response(filename, header, rows):
    writer = csv.writer(_Echo())

    def stream():
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([_cell(v) for v in row])

    response = StreamingHttpResponse(stream(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response

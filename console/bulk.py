"""Bulk decisions in the console: select queue items (or runs), preview
exactly what each will do, then confirm. The plan and the confirm are `runs.bulk`'s; these
views only collect the selection and show the answer.

The preview is a POST (it carries the reason) that changes nothing and answers with the
page; reloading it asks again, harmlessly. The confirm is a POST that answers with a 303 to
the result page (kept in the session, so a reload shows it again and does nothing).
"""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.errors import StaleRead, ValidationFailed
from runs import bulk

from .views import _next_or, operator_required

RESULT_KEY = "bulk:result"


def _args(request) -> dict:
    """The plan's arguments from the form: `operation` may carry the outcome
    ("resolve:failed"), as the queue's single select does."""
    operation, _, outcome = request.POST.get("operation", "").partition(":")
    return {
        "viewer": request.scope,
        "operation": operation,
        "outcome": outcome or request.POST.get("outcome", ""),
        "ids": request.POST.getlist("id"),
        "reason": request.POST.get("reason", "")[:2000],
        "force": request.POST.get("force") == "on",
    }


def _back(request) -> str:
    fallback = reverse("console:runs") if request.POST.get("operation") == "replay" else "/"
    return _next_or(request, fallback)


def _see_other(url):
    response = HttpResponseRedirect(url)
    response.status_code = 303
    return response


def _refused(request, exc: ValidationFailed):
    said = [e for errors in exc.extra.get("errors", {}).values() for e in errors]
    messages.error(request, f"Nothing to preview: {exc.detail} {' '.join(said)}".strip())
    return _see_other(_back(request))


def _preview(request, plan, *, status=200):
    return render(
        request,
        "console/bulk.html",
        {
            "section": "runs" if plan.operation == "replay" else "queue",
            "plan": plan.as_dict(),
            "acting": plan.acting,
            "operation_label": bulk.OPERATIONS[plan.operation],
            "wills": bulk.WILLS,
            "back": _back(request),
            "mode": "preview",
        },
        status=status,
    )


@require_POST
@operator_required()
def bulk_preview(request):
    try:
        plan = bulk.bulk_plan(**_args(request))
    except ValidationFailed as exc:
        return _refused(request, exc)
    return _preview(request, plan)


@require_POST
@operator_required()
def bulk_confirm(request):
    args = _args(request)
    try:
        plan, results = bulk.bulk_apply(signature=request.POST.get("signature", ""), **args)
    except ValidationFailed as exc:
        return _refused(request, exc)
    except StaleRead as exc:
        messages.warning(request, exc.detail)
        return _preview(request, bulk.bulk_plan(**args), status=409)
    done = sum(1 for r in results if r.did not in {bulk.SKIP, "refused"})
    request.session[RESULT_KEY] = {
        "plan": plan.as_dict(),
        "results": [r.as_dict() for r in results],
        "back": _back(request),
    }
    refused = sum(1 for r in results if r.did == "refused")
    if refused:
        messages.warning(
            request,
            f"Done for {done} of {len(results)}; {refused} refused when done (see below).",
        )
    else:
        messages.success(
            request,
            f"Done for {done} of {len(results)}, as previewed. Each decision is in the audit log.",
        )
    return _see_other(reverse("console:bulk_done"))


@operator_required()
def bulk_done(request):
    saved = request.session.get(RESULT_KEY)
    if not saved:
        return _see_other("/")
    return render(
        request,
        "console/bulk.html",
        {
            "section": "runs" if saved["plan"]["operation"] == "replay" else "queue",
            "plan": saved["plan"],
            "results": saved["results"],
            "operation_label": bulk.OPERATIONS[saved["plan"]["operation"]],
            "wills": bulk.WILLS,
            "back": saved["back"],
            "mode": "done",
        },
    )

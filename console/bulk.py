"""Bulk decisions in the console: select queue items (or runs), preview
exactly what each will do, then confirm. The plan and the confirm are `runs.bulk`'s; these
views only collect the selection and show the answer.

The preview is a POST (it carries the reason) that changes nothing and answers with the
page; reloading it asks again, harmlessly. The confirm is a POST that answers with a 303 to
the result page (kept in the session, so a reload shows it again and does nothing).
"""

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.db import connections
from django.db.models import Max
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.errors import DomainError, StaleRead, ValidationFailed
from core.models import Role
from runs import bulk, decisions
from runs.dryrun import dry_run_for
from runs.models import Action, Reconciliation, Run
from runs.states import ActionState, Verdict

from .web import next_or, operator_required

# A resolve that says the opposite of the fresh read: called out, and done only if ticked.
CONTRADICTS = {
    ActionState.FAILED: {Verdict.MATCH, Verdict.LOOKUP_APPLIED},
    ActionState.SUCCEEDED: {
        Verdict.MISMATCH,
        Verdict.MOVED_ON,
        Verdict.MISSING,
        Verdict.LOOKUP_NOT_FOUND,
    },
}

RESULT_KEY = "bulk:result"
READERS = 8  # fresh reads before a resolve preview, in parallel


def _fresh_reads(request, ids) -> int:
    """Before a resolve preview: every selected unknown / needs-human action whose latest
    read is older than the resolve rule allows is read again now, all in one batch (in
    parallel, each read side-effect free). Returns how many were read."""
    limit = timezone.now() - timedelta(seconds=settings.RESOLVE_READ_MAX_AGE_SECONDS)
    scope = request.scope
    wanted = []
    for raw in ids[: bulk.BULK_MAX_ITEMS]:
        try:
            wanted.append(str(uuid.UUID(raw)))
        except ValueError:
            continue
    rows = (
        Action.objects.filter(
            pk__in=wanted,
            tenant_id__in=scope.tenant_ids,
            state__in=[ActionState.UNKNOWN, ActionState.NEEDS_HUMAN],
        )
        .annotate(last_read=Max("reconciliations__at"))
        .values_list("pk", "tenant_id", "last_read")
    )
    stale = [
        (pk, tenant)
        for pk, tenant, last in rows
        if (last is None or last < limit) and scope.has_role(Role.ONCALL, tenant)
    ]

    def read(item):
        pk, tenant = item
        try:
            decisions.action_recheck(pk, actor=scope.actor_for(tenant))
        except DomainError:
            pass  # settled meanwhile: the preview says so
        finally:
            connections.close_all()

    if stale:
        with ThreadPoolExecutor(max_workers=min(READERS, len(stale))) as pool:
            list(pool.map(read, stale))
    return len(stale)


def _needs_own_confirmation(plan) -> dict:
    """Items the plan would do that deserve their own tick, in words: a resolve that
    contradicts its fresh read (failed on a match, succeeded on a mismatch), a replay that
    can only hand back recorded failures."""
    flagged = {}
    if plan.operation == "resolve":
        reads = dict(
            Reconciliation.objects.filter(
                pk__in=[i.read_id for i in plan.items if i.acts and i.read_id]
            ).values_list("pk", "verdict")
        )
        for item in plan.items:
            verdict = reads.get(item.read_id)
            if item.acts and verdict in CONTRADICTS[plan.outcome]:
                said = "matches" if plan.outcome == ActionState.FAILED else "does not match"
                flagged[item.id] = (
                    f"Contradicts the fresh read: the target {said} the desired state "
                    f"({verdict.replace('_', ' ')}), yet this resolves it as {plan.outcome}. "
                    "Done only if you tick it."
                )
    if plan.operation == "replay":
        runs = Run.objects.in_bulk([i.id for i in plan.items if i.acts])
        for item in plan.items:
            run = runs.get(uuid.UUID(item.id)) if item.acts else None
            if run is not None and dry_run_for(run).only_failures:
                flagged[item.id] = (
                    "Cannot fix this run: every key it used hands back its recorded failure "
                    "from the ledger, so the replay fails again the same way. Done only if "
                    "you tick it."
                )
    return flagged


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
    return next_or(request, fallback)


def _see_other(url):
    response = HttpResponseRedirect(url)
    response.status_code = 303
    return response


def _refused(request, exc: ValidationFailed):
    said = [e for errors in exc.extra.get("errors", {}).values() for e in errors]
    messages.error(request, f"Nothing to preview: {exc.detail} {' '.join(said)}".strip())
    return _see_other(_back(request))


def _preview(request, plan, *, status=200, read_now=0):
    flagged = _needs_own_confirmation(plan)
    data = plan.as_dict()
    dry = {}
    if plan.operation == "replay":
        runs = Run.objects.in_bulk([i.id for i in plan.items if i.state])
        dry = {str(pk): dry_run_for(run) for pk, run in runs.items()}
    for item in data["items"]:
        item["flag"] = flagged.get(item["id"], "")
        item["dry_run"] = dry.get(item["id"])
    return render(
        request,
        "console/bulk.html",
        {
            "section": "runs" if plan.operation == "replay" else "queue",
            "plan": data,
            "acting": plan.acting - len(flagged),
            "flagged": len(flagged),
            "read_now": read_now,
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
    args = _args(request)
    read_now = 0
    if args["operation"] == "resolve":
        read_now = _fresh_reads(request, args["ids"])
    try:
        plan = bulk.bulk_plan(**args)
    except ValidationFailed as exc:
        return _refused(request, exc)
    return _preview(request, plan, read_now=read_now)


@require_POST
@operator_required()
def bulk_confirm(request):
    args = _args(request)
    try:
        # The whole selection first: is it still what the preview showed?
        whole = bulk.bulk_plan(**args)
        if whole.signature != request.POST.get("signature", ""):
            raise StaleRead(
                "The selection changed since the preview (an item settled, was claimed or "
                "read again): nothing was done. Look at the new preview, then confirm it."
            )
        # Then without the called-out items that were not ticked on their own.
        ticked = set(request.POST.getlist("include"))
        left_out = [i for i in _needs_own_confirmation(whole) if i not in ticked]
        args["ids"] = [i for i in args["ids"] if i not in left_out]
        if not args["ids"]:
            messages.info(request, "Nothing done: the only items left were not ticked.")
            return _see_other(_back(request))
        signature = bulk.bulk_plan(**args).signature
        plan, results = bulk.bulk_apply(signature=signature, **args)
    except ValidationFailed as exc:
        return _refused(request, exc)
    except StaleRead as exc:
        messages.warning(request, exc.detail)
        return _preview(request, bulk.bulk_plan(**_args(request)), status=409)
    done = sum(1 for r in results if r.did not in {bulk.SKIP, "refused"})
    request.session[RESULT_KEY] = {
        "plan": plan.as_dict(),
        "results": [r.as_dict() for r in results],
        "back": _back(request),
        # After a re-check the same selection goes on to a resolve (the ticks are kept).
        "still_open": [
            str(pk)
            for pk in Action.objects.filter(
                pk__in=[r.item.id for r in results if r.item.kind == "action"],
                state__in=[ActionState.UNKNOWN, ActionState.NEEDS_HUMAN],
            ).values_list("pk", flat=True)
        ]
        if plan.operation == "recheck"
        else [],
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
            "still_open": saved.get("still_open", []),
            "mode": "done",
        },
    )

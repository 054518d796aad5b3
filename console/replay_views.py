"""Replay decisions: replay, force replay, four eyes (the inbox of force replays waiting
for a second admin, and the page where they confirm or reject), and the replay history.

Every replay page shows the dry run first (`runs.dryrun`): per key, what the ledger hands
back and what would be sent again. The banner after a replay says what was created and
what it will do.
"""

from django.contrib import messages
from django.shortcuts import render

from core.models import Role
from runs import replay
from runs.dryrun import dry_run_for
from runs.models import Replay
from runs.selectors import force_request_for, run_for

from . import selectors as sel
from .forms import ForceReplayForm
from .run_views import _run_context
from .templatetags.console_format import age_label
from .web import (
    csv_response,
    decision,
    go,
    list_page,
    operator_required,
    remember_form,
    run_url,
)


def _created(new_run, original, *, forced=False) -> str:
    """The result banner: what was created, and what it will do when a runtime runs it."""
    dry = dry_run_for(original)
    what = "Forced replay" if forced else "Replay"
    return (
        f"{what} created: run {str(new_run.pk)[:8]}, pending until a runtime claims it "
        f"(nothing runs before that). {dry.summary}"
    )


@decision(run_for, back=run_url, refused="Not replayed")
def run_replay(request, run):
    new_run = replay.run_replay(run, force=False, reason="", actor=request.actor)
    messages.success(request, _created(new_run, run))
    return go(request, run_url(new_run))


@decision(run_for, Role.ADMIN, back=run_url, refused="Not replayed")
def run_force_replay(request, run):
    form = ForceReplayForm(request.POST, run=run)
    if not form.is_valid():
        if request.htmx:
            context = _run_context(request, run, force_form=form)
            return render(request, "console/run.html#force-form", context, status=422)
        remember_form(request, f"force:{run.pk}", form)
        return go(request, run_url(run) + "#force-form")
    new_run, waiting = replay.run_force_replay(
        run, reason=form.cleaned_data["reason"], actor=request.actor
    )
    if waiting is not None:
        messages.info(
            request,
            "Four eyes: your force replay waits until a different admin confirms it; the "
            "other admins see it under Waiting for you. Nothing has been replayed yet.",
        )
        return go(request, run_url(run))
    messages.success(request, _created(new_run, run, forced=True))
    return go(request, run_url(new_run))


@decision(force_request_for, Role.ADMIN, back=lambda req: run_url(req.run))
def force_request_decide(request, req, decision):
    if decision == "confirm":
        new_run = replay.force_replay_confirm(req, actor=request.actor)
        messages.success(request, "Confirmed. " + _created(new_run, req.run, forced=True))
        return go(request, run_url(new_run))
    replay.force_replay_reject(
        req, reason=request.POST.get("reason", "").strip()[:2000], actor=request.actor
    )
    messages.info(request, "Rejected. Nothing was replayed.")
    return go(request, run_url(req.run))


@operator_required(Role.ADMIN)
def force_inbox(request):
    """Waiting for you: the force replays a second admin must confirm or reject."""
    rows = sel.force_requests_waiting(request.scope)
    for r in rows:
        r.age = age_label(r.created_at)
    return render(request, "console/force_inbox.html", {"section": "waiting", "rows": rows})


@operator_required()
def force_review(request, pk):
    """One force replay request: who asked, why, when, and the dry run; confirm or reject."""
    req = force_request_for(request.scope, pk)
    request.scope.require_role(Role.ADMIN, req.tenant_id)
    me = request.scope.user.get_username()
    context = {
        "section": "waiting",
        "req": req,
        "run": req.run,
        "short_id": str(req.run_id)[:8],
        "age": age_label(req.created_at),
        "mine": req.requested_by.get("kind") == "operator" and req.requested_by.get("name") == me,
        "dry_run": dry_run_for(req.run),
        "verdict": sel.run_detail(req.run).verdict,
    }
    return render(request, "console/force_review.html", context)


@operator_required(Role.ADMIN)
def replays(request):
    page = sel.replays_page(request.scope.tenant, sel.parse_cursor(request.GET.get("after")))
    return list_page(
        request,
        "console/replays.html",
        page,
        section="replays",
        waiting=sel.force_requests_waiting(request.scope),
    )


@operator_required(Role.ADMIN)
def replays_csv(request):
    qs = Replay.objects.filter(tenant=request.scope.tenant).order_by("-at", "-pk")
    rows = (
        [
            r.at.isoformat(),
            (r.actor or {}).get("kind", ""),
            (r.actor or {}).get("name", ""),
            "yes" if r.forced else "no",
            r.reason,
            "" if r.tools_at_risk is None else " ".join(r.tools_at_risk),
            "unknown" if r.tools_at_risk is None else "",
            str(r.original_run_id),
            str(r.new_run_id),
        ]
        for r in qs.iterator(chunk_size=1000)
    )
    header = [
        "at",
        "actor_kind",
        "actor_name",
        "forced",
        "reason",
        "tools_at_risk",
        "tools_at_risk_unknown",
        "original_run",
        "new_run",
    ]
    return csv_response(f"replays-{request.scope.tenant.slug}.csv", header, rows)

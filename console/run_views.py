"""Runs and replays: the list, one run, replay (plain, forced, four eyes), the history."""

from django.contrib import messages
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.models import Role
from core.services import tenant_settings_update
from runs import replay
from runs.models import ForceReplayRequest, ForceRequestState, Replay
from runs.selectors import force_request_for, run_for

from . import selectors as sel
from .forms import (
    ForceReplayForm,
    RunFilterForm,
)
from .templatetags.console_format import pretty_json
from .web import (
    csv_response,
    decision,
    go,
    list_page,
    live_poll,
    operator_required,
    recall_form,
    remember_form,
    run_url,
)

# --- runs and replays ----------------------------------------------------------------------


@operator_required()
def runs(request):
    scope = request.scope
    form = RunFilterForm(request.GET)
    form.is_valid()
    status = form.cleaned_data.get("status") or ""
    page = sel.runs_page(scope.tenant, sel.parse_cursor(request.GET.get("after")), status=status)
    return list_page(
        request,
        "console/runs.html",
        page,
        section="runs",
        form=form,
    )


def _run_context(request, run, **extra) -> dict:
    detail = sel.run_detail(run)
    waiting_force = run.force_requests.filter(state=ForceRequestState.PENDING).first()
    verdict = detail.verdict
    # What the page shows, for its live poll (204 when unchanged), and the replay panel's own
    # part: the panel holds the force form, so it is only replaced when its verdict changed.
    replay_signature = sel.signature(
        verdict.as_dict(), waiting_force.pk if waiting_force else None, run.status
    )
    live_signature = sel.signature(
        run.status,
        run.finished_at,
        run.heartbeat_at,
        run.attempts,
        run.error_message,
        [(a.pk, a.state) for a in detail.actions],
        detail.tools_executed,
        [(r.new_run_id, r.new_run.status) for r in detail.replayed_by],
        run.replay_of.status if run.replay_of_id else None,
        replay_signature,
    )
    context = {
        "section": "runs",
        "run": run,
        "detail": detail,
        "verdict": verdict,
        "config_json": pretty_json(run.config),
        "is_admin": request.scope.has_role(Role.ADMIN, run.tenant_id),
        "force_form": ForceReplayForm(run=run),
        "waiting_force": waiting_force,
        "four_eyes": run.tenant.four_eyes_force_replay,
        "short_id": str(run.pk)[:8],
        "run_settled": run.status not in {"pending", "running"},
        "live_signature": live_signature,
        "replay_signature": replay_signature,
        "replay_change_text": "The replay verdict of this run changed",
        # When what the verdict rests on last changed: the run's end, or one of its actions.
        "replay_change_at": max(
            [run.finished_at or run.created_at, *(a.updated_at for a in detail.actions)]
        ),
    }
    context.update(extra)
    return context


@operator_required()
def run_detail(request, pk):
    run = run_for(request.scope, pk)
    if request.htmx and request.GET.get("live"):
        context = _run_context(request, run)
        replay_changed = request.GET.get("c") != context["replay_signature"]
        live = "console/run.html#run-live"
        return live_poll(
            request, "live", context["live_signature"], live, context, replay_oob=replay_changed
        )
    extra = {}
    if form := recall_form(request, f"force:{pk}", lambda data: ForceReplayForm(data, run=run)):
        extra["force_form"] = form
    return render(request, "console/run.html", _run_context(request, run, **extra))


@decision(run_for, back=run_url, refused="Not replayed")
def run_replay(request, run):
    new_run = replay.run_replay(run, force=False, reason="", actor=request.actor)
    messages.success(request, f"Replay created: run {str(new_run.pk)[:8]}, pending for a runtime.")
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
            "Four eyes: your force replay waits until a different admin confirms it. "
            "Nothing has been replayed yet.",
        )
        return go(request, run_url(run))
    messages.success(
        request,
        f"Forced replay created: run {str(new_run.pk)[:8]}. The reason and the tools at risk "
        "are in the replay history.",
    )
    return go(request, run_url(new_run))


@decision(force_request_for, Role.ADMIN, back=lambda req: run_url(req.run))
def force_request_decide(request, req, decision):
    if decision == "confirm":
        new_run = replay.force_replay_confirm(req, actor=request.actor)
        messages.success(
            request,
            f"Confirmed. Forced replay created: run {str(new_run.pk)[:8]}, pending for a runtime.",
        )
        return go(request, run_url(new_run))
    replay.force_replay_reject(
        req, reason=request.POST.get("reason", "").strip()[:2000], actor=request.actor
    )
    messages.info(request, "Rejected. Nothing was replayed.")
    return go(request, run_url(req.run))


@require_POST
@operator_required(Role.ADMIN)
def tenant_settings(request):
    enabled = request.POST.get("four_eyes_force_replay") == "on"
    minutes = request.POST.get("approval_sla_minutes", "").strip() or "0"
    # isascii: "²" is a digit to str.isdigit() but not to int(); and int() refuses more than
    # 4,300 digits. Either would be a 500.
    plain = minutes.isascii() and minutes.isdigit() and len(minutes) <= 6
    if not plain or int(minutes) > 30 * 24 * 60:
        messages.error(request, "Not saved: the approval SLA is a whole number of minutes.")
        return go(request, reverse("console:replays"))
    tenant_settings_update(
        request.scope.tenant,
        actor=request.scope.actor,
        four_eyes_force_replay=enabled,
        approval_sla_seconds=int(minutes) * 60,
    )
    four_eyes = (
        "Four-eyes force replay is on: a second admin must confirm each force replay."
        if enabled
        else "Four-eyes force replay is off: an admin's force replay happens at once."
    )
    sla = f"Approval SLA: {int(minutes)} min." if int(minutes) else "No approval SLA."
    messages.success(request, f"{four_eyes} {sla}")
    return go(request, reverse("console:replays"))


@operator_required(Role.ADMIN)
def replays(request):
    page = sel.replays_page(request.scope.tenant, sel.parse_cursor(request.GET.get("after")))
    return list_page(
        request,
        "console/replays.html",
        page,
        section="replays",
        waiting=ForceReplayRequest.objects.filter(
            tenant=request.scope.tenant, state=ForceRequestState.PENDING
        ).order_by("created_at"),
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

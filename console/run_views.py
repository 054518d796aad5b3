"""Runs and replays: the list, one run, replay (plain, forced, four eyes), the history."""

from django.shortcuts import render

from runs import replay
from runs.models import ForceRequestState
from runs.selectors import run_for

from . import selectors as sel
from .forms import (
    ForceReplayForm,
    RunFilterForm,
)
from .templatetags.console_format import pretty_json
from .web import (
    list_page,
    live_poll,
    operator_required,
    recall_form,
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
    dry = detail.dry_run
    replay_signature = sel.signature(
        verdict.as_dict(),
        waiting_force.pk if waiting_force else None,
        run.status,
        [(k.key, k.outcome) for k in dry.keys],
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
        # Who may force a replay: the one rule, for this person in the run's tenant.
        "is_admin": replay.may_force_replay(request.scope.actor_for(run.tenant_id)) is None,
        "force_form": ForceReplayForm(run=run),
        "waiting_force": waiting_force,
        "four_eyes": run.tenant.four_eyes_force_replay,
        "short_id": str(run.pk)[:8],
        "run_settled": run.status not in {"pending", "running"},
        "live_signature": live_signature,
        "replay_signature": replay_signature,
        # A replay whose every key only hands back a recorded failure is not offered.
        "futile": run.status not in {"pending", "running"} and dry.only_failures,
        "replay_change_text": (
            f"{waiting_force.requested_by.get('name', 'An admin')} asked to force a replay"
            if waiting_force
            else "The replay verdict of this run changed"
        ),
        # When what the panel rests on last changed: the run's end, one of its actions, or
        # a force replay request.
        "replay_change_at": max(
            [
                run.finished_at or run.created_at,
                *(a.updated_at for a in detail.actions),
                *([waiting_force.created_at] if waiting_force else []),
            ]
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

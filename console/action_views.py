"""One action: its page, and the decisions on it (re-check, claim, release, resolve,
acknowledge)."""

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import render
from django_htmx.http import reswap, retarget

from core.audit import Actor
from core.errors import StaleRead, refuse
from core.models import Role
from runs import decisions
from runs.selectors import action_for
from runs.states import OPEN_FOR_HUMANS, VERDICT_MEANING, ActionState

from . import action_history
from . import selectors as sel
from .forms import (
    DenyForm,
    GrantForm,
    ResolveForm,
)
from .templatetags.console_format import age_label, compact_json, pretty_json
from .web import action_url, decision, go, live_poll, operator_required, recall_form, remember_form

# --- one action ----------------------------------------------------------------------------


def _action_context(request, action, **extra) -> dict:
    scope = request.scope
    attempts, reads, events = action_history.action_history(action)
    diff = action_history.action_diff(action, reads)
    # What the queue row says about this action, from the history loaded anyway.
    action.last_verdict = reads[-1].verdict if reads else None
    action.last_diff = reads[-1].diff if reads else None
    action.last_http_status = attempts[-1].http_status if attempts else None
    oncall = scope.has_role(Role.ONCALL, action.tenant_id)
    approver = scope.has_role(Role.APPROVER, action.tenant_id)
    claimed_by_me = action.claimed_by_id == request.user.pk
    claimed_by_other = action.claimed_by_id is not None and not claimed_by_me
    pending_request = (
        action.approval_request
        if action.approval_request_id
        and action.approval_request.state == "pending"
        and action.state == ActionState.AWAITING_APPROVAL
        else None
    )
    live_signature = sel.signature(
        action.state,
        action.updated_at.isoformat(),
        action.claimed_by_id,
        [(a.number, a.outcome, a.finished_at) for a in attempts],
        len(reads),
        len(events),
    )
    controls_signature = sel.signature(action.state, action.claimed_by_id)
    change_text, change_at = _controls_change(action, claimed_by_me)
    latest_read = reads[-1] if reads else None
    read_age = decisions.read_age(latest_read)
    # The tool's own answer about the key, while it is the latest word (no attempt since).
    lookup = next((r for r in reversed(reads) if r.kind == "lookup"), None)
    if lookup and attempts and attempts[-1].started_at > lookup.at:
        lookup = None
    resolvable = decisions.is_resolvable(action)
    context = {
        "section": "queue",
        "action": action,
        "latest_read": latest_read,
        "read_max_age": int(settings.RESOLVE_READ_MAX_AGE_SECONDS),
        "read_is_stale": decisions.read_is_stale(latest_read),
        # Opening the page re-reads in the background when the last read is not fresh.
        "auto_reread": oncall
        and resolvable
        and (read_age is None or read_age > settings.CONSOLE_REREAD_AFTER_SECONDS),
        "timeline": action_history.action_timeline(attempts, reads, events),
        "lookup": lookup,
        "effect_meaning": action_history.EFFECT_MEANINGS.get(action.tool.effect, ""),
        "resends": sum(1 for a in attempts if a.kind == "resend"),
        "diff": diff,
        "attempts": attempts,
        "desired_json": pretty_json(action.desired_state),
        "desired_rows": [(k, compact_json(v)) for k, v in action.desired_state.items()],
        "can_oncall": oncall,
        "can_approve": approver,
        "resolvable": resolvable,
        # A blocked action is final: nothing to claim, only to acknowledge.
        "claimable": decisions.is_claimable(action),
        "acknowledgeable": decisions.is_acknowledgeable(action),
        "claimed_by_me": claimed_by_me,
        "claimed_by_other": claimed_by_other,
        "pending_request": pending_request,
        "terminal": sel.is_terminal(action),
        "live_signature": live_signature,
        "controls_signature": controls_signature,
        "change_text": change_text,
        "change_at": change_at,
        "age": age_label(action.created_at),
        "request_age": age_label(pending_request.created_at) if pending_request else "",
        "resolve_form": ResolveForm(),
        "grant_form": GrantForm(),
        "deny_form": DenyForm(),
        # Said once: a blocked action's reason is in its block_reason line already.
        "reason_label": sel.queue_reason(action) if decisions.is_claimable(action) else "",
    }
    if context["terminal"] or action.acknowledged_at:
        # After a decision the page is not a dead end: the next thing this person can work.
        context["next_item"] = sel.next_open_action(scope, action)
    context.update(extra)
    return context


def _controls_change(action, claimed_by_me) -> tuple[str, object]:
    """What a live update of the controls would tell an operator whose half-typed form it
    does not replace (console.js shows it as a notice, with the age)."""
    if action.state not in OPEN_FOR_HUMANS:
        return f"This action is now {action.get_state_display().lower()}", action.updated_at
    if action.claimed_by_id and not claimed_by_me:
        return f"{action.claimed_by.get_username()} claimed this", action.claimed_at
    if claimed_by_me:
        return "You claimed this (in another window)", action.claimed_at
    return "The claim on this action was released", action.updated_at


@operator_required()
def action_detail(request, pk):
    action = action_for(request.scope, pk)
    extra = {}
    if not request.htmx and (form := recall_form(request, f"resolve:{pk}", ResolveForm)):
        extra["resolve_form"] = form
    context = _action_context(request, action, **extra)
    controls_changed = request.GET.get("c") != context["controls_signature"]
    live = "console/action.html#action-live"
    if poll := live_poll(
        request, "live", context["live_signature"], live, context, controls_oob=controls_changed
    ):
        return poll
    return render(request, "console/action.html", context)


def controls_refused(request, action, text, **extra):
    """A refusal next to the control that caused it: the action's controls as they are
    now (a colleague's claim, a settled state), with the refusal in words at their top and
    what the person typed kept in view. Swapped in place of the controls (htmx)."""
    action = action_for(request.scope, action.pk)
    if sel.is_terminal(action):
        text = f"{text} {_settled_words(action)}"
    unsent = (request.POST.get("reason") or request.POST.get("note") or "").strip()
    context = _action_context(request, action, controls_error=text, unsent=unsent, **extra)
    response = render(request, "console/action.html#action-controls", context)
    return reswap(retarget(response, "#action-controls"), "outerHTML")


def _settled_words(action) -> str:
    """Why the controls are gone: who settled the action, and how."""
    return (
        f"This action is already {action.get_state_display().lower()}"
        + (f" ({action.get_resolution_display().lower()})" if action.resolution else "")
        + (f": “{action.resolution_reason}”" if action.resolution_reason else "")
        + ". Nothing to decide."
    )


# The page's own re-read on opening is not a decision: it is read as the system's reconciler
# (a person's re-check is theirs), so opening a page writes nothing under the viewer's name.
BACKGROUND_READER = Actor("system", "reconciler", roles=frozenset({Role.ONCALL}))


@decision(
    action_for, Role.ONCALL, back=action_url, refused="Not re-checked", inline=controls_refused
)
def action_recheck(request, action):
    if request.htmx and request.POST.get("background"):
        # The page's own re-read on opening: the live region shows the new read.
        decisions.action_recheck(action.pk, actor=BACKGROUND_READER)
        return HttpResponse(status=204)
    action = decisions.action_recheck(action.pk, actor=request.actor)
    read = action.reconciliations.order_by("-at", "-id").first()
    verdict = VERDICT_MEANING.get(read.verdict, read.verdict) if read else "no read"
    text = (
        f"Re-checked the authoritative state: {verdict}. "
        f"The action is {action.get_state_display().lower()}."
    )
    # Green only for success: a read that failed is a warning, not good news.
    if read is None or read.verdict == "read_failed":
        messages.warning(request, text)
    else:
        messages.success(request, text)
    return go(request, action_url(action))


@decision(action_for, Role.ONCALL, back=action_url, refused="Not claimed", inline=controls_refused)
def action_claim(request, action):
    if action.state not in OPEN_FOR_HUMANS:
        if request.htmx:
            return controls_refused(request, action, "Not claimed: " + _settled_words(action))
        messages.error(request, "Only an action in the queue can be claimed.")
        return go(request, action_url(action))
    take_over = request.POST.get("take_over_from", "")
    # A user id (a 32-bit key): anything else, however many digits, means "no takeover".
    take_over = (
        int(take_over)
        if take_over.isascii() and take_over.isdigit() and len(take_over) < 10
        else None
    )
    holder = action.claimed_by.get_username() if action.claimed_by_id else None
    action, won = decisions.action_claim_for_operator(
        action, user=request.user, actor=request.actor, take_over_from=take_over
    )
    if won and take_over:
        messages.success(request, f"You took this action over from {holder}.")
    elif won:
        messages.success(request, "You have claimed this action. Others see that you hold it.")
    else:
        first = f"Not claimed: {action.claimed_by.get_username()} claimed this action first."
        if request.htmx:
            return controls_refused(request, action, first)
        messages.error(request, first)
    return go(request, action_url(action))


@decision(action_for, Role.ONCALL, back=action_url, refused="Not released", inline=controls_refused)
def action_release(request, action):
    decisions.action_release_claim(action, user=request.user, actor=request.actor)
    messages.info(request, "Claim released.")
    return go(request, action_url(action))


def _resolve_form_again(request, action, form):
    """The resolve form with its errors, the typed reason kept: the partial for htmx, else
    Post/Redirect/Get with the form remembered."""
    if request.htmx:
        context = _action_context(request, action, resolve_form=form)
        return render(request, "console/action.html#resolve-form", context, status=422)
    remember_form(request, f"resolve:{action.pk}", form)
    return go(request, action_url(action) + "#resolve-form")


@decision(action_for, Role.ONCALL, back=action_url, refused="Not resolved", inline=controls_refused)
def action_resolve(request, action):
    form = ResolveForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        refusal = decisions.check_resolve(
            action,
            outcome=data["outcome"],
            reason=data["reason"],
            actor=request.actor,
            latest_read=decisions.latest_read(action),
            based_on_read=data["based_on_read"],
            take_over=data["override_claim"],
        )
        if refusal is not None and refusal.field == "take_over":
            form.add_error("override_claim", f"{refusal} Tick the box to resolve it anyway.")
        elif refusal is not None and issubclass(refusal.error, StaleRead):
            form.add_error(None, str(refusal))
        else:
            refuse(refusal)
    if not form.is_valid():
        return _resolve_form_again(request, action, form)
    outcome = form.cleaned_data["outcome"]
    try:
        decisions.action_resolve(
            action,
            outcome=outcome,
            reason=form.cleaned_data["reason"],
            actor=request.actor,
            based_on_read=form.cleaned_data["based_on_read"],
            take_over=form.cleaned_data["override_claim"],
        )
    except StaleRead as exc:
        # Asks for a fresh read first; the typed reason stays in the form.
        form.add_error(None, exc.detail)
        return _resolve_form_again(request, action, form)
    messages.success(request, f"Resolved as {outcome}. The reason is in the audit log.")
    return go(request, action_url(action))


@decision(
    action_for, Role.ONCALL, back=action_url, refused="Not acknowledged", inline=controls_refused
)
def action_acknowledge(request, action):
    note = request.POST.get("note", "").strip()[:2000]
    decisions.action_acknowledge(action, note=note, actor=request.actor)
    messages.success(
        request,
        "Acknowledged. It has left the queue; it stays findable from its run and the audit log.",
    )
    return go(request, action_url(action))

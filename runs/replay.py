"""May this run be replayed, and by whom (docs/design.md, "Runs and replay"): what the run
called (`tools_executed`), the replay table (`replay_verdict`: the API answers with it, the
console shows it before anyone clicks, and `run_replay` decides by it), a replay, a forced
one (an admin's, with a reason), and four eyes (a second admin confirms or rejects).
"""

import dataclasses
import uuid
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from core.audit import Actor, Verb, audit
from core.errors import (
    InputGone,
    Refusal,
    ReplayRefused,
    ValidationFailed,
    missing_role,
    refuse,
)
from core.models import Role, Tool, ToolEffect

from . import alerts
from .models import ForceReplayRequest, ForceRequestState, Replay, Run
from .moves import force_request_close
from .states import GATEWAY_CALLED, ActionState, Resolution, RunStatus


def tools_executed(run: Run, gateway: set[str] | None = None) -> list[str] | None:
    """tools_executed, the tri-state (docs/design.md, "Runs and replay"): the gateway's record
    ∪ the runtime's report; null stays null.

    `gateway` may be passed in by callers that already loaded the run's actions.
    """
    if gateway is None:
        gateway = set(
            run.actions.filter(state__in=GATEWAY_CALLED).values_list("tool__name", flat=True)
        )
    if run.tools_reported is None:
        return sorted(gateway) if gateway else None
    return sorted(gateway | set(run.tools_reported))


@dataclass
class ReplayVerdict:
    allowed: bool  # without force
    forceable: bool  # with force (admin, reason)
    gone: bool  # input file no longer stored: 410 whatever force says
    message: str
    tools_at_risk: list[str] | None
    # Tools the run called whose every call an operator resolved as failed: not applied,
    # so not at risk.
    not_applied: list[str] = field(default_factory=list)
    # Tools the run called that their declarations make safe to repeat: each
    # `{"tool", "effect", "lookup", "declared_by", "declared_at", "why"}`.
    safe_tools: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "allowed": self.allowed,
            "forceable": self.forceable,
            "gone": self.gone,
            "message": self.message,
            "tools_at_risk": self.tools_at_risk,
            "not_applied": self.not_applied,
            "safe_tools": self.safe_tools,
        }


SAFE_BECAUSE = {
    ToolEffect.READ_ONLY: "declared read_only: it has no side effect",
    ToolEffect.IDEMPOTENT: "declared idempotent: it applies an Idempotency-Key at most once, "
    "and every call of it by this run went through Takeover with a key",
}


def tools_safe_by_declaration(run: Run, executed: list[str], actions=None) -> list[dict]:
    """The tools among `executed` that their declarations (as they stand now: a replay sends
    now) make safe to call again, oldest name first.

    - `read_only`: always; a read repeats nothing.
    - `idempotent`: only if the gateway saw this run call it (its calls carried keys the
      ledger holds). A tool the runtime reports but Takeover never saw was called with no
      key we know of, so its dedupe protects nothing: it stays at risk. Keys being *stable*
      across a replay (derived from the trigger, not the session) is the runtime's part
      (README, "Idempotency keys").
    - `unsafe`, and any name that is not a registered tool (undeclared means unsafe): never.
    """
    if actions is None:
        actions = run.actions.filter(state__in=GATEWAY_CALLED).select_related("tool")
    tools, keyed = {}, set()
    for a in actions:
        if a.state in GATEWAY_CALLED:
            tools[a.tool.name] = a.tool
            keyed.add(a.tool.name)
    if missing := [name for name in executed if name not in tools]:
        registered = Tool.objects.filter(tenant_id=run.tenant_id, name__in=missing)
        tools.update({t.name: t for t in registered})
    safe = []
    for name in executed:
        tool = tools.get(name)
        if tool is None or tool.effect == ToolEffect.UNSAFE:
            continue
        if tool.effect == ToolEffect.IDEMPOTENT and name not in keyed:
            continue
        safe.append({"tool": name, **tool.declaration, "why": SAFE_BECAUSE[tool.effect]})
    return safe


def _safe_sentence(safe: list[dict]) -> str:
    return "; ".join(f"{s['tool']} is {s['why']}" for s in safe)


def tools_resolved_not_applied(run: Run, actions=None) -> list[str]:
    """Tools whose every call by this run (every action that reached the tool) an operator
    resolved as failed, i.e. not applied.

    Only the operator's resolution counts, not a 4xx or a version conflict: those are the
    tool's word, and tools_executed counts calls. A tool the runtime reported but the gateway never
    saw is never cleared: nobody resolved anything about it.
    """
    if actions is None:
        actions = run.actions.filter(state__in=GATEWAY_CALLED).select_related("tool")
    calls: dict[str, list] = {}
    for a in actions:
        if a.state in GATEWAY_CALLED:
            calls.setdefault(a.tool.name, []).append(a)
    by_operator = Resolution.RESOLVED_BY_OPERATOR
    return sorted(
        name
        for name, rows in calls.items()
        if all(a.state == ActionState.FAILED and a.resolution == by_operator for a in rows)
    )


def replay_verdict(run: Run, executed=..., actions=None) -> ReplayVerdict:
    """The replay table (docs/design.md, "Runs and replay"), in one place: the API answers with
    it and the console shows it before anyone clicks.

    Resolve feeds replay: a tool whose every call an operator resolved as failed is not at
    risk. When that leaves nothing at risk, the replay is allowed without force, and the
    message says why. `actions` (the run's actions, tool selected) saves a query.
    """
    executed = tools_executed(run) if executed is ... else executed
    if run.input_file and not run.input_file.storage.exists(run.input_file.name):
        return ReplayVerdict(
            allowed=False,
            forceable=False,
            gone=True,
            message="The input file of this run is no longer stored; it cannot be replayed.",
            tools_at_risk=executed,
        )
    if run.status in {RunStatus.PENDING, RunStatus.RUNNING}:
        return ReplayVerdict(
            allowed=False,
            forceable=False,
            gone=False,
            message="This run has not settled yet; wait until it finishes.",
            tools_at_risk=executed,
        )
    if run.status == RunStatus.SUCCESS:
        return ReplayVerdict(
            allowed=False,
            forceable=True,
            gone=False,
            message="This run already succeeded; its side effects happened. Replay refused.",
            tools_at_risk=executed,
        )
    if executed == []:
        return ReplayVerdict(
            allowed=True,
            forceable=True,
            gone=False,
            message="No tool was called before this run ended: safe to replay.",
            tools_at_risk=[],
        )
    cleared = []
    if executed:
        cleared = [t for t in tools_resolved_not_applied(run, actions) if t in executed]
        safe = [
            s for s in tools_safe_by_declaration(run, executed, actions) if s["tool"] not in cleared
        ]
        if safe:
            return _verdict_with_declarations(run, executed, cleared, safe)
    if cleared:
        at_risk = [t for t in executed if t not in cleared]
        why = (
            f"An operator resolved every call of {', '.join(cleared)} by this run as failed: "
            "not applied, so not at risk."
        )
        if not at_risk:
            return ReplayVerdict(
                allowed=True,
                forceable=True,
                gone=False,
                message=f"This run called {', '.join(cleared)}, but nothing it called was applied. "
                f"{why} Safe to replay.",
                tools_at_risk=[],
                not_applied=cleared,
            )
        return ReplayVerdict(
            allowed=False,
            forceable=True,
            gone=False,
            message=f"Before failing, this run called {', '.join(at_risk)}. A replay may repeat "
            f"them. An admin can force it with a reason. ({why})",
            tools_at_risk=at_risk,
            not_applied=cleared,
        )
    if executed is None:
        return ReplayVerdict(
            allowed=False,
            forceable=True,
            gone=False,
            message="Whether this run called any tool before failing could not be established; a "
            "replay may repeat side effects. An admin can force it with a reason.",
            tools_at_risk=None,
        )
    return ReplayVerdict(
        allowed=False,
        forceable=True,
        gone=False,
        message=f"Before failing, this run called {', '.join(executed)}. A replay may repeat them. "
        "An admin can force it with a reason.",
        tools_at_risk=executed,
    )


def _verdict_with_declarations(run: Run, executed, cleared, safe) -> ReplayVerdict:
    """The verdict when some called tools are safe by declaration: the refusal names only
    the tools still at risk, and says which declarations made the others safe."""
    safe_names = {s["tool"] for s in safe}
    at_risk = [t for t in executed if t not in cleared and t not in safe_names]
    notes = [f"Safe to repeat by declaration: {_safe_sentence(safe)}."]
    if cleared:
        notes.append(
            f"An operator resolved every call of {', '.join(cleared)} by this run as failed: "
            "not applied, so not at risk."
        )
    if at_risk:
        return ReplayVerdict(
            allowed=False,
            forceable=True,
            gone=False,
            message=f"Before failing, this run called {', '.join(at_risk)}. A replay may repeat "
            f"them. An admin can force it with a reason. ({' '.join(notes)})",
            tools_at_risk=at_risk,
            not_applied=cleared,
            safe_tools=safe,
        )
    if run.tools_reported is None:
        # Everything the gateway saw is safe, but the runtime could not say what else it
        # called (outside Takeover): that stays unknown, so the replay needs force.
        return ReplayVerdict(
            allowed=False,
            forceable=True,
            gone=False,
            message=f"This run called {', '.join(executed)} through Takeover, all safe to repeat, "
            "but whether it called any other tool could not be established; a replay may repeat "
            f"side effects. An admin can force it with a reason. ({' '.join(notes)})",
            tools_at_risk=None,
            not_applied=cleared,
            safe_tools=safe,
        )
    return ReplayVerdict(
        allowed=True,
        forceable=True,
        gone=False,
        message=f"This run called {', '.join(executed)}; none of it is at risk. {' '.join(notes)} "
        "Safe to replay.",
        tools_at_risk=[],
        not_applied=cleared,
        safe_tools=safe,
    )


# --- who may replay, and force: the checks ------------------------------------------------


def may_force_replay(actor: Actor) -> Refusal | None:
    """Who may force a replay (or confirm or reject somebody's force): an admin, in the
    run's tenant. Said here once; every door asks it."""
    return missing_role(actor, Role.ADMIN)


def check_force(*, actor: Actor, reason: str) -> Refusal | None:
    """Whoever forces: an admin, with a reason."""
    if refusal := may_force_replay(actor):
        return refusal
    if not (reason or "").strip():
        return Refusal(
            "A forced replay needs a reason.",
            ValidationFailed,
            field="reason",
            hint="Required when force is true.",
        )
    return None


def unsettled_replay(run: Run):
    """The replay of `run` that has not settled yet, as (id, status), or None. A run has at
    most one (docs/design.md, "Runs and replay")."""
    return (
        Run.objects.filter(replay_of=run, status__in=[RunStatus.PENDING, RunStatus.RUNNING])
        .values_list("pk", "status")
        .first()
    )


def check_replay(
    verdict: ReplayVerdict,
    *,
    actor: Actor,
    force: bool = False,
    reason: str = "",
    unsettled=None,
) -> Refusal | None:
    """May `actor` replay this run now (forced or not)? `verdict` is the run's
    `replay_verdict`, `unsettled` its `unsettled_replay`."""
    if force and (refusal := check_force(actor=actor, reason=reason)):
        return refusal
    if verdict.gone:
        return Refusal(verdict.message, InputGone)
    if unsettled is not None:
        return Refusal(
            f"This run already has a replay that has not settled: run {unsettled[0]} is "
            f"{unsettled[1]}. Wait until it finishes.",
            ReplayRefused,
            unsettled_replay=str(unsettled[0]),
        )
    if not verdict.allowed and not (force and verdict.forceable):
        extra = {"safe_tools": verdict.safe_tools} if verdict.safe_tools else {}
        return Refusal(verdict.message, ReplayRefused, tools_at_risk=verdict.tools_at_risk, **extra)
    return None


def check_force_request(
    verdict: ReplayVerdict, *, actor: Actor, reason: str, unsettled=None, waiting=None
) -> Refusal | None:
    """Four eyes: may `actor` ask a second admin to confirm a force replay? `waiting` is
    the run's pending ForceReplayRequest, if any."""
    if refusal := check_replay(
        verdict, actor=actor, force=True, reason=reason, unsettled=unsettled
    ):
        return refusal
    if waiting is not None:
        who = waiting.requested_by
        return Refusal(
            f"A force replay of this run already waits for a second admin (asked by "
            f"{who['kind']}:{who['name']}).",
            ReplayRefused,
            tools_at_risk=verdict.tools_at_risk,
        )
    return None


def _force_request_undecidable(request: ForceReplayRequest) -> Refusal | None:
    if request.state != ForceRequestState.PENDING:
        who = request.decided_by or {}
        return Refusal(
            f"This force replay request is already {request.state} "
            f"(by {who.get('kind', '')}:{who.get('name', '')})."
        )
    return None


def check_force_confirm(request: ForceReplayRequest, *, actor: Actor) -> Refusal | None:
    """A different admin confirms: the requester cannot confirm their own request."""
    if refusal := may_force_replay(actor) or _force_request_undecidable(request):
        return refusal
    if Actor(**request.requested_by) == actor:
        return Refusal(
            "You asked for this force replay; a different admin must confirm it (four eyes)."
        )
    return None


def check_force_reject(request: ForceReplayRequest, *, actor: Actor) -> Refusal | None:
    """A different admin rejects, or the requester withdraws."""
    return may_force_replay(actor) or _force_request_undecidable(request)


# --- the verbs -----------------------------------------------------------------------------


def run_replay(run: Run, *, force: bool, reason: str, actor: Actor) -> Run:
    """Create a new pending run with the same input; history is never rewritten
    (`check_replay`).

    The run's principal and any operator may ask; `force` is an admin's alone and needs a
    reason (a 403 and a 400 otherwise), whoever calls this.
    """
    if force:
        refuse(check_force(actor=actor, reason=reason))
        reason = reason.strip()
    with transaction.atomic():
        # The lock on the original run serializes replays of it, so exactly one of many
        # concurrent requests creates one. Under READ COMMITTED the unsettled replay read
        # after it sees a replay that a concurrent request just committed.
        run = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        verdict = replay_verdict(run)
        refuse(
            check_replay(
                verdict, actor=actor, force=force, reason=reason, unsettled=unsettled_replay(run)
            )
        )
        now = timezone.now()
        new_run = Run.objects.create(
            tenant=run.tenant,
            principal=run.principal,
            trigger=run.trigger,
            config=run.config,
            input_file=run.input_file.name,
            input_name=run.input_name,
            input_size=run.input_size,
            input_sha256=run.input_sha256,
            session_id=uuid.uuid4().hex,
            status=RunStatus.PENDING,
            replay_of=run,
        )
        Replay.objects.create(
            tenant=run.tenant,
            original_run=run,
            new_run=new_run,
            actor=actor.as_dict(),
            forced=force,
            reason=reason,
            tools_at_risk=verdict.tools_at_risk,
            safe_tools=verdict.safe_tools,
            at=now,
        )
        after = {"status": RunStatus.PENDING, "replay_of": str(run.pk), "forced": force}
        if verdict.safe_tools:  # the declarations this decision relied on, as they were
            after["safe_tools"] = verdict.safe_tools
        audit(actor=actor, verb=Verb.RUN_REPLAY, obj=new_run, after=after, reason=reason)
        if force:
            after = {"new_run": str(new_run.pk), "tools_at_risk": verdict.tools_at_risk}
            audit(actor=actor, verb=Verb.FORCE_REPLAY, obj=run, after=after, reason=reason)
            alerts.notify_force_replay(
                run, new_run, actor=actor, reason=reason, tools_at_risk=verdict.tools_at_risk
            )
    return new_run


def run_force_replay(run: Run, *, reason: str, actor: Actor):
    """An admin forces a replay. Returns (new_run, None), or (None, request) when the
    tenant requires four eyes: the request then waits, visibly, until a different admin
    confirms or rejects it. Admins only, with a reason.

    A replay the rule allows without force needs no second admin (nothing is at risk).
    """
    from django.db import IntegrityError

    refuse(check_force(actor=actor, reason=reason))
    reason = reason.strip()

    run = Run.objects.select_related("tenant").get(pk=run.pk)
    if not run.tenant.four_eyes_force_replay:
        return run_replay(run, force=True, reason=reason, actor=actor), None
    with transaction.atomic():
        run = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        verdict = replay_verdict(run)
        if verdict.allowed and not verdict.gone:
            # Nothing at risk: no second admin needed (run_replay refuses what it must).
            return run_replay(run, force=True, reason=reason, actor=actor), None
        # Not even a request for a second admin while a replay of this run still waits.
        refuse(
            check_force_request(
                verdict,
                actor=actor,
                reason=reason,
                unsettled=unsettled_replay(run),
                waiting=ForceReplayRequest.objects.filter(
                    run=run, state=ForceRequestState.PENDING
                ).first(),
            )
        )
        try:
            with transaction.atomic():
                request = ForceReplayRequest.objects.create(
                    tenant=run.tenant,
                    run=run,
                    requested_by=actor.as_dict(),
                    reason=reason,
                    tools_at_risk=verdict.tools_at_risk,
                )
        except IntegrityError as exc:  # a racing admin's request won
            raise ReplayRefused(
                "A force replay of this run already waits for a second admin.",
                tools_at_risk=verdict.tools_at_risk,
            ) from exc
        after = {"request": str(request.pk), "tools_at_risk": verdict.tools_at_risk}
        audit(actor=actor, verb=Verb.FORCE_REPLAY_REQUEST, obj=run, after=after, reason=reason)
        alerts.notify_force_request(request, actor=actor)
    return None, request


def _lock_pending_force(request: ForceReplayRequest) -> ForceReplayRequest:
    return (
        ForceReplayRequest.objects.select_for_update(no_key=True)
        .select_related("run", "tenant")
        .get(pk=request.pk)
    )


def force_replay_confirm(request: ForceReplayRequest, *, actor: Actor) -> Run:
    """A second admin confirms: the replay is created now, forced, in the requester's name
    and with their reason; the confirmation is audited in the confirmer's. The requester
    cannot confirm their own request."""
    refuse(may_force_replay(actor))
    with transaction.atomic():
        request = _lock_pending_force(request)
        refuse(check_force_confirm(request, actor=actor))
        requester = Actor(**request.requested_by)
        # In the requester's name, as the admin they were when they asked; the confirmer
        # holds the role now (checked above).
        as_requester = dataclasses.replace(requester, roles=frozenset({Role.ADMIN}))
        new_run = run_replay(request.run, force=True, reason=request.reason, actor=as_requester)
        force_request_close(request, ForceRequestState.CONFIRMED, actor=actor, new_run=new_run)
        audit(
            actor=actor,
            verb=Verb.FORCE_REPLAY_CONFIRM,
            obj=request.run,
            before={"request": "pending"},
            after={
                "request": str(request.pk),
                "new_run": str(new_run.pk),
                "requested_by": request.requested_by,
            },
            reason=request.reason,
        )
    return new_run


def force_replay_reject(request: ForceReplayRequest, *, reason: str, actor: Actor):
    """A different admin rejects the request, or its requester withdraws it. Nothing is
    replayed."""
    refuse(may_force_replay(actor))
    with transaction.atomic():
        request = _lock_pending_force(request)
        refuse(check_force_reject(request, actor=actor))
        force_request_close(
            request, ForceRequestState.REJECTED, actor=actor, decision_reason=reason
        )
        audit(
            actor=actor,
            verb=Verb.FORCE_REPLAY_REJECT,
            obj=request.run,
            before={"request": "pending"},
            after={"request": str(request.pk)},
            reason=reason,
        )
    return request

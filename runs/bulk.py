"""Bulk decisions with a preview: resolve or re-check several actions,
or replay several runs, together. First the plan says exactly what each item will do; the
confirm then does exactly that, or nothing.

- `bulk_plan` is a selector: it reads, asks per item the same `check_*` the services ask
  (`runs.decisions`, `runs.replay`: the state, the role, the claim, the freshness of the
  read, the replay verdict, four eyes), so an item is skipped in the very words the API
  and the console refuse it with, and changes nothing. A replay's item names the tools the
  run called (what a replay may call again) and, for each idempotency key the run used,
  whether proposing it again would be a ledger hit (the recorded outcome is returned,
  nothing is sent) or a new send (the key was revoked).
- `bulk_apply` recomputes the plan and refuses (StaleRead, a 409) when its signature is
  not the one the operator confirmed: the selection changed since the preview (an action
  settled, a newer read arrived, a colleague claimed one), so it is previewed again rather
  than done differently. Otherwise it calls, per item, the one service that makes that
  decision, which audits it; a race lost between the check and the call is reported as
  that item's refusal, never retried. One `bulk.apply` audit event per tenant records the
  whole batch, item by item.

The vocabulary of `will` (plan) and `did` (result) is the same, so a test can check that
the confirm did what the preview said, item by item.
"""

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field

from django.db import transaction
from django.utils import timezone

from core.audit import Actor, Verb, audit
from core.errors import DomainError, StaleRead, ValidationFailed
from core.models import ToolEffect
from ledger.models import LedgerEntry

from . import decisions, replay
from .models import Action, ForceReplayRequest, ForceRequestState, Reconciliation, Run
from .states import GATEWAY_CALLED, ActionState, RunStatus

BULK_MAX_ITEMS = 50
OPERATIONS = {
    "resolve": "Resolve",
    "recheck": "Re-check",
    "acknowledge": "Acknowledge",
    "replay": "Replay",
}
# What an item will do (plan) or did (result).
SKIP = "skip"
WILLS = {
    "resolve_succeeded": "resolve as succeeded",
    "resolve_failed": "resolve as failed",
    "recheck": "re-check the authoritative state",
    "acknowledge": "acknowledge the block",
    "replay": "replay",
    "force_replay": "force a replay",
    "force_request": "ask a second admin to confirm a force replay",
    SKIP: "nothing",
    "refused": "refused when done",
}


@dataclass
class KeyFate:
    key: str
    tool: str
    target: str
    hit: bool  # proposing this key again returns the recorded action, sending nothing
    state: str  # that action's state (a hit), or "" (a new send)


@dataclass
class BulkItem:
    id: str
    kind: str  # action | run
    tenant_id: str
    label: str
    state: str
    will: str
    why: str
    read_id: int | None = None
    tools: list | None = None  # replay: what the run called (null: could not be established)
    keys: list = field(default_factory=list)  # replay: KeyFate per idempotency key

    @property
    def acts(self) -> bool:
        return self.will != SKIP

    @property
    def hits(self) -> list:
        return [k for k in self.keys if k.hit]

    @property
    def sends(self) -> list:
        return [k for k in self.keys if not k.hit]

    def as_dict(self) -> dict:
        data = asdict(self)
        data.pop("tenant_id")
        data["will_label"] = WILLS[self.will]
        data["state_label"] = self.state.replace("_", " ")
        for key in data["keys"]:
            key["state_label"] = key["state"].replace("_", " ")
        data["hits"], data["sends"] = len(self.hits), len(self.sends)
        return data


@dataclass
class BulkPlan:
    operation: str
    outcome: str
    reason: str
    force: bool
    items: list
    signature: str = ""

    @property
    def acting(self) -> int:
        return sum(1 for i in self.items if i.acts)

    def as_dict(self) -> dict:
        return {
            "operation": self.operation,
            "outcome": self.outcome or None,
            "reason": self.reason,
            "force": self.force,
            "signature": self.signature,
            "items": [i.as_dict() for i in self.items],
        }


@dataclass
class BulkResult:
    item: BulkItem
    did: str
    detail: str = ""
    new_run: str | None = None

    def as_dict(self) -> dict:
        return {
            **self.item.as_dict(),
            "did": self.did,
            "did_label": WILLS[self.did],
            "detail": self.detail,
            "new_run": self.new_run,
        }


def _ids(ids) -> list[uuid.UUID]:
    out = []
    for raw in ids:
        try:
            value = uuid.UUID(str(raw))
        except ValueError as exc:
            raise ValidationFailed("Not an id.", {"ids": [f"{raw!r} is not an id."]}) from exc
        if value not in out:
            out.append(value)
    if not out:
        raise ValidationFailed("Nothing selected.", {"ids": ["Select at least one."]})
    if len(out) > BULK_MAX_ITEMS:
        raise ValidationFailed("Too many.", {"ids": [f"At most {BULK_MAX_ITEMS} at once."]})
    return out


def bulk_plan(
    *,
    viewer,
    operation: str,
    ids,
    outcome: str = "",
    reason: str = "",
    force: bool = False,
    now=None,
) -> BulkPlan:
    """What each selected item will do, for this operator (`core.access.Viewer`): anything
    outside the viewer's tenants is "not found", as if it did not exist; roles are those of
    each item's tenant; the viewer's own claims do not stop a resolve."""
    if operation not in OPERATIONS:
        raise ValidationFailed(
            "Unknown operation.", {"operation": ["resolve, recheck, acknowledge or replay."]}
        )
    reason = (reason or "").strip()
    if operation == "resolve":
        if outcome not in {ActionState.SUCCEEDED, ActionState.FAILED}:
            raise ValidationFailed("Choose an outcome.", {"outcome": ["succeeded or failed."]})
        if not reason:
            raise ValidationFailed("A reason is required.", {"reason": ["Say why."]})
    else:
        outcome = ""
    if operation == "replay" and force and not reason:
        raise ValidationFailed(
            "A forced replay needs a reason.", {"reason": ["Required with force."]}
        )
    if operation != "replay":
        force = False
    wanted = _ids(ids)
    now = now or timezone.now()
    if operation == "replay":
        items = _plan_replays(wanted, viewer, force=force, reason=reason)
    else:
        items = _plan_actions(operation, wanted, viewer, outcome, reason, now)
    plan = BulkPlan(operation, outcome, reason, force, items)
    plan.signature = _signature(plan)
    return plan


def _signature(plan: BulkPlan) -> str:
    # What the operator confirms: each item's decision and what it rests on (the read it
    # is decided on, the tools and keys of a replay), and the words that go to the audit log.
    # Not the free text of `why`, which carries ages that change every second.
    parts = [
        plan.operation,
        plan.outcome,
        plan.reason,
        plan.force,
        [
            (i.id, i.will, i.read_id, i.tools, [(k.key, k.hit, k.state) for k in i.keys])
            for i in plan.items
        ],
    ]
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()
    return digest[:24]


def _each(wanted, found: dict, kind: str, plan) -> list[BulkItem]:
    """An item for each id asked for, in that order: `plan(pk, obj)` for one found in the
    viewer's tenants, "not found" for the others."""
    return [plan(pk, found[pk]) if pk in found else _not_found(pk, kind) for pk in wanted]


def _not_found(pk, kind) -> BulkItem:
    return BulkItem(str(pk), kind, "", str(pk)[:8], "", SKIP, "Not found (or not in your tenants).")


def _plan_actions(operation, wanted, viewer, outcome, reason, now) -> list[BulkItem]:
    found = {
        a.pk: a
        for a in Action.objects.filter(
            pk__in=wanted, tenant_id__in=viewer.tenant_ids
        ).select_related("tool", "claimed_by")
    }
    latest = {}
    for read in (
        Reconciliation.objects.filter(action_id__in=list(found))
        .order_by("action_id", "-at", "-id")
        .distinct("action_id")
    ):
        latest[read.action_id] = read

    def plan(pk, action) -> BulkItem:
        item = BulkItem(
            str(pk),
            "action",
            str(action.tenant_id),
            f"{action.tool.name} → {action.target}",
            action.state,
            SKIP,
            "",
        )
        actor = viewer.actor_for(action.tenant_id)
        if operation == "acknowledge":
            _plan_acknowledge(item, action, actor)
            return item
        if operation == "recheck":
            if refusal := decisions.check_recheck(action, actor=actor):
                item.why = str(refusal)
                return item
            item.will = "recheck"
            item.why = (
                f"Reads the state of {action.target} from {action.tool.name} (side-effect "
                "free); an unknown settles if the read proves it, a needs-human only records "
                "what it saw."
            )
            return item
        read = latest.get(pk)
        if refusal := decisions.check_resolve(
            action, outcome=outcome, reason=reason, actor=actor, latest_read=read, now=now
        ):
            item.why = str(refusal)
            return item
        item.read_id = read.pk if read else None
        item.will = f"resolve_{outcome}"
        on = (
            f"on the read of {timezone.localtime(read.at):%H:%M:%S} ({read.verdict})"
            if read
            else "with no read of the authoritative state (none could be made)"
        )
        item.why = f"Resolves it as {outcome} {on}; the agent waiting on it sees {outcome}."
        return item

    return _each(wanted, found, "action", plan)


def _plan_acknowledge(item: BulkItem, action: Action, actor) -> None:
    """A blocked action leaves the queue when on-call acknowledges it (the reason is the
    note): the rule is `check_acknowledge`'s."""
    if refusal := decisions.check_acknowledge(action, actor=actor):
        item.why = str(refusal)
        return
    item.will = "acknowledge"
    item.why = (
        f"Blocked ({action.get_block_reason_display().lower()}): it leaves the queue, and "
        "stays findable from its run and the audit log."
    )


def _plan_replays(wanted, viewer, *, force, reason) -> list[BulkItem]:
    runs = {
        r.pk: r
        for r in Run.objects.filter(pk__in=wanted, tenant_id__in=viewer.tenant_ids).select_related(
            "tenant"
        )
    }
    actions = {}
    for a in (
        Action.objects.filter(run_id__in=list(runs))
        .select_related("tool")
        .order_by("created_at", "pk")
    ):
        actions.setdefault(a.run_id, []).append(a)
    unsettled = {
        replay_of: (new_run, status)
        for replay_of, new_run, status in Run.objects.filter(
            replay_of_id__in=list(runs), status__in=[RunStatus.PENDING, RunStatus.RUNNING]
        ).values_list("replay_of_id", "pk", "status")
    }
    waiting = {
        r.run_id: r
        for r in ForceReplayRequest.objects.filter(
            run_id__in=list(runs), state=ForceRequestState.PENDING
        )
    }
    live = {}
    for entry in LedgerEntry.objects.filter(
        tenant_id__in={r.tenant_id for r in runs.values()},
        key__in={a.idempotency_key for rows in actions.values() for a in rows},
        revoked_at__isnull=True,
    ):
        live[(entry.tenant_id, entry.key)] = entry
    states = dict(
        Action.objects.filter(pk__in=[e.action_id for e in live.values()]).values_list(
            "pk", "state"
        )
    )

    def plan(pk, run) -> BulkItem:
        rows = actions.get(pk, [])
        gateway = {a.tool.name for a in rows if a.state in GATEWAY_CALLED}
        executed = replay.tools_executed(run, gateway)
        verdict = replay.replay_verdict(run, executed=executed, actions=rows)
        item = BulkItem(
            str(pk),
            "run",
            str(run.tenant_id),
            f"run {str(pk)[:8]}",
            run.status,
            SKIP,
            verdict.message,
            tools=executed,
        )
        seen = set()
        for a in rows:
            # A read (a read_only tool) reserves no key: a replay reads again, harmlessly.
            if a.idempotency_key in seen or a.effect == ToolEffect.READ_ONLY:
                continue
            seen.add(a.idempotency_key)
            entry = live.get((run.tenant_id, a.idempotency_key))
            item.keys.append(
                KeyFate(
                    a.idempotency_key,
                    a.tool.name,
                    a.target,
                    entry is not None,
                    states.get(entry.action_id, "") if entry else "",
                )
            )
        # As the services decide: a replay the verdict allows needs no force (nor a second
        # admin); otherwise a forced one, through four eyes when the tenant asks for them.
        actor = viewer.actor_for(run.tenant_id)
        forced = force and not verdict.allowed
        four_eyes = forced and run.tenant.four_eyes_force_replay
        if four_eyes:
            refusal = replay.check_force_request(
                verdict,
                actor=actor,
                reason=reason,
                unsettled=unsettled.get(pk),
                waiting=waiting.get(pk),
            )
        else:
            refusal = replay.check_replay(
                verdict, actor=actor, force=forced, reason=reason, unsettled=unsettled.get(pk)
            )
        if refusal is not None:
            item.why = str(refusal)
        elif four_eyes:
            item.will = "force_request"
            item.why = (
                f"{verdict.message} Four eyes: the force replay waits until a different admin "
                "confirms it."
            )
        elif forced:
            item.will = "force_replay"
            item.why = f"Forced, with your reason. {verdict.message}"
        else:
            item.will = "replay"
        return item

    return _each(wanted, runs, "run", plan)


def bulk_apply(*, viewer, signature: str, **plan_args) -> tuple[BulkPlan, list]:
    """Do what the plan with this `signature` said, item by item, each as the viewer with
    the roles of the item's tenant (the services check them again); refuse (StaleRead) when
    the plan is no longer that one. Returns (plan, [BulkResult])."""
    plan = bulk_plan(viewer=viewer, **plan_args)
    if plan.signature != signature:
        raise StaleRead(
            "The selection changed since the preview (an item settled, was claimed or read "
            "again): nothing was done. Look at the new preview, then confirm it.",
            plan=plan.as_dict(),
        )
    results = []
    for item in plan.items:
        actor = viewer.actor_for(uuid.UUID(item.tenant_id)) if item.tenant_id else viewer.actor
        results.append(_apply_one(plan, item, actor))
    by_tenant = {}
    for r in results:
        if r.item.tenant_id:
            by_tenant.setdefault(r.item.tenant_id, []).append(r)
    batch = uuid.uuid4()
    with transaction.atomic():
        for tenant_id, rows in by_tenant.items():
            audit(
                actor=viewer.actor_for(uuid.UUID(tenant_id)),
                verb=Verb.BULK_APPLY,
                obj=_Batch(batch, tenant_id),
                object_type="bulk",
                after={
                    "batch": str(batch),
                    "operation": plan.operation,
                    "outcome": plan.outcome or None,
                    "force": plan.force,
                    "signature": plan.signature,
                    "items": [{"id": r.item.id, "will": r.item.will, "did": r.did} for r in rows],
                },
                reason=plan.reason,
            )
    return plan, results


@dataclass
class _Batch:
    """What the audit event of a batch is about: the batch, in one tenant."""

    pk: uuid.UUID
    tenant_id: str


def _apply_one(plan: BulkPlan, item: BulkItem, actor: Actor) -> BulkResult:
    if not item.acts:
        return BulkResult(item, SKIP, item.why)
    try:
        if item.kind == "action":
            action = Action.objects.get(pk=item.id)
            if item.will == "acknowledge":
                decisions.action_acknowledge(action, note=plan.reason, actor=actor)
                return BulkResult(item, "acknowledge", "acknowledged: it left the queue")
            if item.will == "recheck":
                action = decisions.action_recheck(action.pk, actor=actor)
                read = action.reconciliations.order_by("-at", "-id").first()
                seen = read.get_verdict_display().lower() if read else "no read"
                now = action.get_state_display().lower()
                return BulkResult(item, "recheck", f"Read: {seen}. The action is now {now}.")
            decisions.action_resolve(
                action,
                outcome=plan.outcome,
                reason=plan.reason,
                actor=actor,
                based_on_read=item.read_id,
            )
            return BulkResult(item, item.will, f"resolved as {plan.outcome}")
        run = Run.objects.get(pk=item.id)
        if item.will == "replay":
            new_run = replay.run_replay(run, force=False, reason="", actor=actor)
            return BulkResult(item, "replay", "replay created", str(new_run.pk))
        new_run, waiting = replay.run_force_replay(run, reason=plan.reason, actor=actor)
        if waiting is not None:
            return BulkResult(item, "force_request", "waits for a second admin")
        return BulkResult(item, "force_replay", "forced replay created", str(new_run.pk))
    except DomainError as exc:
        return BulkResult(item, "refused", exc.detail)

"""The demo agent itself (`demo.agent`): start runs, propose each step through
`takeover_client`, settle, report, and leave a few things for a person."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter, deque
from datetime import UTC, datetime

from takeover_client import (
    ApiError,
    IdempotencyConflict,
    OutcomeError,
    Pending,
    RunNotRunning,
    Takeover,
    Unavailable,
)

from .plans import NOTES, OPENING, RULES, RunState, Script, Step, new_event, plan
from .world import (
    CUSTOMERS,
    DOMAINS,
    IN_PROGRESS,
    MAX_AWAITING_APPROVAL,
    MAX_BLOCKED_PER_10_MIN,
    MAX_NEEDS_HUMAN,
    PEOPLE,
    SETTLE_SECONDS,
    TERMINAL,
    TICKETS,
    WAIT_SECONDS,
    Stopped,
    World,
    log,
    short,
)

# The scenarios whose trigger is a plain webhook: the event each one's source sends.
WEBHOOKS = {
    "ticket_triage": lambda: new_event(
        "evt", "ticket.created", ticket=random.choice(TICKETS), customer=random.choice(CUSTOMERS)
    ),
    "escalation": lambda: new_event(
        "evt",
        "customer.escalated",
        customer=random.choice(CUSTOMERS),
        tickets=random.sample(TICKETS, random.randint(2, 4)),
    ),
}


class Agent:
    def __init__(self, client: Takeover, world: World, stop: threading.Event) -> None:
        self.client = client
        self.world = world
        self.stop = stop
        self.tracked: dict[str, dict] = {}  # id → last view, for actions left to a person
        self.blocked_at: deque[float] = deque()
        self.consumed_approvals: deque[str] = deque(maxlen=5)
        self.last_campaign: dict | None = None
        self.last_refresh = 0.0
        self.runs = 0
        self.outcomes: Counter[str] = Counter()

    # the main loop

    def loop(self) -> None:
        log("demo agent started: one run every few seconds; replays are claimed as they come")
        self.world.seed_tickets()
        backoff = 1.0
        while not self.stop.is_set():
            try:
                self.refresh_tracked()
                run = self.client.claim()
                if run is not None:
                    log(
                        f"run {short(run.id)} claimed: a replay of {short(run.replay_of)} "
                        f"({run.config.get('scenario')}, attempt {run.data.attempts})"
                    )
                    self.execute(RunState(run, replay=True))
                else:
                    self.start_new()
                backoff = 1.0
                self.stop.wait(random.uniform(2, 4))
            except Unavailable as exc:
                log(f"Takeover unavailable ({exc}); backing off {backoff:.0f} s")
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 30)
            except Stopped:
                break

    def start_new(self) -> None:
        scenario, script = OPENING[self.runs] if self.runs < len(OPENING) else (None, Script())
        trigger, config = self.new_config(scenario, script)
        try:
            run = self.client.start_run(trigger, config)
        except ApiError as exc:
            log(f"could not start a run: {exc}")
            return
        self.runs += 1
        log(f"run {short(run.id)} started: {trigger} {config['scenario']}")
        self.execute(RunState(run, replay=False, script=script))
        if self.runs % 25 == 0:
            summary = ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common())
            log(f"{self.runs} runs so far; actions: {summary}")

    def new_config(self, scenario: str | None, script: Script) -> tuple[str, dict]:
        awaiting, _ = self.open_counts()
        weights = {
            "ticket_triage": 30,
            "escalation": 15,
            "resolve": 15 if awaiting < MAX_AWAITING_APPROVAL else 0,
            "guarded_update": 15,
            "campaign": 15,
            "weekly_report": 5,
        }
        scenario = scenario or random.choices(list(weights), list(weights.values()))[0]
        if scenario in WEBHOOKS:
            return "webhook", {"scenario": scenario, "event": WEBHOOKS[scenario]()}
        if scenario == "resolve":
            event = new_event(
                "msg",
                "chat.message",
                ticket=random.choice(TICKETS),
                text="The customer confirms the fix works. Please close the ticket.",
            )
            if script.bogus_approval or (
                script.faults is None and random.random() < 0.2 and self.may_block()
            ):
                # The operator pasted an approval id in the chat: an old one (consumed, for
                # another intent) or a mistyped one. Either way Takeover blocks the close.
                reused = self.consumed_approvals[-1] if self.consumed_approvals else None
                event["approval_id"] = reused or str(uuid.uuid4())
            return "chat", {"scenario": scenario, "event": event}
        if scenario == "guarded_update":
            event = new_event("wf", "sla.breach", ticket=random.choice(TICKETS))
            return "workflow", {"scenario": scenario, "event": event}
        if scenario == "campaign":
            if self.last_campaign is not None and (
                script.double_fire or (script.faults is None and random.random() < 0.05)
            ):
                # The scheduler delivered the same slot twice (at-least-once delivery).
                config, self.last_campaign = self.last_campaign, None
                return "schedule", config
            slot = datetime.now(UTC).replace(microsecond=0)
            # The time bucket comes from the trigger (the slot the schedule fired for); a
            # second firing for the same slot yields the same campaign id, hence the same keys.
            campaign_id = f"cmp_renewal_{slot:%Y%m%dT%H%M%S}"
            rng = random.Random(campaign_id)
            recipients = sorted(
                {f"{rng.choice(PEOPLE)}@{rng.choice(DOMAINS)}" for _ in range(rng.randint(4, 8))}
            )
            config = {
                "scenario": scenario,
                "campaign": {
                    "id": campaign_id,
                    "name": "renewal-reminder",
                    "scheduled_for": slot.isoformat(),
                },
                "recipients": recipients,
            }
            self.last_campaign = config
            return "schedule", config
        event = new_event("req", "weekly.report", ticket=random.choice(TICKETS))
        return "api", {"scenario": scenario, "event": event}

    # one run

    def execute(self, state: RunState) -> None:
        steps = plan(state.run.config)
        scenario = state.run.config.get("scenario")
        try:
            if scenario == "weekly_report" and not state.replay:
                self.finish(
                    state,
                    "error",
                    "The LLM provider answered 529 (overloaded) before any tool was called.",
                    tools_called=[],
                )
                return
            crash_after = state.script.crash_after
            if state.replay or crash_after is not None or state.script.faults is not None:
                pass
            elif scenario == "campaign" and random.random() < 0.35:
                crash_after = random.randint(1, max(1, len(steps) - 1))
            elif steps and random.random() < 0.03:
                crash_after = random.randint(0, len(steps) - 1)
            for index, step in enumerate(steps):
                if crash_after is not None and index == crash_after:
                    self.crash(state, index, len(steps))
                    return
                self.do_step(state, step, index)
                self.check_stop()
                state.run.heartbeat()
            failed = [a for a in state.proposed if a["state"] == "failed"]
            if failed:
                first = failed[0]
                self.finish(
                    state,
                    "error",
                    f"{first['tool']} on {first['target']} failed ({first['failure_reason']}).",
                    tools_called=state.tools_called(),
                )
            else:
                self.finish(state, "success", "", tools_called=state.tools_called())
        except RunGone as exc:
            log(f"run {short(state.id)}: {exc}")
        except Stopped:
            self.finish(
                state,
                "cancelled",
                "The agent was stopped (SIGTERM).",
                tools_called=state.tools_called(),
                unstoppable=True,
            )
            raise

    def crash(self, state: RunState, done: int, total: int) -> None:
        how = state.script.crash or random.choices(["error", "unknown", "silent"], [6, 2, 2])[0]
        what = f"after {done} of {total} side effects"
        if how == "error":
            self.finish(
                state, "error", f"Worker OOM-killed {what}.", tools_called=state.tools_called()
            )
        elif how == "unknown":
            # The runtime lost its own session: it cannot say which tools it called.
            self.finish(
                state, "error", f"Session store lost {what}; tool calls unknown.", tools_called=None
            )
        else:
            log(
                f"run {short(state.id)} crashed {what} without a word (no finish): it stays "
                "running until the stale-run reaper gives up on it"
            )

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise Stopped

    def finish(self, state, status, message, *, tools_called, unstoppable=False) -> None:
        # The demo reports tools_called itself (it knows which proposals it made), rather
        # than `with run:`, because some of its runs "crash" on purpose without finishing.
        try:
            data = state.run.finish(status, message, tools_called=tools_called)
        except Unavailable:
            return
        except ApiError as exc:
            if exc.status != 409:  # 409: already finished, e.g. reaped
                log(f"run {short(state.id)}: finish answered {exc}")
            return
        extra = f": {message}" if message else ""
        executed = data.tools_executed
        log(f"run {short(state.id)} finished {status}{extra} (tools_executed {executed})")

    # one proposal

    def do_step(self, state: RunState, step: Step, index: int) -> None:
        expected_version = None
        if step.expected_version_from_read:
            # A real agent reads the record it is about to change from the system of record.
            read = self.world.read(step.prefix, step.target)
            expected_version = read[1] if read else 0
        script = state.script
        if state.replay:
            fault = None
        elif script.faults is not None:
            fault = script.faults[index] if index < len(script.faults) else None
        else:
            fault = self.choose_fault(step)
        note = NOTES.get(fault, "")
        before = self.inject(step, fault)
        first = self.propose(state, step, expected_version)
        if first is not None and not first["replayed"] and fault == "slow_then_external":
            self.interfere_while_in_flight(step, before, first["desired_state"])
        retried = None
        if script.faults is None:
            lose = random.random() < 0.1 and step.prefix != "search"
        else:
            lose = script.retry_first and index == 0
        if first is not None and not first["replayed"] and lose:
            # The response "got lost" and the runtime retries with the same key.
            retried = self.propose(state, step, expected_version)
        final = self.settle(first) if first is not None else None
        if fault in RULES:
            # A ledger hit, a block or a wait for approval dispatches nothing: a rule left
            # pending would fire on some later, unrelated action.
            self.world.clear_faults()
        if final is None:
            return
        state.proposed.append(final)
        self.report(step, final, first=first, retried=retried, fault=fault, note=note)

    def inject(self, step: Step, fault: str | None) -> int | None:
        """Set the world up for `fault`; for the in-flight interference, return the target's
        mutation count before the proposal."""
        if fault == "external_write_first":
            self.world.external_write(step.prefix, step.target, {"note": "edited by a colleague"})
        elif fault == "slow_then_external":
            self.world.fault("slow_after_commit", step.prefix, step.target, seconds=6)
            return self.world.mutations(step.prefix, step.target)
        elif fault == "refuse":
            # Immediate: the port closes now and reopens in half a second.
            self.world.fault("refuse", seconds=0.5)
        elif fault == "slow_after_commit":
            self.world.fault(fault, step.prefix, step.target, seconds=6)
        elif fault:
            self.world.fault(fault, step.prefix, step.target)
        return None

    def propose(self, state, step, expected_version) -> dict | None:
        self.check_stop()
        # Safe to repeat on a lost answer: same key, same intent, so at worst the repeat is
        # answered from the ledger (the client itself only retries what cannot double-send).
        try:
            outcome = state.run.propose(
                step.tool,
                step.target,
                step.desired_state(),
                key=step.key,
                expected_version=expected_version,
                approval_id=step.approval_id,
            )
        except RunNotRunning as exc:
            raise RunGone("the run is no longer running (finished or reaped elsewhere)") from exc
        except IdempotencyConflict:
            log(
                f"  {step.tool} {step.target}: 422 idempotency-conflict for key {step.key}: "
                "the same key was used for a different intent (the world moved since); "
                "nothing created"
            )
            return None
        except ApiError as exc:
            log(f"  {step.tool} {step.target}: {exc}")
            return None
        return {
            **outcome.action.to_dict(),
            "replayed": outcome.replayed,
            "content_changed": outcome.content_changed,
        }

    def interfere_while_in_flight(self, step: Step, before: int, desired: dict) -> None:
        """The tool committed and is slow to answer; the customer changes the ticket now, so
        that one of the fields this action set no longer holds what it set."""
        field_name = next(iter(desired))
        other = {"status": "reopened", "priority": "low", "assignee": "frank"}.get(
            field_name, "edited"
        )
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and not self.stop.is_set():
            count = self.world.mutations(step.prefix, step.target)
            if count is not None and count > before:
                self.world.external_write(
                    step.prefix, step.target, {field_name: other, "note": "customer replied"}
                )
                return
            time.sleep(0.1)

    def settle(self, action: dict) -> dict:
        """Wait for the outcome in short slices (so that SIGTERM is honoured quickly). The
        typed outcomes (Blocked, Failed, NeedsHuman) are all states the demo wants to show,
        so it reads the action from them rather than treating them as errors."""
        outcome = self.client.outcome(action["id"]) if action["state"] in IN_PROGRESS else None
        deadline = time.monotonic() + SETTLE_SECONDS
        while outcome is not None and time.monotonic() < deadline:
            self.check_stop()
            try:
                return outcome.wait(WAIT_SECONDS).action.to_dict()
            except Pending as exc:
                if exc.state == "awaiting_approval":
                    return exc.action.to_dict()  # a person decides; tracked below
            except OutcomeError as exc:
                return exc.action.to_dict()
        return outcome.action.to_dict() if outcome is not None else action

    def report(self, step, action, *, first, retried, fault, note) -> None:
        state = action["state"]
        self.outcomes[state] += 1
        head = f"  {step.tool} {step.target}:"
        if first["replayed"]:
            changed = ", content_changed: true" if first["content_changed"] else ""
            log(
                f"{head} key {step.key} is already in the ledger → replayed: true{changed}; "
                f"nothing sent again (the action is {state})"
            )
            return
        parts = [head, state]
        if action.get("resolution"):
            parts.append(f"({action['resolution']})")
        for name in ("failure_reason", "block_reason"):
            if action.get(name):
                parts.append(f"({action[name]})")
        attempts = action.get("attempts", [])
        resends = [a for a in attempts if a.get("kind") == "resend"]
        if resends:
            parts.append(
                f"after {len(attempts)} attempts (resent with the same key: the tool is "
                f"declared {resends[-1]['declaration']['effect']})"
            )
        elif len(attempts) > 1:
            parts.append(f"after {len(attempts)} attempts")
        lookups = [r for r in action.get("reconciliations") or [] if r.get("kind") == "lookup"]
        if lookups and lookups[-1]["verdict"] == "lookup_applied":
            parts.append("— settled by the tool's lookup: it reports it applied the key")
        elif lookups and lookups[0]["verdict"] == "lookup_not_found":
            parts.append("— the tool's lookup said it never received the key")
        if fault:
            parts.append(f"[world: {note or fault.replace('_', ' ')}]")
        if state == "needs_human":
            last = (action.get("reconciliations") or [{}])[-1]
            diff = ", ".join(
                f"{d['field']}: wanted {d['desired']!r}, found {d['actual']!r}"
                for d in last.get("diff") or []
            )
            parts.append(f"— verdict {last.get('verdict')}{': ' + diff if diff else ''}")
        if state == "awaiting_approval":
            request = short(action["approval_request_id"] or "")
            parts.append(f"— approve or deny it in the console (request {request})")
        log(" ".join(parts))
        if retried is not None:
            changed = ", content_changed: true" if retried["content_changed"] else ""
            log(
                f"{head} its response was 'lost'; the retry with the same key got "
                f"replayed: {str(retried['replayed']).lower()}{changed}"
            )
        if state in {"awaiting_approval", "needs_human", "unknown"}:
            self.tracked[action["id"]] = action
        if state == "blocked":
            self.blocked_at.append(time.monotonic())

    # faults, bounded

    def choose_fault(self, step: Step) -> str | None:
        """About a third of the proposals meet a fault; the ones that need a person only
        while fewer than MAX_NEEDS_HUMAN are waiting."""
        if step.tool in {"close_ticket", "search_tickets"}:
            return None
        if step.expected_version_from_read:
            return "external_write_first" if random.random() < 0.45 else None
        if random.random() > 0.35:
            return None
        settles = ["drop_after_commit", "error_after_commit", "slow_after_commit", "reject"]
        settles.append("refuse")
        _, needs_human = self.open_counts()
        if step.tool == "update_ticket" and needs_human < MAX_NEEDS_HUMAN:
            return random.choice([*settles, "error_before_commit", "slow_then_external"])
        if step.tool == "send_email":
            # The outbox never needs a person for these: its lookup tells "applied" from
            # "never received", and what it never received is sent again with the same key.
            return random.choice([*settles, "error_before_commit"])
        return random.choice(settles)

    def may_block(self) -> bool:
        cutoff = time.monotonic() - 600
        while self.blocked_at and self.blocked_at[0] < cutoff:
            self.blocked_at.popleft()
        return len(self.blocked_at) < MAX_BLOCKED_PER_10_MIN

    def open_counts(self) -> tuple[int, int]:
        states = Counter(a["state"] for a in self.tracked.values())
        return states["awaiting_approval"], states["needs_human"] + states["unknown"]

    def refresh_tracked(self) -> None:
        """Re-read the actions left to a person: a grant, a deny or a resolution frees a slot."""
        if time.monotonic() - self.last_refresh < 15 or not self.tracked:
            return
        self.last_refresh = time.monotonic()
        for action_id, old in list(self.tracked.items()):
            try:
                new = self.client.outcome(action_id).action.to_dict()
            except ApiError as exc:
                if exc.status == 404:
                    self.tracked.pop(action_id)
                continue
            if new["state"] != old["state"]:
                how = new.get("resolution") or new.get("block_reason") or new.get("failure_reason")
                log(
                    f"  {new['tool']} {new['target']} ({short(action_id)}): "
                    f"{old['state']} → {new['state']}{f' ({how})' if how else ''}"
                )
                if (
                    new["tool"] == "close_ticket"
                    and new.get("approval_id")
                    and new["state"] in {"succeeded", "failed", "dispatching", "unknown"}
                ):
                    self.consumed_approvals.append(new["approval_id"])
            if new["state"] in TERMINAL:
                self.tracked.pop(action_id)
            else:
                self.tracked[action_id] = new


class RunGone(Exception):
    pass

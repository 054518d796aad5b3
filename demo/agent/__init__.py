"""The demo agent: what a real agent runtime does, through ``takeover_client`` and nothing else.

    python -m demo.agent --url http://127.0.0.1:8000 --token-file var/demo-agent.token

No Django, no database: the ``takeover_client`` package (``client/``), the living example of
it, with the principal's bearer token: ``start_run``/``claim``, ``run.propose`` with keys from
``idempotency_key``, ``outcome.wait`` and its typed outcomes, heartbeats, ``run.finish``. The
only other thing it talks to is the demo downstream's ``/_control`` API, and only to play
*the rest of the world*: a network that drops a response, a tool that times out after
committing, a colleague who edits the ticket at the same moment. A real runtime has no such
lever; the demo needs it so that a newcomer sees, within a minute, every state of the
lifecycle (docs/design.md, "The action lifecycle") in the console.

About every 3 seconds it either claims a replayed run (``POST /runs/claim``) or starts a new
one, whose ``config`` is the whole input: the trigger event, from which the plan of side
effects is derived deterministically (a ``random.Random`` seeded with the event id). Only
generated text (an e-mail's subject and body, a resolution note) is random each time. The
first nine runs are a fixed tour (``OPENING``) through every outcome; after that the
scenarios and faults are drawn at random.

Scenarios (``config["scenario"]``):

``ticket_triage`` (webhook ``ticket.created``)
    ``update_ticket`` sets status, priority and assignee, then ``search_tickets`` (declared
    ``read_only``: no key needed, no approval, never at risk in a replay) looks for the other
    open tickets.
``escalation`` (webhook ``customer.escalated``)
    ``update_ticket`` on 2–4 tickets of one customer.
``resolve`` (chat)
    ``update_ticket`` to ``solved``, then ``close_ticket``, which requires approval: the action
    waits in the approvals page. Sometimes the chat message carries an approval id (an old,
    already consumed one, or one that does not exist): the action is ``blocked``.
``guarded_update`` (workflow ``sla.breach``)
    Reads the ticket from the system of record and proposes with ``expected_version``; when a
    colleague edits the ticket in between, the tool answers 409 → ``version_conflict``.
``campaign`` (schedule)
    ``send_email`` to 4–8 recipients. The outbox is declared ``idempotent`` with ``lookup``:
    an e-mail whose answer was lost is settled by asking the outbox about its key, and one the
    outbox never received is sent again with the same key. The campaign id comes from the
    schedule's slot (the trigger), never from the clock at send time. Some campaign runs die
    part-way (an error with ``tools_called: ["send_email"]``, or ``null``, or no finish at
    all); since every e-mail went through Takeover under a stable key to a tool that applies
    a key once, the replay needs no force (unless the runtime could not say what it called),
    and shows the ledger at work: the recipients already sent come back ``replayed: true``,
    ``content_changed: true`` (the text was regenerated), and only the rest are sent.
    Sometimes the scheduler fires the same slot twice: every e-mail comes back replayed.
``weekly_report`` (api)
    Fails before calling any tool (``tools_called: []``): a replay needs no force.

Idempotency-Keys come from stable intent, never from generated text or the clock:
``f"{event_id}:{tool}:{normalized target}"``. So a retry after a lost response, a duplicate
delivery of the trigger, or a replay of the whole run proposes the *same* keys, and Takeover
answers with the existing action instead of a second effect.

Faults (fresh runs only; replays run clean): before about a third of the proposals the agent
asks the downstream for one of ``drop_after_commit`` / ``error_after_commit`` /
``slow_after_commit`` (→ unknown → reconciled to succeeded; for an e-mail, settled by the
outbox's lookup), ``reject`` (→ failed), ``refuse`` for half a second (→ not sent, then the
one safe retry), ``error_before_commit`` (nothing applied → for a ticket, needs_human with a
diff, or ``missing``; for an e-mail, the lookup says "never received" and the e-mail is sent
again, attempt 2, same key), or ``slow_after_commit`` plus an external write while the tool is
still answering (→ needs_human with a diff).

Bounded on purpose: at most a handful of actions are left waiting for a person (approvals,
needs_human, blocked) at any time; past that the agent picks faults that settle by
themselves. The client retries what is safe (a 503 with Retry-After, a refused connection);
when Takeover stays unavailable the agent backs off and carries on. SIGTERM or SIGINT: the current
run is finished as ``cancelled`` and the agent exits 0. An invalid token exits 2.
"""

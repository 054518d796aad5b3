"""The action engine: the database is the queue, and a woken worker works it.

- `protocol`: the tool protocol (POST the effect, GET the state, GET a key's record, judge).
- `leases`: taking due rows (queued actions, unknowns due a read) and taking back the
  leases of a worker that died.
- `dispatch`: call a leased action's tool and settle it; the one safe retry.
- `reconcile`: an unknown outcome: lookup, then a resend by declaration, then read and judge.
- `worker`: the thread pool and the drain loop.

The engine changes state only through `runs.moves`, and never imports a person's decisions,
replay or proposing (tests/takeover/test_architecture.py holds that).
"""

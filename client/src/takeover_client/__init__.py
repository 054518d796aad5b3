"""takeover-client: Takeover's HTTP API v1 for agent runtimes and operators.

from takeover_client import Takeover, idempotency_key

client = Takeover("http://127.0.0.1:8000", token)
with client.start_run("webhook", {"ticket": "T-1"}, event_id="evt_1") as run:
    outcome = run.propose("update_ticket", "T-1", {"status": "open"})
    outcome.wait(30)      # or: Blocked, Failed/Conflict, NeedsHuman, Pending, Unavailable
client.api.queue_list(state="unknown")   # every operation of the API, typed (models)

Modules: `models` and `api` (generated from the OpenAPI schema), `guard`, `langchain` and
`openai_agents` (framework adapters), `testing` (an in-memory fake for agent tests), `tool`
and `verifier` (for tool authors), `signing` (the Takeover-Signature scheme), `cli`.
"""

from . import models
from ._core import RetryEvent, current_run
from ._model import UNSET
from .aio import AsyncOutcome, AsyncRun, AsyncTakeover
from .client import Outcome, Run, Takeover
from .errors import (
    ApiError,
    Blocked,
    Conflict,
    Failed,
    IdempotencyConflict,
    InputGone,
    NeedsHuman,
    NotFound,
    OutcomeError,
    PayloadTooLarge,
    Pending,
    PermissionDenied,
    ReplayRefused,
    RunNotRunning,
    StateConflict,
    TakeoverError,
    Unauthenticated,
    Unavailable,
    ValidationError,
)
from .guard import guard
from .keys import idempotency_key, normalize_target

__all__ = [
    "UNSET",
    "ApiError",
    "AsyncOutcome",
    "AsyncRun",
    "AsyncTakeover",
    "Blocked",
    "Conflict",
    "Failed",
    "IdempotencyConflict",
    "InputGone",
    "NeedsHuman",
    "NotFound",
    "Outcome",
    "OutcomeError",
    "PayloadTooLarge",
    "Pending",
    "PermissionDenied",
    "ReplayRefused",
    "RetryEvent",
    "Run",
    "RunNotRunning",
    "StateConflict",
    "Takeover",
    "TakeoverError",
    "Unauthenticated",
    "Unavailable",
    "ValidationError",
    "current_run",
    "guard",
    "idempotency_key",
    "models",
    "normalize_target",
]
